"""Files that are valid as written but that Python reads badly: a UTF-8 byte order mark, an integer
of more than 4,300 digits, nesting deeper than the recursion limit, a column named twice.

Each is read (a BOM), or refused in one line that names the file (the rest), by every loader that
takes a user's file; before 2026-12-04 they were refused with a misleading reason or a traceback.

Sources followed:
* Python's ``utf-8-sig`` codec drops a leading U+FEFF (Python docs, "codecs -- Encodings and
  Unicode"); Excel's "CSV UTF-8 (Comma delimited)" export and Notepad's "UTF-8 with BOM" write one.
  RFC 8259 section 8.1 lets a JSON parser ignore it.
* CPython refuses ``int()`` of a decimal string of more than ``sys.get_int_max_str_digits()``
  digits (4,300 by default) with ``ValueError`` since 3.11 / 3.10.7 (CVE-2020-10735, Python docs
  "Integer string conversion length limitation"); ``json.loads`` and PyYAML's int constructor both
  call ``int()``.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from fleetmind import cli
from fleetmind.data.errors import DataError, ModelLoadError
from fleetmind.data.files import parse_json, read_json, read_text
from fleetmind.data.fleet_io import load_fleet_yaml
from fleetmind.data.graph import DependencyGraph
from fleetmind.data.openb import load_openb_nodes, load_openb_trace
from fleetmind.data.paths import MODELS_DIR
from fleetmind.rca.gat_analyzer import load_model
from fleetmind.serving.defaults.example import build_example_graph

BOM = b"\xef\xbb\xbf"
BIG = "1" + "0" * 5000  # 5,001 digits: past CPython's default limit of 4,300
TRACE = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n"
    "p0,32000,5632,1,1000,,BE,Succeeded,3359,4336,3359\n"
    "p1,3000,49152,2,1000,,LS,Succeeded,8913,9073,8913\n"
)
NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,96000,393216,8,V100M32\nn1,64000,262144,2,T4\n"
FLEET = """name: lab
clusters:
  - name: a
    nodes:
      - {name: n0, template: dgx1-v100, cpu_milli: CPU}
"""


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1, err
    assert err[0].startswith("fleetmind: error: ")
    return err[0]


def _graph_text() -> str:
    return json.dumps(build_example_graph(clusters=1, hosts=1, gpus=2, services=1).to_json())


# ------------------------------------------------------------------ byte order mark
def test_json_files_with_a_bom_read_as_without(tmp_path: Path) -> None:
    g = tmp_path / "g.json"
    g.write_bytes(BOM + _graph_text().encode())
    assert DependencyGraph.load(g).to_json() == json.loads(_graph_text())
    assert read_text(g) == _graph_text()
    assert parse_json("\ufeff[1]", "x") == [1]
    bad = tmp_path / "bad.json"  # offsets still count the file's bytes, its BOM included
    bad.write_bytes(BOM + b'{"a": "\xff"}')
    with pytest.raises(DataError, match=r"not UTF-8 text \(byte 0xff at offset 10\)"):
        read_json(bad)


def test_openb_csvs_with_a_bom_read_as_without(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text(TRACE)
    (tmp_path / "t_bom.csv").write_bytes(BOM + TRACE.encode())
    (tmp_path / "n.csv").write_text(NODES)
    (tmp_path / "n_bom.csv").write_bytes(BOM + NODES.encode())
    plain, bom = load_openb_trace(tmp_path / "t.csv"), load_openb_trace(tmp_path / "t_bom.csv")
    assert bom.pod_names.tolist() == plain.pod_names.tolist() == ["p0", "p1"]
    assert bom.num_gpu.tolist() == plain.num_gpu.tolist()
    nodes = load_openb_nodes(tmp_path / "n_bom.csv")
    assert nodes.names.tolist() == load_openb_nodes(tmp_path / "n.csv").names.tolist()


def test_a_trace_column_named_twice_is_refused(tmp_path: Path) -> None:
    lines = TRACE.splitlines()
    dup = [lines[0] + ",num_gpu", *(ln + ",0" for ln in lines[1:])]
    (tmp_path / "dup.csv").write_text("\n".join(dup) + "\n")
    with pytest.raises(DataError, match=r"dup\.csv: header names column\(s\) num_gpu more than"):
        load_openb_trace(tmp_path / "dup.csv")
    extra = [lines[0] + ",x,x", *(ln + ",1,2" for ln in lines[1:])]  # unread columns: no matter
    (tmp_path / "extra.csv").write_text("\n".join(extra) + "\n")
    assert len(load_openb_trace(tmp_path / "extra.csv")) == 2


# ------------------------------------------------------------------ integers past 4,300 digits
def test_json_with_a_huge_integer_is_one_line_naming_the_file(tmp_path: Path) -> None:
    g = tmp_path / "big.json"
    g.write_text('{"name": "g", "nodes": [], "edges": [], "n": ' + BIG + "}")
    limit = f"{sys.get_int_max_str_digits():,}"
    with pytest.raises(DataError) as exc:
        DependencyGraph.load(g)
    assert str(exc.value) == f"graph file {g} is malformed: a number has more than {limit} digits"
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(DataError, match="deep.json is malformed: arrays or objects nested"):
        read_json(deep)


def test_fleet_yaml_with_a_huge_integer_names_file_and_line(tmp_path: Path) -> None:
    f = tmp_path / "big.yaml"
    f.write_text(FLEET.replace("CPU", BIG))
    with pytest.raises(DataError, match=r"big\.yaml: line 5: a number has more than 4,300 digits"):
        load_fleet_yaml(f)
    f.write_text(FLEET.replace("CPU", "0x" + "f" * 3000))  # hex: int() takes it, int64 cannot
    with pytest.raises(DataError, match="'cpu_milli' is too large: an integer of 12,000 bits"):
        load_fleet_yaml(f)
    f.write_text(FLEET.replace("CPU", "99999999999999999999"))
    with pytest.raises(DataError, match=r"too large: 99999999999999999999 \(at most 2\*\*53\)"):
        load_fleet_yaml(f)
    f.write_text(FLEET.replace("CPU", ".inf"))
    with pytest.raises(DataError, match="must be a non-negative integer, got inf"):
        load_fleet_yaml(f)
    f.write_text(FLEET + "when: 2026-13-01\n")  # a YAML date Python's datetime refuses
    with pytest.raises(DataError, match=r"big\.yaml: line 6: month must be in 1\.\.12"):
        load_fleet_yaml(f)
    f.write_text("name: " + "{a: " * 400 + "1" + "}" * 400 + "\n")
    with pytest.raises(DataError, match="nested too deeply"):
        load_fleet_yaml(f)


def test_gat_config_errors_name_the_file(tmp_path: Path) -> None:
    art = tmp_path / "art"
    shutil.copytree(MODELS_DIR / "rca", art)
    cfg = art / "config.json"
    text = cfg.read_text()
    cfg.write_bytes(BOM + text.encode())  # a BOM is read past
    assert load_model(str(art))[1]["format"] == json.loads(text)["format"]
    cfg.write_bytes(text.encode().replace(b'"format"', b'"form\xffat"', 1))
    with pytest.raises(ModelLoadError) as exc:
        load_model(str(art))
    assert str(exc.value).startswith(f"model config {cfg} is not UTF-8 text (byte 0xff")
    cfg.write_text(text.replace("{", '{"big": ' + BIG + ", ", 1))
    with pytest.raises(ModelLoadError, match="config.json is malformed: a number has more than"):
        load_model(str(art))


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["fleet", "show", "--topology", "{yaml}"], "big.yaml: line 5: a number has more than"),
        (["fleet", "show", "--topology", "{tmp}"], "is a folder, not a file"),
        (["serve", "--graph", "{json}"], "big.json is malformed: a number has more than"),
    ],
)
def test_the_cli_answers_one_line_and_status_2(
    argv: list[str], words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "big.yaml").write_text(FLEET.replace("CPU", BIG))
    (tmp_path / "big.json").write_text('{"name": "g", "nodes": ' + BIG + ', "edges": []}')
    subs = {"tmp": tmp_path, "yaml": tmp_path / "big.yaml", "json": tmp_path / "big.json"}
    assert cli.main([a.format(**subs) for a in argv]) == 2
    assert words in _one_error_line(capsys)
