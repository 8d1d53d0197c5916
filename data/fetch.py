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
from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

from fleetmind.data.errors import ConfigError, DataError, NotAvailableError
from fleetmind.redact import safe_uri

CHUNK_BYTES = 1 << 16


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


def _download(client: Any, url: str, part: Path) -> tuple[int, str]:
    """Stream ``url`` into ``part``; returns its size and SHA-256 (``part`` removed on failure)."""
    import httpx

    h = hashlib.sha256()
    size = 0
    try:
        with client.stream("GET", url) as resp:
            if resp.status_code != 200:
                raise NotAvailableError(f"{url}: HTTP {resp.status_code}")
            with part.open("wb") as out:
                for chunk in resp.iter_bytes(CHUNK_BYTES):
                    out.write(chunk)
                    h.update(chunk)
                    size += len(chunk)
    except httpx.InvalidURL as err:
        part.unlink(missing_ok=True)
        raise ConfigError(f"cannot download {url}: not a valid URL: {err}") from None
    except httpx.HTTPError as err:
        part.unlink(missing_ok=True)
        raise NotAvailableError(f"cannot download {url}: {err}") from None
    except NotAvailableError:
        part.unlink(missing_ok=True)
        raise
    return size, h.hexdigest()


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

    Args:
        name: a manifest key (``openb``, ``petshop``).
        dest: the shared data folder (what ``FLEETMIND_SHARED_DATA`` names).
        base_url: overrides the manifest's ``base_url`` (a mirror; the tests' local server). Each
            file is fetched from ``base_url + url_path``.
        manifest: overrides the packaged manifest (tests).
        timeout_s: per-request timeout in seconds.
        progress: called with one line per file.

    Raises:
        ConfigError: ``base_url`` is not an http(s) URL.
        DataError: unknown dataset, a checksum or size mismatch (nothing is moved into place for
            that file).
        NotAvailableError: the server could not be reached or answered with an error status.
    """
    import httpx

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
    try:
        with httpx.Client(timeout=timeout_s, follow_redirects=True) as client:
            for f in entry["files"]:
                target = root / _safe_relative(f["path"])
                if target.is_file() and _sha256(target) == f["sha256"]:
                    kept.append(f["path"])
                    continue
                made = _missing_dirs(target.parent) + made
                target.parent.mkdir(parents=True, exist_ok=True)
                part = target.with_name(target.name + ".part")
                url = base + f["url_path"]
                size, digest = _download(client, url, part)
                if size != f["bytes"] or digest != f["sha256"]:
                    part.unlink(missing_ok=True)
                    raise DataError(
                        f"{url}: checksum mismatch ({size} bytes, sha256 {digest[:12]}..., "
                        f"expected {f['bytes']} bytes, {f['sha256'][:12]}...); nothing was kept"
                    )
                part.replace(target)
                downloaded.append(f["path"])
                if progress is not None:
                    progress(f"  {f['path']} ({size:,} bytes) ok")
    except BaseException:
        _remove_empty(sorted(made, key=lambda d: -len(d.parts)))
        raise
    return FetchReport(root, downloaded, kept, entry["citation"], entry["terms"])
