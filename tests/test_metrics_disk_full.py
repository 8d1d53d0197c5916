"""A full metrics folder (``PROMETHEUS_MULTIPROC_DIR``, used with ``fleetmind serve --workers N``)
neither crash-loops the workers nor starts them silently.

prometheus-client keeps each worker's values in files it grows sparse (``truncate``) and writes
through ``mmap`` (``prometheus_client/mmap_dict.py``, ``MmapedDict.__init__`` and
``_init_value``); on a full file system such a write is a SIGBUS, which killed every worker
without a line while uvicorn restarted them forever. FleetMind checks the folder's room at start
(:func:`fleetmind.serving.metrics.prepare_multiprocess_dir`) and reserves every file's blocks
before the library maps them (:class:`fleetmind.serving.metrics.ReservedMmapedDict`), so a full
disk is an ``ENOSPC`` it survives. ENOSPC is simulated (``os.posix_fallocate`` replaced): no
mount is needed. So is a file system without ``fallocate`` (NFS, FUSE, older ZFS), where glibc
emulates it by writing into each block and answers ``EBADF`` on an ``O_APPEND`` descriptor
(glibc ``sysdeps/posix/posix_fallocate.c``, https://sourceware.org/git/glibc.git: ``flags =
__fcntl (fd, F_GETFL, 0); if (flags < 0 || (flags & O_APPEND) != 0) return EBADF;`` before its
``pread``/``pwrite`` of one byte per block), and a Python without ``os.posix_fallocate`` (macOS).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import mmap
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import mmap_dict as prom_mmap_dict
from prometheus_client import values as prom_values
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.multiprocess import MultiProcessCollector
from serving_helpers import free_port

from fleetmind.cli import main, serve
from fleetmind.data.errors import ConfigError
from fleetmind.serving import metrics as metrics_mod
from fleetmind.serving.metrics import (
    BYTES_PER_WORKER,
    MULTIPROC_ENV,
    ReservedMmapedDict,
    install_mmap_guard,
    prepare_multiprocess_dir,
)
from fleetmind.serving.settings import get_settings

pytestmark = pytest.mark.skipif(
    not hasattr(os, "posix_fallocate"), reason="no posix_fallocate (the guard is a no-op there)"
)

REAL_FALLOCATE = os.posix_fallocate


def _enospc_after(calls: int) -> Callable[[int, int, int], None]:
    """A ``posix_fallocate`` that reserves for real ``calls`` times, then answers ENOSPC, as a
    file system that fills up meanwhile."""
    left = {"n": calls}

    def fake(fd: int, offset: int, length: int) -> None:
        if left["n"] <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        left["n"] -= 1
        REAL_FALLOCATE(fd, offset, length)

    return fake


@pytest.fixture(autouse=True)
def _fresh_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics_mod, "_warned_degraded", set())
    monkeypatch.setattr(prom_values, "MmapedDict", MmapedDict)  # put back after install


def _key(i: int) -> str:
    return prom_mmap_dict.mmap_key("m_total", "m_total", ["route"], [f"/r/{i:04d}" * 8], "help")


# --- start-up: a folder without room is one line, not workers dying -----------------------------


def test_prepare_refuses_a_full_folder_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "prom"
    monkeypatch.setenv(MULTIPROC_ENV, str(folder))
    monkeypatch.setattr(os, "posix_fallocate", _enospc_after(0))
    with pytest.raises(ConfigError) as info:
        prepare_multiprocess_dir(2)
    msg = str(info.value)
    assert "\n" not in msg
    assert f"{MULTIPROC_ENV}={folder}" in msg and "No space left on device" in msg
    assert "MiB free" in msg and "2 MiB needed" in msg and "--workers 1" in msg
    assert os.environ[MULTIPROC_ENV] == str(folder)  # left as it was
    assert os.listdir(folder) == []  # its own directory and the probe removed


def test_prepare_reserves_room_for_every_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[int] = []

    def record(fd: int, offset: int, length: int) -> None:
        asked.append(offset + length)

    monkeypatch.setenv(MULTIPROC_ENV, str(tmp_path))
    monkeypatch.setattr(os, "posix_fallocate", record)
    path, previous = prepare_multiprocess_dir(3)
    try:
        assert asked == [3 * BYTES_PER_WORKER] and os.listdir(path) == []
    finally:
        metrics_mod.cleanup_multiprocess_dir(path, previous)


def test_prepare_skips_the_check_where_nothing_can_be_reserved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file system without ``fallocate`` (glibc emulates most; ``EOPNOTSUPP`` remains for some)
    is not a full one: the service starts."""

    def unsupported(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))

    monkeypatch.setenv(MULTIPROC_ENV, str(tmp_path))
    monkeypatch.setattr(os, "posix_fallocate", unsupported)
    path, previous = prepare_multiprocess_dir(2)
    metrics_mod.cleanup_multiprocess_dir(path, previous)


def test_serve_stops_on_a_full_metrics_folder_like_other_config_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import uvicorn

    started: list[object] = []
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: started.append(a))
    monkeypatch.setattr(serve, "_ignore_sighup", lambda: None)
    for var in ("API", "READ", "INGEST", "SCHEDULE", "ADMIN"):
        monkeypatch.delenv(f"FLEETMIND_{var}_TOKEN", raising=False)
    monkeypatch.setenv("FLEETMIND_DATABASE_URL", f"sqlite:///{tmp_path}/serve.db")
    monkeypatch.delenv(MULTIPROC_ENV, raising=False)
    monkeypatch.setattr(os, "posix_fallocate", _enospc_after(0))
    try:
        code = main(["serve", "--port", str(free_port()), "--workers", "2"])
        err = capsys.readouterr().err
        config_code = main(["serve", "--port", "0"])  # another configuration error
    finally:
        get_settings.cache_clear()
    assert started == [] and code == config_code != 0
    lines = [ln for ln in err.splitlines() if ln.startswith("fleetmind: error:")]
    assert len(lines) == 1 and "Traceback" not in err
    assert "the temporary folder" in lines[0] and "run --workers 1" in lines[0]
    assert MULTIPROC_ENV not in os.environ


# --- run time: a disk that fills up is an ENOSPC the worker survives ---------------------------


def test_a_file_that_cannot_be_created_moves_to_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "counter_4242.db"
    monkeypatch.setattr(os, "posix_fallocate", _enospc_after(0))
    with caplog.at_level(logging.WARNING, logger="fleetmind.serving"):
        d = ReservedMmapedDict(str(path))
        d.write_value("k", 3.0, 0.0)
        assert d.read_value("k") == (3.0, 0.0) and d.degraded
        ReservedMmapedDict(str(tmp_path / "histogram_4242.db")).write_value("h", 1.0, 0.0)
    assert not path.exists()  # an empty .db file would break every scrape
    warnings = [r.getMessage() for r in caplog.records if "no longer updated" in r.getMessage()]
    assert len(warnings) == 2 and all("No space left on device" in w for w in warnings)
    assert warnings[0].startswith("counter metrics of worker pid")
    assert warnings[1].startswith("histogram metrics of worker pid")
    d.close()


def test_growth_on_a_full_disk_keeps_counting_and_the_file_stays_readable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first file reservation succeeds, the growth (a doubling) does not: the values counted
    so far stay readable in the file (a scrape merges them), new ones count in memory."""
    path = tmp_path / "counter_4243.db"
    monkeypatch.setattr(os, "posix_fallocate", _enospc_after(1))
    d = ReservedMmapedDict(str(path))
    n = 0
    while not d.degraded:
        d.write_value(_key(n), float(n), 0.0)
        n += 1
        assert n < 10_000
    assert n > 10  # some series fitted the first 64 KiB
    for i in range(n + 50):
        d.write_value(_key(i), float(i) + 0.5, 0.0)
    assert d.read_value(_key(n + 49)) == (n + 49.5, 0.0)
    in_file = {k: v for k, v, _, _ in MmapedDict.read_all_values_from_file(str(path))}
    assert len(in_file) == n - 1 and in_file[_key(3)] == 3.0  # frozen at the last written values
    assert path.stat().st_size == prom_mmap_dict._INITIAL_MMAP_SIZE
    d.close()


def test_a_live_gauge_file_is_dropped_and_the_merge_still_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gauge = tmp_path / "gauge_livemax_4244.db"
    counter = tmp_path / "counter_4244.db"
    g, c = ReservedMmapedDict(str(gauge)), ReservedMmapedDict(str(counter))
    key = prom_mmap_dict.mmap_key("g", "g", [], [], "help")
    g.write_value(key, 7.0, 0.0)
    c.write_value(prom_mmap_dict.mmap_key("c", "c_total", [], [], "help"), 2.0, 0.0)
    monkeypatch.setattr(os, "posix_fallocate", _enospc_after(0))
    i = 0
    while not g.degraded:
        g.write_value(_key(i), 1.0, 0.0)
        i += 1
    assert not gauge.exists() and g.read_value(key) == (7.0, 0.0)  # still counting in memory
    merged = {m.name: m for m in MultiProcessCollector(None, str(tmp_path)).collect()}
    assert "g" not in merged and merged["c"].samples[0].value == 2.0
    g.close()
    c.close()


# --- the library internals the guard relies on (an upgrade that changes them fails here) -------


def test_every_mapped_byte_was_reserved_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """prometheus-client maps the file at ``__init__`` (``_INITIAL_MMAP_SIZE`` when empty) and
    again at every growth in ``_init_value`` after ``self._f.truncate``: each map must lie within
    what was reserved. A release that grows the file some other way breaks this test."""
    reserved = {"size": 0}
    mapped: list[tuple[int, int]] = []

    def record_reserve(fd: int, offset: int, length: int) -> None:
        reserved["size"] = max(reserved["size"], offset + length)
        REAL_FALLOCATE(fd, offset, length)

    real_mmap = mmap.mmap

    def record_map(fd: int, length: int, *args: object, **kw: object) -> mmap.mmap:
        mapped.append((length, reserved["size"]))
        return real_mmap(fd, length, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "posix_fallocate", record_reserve)
    monkeypatch.setattr(prom_mmap_dict.mmap, "mmap", record_map)
    d = ReservedMmapedDict(str(tmp_path / "histogram_4245.db"))
    for i in range(2000):
        d.write_value(_key(i), 1.0, 0.0)
    d.close()
    assert len(mapped) >= 3  # the initial map and at least two doublings
    assert all(length <= size for length, size in mapped), mapped
    assert isinstance(prom_mmap_dict._INITIAL_MMAP_SIZE, int)


def test_install_makes_new_multiprocess_files_reserved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``values.MultiProcessValue`` opens each per-process file as ``MmapedDict(filename)``, the
    module-level name :func:`install_mmap_guard` replaces."""
    monkeypatch.setenv(MULTIPROC_ENV, str(tmp_path))
    install_mmap_guard()
    value_class = prom_values.MultiProcessValue(lambda: 4246)
    value = value_class("counter", "c", "c_total", (), (), "help")
    value.inc(2.0)
    assert isinstance(value._file, ReservedMmapedDict)  # noqa: SLF001
    assert value.get() == 2.0
    value_class.close_all_files()


# --- in a worker: a whole Metrics on a disk that fills up --------------------------------------

WORKER = """
import errno, faulthandler, os, sys
real = os.posix_fallocate
left = {"n": int(sys.argv[1])}
def fake(fd, offset, length):
    if left["n"] <= 0:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    left["n"] -= 1
    real(fd, offset, length)
os.posix_fallocate = fake
from fleetmind.serving.metrics import Metrics
m = Metrics()
for i in range(300):
    m.request_latency.labels("GET", f"/api/v1/route{i}", "200").observe(0.01)
m.alerts_ingested.labels("firing").inc(5)
m.open_incidents.set(3)
body = m.render()[0].decode()
print("faulthandler", faulthandler.is_enabled())
print("ingested", [ln for ln in body.splitlines() if ln.startswith("fleetmind_alerts_ingested_total")])
print("incidents", [ln for ln in body.splitlines() if ln.startswith("fleetmind_open_incidents")])
print("files", sorted(os.listdir(os.environ["PROMETHEUS_MULTIPROC_DIR"])))
"""


def test_a_worker_whose_disk_fills_keeps_running_and_says_so_once(tmp_path: Path) -> None:
    """A worker's four files (counter, histogram, the livemax and the livemostrecent gauges) are
    reserved (4 calls), the histogram's growth is not: the worker
    renders ``/metrics`` and exits normally; one warning line names the folder and the histogram
    file as what froze, while the counter and the gauge (set after it) keep updating."""
    env = {**os.environ, MULTIPROC_ENV: str(tmp_path), "MLFLOW_DISABLE_TELEMETRY": "true"}
    out = subprocess.run(
        [sys.executable, "-c", WORKER, "4"], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "faulthandler True" in out.stdout
    assert 'fleetmind_alerts_ingested_total{status="firing"} 5.0' in out.stdout
    warned = [ln for ln in out.stderr.splitlines() if "no longer updated" in ln]
    assert len(warned) == 1 and str(tmp_path) in warned[0]
    assert "histogram metrics of worker pid" in warned[0] and "gauges are dropped" not in warned[0]
    assert "fleetmind_open_incidents 3.0" in out.stdout
    files = out.stdout.split("files ", 1)[1]
    assert "gauge_livemax_" in files and "histogram_" in files and "counter_" in files


# --- file systems without fallocate, and Pythons without posix_fallocate ----------------------


def _glibc_emulation(
    supported: bool, reserved: list[int] | None = None
) -> Callable[[int, int, int], None]:
    """``posix_fallocate`` on a file system without ``fallocate``: glibc's emulation refuses an
    ``O_APPEND`` descriptor with ``EBADF``; otherwise it writes the blocks (``supported``: the
    real call here, its end in bytes appended to ``reserved``) or, where even that is not
    possible, answers ``EOPNOTSUPP``."""

    def fake(fd: int, offset: int, length: int) -> None:
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND:
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        if not supported:
            raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))
        REAL_FALLOCATE(fd, offset, length)
        if reserved is not None:
            reserved.append(offset + length)

    return fake


@pytest.mark.parametrize("supported", [True, False], ids=["emulated", "unsupported"])
def test_a_file_system_without_fallocate_is_not_a_full_disk(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    supported: bool,
) -> None:
    """The file is created and grown (two doublings) in the file, not in memory, and no warning;
    where the emulation works, every growth was reserved through it (blocks written)."""
    path = tmp_path / "histogram_4247.db"
    reserved: list[int] = []
    monkeypatch.setattr(os, "posix_fallocate", _glibc_emulation(supported, reserved))
    with caplog.at_level(logging.WARNING, logger="fleetmind.serving"):
        d = ReservedMmapedDict(str(path))
        for i in range(2000):
            d.write_value(_key(i), float(i), 0.0)
        assert not d.degraded
        d.close()
    assert path.stat().st_size >= 4 * prom_mmap_dict._INITIAL_MMAP_SIZE
    in_file = {k: v for k, v, _, _ in MmapedDict.read_all_values_from_file(str(path))}
    assert len(in_file) == 2000 and in_file[_key(1999)] == 1999.0
    assert not [r for r in caplog.records if "no longer updated" in r.getMessage()]
    if supported:  # the first 64 KiB, then each doubling
        assert len(reserved) >= 3 and max(reserved) == path.stat().st_size, reserved


def test_emulated_fallocate_still_tells_a_full_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through a descriptor without ``O_APPEND`` the emulation reaches the disk: its ``ENOSPC`` at
    a growth still moves the dict to memory instead of a SIGBUS."""
    emulated = _glibc_emulation(True)
    left = {"n": 1}

    def fake(fd: int, offset: int, length: int) -> None:
        emulated(fd, offset, length)  # EBADF on an O_APPEND descriptor, as glibc
        if left["n"] <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        left["n"] -= 1

    monkeypatch.setattr(os, "posix_fallocate", fake)
    d = ReservedMmapedDict(str(tmp_path / "counter_4248.db"))
    for i in range(2000):
        d.write_value(_key(i), 1.0, 0.0)
    assert d.degraded and d.read_value(_key(1999)) == (1.0, 0.0)
    d.close()


def test_a_python_without_posix_fallocate_reserves_nothing_and_keeps_counting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """macOS: ``os.posix_fallocate`` does not exist; the guard is a no-op, not an AttributeError
    out of ``Metrics()`` in every worker."""
    monkeypatch.delattr(os, "posix_fallocate")
    monkeypatch.setenv(MULTIPROC_ENV, str(tmp_path))
    metrics_mod.check_space(str(tmp_path), BYTES_PER_WORKER)
    d = ReservedMmapedDict(str(tmp_path / "histogram_4249.db"))
    for i in range(2000):
        d.write_value(_key(i), 1.0, 0.0)
    assert not d.degraded
    d.close()
    worker = (
        "import os\n"
        "del os.posix_fallocate\n"
        "from fleetmind.serving.metrics import Metrics\n"
        "m = Metrics()\n"
        "for i in range(300):\n"
        "    m.request_latency.labels('GET', f'/api/v1/route{i}', '200').observe(0.01)\n"
        "m.alerts_ingested.labels('firing').inc(2)\n"
        "print(m.render()[0].decode())\n"
    )
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    out = subprocess.run(
        [sys.executable, "-c", worker], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert 'fleetmind_alerts_ingested_total{status="firing"} 2.0' in out.stdout
