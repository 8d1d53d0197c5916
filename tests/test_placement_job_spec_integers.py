"""``POST /api/v1/placements``: the job's counts are integers; a JSON boolean is a 422, a numeric
string still reads as its number.

Upstream behaviour behind the expectations: pydantic v2's lax mode converts ``true``/``false`` to
1/0 for an ``int`` field ("Conversion Table": bool -> int in lax mode) and numeric strings too;
strict mode (``Strict()``) would refuse both, and clients that send ``"2"`` would break, so the
job refuses booleans alone. JSON (RFC 8259) keeps ``true`` and numbers apart.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from serving_helpers import serving_settings

from fleetmind.serving.app import create_app
from fleetmind.serving.schemas import JobSpec
from fleetmind.serving.telemetry.base import GpuState, NodeState
from fleetmind.serving.telemetry.sim import SimSource

COUNTS = ("num_gpu", "gpu_milli", "cpu_milli", "memory_mib", "alternatives")


@pytest.mark.parametrize("field", COUNTS)
@pytest.mark.parametrize("value", ["true", "false"])
def test_a_boolean_count_is_refused(field: str, value: str) -> None:
    with pytest.raises(ValidationError, match="must be an integer, not a boolean"):
        JobSpec.model_validate_json(f'{{"{field}": {value}}}')


def test_numbers_and_numeric_strings_still_read() -> None:
    job = JobSpec.model_validate_json(
        '{"num_gpu": "2", "gpu_milli": 1000.0, "cpu_milli": "500", "alternatives": 0}'
    )
    assert (job.num_gpu, job.gpu_milli, job.cpu_milli, job.alternatives) == (2, 1000, 500, 0)
    assert JobSpec(reserve=True).reserve is True  # a real boolean field stays one


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = serving_settings(tmp_path)
    gpus = [GpuState(index=i, model="A100", free_milli=1000) for i in range(2)]
    with TestClient(create_app(settings)) as c:
        c.app.state.services.telemetry = SimSource(
            [NodeState(name="a", cluster="c0", gpus=gpus, cpu_milli=0, memory_mib=0)]
        )
        yield c


def test_the_route_answers_422_naming_the_field(client: TestClient) -> None:
    r = client.post("/api/v1/placements", json={"num_gpu": True})
    assert r.status_code == 422 and "num_gpu" in r.text and "not a boolean" in r.text
    r = client.post("/api/v1/placements", json={"num_gpu": "1"})
    assert r.status_code == 200 and r.json()["node"] == "a"
