"""Where FleetMind finds its files: the released models, the source checkout, and the shared datasets."""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

from fleetmind.data.errors import ConfigError, DataError
from fleetmind.data.openb_synthetic import synthetic_openb_dir

MODELS_DIR = Path(str(files("fleetmind.models")))
"""Released model artifacts and their model cards, shipped as package data (``fleetmind.models``).

In a source checkout this is the ``models/`` folder; in an installed wheel it lies in site-packages.
"""

REPO_ROOT = Path(__file__).resolve().parents[1]
"""Root of the source checkout (the folder holding ``pyproject.toml``). Only meaningful in a checkout:
tests, benchmarks and notebooks use it; library code that must work from a wheel does not."""


def is_source_checkout() -> bool:
    """Whether FleetMind runs from its source checkout (not from an installed wheel).

    True when :data:`REPO_ROOT` holds FleetMind's ``pyproject.toml`` (an installed wheel's
    ``REPO_ROOT`` is ``site-packages/fleetmind``, which has none), so commands that would write into
    the installed package (``--release``, ``rca calibrate --write``) refuse there.
    """
    try:
        text = (REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return False
    return 'name = "fleetmind"' in text


def refuse_write_into_installed_package(folder: Path, flag: str, instead: str) -> None:
    """Refuse a command that would write ``folder`` inside the installed package.

    In a source checkout the released models under ``models/`` are the project's files and
    ``--release`` or ``rca calibrate --write`` update them; in a pip install they lie in
    site-packages, where a write would change the installed package behind pip's back.

    Args:
        folder: the folder the command would write.
        flag: the option that asks for the write (``--release``, ``--write``), for the message.
        instead: what to do instead, for the message.

    Raises:
        ConfigError: when FleetMind is not a source checkout and ``folder`` lies under
            :data:`MODELS_DIR`.
    """
    if is_source_checkout():
        return
    target, models = Path(folder).resolve(), MODELS_DIR.resolve()
    if target == models or models in target.parents:
        raise ConfigError(f"{flag} would write into the installed package ({target}); {instead}")


FETCH_DEFAULT_DIR = "fleetmind-data"
"""Folder (relative to the working directory) that ``fleetmind data fetch`` fills without
``--dest`` or ``FLEETMIND_SHARED_DATA``; :func:`shared_data_dir` looks there too."""


def shared_data_candidates() -> list[Path]:
    """The folders :func:`shared_data_dir` tries, in order.

    ``FLEETMIND_SHARED_DATA`` alone when it is set; else ``shared/data`` beside a source checkout
    (in a checkout only), then ``./fleetmind-data`` (:data:`FETCH_DEFAULT_DIR`, where ``fleetmind data
    fetch`` puts the data by default).
    """
    env = os.environ.get("FLEETMIND_SHARED_DATA")
    if env:
        return [Path(env)]
    found = [REPO_ROOT.parent / "shared" / "data"] if is_source_checkout() else []
    return [*found, Path.cwd() / FETCH_DEFAULT_DIR]


def _holds(folder: Path, dataset: str) -> bool:
    """Whether the dataset folder ``folder`` holds ``dataset``: for ``openb``, an ``openb/csv``
    folder with :data:`OPENB_REQUIRED_FILES` (a partly fetched one does not count); for any other
    dataset (``petshop``, ``nezha_tt``), a ``<dataset>/`` folder."""
    if dataset == "openb":
        csv = folder / "openb" / "csv"
        return all((csv / name).is_file() for name in OPENB_REQUIRED_FILES)
    return (folder / dataset).is_dir()


def shared_data_dir(dataset: str | None = None) -> Path:
    """Return the folder that holds the public datasets (``openb/`` and ``petshop/``).

    ``FLEETMIND_SHARED_DATA`` names it; without it, a ``shared/data`` folder beside a source checkout
    and ``./fleetmind-data`` (the ``fleetmind data fetch`` default) are tried in that order (see
    :func:`shared_data_candidates`). ``docs/data.md`` says where to get the data.

    Args:
        dataset: the dataset the caller reads (``openb``, ``petshop``, ``nezha_tt``): the first
            candidate folder that holds it is returned, so a dataset fetched into
            ``./fleetmind-data`` is found even when ``shared/data`` exists without it. When no
            candidate holds it, or for ``None``, the first candidate folder that exists (the
            reader then names the file it misses).

    Raises:
        DataError: if none of those folders exists (the message names every folder tried).
    """
    tried = shared_data_candidates()
    found = [path for path in tried if path.is_dir()]
    if dataset is not None:
        for path in found:
            if _holds(path, dataset):
                return path
    if found:
        return found[0]
    where = " or ".join(str(p) for p in tried)
    raise DataError(
        f"dataset folder not found at {where}; set FLEETMIND_SHARED_DATA to the folder that "
        "holds openb/ and petshop/, or run `fleetmind data fetch` here (docs/data.md says where "
        "to get them)"
    )


OPENB_FALLBACK_ENV = "FLEETMIND_OPENB_FALLBACK"
"""Set to ``synthetic`` (by :func:`allow_synthetic_openb`, or by hand) to let :func:`openb_csv_dir` use
the synthetic trace when the openb data is missing; an environment variable so that worker processes
inherit it."""


def _fallback_allowed() -> bool:
    return os.environ.get(OPENB_FALLBACK_ENV, "") == "synthetic"


def allow_synthetic_openb() -> Path | None:
    """Let :func:`openb_csv_dir` fall back to the synthetic openb-schema trace for this process.

    The ``fleetmind`` commands that can run without the downloaded data (``demo``, ``sched``,
    ``fleet show --topology openb``) call this; the library and the benchmarks do not, so they keep
    failing loudly without the data. It sets :data:`OPENB_FALLBACK_ENV` (worker processes inherit
    it). The synthetic folder (:mod:`fleetmind.data.openb_synthetic`) is generated on first use.

    Returns:
        The synthetic ``csv/`` folder when the openb data is missing (no ``openb/csv`` folder, or
        one without :data:`OPENB_REQUIRED_FILES`, as a failed fetch may leave it; callers print
        :data:`fleetmind.data.openb_synthetic.SYNTHETIC_LABEL`), or ``None`` when the real data is there.
    """
    if _real_openb_dir() is not None:
        return None
    os.environ[OPENB_FALLBACK_ENV] = "synthetic"
    return openb_csv_dir()


OPENB_REQUIRED_FILES = ("openb_node_list_gpu_node.csv", "openb_pod_list_default.csv")
"""Files of ``openb/csv`` without which the openb data counts as missing (the node list and the
default pod list, which :func:`fleetmind.data.openb.load_openb_nodes` and ``load_openb_trace("default")``
read): an empty or partly fetched folder does not turn the synthetic fallback off."""


def _real_openb_dir() -> Path | None:
    try:
        path = shared_data_dir("openb") / "openb" / "csv"
    except DataError:
        return None
    return path if all((path / name).is_file() for name in OPENB_REQUIRED_FILES) else None


def openb_csv_dir() -> Path:
    """Folder with the openb CSV files (node lists and pod traces).

    After :func:`allow_synthetic_openb`, the synthetic trace's folder when the openb data is missing.

    Raises:
        DataError: if the dataset folder does not exist (and no fallback was allowed).
    """
    if _fallback_allowed() and _real_openb_dir() is None:
        return synthetic_openb_dir()
    return shared_data_dir("openb") / "openb" / "csv"


def openb_is_synthetic() -> bool:
    """Whether :func:`openb_csv_dir` currently returns the synthetic trace's folder."""
    return _fallback_allowed() and _real_openb_dir() is None
