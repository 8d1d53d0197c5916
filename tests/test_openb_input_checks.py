"""openb files that would mislead a run: multi-GPU pods with a fractional share, node lists with
extra fields or a node twice, and a ``cpu`` variant of a trace without GPU pods.

Upstream behaviour behind the expectations: the FGD simulator (hkust-adsl/kubernetes-scheduler-
simulator; ``/work/shared/references/fgd-setup-and-policies.md``, "Pods") gives a pod of several
GPUs whole GPUs, so its GPU demand is ``num_gpu x 1000`` whatever ``gpu_milli`` says; its node
list has one row per node, keyed by ``sn``; the published ``cpu*`` variants keep every GPU pod of
``default`` and add CPU-only pods as a share of them (``data/openb_variants.py``).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from fleetmind.data.errors import DataError
from fleetmind.data.openb import (
    TraceWarning,
    load_openb_nodes,
    load_openb_trace,
    nodes_from_arrays,
)
from fleetmind.data.openb_variants import generate_variant
from fleetmind.envs.core import ClusterState, pods_from_trace

HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
NODES = "sn,cpu_milli,memory_mib,gpu,model\n"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# ------------------------------------------------------------------- multi-GPU pods: whole GPUs
def test_multi_gpu_pods_below_a_whole_gpu_are_read_as_whole_gpus(tmp_path: Path) -> None:
    text = HEADER + "a,1000,1024,2,500\nb,1000,1024,1,500\nc,1000,1024,4,250\nd,1000,1024,2,1000\n"
    with pytest.warns(TraceWarning) as seen:
        trace = load_openb_trace(_write(tmp_path, "pods.csv", text))
    msgs = [str(w.message) for w in seen]
    assert len(msgs) == 1 and "2 multi-GPU pod(s) ask for gpu_milli below 1000" in msgs[0]
    assert "row 1 (line 2), num_gpu 2, gpu_milli 500" in msgs[0]
    assert trace.gpu_milli.tolist() == [1000, 500, 1000, 1000]  # the sharing pod keeps its share
    # what arrives is what is held: place every pod on an empty node and compare
    nodes = nodes_from_arrays([64_000] * 4, [262_144] * 4, [8] * 4, ["T4"] * 4)
    state = ClusterState.from_openb(nodes)
    for i, pod in enumerate(pods_from_trace(trace)):
        state.place(pod, i)
    assert state.allocated_gpu_milli == int(trace.gpu_request.sum()) == 2000 + 500 + 4000 + 2000


def test_traces_without_such_pods_load_silently(tmp_path: Path) -> None:
    text = HEADER + "a,1000,1024,2,1000\nb,1000,1024,1,300\nc,1000,1024,0,0\n"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trace = load_openb_trace(_write(tmp_path, "pods.csv", text))
    assert trace.gpu_milli.tolist() == [1000, 300, 0]


# ------------------------------------------------------------------------------- node lists
def test_node_rows_need_exactly_the_header_fields(tmp_path: Path) -> None:
    p = _write(tmp_path, "nodes.csv", NODES + "n0,64000,262144,2,T4\nn1,64000,262144,2,T4,EXTRA\n")
    with pytest.raises(DataError, match=r"row 2 \(line 3\): expected 5 fields, got 6"):
        load_openb_nodes(p)


def test_a_node_listed_twice_is_refused_naming_both_lines(tmp_path: Path) -> None:
    p = _write(
        tmp_path, "nodes.csv", NODES + "n1,64000,262144,2,T4\nn0,1,1,0,\nn1,8000,8192,1,T4\n"
    )
    with pytest.raises(DataError) as err:
        load_openb_nodes(p, gpu_only=False)
    msg = str(err.value)
    assert "row 3 (line 4): node 'n1' is listed twice (first on line 2)" in msg
    assert "\n" not in msg
    ok = load_openb_nodes(_write(tmp_path, "ok.csv", NODES + "n1,64000,262144,2,T4\n"))
    assert ok.names.tolist() == ["n1"] and ok.num_gpu.tolist() == [2]


# --------------------------------------------------------------------------------- variants
def test_cpu_variant_of_a_trace_without_gpu_pods_is_an_error(tmp_path: Path) -> None:
    src = _write(tmp_path, "cpuonly.csv", HEADER + "a,1000,1024,0,0\nb,2000,2048,0,0\n")
    for level in (0.0, 20.0):
        with pytest.raises(DataError, match=r"cpuonly.csv: no GPU pods to keep"):
            generate_variant("cpu", level, 0, source=src)
    mixed = _write(tmp_path, "mixed.csv", HEADER + "a,1000,1024,0,0\nb,1000,1024,1,500\n")
    rows = generate_variant("cpu", 50.0, 0, source=mixed).splitlines()
    assert len(rows) == 3 and np.all([r.count(",") == 4 for r in rows])
