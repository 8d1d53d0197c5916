"""``data.openb_variants`` and ``fleetmind sched variants``: the generator follows the published
variants' rules, is deterministic, and the frozen evaluation set regenerates to its recorded hashes."""

from __future__ import annotations

import csv
import io
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from fleetmind.cli import main
from fleetmind.data.openb import load_openb_nodes, load_openb_trace
from fleetmind.data.openb_variants import (
    generate_variant,
    pod_mix_stats,
    sha256_text,
    variant_name,
)

REPO = Path(__file__).resolve().parents[1]


def _rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def _res(r: dict[str, str]) -> tuple[str, ...]:
    return (r["cpu_milli"], r["memory_mib"], r["num_gpu"], r["gpu_milli"])


@pytest.mark.parametrize(
    ("kind", "level", "target"),
    [("gpushare", 40.0, "sharing_demand_share"), ("multigpu", 20.0, "multigpu_demand_share")],
)
def test_generated_pod_mix_matches_published(tmp_path, kind, level, target) -> None:
    """The statistic the level sets lands within 0.5 point of the published file's, and the
    statistics the rule leaves to sampling are within 4 generated standard deviations of it."""
    pub = pod_mix_stats(variant_name(kind, level))
    got = []
    for s in range(6):
        f = tmp_path / f"{s}.csv"
        f.write_text(generate_variant(kind, level, s))
        got.append(pod_mix_stats(f))
    assert abs(np.mean([g[target] for g in got]) - pub[target]) < 0.005
    free = ["gpu_pod_cpu_mean", "gpu_pods_8gpu_share"]
    if kind == "gpushare":
        free += ["sharing_gpu_milli_mean", "multigpu_demand_share"]
    for k in free:
        v = np.array([g[k] for g in got])
        assert v.std(ddof=1) > 0, k
        assert abs(pub[k] - v.mean()) < 4 * v.std(ddof=1), (k, pub[k], v)


def test_cpu_variant_keeps_gpu_pods_and_sets_the_cpu_share() -> None:
    src = _rows(Path(load_openb_trace("default").source).read_text())
    for level in (5.0, 30.0):  # fewer CPU-only pods than the source, then more (copies)
        rows = _rows(generate_variant("cpu", level, 3))
        gpu = [r for r in rows if r["num_gpu"] != "0"]
        assert Counter(map(_res, gpu)) == Counter(_res(r) for r in src if r["num_gpu"] != "0")
        n_cpu = len(rows) - len(gpu)
        assert n_cpu == round(level / 100 * len(gpu) / (1 - level / 100))
        src_cpu = Counter(_res(r) for r in src if r["num_gpu"] == "0")
        assert set(Counter(_res(r) for r in rows if r["num_gpu"] == "0")) <= set(src_cpu)
        assert [r["name"] for r in rows] == [f"openb-pod-{i:04d}" for i in range(len(rows))]


def test_gpuspec_variant_only_adds_feasible_specs() -> None:
    src = _rows(Path(load_openb_trace("default").source).read_text())
    rows = _rows(generate_variant("gpuspec", 25.0, 11))
    assert [_res(r) for r in rows] == [_res(r) for r in src]
    nodes = load_openb_nodes()
    spec = [r for r in rows if r["gpu_spec"]]
    n_gpu = sum(r["num_gpu"] != "0" for r in rows)
    assert all(r["num_gpu"] != "0" for r in spec)
    assert abs(len(spec) / n_gpu - 0.25) < 4 * np.sqrt(0.25 * 0.75 / n_gpu)
    for r in spec[:300]:
        ok = np.isin(nodes.model, r["gpu_spec"].split("|"))
        ok &= nodes.num_gpu >= int(r["num_gpu"])
        ok &= nodes.cpu_milli >= int(r["cpu_milli"])
        ok &= nodes.memory_mib >= int(r["memory_mib"])
        assert ok.any(), r


def test_generation_is_deterministic() -> None:
    a = generate_variant("multigpu", 30.0, 7)
    assert a == generate_variant("multigpu", 30.0, 7)
    assert a != generate_variant("multigpu", 30.0, 8)


def test_frozen_set_regenerates_to_its_hashes() -> None:
    from benchmarks.placement.frozen_set import generate, load_manifest

    m = load_manifest()
    assert len(m["eval_seeds"]) == 10 and len(m["traces"]) >= 8
    kinds = {e["kind"] for e in m["traces"]}
    assert kinds == {"cpu", "gpushare", "gpuspec", "multigpu"}
    for e in m["traces"]:
        assert sha256_text(generate(e)) == e["sha256"], e["name"]


def test_cli_variants_writes_file_and_rejects_bad_level(tmp_path, capsys) -> None:
    out = tmp_path / "v.csv"
    rc = main(
        [
            "sched",
            "variants",
            "--kind",
            "gpushare",
            "--level",
            "60",
            "--seed",
            "1",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    assert out.read_text() == generate_variant("gpushare", 60.0, 1)
    assert sha256_text(out.read_text()) in capsys.readouterr().out
    rc = main(
        ["sched", "variants", "--kind", "cpu", "--level", "100", "--seed", "1", "--out", str(out)]
    )
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("fleetmind: error: cpu level") and err.count("\n") == 1
