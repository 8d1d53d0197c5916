"""Option values no run can use: every command answers one line and status 2, before any work.

Each case here was a traceback, a ``MemoryError`` or a run that ate all memory before 2026-12-04
(found by giving every numeric and free-text option of every command -1, 0, nan, inf, 10^20 and
empty text; ``rca generate --noise-min 10^20`` held 7 GB per worker when it was stopped).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fleetmind import cli
from fleetmind.cli.sched import MAX_SEEDS, parse_seeds
from fleetmind.data.errors import ConfigError

HUGE = "99999999999999999999"


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert err and "Traceback" not in "\n".join(err)
    return err[-1]


@pytest.mark.parametrize(
    ("option", "value", "words"),
    [
        ("--noise-per-node", "nan", "noise_per_node must be a finite number"),
        ("--jitter-s", "inf", "jitter_s must be a finite number"),
        ("--window-s", "inf", "window_s must be a finite number"),
        ("--scrape-interval-s", "0", "scrape_interval_s must be > 0"),
        ("--storm-copies", HUGE, "storm_copies must be <= 10000"),
        ("--noise-min", HUGE, "noise_min must be <= 10000"),
        ("--incidents", HUGE, "--incidents must lie in [3, 10,000,000]"),
        ("--max-nodes", HUGE, "<= 200,000"),
    ],
)
def test_rca_generate_refuses_values_the_simulator_cannot_use(
    option: str, value: str, words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["rca", "generate", "--out", str(tmp_path / "g"), "--incidents", "30"]
    assert cli.main([*argv, option, value]) == 2
    assert words in _error_line(capsys)
    assert not (tmp_path / "g").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["rca", "generate", "--out", "x", "--seed", HUGE],
        ["rca", "train", "--data", "x", "--seed", "-1"],
        ["rca", "evaluate", "--data", "x", "--seed", "-1"],
        ["rca", "fit", "--scenario", "x", "--out", "y", "--seed", "4294967296"],
        ["rca", "petshop", "--scenario", "x", "--seed", "-1"],
        ["fleet", "show", "--seed", "-2"],
        ["demo", "--seed", "-1"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_every_seed_option_takes_the_range_every_generator_takes(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:  # argparse's usage error
        cli.main(argv)
    assert exc.value.code == 2
    assert "argument --seed: a seed lies in [0, 2**32)" in _error_line(capsys)


def test_seed_lists_refuse_seeds_out_of_range_and_endless_ranges() -> None:
    assert parse_seeds(["42-44", "7,9"]) == [42, 43, 44, 7, 9]
    for bad, words in [
        ([HUGE], "a seed lies in [0, 2**32)"),
        (["1-99999999999"], "a seed lies in [0, 2**32)"),
        ([f"0-{MAX_SEEDS}"], f"at most {MAX_SEEDS:,} seeds"),
        (["-1"], "expected an integer or a range"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(words)):
            parse_seeds(bad)


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (["--hidden", "30", "--heads", "4"], "--hidden must be a multiple of --heads"),
        (["--hidden", "16384", "--heads", "4"], "--hidden must be <= 8192"),
        (["--max-minutes", "inf"], "--max-minutes must be a positive number"),
    ],
)
def test_rca_train_refuses_shapes_the_gat_cannot_take(
    options: list[str], words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["rca", "train", "--data", str(tmp_path / "none"), "--out", str(tmp_path / "r")]
    assert cli.main([*argv, *options]) == 2
    assert words in _error_line(capsys)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (["--seed", "-1"], "argument --seed: a seed lies in [0, 2**32)"),
        (["--seed", HUGE], "argument --seed: a seed lies in [0, 2**32)"),
        (["--eval-seeds", "42", "-3"], "argument --eval-seeds: a seed lies in [0, 2**32)"),
        (["--cem-seeds", "4294967296"], "argument --cem-seeds: a seed lies in [0, 2**32)"),
        # --bc-fgd-until-pct inf stepped an environment that was never reset (an assertion deep
        # in the demonstrations); no recipe float means anything at nan or inf
        (["--bc-fgd-until-pct", "inf"], "argument --bc-fgd-until-pct: expected a finite number"),
        (["--max-minutes", "nan"], "argument --max-minutes: expected a finite number"),
    ],
)
def test_sched_train_flags_built_from_the_recipes_take_seeds_and_finite_numbers(
    options: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["sched", "train", "--trace", "default", *options])
    assert exc.value.code == 2
    assert words in _error_line(capsys)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["doctor", "--prometheus", "http://127.0.0.1:9", "--timeout", "inf"], "expected a finite"),
        (["replay", "examples/storm-dns.json", "--wait", "nan"], "expected a finite number"),
    ],
)
def test_time_options_take_finite_numbers(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # doctor --timeout inf overflowed a timestamp (OverflowError)
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2 and words in _error_line(capsys)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["demo", "--port", HUGE], "--port must be within 0..65535"),
        (["replay", "examples/storm-dns.json", "--wait", "-1"], "--wait must be >= 0 seconds"),
    ],
)
def test_ports_and_waits_out_of_range_are_refused_before_anything_starts(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # demo --port 10^20 was an OverflowError after the data and models were made
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    assert cli.main(argv) == 2
    assert words in _error_line(capsys)
