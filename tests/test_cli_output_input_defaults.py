"""An output file that is one of the command's inputs is refused before any work (README, "An
output file (--json, --out) that is one of the command's inputs ... is refused"), also for the
inputs a command reads without an option naming them, and for another name of an input file:

- without ``--model`` the released model folder the command loads (``rca evaluate``, ``rca
  calibrate``, ``rca petshop``: ``models/rca``; ``sched evaluate``: ``models/placement``, in
  dynamic mode ``models/placement-dynamic``); here the released folders point at temporary copies,
  never at the package's own models;
- in fgd mode the FGD authors' published figures (``fgd_published_unallocated.csv`` beside the
  openb CSV folder), whose pub@100 column the run reads; a published file that is there but does
  not parse is named in the table's note instead of the column going missing silently;
- a hard link (or a symbolic link in the folder) of a file the command reads from an input folder,
  and two outputs that are hard links of one file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cli_helpers import refused_line

from fleetmind.cli import sched as sched_cli
from fleetmind.cli.common import DATASET_FILES, refuse_input_as_output, refuse_same_output
from fleetmind.data.errors import ConfigError
from fleetmind.data.paths import OPENB_REQUIRED_FILES

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str], path: Path, flag: str) -> None:
    """``argv`` exits 2 with one error line naming ``path`` and the input ``flag``, and leaves
    ``path`` byte for byte as it was."""
    line = refused_line(capsys, argv, path)
    assert f"is an input of this command ({flag}" in line, line
    assert "choose another path" in line and str(path) in line


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    """A folder with a dataset's files; never loaded: the refusal comes first."""
    ds = tmp_path / "ds"
    (ds / "graphs").mkdir(parents=True)
    for name in ("train.jsonl", "val.jsonl", "test.jsonl"):
        (ds / name).write_text('{"id": "x"}\n')
    (ds / "meta.json").write_text('{"counts": {}}\n')
    (ds / "graphs" / "g0.json").write_text("{}\n")
    return ds


def _model_folder(path: Path, *names: str) -> Path:
    path.mkdir(parents=True)
    for name in names:
        (path / name).write_text('{"format": "stand-in"}\n')
    return path


@pytest.fixture
def released_gat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The released GAT folder (``gat_analyzer.RELEASED_DIR``, read when ``--model`` is not
    given) pointed at a temporary stand-in."""
    from fleetmind.rca import gat_analyzer

    folder = _model_folder(tmp_path / "released" / "rca", "config.json")
    (folder / "model.pt").write_bytes(b"weights")
    monkeypatch.setattr(gat_analyzer, "RELEASED_DIR", folder)
    return folder


# --- 1. the released model, read when --model is not given ----------------------------------------


@pytest.mark.parametrize("name", ["config.json", "model.pt"])
def test_rca_evaluate_json_over_the_released_model(
    dataset: Path, released_gat: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = released_gat / name
    argv = ["rca", "evaluate", "--data", str(dataset), "--methods", "gat", "--json", str(out)]
    _refused(capsys, argv, out, "the released model")
    # with --model the released folder is not read: the refusal names --model's folder
    other = _model_folder(dataset.parent / "mine", "config.json")
    argv = ["rca", "evaluate", "--data", str(dataset), "--model", str(other)]
    _refused(
        capsys, [*argv, "--json", str(other / "config.json")], other / "config.json", "--model"
    )


def test_rca_calibrate_and_petshop_json_over_the_released_model(
    dataset: Path, released_gat: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = released_gat / "config.json"
    argv = ["rca", "calibrate", "--data", str(dataset), "--json", str(out)]
    _refused(capsys, argv, out, "the released model")
    scenario = tmp_path / "scenario"
    scenario.mkdir()
    (scenario / "graph.csv").write_text("source,target\n")
    argv = ["rca", "petshop", "--scenario", str(scenario), "--json", str(out)]
    _refused(capsys, argv, out, "the released model")


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    """A trace file given by path; never loaded: the refusal comes first."""
    path = tmp_path / "trace_in.csv"
    path.write_text("name,cpu_milli\np0,1000\n")
    return path


def test_sched_evaluate_json_over_the_released_placement_model(
    trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from fleetmind.data import paths
    from fleetmind.rl import policy_adapter

    fgd = _model_folder(tmp_path / "models" / "placement", "metadata.json", "teacher.json")
    dynamic = _model_folder(tmp_path / "models" / "placement-dynamic", "metadata.json")
    monkeypatch.setattr(policy_adapter, "RELEASED_DIR", fgd)
    monkeypatch.setattr(paths, "MODELS_DIR", tmp_path / "models")
    argv = ["sched", "evaluate", "--trace", str(trace), "--seeds", "0"]
    out = fgd / "teacher.json"
    _refused(capsys, [*argv, "--policies", "teacher", "--json", str(out)], out, "the released")
    out = dynamic / "metadata.json"
    argv = [*argv, "--mode", "dynamic", "--policies", "ppo", "--json", str(out)]
    _refused(capsys, argv, out, "the released model")


# --- 2. the published FGD figures -----------------------------------------------------------------


def test_sched_evaluate_json_over_the_published_figures(
    trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shared = tmp_path / "shared"
    (shared / "openb" / "csv").mkdir(parents=True)
    for name in OPENB_REQUIRED_FILES:  # an openb data folder (else the synthetic one is used)
        (shared / "openb" / "csv" / name).write_text("name\n")
    published = shared / "openb" / "fgd_published_unallocated.csv"
    published.write_text(
        "trace,policy,seed,unallocated_gpu_pct_at_100,unallocated_gpu_pct_at_130\n"
        "default,FGD,42,4.1,3.0\n"
    )
    monkeypatch.setenv("FLEETMIND_SHARED_DATA", str(shared))
    argv = ["sched", "evaluate", "--trace", str(trace), "--policies", "FGD", "--seeds", "42"]
    _refused(capsys, [*argv, "--json", str(published)], published, "the published FGD figures")


def test_unreadable_published_figures_are_named_in_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    published = tmp_path / "openb" / "fgd_published_unallocated.csv"
    published.parent.mkdir()
    published.write_text('{"not": "the published figures"}\n')  # e.g. a result JSON
    monkeypatch.setattr(sched_cli, "_published_file", lambda: str(published))
    from fleetmind.data import openb

    real = openb.load_fgd_published
    monkeypatch.setattr(openb, "load_fgd_published", lambda: real(published))
    policies = {"FGD": {"unallocated_gpu_pct_at_100": 4.7}}
    reason = sched_cli._published_means("default", policies, [42])
    assert reason is not None and "cannot be read" in reason and str(published) in reason
    assert "published_unallocated_gpu_pct_at_100" not in policies["FGD"]
    result = {"trace": "default", "mode": "fgd", "seeds": [42], "policies": policies}
    result["published"] = None
    result["published_reason"] = f"published FGD values omitted: {reason}"
    sched_cli._print_table(result)
    table = " ".join(capsys.readouterr().out.split())
    assert "note: published FGD values omitted: the published figures cannot be read" in table
    # a data folder that ships no published figures: no values and no note, as before
    published.unlink()
    assert sched_cli._published_means("default", policies, [42]) is None


# --- 3. another name of an input file -------------------------------------------------------------


def test_a_hard_link_of_a_dataset_file_is_refused(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outside = tmp_path / "result.json"
    os.link(dataset / "val.jsonl", outside)  # the same file under a name outside the folder
    argv = ["rca", "evaluate", "--data", str(dataset), "--split", "val"]
    _refused(capsys, [*argv, "--json", str(outside)], outside, "--data")
    inside = dataset / "results.json"  # a name in the folder that the loader does not read
    os.link(dataset / "graphs" / "g0.json", inside)
    _refused(capsys, [*argv, "--json", str(inside)], inside, "--data")


def test_a_symbolic_link_in_the_folder_to_the_output_is_refused(
    dataset: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_text('{"id": "y"}\n')
    (dataset / "extra.jsonl").symlink_to(elsewhere)  # the loader reads it through the link
    with pytest.raises(ConfigError, match=r"\(--data\)"):
        refuse_input_as_output(elsewhere, "--json", [("--data", str(dataset), DATASET_FILES)])


def test_files_the_folder_does_not_read_stay_outputs(dataset: Path, tmp_path: Path) -> None:
    """A hard link of a file in the folder that the command does not read, and a file with
    hard links none of which is an input, are outputs like any."""
    (dataset / "notes.txt").write_text("kept\n")
    os.link(dataset / "notes.txt", tmp_path / "notes_link.txt")
    refuse_input_as_output(
        tmp_path / "notes_link.txt", "--json", [("--data", str(dataset), DATASET_FILES)]
    )
    (tmp_path / "r.json").write_text("{}\n")
    os.link(tmp_path / "r.json", tmp_path / "r2.json")
    refuse_input_as_output(tmp_path / "r.json", "--json", [("--data", str(dataset), DATASET_FILES)])


def test_two_outputs_that_are_hard_links_of_one_file(tmp_path: Path) -> None:
    first = tmp_path / "scorer.json"
    first.write_text("{}\n")
    os.link(first, tmp_path / "summary.json")
    with pytest.raises(ConfigError, match="is also --out"):
        refuse_same_output([("--out", first), ("--json", tmp_path / "summary.json")])
    refuse_same_output([("--out", first), ("--json", tmp_path / "new.json")])  # not there yet
    assert json.loads(first.read_text()) == {}
