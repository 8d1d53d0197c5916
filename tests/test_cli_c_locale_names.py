"""Non-ASCII arguments under a C locale without UTF-8 mode (``LANG=C LC_ALL=C PYTHONUTF8=0
PYTHONCOERCECLOCALE=0``).

Python decodes the command line with the locale's encoding (ASCII there) and ``surrogateescape``:
each byte of ``prod-é火`` came as a lone surrogate, so ``graph build --cluster prod-é火`` failed
with "name: Input should be a valid string, unable to parse raw data as a unicode string"
(status 2), and a path printed as ``d\\udcc3\\udca9``. Now the options that name things
(``--cluster``, ``--name``, ``--node``, ``--context``) are read as UTF-8, bytes that are not UTF-8
are one usage line, paths keep opening by their bytes, and a byte that no encoding decoded prints
as ``\\xXX``.

The graph build reads the recorded Kubernetes list responses of ``tests/data/k8s``
(``kubectl get nodes,pods,services,endpointslices -o json``, see its README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fleetmind import argtypes
from fleetmind.redact import terminal_safe

DATA = Path(__file__).parent / "data" / "k8s"


def _c_locale_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LC_", "PYTHONIO"))}
    env.update(LC_ALL="C", LANG="C", PYTHONUTF8="0", PYTHONCOERCECLOCALE="0")
    env["MLFLOW_DISABLE_TELEMETRY"] = "true"
    return env


def _recorded(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for k in ("nodes", "pods", "services", "endpointslices"):
        shutil.copy(DATA / f"api_{k}.json", folder / f"{k}.json")
    return folder


def _graph_build(args: list[bytes], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    cmd = [os.fsencode(sys.executable), b"-m", b"fleetmind.cli", b"graph", b"build", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, env=_c_locale_env(), timeout=120)


def test_a_non_ascii_cluster_name_under_the_c_locale(tmp_path: Path) -> None:
    _recorded(tmp_path / "rec")
    cluster = "prod-é火".encode()  # the bytes a UTF-8 terminal sends
    proc = _graph_build(
        [b"--from-dir", b"rec", b"--cluster", cluster, b"--out", b"g.json"], tmp_path
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    graph = json.loads((tmp_path / "g.json").read_bytes().decode("utf-8"))
    assert graph["name"] == "k8s-prod-é火"
    assert any(n["id"] == "prod-é火" for n in graph["nodes"])


def test_argument_bytes_that_are_not_utf8_are_one_usage_line(tmp_path: Path) -> None:
    _recorded(tmp_path / "rec")
    proc = _graph_build(
        [b"--from-dir", b"rec", b"--cluster", b"a\xff", b"--out", b"g.json"], tmp_path
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1].endswith(b"argument --cluster: not UTF-8 text: a\\xff")
    assert not (tmp_path / "g.json").exists()


def test_a_non_ascii_path_still_opens_and_prints_as_its_bytes(tmp_path: Path) -> None:
    _recorded(tmp_path / "dé" / "rec")
    proc = _graph_build(
        [b"--from-dir", "dé/rec".encode(), b"--out", "dé/g.json".encode()], tmp_path
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert (tmp_path / "dé" / "g.json").is_file()
    assert proc.stdout.rstrip().endswith(b"-> d\\xc3\\xa9/g.json")  # was d\udcc3\udca9/g.json


def test_utf8_text() -> None:
    assert argtypes.utf8_text("prod-\udcc3\udca9") == "prod-é"  # ASCII locale: the surrogates of é
    assert (
        argtypes.utf8_text("prod-é") == "prod-é"
    )  # a locale that decoded it meant what it decoded
    with pytest.raises(argparse.ArgumentTypeError, match=r"not UTF-8 text: a\\xff"):
        argtypes.utf8_text("a\udcff")


def test_terminal_safe_shows_an_undecoded_byte_as_that_byte() -> None:
    assert terminal_safe("d\udcc3\udca9/g.json") == "d\\xc3\\xa9/g.json"
    assert terminal_safe("gpu\udc9b2J") == "gpu\\x9b2J"  # a C1 CSI byte stays escaped
