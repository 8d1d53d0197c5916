"""Suite-wide settings: no MLflow telemetry, seeded randomness, and the shared data location."""

from __future__ import annotations

import os
import random

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("TQDM_DISABLE", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402  - a declared dependency; imported once for every test

from fleetmind.data.paths import REPO_ROOT  # noqa: E402


@pytest.fixture(autouse=True)
def _seed_everything() -> None:
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def shared_data() -> os.PathLike[str]:
    """The dataset folder (``fleetmind.data.paths.shared_data_dir``); skips when it is absent."""
    from fleetmind.data.errors import DataError
    from fleetmind.data.paths import shared_data_dir

    try:
        return shared_data_dir()
    except DataError as err:
        pytest.skip(str(err))


@pytest.fixture
def repo_root():
    return REPO_ROOT
