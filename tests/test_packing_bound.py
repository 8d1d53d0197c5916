"""envs.packing_bound: the configuration-LP bound on unplaceable GPU request."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from fleetmind.envs.core import ANY_GPU_MODEL
from fleetmind.envs.failure_causes import run_with_causes
from fleetmind.envs.packing_bound import fgd_run_bound, gpu_packing_bound
from tests.ppo_helpers import load_tiny


def bound(sizes: list[int], n_gpus: int, whole: int = 0) -> float:
    """Bound for sharing pods of ``sizes`` plus ``whole`` 1-GPU pods (milli-GPU failed)."""
    num = [1] * (len(sizes) + whole)
    milli = list(sizes) + [1000] * whole
    return gpu_packing_bound(np.array(num), np.array(milli), n_gpus).min_failed_milli


def exact_min_failed(sizes: list[int], n_gpus: int) -> int:
    """Brute force: every assignment of every item to a GPU or to 'left out'."""
    best = sum(sizes)
    for assign in itertools.product(range(n_gpus + 1), repeat=len(sizes)):
        load = [0] * n_gpus
        for s, g in zip(sizes, assign, strict=True):
            if g < n_gpus:
                load[g] += s
        if max(load) <= 1000:
            best = min(best, sum(sizes) - sum(load))
    return best


@pytest.mark.parametrize(
    ("sizes", "n_gpus", "whole", "expected"),
    [
        ([500] * 4, 2, 0, 0),  # pairs fill both GPUs
        ([600] * 4, 2, 0, 1200),  # no two fit together: two of them must fail
        ([], 2, 3, 1000),  # three whole GPUs asked of two
        ([810] * 3 + [160], 3, 0, 0),  # the small pod fits beside a large one
        ([810] * 3 + [250] * 2, 3, 0, 500),  # 250 never fits beside 810: the pair is lost
    ],
)
def test_bound_on_hand_cases(sizes, n_gpus, whole, expected) -> None:
    assert bound(sizes, n_gpus, whole) == pytest.approx(expected, abs=1e-6)


def test_bound_never_exceeds_the_exact_optimum() -> None:
    rng = np.random.default_rng(3)
    tight = 0
    for _ in range(40):
        n_gpus = int(rng.integers(1, 4))
        sizes = rng.choice([150, 250, 300, 450, 600, 700, 1000], size=int(rng.integers(1, 7)))
        exact = exact_min_failed(sizes.tolist(), n_gpus)
        b = gpu_packing_bound(np.ones(len(sizes), dtype=int), sizes, n_gpus).min_failed_milli
        assert 0 <= b <= exact + 1e-6
        tight += abs(b - exact) < 1e-6
    assert tight >= 30  # the LP bound is usually exact on instances this small


def test_multi_gpu_pods_count_their_gpus() -> None:
    # one 4-GPU pod and one 1-GPU pod on 4 GPUs: 1,000 milli must fail
    b = gpu_packing_bound(np.array([4, 1, 0]), np.array([1000, 1000, 0]), 4)
    assert b.request_milli == 5000
    assert b.min_failed_milli == pytest.approx(1000, abs=1e-6)
    assert b.min_failed_pct == pytest.approx(25.0, abs=1e-6)


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="same shape"):
        gpu_packing_bound(np.array([1, 1]), np.array([500]), 2)
    with pytest.raises(ValueError, match="n_gpus"):
        gpu_packing_bound(np.array([1]), np.array([500]), 0)
    with pytest.raises(ValueError, match="1..1000"):
        gpu_packing_bound(np.array([1]), np.array([1200]), 2)
    assert gpu_packing_bound(np.array([0]), np.array([0]), 2).min_failed_milli == 0.0


@pytest.mark.parametrize("policy", ["FGD", "BestFit", "Random"])
def test_real_policies_never_beat_the_bound(tmp_path, policy: str) -> None:
    nodes, trace = load_tiny(tmp_path)
    for seed in (0, 1, 2):
        _, b = run_with_causes(trace, policy, seed, nodes)
        lb = fgd_run_bound(trace, seed, nodes)
        assert lb.min_failed_pct > 0  # oversubscribed at 100 %: a non-trivial bound
        assert b.failed_pct >= lb.min_failed_pct - 1e-6


def test_gpu_models_keep_pods_on_their_models() -> None:
    # 2 GPUs of model 0 and 2 of model 1; three whole-GPU pods may use model 0 only
    num, milli, spec = np.array([1, 1, 1]), np.array([1000] * 3), np.array([1 << 0] * 3)
    models = {0: 2, 1: 2}
    assert gpu_packing_bound(num, milli, 4).min_failed_milli == pytest.approx(0, abs=1e-6)
    b = gpu_packing_bound(num, milli, 4, gpu_spec_mask=spec, model_gpus=models)
    assert b.min_failed_milli == pytest.approx(1000, abs=1e-6)
    # an unrestricted pod may go anywhere; a pod for a model with no GPU here always fails
    any_model = np.array([ANY_GPU_MODEL, 1 << 0, 1 << 5])
    b = gpu_packing_bound(
        np.array([2, 2, 1]),
        np.array([1000, 1000, 300]),
        4,
        gpu_spec_mask=any_model,
        model_gpus=models,
    )
    assert b.min_failed_milli == pytest.approx(300, abs=1e-6)
    with pytest.raises(ValueError, match="add up"):
        gpu_packing_bound(num, milli, 4, gpu_spec_mask=spec, model_gpus={0: 2, 1: 1})
    with pytest.raises(ValueError, match="one entry per pod"):
        gpu_packing_bound(num, milli, 4, gpu_spec_mask=spec[:2], model_gpus=models)


def test_models_only_tighten_the_bound(tmp_path) -> None:
    nodes, trace = load_tiny(tmp_path)  # 10 % of its GPU pods restrict the model
    for seed in (0, 1):
        loose = fgd_run_bound(trace, seed, nodes, gpu_models=False).min_failed_milli
        tight = fgd_run_bound(trace, seed, nodes).min_failed_milli
        assert tight >= loose - 1e-6
