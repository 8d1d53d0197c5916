"""A scorer or teacher file whose JSON is not an object (a list, a string, a number) is refused
with one :class:`ModelLoadError` line, not an ``AttributeError`` traceback (``[1, 2].get``), and
``sched search-teacher --init`` such a file exits 2 with that line."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetmind.cli import main
from fleetmind.data.errors import ModelLoadError
from fleetmind.rl.teacher import LinearScorer, StrandPenaltyScorer, load_teacher


@pytest.mark.parametrize("text", ["[1, 2]", '"str"', "3", "null"])
@pytest.mark.parametrize("load", [LinearScorer.load, StrandPenaltyScorer.load, load_teacher])
def test_json_that_is_not_an_object_is_one_model_load_error(
    tmp_path: Path, text: str, load: object
) -> None:
    path = tmp_path / "scorer.json"
    path.write_text(text + "\n")
    with pytest.raises(ModelLoadError, match="expected a JSON object") as err:
        load(path)  # type: ignore[operator]
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_a_strand_scorer_whose_base_is_not_an_object_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "strand.json"
    path.write_text(f'{{"format": "{StrandPenaltyScorer.FORMAT}", "base": [1], "alpha": 1}}')
    with pytest.raises(ModelLoadError, match="'base' is not a JSON object"):
        load_teacher(path)


def test_search_teacher_init_list_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    init = tmp_path / "list.json"
    init.write_text("[1, 2]\n")
    trace = tmp_path / "t.csv"  # never read: --init is refused first
    trace.write_text("name\n")
    rc = main(
        [
            "sched", "search-teacher", "--trace", str(trace), "--out", str(tmp_path / "s.json"),
            "--init", str(init), "--generations", "1", "--population", "2",
        ]
    )  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert err[-1] == (
        f"fleetmind: error: {init} is not a fleetmind linear scorer: expected a JSON object"
    )
    assert not any("Traceback" in ln for ln in err)
