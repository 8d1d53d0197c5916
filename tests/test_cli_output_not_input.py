"""An output option (``--json``, ``--out``) that names one of the command's input files is
refused before any work, with one line and exit status 2, and the input is left as it was; before
the fix ``sched evaluate --trace t.csv --json t.csv`` replaced the trace with its results and
exited 0. Result files are written whole (a temporary file renamed over the old one)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from cli_helpers import refused_line

from fleetmind.cli import main
from fleetmind.cli.common import DATASET_FILES, refuse_input_as_output
from fleetmind.data.errors import ConfigError
from fleetmind.training import io


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str], path: Path, flag: str) -> None:
    """``argv`` exits 2 with one error line naming ``path`` and the input option ``flag``, and
    leaves ``path`` byte for byte as it was."""
    line = refused_line(capsys, argv, path)
    assert f"is an input of this command ({flag}); choose another path" in line
    assert str(path) in line


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


def test_sched_evaluate_json_over_its_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "trace_in.csv"
    trace.write_text("name,cpu_milli\np0,1000\n")
    argv = ["sched", "evaluate", "--trace", str(trace), "--policies", "FGD", "--seeds", "0"]
    _refused(capsys, [*argv, "--json", str(trace)], trace, "--trace")
    link = tmp_path / "link.csv"  # the same file under another name
    link.symlink_to(trace)
    _refused(capsys, [*argv, "--json", str(link)], link, "--trace")
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli\n")
    os.link(nodes, tmp_path / "hard.csv")  # a hard link is the same file too
    _refused(
        capsys,
        [*argv, "--nodes", str(nodes), "--json", str(tmp_path / "hard.csv")],
        tmp_path / "hard.csv",
        "--nodes",
    )


def test_fleet_show_json_over_its_topology(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = tmp_path / "myfleet.yaml"
    fleet.write_text("name: f\n")
    _refused(
        capsys,
        ["fleet", "show", "--topology", str(fleet), "--json", str(fleet)],
        fleet,
        "--topology",
    )


@pytest.mark.parametrize("name", ["train.jsonl", "meta.json", "graphs/g0.json"])
def test_rca_evaluate_json_over_a_dataset_file(
    dataset: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = dataset / name
    _refused(capsys, ["rca", "evaluate", "--data", str(dataset), "--json", str(out)], out, "--data")


def test_rca_train_json_over_a_dataset_file_or_the_tracking_store(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    meta = dataset / "meta.json"
    _refused(capsys, ["rca", "train", "--data", str(dataset), "--json", str(meta)], meta, "--data")
    db = tmp_path / "mlflow.db"
    db.write_bytes(b"SQLite format 3\x00")
    argv = ["rca", "train", "--data", str(dataset), "--tracking-uri", f"sqlite:///{db}"]
    _refused(capsys, [*argv, "--json", str(db)], db, "--tracking-uri")


def test_rca_evaluate_json_over_the_feedback_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "fb.db"
    db.write_bytes(b"SQLite format 3\x00")
    argv = ["rca", "evaluate", "--feedback-db", f"sqlite:///{db}", "--json", str(db)]
    _refused(capsys, argv, db, "--feedback-db")


def test_sched_variants_out_over_its_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "src.csv"
    src.write_text("name\n")
    argv = ["sched", "variants", "--from", str(src), "--kind", "cpu", "--level", "3.7"]
    _refused(capsys, [*argv, "--seed", "0", "--out", str(src)], src, "--from")


def test_search_teacher_outputs_and_inputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace, init = tmp_path / "t.csv", tmp_path / "init.json"
    trace.write_text("name\n")
    init.write_text("{}\n")
    argv = ["sched", "search-teacher", "--trace", str(trace)]
    _refused(capsys, [*argv, "--out", str(init), "--init", str(init)], init, "--init")
    _refused(
        capsys, [*argv, "--out", str(tmp_path / "s.json"), "--json", str(trace)], trace, "--trace"
    )
    # --out and --json on one file: the summary would replace the scorer
    assert main([*argv, "--out", str(tmp_path / "s.json"), "--json", str(tmp_path / "s.json")]) == 2
    assert "is also --out" in capsys.readouterr().err


def test_other_files_in_an_input_folder_are_outputs_like_any(dataset: Path) -> None:
    """A results file kept in the dataset folder (not a file the loader reads) may be replaced
    by the next run, and an output not there yet is never an input."""
    kept = dataset / "results.json"
    kept.write_text("{}\n")
    refuse_input_as_output(kept, "--json", [("--data", str(dataset), DATASET_FILES)])
    refuse_input_as_output(
        dataset / "new.jsonl", "--json", [("--data", str(dataset), DATASET_FILES)]
    )
    with pytest.raises(ConfigError):
        refuse_input_as_output(
            dataset / "val.jsonl", "--json", [("--data", str(dataset), DATASET_FILES)]
        )
    # an openb name or a models:/ URI that is no local file is no input file
    refuse_input_as_output(
        kept, "--json", [("--trace", "default", ()), ("--model", "models:/m@c", ())]
    )


def test_write_json_replaces_the_file_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "res.json"
    out.write_text('{"old": 1}\n')
    out.chmod(0o640)
    inode = out.stat().st_ino
    io.write_json(out, {"new": 2})
    assert out.read_text() == '{\n  "new": 2\n}\n'
    assert out.stat().st_ino != inode  # a new file renamed over the old one
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res.json"]  # no temporary file left

    def no_space(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(io.os, "fsync", no_space)
    with pytest.raises(OSError, match="No space"):
        io.write_json(out, {"newer": 3})
    assert out.read_text() == '{\n  "new": 2\n}\n'  # the old file, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res.json"]
    monkeypatch.undo()
    io.write_json(tmp_path / "sub" / "r.json", {})  # parent folders made
    io.write_json(os.devnull, {"x": 1})  # a device is written in place, not replaced
    assert os.path.exists(os.devnull) and not Path(os.devnull).is_file()
