"""The evaluation notebooks and ``notebooks/execute.py`` resolve and check their inputs.

- A relative path in ``FLEETMIND_RESULTS_DIR`` / ``FLEETMIND_RCA_MODEL`` / ``FLEETMIND_PPO_MODEL`` and a
  relative ``sqlite:///`` tracking URI are taken from the checkout root, not from ``notebooks/`` where
  the kernel runs; a results folder that does not exist stops with one line.
- An RCA model that was asked for and does not load is a note; the baselines still run.
- The difficulty section shows the ``test_large`` set its text promises, only beside a README table
  of the same GAT; without it, a note that does not stop ``execute.py`` from writing.
- The live PPO check leaves out openb traces the dataset folder lacks, and names its row after the
  release's stage only when the release itself was loaded.
- MLflow URIs (``models:/``, ``mlflow-artifacts:/``, ``file:/``, ``databricks``) pass unchanged.
- ``execute.py`` takes a path (``./x.ipynb`` included) or a bare name, and stops in one line, writing nothing, without the
  openb data or with a local model path that does not exist; a run whose model or trace did not load
  is not written.
- Nothing a setup cell writes into ``os.environ`` outlives its test.

Cells run here as plain Python (the notebook's own source, its ``%`` magics dropped), as in
``tests/test_notebook_ppo_section.py``; ``execute.py`` runs with a stand-in for the kernel.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import matplotlib
import nbformat
import pytest

from fleetmind.data.errors import DataError

REPO = Path(__file__).resolve().parents[1]
NB_DIR = REPO / "notebooks"
RCA_NB = NB_DIR / "rca_evaluation.ipynb"
PLACE_NB = NB_DIR / "placement_evaluation.ipynb"


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # a setup cell sets os.environ itself: the whole environment is put back after each test
    # (monkeypatch.delenv of an unset variable records nothing to undo); the placement setup cell
    # run by tests/test_notebook_ppo_section.py is put back there in the same way
    saved = dict(os.environ)
    matplotlib.use("Agg")
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    for var in (
        "FLEETMIND_RESULTS_DIR",
        "FLEETMIND_RCA_MODEL",
        "FLEETMIND_PPO_MODEL",
        "MLFLOW_TRACKING_URI",
        "MPLBACKEND",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("FLEETMIND_NB_QUICK", "1")
    monkeypatch.setenv("JUPYTER_PATH", "")  # execute.py sets it; restored afterwards
    yield
    os.environ.clear()
    os.environ.update(saved)


def _cell(path: Path, tag: str) -> str:
    nb = nbformat.read(path, as_version=4)
    (src,) = [c.source for c in nb.cells if tag in c.get("metadata", {}).get("tags", [])]
    return "\n".join(ln for ln in src.splitlines() if not ln.lstrip().startswith("%"))


def _run(path: Path, *tags: str, ns: dict[str, Any] | None = None) -> dict[str, Any]:
    ns = {} if ns is None else ns
    for tag in tags:
        exec(_cell(path, tag), ns)
        if tag == "setup":
            ns["notes"] = []
            ns["note"] = ns["notes"].append
    return ns


# ---- relative paths and URIs, missing results folder


@pytest.mark.parametrize("path", [RCA_NB, PLACE_NB], ids=["rca", "placement"])
def test_relative_env_paths_are_taken_from_the_checkout_root(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # like the kernel in notebooks/: not the checkout root
    monkeypatch.setenv("FLEETMIND_RESULTS_DIR", "benchmarks/results")
    monkeypatch.setenv("FLEETMIND_RCA_MODEL", "models/rca")
    monkeypatch.setenv("FLEETMIND_PPO_MODEL", "models/placement/ppo_policy.onnx")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db")
    monkeypatch.setenv("FLEETMIND_SHARED_DATA", "data-folder")
    ns = _run(path, "setup")
    if path == PLACE_NB:  # the placement notebook reads the datasets
        assert os.environ["FLEETMIND_SHARED_DATA"] == str(REPO / "data-folder")
    assert ns["RESULTS"] == REPO / "benchmarks" / "results"
    model = ns["RCA_MODEL"] if "RCA_MODEL" in ns else ns["PPO_MODEL"]
    assert Path(model).is_absolute() and Path(model).exists(), model
    assert os.environ["MLFLOW_TRACKING_URI"] == f"sqlite:///{REPO / 'mlflow.db'}"
    assert not (tmp_path / "mlflow.db").exists()


def test_mlflow_uri_model_reads_the_checkout_roots_default_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FLEETMIND_RCA_MODEL", "models:/fleetmind-rca@champion")
    ns = _run(RCA_NB, "setup")
    assert ns["RCA_MODEL"] == "models:/fleetmind-rca@champion"
    assert os.environ["MLFLOW_TRACKING_URI"] == f"sqlite:///{REPO / 'mlflow.db'}"


MLFLOW_REFS = [
    "models:/fleetmind-rca@champion",
    "runs:/abc/model",
    "mlflow-artifacts:/0/abc/artifacts/model",
    "file:/abs/mlruns",
    "file:///abs/mlruns",
    "s3://bucket/model",
    "http://mlflow.example:5000",
    "databricks",
    "databricks-uc",
    "databricks://profile",
    "sqlite:////abs/mlflow.db",
]


@pytest.mark.parametrize("path", [RCA_NB, PLACE_NB], ids=["rca", "placement"])
def test_mlflow_uris_pass_unchanged(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # URIs MLflow resolves (fleetmind.data.mlflow_store.is_mlflow_uri) and the bare tracking URIs
    # "databricks" / "databricks-uc" (mlflow.utils.uri.is_databricks_uri) are not checkout paths
    monkeypatch.chdir(tmp_path)
    from_root = _run(path, "setup")["from_root"]
    for ref in MLFLOW_REFS:
        assert from_root(ref) == ref
    assert from_root("models/rca") == str(REPO / "models" / "rca")
    for uri in ("file:/abs/mlruns", "databricks"):
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        model_var = "FLEETMIND_RCA_MODEL" if path == RCA_NB else "FLEETMIND_PPO_MODEL"
        monkeypatch.setenv(model_var, "mlflow-artifacts:/0/abc/artifacts/model")
        ns = _run(path, "setup")
        assert os.environ["MLFLOW_TRACKING_URI"] == uri
        model = ns["RCA_MODEL"] if path == RCA_NB else ns["PPO_MODEL"]
        assert model == "mlflow-artifacts:/0/abc/artifacts/model"


@pytest.mark.parametrize("path", [RCA_NB, PLACE_NB], ids=["rca", "placement"])
def test_missing_results_folder_stops_with_one_line(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEETMIND_RESULTS_DIR", str(tmp_path / "no-such-folder"))
    with pytest.raises(Exception, match="FLEETMIND_RESULTS_DIR=.*no such folder") as info:
        _run(path, "setup")
    assert type(info.value).__name__ == "InputError"
    # IPython shows _render_traceback_ instead of a traceback
    (line,) = info.value._render_traceback_()  # type: ignore[attr-defined]
    assert line.startswith("InputError: FLEETMIND_RESULTS_DIR=")


# ---- RCA notebook cells


def test_rca_model_that_does_not_load_is_a_note_and_the_baselines_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "no-model"
    monkeypatch.setenv("FLEETMIND_RCA_MODEL", str(missing))
    ns = _run(RCA_NB, "setup")
    # the live cell without its simulation: the analyzers are what is checked here
    src = _cell(RCA_NB, "live-table").split("\nn_graphs, per_graph")[0]
    exec(src, ns)
    assert "gat" not in ns["analyzers"] and "random" in ns["analyzers"]
    assert any("the GAT is not in this comparison" in n for n in ns["notes"]), ns["notes"]


def test_difficulty_section_shows_test_large_of_the_released_gat() -> None:
    # beside the README's table (the released GAT), test_large is that GAT's too: not the older GAT
    # of gat_eval_test_large.json (2026-11-29, no model version, AC@1 0.953 against the release's 0.995)
    ns = _run(RCA_NB, "setup", "bench-table", "difficulty-json")
    keys = list(ns["diff_sets"])
    assert any("hard" in k for k in keys) and any("default" in k for k in keys), keys
    assert not any(k.startswith("gat_eval_") for k in keys), keys
    cfg = json.loads((REPO / "models" / "rca" / "config.json").read_text())
    (large,) = [k for k in keys if "large" in k]
    assert ns["large_version"] == cfg["version"] and cfg["version"] in large, large
    assert ns["ac1"].loc["gat", large] == cfg["metrics"]["test_large"]["ac@1"]
    assert ns["ac5"].loc["gat", large] == cfg["metrics"]["test_large"]["ac@5"]
    # the main table's columns are of the same release
    for k in keys:
        if k.startswith("rca_main_table/settings/default"):
            assert ns["MAIN_SETS"][k]["methods"]["gat"]["ac@1"] == cfg["metrics"]["test"]["ac@1"]


def _blocks_writing(text: str) -> bool:
    # whether notebooks/execute.py refuses to write a notebook that printed this note
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("note(...)")
    out = {"output_type": "display_data", "metadata": {}, "data": {"text/markdown": text}}
    cell.outputs = [nbformat.from_dict(out)]
    nb.cells = [cell]
    return _execute_module()._missing_data_note(nb) is not None


def _difficulty(ns: dict[str, Any]) -> dict[str, Any]:
    return _run(RCA_NB, "bench-table", "difficulty-json", ns=ns)


def test_difficulty_section_leaves_out_test_large_of_another_gat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a README table of another GAT version: the release's test_large figure is not put beside it
    table = json.loads((REPO / "benchmarks/results/rca/rca_main_table.json").read_text())
    table["settings"]["default"]["gat_version"] = "gat-0000000000"
    (tmp_path / "rca").mkdir()
    (tmp_path / "rca" / "rca_main_table.json").write_text(json.dumps(table))
    monkeypatch.setenv("FLEETMIND_RESULTS_DIR", str(tmp_path))
    ns = _difficulty(_run(RCA_NB, "setup"))
    keys = list(ns["diff_sets"])
    assert any("default" in k for k in keys) and not any("large" in k for k in keys), keys
    assert ns["large_version"] is None
    (msg,) = [n for n in ns["notes"] if "test_large" in n]
    assert "gat_version" in msg and "not shown" in msg
    assert not _blocks_writing(f"> **Note:** {msg}")


def test_difficulty_section_without_test_large_metrics_is_a_note_that_does_not_block(
    tmp_path: Path,
) -> None:
    # a release whose config.json has no metrics.test_large: no column, and the notebook is written
    cfg = json.loads((REPO / "models" / "rca" / "config.json").read_text())
    del cfg["metrics"]["test_large"]
    (tmp_path / "models" / "rca").mkdir(parents=True)
    (tmp_path / "models" / "rca" / "config.json").write_text(json.dumps(cfg))
    ns = _run(RCA_NB, "setup")
    ns["REPO_ROOT"] = tmp_path
    ns = _difficulty(ns)
    assert not any("large" in k for k in ns["diff_sets"]), list(ns["diff_sets"])
    (msg,) = [n for n in ns["notes"] if "test_large" in n]
    assert not _blocks_writing(f"> **Note:** {msg}")


# ---- placement notebook, live PPO check (section 2b)


def _ppo_live(
    monkeypatch: pytest.MonkeyPatch, model: str | None, present: list[str]
) -> dict[str, Any]:
    monkeypatch.setenv("FLEETMIND_NB_QUICK", "0")  # two unseen traces
    if model is not None:
        monkeypatch.setenv("FLEETMIND_PPO_MODEL", model)
    ns = _run(PLACE_NB, "setup")
    loaded: list[str] = []

    def load_openb_trace(name: str) -> str:
        if name not in present:
            raise DataError(f"openb trace file not found: openb_pod_list_{name}.csv")
        loaded.append(name)
        return name

    def run_fgd(trace: str, policy: Any, seed: int, nodes: Any) -> SimpleNamespace:
        return SimpleNamespace(unallocated={100: 5.0, 130: 30.0}, ms_per_decision=0.1)

    ns.update(
        live_policies={"PPO": object(), "FGD": "FGD", "BestFit": "BestFit"},
        nodes=None,
        openb_trace_names=lambda: sorted(present),
        load_openb_trace=load_openb_trace,
        run_fgd=run_fgd,
        loaded=loaded,
    )
    exec(_cell(PLACE_NB, "ppo-live"), ns)
    return ns


def test_ppo_check_leaves_out_traces_the_dataset_folder_lacks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the folder fleetmind.data.paths counts as "openb data present": the node list and default
    ns = _ppo_live(monkeypatch, None, ["default", "multigpu40"])
    assert ns["loaded"] == ["multigpu40"]
    assert any("gpuspec33" in n and "not in the dataset folder" in n for n in ns["notes"])
    ns = _ppo_live(monkeypatch, None, ["default"])
    assert ns["unseen_df"].empty
    assert any("no unseen openb trace" in n for n in ns["notes"]), ns["notes"]


def test_ppo_check_needs_only_the_traces_it_uses(monkeypatch: pytest.MonkeyPatch) -> None:
    # the check uses two unseen traces; the other candidates missing is no missing data
    ns = _ppo_live(monkeypatch, None, ["default", "gpuspec33", "multigpu40"])
    assert ns["loaded"] == ["gpuspec33", "multigpu40"]
    assert not any("left out" in n for n in ns["notes"]), ns["notes"]
    ns = _ppo_live(monkeypatch, None, ["default", "multigpu40", "gpushare100"])
    assert ns["loaded"] == ["multigpu40", "gpushare100"]
    assert not any("left out" in n for n in ns["notes"]), ns["notes"]


def test_ppo_check_names_the_row_after_the_loaded_file(monkeypatch: pytest.MonkeyPatch) -> None:
    stage = json.loads((REPO / "models" / "placement" / "metadata.json").read_text())
    released = f"released {stage['released_stage']}"
    present = ["gpuspec33", "multigpu40"]
    for model, label in (
        (None, released),
        (str(REPO / "models" / "placement"), released),
        (str(REPO / "models" / "placement" / "policy.onnx"), released),
        (str(REPO / "models" / "placement" / "ppo_policy.onnx"), "PPO (ppo_policy.onnx)"),
        ("models/placement/ppo_policy.onnx", "PPO (ppo_policy.onnx)"),
    ):
        ns = _ppo_live(monkeypatch, model, present)
        assert set(ns["unseen_df"]["policy"]) == {label, "FGD", "BestFit"}, model


# ---- notebooks/execute.py


def _execute_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("nb_execute", NB_DIR / "execute.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _Kernel:
    """Stands in for nbclient.NotebookClient: records the notebooks, optionally adds an output."""

    runs: list[Any] = []
    output: dict | None = None

    def __init__(self, nb: Any, **kwargs: Any) -> None:
        self.nb = nb
        _Kernel.runs.append(nb)

    def execute(self) -> None:
        if _Kernel.output is not None:
            self.nb.cells[1].outputs = [nbformat.from_dict(_Kernel.output)]


@pytest.fixture
def execute(monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, list[Path]]:
    mod = _execute_module()
    written: list[Path] = []
    _Kernel.runs, _Kernel.output = [], None
    monkeypatch.setattr(mod.nbclient, "NotebookClient", _Kernel)
    monkeypatch.setattr(mod.nbformat, "write", lambda nb, path: written.append(Path(path)))
    return mod, written


def _stops(
    execute: tuple[ModuleType, list[Path]], argv: list[str], capsys: pytest.CaptureFixture[str]
) -> str:
    """``execute.py argv`` stops (2) having run and written nothing; what it printed to stderr."""
    mod, written = execute
    assert mod.main(argv) == 2
    err = capsys.readouterr().err
    assert written == [] and _Kernel.runs == []
    return err


def test_execute_takes_a_path_or_a_bare_name(
    execute: tuple[ModuleType, list[Path]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mod, written = execute
    monkeypatch.chdir(REPO)
    assert mod.main(["notebooks/rca_evaluation.ipynb"]) == 0
    monkeypatch.chdir(tmp_path)
    assert mod.main(["rca_evaluation.ipynb"]) == 0
    assert mod.main([str(RCA_NB)]) == 0
    assert written == [RCA_NB] * 3


def test_execute_unknown_notebook_is_one_line(
    execute: tuple[ModuleType, list[Path]], capsys: pytest.CaptureFixture[str]
) -> None:
    err = _stops(execute, ["notebooks/rca_evalution.ipynb"], capsys)
    assert len(err.strip().splitlines()) == 1 and "usage:" in err


@pytest.mark.parametrize("layout", ["no-folder", "empty-folder"])
def test_execute_without_openb_data_stops_before_writing(
    layout: str,
    execute: tuple[ModuleType, list[Path]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = tmp_path / "data"
    if layout == "empty-folder":
        (data / "openb" / "csv").mkdir(parents=True)
    monkeypatch.setenv("FLEETMIND_SHARED_DATA", str(data))
    err = _stops(execute, [], capsys)  # not even the RCA notebook ran
    assert len(err.strip().splitlines()) == 1 and "FLEETMIND_SHARED_DATA" in err


def test_execute_missing_results_folder_stops_before_writing(
    execute: tuple[ModuleType, list[Path]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("FLEETMIND_RESULTS_DIR", str(tmp_path / "nope"))
    assert "FLEETMIND_RESULTS_DIR" in _stops(execute, ["rca_evaluation.ipynb"], capsys)


def test_execute_does_not_write_a_notebook_with_a_missing_data_note(
    execute: tuple[ModuleType, list[Path]], capsys: pytest.CaptureFixture[str]
) -> None:
    mod, written = execute
    _Kernel.output = {
        "output_type": "display_data",
        "metadata": {},
        "data": {"text/markdown": "> **Note:** openb data not available (dataset folder ...)"},
    }
    assert mod.main(["rca_evaluation.ipynb"]) == 1
    assert "not written" in capsys.readouterr().err
    assert written == []


def test_execute_path_with_a_folder_is_only_that_path(
    execute: tuple[ModuleType, list[Path]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # not the committed notebook of the same name, which a run would overwrite
    argv = [str(tmp_path / "does-not-exist" / "rca_evaluation.ipynb")]
    assert "no such notebook" in _stops(execute, argv, capsys)


def test_execute_without_openb_data_says_the_rca_notebook_runs_alone(
    execute: tuple[ModuleType, list[Path]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    mod, written = execute
    monkeypatch.setenv("FLEETMIND_SHARED_DATA", str(tmp_path / "data"))
    assert mod.main([]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "python notebooks/execute.py rca_evaluation.ipynb" in line
    assert mod.main(["rca_evaluation.ipynb"]) == 0  # it does
    assert mod.main(["placement_evaluation.ipynb"]) == 2
    assert "rca_evaluation.ipynb" not in capsys.readouterr().err
    assert written == [RCA_NB]


@pytest.mark.parametrize(
    ("var", "name"),
    [("FLEETMIND_RCA_MODEL", "rca_evaluation.ipynb"), ("FLEETMIND_PPO_MODEL", None)],
)
def test_execute_missing_local_model_stops_before_writing(
    var: str,
    name: str | None,
    execute: tuple[ModuleType, list[Path]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)  # a relative path is taken from the checkout root
    monkeypatch.setenv("FLEETMIND_SHARED_DATA", str(tmp_path))  # the model is checked first
    monkeypatch.setenv(var, "models/no-such-model")
    (line,) = _stops(execute, [name] if name else [], capsys).strip().splitlines()
    assert f"{var}=models/no-such-model: no such file or folder" in line


def test_execute_takes_a_relative_model_or_a_uri(
    execute: tuple[ModuleType, list[Path]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mod, written = execute
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FLEETMIND_PPO_MODEL", "models/no-such-model")  # not this notebook's
    for ref in ("models/rca", "models:/fleetmind-rca@champion", "mlflow-artifacts:/0/abc/model"):
        monkeypatch.setenv("FLEETMIND_RCA_MODEL", ref)
        assert mod.main(["rca_evaluation.ipynb"]) == 0, ref
    assert written == [RCA_NB] * 3


@pytest.mark.parametrize(
    ("path", "phrase"),
    [
        (RCA_NB, "the GAT is not in this comparison"),
        (PLACE_NB, "PPO is not in the live curve"),
        (PLACE_NB, "no PPO model loaded"),
        (PLACE_NB, "left out:"),
    ],
)
def test_execute_does_not_write_a_run_whose_model_or_trace_did_not_load(
    path: Path,
    phrase: str,
    execute: tuple[ModuleType, list[Path]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    mod, written = execute
    nb = nbformat.read(path, as_version=4)
    assert any(phrase in c.source for c in nb.cells if c.cell_type == "code"), phrase
    _Kernel.output = {"output_type": "display_data", "metadata": {}}
    _Kernel.output["data"] = {"text/markdown": f"> **Note:** {phrase} /home/someone/model"}
    assert mod.main(["rca_evaluation.ipynb"]) == 1
    assert "not written" in capsys.readouterr().err
    assert written == []


def test_execute_dot_slash_path_is_a_path_not_a_bare_name(
    execute: tuple[ModuleType, list[Path]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Path("./rca_evaluation.ipynb") drops the "./": the rule is decided on the string as typed,
    # so a run from another folder does not fall back to (and overwrite) the committed notebook
    mod, written = execute
    monkeypatch.chdir(tmp_path)
    assert "no such notebook" in _stops(execute, ["./rca_evaluation.ipynb"], capsys)
    monkeypatch.chdir(NB_DIR)  # where it does hold the notebook
    assert mod.main(["./rca_evaluation.ipynb"]) == 0
    assert written == [RCA_NB]
