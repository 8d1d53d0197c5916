"""A teacher searched with the penalty features (``F = 20``) evaluates as a named policy.

``fleetmind sched train --teacher cem --penalty-features`` runs its CEM search on
``GpuPlacementEnv(penalty_features=True)`` and saves the teacher at that width (``teacher.json``,
``n_cand_features: 20``). ``run_teacher_fgd`` (``sched evaluate --policies teacher``) built the
plain ``F = 18`` env whatever the teacher, so such a teacher was refused ("K/F not the env's")
and, before that check, failed on a reshape. It now gets the env of its width; any other width is
still refused. Columns 18 and 19 are the strand teacher's two signals scaled by
``STRAND_FEATURE_SCALE`` and ``SCARCITY_FEATURE_SCALE`` (``envs/candidates.py``, docs/ppo.md "The
penalties as observation features"), which the placement test below relies on.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from ppo_helpers import load_tiny, write_tiny

from fleetmind.cli import main
from fleetmind.data.errors import ModelLoadError
from fleetmind.envs.candidates import (
    N_CAND_FEATURES,
    N_PENALTY_FEATURES,
    SCARCITY_FEATURE_SCALE,
    STRAND_FEATURE_SCALE,
)
from fleetmind.rl.named_policies import run_teacher_fgd
from fleetmind.rl.teacher import FGD_CHOICE_FEATURE, LinearScorer, StrandPenaltyScorer

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

K = 8
F = N_CAND_FEATURES + N_PENALTY_FEATURES
ALPHA = BETA = 4.0


def _penalty_linear() -> LinearScorer:
    """FGD minus ``ALPHA`` per stranded GPU and ``BETA`` times the scarcity, read from columns 18
    and 19: the linear form of ``StrandPenaltyScorer(FGD, ALPHA, BETA)``."""
    w = np.zeros(3 * F)
    w[FGD_CHOICE_FEATURE] = 1.0
    w[N_CAND_FEATURES] = -ALPHA * STRAND_FEATURE_SCALE
    w[N_CAND_FEATURES + 1] = -BETA * SCARCITY_FEATURE_SCALE
    return LinearScorer(w, K, F)


def test_a_20_feature_teacher_places_by_the_penalty_columns(tmp_path: Path) -> None:
    nodes, trace = load_tiny(tmp_path)
    wide = _penalty_linear().save(tmp_path / "wide.json")
    strand = StrandPenaltyScorer(LinearScorer.fgd(K, N_CAND_FEATURES), ALPHA, BETA)
    strand_file = strand.save(tmp_path / "strand.json")
    fgd_file = LinearScorer.fgd(K, N_CAND_FEATURES).save(tmp_path / "fgd.json")
    moved = 0
    for seed in (1, 2, 3):
        got = run_teacher_fgd(trace, wide, seed, nodes)
        # reading the penalties from the observation, it places exactly as the strand teacher
        # that reads them from the env
        ref = run_teacher_fgd(trace, strand_file, seed, nodes)
        assert got.unallocated == ref.unallocated and got.extra == ref.extra
        np.testing.assert_array_equal(got.allocated_milli, ref.allocated_milli)
        fgd = run_teacher_fgd(trace, fgd_file, seed, nodes)
        moved += int(got.extra != fgd.extra or got.unallocated != fgd.unallocated)
    assert moved > 0  # the penalty columns changed choices: they are not all zero


def test_a_strand_teacher_with_a_20_feature_base_evaluates(tmp_path: Path) -> None:
    nodes, trace = load_tiny(tmp_path)
    base = LinearScorer.fgd(K, N_CAND_FEATURES)
    wide = StrandPenaltyScorer(base.widen(F), ALPHA, BETA).save(tmp_path / "w.json")
    narrow = StrandPenaltyScorer(base, ALPHA, BETA).save(tmp_path / "n.json")
    got, ref = (run_teacher_fgd(trace, f, 1, nodes) for f in (wide, narrow))
    assert got.unallocated == ref.unallocated and got.extra == ref.extra


@pytest.mark.parametrize("width", [N_CAND_FEATURES - 1, N_CAND_FEATURES + 1, F + 1])
def test_any_other_width_is_still_refused(tmp_path: Path, width: int) -> None:
    nodes, trace = load_tiny(tmp_path)
    bad = LinearScorer.fgd(K, width).save(tmp_path / "bad.json")
    with pytest.raises(ModelLoadError, match=rf"F={width} features; the env has K={K}, F=18"):
        run_teacher_fgd(trace, bad, 1, nodes)


def test_sched_evaluate_teacher_of_a_penalty_feature_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``sched evaluate --policies teacher --model FOLDER`` with the ``teacher.json`` a
    ``--teacher cem --penalty-features`` run writes (``F = 20``)."""
    nodes, pods = write_tiny(tmp_path)
    model = tmp_path / "model"
    _penalty_linear().save(model / "teacher.json")
    out = tmp_path / "res.json"
    argv = ["sched", "evaluate", "--trace", str(pods), "--nodes", str(nodes), "--seeds", "1"]
    argv += ["--policies", "teacher", "--model", str(model), "--json", str(out)]
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "teacher" in json.loads(out.read_text())["policies"]


@pytest.mark.parametrize("penalty_features", [True, False])
def test_training_takes_a_penalty_run_teacher_back_only_with_penalty_features(
    tmp_path: Path, penalty_features: bool
) -> None:
    """``sched train --teacher <a --penalty-features run's teacher.json>`` (F = 20) is the run's
    own width with ``--penalty-features`` and is taken as it is; without, it is refused."""
    from fleetmind.data.errors import ConfigError
    from fleetmind.training.recipes.fgd import _make_teacher
    from fleetmind.training.recipes.settings import FgdArgs

    w = np.random.default_rng(0).normal(size=3 * F)
    path = tmp_path / "teacher.json"
    LinearScorer(w, K, F).save(path)
    (tmp_path / "run" / "model").mkdir(parents=True)
    args = FgdArgs(teacher=str(path), n_candidates=K, penalty_features=penalty_features)
    if not penalty_features:
        with pytest.raises(ConfigError, match="F=20"):
            _make_teacher(args, {}, tmp_path / "run", {})
        return
    scorer = _make_teacher(args, {}, tmp_path / "run", {})
    assert scorer.n_cand_features == F
    np.testing.assert_array_equal(scorer.weights, w)
    saved = json.loads((tmp_path / "run" / "model" / "teacher.json").read_text())
    assert saved["n_cand_features"] == F
