"""Where FleetMind finds its files: the released models, the source checkout, and the shared datasets."""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

from fleetmind.data.errors import DataError

MODELS_DIR = Path(str(files("fleetmind.models")))
"""Released model artifacts and their model cards, shipped as package data (``fleetmind.models``).

In a source checkout this is the ``models/`` folder; in an installed wheel it lies in site-packages.
"""

REPO_ROOT = Path(__file__).resolve().parents[1]
"""Root of the source checkout (the folder holding ``pyproject.toml``). Only meaningful in a checkout:
tests, benchmarks and notebooks use it; library code that must work from a wheel does not."""


def shared_data_dir() -> Path:
    """Return the folder that holds the public datasets (``openb/`` and ``petshop/``).

    ``FLEETMIND_SHARED_DATA`` names it; without it, a ``shared/data`` folder beside a source checkout
    is used when there is one. ``docs/data.md`` says where to get the data.

    Raises:
        DataError: if the folder does not exist.
    """
    env = os.environ.get("FLEETMIND_SHARED_DATA")
    path = Path(env) if env else REPO_ROOT.parent / "shared" / "data"
    if not path.is_dir():
        raise DataError(
            f"dataset folder not found at {path}; set FLEETMIND_SHARED_DATA to the folder that "
            "holds openb/ and petshop/ (docs/data.md says where to get them)"
        )
    return path


def openb_csv_dir() -> Path:
    """Folder with the openb CSV files (node lists and pod traces)."""
    return shared_data_dir() / "openb" / "csv"
