"""Where FleetMind finds its files: the repository, released models, and the shared datasets."""

from __future__ import annotations

import os
from pathlib import Path

from data.errors import DataError

REPO_ROOT = Path(__file__).resolve().parents[1]
"""Root of the source checkout (the folder holding ``pyproject.toml``)."""

MODELS_DIR = REPO_ROOT / "models"
"""Released model artifacts and their model cards."""


def shared_data_dir() -> Path:
    """Return the shared dataset folder (``../shared/data`` beside the checkout).

    ``FLEETMIND_SHARED_DATA`` overrides the location.

    Raises:
        DataError: if the folder does not exist.
    """
    env = os.environ.get("FLEETMIND_SHARED_DATA")
    path = Path(env) if env else REPO_ROOT.parent / "shared" / "data"
    if not path.is_dir():
        raise DataError(
            f"shared data folder not found at {path}; set FLEETMIND_SHARED_DATA to the folder that "
            "holds openb/ and petshop/"
        )
    return path


def openb_csv_dir() -> Path:
    """Folder with the openb CSV files (node lists and pod traces)."""
    return shared_data_dir() / "openb" / "csv"
