"""A model path whose bytes are not UTF-8 cannot turn the service's answers into 500s.

Python decodes such a path's bytes to lone surrogates (``os.fsdecode(b"\\xff")`` is
``"\\udcff"``), which no JSON response can encode. A corrupt model at
``.../nonutf\\xff`` gave a fallback reason quoting the path; ``GET /api/v1/models``,
``POST /api/v1/rca`` and ``POST /api/v1/placements`` then answered 500
(PydanticSerializationError) while ``/readyz`` said ready. The registry now stores the reason
(and the source and version) with such characters as backslash escapes.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fleetmind.data.paths import MODELS_DIR
from fleetmind.serving.app import create_app
from fleetmind.serving.registry import LoadedModel, printable
from fleetmind.serving.settings import Settings

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def bad_model(tmp_path: Path) -> Path:
    """A corrupt model (a GAT config with a truncated model.pt) in a folder named nonutf<0xff>."""
    folder = Path(os.fsdecode(os.fsencode(tmp_path) + b"/nonutf\xff"))
    try:
        folder.mkdir()
    except (OSError, UnicodeEncodeError):  # pragma: no cover - a file system that refuses it
        pytest.skip("this file system takes no non-UTF-8 names")
    shutil.copy(MODELS_DIR / "rca" / "config.json", folder / "config.json")
    (folder / "model.pt").write_bytes((MODELS_DIR / "rca" / "model.pt").read_bytes()[:100])
    return folder


def test_printable_escapes_lone_surrogates_and_masks_passwords() -> None:
    assert printable(None) is None
    assert printable("plain text") == "plain text"
    assert printable("/m/nonutf\udcff") == "/m/nonutf\\udcff"
    assert "pw" not in (printable("http://u:pw@h/x \udcff") or "")
    m = LoadedModel("rca", None, "deepest", "v\udcff", "/m/\udcff", "failed: /m/\udcff", 0.0)
    json.dumps(m.info()).encode("utf-8")  # would raise UnicodeEncodeError on a surrogate


def test_service_answers_with_a_non_utf8_model_path(bad_model: Path, tmp_path: Path) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/u.db",
        rca_model=str(bad_model),
        placement_model=str(bad_model),
        incident_worker=False,
    )
    storm = json.loads((REPO / "examples" / "storm-dns.json").read_text())
    with TestClient(create_app(settings)) as c:
        models = c.get("/api/v1/models")
        assert models.status_code == 200, models.text
        body = models.json()
        for kind in ("rca", "placement"):
            assert "nonutf\\udcff" in body[kind]["fallback_reason"]
        rca = c.post("/api/v1/rca", json=storm)
        assert rca.status_code == 200, rca.text
        assert "nonutf\\udcff" in rca.json()["fallback_reason"]
        p = c.post("/api/v1/placements", json={"num_gpu": 1})
        assert p.status_code == 200, p.text
        assert "nonutf\\udcff" in p.json()["fallback_reason"]
