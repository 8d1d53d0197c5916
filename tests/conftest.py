"""Suite-wide settings: no MLflow telemetry, seeded randomness, and the shared data location."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("TQDM_DISABLE", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402  - a declared dependency; imported once for every test

from fleetmind.data.paths import REPO_ROOT  # noqa: E402

if TYPE_CHECKING:
    from serving_helpers import PgCluster


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


@pytest.fixture(scope="module")
def pg() -> Iterator[PgCluster]:
    """A throw-away PostgreSQL cluster for one test module (skips without the Debian package);
    a module that needs other server settings defines its own ``pg``."""
    from serving_helpers import PgCluster, pg_bindir

    bindir = pg_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL binaries not installed (Debian package postgresql)")
    cluster = PgCluster(bindir).start()
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database URL, once of a SQLite file under ``tmp_path`` and once of an emptied schema of
    the module's :func:`pg` cluster (created only for that parameter)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/fleetmind.db"
    cluster: PgCluster = request.getfixturevalue("pg")
    cluster.psql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    return cluster.url


@pytest.fixture
def migrated_db(db_url: str) -> Iterator[Any]:
    """A :class:`fleetmind.serving.db.Database` at the head revision on :func:`db_url` (SQLite,
    then PostgreSQL)."""
    from fleetmind.serving.db import Database

    db = Database(db_url)
    db.migrate()
    yield db
    db.dispose()


@pytest.fixture
def http_dir(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A local HTTP server (Python's http.server) over a fixture folder: (base URL, folder)."""
    from fetch_helpers import serve_folder

    root = tmp_path / "www"
    root.mkdir()
    with serve_folder(root) as url:
        yield url, root


@pytest.fixture
def repo_root():
    return REPO_ROOT


@pytest.fixture
def rca_fit_folder(tmp_path: Path) -> Path:
    """A tiny model in the folder format ``fleetmind rca fit`` writes, fitted on the services
    ``a b c`` (untrained weights, seeded: for how the service loads and scores such a folder, not
    how well it ranks)."""
    from fleetmind.data.graph import DependencyGraph, GraphNode
    from fleetmind.rca.fit_model import NUM_FIT_FEATURES, save_fit_artifact
    from fleetmind.rca.model import GATConfig, GATRanker

    torch.manual_seed(0)
    cfg = GATConfig(
        in_dim=NUM_FIT_FEATURES, hidden=8, heads=1, layers=2, fault_types=[], crop_hops=None
    )
    g = DependencyGraph("mysys", [GraphNode(id=n, kind="service") for n in "abc"], [])
    observed = np.zeros((3, 5), dtype=bool)
    return save_fit_artifact(GATRanker(cfg), tmp_path / "fit", g, observed, {"roles": {}})
