"""Packaged example fleets: ``fleet show --json`` never overwrites the packaged file a
``--topology`` name resolves to, and only a bare name or the exact checkout path
``data/fleets/<name>.yaml`` stands for a packaged fleet (the user's own paths are not replaced)."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest

from fleetmind import cli
from fleetmind.data import fleet_io
from fleetmind.data.errors import DataError


@pytest.fixture
def packaged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the packaged fleets (so a failing test cannot damage the real ones); the working
    folder is an empty ``work/``."""
    pk = tmp_path / "pkg" / "fleets"
    shutil.copytree(fleet_io.PACKAGED_FLEETS_DIR, pk)
    monkeypatch.setattr(fleet_io, "PACKAGED_FLEETS_DIR", pk)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return pk


@pytest.mark.parametrize("spec", ["small", "small.yaml", "data/fleets/small.yaml"])
def test_fleet_show_json_over_the_packaged_fleet_it_reads_is_refused(
    spec: str, packaged: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = packaged / "small.yaml"
    before = target.read_bytes()
    assert cli.main(["fleet", "show", "--topology", spec, "--json", str(target)]) == 2
    err = capsys.readouterr().err
    assert "is an input of this command (--topology)" in err, err
    assert target.read_bytes() == before


def test_fleet_show_json_elsewhere_still_works(
    packaged: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["fleet", "show", "--topology", "small", "--json", "out.json"]) == 0
    assert Path("out.json").is_file()
    assert capsys.readouterr().err == ""  # a bare name is the documented form: no note


@pytest.mark.parametrize(
    "spec",
    [
        "./small",
        "./small.yaml",
        "../proj/data/fleets/small.yaml",
        "mydir/data/fleets/small.yaml",
        "x/data/fleets/small.yaml",
    ],
)
def test_the_users_own_missing_path_is_not_replaced(spec: str, packaged: Path) -> None:
    assert fleet_io.resolve_fleet_path(spec) == Path(spec)
    with pytest.raises(DataError, match="not found"):
        fleet_io.load_fleet(spec)


def test_bare_name_loads_the_packaged_fleet_silently(packaged: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fleet_io.resolve_fleet_path("small") == packaged / "small.yaml"
        assert fleet_io.resolve_fleet_path("small.yaml") == packaged / "small.yaml"


@pytest.mark.parametrize("spec", ["data/fleets/small.yaml", "./data/fleets/small.yaml"])
def test_checkout_path_loads_the_packaged_fleet_with_a_note(
    spec: str, packaged: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.warns(UserWarning, match="not found here; using the packaged example fleet"):
        assert fleet_io.resolve_fleet_path(spec) == packaged / "small.yaml"
    assert cli.main(["fleet", "show", "--topology", spec, "--json", "out.json"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("fleetmind: warning: "), err
    assert str(packaged / "small.yaml") in err[0]


def test_a_local_file_named_like_a_keyword_stays_a_file(
    packaged: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``./openb`` is the user's file, not the openb node list (the resolved path keeps it)."""
    shutil.copy(packaged / "small.yaml", "openb")
    assert cli.main(["fleet", "show", "--topology", "./openb", "--json", "out.json"]) == 0
    assert json.loads(Path("out.json").read_text())["source"] == "openb"  # the YAML file
    assert cli.main(["fleet", "show", "--topology", "./openb", "--json", "openb"]) == 2
    assert "is an input of this command" in capsys.readouterr().err


def test_fleet_show_json_over_the_openb_node_list_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--topology openb`` reads the openb node list of the dataset folder: a ``--json`` naming
    that file would replace the dataset's CSV with the summary (the data lookup would still find
    the folder, so every openb reader would then read JSON)."""
    csv = tmp_path / "data" / "openb" / "csv"
    csv.mkdir(parents=True)
    node_list = csv / "openb_node_list_gpu_node.csv"
    node_list.write_text(
        "sn,cpu_milli,memory_mib,num_gpu,model\nopenb-node-0001,96000,786432,8,V100M32\n"
    )
    (csv / "openb_pod_list_default.csv").write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
        "creation_time,deletion_time,scheduled_time\n"
    )
    monkeypatch.setenv("FLEETMIND_SHARED_DATA", str(tmp_path / "data"))
    before = node_list.read_bytes()
    code = cli.main(["fleet", "show", "--topology", "openb", "--json", str(node_list)])
    assert code == 2
    assert "is an input of this command (--topology)" in capsys.readouterr().err
    assert node_list.read_bytes() == before
