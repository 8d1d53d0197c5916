"""``rca calibrate`` records the UTC date (``date`` of its ``--json`` and of the ``calibration``
entry ``--write`` stores in ``config.json``), as every other stamp of FleetMind (the provenance's
``created``) is UTC. Before the fix it was the local date (``dt.date.today()``): a run at 23:00 UTC
in Pacific/Chatham (UTC+13:45) recorded the next day."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from fleetmind.training import rca_calibrate

NOW_UTC = dt.datetime(2026, 1, 1, 23, 0, tzinfo=dt.UTC)
"""The instant of the run: still 1 January in UTC, 2 January in Pacific/Chatham."""
LOCAL = dt.timezone(dt.timedelta(hours=13, minutes=45))


class _Date(dt.date):
    @classmethod
    def today(cls) -> _Date:  # the local date
        d = NOW_UTC.astimezone(LOCAL).date()
        return cls(d.year, d.month, d.day)


class _DateTime(dt.datetime):
    @classmethod
    def now(cls, tz: dt.tzinfo | None = None) -> _DateTime:  # type: ignore[override]
        t = NOW_UTC.astimezone(tz or LOCAL)
        return cls.combine(t.date(), t.timetz()) if tz else cls.combine(t.date(), t.time())


def test_the_calibration_date_is_the_utc_date(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(0)

    def logits(gat: Any, ds: Any, incidents: Any) -> tuple[list[np.ndarray], list[int]]:
        z = [rng.normal(size=5) for _ in incidents]
        return z, [int(np.argmax(zi)) if i % 3 else 0 for i, zi in enumerate(z)]

    monkeypatch.setattr(rca_calibrate, "incident_logits", logits)
    fake_dt = SimpleNamespace(date=_Date, datetime=_DateTime, UTC=dt.UTC, timezone=dt.timezone)
    monkeypatch.setattr(rca_calibrate, "dt", fake_dt)
    fit = [{"id": i} for i in range(40)]
    payload, _ = rca_calibrate.fit_calibration(
        SimpleNamespace(version="v"), SimpleNamespace(meta={}), fit, {}, "val", "d",
        progress=False,
    )  # fmt: skip
    assert payload["date"] == "2026-01-01"
    assert rca_calibrate.calibration_record(payload)["date"] == "2026-01-01"
