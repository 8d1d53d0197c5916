"""``fleetmind sched variants`` reaches the ``--level`` it is given (or says it cannot), whatever the
source's own share; and a ``gpu_spec`` spelled as a missing value (``nan``) is no GPU-model
constraint, in the trace loader both simulation modes read through.

The ``nan`` spelling is the openb upstream's: ``README.upstream.md`` in the openb data folder, field
``gpu_spec``: "``nan`` means no GPU type constraints"; the FGD authors' converter
(https://github.com/hkust-adsl/kubernetes-scheduler-simulator/blob/master/data/pod_csv_to_yaml.py)
reads the CSV with ``pandas.read_csv`` and ``dfp.gpu_spec.fillna('')``, so every string pandas reads
as missing is no constraint there.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from dynamic_helpers import two_cluster_fleet

from fleetmind.cli import main
from fleetmind.data.errors import ConfigError
from fleetmind.data.openb import (
    ANY_GPU_MODEL,
    GPU_MODELS,
    gpu_model_id,
    gpu_spec_mask,
    load_openb_trace,
    nodes_from_arrays,
    trace_from_arrays,
)
from fleetmind.data.openb_variants import (
    generate_variant,
    pod_mix_stats,
    variant_share,
)
from fleetmind.envs.core import ClusterState, pods_from_trace
from fleetmind.envs.dynamic.jobs import build_jobs

HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time\n"


def _multi_heavy(tmp_path: Path) -> Path:
    """40 pods: 20 one-GPU pods (1000 milli) and 20 two-GPU pods: multi-GPU demand share 2/3."""
    rows = [f"p{i},4000,8192,1,1000,,{i}" for i in range(20)]
    rows += [f"q{i},8000,16384,2,1000,,{20 + i}" for i in range(20)]
    src = tmp_path / "multi.csv"
    src.write_text(HEADER + "\n".join(rows) + "\n")
    return src


@pytest.mark.parametrize("level", [0.0, 20.0, 66.0])
def test_multigpu_level_below_the_source_share_is_refused(tmp_path: Path, level: float) -> None:
    """Copies of multi-GPU pods only raise their share: a source at 66.67 % cannot give 20 %
    (before, the source came back unchanged at 66.67 %)."""
    src = _multi_heavy(tmp_path)
    with pytest.raises(ConfigError, match=r"66\.67 % of its GPU demand, above the multigpu level"):
        generate_variant("multigpu", level, 1, source=src)


@pytest.mark.parametrize("level", [66.7, 80.0])
def test_multigpu_level_at_or_above_the_source_share_is_reached(
    tmp_path: Path, level: float
) -> None:
    """A level within 0.05 point of the source's share, or above it, is met: within one appended
    two-GPU pod (2000 of >= 60,000 milli, 1.1 point) above the level, never below it."""
    src = _multi_heavy(tmp_path)
    got = variant_share("multigpu", generate_variant("multigpu", level, 1, source=src))
    assert level - 0.05 <= got < level + 1.2


def test_cli_multigpu_below_the_source_is_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = _multi_heavy(tmp_path)
    out = tmp_path / "out.csv"
    argv = ["sched", "variants", "--from", str(src), "--kind", "multigpu", "--level", "20"]
    assert main([*argv, "--seed", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fleetmind: error: ") and err.count("\n") == 1
    assert "66.67 %" in err and "level 20 %" in err and not out.exists()


def test_cli_success_line_reports_the_share_reached(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = _multi_heavy(tmp_path)
    out = tmp_path / "out.csv"
    argv = ["sched", "variants", "--from", str(src), "--kind", "multigpu", "--level", "75"]
    assert main([*argv, "--seed", "3", "--out", str(out)]) == 0
    line = capsys.readouterr().out
    m = re.search(r"multigpu share ([0-9.]+) % \(level 75\)", line)
    assert m, line
    assert float(m.group(1)) == pytest.approx(variant_share("multigpu", out.read_text()), abs=0.005)
    assert 75.0 <= float(m.group(1)) < 76.2


def test_published_multigpu_source_above_the_level_is_refused(shared_data: object) -> None:
    """The published ``multigpu40`` (40.24 %) at level 20, and ``default`` (7.29 %) at level 5."""
    with pytest.raises(
        ConfigError, match=r"40\.24 % of its GPU demand, above the multigpu level 20"
    ):
        generate_variant("multigpu", 20.0, 1, source="multigpu40")
    with pytest.raises(
        ConfigError, match=r"7\.29 % of its GPU demand, above the multigpu level 5 "
    ):
        generate_variant("multigpu", 5.0, 1, source="default")


@pytest.mark.parametrize("level", [0.0, 10.0, 33.0])
def test_gpuspec_from_a_constrained_source_sets_the_level(
    shared_data: object, tmp_path: Path, level: float
) -> None:
    """From the published ``gpuspec33`` (33.8 % of GPU pods constrained), the share of constrained
    GPU pods is the level: exactly 0 at 0, else within 4 binomial standard deviations (the
    per-pod draw at L/100). Before, the source's specs stayed on every pod not drawn: 33.8 % at
    level 0 and 56 % at level 33."""
    text = generate_variant("gpuspec", level, 1, source="gpuspec33")
    got = variant_share("gpuspec", text) / 100.0
    out = tmp_path / "v.csv"
    out.write_text(text)
    n_gpu = sum(1 for r in text.splitlines()[1:] if r.split(",")[3] != "0")
    p = level / 100.0
    assert abs(got - p) <= 4 * np.sqrt(p * (1 - p) / n_gpu)
    assert pod_mix_stats(out)["gpuspec_share"] == pytest.approx(got)


@pytest.mark.parametrize(
    ("source", "kind", "level"),
    [("cpu300", "cpu", 5.0), ("gpushare60", "gpushare", 20.0), ("gpushare60", "gpushare", 0.0)],
)
def test_cpu_and_gpushare_from_a_source_above_the_level_reach_it(
    shared_data: object, source: str, kind: str, level: float
) -> None:
    """``cpu`` draws fewer CPU-only pods and ``gpushare`` redraws the GPU pods, so a source above the
    level still gives the level (within 0.1 point)."""
    src_share = variant_share(kind, Path(load_openb_trace(source).source).read_text())
    assert src_share > level + 10
    got = variant_share(kind, generate_variant(kind, level, 2, source=source))
    assert abs(got - level) < 0.1


MISSING = ["nan", "NaN", " NAN ", "None", "null", "NA", "n/a", "<NA>", "-nan", "#N/A"]


def _nan_trace(tmp_path: Path) -> Path:
    rows = [f"m{i},1000,1024,1,500,{s},{i}" for i, s in enumerate(MISSING)]
    rows += [f"v{i},1000,1024,1,500,V100M16,{20 + i}" for i in range(2)]
    rows += ["c0,1000,1024,0,0,,30"]
    f = tmp_path / "nan_spec.csv"
    f.write_text(HEADER + "\n".join(rows) + "\n")
    return f


def test_missing_value_spellings_are_no_constraint_in_the_loader(tmp_path: Path) -> None:
    tr = load_openb_trace(_nan_trace(tmp_path))
    k = len(MISSING)
    assert tr.gpu_spec[:k].tolist() == [""] * k
    assert (tr.gpu_spec_mask[:k] == ANY_GPU_MODEL).all()
    assert tr.gpu_spec[k] == "V100M16"
    assert tr.gpu_spec_mask[k] == 1 << gpu_model_id("V100M16")
    assert "nan" not in GPU_MODELS and "NaN" not in GPU_MODELS
    assert gpu_spec_mask("nan") == ANY_GPU_MODEL
    built = trace_from_arrays([1000, 1000], [1024, 1024], [1, 1], [500, 500], ["nan", "T4"])
    assert built.gpu_spec.tolist() == ["", "T4"]
    assert built.gpu_spec_mask[0] == ANY_GPU_MODEL


def test_a_nan_spec_pod_fits_any_gpu_model_in_fgd_mode(tmp_path: Path) -> None:
    """On one T4 node, every ``nan`` pod is feasible; the ``V100M16`` pods are not (before, the
    ``nan`` pods asked for a GPU model named "nan" and fit nowhere)."""
    nodes = nodes_from_arrays([64000], [262144], [8], ["T4"])
    state = ClusterState(nodes.cpu_milli, nodes.memory_mib, nodes.num_gpu, nodes.model_id)
    pods = pods_from_trace(load_openb_trace(_nan_trace(tmp_path)))
    fits = [bool(state.feasible(p).any()) for p in pods]
    k = len(MISSING)
    assert fits == [True] * k + [False, False, True]


def test_a_nan_spec_pod_is_unconstrained_in_dynamic_mode(tmp_path: Path) -> None:
    jobs = build_jobs(
        load_openb_trace(_nan_trace(tmp_path)),
        two_cluster_fleet(),
        np.random.default_rng(0),
        target_util=0.5,
        n_jobs=200,
    )
    spec = jobs.gpu_spec_mask[jobs.num_gpu > 0]
    assert set(np.unique(spec).tolist()) == {ANY_GPU_MODEL, 1 << gpu_model_id("V100M16")}


def test_pod_mix_stats_does_not_count_nan_as_a_spec(tmp_path: Path) -> None:
    stats = pod_mix_stats(_nan_trace(tmp_path))
    assert stats["gpuspec_share"] == pytest.approx(2 / (len(MISSING) + 2))


def _old_levels(kinds: list[str], n: int, seed: int) -> list[float]:
    """The levels :func:`workload_specs` drew before a ``multigpu`` level had a floor: one uniform
    draw per workload over the kind's range, rounded to 0.5."""
    from fleetmind.training.recipes.paired import LEVEL_RANGE

    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        lo, hi = LEVEL_RANGE[kinds[i % len(kinds)]]
        out.append(round(float(rng.uniform(lo, hi)) * 2) / 2)
    return out


def test_training_workloads_from_a_source_above_the_multigpu_range_keep_its_share(
    tmp_path: Path,
) -> None:
    """Paired, distill and es training draw multigpu levels over 20-40 %; from a source already
    above that (here 66.67 %) the level is the source's own share, so the variant is the source's
    pods, renamed, no copy (before, every such workload was refused by the generator and the run
    stopped). The draws are made all the same: the random stream after them is unchanged."""
    from fleetmind.training.recipes.paired import variant_file, workload_specs

    src = _multi_heavy(tmp_path)
    rng = np.random.default_rng(5)
    specs = workload_specs([str(src)], ["cpu", "multigpu"], 6, 100, rng)
    source_rows = src.read_text().splitlines()[1:]
    for spec in specs[1::2]:
        text = variant_file(*spec, tmp_path / "variants").read_text()
        rows = text.splitlines()[1:]
        assert [r.split(",", 1)[1] for r in rows] == [r.split(",", 1)[1] for r in source_rows]
        assert variant_share("multigpu", text) == pytest.approx(200 / 3)
    old = _old_levels(["cpu", "multigpu"], 6, 5)
    assert [s[2] for s in specs] == [old[0], 66.66, old[2], 66.66, old[4], 66.66]
    assert all(20.0 <= old[i] <= 40.0 for i in (1, 3, 5))
    ref = np.random.default_rng(5)
    ref.uniform(0.0, 1.0, 6)
    assert rng.random() == ref.random()


def test_training_workloads_from_a_source_below_the_range_are_drawn_as_before(
    tmp_path: Path,
) -> None:
    """A source below the multigpu range (one two-GPU pod among 21: 9.09 %) keeps the drawn levels
    exactly, so seeded runs on such sources (``default``, 7.29 %) make the same workloads."""
    from fleetmind.training.recipes.paired import workload_specs

    rows = [f"p{i},4000,8192,1,1000,,{i}" for i in range(20)] + ["q0,8000,16384,2,1000,,20"]
    src = tmp_path / "low.csv"
    src.write_text(HEADER + "\n".join(rows) + "\n")
    kinds = ["cpu", "gpushare", "gpuspec", "multigpu"]
    specs = workload_specs([str(src)], kinds, 12, 7, np.random.default_rng(3))
    assert [s[2] for s in specs] == _old_levels(kinds, 12, 3)


def test_published_multigpu_sources_in_training_take_their_own_share(
    shared_data: object, tmp_path: Path
) -> None:
    """``--trace multigpu40`` (40.24 %), ``multigpu30`` (30.22 %), ``multigpu20`` (20.38 %) beside
    ``default``: each multigpu workload is generated (none refused), at least the source's share,
    and ``default``'s levels are the plain draws."""
    from fleetmind.data.openb_variants import lowest_multigpu_level
    from fleetmind.training.recipes.paired import variant_file, workload_specs

    floors = {"multigpu40": 40.24, "multigpu30": 30.22, "multigpu20": 20.37, "default": 7.29}
    assert {t: lowest_multigpu_level(t) for t in floors} == floors
    specs = workload_specs(list(floors), ["multigpu"], 16, 9, np.random.default_rng(11))
    first40 = next(s for s in specs if s[0] == "multigpu40")
    text = variant_file(*first40, tmp_path / "variants").read_text()
    assert variant_share("multigpu", text) == pytest.approx(40.24, abs=0.005)
    old = _old_levels(["multigpu"], 16, 11)
    for (source, _, level, _), drawn in zip(specs, old, strict=True):
        assert level == max(drawn, floors[source])


def test_cli_share_line_reads_float_spelled_integer_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """pandas writes integer columns that held a missing value as ``1.0``; the generator reads
    them as the trace loader does, and so does the share on the line printed (before, a traceback
    after the file was written)."""
    rows = [f"p{i},4000.0,8192.0,1.0,1000.0,,{i}.0" for i in range(20)]
    rows += [f"q{i},8000.0,16384.0,2.0,500.0,,{20 + i}.0" for i in range(5)]
    rows += ["c0,1000.0,512.0,0.0,0.0,,30.0"]
    src = tmp_path / "float.csv"
    src.write_text(HEADER + "\n".join(rows) + "\n")
    out = tmp_path / "out.csv"
    argv = ["sched", "variants", "--from", str(src), "--kind", "multigpu", "--level", "50"]
    assert main([*argv, "--seed", "2", "--out", str(out)]) == 0
    cap = capsys.readouterr()
    assert cap.err == ""
    m = re.search(r": (\d+) pods, multigpu share ([0-9.]+) % \(level 50\)", cap.out)
    assert m, cap.out
    assert 50.0 <= float(m.group(2)) < 50.0 + 100 * 1000 / 26000
    assert int(m.group(1)) == len(out.read_text().splitlines()) - 1 > 26
