"""``GpuPlacementEnv(workload_seeds=...)``: every bad value is a short ``ConfigError``.

A 0-d numpy array (``np.array(5)``) raised numpy's ``TypeError: iteration over a 0-d array``, and a
bad value in a long array put the whole list into the message (888,939 characters for 100,000
seeds). Now a 0-d array is refused as "not a sequence", and only the first bad value and its index
are named.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fleetmind.data.errors import ConfigError
from fleetmind.data.openb import load_openb_nodes
from fleetmind.envs.gpu_placement_env import GpuPlacementEnv

NODES = """sn,cpu_milli,memory_mib,gpu,model
n1,96000,524288,8,V100M32
n2,64000,262144,2,T4
"""


def _env(tmp_path: Path, seeds: object) -> GpuPlacementEnv:
    (tmp_path / "nodes.csv").write_text(NODES)
    # the trace path is read at the first reset; the seeds are checked in the constructor
    return GpuPlacementEnv(
        traces=tmp_path / "pods.csv",
        nodes=load_openb_nodes(tmp_path / "nodes.csv"),
        workload_seeds=seeds,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("seeds", [np.array(5), np.array(5.0), np.int64(5), 5])
def test_a_scalar_or_0d_array_is_a_config_error(tmp_path: Path, seeds: object) -> None:
    with pytest.raises(ConfigError, match="a sequence of integers >= 0, got"):
        _env(tmp_path, seeds)


@pytest.mark.parametrize(
    ("bad", "shown"),
    [(-3, "-3"), (2.5, "2.5"), (True, "True")],
)
def test_a_long_bad_array_names_only_the_first_bad_value(
    tmp_path: Path, bad: object, shown: str
) -> None:
    seeds = list(np.random.default_rng(0).integers(10**6, 10**7, size=100_000))
    seeds[41_234] = bad
    seeds[90_000] = -7  # a later bad value is not reported
    arr = np.array(seeds, dtype=object)
    with pytest.raises(ConfigError) as err:
        _env(tmp_path, arr)
    msg = str(err.value)
    assert msg == f"workload_seeds must be integers >= 0, got {shown} at index 41234", msg[:300]


def test_a_2d_array_and_a_long_string_stay_short(tmp_path: Path) -> None:
    for seeds in (np.arange(200_000).reshape(2, -1), "7" * 100_000, b"x" * 100_000):
        with pytest.raises(ConfigError, match="a sequence of integers") as err:
            _env(tmp_path, seeds)
        assert len(str(err.value)) < 200, str(err.value)[:300]


def test_good_arrays_still_pass(tmp_path: Path) -> None:
    env = _env(tmp_path, np.arange(100_000, dtype=np.uint32))
    assert env.workload_seeds is not None and len(env.workload_seeds) == 100_000
    assert env.workload_seeds[-1] == 99_999 and type(env.workload_seeds[-1]) is int


@pytest.mark.parametrize("seeds", [np.arange(6).reshape(2, 3), np.zeros((3, 1), dtype=np.int64)])
def test_a_2d_array_message_is_one_line(tmp_path: Path, seeds: np.ndarray) -> None:
    """numpy's repr of a 2-D array spans lines; the error names it on one."""
    with pytest.raises(ConfigError, match="a sequence of integers >= 0, got") as err:
        _env(tmp_path, seeds)
    assert "\n" not in str(err.value), str(err.value)


def test_torch_tensors(tmp_path: Path) -> None:
    """A 0-d tensor is refused as a scalar (not torch's ``TypeError: iteration over a 0-d
    tensor``), a 2-D one on one line, and a 1-D integer one gives Python ints."""
    torch = pytest.importorskip("torch")
    for seeds in (torch.tensor(5), torch.arange(6).reshape(2, 3)):
        with pytest.raises(ConfigError, match="a sequence of integers >= 0, got") as err:
            _env(tmp_path, seeds)
        assert "\n" not in str(err.value), str(err.value)
    with pytest.raises(ConfigError, match="got False at index 0"):
        _env(tmp_path, torch.tensor([False, True]))
    env = _env(tmp_path, torch.arange(3, 6))
    assert env.workload_seeds == [3, 4, 5] and all(type(s) is int for s in env.workload_seeds)
