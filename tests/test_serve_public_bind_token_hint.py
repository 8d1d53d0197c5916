"""``fleetmind serve --host 0.0.0.0`` without a token names every token variable that would let it
start: FLEETMIND_SCHEDULE_TOKEN (the kube-scheduler extender's scope) was left out."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetmind.serving.settings import Settings


def test_the_refusal_names_every_token_variable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from fleetmind.cli import main

    names = [f"FLEETMIND_{f.upper()}" for f in Settings.model_fields if f.endswith("_token")]
    assert "FLEETMIND_SCHEDULE_TOKEN" in names
    for name in names:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FLEETMIND_DATABASE_URL", f"sqlite:///{tmp_path}/x.db")
    assert main(["serve", "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert "without a token" in err, err
    assert [n for n in names if n not in err] == [], err
