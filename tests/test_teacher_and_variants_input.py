"""Bad input to the placement teacher files and to ``sched variants`` is one error line, not a
traceback or a silent wrong result.

Teacher files (``rl.teacher``): ``n_candidates`` / ``n_cand_features`` must be integers >= 1 and the
weights finite. A weight of ``1e400`` (read by ``json`` as infinity) or NaN made every score NaN,
so the greedy choice fell to candidate 0: the teacher silently *was* FGD, ``sched train
--teacher`` cloned FGD and ``sched search-teacher --init`` died in an assertion. A teacher whose
``K`` / ``F`` are not the env's read the wrong features.

Variants (``data.openb_variants``): the source trace is read with the trace loader's own field
checks (``data.openb._int_field``), so a source ``load_openb_trace`` refuses (a ``1e400`` or
``-100`` field, ``num_gpu`` 9) is refused before a variant of it is written, and a ``gpuspec``
variant of a source without GPU pods is an error like a ``cpu`` variant of one (docs/ppo.md,
"Untouched traces").
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from placement_helpers import NODES, PODS

from fleetmind.cli import main
from fleetmind.data.errors import DataError, ModelLoadError
from fleetmind.data.openb import load_openb_nodes, load_openb_trace
from fleetmind.data.openb_variants import generate_variant, pod_mix_stats
from fleetmind.rl.named_policies import run_teacher_fgd
from fleetmind.rl.teacher import LinearScorer, StrandPenaltyScorer, load_teacher

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

K, F = 16, 18


def _linear(**over: object) -> dict:
    d = LinearScorer.fgd(K, F).to_dict()
    d.update(over)
    return d


def _write_json(path: Path, d: dict, first_weight: str | None = None) -> Path:
    text = json.dumps(d)
    if first_weight is not None:  # a literal json.dumps cannot write (1e400)
        text = text.replace('"weights": [0.0', f'"weights": [{first_weight}', 1)
        assert first_weight in text
    path.write_text(text + "\n")
    return path


# ------------------------------------------------------------------------------ teacher files
@pytest.mark.parametrize("bad", [0, -3, 16.7, True, "16", None])
@pytest.mark.parametrize("field", ["n_candidates", "n_cand_features"])
def test_a_count_that_is_not_an_integer_of_at_least_1_is_refused(
    tmp_path: Path, field: str, bad: object
) -> None:
    p = _write_json(tmp_path / "t.json", _linear(**{field: bad}))
    for load in (LinearScorer.load, load_teacher):
        with pytest.raises(ModelLoadError, match=f"'{field}' must be an integer >= 1") as err:
            load(p)
        assert str(p) in str(err.value) and "\n" not in str(err.value)
    strand = {"format": StrandPenaltyScorer.FORMAT, "alpha": 1.0, "base": _linear(**{field: bad})}
    with pytest.raises(ModelLoadError, match=f"'{field}' must be an integer >= 1"):
        load_teacher(_write_json(tmp_path / "s.json", strand))


def test_an_integral_float_count_still_loads(tmp_path: Path) -> None:
    s = LinearScorer.load(_write_json(tmp_path / "t.json", _linear(n_candidates=16.0)))
    assert s.n_candidates == 16 and isinstance(s.n_candidates, int)


@pytest.mark.parametrize("weight", ["1e400", "-1e400", "NaN", "Infinity"])
def test_non_finite_weights_are_refused(tmp_path: Path, weight: str) -> None:
    p = _write_json(tmp_path / "t.json", _linear(), first_weight=weight)
    for load in (LinearScorer.load, load_teacher):
        with pytest.raises(ModelLoadError, match="weights must be finite numbers; weight 0 is"):
            load(p)
    strand = {"format": StrandPenaltyScorer.FORMAT, "alpha": 1.0, "base": _linear()}
    sp = _write_json(tmp_path / "s.json", strand, first_weight=weight)
    with pytest.raises(ModelLoadError, match="weights must be finite numbers"):
        load_teacher(sp)
    with pytest.raises(ValueError, match="finite"):
        LinearScorer(np.full(3 * F, np.nan), K, F)


def test_evaluate_teacher_with_bad_metadata_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/placement.md: a model whose metadata has a wrong field prints ``fleetmind: error:``
    and exits 2."""
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    argv = ["sched", "evaluate", "--trace", str(tmp_path / "pods.csv"), "--seeds", "1"]
    argv += ["--nodes", str(tmp_path / "nodes.csv"), "--policies", "teacher", "--model"]
    k0 = tmp_path / "k0"
    k0.mkdir()
    _write_json(k0 / "teacher.json", _linear(n_candidates=0))
    inf = tmp_path / "inf"
    inf.mkdir()
    _write_json(inf / "teacher.json", _linear(), first_weight="1e400")
    for folder, what in ((k0, "'n_candidates' must be an integer >= 1"), (inf, "finite")):
        assert main([*argv, str(folder)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith("fleetmind: error: ") and what in err[-1]
        assert not any("Traceback" in ln for ln in err)


def test_search_teacher_init_with_infinite_weight_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    init = _write_json(tmp_path / "init.json", _linear(), first_weight="1e400")
    trace = tmp_path / "t.csv"  # never read: --init is refused first
    trace.write_text("name\n")
    rc = main(
        [
            "sched", "search-teacher", "--trace", str(trace), "--out", str(tmp_path / "s.json"),
            "--init", str(init), "--generations", "1", "--population", "2",
        ]
    )  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and "weights must be finite numbers" in err[-1]
    assert not any("Traceback" in ln for ln in err)


def test_a_teacher_for_another_feature_width_is_refused(tmp_path: Path) -> None:
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    trace = load_openb_trace(tmp_path / "pods.csv")
    nodes = load_openb_nodes(tmp_path / "nodes.csv")
    narrow = LinearScorer.fgd(K, F - 1).save(tmp_path / "f17.json")
    with pytest.raises(ModelLoadError, match=r"F=17 features; the env has K=16, F=18"):
        run_teacher_fgd(trace, narrow, 1, nodes)
    ok = LinearScorer.fgd(K, F).save(tmp_path / "f18.json")
    assert run_teacher_fgd(trace, ok, 1, nodes).policy == "teacher"


# ----------------------------------------------------------------------------------- variants
HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time\n"
GOOD = "a,1000,1024,0,0,0\nb,2000,2048,1,500,1\nc,4000,4096,2,1000,2\n"


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("d,1e400,1024,1,500,3", r"field 'cpu_milli' must be a non-negative integer, got '1e400'"),
        ("d,1e30,1024,1,500,3", r"field 'cpu_milli' is too large: '1e30'"),
        ("d,1000,1024,1,-100,3", r"field 'gpu_milli' must be a non-negative integer, got '-100'"),
        ("d,1000,nan,1,500,3", r"field 'memory_mib' must be a non-negative integer, got 'nan'"),
        ("d,1000,1024,9,1000,3", r"field 'num_gpu' must be 0..8, got 9"),
        ("d,1000,1024,1,0,3", r"field 'gpu_milli' is 0 for a pod with num_gpu > 0"),
        ("d,1000,1024,1,500,inf", r"field 'creation_time' is infinite"),
        ("d,1000,1024,1,500", r"expected 6 fields, got 5"),
        (" ,1000,1024,1,500,3", r"field 'name' is empty"),
    ],
)
def test_variant_source_is_checked_as_the_trace_loader_checks_it(
    tmp_path: Path, row: str, message: str
) -> None:
    src = tmp_path / "src.csv"
    src.write_text(HEADER + GOOD + "\n" + row + "\n")  # the blank line counts, as in the loader
    full = rf"src.csv: row 5 \(line 6\): {message}"
    with pytest.raises(DataError, match=full):
        load_openb_trace(src)  # the loader's own words ...
    for kind in ("cpu", "gpushare", "gpuspec", "multigpu"):
        with pytest.raises(DataError, match=full):  # ... are the variant generator's
            generate_variant(kind, 20.0, 1, source=src)
    with pytest.raises(DataError, match=full):
        pod_mix_stats(src)


def test_cli_variants_of_an_overflowing_field_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "src.csv"
    src.write_text(HEADER + GOOD + "d,1e400,1024,1,500,3\n")
    out = tmp_path / "out.csv"
    argv = ["sched", "variants", "--from", str(src), "--kind", "cpu", "--level", "20"]
    assert main([*argv, "--seed", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("fleetmind: error: ") and "'cpu_milli'" in err[-1]
    assert not any("Traceback" in ln for ln in err) and not out.exists()


def test_gpuspec_variant_needs_gpu_pods(tmp_path: Path) -> None:
    cpu_only = tmp_path / "cpuonly.csv"
    cpu_only.write_text(HEADER + "a,1000,1024,0,0,0\nb,2000,2048,0,0,1\n")
    for level in (0.0, 20.0):
        with pytest.raises(DataError, match=r"cpuonly.csv: no GPU pods to constrain"):
            generate_variant("gpuspec", level, 1, source=cpu_only)
    empty = tmp_path / "empty.csv"
    empty.write_text(HEADER)
    for kind in ("cpu", "gpushare", "gpuspec", "multigpu"):
        with pytest.raises(DataError, match=r"empty.csv: no pod rows"):
            generate_variant(kind, 20.0, 1, source=empty)
    ok = tmp_path / "ok.csv"
    ok.write_text(HEADER + GOOD)
    rows = generate_variant("gpuspec", 100.0, 1, source=ok).splitlines()
    assert rows[0].endswith(",gpu_spec") and len(rows) == 4
