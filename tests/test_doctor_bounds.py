"""``fleetmind doctor`` takes the same bounds as ``fleetmind serve``: ``--timeout`` at most the
service's one-year :data:`~fleetmind.serving.settings.MAX_DURATION_S` (``1e10`` overflowed a
timestamp: a traceback and exit status 1, which means "errors found"), and
``FLEETMIND_TELEMETRY_MAX_AGE_S`` validated by the service's own settings field (the doctor took
``1e12``, which the service refuses)."""

from __future__ import annotations

import os

import pytest
from pydantic import ValidationError

from fleetmind.cli import main
from fleetmind.data.errors import ConfigError
from fleetmind.serving.settings import MAX_DURATION_S, Settings
from fleetmind.serving.telemetry.doctor import as_json, diagnose

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
UNUSED = "http://127.0.0.1:18251"  # nothing listens there: every case stops before a query


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("fleetmind: error: "), err
    return err[0]


@pytest.mark.parametrize("timeout", ["1e10", "31536001", "0", "-1"])
def test_timeout_out_of_range_is_one_line_exit_2(
    timeout: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["doctor", "--prometheus", UNUSED, "--timeout", timeout]) == 2
    line = _one_line(capsys)
    assert "--timeout" in line and "31536000" in line


@pytest.mark.parametrize("value", ["1e12", "31536001", "-1", "nan", "two minutes"])
def test_max_age_the_service_refuses_the_doctor_refuses(
    value: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FLEETMIND_TELEMETRY_MAX_AGE_S", value)
    with pytest.raises(ValidationError):
        Settings()
    with pytest.raises(ConfigError, match="FLEETMIND_TELEMETRY_MAX_AGE_S"):
        diagnose(UNUSED, timeout_s=1)
    assert main(["doctor", "--prometheus", UNUSED, "--timeout", "1"]) == 2
    assert "FLEETMIND_TELEMETRY_MAX_AGE_S" in _one_line(capsys)


@pytest.mark.parametrize("value", ["0", "400", str(int(MAX_DURATION_S))])
def test_max_age_the_service_takes_the_doctor_takes(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fleetmind.serving.telemetry.doctor import _env_setting

    monkeypatch.setenv("FLEETMIND_TELEMETRY_MAX_AGE_S", value)
    assert _env_setting("telemetry_max_age_s", 120.0) == Settings().telemetry_max_age_s


def test_json_report_masks_the_url() -> None:
    assert as_json("http://u:Zm9v/YmFy@prom:9090", [])["prometheus"] == "http://***@prom:9090"
