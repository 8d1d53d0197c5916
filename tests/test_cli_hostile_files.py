"""Files a user names that cannot be read: every command answers one line and status 2.

Each case here reached a traceback before 2026-12-03 (found by running every file-taking option of
the CLI with a missing path, a folder, a file where a folder belongs, bytes that are not UTF-8,
and out-of-range training options).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from fleetmind import cli
from fleetmind.data.errors import DataError
from fleetmind.data.files import read_json, read_text, require_dir
from fleetmind.data.rca_dataset import read_incidents

SLICE = Path(__file__).parent / "data" / "petshop_slice"
NOT_UTF8 = b"\xff\xfe{not text\x80"


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1, err
    assert err[0].startswith("fleetmind: error: ")
    return err[0]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "bin.json").write_bytes(NOT_UTF8)
    (tmp_path / "afile").write_text("plain text\n")
    (tmp_path / "folder").mkdir()
    (tmp_path / "ok.json").write_text('{"a": [1, 2]}')
    (tmp_path / "bad.json").write_text('{"a": ')
    return {p.name.removesuffix(".json"): p for p in tmp_path.iterdir()}


def test_read_helpers_name_the_file_and_the_fault(files: dict[str, Path]) -> None:
    assert read_json(files["ok"]) == {"a": [1, 2]}
    assert read_text(files["afile"]) == "plain text\n"
    cases = {
        files["bin"]: "is not UTF-8 text (byte 0xff at offset 0)",
        files["folder"]: "is a folder, not a file",
        files["afile"] / "x.json": "a part of the path is a file",
        files["folder"] / "missing.json": "graph file not found",
        files["bad"]: "is not valid JSON: Expecting value: line 1 column 7",
    }
    for path, words in cases.items():
        with pytest.raises(DataError) as exc:
            read_json(path, "graph file")
        assert words in str(exc.value) and str(path) in str(exc.value)
        assert "\n" not in str(exc.value)
    assert require_dir(files["folder"]) == files["folder"]
    with pytest.raises(DataError, match="is a file, not a folder"):
        require_dir(files["afile"], "--from-dir folder")


def test_split_file_with_bytes_that_are_not_utf8_names_its_line(tmp_path: Path) -> None:
    split = tmp_path / "val.jsonl"
    split.write_bytes(b"\n\n" + b'{"id": "x\xff"}\n')
    with pytest.raises(
        DataError, match=r"val\.jsonl:3: not UTF-8 text \(byte 0xff is byte 10 of the line\)"
    ):
        read_incidents(split)
    split.unlink()
    split.mkdir()
    with pytest.raises(DataError, match="is a folder, not a file"):
        read_incidents(split)


def test_split_file_behind_a_bom_reads_and_a_huge_integer_names_its_line(tmp_path: Path) -> None:
    """A ``.jsonl`` split saved with a byte order mark (utf-8-sig, as the JSON readers take it)
    reads as without; an integer over CPython's 4,300-digit limit is the line's error."""
    split = tmp_path / "val.jsonl"
    split.write_bytes(b"\xef\xbb\xbf" + b'{"id": "x"}\n')
    with pytest.raises(DataError, match=r"val\.jsonl:1: ") as exc:
        read_incidents(split)  # read past line 1, then refused by the incident validator
    assert "not valid JSON" not in str(exc.value)
    split.write_bytes(b'{"id": 1' + b"0" * 5000 + b"}\n")
    with pytest.raises(DataError, match=r"val\.jsonl:1: not valid JSON \(Exceeds the limit"):
        read_incidents(split)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["graph", "build", "--from-dir", "{afile}", "--out", "{tmp}/g.json"], "is a file, not a"),
        (["fleet", "show", "--topology", "{bin}"], "fleet file"),
        (["serve", "--graph", "{bin}"], "is not UTF-8 text"),
        (["serve", "--graph", "{folder}"], "is a folder, not a file"),
        (["graph", "schema", "--out", "{afile}/schema.json"], "Not a directory"),
        (
            ["fleet", "show", "--topology", "openb", "--json", "{afile}/x.json"],
            "afile is a file, where a folder is needed",  # checked before any work
        ),
        (["rca", "petshop", "--scenario", str(SLICE), "--roles", "{bin}"], "role map"),
    ],
)
def test_unreadable_paths_are_one_line(
    argv: list[str],
    words: str,
    files: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    subs = {"tmp": str(tmp_path), **{k: str(v) for k, v in files.items()}}
    before = {k: v for k, v in os.environ.items() if k.startswith("FLEETMIND_")}
    assert cli.main([a.format(**subs) for a in argv]) == 2
    assert words in _one_error_line(capsys)
    # serve sets FLEETMIND_* for its workers; one that refuses to start gives them back (a
    # FLEETMIND_GRAPH left behind broke every later in-process service test)
    assert {k: v for k, v in os.environ.items() if k.startswith("FLEETMIND_")} == before


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--lr", "-1"),
        ("--lr", "nan"),
        ("--weight-decay", "-0.1"),
        ("--dropout", "1.0"),
        ("--hidden", "0"),
        ("--heads", "0"),
        ("--layers", "0"),
        ("--batch-size", "0"),
        ("--patience", "0"),
        ("--max-minutes", "0"),
        ("--max-train", "0"),
    ],
)
def test_rca_train_refuses_values_torch_cannot_use(
    option: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused before any data is read (the data folder here does not exist) or a run is made."""
    argv = ["rca", "train", "--data", str(tmp_path / "none"), "--no-register"]
    assert cli.main([*argv, "--out", str(tmp_path / "runs"), option, value]) == 2
    assert option in _one_error_line(capsys)
    assert not (tmp_path / "runs").exists()


def test_rca_evaluate_refuses_an_empty_split(tmp_path: Path, capsys) -> None:
    data = tmp_path / "ds"
    assert cli.main(["rca", "generate", "--out", str(data), "--incidents", "3", "--seed", "1"]) == 0
    capsys.readouterr()
    (data / "val.jsonl").write_text("")
    assert cli.main(["rca", "evaluate", "--data", str(data), "--split", "val"]) == 2
    assert "has no incidents to evaluate" in _one_error_line(capsys)
    assert (
        cli.main(["rca", "evaluate", "--data", str(data), "--split", "train", "--limit", "0"]) == 2
    )
    assert "--limit must be >= 1" in _one_error_line(capsys)


def test_rca_petshop_with_a_named_model_that_cannot_load_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A --model the user named must load; the run used to go on without the GAT, status 0."""
    model = tmp_path / "gat"
    shutil.copytree(Path(cli.__file__).parents[1] / "models" / "rca", model)
    (model / "model.pt").write_bytes((model / "model.pt").read_bytes()[:3000])  # truncated
    argv = ["rca", "petshop", "--scenario", str(SLICE), "--methods", "gat", "--model", str(model)]
    assert cli.main([*argv, "--backend", "builtin"]) == 2
    line = _one_error_line(capsys)
    assert "--model" in line and "corrupt" in line


def test_an_error_after_a_progress_bar_starts_its_own_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A command that fails while its bar is drawn: the bar is closed first, so the error is a
    line of its own instead of trailing the half-drawn bar."""
    from tqdm import tqdm

    def fails_mid_run(args: object) -> int:
        bar = tqdm(total=4, desc="work", disable=False)  # the suite sets TQDM_DISABLE
        bar.update(1)
        raise DataError("row 3 of x.csv is not a number")

    parser = cli.build_parser()
    args = parser.parse_args(["fleet", "show"])
    args.func = fails_mid_run
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    monkeypatch.setattr(parser, "parse_args", lambda argv=None: args)
    assert cli.main([]) == 2
    err = capsys.readouterr().err
    assert "work:" in err and "\nfleetmind: error: row 3 of x.csv is not a number\n" in err


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--lr", "1e-4"], "--lr"),
        (["--init", "models/placement-dynamic", "--sigma", "0.5"], "--init, --sigma"),
        (["--no-restart"], "--no-restart"),
    ],
)
def test_sched_train_ppo_refuses_flags_only_other_recipes_read(
    extra: list[str], named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--lr` is the step size of --algo paired/distill/es/order; PPO (the default recipe) has its
    own and trained on, ignoring it, before 2026-12-03."""
    argv = ["sched", "train", "--trace", "default", "--timesteps", "10", "--no-register"]
    assert cli.main([*argv, "--out", str(tmp_path / "runs"), *extra]) == 2
    line = _one_error_line(capsys)
    assert line.startswith(f"fleetmind: error: {named}: ") and "--algo ppo" in line
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("option", "value"), [("--graphs", "0"), ("--workers", "0")])
def test_rca_generate_refuses_zero_graphs_or_workers(
    option: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both were taken as 1 without a word (a dataset on one training topology for --graphs 0)."""
    out = tmp_path / "ds"
    assert cli.main(["rca", "generate", "--out", str(out), "--incidents", "10", option, value]) == 2
    assert f"{option} must be >= 1" in _one_error_line(capsys)
    assert not out.exists()


@pytest.mark.parametrize(
    ("option", "value", "words"),
    [
        ("--accelerator", "nonsense", "invalid accelerator name"),
        ("--strategy", "nonsense", "invalid strategy name"),
        ("--devices", "0", "devices=0"),
        ("--num-nodes", "0", "`num_nodes` must be a positive integer"),
    ],
)
def test_rca_train_refuses_devices_lightning_refuses_before_the_data(
    option: str, value: str, words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Lightning's own reason (a throwaway trainer is built from the four device options), on one
    line, before the data (a folder that does not exist here) or the tracking store is touched."""
    argv = ["rca", "train", "--data", str(tmp_path / "none"), "--no-register"]
    argv += ["--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", "--out", str(tmp_path / "r")]
    assert cli.main([*argv, option, value]) == 2
    line = _one_error_line(capsys)
    assert f"{option} {value}" in line and words in line
    assert not (tmp_path / "r").exists() and not (tmp_path / "mlflow.db").exists()
