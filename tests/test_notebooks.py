"""The evaluation notebooks execute end to end in quick mode and are committed rendered.

Both notebooks run concurrently, with ``FLEETMIND_NB_QUICK=1``, on temporary copies (the committed files
are never rewritten), in a kernel that runs this interpreter (a throwaway kernel spec pointing at
``sys.executable``, so a fresh clone with only ``.venv`` works and a user-level ``python3`` spec cannot
substitute another Python).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import nbclient
import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
NB_DIR = REPO / "notebooks"
NOTEBOOKS = ("rca_evaluation.ipynb", "placement_evaluation.ipynb")
KERNEL = "fleetmind-test-python"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _outputs(nb: Any, tag: str) -> list[dict]:
    cells = [c for c in nb.cells if tag in c.get("metadata", {}).get("tags", [])]
    assert cells, f"no cell tagged {tag!r}"
    return [o for c in cells for o in c.get("outputs", [])]


def _text(outputs: list[dict]) -> str:
    parts = []
    for o in outputs:
        if o.get("output_type") == "stream":
            parts.append(o.get("text", ""))
        parts.append(o.get("data", {}).get("text/plain", ""))
        parts.append(o.get("data", {}).get("text/markdown", ""))
    return "\n".join(parts)


def _has_image(outputs: list[dict]) -> bool:
    return any("image/png" in o.get("data", {}) for o in outputs)


def _shared_openb() -> bool:
    try:
        from fleetmind.data.paths import openb_csv_dir

        return openb_csv_dir().is_dir()
    except Exception:
        return False


def _gat_released() -> bool:
    d = REPO / "models" / "rca"
    return d.is_dir() and any(p.suffix in (".pt", ".onnx") for p in d.iterdir())


def _ppo_released() -> bool:
    d = REPO / "models" / "placement"
    return d.is_dir() and any(p.name in ("policy.onnx", "policy.pt") for p in d.iterdir())


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Execute both notebooks (copies, quick mode, concurrently); returns name -> executed notebook."""
    tmp = tmp_path_factory.mktemp("notebooks")
    spec_dir = tmp / "jupyter" / "kernels" / KERNEL
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "FleetMind test kernel",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    before = {n: _digest(NB_DIR / n) for n in NOTEBOOKS}
    keys = ("FLEETMIND_NB_QUICK", "JUPYTER_PATH", "MPLBACKEND", "PYTHONPATH")
    saved = {k: os.environ.get(k) for k in keys}
    # PYTHONPATH: the kernel imports this checkout's packages even if the venv's editable install
    # points at another clone
    pythonpath = os.pathsep.join(p for p in (str(REPO), saved["PYTHONPATH"]) if p)
    os.environ.update(
        FLEETMIND_NB_QUICK="1", JUPYTER_PATH=str(tmp / "jupyter"), PYTHONPATH=pythonpath
    )
    os.environ.pop("MPLBACKEND", None)  # the kernel's inline backend renders the figures
    nbs = {n: nbformat.read(NB_DIR / n, as_version=4) for n in NOTEBOOKS}
    for nb in nbs.values():
        for c in nb.cells:
            if c.cell_type == "code":
                c.outputs, c.execution_count = [], None
    clients = [
        nbclient.NotebookClient(
            nb,
            kernel_name=KERNEL,
            timeout=240,
            allow_errors=True,
            resources={"metadata": {"path": str(tmp)}},
        )
        for nb in nbs.values()
    ]

    async def run_all() -> None:
        await asyncio.gather(*(c.async_execute() for c in clients))

    try:
        asyncio.run(run_all())
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    for n, nb in nbs.items():
        nbformat.write(nb, tmp / n)
    assert {n: _digest(NB_DIR / n) for n in NOTEBOOKS} == before, "a committed notebook changed"
    return nbs


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_without_errors(executed: dict[str, Any], name: str) -> None:
    errors = [
        f"cell {i}: {o.get('ename')}: {o.get('evalue')}"
        for i, c in enumerate(executed[name].cells)
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]
    assert not errors, "\n".join(errors)
    assert all(c.execution_count is not None for c in executed[name].cells if c.cell_type == "code")


def test_rca_notebook_key_outputs(executed: dict[str, Any]) -> None:
    nb = executed["rca_evaluation.ipynb"]
    live = _outputs(nb, "live-table")
    text = _text(live)
    for method in ("deepest", "most_alerts", "pagerank"):
        assert re.search(rf"^{method}\s", text, re.M), f"no {method} row in the AC@k table"
    if _gat_released():
        assert re.search(r"^gat\s", text, re.M), "the released GAT is missing from the AC@k table"
    assert _has_image(live), "no AC@k bar chart"
    assert _has_image(_outputs(nb, "sweep")), "no difficulty sweep plot"
    if label := _difficulty_large_label():
        assert label in _text(_outputs(nb, "difficulty-json")), "no released-GAT test_large column"
    assert _has_image(_outputs(nb, "explain-graph")), "no incident explanation drawing"
    assert "true root" in _text(_outputs(nb, "explain-table"))


def test_placement_notebook_key_outputs(executed: dict[str, Any]) -> None:
    nb = executed["placement_evaluation.ipynb"]
    if not _shared_openb():
        assert "openb data not available" in _text(_outputs(nb, "fgd-live"))
        return
    text = _text(_outputs(nb, "fgd-live"))
    for pol in ("Random", "DotProd", "GpuClustering", "GpuPacking", "BestFit", "FGD"):
        assert re.search(rf"^{pol}\s", text, re.M), f"no {pol} row in the fgd table"
    if _ppo_released():
        assert re.search(r"^PPO\s", text, re.M), (
            "the released PPO agent is missing from the fgd table"
        )
    assert _has_image(_outputs(nb, "fgd-curve")), "no unallocated-vs-arrived figure"
    assert _has_image(_outputs(nb, "dynamic-cdf")), "no JCT/slowdown CDF figure"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_committed_notebooks_are_rendered(name: str) -> None:
    """The committed files carry their outputs (figures included) so that a code host renders them."""
    nb = nbformat.read(NB_DIR / name, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.execution_count is not None for c in code), (
        "notebook committed unexecuted"
    )
    assert not any(o.get("output_type") == "error" for c in code for o in c.outputs)
    assert sum(_has_image(c.outputs) for c in code) >= 3, "notebook committed without its figures"


def _released_versions() -> set[str]:
    """The ``version`` of every released model in ``models/`` (GAT ``config.json``, agent ``metadata.json``)."""
    out = set()
    for p in [*(REPO / "models").glob("*/config.json"), *(REPO / "models").glob("*/metadata.json")]:
        version = json.loads(p.read_text()).get("version")
        if isinstance(version, str):
            out.add(version)
    return out


# version strings the model artifacts carry: GAT "gat-<10 hex>", agents "<Env>-v0__ppo__<seed>__<time>"
MODEL_VERSION = re.compile(r"\bgat-[0-9a-f]{10}\b|\b[A-Za-z]+-v\d+__[a-z]+__\d+__\d+\b")
# an absolute path of somebody's machine in an output (home, workspace or temp folders)
MACHINE_PATH = re.compile(
    r"(?<![\w.~])(?:/(?:home|Users|work|root|tmp|mnt|srv|opt)/|\b[A-Z]:\\(?=\w))"
)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_committed_outputs_match_the_release(name: str) -> None:
    """Outputs committed with another model than the released one, or run on a machine whose paths
    they print, are stale: ``make notebooks`` regenerates them."""
    nb = nbformat.read(NB_DIR / name, as_version=4)
    text = _text([o for c in nb.cells if c.cell_type == "code" for o in c.outputs])
    released = _released_versions()
    assert released, "no released model versions found in models/"
    stale = sorted(set(MODEL_VERSION.findall(text)) - released)
    assert not stale, (
        f"outputs name model versions that are not released: {stale}; run make notebooks"
    )
    assert not MACHINE_PATH.search(text), (
        f"outputs print a machine path ({MACHINE_PATH.search(text).group(0)!r}...); run make notebooks"
    )
    assert str(REPO) not in text


def _difficulty_large_label() -> str | None:
    """The difficulty table's ``test_large`` column name: the released GAT's, with its version.

    None (no column, a note instead, and the notebook is still written) when there is no release or
    no README table, when ``models/rca/config.json`` has no ``metrics.test_large`` AC@1 and AC@5, or
    when the README table (``settings.default.gat_version``) is of another GAT.
    """
    cfg_path = REPO / "models" / "rca" / "config.json"
    table_path = REPO / "benchmarks/results/rca/rca_main_table.json"
    if not cfg_path.is_file() or not table_path.is_file():
        return None
    cfg = json.loads(cfg_path.read_text())
    large = cfg.get("metrics", {}).get("test_large")
    if not (isinstance(large, dict) and "ac@1" in large and "ac@5" in large):
        return None
    table = json.loads(table_path.read_text())
    if table.get("settings", {}).get("default", {}).get("gat_version") != cfg["version"]:
        return None
    return f"released GAT {cfg['version']}"


def test_committed_difficulty_table_shows_the_released_gat_on_test_large() -> None:
    """Beside the README's table (the released GAT), the ``test_large`` column is the release's own
    figure (``models/rca/config.json``), not the older GAT of ``gat_eval_test_large.json``."""
    label = _difficulty_large_label()
    if label is None:
        pytest.skip("no released GAT or no README table")
    nb = nbformat.read(NB_DIR / "rca_evaluation.ipynb", as_version=4)
    text = _text(_outputs(nb, "difficulty-json"))
    assert label in text, "the test_large column is not the released GAT's; run make notebooks"
    assert "gat_eval_test_large" not in text


def test_difficulty_label_is_required_only_when_the_column_belongs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ``test_large`` column is demanded of a release without those metrics, nor beside a README
    table of another GAT (the notebook then prints a note and leaves the column out)."""
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    (tmp_path / "models" / "rca").mkdir(parents=True)
    (tmp_path / "benchmarks" / "results" / "rca").mkdir(parents=True)

    def write(version: str, large: dict | None, table_version: str) -> None:
        metrics = {"test": {"ac@1": 0.9}} | ({"test_large": large} if large is not None else {})
        cfg = {"version": version, "metrics": metrics}
        (tmp_path / "models" / "rca" / "config.json").write_text(json.dumps(cfg))
        table = {"settings": {"default": {"gat_version": table_version}}}
        (tmp_path / "benchmarks/results/rca/rca_main_table.json").write_text(json.dumps(table))

    write("gat-aaaaaaaaaa", {"n": 5, "ac@1": 0.9, "ac@5": 1.0}, "gat-aaaaaaaaaa")
    assert _difficulty_large_label() == "released GAT gat-aaaaaaaaaa"
    write("gat-aaaaaaaaaa", None, "gat-aaaaaaaaaa")  # no metrics.test_large
    assert _difficulty_large_label() is None
    write("gat-aaaaaaaaaa", {"n": 5, "mrr": 0.9}, "gat-aaaaaaaaaa")  # no AC@1 / AC@5
    assert _difficulty_large_label() is None
    write("gat-aaaaaaaaaa", {"n": 5, "ac@1": 0.9, "ac@5": 1.0}, "gat-bbbbbbbbbb")  # another GAT
    assert _difficulty_large_label() is None


def test_stale_outputs_are_caught() -> None:
    """The checks above do fire on a stale output (another GAT version, a home folder)."""
    stale = "methods: gat (GAT gat-0123456789)\nQUICK=False; results folder: /home/alice/fm/results"
    assert set(MODEL_VERSION.findall(stale)) - _released_versions() == {"gat-0123456789"}
    assert MACHINE_PATH.search(stale)
    assert not MACHINE_PATH.search("results folder: benchmarks/results")
