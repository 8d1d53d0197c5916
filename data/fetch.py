"""Download the public datasets (openb, PetShop) and check them against their SHA-256 sums.

The manifest ``data/datasets.json`` (package data) names, per dataset, the pinned upstream commit as
``base_url``, every file with its size and SHA-256 (those of the files FleetMind's results were made
with), the citation and the terms. :func:`fetch_dataset` downloads each file over HTTP(S) into a
temporary name, checks its size and digest, and only then moves it into place, so an interrupted or
tampered download never leaves a file that looks complete. Files already present with the right
digest are not downloaded again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

from fleetmind.data.errors import ConfigError, DataError, NotAvailableError
from fleetmind.folders import pid_running
from fleetmind.http_client import Deadline, hold_to, proxied_answer_note, proxy_note
from fleetmind.http_client import client as proxied_client
from fleetmind.redact import safe_uri

CHUNK_BYTES = 1 << 16
MIN_RATE_BYTES_S = 1_000
"""Slowest transfer rate accepted (bytes/s): each file must arrive within ``timeout_s`` plus its
size over this rate (the largest manifest file, 2.1 MB: ``timeout_s`` + 35 minutes), else the
fetch fails (checked on each network read: :class:`fleetmind.http_client.Deadline`); ``timeout_s`` alone is httpx's limit
per read, which a server sending a byte now and then never reaches. Low enough for a throttled mobile link (8 kbit/s), which has no other way to
fetch the files (no resume of a partial file)."""

MAX_TIMEOUT_S = 10_000_000.0
"""Largest ``--timeout`` accepted (seconds, about 116 days): the socket layer refuses a timeout
beyond the platform's ``time_t`` (``socket.settimeout(1e10)`` raises ``OverflowError``), which
came out as a traceback."""


def check_timeout(timeout_s: float) -> None:
    """Raise :class:`ConfigError` (one line) unless ``0 < timeout_s <=`` :data:`MAX_TIMEOUT_S`
    seconds (NaN and inf fail too: they would mean no deadline at all)."""
    if not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise ConfigError(
            f"--timeout must be a number of seconds above 0 and at most {MAX_TIMEOUT_S:,.0f}, "
            f"got {timeout_s!r}"
        )


_PART = re.compile(r"(?P<name>.+)\.(?P<pid>\d+)\.[0-9a-f]{8}\.part")
"""A download's temporary file: ``<name>.<pid>.<8 hex>.part``."""

_now = time.monotonic  # the clock of the per-file deadline (seconds); tests replace it


@dataclass(frozen=True)
class FetchReport:
    """What :func:`fetch_dataset` did.

    Attributes:
        folder: the dataset folder (``dest/<folder>``), e.g. ``$FLEETMIND_SHARED_DATA/openb``.
        downloaded: files fetched this time (paths relative to ``folder``).
        kept: files already there with the right checksum.
        citation, terms: what to cite, and the data's terms of use.
    """

    folder: Path
    downloaded: list[str]
    kept: list[str]
    citation: str
    terms: str


def load_manifest(path: str | Path | None = None) -> dict[str, Any]:
    """The dataset manifest: ``{name: {"title", "base_url", "folder", "citation", "terms",
    "files": [{"path", "url_path", "sha256", "bytes"}]}}`` (default: the packaged one)."""
    src = Path(path) if path is not None else Path(str(files("fleetmind.data"))) / "datasets.json"
    try:
        return json.loads(src.read_text())
    except (OSError, ValueError) as err:
        raise DataError(f"cannot read the dataset manifest {src}: {err}") from None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(CHUNK_BYTES), b""):
            h.update(block)
    return h.hexdigest()


def _safe_relative(rel: str) -> PurePosixPath:
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        raise DataError(f"manifest path {rel!r} leaves the dataset folder")
    return p


def check_http_url(url: str, flag: str) -> None:
    """Raise :class:`ConfigError` (one line naming ``flag``) unless ``url`` is an http(s) URL that
    an HTTP client can use (a host, a valid port; ``http://[::1`` is not one).

    Used for the URLs the ``fleetmind`` commands take (``--base-url``, ``--url``, ``--prometheus``),
    before anything is printed or created. The URL is shown with its ``user:password@`` and
    password-like query parameters masked (:func:`fleetmind.redact.safe_uri`); when it carries
    credentials, the parser's own reason is left out, since it may quote part of the password
    (``Port could not be cast to integer value as 'Zm9v'`` for ``http://u:Zm9v/YmFy@host``).
    """
    import httpx

    shown = safe_uri(repr(url))
    bad = f"{flag} must be an http(s) URL (http://HOST:PORT), got {shown}"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError on a port out of range or not a number)
        httpx.URL(url)
    except (ValueError, httpx.InvalidURL) as err:
        if shown != repr(url):
            raise ConfigError(
                f"{bad}: not a valid URL (the parser's reason is not shown, as it may quote the "
                "password; percent-encode a '/', '?', '#' or '@' in a password: %2F, %3F, %23, "
                "%40)"
            ) from None
        raise ConfigError(f"{bad}: {err}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(bad)


def _missing_dirs(path: Path) -> list[Path]:
    """``path`` and those of its parents that do not exist yet, deepest first."""
    out = []
    while not path.exists() and path != path.parent:
        out.append(path)
        path = path.parent
    return out


def _remove_empty(dirs: list[Path]) -> None:
    """Remove the folders of ``dirs`` (deepest first) that are empty; keep the others."""
    for d in dirs:
        try:
            d.rmdir()
        except OSError:
            pass  # not empty (a file was verified there) or already gone


def _download(
    client: Any,
    watch: Deadline,
    url: str,
    part: Path,
    timeout_s: float,
    size: int,
    *,
    mirror: bool = False,
) -> None:
    """Stream ``url`` into the new file ``part`` (created here, exclusively: no other download
    writes into it); it is removed on any failure, a full disk and Ctrl-C included.

    Args:
        watch: the deadline of ``client``'s connections (:func:`_client`), set here: the answer's
            status line and headers must arrive within ``timeout_s`` of the request, the whole
            file within ``timeout_s`` + ``size`` / :data:`MIN_RATE_BYTES_S` (checked on each
            network read, so a server trickling its headers or a compressed body that decodes to
            nothing is bounded too, and as the body arrives).
        timeout_s: seconds (``--timeout``).
        size: the file's size in bytes (the manifest's): once all of it arrived, the deadline no
            longer applies.
        mirror: ``url`` is on a mirror (``--base-url``); else a failed connection's message
            names ``--base-url MIRROR`` (:func:`_unreachable`).
    """
    import httpcore
    import httpx

    shown = safe_uri(url)
    created = False
    start = _now()
    deadline_s = start + timeout_s + size / MIN_RATE_BYTES_S
    watch.at = start + timeout_s
    try:
        with client.stream("GET", url) as resp:
            watch.at = deadline_s
            if resp.status_code != 200:  # (the last URL's: a redirection may change scheme)
                by = proxied_answer_note(str(resp.request.url))
                raise NotAvailableError(f"{shown}: HTTP {resp.status_code}{by}")
            fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            created = True
            got = 0
            with os.fdopen(fd, "wb") as out:
                for chunk in resp.iter_bytes():  # as it arrives: the deadline is checked per read
                    out.write(chunk)
                    got += len(chunk)
                    if got > size:  # a mirror that goes on past the file (or a body that
                        # decodes larger): a size mismatch already, and no deadline would stop it
                        raise DataError(
                            f"{shown}: more than the manifest's {size:,} bytes; nothing was kept"
                        )
                    if got < size and _now() > deadline_s:
                        raise NotAvailableError(_too_slow(shown, timeout_s))
    except BaseException as err:
        if created:
            part.unlink(missing_ok=True)
        late = watch.at is not None and _now() >= watch.at
        if isinstance(err, (httpx.TimeoutException, httpcore.TimeoutException)) and late:
            if created:  # the headers came: the body was too slow
                raise NotAvailableError(_too_slow(shown, timeout_s)) from None
            via, hint = _unreachable(err, url, mirror)
            raise NotAvailableError(
                f"cannot download {shown}: no answer (status line and headers) within "
                f"{timeout_s:g} s{via}; raise the limit with --timeout SECONDS{hint}"
            ) from None
        if isinstance(err, httpx.InvalidURL):
            raise ConfigError(safe_uri(f"cannot download {url}: not a valid URL: {err}")) from None
        if isinstance(err, httpx.HTTPError):
            raise NotAvailableError(
                safe_uri(f"cannot download {url}: {err}") + "".join(_unreachable(err, url, mirror))
            ) from None
        raise
    finally:
        watch.at = None


def _unreachable(err: BaseException, url: str, mirror: bool) -> tuple[str, str]:
    """Two ends of a download's error message when the connection failed (``err``: an
    ``httpx.ConnectError``, ``ConnectTimeout`` or ``ProxyError``; else ``("", "")``): the proxy it
    went through (:func:`fleetmind.http_client.proxy_note`), and, unless ``url`` is on a mirror
    already, that ``--base-url`` fetches from one (a machine without internet access)."""
    import httpx

    if not isinstance(err, (httpx.ConnectError, httpx.ConnectTimeout, httpx.ProxyError)):
        return "", ""
    hint = (
        "" if mirror else "; without access to the server, fetch from a mirror: --base-url MIRROR"
    )
    return proxy_note(err, url), hint


def _too_slow(shown: str, timeout_s: float) -> str:
    """The one-line error of a file that did not arrive in time (``shown``: its masked URL)."""
    return (
        f"cannot download {shown}: too slow (under {MIN_RATE_BYTES_S:,} bytes/s on average after "
        f"the first {timeout_s:g} s); raise the allowance with --timeout SECONDS"
    )


def _remove_dead_parts(target: Path) -> None:
    """Remove the temporary files of ``target`` left by downloads whose process no longer runs (a
    fetch killed by SIGTERM or SIGKILL runs no clean-up) and that nothing wrote for
    :data:`STALE_PART_S`; best effort. The age matters where fetches of other PID namespaces (two
    containers sharing one data volume) write beside it: their pids mean nothing here, but a live
    download writes at least once per read timeout."""
    try:
        entries = list(target.parent.iterdir())
    except OSError:
        return
    now = time.time()
    for p in entries:
        m = _PART.fullmatch(p.name)
        if m is None or m["name"] != target.name or pid_running(int(m["pid"])):
            continue
        try:
            if now - p.stat().st_mtime >= STALE_PART_S:
                p.unlink(missing_ok=True)
        except OSError:
            continue


STALE_PART_S = 3600.0
"""Seconds without a write after which a dead fetch's temporary file is removed."""


def _client(timeout_s: float, watch: Deadline | None = None) -> Any:
    """An ``httpx.Client`` following redirections, with the environment's proxies by Go's rules
    (:mod:`fleetmind.http_client`: ``HTTPS_PROXY`` for an https download, decided again for each
    redirection's host); a proxy variable it cannot use is a one-line :class:`ConfigError`.

    With ``watch``, its connections (those of httpx's own transports; a test's mock transport
    has none) connect, read and write under that deadline (:func:`fleetmind.http_client.hold_to`)."""
    client = proxied_client(timeout=timeout_s, follow_redirects=True)
    if watch is not None:
        hold_to(client, watch)
    return client


def fetch_dataset(
    name: str,
    dest: str | Path,
    *,
    base_url: str | None = None,
    manifest: dict[str, Any] | None = None,
    timeout_s: float = 60.0,
    progress: Callable[[str], None] | None = None,
) -> FetchReport:
    """Download dataset ``name`` into ``dest/<folder>`` and verify every file.

    Folders are made as a file needs them; those this call made and that hold no verified file
    are removed again when it fails, so a failed fetch leaves no empty dataset folder behind (one
    that would read as the dataset being there).

    Each file is written to a temporary name of its own (two fetches into one ``dest`` do not
    share it) and its size and digest are checked on the closed file on disk before it is moved
    into place; the temporary file is removed on any failure. URLs in messages have their
    ``user:password@`` masked.

    Args:
        name: a manifest key (``openb``, ``petshop``).
        dest: the shared data folder (what ``FLEETMIND_SHARED_DATA`` names).
        base_url: overrides the manifest's ``base_url`` (a mirror; the tests' local server). Each
            file is fetched from ``base_url + url_path``.
        manifest: overrides the packaged manifest (tests).
        timeout_s: seconds to connect and for each read (httpx's timeouts); an answer's status
            line and headers must arrive within ``timeout_s`` in all, and a whole file within
            ``timeout_s`` plus its size over :data:`MIN_RATE_BYTES_S` (``--timeout``).
        progress: called with one line per file.

    Raises:
        ConfigError: ``timeout_s`` is not above 0 and at most :data:`MAX_TIMEOUT_S`, ``base_url`` is not an http(s) URL, or a proxy variable (``ALL_PROXY``,
            ``HTTPS_PROXY``, ``HTTP_PROXY``) names a proxy httpx cannot use.
        DataError: unknown dataset, a checksum or size mismatch (nothing is moved into place for
            that file).
        NotAvailableError: the server could not be reached, answered with an error status, or
            sent its headers or a file too slowly.
    """

    man = manifest if manifest is not None else load_manifest()
    if name not in man:
        raise DataError(f"unknown dataset {name!r}; known: {', '.join(sorted(man))}")
    if base_url is not None:
        check_http_url(base_url, "--base-url")
    entry = man[name]
    root = Path(dest) / entry["folder"]
    base = base_url or entry["base_url"]
    if not base.endswith("/"):
        base += "/"
    downloaded, kept = [], []
    made: list[Path] = []
    check_timeout(timeout_s)
    watch = Deadline(clock=lambda: _now())  # (tests may replace _now)
    client = _client(timeout_s, watch)
    try:
        with client:
            for f in entry["files"]:
                target = root / _safe_relative(f["path"])
                if target.is_file() and _sha256(target) == f["sha256"]:
                    kept.append(f["path"])
                    continue
                made = _missing_dirs(target.parent) + made
                target.parent.mkdir(parents=True, exist_ok=True)
                _remove_dead_parts(target)
                part = target.with_name(f"{target.name}.{os.getpid()}.{secrets.token_hex(4)}.part")
                url = base + f["url_path"]
                _download(
                    client, watch, url, part, timeout_s, f["bytes"], mirror=base_url is not None
                )
                try:
                    size, digest = part.stat().st_size, _sha256(part)  # the bytes on disk
                    if size != f["bytes"] or digest != f["sha256"]:
                        raise DataError(
                            f"{safe_uri(url)}: checksum mismatch ({size} bytes, sha256 "
                            f"{digest[:12]}..., expected {f['bytes']} bytes, "
                            f"{f['sha256'][:12]}...); nothing was kept"
                        )
                    os.replace(part, target)
                except BaseException:
                    part.unlink(missing_ok=True)
                    raise
                downloaded.append(f["path"])
                if progress is not None:
                    progress(f"  {f['path']} ({size:,} bytes) ok")
    except BaseException:
        _remove_empty(sorted(made, key=lambda d: -len(d.parts)))
        raise
    return FetchReport(root, downloaded, kept, entry["citation"], entry["terms"])
