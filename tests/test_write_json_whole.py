"""``training.io.write_json`` writes result files whole (a temporary file renamed over the old one)
without taking away what writing in place gave: a file in a folder the process may not write, a
file with other hard links, and ``--json /dev/stdout`` while stdout is redirected to a file are
written in place; a replaced file keeps its permission bits; the umask is not touched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleetmind.training import io as io_module
from fleetmind.training.io import write_json


def test_a_regular_file_is_replaced_whole_keeping_its_mode(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    out.write_text("old")
    out.chmod(0o640)
    ino = out.stat().st_ino
    write_json(out, {"a": 1})
    assert json.loads(out.read_text()) == {"a": 1}
    assert out.stat().st_mode & 0o777 == 0o640
    assert out.stat().st_ino != ino  # renamed over it: a reader saw old or new, never half
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temporary file left


def test_a_new_file_gets_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        write_json(tmp_path / "n.json", {"a": 1})
        assert os.umask(0o027) == 0o027  # unchanged by the write
    finally:
        os.umask(old)
    assert (tmp_path / "n.json").stat().st_mode & 0o777 == 0o640


def test_hard_links_stay_one_file(tmp_path: Path) -> None:
    out, other = tmp_path / "r.json", tmp_path / "link.json"
    out.write_text("old")
    os.link(out, other)
    write_json(out, {"a": 2})
    assert json.loads(other.read_text()) == {"a": 2}


def test_a_writable_file_in_a_folder_one_may_not_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A result file in a shared folder the user may write the file of but not create files in
    (no temporary file possible there): written in place, as before, not lost at the end."""
    out = tmp_path / "r.json"
    out.write_text("old")
    real_access = os.access

    def access(p: object, mode: int) -> bool:
        return False if Path(str(p)) == tmp_path and mode == os.W_OK else real_access(p, mode)

    monkeypatch.setattr(io_module.os, "access", access)
    monkeypatch.setattr(io_module.os, "open", _refuse_creating_in(tmp_path))
    write_json(out, {"a": 3})
    assert json.loads(out.read_text()) == {"a": 3}


def _refuse_creating_in(folder: Path) -> object:
    real_open = os.open

    def _open(p: object, flags: int, *a: object) -> int:
        if flags & os.O_CREAT and Path(str(p)).parent == folder:
            raise PermissionError(13, "Permission denied", str(p))
        return real_open(p, flags, *a)

    return _open


def test_dev_stdout_redirected_to_a_file_keeps_the_rest_of_the_output(tmp_path: Path) -> None:
    code = (
        "from fleetmind.training.io import write_json; "
        "write_json('/dev/stdout', {'a': 4}); print('after', flush=True)"
    )
    out = tmp_path / "out.txt"
    with open(out, "w") as f:
        subprocess.run([sys.executable, "-c", code], stdout=f, check=True)
    text = out.read_text()
    assert json.loads(text[: text.index("after")]) == {"a": 4}  # was: "after" printed over it
    assert text.endswith("after\n")
