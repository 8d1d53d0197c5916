"""Re-execute the evaluation notebooks in place against the released models (``make notebooks``).

Runs each notebook in full mode (not ``FLEETMIND_NB_QUICK``) with nbclient, in a kernel that runs
this interpreter (a throwaway kernel spec, so a user-level ``python3`` spec cannot substitute another
Python), from the ``notebooks/`` folder, and writes the outputs back into the committed file.
``tests/test_notebooks.py`` checks that the committed outputs name the released model versions and
no machine path.

Before starting a kernel it checks the inputs and stops with one line, writing nothing, when one is
missing: a notebook that is neither a path nor a name in ``notebooks/``, a ``FLEETMIND_RESULTS_DIR``
that is not a folder, a local ``FLEETMIND_RCA_MODEL`` / ``FLEETMIND_PPO_MODEL`` that does not exist,
or (for the placement notebook) no openb data under ``FLEETMIND_SHARED_DATA`` (the RCA notebook
alone still runs: ``python notebooks/execute.py rca_evaluation.ipynb``).
A relative path in ``FLEETMIND_RESULTS_DIR``, ``FLEETMIND_SHARED_DATA``, ``FLEETMIND_RCA_MODEL`` or
``FLEETMIND_PPO_MODEL`` is taken from the checkout root, as the notebooks themselves do. A notebook
whose run printed a missing-input note (a model that did not load, an openb trace left out), or
whose cell failed, is not written either.

Usage: ``python notebooks/execute.py [NOTEBOOK ...]`` (a path, or a bare name in ``notebooks/``;
default: both notebooks).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import nbclient
import nbformat

HERE = Path(__file__).resolve().parent
NOTEBOOKS = ("rca_evaluation.ipynb", "placement_evaluation.ipynb")
KERNEL = "fleetmind-notebooks-python"


REPO_ROOT = HERE.parent
USAGE = "usage: python notebooks/execute.py [NOTEBOOK ...] (a path or a name in notebooks/)"
OPENB_NOTEBOOKS = ("placement_evaluation.ipynb",)
"""Notebooks whose live sections need the openb data (``docs/data.md``)."""
MISSING_DATA = (
    "openb data not available",
    "needs the openb data",
    "not in the dataset folder",
    "left out:",
    "no unseen openb trace",
    "the GAT is not in this comparison",
    "PPO is not in the live curve",
    "no PPO model loaded",
)
"""Phrases of the notebooks' missing-input notes: an output holding one is not committed (a trace of
the PPO check that is missing or does not load, or a model that does not load, is caught here, after
the run)."""
MODEL_VARS = {
    "rca_evaluation.ipynb": "FLEETMIND_RCA_MODEL",
    "placement_evaluation.ipynb": "FLEETMIND_PPO_MODEL",
}
"""The variable naming each notebook's model (unset: the release in ``models/``)."""


class InputError(Exception):
    """A missing or bad input, reported in one line before anything runs."""


def notebook_path(arg: str) -> Path:
    """The notebook ``arg`` names: a path to an ``.ipynb`` file, or a name in ``notebooks/``.

    Raises:
        InputError: if it is neither.
    """
    p = Path(arg).expanduser()
    # a bare name may be one in notebooks/; a path with a folder (``./x.ipynb`` included, which
    # Path would shorten to the bare name) is only that path: decided on the string as typed
    seps = [s for s in (os.sep, os.altsep) if s]
    bare = not any(s in arg for s in seps)
    cands = (p, HERE / p.name) if bare else (p,)
    for cand in cands:
        if cand.suffix == ".ipynb" and cand.is_file():
            return cand.resolve()
    raise InputError(f"{arg}: no such notebook; {USAGE}")


def _is_uri(ref: str) -> bool:
    """Whether the model reference ``ref`` is one MLflow resolves (not a local path)."""
    from fleetmind.data.mlflow_store import is_mlflow_uri

    return is_mlflow_uri(ref) or ref.startswith(("models:", "runs:"))


def check_inputs(paths: list[Path]) -> None:
    """Check what the notebooks read before any kernel starts.

    Raises:
        InputError: ``FLEETMIND_RESULTS_DIR`` is set to a missing folder, ``FLEETMIND_RCA_MODEL`` or
            ``FLEETMIND_PPO_MODEL`` (for a notebook asked for) is a local path that does not exist,
            or a placement notebook is asked for and the openb node list or ``default`` trace
            (:data:`fleetmind.data.paths.OPENB_REQUIRED_FILES`) is not in the dataset folder.
    """
    data = os.environ.get("FLEETMIND_SHARED_DATA")
    if data:  # taken from the checkout root, as the placement notebook does
        os.environ["FLEETMIND_SHARED_DATA"] = str(REPO_ROOT / Path(data).expanduser())
    results = os.environ.get("FLEETMIND_RESULTS_DIR")
    if results and not (REPO_ROOT / Path(results).expanduser()).is_dir():
        raise InputError(
            f"FLEETMIND_RESULTS_DIR={results}: no such folder "
            "(a relative path is taken from the checkout root)"
        )
    for var in dict.fromkeys(MODEL_VARS[p.name] for p in paths if p.name in MODEL_VARS):
        ref = os.environ.get(var)
        if ref and not _is_uri(ref) and not (REPO_ROOT / Path(ref).expanduser()).exists():
            raise InputError(
                f"{var}={ref}: no such file or folder (a relative path is taken from the checkout "
                "root; unset it for the release in models/)"
            )
    rca_too = any(p.name == "rca_evaluation.ipynb" for p in paths)
    alone = "; `python notebooks/execute.py rca_evaluation.ipynb` runs the RCA notebook alone"
    if any(p.name in OPENB_NOTEBOOKS for p in paths):
        from fleetmind.data.errors import DataError
        from fleetmind.data.paths import OPENB_REQUIRED_FILES, shared_data_dir

        try:
            csv = shared_data_dir("openb") / "openb" / "csv"
        except DataError as err:
            raise InputError(
                f"the placement notebook needs the openb data: {err}{alone if rca_too else ''}"
            ) from None
        if missing := [f for f in OPENB_REQUIRED_FILES if not (csv / f).is_file()]:
            raise InputError(
                f"the placement notebook needs the openb data: {', '.join(missing)} not in "
                f"{csv}; set FLEETMIND_SHARED_DATA to the folder that holds openb/ (docs/data.md)"
                f"{alone if rca_too else ''}"
            )


def _missing_data_note(nb: nbformat.NotebookNode) -> str | None:
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            text = "".join(out.get("data", {}).get("text/markdown", "")) + "".join(
                out.get("text", "")
            )
            if any(m in text for m in MISSING_DATA):
                return text.strip().splitlines()[0]
    return None


def main(argv: list[str]) -> int:
    """Execute the notebooks ``argv`` names (default: both) in place; returns the exit status.

    Exit status 2 (one line on stderr, nothing written) for a bad argument or a missing input, 1 when
    a cell failed or a notebook printed a missing-data note (that notebook is not written).
    """
    if any(a in ("-h", "--help") for a in argv):
        print(USAGE)
        return 0
    try:
        paths = [notebook_path(a) for a in argv] if argv else [HERE / n for n in NOTEBOOKS]
        check_inputs(paths)
    except InputError as err:
        print(f"execute.py: {err}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        spec_dir = Path(tmp) / "kernels" / KERNEL
        spec_dir.mkdir(parents=True)
        spec = {
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "FleetMind notebooks",
            "language": "python",
        }
        (spec_dir / "kernel.json").write_text(json.dumps(spec))
        os.environ["JUPYTER_PATH"] = tmp
        os.environ.pop("FLEETMIND_NB_QUICK", None)
        os.environ.pop("MPLBACKEND", None)  # the kernel's inline backend renders the figures
        for path in paths:
            nb = nbformat.read(path, as_version=4)
            t0 = time.perf_counter()
            try:
                nbclient.NotebookClient(
                    nb,
                    kernel_name=KERNEL,
                    timeout=1800,
                    resources={"metadata": {"path": str(path.parent)}},
                ).execute()
            except nbclient.exceptions.CellExecutionError as err:
                last = (str(err).strip().splitlines() or ["?"])[-1]
                print(
                    f"execute.py: {path.name}: a cell failed ({last}); not written", file=sys.stderr
                )
                return 1
            if note := _missing_data_note(nb):
                print(f"execute.py: {path.name}: {note}; not written", file=sys.stderr)
                return 1
            nb.metadata.get("kernelspec", {}).update(name="python3", display_name="Python 3")
            nbformat.write(nb, path)
            print(f"{path.name}: executed in {time.perf_counter() - t0:.0f} s, written in place")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
