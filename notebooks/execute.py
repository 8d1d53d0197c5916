"""Re-execute the evaluation notebooks in place against the released models (``make notebooks``).

Runs each notebook in full mode (not ``FLEETMIND_NB_QUICK``) with nbclient, in a kernel that runs
this interpreter (a throwaway kernel spec, so a user-level ``python3`` spec cannot substitute another
Python), from the ``notebooks/`` folder, and writes the outputs back into the committed file.
``tests/test_notebooks.py`` checks that the committed outputs name the released model versions and
no machine path.

Usage: ``python notebooks/execute.py [NAME.ipynb ...]`` (default: both notebooks).
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


def main(argv: list[str]) -> int:
    names = argv or list(NOTEBOOKS)
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
        for name in names:
            path = HERE / name
            nb = nbformat.read(path, as_version=4)
            t0 = time.perf_counter()
            nbclient.NotebookClient(
                nb, kernel_name=KERNEL, timeout=1800, resources={"metadata": {"path": str(HERE)}}
            ).execute()
            nb.metadata.get("kernelspec", {}).update(name="python3", display_name="Python 3")
            nbformat.write(nb, path)
            print(f"{name}: executed in {time.perf_counter() - t0:.0f} s, written in place")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
