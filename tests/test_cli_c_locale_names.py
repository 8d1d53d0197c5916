"""Non-ASCII arguments under a C locale without UTF-8 mode (``LANG=C LC_ALL=C PYTHONUTF8=0
PYTHONCOERCECLOCALE=0``).

Python decodes the command line with the locale's encoding (ASCII there) and ``surrogateescape``:
each byte of ``prod-é火`` came as a lone surrogate, so ``graph build --cluster prod-é火`` failed
with "name: Input should be a valid string, unable to parse raw data as a unicode string"
(status 2), and a path printed as ``d\\udcc3\\udca9``. Now the options that name things
(``--cluster``, ``--name``, ``--node``, ``--context``) are read as UTF-8, bytes that are not UTF-8
are one usage line, paths keep opening by their bytes and print as the UTF-8 they hold, so that
``dé`` shows one way in a line that names both a cluster and a folder ``dé`` (``d\\xe9`` on the
ASCII stdout of that locale); a byte of a path that is not UTF-8 prints as ``\\udcXX``, which that
stdout never writes for a character (``\\xff`` is ``ÿ`` there).

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


def test_a_non_ascii_path_opens_and_prints_as_the_name_does(tmp_path: Path) -> None:
    _recorded(tmp_path / "dé" / "rec")
    args = [b"--from-dir", "dé/rec".encode(), b"--cluster", "dé".encode()]
    proc = _graph_build([*args, b"--out", "dé/g.json".encode()], tmp_path)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert (tmp_path / "dé" / "g.json").is_file()
    # the cluster dé and the folder dé alike (the path was d\xc3\xa9, first d\udcc3\udca9)
    line = proc.stdout.rstrip()
    assert line.startswith(b"graph k8s-d\\xe9: ") and line.endswith(b"-> d\\xe9/g.json")


def test_a_path_byte_that_is_not_utf8_prints_unlike_a_character(tmp_path: Path) -> None:
    _recorded(tmp_path / "rec")
    (tmp_path / os.fsdecode(b"d\xff")).mkdir()
    proc = _graph_build([b"--from-dir", b"rec", b"--out", b"d\xff/g.json"], tmp_path)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert (tmp_path / os.fsdecode(b"d\xff") / "g.json").is_file()
    assert proc.stdout.rstrip().endswith(b"-> d\\udcff/g.json")  # \xff would be the character


def test_utf8_text() -> None:
    assert argtypes.utf8_text("prod-\udcc3\udca9") == "prod-é"  # ASCII locale: the surrogates of é
    assert (
        argtypes.utf8_text("prod-é") == "prod-é"
    )  # a locale that decoded it meant what it decoded
    with pytest.raises(argparse.ArgumentTypeError, match=r"not UTF-8 text: a\\xff"):
        argtypes.utf8_text("a\udcff")


def test_terminal_safe_reads_undecoded_utf8_bytes_as_utf8() -> None:
    assert terminal_safe("d\udcc3\udca9/g.json") == "dé/g.json"  # the bytes of dé
    assert terminal_safe("a\udcffé\udcc3") == "a\\udcffé\\udcc3"  # not UTF-8: \udcXX
    assert terminal_safe("gpu\udc9b2J") == "gpu\\udc9b2J"  # a lone C1 CSI byte stays escaped
    assert terminal_safe("gpu\udcc2\udc9b2J") == "gpu\\x9b2J"  # U+009B (CSI) as UTF-8: escaped
    # an ASCII stdout under run_main (fleetmind/cli/runner.py) writes the character ÿ as \xff,
    # the byte 0xff of a path as \udcff: the two differ
    import fleetmind.cli.runner  # noqa: F401  (registers the fleetmind.surrogateescape handler)

    assert "ÿ".encode("ascii", "fleetmind.surrogateescape") == b"\\xff"
    assert terminal_safe("\udcff").encode("ascii", "fleetmind.surrogateescape") == b"\\udcff"
