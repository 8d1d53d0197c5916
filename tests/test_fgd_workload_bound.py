"""fgd mode refuses a workload that would pass ``MAX_WORKLOAD_PODS`` pods (docs/placement.md, fgd
mode step 2): a legal trace of tiny GPU shares (``gpu_milli`` 1) on the openb node list's 6,212 GPUs
needs about 8 million draws, and used to fill gigabytes of memory for minutes with no output."""

from __future__ import annotations

import hashlib

import pytest

from fleetmind.data.errors import DataError
from fleetmind.data.openb import trace_from_arrays
from fleetmind.envs import fgd_mode
from fleetmind.envs.fgd_mode import MAX_WORKLOAD_PODS, build_workload

OPENB_GPUS = 6212  # GPUs of openb_node_list_gpu_node.csv (1,213 nodes)


def _tiny(n: int = 20, milli: int = 1):
    return trace_from_arrays([1000] * n, [1024] * n, [1] * n, [milli] * n, name="tiny")


def test_tiny_gpu_shares_are_refused_at_once_in_one_line() -> None:
    with pytest.raises(DataError) as err:
        build_workload(_tiny(), 1213, OPENB_GPUS * 1000, seed=42)
    message = str(err.value)
    assert "\n" not in message
    assert message == (
        "trace tiny: its mean GPU request is 1.00 milli per pod, so reaching 8,075,600 GPU milli"
        f" would take about 8,075,600 pods; fgd mode builds at most {MAX_WORKLOAD_PODS:,} (use"
        " pods that ask for more GPU, or fewer nodes)"
    )


def test_the_bound_also_holds_while_drawing(monkeypatch: pytest.MonkeyPatch) -> None:
    # one 1000-milli pod and nine 1-milli pods (mean 100.9 milli) towards 26,000 milli: the mean
    # says about 258 pods, under a bound of 270; seed 0 draws 226 pods, seed 6 would draw 307
    monkeypatch.setattr(fgd_mode, "MAX_WORKLOAD_PODS", 270)
    trace = trace_from_arrays([1000] * 10, [1024] * 10, [1] * 10, [1000] + [1] * 9, name="mixed")
    assert len(build_workload(trace, 1, 20_000, seed=0).trace) == 226
    with pytest.raises(DataError, match="fgd mode builds at most 270 "):
        build_workload(trace, 1, 20_000, seed=6)


def _digest(workload: fgd_mode.FgdWorkload) -> tuple[int, int, str]:
    """``(pods, originals, sha256 of the arrival-order pod names and the node priority)``."""
    names = ",".join(workload.trace.pod_names.tolist())
    text = names + "|" + ",".join(map(str, workload.priority.tolist()))
    return len(workload.trace), workload.n_original, hashlib.sha256(text.encode()).hexdigest()


def _mixed(n: int = 50):
    """``n`` pods of 100/250/500/1000 milli, every 7th of them on two whole GPUs."""
    ng = [2 if i % 7 == 0 else 1 for i in range(n)]
    milli = [1000 if g > 1 else (100, 250, 500, 1000)[i % 4] for i, g in enumerate(ng)]
    return trace_from_arrays([1000] * n, [1024] * n, ng, milli, name="mixed")


# Computed with envs/fgd_mode.py as it was before the bound (commit 1fd4104, run from a scratch
# copy of that tree): the bound must only refuse, never change a workload it lets through, and
# the seeded draws (shuffle, resampled copies, removals, node priority) are those of the FGD
# authors' procedure that fgd mode reproduces (docs/placement.md, fgd mode).
BEFORE_THE_BOUND = {
    "tiny, resampled up": (
        lambda: build_workload(_tiny(50, 500), 4, 4 * 8 * 1000, seed=7),
        (83, 50, "4e462154679fc1258714cd052c268d675b3d742cda3428d5b411195a3e5987e5"),
    ),
    "mixed, resampled up": (
        lambda: build_workload(_mixed(), 6, 6 * 8 * 1000, seed=7),
        (99, 50, "5439fb15e9ed23fa71698869c184e567f8d479395677e13858ed7115fc602f1e"),
    ),
    "mixed, pods removed": (
        lambda: build_workload(_mixed(), 2, 2 * 8 * 1000, seed=3),
        (26, 26, "a92c85eb4124489e458d9fc540f212a122afce660f95d075a9362c45f60d5834"),
    ),
}


@pytest.mark.parametrize("case", sorted(BEFORE_THE_BOUND))
def test_workloads_under_the_bound_are_unchanged(case: str) -> None:
    build, expected = BEFORE_THE_BOUND[case]
    assert _digest(build()) == expected
