"""openb loaders: shapes and clipping on the shared files, clear errors on malformed files."""

from __future__ import annotations

import numpy as np
import pytest

from fleetmind.data.errors import DataError
from fleetmind.data.openb import ANY_GPU_MODEL, gpu_model_id, load_openb_nodes, load_openb_trace

HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"


def _write(tmp_path, text: str):
    p = tmp_path / "trace.csv"
    p.write_text(text)
    return p


def test_load_trace_from_csv_clips_and_masks(tmp_path) -> None:
    p = _write(
        tmp_path,
        HEADER
        + "b,1000,100,1,1500,,LS,Running,0,10,0\n"
        + "a,2000,200,0,300,,BE,Running,5,,5\n"
        + "c,3000,300,2,1000,T4|P100,LS,Running,1,2,1\n",
    )
    from fleetmind.data.openb import TraceWarning

    with pytest.warns(TraceWarning) as seen:
        tr = load_openb_trace(p)
    said = " | ".join(str(w.message) for w in seen)
    assert "gpu_milli above 1000" in said and "num_gpu 0 ask for gpu_milli above 0" in said
    assert tr.name == "trace" and len(tr) == 3
    assert tr.gpu_milli.tolist() == [1000, 0, 1000]  # clipped, with a warning; CPU-only -> 0
    assert tr.gpu_spec_mask[0] == ANY_GPU_MODEL
    assert tr.gpu_spec_mask[2] == (1 << gpu_model_id("T4")) | (1 << gpu_model_id("P100"))
    assert np.isnan(tr.deletion_time[1]) and tr.creation_time.tolist() == [0, 5, 1]


def test_five_column_trace(tmp_path) -> None:
    p = _write(tmp_path, "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nx,1,2,1,500\n")
    tr = load_openb_trace(p)
    assert tr.gpu_spec.tolist() == [""] and not tr.has_times


@pytest.mark.parametrize(
    ("row", "match"),
    [
        (
            "c,abc,300,1,500,,LS,Running,1,2,1",
            r"row 2 \(line 3\): field 'cpu_milli' is not a number",
        ),
        (
            "c,100,-5,1,500,,LS,Running,1,2,1",
            r"row 2 .*'memory_mib' must be a non-negative integer",
        ),
        ("c,100,5,1,0,,LS,Running,1,2,1", r"row 2 .*'gpu_milli' is 0"),
        ("c,100,5,1,500,,LS,Running,xx,2,1", r"row 2 .*'creation_time'"),
        ("c,100,5,1", r"row 2 .*expected 11 fields, got 4"),
        # an int64 overflow and a time at infinity: a traceback and a silent run before 2026-12-03
        ("c,100,99999999999999999999999,1,500,,LS,Running,1,2,1", r"'memory_mib' is too large"),
        ("c,100,5,1,500,,LS,Running,inf,2,1", r"row 2 .*'creation_time' is infinite"),
        ("c,100,5,1,500,,LS,Running,1,-inf,1", r"row 2 .*'deletion_time' is infinite"),
    ],
)
def test_malformed_trace_names_file_row_and_field(tmp_path, row: str, match: str) -> None:
    p = _write(tmp_path, HEADER + "a,1000,100,1,500,,LS,Running,0,10,0\n" + row + "\n")
    with pytest.raises(DataError, match=match) as err:
        load_openb_trace(p)
    assert str(p) in str(err.value)


def test_missing_column_and_unknown_name(tmp_path) -> None:
    p = _write(tmp_path, "name,cpu_milli,num_gpu\nx,1,0\n")
    with pytest.raises(DataError, match="lacks column"):
        load_openb_trace(p)
    with pytest.raises(DataError, match="not found"):
        load_openb_trace(tmp_path / "missing.csv")


def test_shared_openb_files(shared_data) -> None:
    nodes = load_openb_nodes()
    assert len(nodes) == 1213 and nodes.total_gpus == 6212
    assert (nodes.names[:-1] < nodes.names[1:]).all()
    tr = load_openb_trace("default")
    assert len(tr) == 8152 and (tr.num_gpu == 0).sum() == 1088
    assert tr.gpu_milli.max() <= 1000
    assert int(tr.gpu_request.sum()) == 6_086_800
    mg = load_openb_trace("multigpu20")
    assert not mg.has_times and len(mg) == 8324
    with pytest.raises(DataError, match="unknown openb trace"):
        load_openb_trace("no_such_trace")
