"""One whole-file writer (:func:`fleetmind.folders.write_file_whole`) for ``training.io``'s
result files (``write_json``, ``write_text_whole``) and ``data``'s variant traces and fleet files
(``write_variant``, ``write_file_whole``, ``dump_fleet_yaml``).

Before the fix, the temporary file renamed over the target failed where writing in place had
worked, with no way back: a file bind-mounted on its own (``os.replace``: ``EBUSY``), another
user's world-writable file in a sticky folder such as ``/tmp`` (``EPERM``), a user namespace that
cannot map the old owner (``os.fchown``: ``EINVAL``, a traceback). A file the writer may not write
(``0444``) was silently replaced where ``>`` refuses it. And errors named the hidden temporary
file (``.trace.csv.752.541b2d92.tmp``, ``tmp -> target``), not the file asked for.

The tests run as root: the non-root cases are made by ``os.replace``, ``os.fchown`` and
``os.access`` raising or answering what the system does for a user (deterministic); where the
machine allows it, a real bind mount (``unshare -m``) and a real other user (``setpriv``) too.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from fleetmind.cli.runner import run_main
from fleetmind.data.openb_variants import write_variant
from fleetmind.folders import write_file_whole
from fleetmind.training.io import write_json, write_text_whole

REPO = Path(__file__).resolve().parents[1]

WRITERS: dict[str, Callable[[Path], None]] = {
    "write_file_whole": lambda p: write_file_whole(p, b"new\n"),
    "write_variant": lambda p: (write_variant(p, "new\n"), None)[1],
    "write_text_whole": lambda p: write_text_whole(p, "new\n"),
}


def _refuse_replace(
    monkeypatch: pytest.MonkeyPatch, target: Path, code: int
) -> list[tuple[str, str]]:
    """``os.replace`` onto ``target`` fails with ``code`` (as the kernel reports it: both names);
    returns the calls made onto it."""
    real = os.replace
    calls: list[tuple[str, str]] = []

    def replace(src: str, dst: str, *a: object, **k: object) -> None:
        if Path(dst) == target:
            calls.append((str(src), str(dst)))
            raise OSError(code, os.strerror(code), str(src), None, str(dst))
        real(src, dst, *a, **k)

    monkeypatch.setattr(os, "replace", replace)
    return calls


@pytest.mark.parametrize("writer", sorted(WRITERS))
@pytest.mark.parametrize("code", [errno.EBUSY, errno.EPERM, errno.EXDEV])
def test_a_file_that_cannot_be_renamed_over_is_written_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: str, code: int
) -> None:
    """``EBUSY``: a file bind-mounted on its own; ``EPERM``: another user's file in a sticky
    folder; ``EXDEV``: as the folder writer (``fleetmind.folders._NO_SWAP``)."""
    out = tmp_path / "trace.csv"
    out.write_text("old\n")
    inode = out.stat().st_ino
    calls = _refuse_replace(monkeypatch, out, code)
    WRITERS[writer](out)
    assert calls  # the rename was tried first
    assert out.read_text() == "new\n"
    assert out.stat().st_ino == inode  # written in place
    assert [p.name for p in tmp_path.iterdir()] == ["trace.csv"]  # temporary file removed


def test_other_rename_errors_still_fail_naming_the_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "trace.csv"
    out.write_text("old\n")
    _refuse_replace(monkeypatch, out, errno.EIO)
    with pytest.raises(OSError) as info:
        write_variant(out, "new\n")
    assert info.value.errno == errno.EIO
    assert info.value.filename == str(out) and info.value.filename2 is None  # not tmp -> target
    assert out.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["trace.csv"]


@pytest.mark.parametrize("code", [errno.EINVAL, errno.EPERM])
def test_an_owner_that_cannot_be_kept_is_no_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    """``EINVAL``: a user namespace that cannot map the old file's owner (``fleet discover
    --out``, ``dump_fleet_yaml``); the file is written, the writer's own."""
    if os.geteuid() != 0:
        pytest.skip("needs root to give the old file another owner")
    out = tmp_path / "fleet.yaml"
    out.write_text("old\n")
    os.chown(out, 12345, 12345)
    out.chmod(0o640)

    def fchown(fd: int, uid: int, gid: int) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "fchown", fchown)
    monkeypatch.setattr(os, "chown", fchown)
    write_file_whole(out, b"new\n")
    assert out.read_bytes() == b"new\n"
    assert out.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["fleet.yaml"]


_REASONS = {
    errno.EACCES: "Permission denied",
    errno.EROFS: "Read-only file system",
    errno.EPERM: "Operation not permitted",
}


def _not_writable(
    monkeypatch: pytest.MonkeyPatch, path: Path, code: int | None = errno.EACCES
) -> list[int]:
    """``os.access(path, W_OK)`` says no, and opening ``path`` for writing fails with ``code``, as
    for a user and a ``0444`` file of theirs (``EACCES``), a read-only mount (``EROFS``) or an
    immutable file (``EPERM``, ``chattr +i``); ``code`` ``None``: the open succeeds (``access``
    was wrong). Returns the flags of the opens of ``path``."""
    real_access, real_open = os.access, os.open
    flags_seen: list[int] = []

    def access(p: object, mode: int, *a: object, **k: object) -> bool:
        if Path(os.fspath(p)) == path and mode & os.W_OK:  # type: ignore[arg-type]
            return False
        return real_access(p, mode, *a, **k)  # type: ignore[arg-type]

    def open_(p: object, flags: int, *a: object, **k: object) -> int:
        if isinstance(p, (str, os.PathLike)) and Path(os.fspath(p)) == path:
            flags_seen.append(flags)
            if code is not None and flags & (os.O_WRONLY | os.O_RDWR):
                raise OSError(code, os.strerror(code), os.fspath(p))
        return real_open(p, flags, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "access", access)
    monkeypatch.setattr(os, "open", open_)
    return flags_seen


@pytest.mark.parametrize("writer", sorted(WRITERS))
@pytest.mark.parametrize("code", sorted(_REASONS), ids=errno.errorcode.get)
def test_a_file_one_may_not_write_is_refused_not_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: str, code: int
) -> None:
    """As ``echo new > ro.csv`` refuses it, with the system's reason, naming it: ``Permission
    denied`` (``0444``), ``Read-only file system`` (``docker -v f:/x:ro``; was ``Permission
    denied``, ``os.access`` says no there too), ``Operation not permitted`` (``chattr +i``)."""
    out = tmp_path / "ro.csv"
    out.write_text("old\n")
    out.chmod(0o444)
    inode = out.stat().st_ino
    flags = _not_writable(monkeypatch, out, code)
    with pytest.raises(OSError) as info:
        WRITERS[writer](out)
    assert info.value.errno == code and info.value.filename == str(out)
    assert info.value.strerror == _REASONS[code]
    assert isinstance(info.value, PermissionError) == (code != errno.EROFS)
    assert flags and not any(
        f & (os.O_TRUNC | os.O_CREAT) for f in flags
    )  # the probe changes nothing
    assert out.read_text() == "old\n" and out.stat().st_ino == inode
    assert [p.name for p in tmp_path.iterdir()] == ["ro.csv"]


def test_a_file_access_wrongly_refuses_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``os.access`` checks the real user, not the effective one (a set-user-ID wrapper): where
    opening the file for writing succeeds the write goes on (was ``Permission denied``)."""
    out = tmp_path / "r.json"
    out.write_text("{}\n")
    _not_writable(monkeypatch, out, None)
    write_json(out, {"a": 1})
    assert json.loads(out.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


@pytest.mark.parametrize("code", sorted(_REASONS), ids=errno.errorcode.get)
def test_a_file_one_may_not_write_is_one_line_through_the_runner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], code: int
) -> None:
    out = tmp_path / "r.json"
    out.write_text("{}\n")
    _not_writable(monkeypatch, out, code)

    def command() -> int:
        write_json(out, {"a": 1})
        return 0

    assert run_main(command, prog="fleetmind") == 2
    assert capsys.readouterr().err == f"fleetmind: error: {out}: {_REASONS[code]}\n"
    assert out.read_text() == "{}\n"


def test_an_error_without_a_reason_gets_the_systems(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``OSError(errno.EIO, None)`` (a C extension's): was ``[Errno 5] None``."""
    out = tmp_path / "r.json"

    def fsync(fd: int) -> None:
        raise OSError(errno.EIO, None)

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(OSError) as info:
        write_file_whole(out, b"{}\n")
    assert info.value.errno == errno.EIO and info.value.filename == str(out)
    assert info.value.strerror == os.strerror(errno.EIO)

    def command() -> int:
        write_json(out, {"a": 1})
        return 0

    assert run_main(command, prog="fleetmind") == 2
    assert capsys.readouterr().err == f"fleetmind: error: {out}: {os.strerror(errno.EIO)}\n"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_ctrl_c_at_the_rename_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: str
) -> None:
    """A ``KeyboardInterrupt`` (any ``BaseException``) between the staging and the rename: the
    old file as it was, the temporary file removed (was left beside it)."""
    out = tmp_path / "r.json"
    out.write_text("old\n")

    def replace(src: str, dst: str, *a: object, **k: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        WRITERS[writer](out)
    assert out.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_file_written_in_place_is_opened_without_o_creat_and_flushed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: str
) -> None:
    """After a refused rename the file is opened ``O_WRONLY | O_TRUNC`` (no ``O_CREAT``, which
    ``fs.protected_regular`` refuses for another user's file in a sticky folder, root too) and
    flushed (``fsync``) before the call returns (was ``open(path, "wb")``, no ``fsync``)."""
    out = tmp_path / "trace.csv"
    out.write_text("old\n")
    inode = out.stat().st_ino
    _refuse_replace(monkeypatch, out, errno.EPERM)
    real_open, real_fsync = os.open, os.fsync
    flags_seen: list[int] = []
    synced: list[int] = []

    def open_(p: object, flags: int, *a: object, **k: object) -> int:
        if isinstance(p, (str, os.PathLike)) and Path(os.fspath(p)) == out:
            flags_seen.append(flags)
        return real_open(p, flags, *a, **k)  # type: ignore[arg-type]

    def fsync(fd: int) -> None:
        synced.append(os.fstat(fd).st_ino)
        real_fsync(fd)

    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "fsync", fsync)
    WRITERS[writer](out)
    assert out.read_text() == "new\n" and out.stat().st_ino == inode
    assert flags_seen and all(f & os.O_TRUNC and not f & os.O_CREAT for f in flags_seen)
    assert inode in synced


_PROTECTED_REGULAR = (
    "import errno, os, sys\n"
    "from pathlib import Path\n"
    "from fleetmind.folders import write_file_whole\n"
    "out = Path(sys.argv[1])\n"
    "def hook(event, args):\n"
    "    if event != 'open' or not isinstance(args[0], (str, bytes, os.PathLike)):\n"
    "        return\n"
    "    if Path(os.fsdecode(args[0])) == out and args[2] & os.O_CREAT and out.exists():\n"
    "        raise PermissionError(errno.EACCES, 'Permission denied', str(out))\n"
    "sys.addaudithook(hook)\n"
    "real = os.replace\n"
    "def replace(src, dst, *a, **k):\n"
    "    if Path(dst) == out:\n"
    "        raise PermissionError(errno.EPERM, 'Operation not permitted', src, None, dst)\n"
    "    return real(src, dst, *a, **k)\n"
    "os.replace = replace\n"
    "write_file_whole(out, b'new\\n')\n"
    "print('ok')\n"
)


def test_another_users_file_in_a_sticky_folder_under_protected_regular(tmp_path: Path) -> None:
    """``fs.protected_regular`` >= 1 (systemd's default): the kernel refuses an ``O_CREAT`` open
    of an existing file of another user in a world-writable sticky folder, ``EACCES``, root too
    (``may_create_in_sticky``, linux ``fs/namei.c``; ``Documentation/admin-guide/sysctl/fs.rst``),
    and refuses the rename over it, ``EPERM``. Both made here in a child (an audit hook on every
    ``open``, ``os.replace`` replaced), whatever this machine's setting: the file is written in
    place (was ``Permission denied``, ``open(path, "wb")``)."""
    out = tmp_path / "shared.csv"
    out.write_text("old\n")
    proc = _run([sys.executable, "-c", _PROTECTED_REGULAR, str(out)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == "ok\n"
    assert out.read_text() == "new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["shared.csv"]


def test_a_temporary_file_that_cannot_be_made_names_the_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was ``fleetmind: error: .fleet.yaml.752.541b2d92.tmp: Permission denied``."""
    out = tmp_path / "fleet.yaml"
    real_open = os.open

    def refuse(p: object, flags: int, *a: object, **k: object) -> int:
        if flags & os.O_CREAT and Path(os.fspath(p)).parent == tmp_path:  # type: ignore[arg-type]
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(p))  # type: ignore[arg-type]
        return real_open(p, flags, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", refuse)

    def command() -> int:
        write_file_whole(out, b"x: 1\n")
        return 0

    assert run_main(command, prog="fleetmind") == 2
    assert capsys.readouterr().err == f"fleetmind: error: {out}: Permission denied\n"


def test_a_full_disk_names_the_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "r.json"
    out.write_text("{}\n")

    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(OSError) as info:
        write_json(out, {"a": 1})
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(out)
    assert out.read_text() == "{}\n"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``argv`` with this environment, MLflow telemetry off."""
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)


def _unshared(script: str, child: str, what: str) -> subprocess.CompletedProcess[str]:
    """``sh -c script`` (``$0``: the Python code ``child``) in a private mount namespace, exit 0;
    the test skipped ("cannot ``what``") where no mount namespace can be made here (exit 77)."""
    proc = _run(["unshare", "-m", "--propagation", "private", "sh", "-c", script, child])
    if proc.returncode == 77 or proc.stderr.startswith("unshare:"):  # no mount namespace here
        pytest.skip(f"cannot {what}: {proc.stderr.strip()[:200]}")
    assert proc.returncode == 0, proc.stderr
    return proc


def _child(code: str, cwd: Path, *prefix: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(cwd),
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
    }
    return subprocess.run(
        [*prefix, sys.executable, "-c", code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


_WRITE = (
    "import sys\n"
    "from fleetmind.data.openb_variants import write_variant\n"
    "for p in sys.argv[1:] or ['trace.csv']:\n"
    "    try:\n"
    "        write_variant(p, 'name,cpu_milli\\nnew,1\\n')\n"
    "        print(p, 'ok')\n"
    "    except OSError as err:\n"
    "        print(p, type(err).__name__, err.filename, err.strerror)\n"
)


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
def test_a_real_bind_mounted_file_is_written_in_place(tmp_path: Path) -> None:
    """``docker run -v host.csv:/data/trace.csv``: the rename gives ``EBUSY``."""
    host, mounted = tmp_path / "host.csv", tmp_path / "mnt" / "trace.csv"
    host.write_text("host-old\n")
    mounted.parent.mkdir()
    mounted.write_text("x\n")
    script = (
        f"mount --bind {host} {mounted} || exit 77\n"
        f'cd {mounted.parent} && exec {sys.executable} -c "$0"\n'
    )
    proc = _unshared(script, _WRITE, "bind-mount")
    assert proc.stdout == "trace.csv ok\n"
    assert host.read_text() == "name,cpu_milli\nnew,1\n"
    assert sorted(p.name for p in mounted.parent.iterdir()) == ["trace.csv"]


_READ_ONLY = (
    "import sys\n"
    "from fleetmind.cli.runner import run_main\n"
    "from fleetmind.training.io import write_json\n"
    "def command():\n"
    "    write_json('r.json', {'a': 1})\n"
    "    return 0\n"
    "print('rc', run_main(command, prog='fleetmind'))\n"
)


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
def test_a_real_read_only_mount_says_so(tmp_path: Path) -> None:
    """``docker run -v results:/out:ro``: ``Read-only file system`` (``EROFS``), root too (was
    ``Permission denied``: ``os.access`` says no for a read-only mount as well)."""
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    (src / "r.json").write_text("{}\n")
    script = (
        f"mount --bind {src} {mnt} && mount -o remount,bind,ro {mnt} || exit 77\n"
        f'cd {mnt} && exec {sys.executable} -c "$0"\n'
    )
    proc = _unshared(script, _READ_ONLY, "mount read-only")
    assert proc.stdout == "rc 2\n"
    assert proc.stderr == "fleetmind: error: r.json: Read-only file system\n"
    assert (src / "r.json").read_text() == "{}\n"
    assert sorted(p.name for p in src.iterdir()) == ["r.json"]


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv(1)"
)
def test_real_other_users_files() -> None:
    """As user 4242: another user's world-writable file in a sticky folder is written in place
    (was ``EPERM``, the rename refused); a ``0444`` file of one's own is refused, naming it."""
    top = Path(tempfile.mkdtemp(prefix="fleetmind-whole-"))
    try:
        top.chmod(0o755)
        sticky = top / "st"
        sticky.mkdir()
        sticky.chmod(0o1777)
        shared = sticky / "shared.csv"
        shared.write_text("old\n")
        shared.chmod(0o666)
        os.chown(shared, 4343, 4343)
        ro = sticky / "ro.csv"
        ro.write_text("mine\n")
        ro.chmod(0o444)
        os.chown(ro, 4242, 4242)
        user = ("setpriv", "--reuid", "4242", "--regid", "4242", "--clear-groups")
        proc = _child(_WRITE.replace("'trace.csv'", "'shared.csv', 'ro.csv'"), sticky, *user)
        if "No module named" in proc.stderr or "Permission denied: '" in proc.stderr:
            pytest.skip(f"the package is not readable by another user: {proc.stderr[-200:]}")
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines() == [
            "shared.csv ok",
            "ro.csv PermissionError ro.csv Permission denied",
        ]
        assert shared.read_text() == "name,cpu_milli\nnew,1\n"
        assert shared.stat().st_uid == 4343  # the same file, still the other user's
        assert ro.read_text() == "mine\n"
        assert sorted(p.name for p in sticky.iterdir()) == ["ro.csv", "shared.csv"]
    finally:
        shutil.rmtree(top, ignore_errors=True)
