"""Test helpers for ``fleetmind data fetch``: a toy dataset manifest and a local HTTP mirror."""

from __future__ import annotations

import hashlib
import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path


def toy_manifest(name: str, files: dict[str, bytes], citation: str = "c", terms: str = "t") -> dict:
    """A manifest (``fleetmind.data.fetch.load_manifest``'s shape) of one dataset ``name`` whose
    files are ``files`` (path in the dataset folder -> bytes), each fetched by its base name."""
    return {
        name: {
            "title": f"toy {name}",
            "base_url": "http://unused.invalid/",
            "folder": name,
            "citation": citation,
            "terms": terms,
            "files": [
                {
                    "path": p,
                    "url_path": p.split("/")[-1],
                    "sha256": hashlib.sha256(b).hexdigest(),
                    "bytes": len(b),
                }
                for p, b in files.items()
            ],
        }
    }


@contextmanager
def serve_folder(root: Path) -> Iterator[str]:
    """Python's ``http.server`` over ``root`` on a free port, quiet; yields its base URL."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # no access log on stderr
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
