"""Pod traces refuse a pod name listed twice (both lines named), and a file past the process-wide
GPU-model vocabulary (``data.openb.MAX_GPU_MODELS``) is refused with its file, row and field
(docs/placement.md, "Traces")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fleetmind.data import openb
from fleetmind.data.errors import DataError
from fleetmind.data.openb import (
    MAX_GPU_MODELS,
    load_openb_nodes,
    load_openb_trace,
    openb_trace_names,
)

POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"


@pytest.fixture
def fresh_vocabulary(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A private copy of the vocabulary (openb's seven models), restored after the test."""
    models = ["A10", "G2", "G3", "P100", "T4", "V100M16", "V100M32"]
    monkeypatch.setattr(openb, "GPU_MODELS", models)
    return models


def test_a_pod_name_listed_twice_is_refused_naming_both_lines(tmp_path: Path) -> None:
    # before: accepted, and fgd-mode results then depended on which row came first
    path = tmp_path / "dup.csv"
    path.write_text(POD_HEADER + "p0,1000,1024,1,500,\np1,64000,1024,1,500,\np1,1000,1024,0,0,\n")
    with pytest.raises(DataError) as err:
        load_openb_trace(path)
    assert str(err.value) == (
        f"{path}: row 3 (line 4): pod 'p1' is listed twice (first on line 3); each pod name may"
        " appear once"
    )


@pytest.mark.slow
def test_the_shipped_openb_traces_have_unique_pod_names(shared_data) -> None:
    for name in openb_trace_names():
        trace = load_openb_trace(name)
        assert len(np.unique(trace.pod_names)) == len(trace), name


def test_a_trace_past_the_vocabulary_names_its_row_and_field(
    tmp_path: Path, fresh_vocabulary: list[str]
) -> None:
    path = tmp_path / "models70.csv"
    path.write_text(POD_HEADER + "".join(f"p{i},1000,1024,1,500,M{i}\n" for i in range(70)))
    with pytest.raises(DataError) as err:
        load_openb_trace(path)
    first_refused = MAX_GPU_MODELS - 7  # M0.. fill the ids after openb's seven
    r = first_refused + 1
    assert str(err.value) == (
        f"{path}: row {r} (line {r + 1}): field 'gpu_spec': too many distinct GPU models: the"
        f" traces and node lists loaded in this process already name {MAX_GPU_MODELS}, the most"
        f" a gpu_spec bitmask holds; cannot register 'M{first_refused}'"
    )


def test_two_files_valid_alone_fail_together_with_the_second_files_row(
    tmp_path: Path, fresh_vocabulary: list[str]
) -> None:
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text(POD_HEADER + "".join(f"a{i},1,1,1,500,Xa{i}\n" for i in range(30)))
    b.write_text(POD_HEADER + "".join(f"b{i},1,1,1,500,Xb{i}\n" for i in range(30)))
    load_openb_trace(a)  # 7 + 30 models: Xb0..Xb24 fill the vocabulary, Xb25 is one too many
    with pytest.raises(DataError, match=r"b\.csv: row 26 \(line 27\): field 'gpu_spec': .*'Xb25'"):
        load_openb_trace(b)


def test_a_node_list_past_the_vocabulary_names_its_row_and_field(
    tmp_path: Path, fresh_vocabulary: list[str]
) -> None:
    path = tmp_path / "nodes.csv"
    # rows in reverse name order: the error names the file's row, not the sorted position
    rows = [f"n{i:02d},64000,262144,8,X{i:02d}\n" for i in range(70)][::-1]
    path.write_text(NODE_HEADER + "".join(rows))
    with pytest.raises(DataError) as err:
        load_openb_nodes(path)
    # nodes are registered in name order: X00..X54 take the 55 free ids, X55 is refused; it is
    # on data row 70 - 55 = 15
    assert str(err.value).startswith(
        f"{path}: row 15 (line 16): field 'model': too many distinct GPU models"
    )
    assert str(err.value).endswith("cannot register 'X55'")
