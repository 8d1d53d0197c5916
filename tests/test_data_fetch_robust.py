"""``fleetmind data fetch`` against a misbehaving mirror: two fetches into one folder, credentials
in ``--base-url``, proxy variables httpx cannot use, a full disk or Ctrl-C mid-file, a server that
trickles bytes, and a ``--dest`` with a space. The mirror is an ``httpx.MockTransport`` (no
network); the clock of the per-file deadline is a fake one."""

from __future__ import annotations

import errno
import hashlib
import importlib.util
import os
import random
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from fetch_helpers import toy_manifest

import fleetmind.data.fetch as fetch
from fleetmind.cli import main
from fleetmind.data.errors import ConfigError, DataError, NotAvailableError
from fleetmind.data.fetch import fetch_dataset

NODES, PODS = "csv/openb_node_list_gpu_node.csv", "csv/openb_pod_list_default.csv"
CHUNK = 8
BODY = bytes(range(48))  # six chunks of CHUNK bytes, all different
FILES = {NODES: b"sn,cpu_milli\n", PODS: BODY}
MANIFEST = toy_manifest("openb", FILES)
PASSWORD = "s3cr3tPw"
# the race needs writes larger than Python's file buffer (8 KiB), so that they reach the file
BIG_CHUNK = 1 << 14
BIG = random.Random(7).randbytes(6 * BIG_CHUNK)


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    for var in ("ALL_PROXY", "HTTPS_PROXY", "HTTP_PROXY"):
        monkeypatch.delenv(var, raising=False)
        monkeypatch.delenv(var.lower(), raising=False)


def _mirror(
    monkeypatch: pytest.MonkeyPatch, handler: Callable[[httpx.Request], httpx.Response]
) -> None:
    """Every ``httpx.Client`` fetch_dataset makes answers through ``handler``."""
    real = httpx.Client

    def client(**kw: object) -> httpx.Client:
        return real(transport=httpx.MockTransport(handler), **kw)

    monkeypatch.setattr(httpx, "Client", client)


def _serve(
    files: dict[str, bytes], stream_of: dict[str, Callable[[], Iterator[bytes]]] | None = None
) -> Callable[[httpx.Request], httpx.Response]:
    stream_of = stream_of or {}

    def handler(request: httpx.Request) -> httpx.Response:
        name = request.url.path.rsplit("/", 1)[-1]
        if name in stream_of:
            return httpx.Response(200, content=stream_of[name]())
        for p, b in files.items():
            if p.endswith("/" + name):
                return httpx.Response(200, content=b)
        return httpx.Response(404)

    return handler


def _chunks(data: bytes) -> list[bytes]:
    return [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)]


def _leftovers(dest: Path) -> list[str]:
    return sorted(str(p.relative_to(dest)) for p in dest.rglob("*")) if dest.exists() else []


def test_two_fetches_into_one_folder_never_keep_a_corrupt_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both fetches wrote one ``<name>.part``: B opened it "wb" (truncating) while A was mid-file,
    A went on writing at its offset (a hole of zero bytes), checked the digest of the bytes it had
    received, not of the file, and moved a corrupt file into place as verified."""
    a_mid, b_started, a_done = threading.Event(), threading.Event(), threading.Event()
    calls = {"n": 0}
    lock = threading.Lock()

    def pods() -> Iterator[bytes]:
        with lock:
            calls["n"] += 1
            first = calls["n"] == 1
        for i, c in enumerate(BIG[k : k + BIG_CHUNK] for k in range(0, len(BIG), BIG_CHUNK)):
            if first and i == 3:  # A has written 3 chunks: let B start
                a_mid.set()
                assert b_started.wait(10)
            if not first and i == 1:  # B has opened its file and written 1 chunk
                b_started.set()
                assert a_done.wait(10)
            yield c

    monkeypatch.setattr(fetch, "CHUNK_BYTES", BIG_CHUNK)
    files = {NODES: FILES[NODES], PODS: BIG}
    manifest = toy_manifest("openb", files)
    _mirror(monkeypatch, _serve(files, {"openb_pod_list_default.csv": pods}))
    dest = tmp_path / "shared"
    results: dict[str, object] = {}

    def run(who: str) -> None:
        try:
            results[who] = fetch_dataset("openb", dest, base_url="http://m/", manifest=manifest)
        except BaseException as err:  # noqa: BLE001 (recorded and checked below)
            results[who] = err

    a = threading.Thread(target=run, args=("A",))
    a.start()
    assert a_mid.wait(10)
    b = threading.Thread(target=run, args=("B",))
    b.start()
    assert b_started.wait(10)  # (B blocks inside its stream until A is done)
    a.join(10)
    target = dest / "openb" / PODS
    try:
        if not isinstance(results["A"], BaseException):  # A said verified: the file must be whole
            got = hashlib.sha256(target.read_bytes()).hexdigest()
            assert got == hashlib.sha256(BIG).hexdigest()
    finally:
        a_done.set()
        b.join(10)
    assert not a.is_alive() and not b.is_alive()
    for who in ("A", "B"):
        assert not isinstance(results[who], BaseException), (who, results[who])
    assert target.read_bytes() == BIG
    assert not list(dest.rglob("*.part"))


def _password_free(err: BaseException) -> str:
    msg = str(err)
    assert PASSWORD not in msg and "\n" not in msg, msg
    return msg


@pytest.mark.parametrize("kind", ["404", "mismatch", "refused"])
def test_download_errors_mask_the_password(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``http://user:PASSWORD@mirror/`` was quoted in clear in every download error."""

    def handler(request: httpx.Request) -> httpx.Response:
        if kind == "refused":
            raise httpx.ConnectError(f"[Errno 111] Connection refused: {request.url}")
        if kind == "404":
            return httpx.Response(404)
        return httpx.Response(200, content=b"tampered")

    _mirror(monkeypatch, handler)
    url = f"http://mirror-user:{PASSWORD}@127.0.0.1:19200/"
    expect = {"404": NotAvailableError, "mismatch": DataError, "refused": NotAvailableError}[kind]
    with pytest.raises(expect) as info:
        fetch_dataset("openb", tmp_path / "d", base_url=url, manifest=MANIFEST)
    msg = _password_free(info.value)
    assert "***@127.0.0.1:19200" in msg, msg
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize(
    ("var", "value", "needs"),
    [
        ("ALL_PROXY", f"socks5h://u:{PASSWORD}@127.0.0.1:1080", "socksio"),
        ("HTTPS_PROXY", "socks5://127.0.0.1:1080", "socksio"),
        ("HTTP_PROXY", "ftp://127.0.0.1:21", "fix or unset"),
        # a password with "/" (base64): httpx reads the rest as a port, InvalidURL (not a
        # ValueError) got through as a traceback quoting the start of the password
        ("HTTPS_PROXY", f"http://u:Zm9v/{PASSWORD}@proxy:3128", "percent-encoded"),
    ],
)
def test_unusable_proxy_variable_is_one_line(
    var: str,
    value: str,
    needs: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """httpx reads the proxy variables when the client is made: a SOCKS one raised ImportError
    (socksio missing), an ftp:// one ValueError, both as tracebacks, exit 1."""
    if needs == "socksio" and importlib.util.find_spec("socksio") is not None:
        pytest.skip("socksio is installed: httpx can use a SOCKS proxy")
    monkeypatch.setenv(var, value)
    dest = tmp_path / "d"
    with pytest.raises(ConfigError, match=var) as info:
        fetch_dataset("openb", dest, base_url="http://127.0.0.1:19201/", manifest=MANIFEST)
    assert needs in _password_free(info.value)
    assert not dest.exists()
    monkeypatch.setattr(fetch, "load_manifest", lambda path=None: MANIFEST)
    rc = main(["data", "fetch", "openb", "--dest", str(dest), "--base-url", "http://m:1/"])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 2 and len(err) == 1 and err[0].startswith("fleetmind: error:"), err


@pytest.mark.parametrize(
    "exc", [OSError(errno.ENOSPC, "No space left on device"), KeyboardInterrupt()]
)
def test_full_disk_or_ctrl_c_mid_file_leaves_nothing(
    exc: BaseException, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only httpx errors removed the ``.part``: after ENOSPC or Ctrl-C it stayed, unverified,
    and kept its (otherwise empty) dataset folders alive."""

    def pods() -> Iterator[bytes]:
        yield BODY[:CHUNK]
        raise exc

    monkeypatch.setattr(fetch, "CHUNK_BYTES", CHUNK)
    _mirror(monkeypatch, _serve(FILES, {"openb_pod_list_default.csv": pods}))
    dest = tmp_path / "shared"
    one = {PODS: BODY}  # the only file: no verified file may keep the folders
    with pytest.raises(type(exc)):
        fetch_dataset("openb", dest, base_url="http://m/", manifest=toy_manifest("openb", one))
    assert _leftovers(dest) == []
    assert not dest.exists()


def test_trickling_server_hits_the_per_file_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``timeout_s`` is httpx's per-read limit: a byte every few seconds never reached it, and
    a fetch ran for hours. Now a file must arrive within ``timeout_s`` + size / MIN_RATE_BYTES_S.
    The clock is fake: one second per read."""
    clock = {"t": 0.0}

    def now() -> float:
        return clock["t"]

    def pods() -> Iterator[bytes]:
        for i in range(len(BODY)):
            clock["t"] += 1.0
            yield BODY[i : i + 1]

    monkeypatch.setattr(fetch, "_now", now, raising=False)
    _mirror(monkeypatch, _serve(FILES, {"openb_pod_list_default.csv": pods}))
    dest = tmp_path / "shared"
    with pytest.raises(NotAvailableError, match="too slow") as info:
        fetch_dataset("openb", dest, base_url="http://m/", manifest=MANIFEST, timeout_s=5.0)
    assert "\n" not in str(info.value)
    assert clock["t"] < len(BODY)  # stopped before the whole file came
    assert not list(dest.rglob("*.part"))


def test_export_line_quotes_a_dest_with_a_space(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``export FLEETMIND_SHARED_DATA=/x/my data`` exported ``/x/my`` (and a variable ``data``)."""
    monkeypatch.setattr(fetch, "load_manifest", lambda path=None: MANIFEST)
    monkeypatch.delenv("FLEETMIND_SHARED_DATA", raising=False)
    _mirror(monkeypatch, _serve(FILES))
    dest = tmp_path / "my data"
    assert main(["data", "fetch", "openb", "--dest", str(dest), "--base-url", "http://m/"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("use it:"))
    words = shlex.split(line.removeprefix("use it: "))
    assert words == ["export", f"FLEETMIND_SHARED_DATA={dest.resolve()}"], line


def test_a_file_complete_after_the_deadline_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deadline stops a download that has not finished; the read that brings the last bytes
    after it keeps the file (it was thrown away though complete)."""
    clock = {"t": 0.0}

    def pods() -> Iterator[bytes]:
        yield BODY[:-1]
        clock["t"] += 1e6  # the last byte comes long after the deadline
        yield BODY[-1:]

    monkeypatch.setattr(fetch, "_now", lambda: clock["t"], raising=False)
    _mirror(monkeypatch, _serve(FILES, {"openb_pod_list_default.csv": pods}))
    dest = tmp_path / "shared"
    fetch_dataset("openb", dest, base_url="http://m/", manifest=MANIFEST, timeout_s=5.0)
    assert not list(dest.rglob("*.part"))
    assert [p.read_bytes() for p in dest.rglob("openb_pod_list_default.csv")] == [BODY]


def test_a_killed_fetch_leaves_no_part_behind_the_next_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fetch killed by SIGTERM or SIGKILL runs no clean-up: its ``<name>.<pid>.<hex>.part``
    stayed for good, one more per killed run (each name is new). The next fetch of the file
    removes those of processes no longer running, and no other file."""
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    _mirror(monkeypatch, _serve(FILES, {}))
    dest = tmp_path / "shared"
    fetch_dataset("openb", dest, base_url="http://m/", manifest=MANIFEST)
    (target,) = dest.rglob("openb_pod_list_default.csv")
    stale = target.with_name(f"{target.name}.{int(dead.stdout)}.0123abcd.part")
    live = target.with_name(f"{target.name}.{os.getppid()}.89abcdef.part")
    other = target.with_name(f"{target.name}.{int(dead.stdout)}.0123abcd.bak")
    young = target.with_name(f"{target.name}.{int(dead.stdout)}.fedcba98.part")  # written just
    # now: perhaps a live fetch of another PID namespace (a container sharing the volume)
    huge = target.with_name(f"{target.name}.99999999999.0123abcd.part")  # no such pid anywhere
    hour_ago = time.time() - fetch.STALE_PART_S - 60
    for p in (stale, live, other, young, huge):
        p.write_bytes(b"x")
        if p is not young:
            os.utime(p, (hour_ago, hour_ago))
    target.unlink()  # fetched again: the file is missing
    fetch_dataset("openb", dest, base_url="http://m/", manifest=MANIFEST)
    assert not stale.exists()
    assert live.exists() and other.exists() and young.exists() and huge.exists()


def test_a_mirror_that_sends_more_than_the_file_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the manifest's size had arrived the deadline no longer applied, and nothing checked
    for more: a mirror going on past the file (a byte now and then, or endlessly) was read to its
    end. More bytes than the manifest's is a mismatch at once."""
    sent = {"n": 0}

    def pods() -> Iterator[bytes]:
        yield BODY
        for _ in range(10_000):
            sent["n"] += 1
            yield b"x"

    _mirror(monkeypatch, _serve(FILES, {"openb_pod_list_default.csv": pods}))
    dest = tmp_path / "shared"
    with pytest.raises(DataError, match="more than the manifest"):
        fetch_dataset("openb", dest, base_url="http://m/", manifest=MANIFEST)
    assert sent["n"] <= 1
    assert not list(dest.rglob("*.part"))
