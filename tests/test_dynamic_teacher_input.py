"""The dynamic-mode teacher file (``rl.dynamic_teacher.DynLinearScorer``) is checked as its loader
promises, like the fgd-mode ``LinearScorer`` (``tests/test_teacher*.py``): ``K`` and ``F`` are
integers >= 1, the weights finite, ``interact`` lists indices of the env's globals, and a file that
is not a JSON object is refused. Before, NaN weights loaded and every choice became candidate 0
(``argmax`` over NaN scores), an out-of-range ``interact`` index was an ``IndexError`` traceback at
the first decision, and ``K = 0`` an ``argmax`` of an empty sequence.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fleetmind import cli
from fleetmind.data.errors import ModelLoadError
from fleetmind.data.paths import MODELS_DIR
from fleetmind.envs.multicluster_env import N_GLOBAL_FEATURES
from fleetmind.rl.dynamic_teacher import DynLinearScorer

K, F = 4, 14


def fgd_dict(**changes: Any) -> dict[str, Any]:
    """The JSON object of the FGD scorer (``K = 4``, ``F = 14``) with ``changes`` applied."""
    return {**DynLinearScorer.fgd(K, F).to_dict(), **changes}


def write(tmp_path: Path, payload: Any, name: str = "t.json") -> Path:
    p = tmp_path / name
    p.write_text(payload if isinstance(payload, str) else json.dumps(payload))
    return p


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        ([1, 2], "expected a JSON object"),
        ('"fleetmind-dynamic-linear-scorer/1"', "expected a JSON object"),
        ("null", "expected a JSON object"),
        (fgd_dict(n_candidates=0), "'n_candidates' must be an integer >= 1, got 0"),
        (fgd_dict(n_candidates=-3), "'n_candidates' must be an integer >= 1, got -3"),
        (fgd_dict(n_candidates=True), "'n_candidates' must be an integer >= 1, got True"),
        (fgd_dict(n_candidates=16.7), "'n_candidates' must be an integer >= 1, got 16.7"),
        (fgd_dict(n_candidates="4"), "'n_candidates' must be an integer >= 1"),
        (fgd_dict(n_cand_features=0, weights=[]), "'n_cand_features' must be an integer >= 1"),
        (fgd_dict(n_cand_features=False, weights=[]), "'n_cand_features' must be an integer >= 1"),
        (fgd_dict(interact=[99, 8, 9]), r"interact must list global-feature indices in \[0, 12\)"),
        (fgd_dict(interact=[-1, 8, 9]), "interact must list global-feature indices"),
        (fgd_dict(interact=[0.5, 8, 9]), "interact must list global-feature indices"),
        (fgd_dict(interact=[True, 8, 9]), "interact must list global-feature indices"),
        (fgd_dict(interact="abc"), "'interact' must be a list of integers"),
    ],
)
def test_load_refuses_wrong_shapes_and_counts(tmp_path: Path, payload: Any, match: str) -> None:
    with pytest.raises(ModelLoadError, match=match) as exc:
        DynLinearScorer.load(write(tmp_path, payload))
    assert "is not a fleetmind dynamic linear scorer" in str(exc.value)
    assert "\n" not in str(exc.value)


def test_load_refuses_non_finite_weights(tmp_path: Path) -> None:
    d = fgd_dict()
    w = list(d["weights"])
    w[3] = float("nan")  # json.dumps writes NaN, and json.loads reads it back
    with pytest.raises(ModelLoadError, match="weights must be finite numbers; weight 3 is nan"):
        DynLinearScorer.load(write(tmp_path, fgd_dict(weights=w)))
    # Python's json reads a number beyond the double range as inf (RFC 8259 section 6 leaves it
    # to the implementation); the message says so
    text = json.dumps(d).replace("1.0", "1e400", 1)
    with pytest.raises(ModelLoadError, match=r"weight 1 is inf \(a JSON number beyond"):
        DynLinearScorer.load(write(tmp_path, text))
    w[3] = float("-inf")
    with pytest.raises(ModelLoadError, match="weight 3 is -inf"):
        DynLinearScorer.load(write(tmp_path, fgd_dict(weights=w)))


def test_constructor_refuses_what_load_refuses() -> None:
    w = DynLinearScorer.fgd(K, F).weights
    for k in (0, -1, True, 4.0, 16.7):
        with pytest.raises(ValueError, match="n_candidates must be an integer >= 1"):
            DynLinearScorer(w, k, F)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n_cand_features must be an integer >= 1"):
        DynLinearScorer(np.zeros(0), K, 0)
    for g in (N_GLOBAL_FEATURES, -1, 1.0, False):
        with pytest.raises(ValueError, match="interact must list global-feature indices"):
            DynLinearScorer(w, K, F, (g, 8, 9))  # type: ignore[arg-type]
    bad = w.copy()
    bad[0] = np.nan
    with pytest.raises(ValueError, match="weights must be finite numbers; weight 0 is nan"):
        DynLinearScorer(bad, K, F)
    # numpy integers are integers
    s = DynLinearScorer(w, np.int64(K), np.int32(F), (np.int64(4), 8, 9))  # type: ignore[arg-type]
    assert (s.n_candidates, s.n_cand_features, s.interact) == (K, F, (4, 8, 9))


def test_valid_files_still_load_and_choose(tmp_path: Path) -> None:
    # 16.0 is the count 16 (a JSON writer that prints every number as a float)
    d = fgd_dict(n_candidates=float(K), n_cand_features=float(F))
    s = DynLinearScorer.load(write(tmp_path, d))
    assert (s.n_candidates, s.n_cand_features) == (K, F)
    assert isinstance(s.n_candidates, int) and isinstance(s.n_cand_features, int)
    loc = DynLinearScorer.locality(K, F)
    back = DynLinearScorer.load(loc.save(tmp_path / "loc.json"))
    assert back.to_dict() == loc.to_dict()
    # FGD's scorer picks the row flagged is_fgd_choice (feature 1), not row 0
    obs = np.zeros(K * F + N_GLOBAL_FEATURES)
    obs[2 * F + 1] = 1.0
    assert s(obs, np.ones(K, dtype=bool)) == 2
    released = MODELS_DIR / "placement-dynamic" / "teacher.json"
    if released.is_file():
        DynLinearScorer.load(released)


def test_cli_dynamic_evaluate_with_nan_teacher_is_a_one_line_error(
    shared_data, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = MODELS_DIR / "placement-dynamic" / "metadata.json"
    if not src.is_file():
        pytest.skip("no released dynamic model")
    folder = tmp_path / "dyn"
    folder.mkdir()
    shutil.copy(src, folder / "metadata.json")
    d = fgd_dict()
    d["weights"][0] = float("nan")
    write(folder, d, "teacher.json")
    argv = ["sched", "evaluate", "--trace", "multigpu20", "--mode", "dynamic", "--seeds", "1"]
    assert cli.main([*argv, "--model", str(folder), "--policies", "teacher"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fleetmind: error: ") and err.count("\n") == 1
    assert "weights must be finite numbers; weight 0 is nan" in err


def test_check_env_refuses_another_k_or_f() -> None:
    s = DynLinearScorer.fgd(16, 14)
    assert s.check_env(16, False, "t.json") is s
    with pytest.raises(ModelLoadError, match="t.json: the teacher scores K=16 candidates of F=14"):
        s.check_env(8, False, "t.json")
    with pytest.raises(ModelLoadError, match="the model's env has K=16, F=18"):
        s.check_env(16, True, "t.json")
    assert DynLinearScorer.fgd(16, 18).check_env(16, True, "t.json").n_cand_features == 18


def test_cli_dynamic_evaluate_with_teacher_of_another_k_is_a_one_line_error(
    shared_data, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # before, the first decision raised ValueError (observation width) as a traceback
    src = MODELS_DIR / "placement-dynamic" / "metadata.json"
    if not src.is_file():
        pytest.skip("no released dynamic model")
    folder = tmp_path / "dyn"
    folder.mkdir()
    shutil.copy(src, folder / "metadata.json")
    k = json.loads(src.read_text())["env_kwargs"].get("n_candidates", 16)
    DynLinearScorer.fgd(k + 1, F).save(folder / "teacher.json")
    argv = ["sched", "evaluate", "--trace", "multigpu20", "--mode", "dynamic", "--seeds", "1"]
    assert cli.main([*argv, "--model", str(folder), "--policies", "teacher"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fleetmind: error: ") and err.count("\n") == 1
    assert f"the teacher scores K={k + 1} candidates" in err
