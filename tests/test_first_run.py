"""A first run without downloaded data: the synthetic openb-schema trace, ``fleetmind data fetch``
against a local HTTP server (never the internet), and the ``sched evaluate`` table."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from fetch_helpers import toy_manifest

from fleetmind.cli import main
from fleetmind.data.errors import DataError
from fleetmind.data.fetch import fetch_dataset, load_manifest
from fleetmind.data.openb import load_openb_nodes, load_openb_trace
from fleetmind.data.openb_synthetic import MARKER, SYNTHETIC_LABEL, write_synthetic_openb
from fleetmind.data.paths import OPENB_FALLBACK_ENV, openb_csv_dir


@pytest.fixture
def no_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh clone's view: the shared data folder is empty, the cache is private to the test."""
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("FLEETMIND_SHARED_DATA", str(empty))
    monkeypatch.setenv("FLEETMIND_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(OPENB_FALLBACK_ENV, raising=False)
    return empty


def test_synthetic_trace_has_the_openb_schema_and_is_deterministic(tmp_path: Path) -> None:
    a = write_synthetic_openb(tmp_path / "a", seed=3)
    b = write_synthetic_openb(tmp_path / "b", seed=3)
    for name in ("openb_pod_list_default.csv", "openb_node_list_gpu_node.csv"):
        assert (a / name).read_bytes() == (b / name).read_bytes()
    assert (tmp_path / "a" / MARKER).read_text().startswith("# Synthetic")
    trace = load_openb_trace(a / "openb_pod_list_default.csv")
    nodes = load_openb_nodes(a / "openb_node_list_gpu_node.csv")
    assert len(trace) == 820 and len(nodes) == 120
    assert set(np.unique(trace.num_gpu)) <= {0, 1, 2, 4, 8}
    assert ((trace.gpu_milli > 0) & (trace.gpu_milli < 1000)).any()  # GPU-sharing pods
    assert (trace.num_gpu == 0).any() and (trace.num_gpu >= 2).any()
    assert np.all(trace.deletion_time > trace.creation_time)
    assert set(nodes.model) <= {"A10", "G2", "G3", "P100", "T4", "V100M16", "V100M32"}


def test_without_data_the_library_still_fails_and_the_cli_falls_back(
    no_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    with pytest.raises(DataError):
        load_openb_trace("default")  # library callers (benchmarks) are not switched silently
    assert "openb-synthetic" not in str(openb_csv_dir())
    out = tmp_path / "fgd.json"
    rc = main(
        ["sched", "evaluate", "--trace", "default", "--policies", "FGD", "BestFit", "--seeds", "42"]
        + ["--json", str(out)]
    )
    assert rc == 0
    captured = capsys.readouterr()
    assert "synthetic openb-schema trace" in captured.err
    assert "[synthetic openb-schema data]" in captured.out
    result = json.loads(out.read_text())
    assert result["data"] == SYNTHETIC_LABEL
    assert list(result["policies"]) == ["FGD", "BestFit"]
    assert OPENB_FALLBACK_ENV not in __import__("os").environ  # restored after the command
    assert main(["fleet", "show", "--topology", "openb"]) == 0
    assert "openb-synthetic" in capsys.readouterr().out


def test_sched_table_fits_100_columns_keeps_the_order_and_has_a_legend(
    no_data: Path, capsys: pytest.CaptureFixture
) -> None:
    args = ["sched", "evaluate", "--trace", "default", "--seeds", "42"]
    assert main([*args, "--policies", "FGD", "teacher", "BestFit", "ppo"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    table = [ln for ln in lines if not ln.startswith(("trace=", "legend", "  "))]
    assert max(len(ln) for ln in lines) <= 100, max(lines, key=len)
    assert [ln.split()[0] for ln in table[1:]] == ["FGD", "teacher", "BestFit", "ppo"]
    legend = " ".join(ln.strip() for ln in lines if ln.startswith(("legend", "  ")))
    assert "unalloc@100" in legend and "--wide" in legend
    assert main([*args, "--policies", "teacher", "--wide"]) == 0
    wide = capsys.readouterr().out.splitlines()
    header = next(ln for ln in wide if ln.startswith("policy"))
    row = next(ln for ln in wide if ln.startswith("teacher"))
    cpu = header.split().index("cpu_seconds_total")
    assert row.split()[cpu] == "-"  # not measured, not 0.000


def test_demo_placement_runs_on_the_synthetic_trace(no_data: Path, tmp_path: Path) -> None:
    from fleetmind.cli.demo import DemoConfig, placement_eval

    res = placement_eval(DemoConfig(out=tmp_path / "demo", quick=True))
    assert res["data"] == SYNTHETIC_LABEL
    assert set(res["policies"]) == {"BestFit", "FGD"}
    assert all(0 <= m["unallocated_gpu_pct_at_100"] <= 100 for m in res["policies"].values())


# ------------------------------------------------------------------------------------- data fetch
FILES = {"csv/a.csv": b"x,y\n1,2\n", "csv/b.csv": b"name\nopenb-node-0\n"}


def _manifest(files: dict[str, bytes]) -> dict:
    return toy_manifest("toy", files, "Someone et al., Toy data, 2026.", "research use")


def test_fetch_downloads_verifies_and_keeps(http_dir: tuple[str, Path], tmp_path: Path) -> None:
    url, root = http_dir
    for p, b in FILES.items():
        (root / p.split("/")[-1]).write_bytes(b)
    dest = tmp_path / "shared"
    rep = fetch_dataset("toy", dest, base_url=url, manifest=_manifest(FILES))
    assert sorted(rep.downloaded) == sorted(FILES) and rep.kept == []
    for p, b in FILES.items():
        assert (dest / "toy" / p).read_bytes() == b
    assert rep.citation.startswith("Someone")
    again = fetch_dataset("toy", dest, base_url=url, manifest=_manifest(FILES))
    assert again.downloaded == [] and sorted(again.kept) == sorted(FILES)


def test_fetch_refuses_a_tampered_or_missing_file(
    http_dir: tuple[str, Path], tmp_path: Path
) -> None:
    url, root = http_dir
    (root / "a.csv").write_bytes(b"x,y\n1,3\n")  # one byte differs
    (root / "b.csv").write_bytes(FILES["csv/b.csv"])
    dest = tmp_path / "shared"
    with pytest.raises(DataError, match="checksum mismatch"):
        fetch_dataset("toy", dest, base_url=url, manifest=_manifest(FILES))
    assert not (dest / "toy" / "csv" / "a.csv").exists()
    assert not list((dest / "toy" / "csv").glob("*.part"))
    (root / "a.csv").unlink()
    from fleetmind.data.errors import NotAvailableError

    with pytest.raises(NotAvailableError, match="HTTP 404"):
        fetch_dataset("toy", dest, base_url=url, manifest=_manifest(FILES))


def test_fetch_cli_prints_citation_and_terms_and_fails_in_one_line(
    http_dir: tuple[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    url, root = http_dir
    man = load_manifest()
    assert {"openb", "petshop"} <= set(man)
    assert all(len(f["sha256"]) == 64 for d in man.values() for f in d["files"])
    # serve PetShop's first file with the wrong content: the CLI stops with one line, exit 2
    first = man["petshop"]["files"][0]
    target = root / first["url_path"]
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(b"not the file")
    rc = main(["data", "fetch", "petshop", "--dest", str(tmp_path / "d"), "--base-url", url])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "checksum mismatch" in err[0]
    with pytest.raises(SystemExit):  # argparse: not one of the choices
        main(["data", "fetch", "nosuch"])


def test_fetch_cli_gets_petshop_as_published(
    http_dir: tuple[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The packaged manifest against the real files: a local server lays out the shared PetShop
    copy as the upstream repository does (``dataset/low_traffic/...``, ``LICENSE_DATASET``)."""
    from fleetmind.data.paths import REPO_ROOT

    src = REPO_ROOT.parent / "shared" / "data" / "petshop"
    if not (src / "low_traffic").is_dir():
        pytest.skip("the shared PetShop copy is not on this machine")
    url, root = http_dir
    for f in load_manifest()["petshop"]["files"]:
        target = root / f["url_path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((src / f["path"]).read_bytes())
    dest = tmp_path / "shared"
    assert main(["data", "fetch", "petshop", "--dest", str(dest), "--base-url", url]) == 0
    out = capsys.readouterr().out
    assert (
        "cite: Hardt" in out and "terms: CC-BY-4.0" in out and "export FLEETMIND_SHARED_DATA" in out
    )
    assert (dest / "petshop" / "low_traffic" / "graph.csv").is_file()
    from fleetmind.data.petshop import load_scenario

    assert load_scenario(dest / "petshop" / "low_traffic") is not None


def test_a_folder_named_fleetmind_gives_a_clear_error(tmp_path: Path) -> None:
    """The README's quickstart started in the parent of a checkout named ``fleetmind``: under an
    editable install the checkout shadows the package, and the import says so (a regular install
    is not shadowed, and the quickstart's imports work)."""
    import subprocess
    import sys

    from fleetmind.data.paths import REPO_ROOT

    (tmp_path / "fleetmind").symlink_to(REPO_ROOT, target_is_directory=True)
    code = "import fleetmind\nfrom fleetmind.data.rca_gen.alerts import AlertSimConfig\nfleetmind.GATAnalyzer\n"
    run = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"},
    )
    if run.returncode != 0:
        last = run.stderr.strip().splitlines()[-1]
        assert last.startswith("ImportError: a folder named 'fleetmind'"), last
        assert "shadows the installed fleetmind package" in last


def test_rca_generate_names_every_split_it_wrote(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "rca"
    args = ["rca", "generate", "--out", str(out), "--incidents", "40", "--seed", "0"]
    assert (
        main([*args, "--graphs", "5", "--min-nodes", "60", "--max-nodes", "120", "--workers", "1"])
        == 0
    )
    text = capsys.readouterr().out
    written = sorted(p.stem for p in out.glob("*.jsonl"))
    assert written == ["test", "test_large", "train", "val"]
    for split in written:
        n = sum(1 for _ in (out / f"{split}.jsonl").open())
        assert re.search(rf"^\s+{split}\.jsonl\s+{n}\s", text, re.M), (split, text)
    assert "--large-fraction" in text  # the extra split says where it came from
