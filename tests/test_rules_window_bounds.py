"""The CrossClusterLatencyHigh case of ``deploy/fleetmind-rules.test.yml`` holds under the range
selector bounds of Prometheus 2 and 3.

Prometheus 2 range selectors are left-closed (``[t-5m, t]``); Prometheus 3 made them left-open
(``(t-5m, t]``): "Range selectors and lookback exclude samples coinciding with the left boundary"
(prometheus/prometheus ``docs/migration.md``). With samples every minute a 5-minute window then holds
5 samples instead of 6, and an alternating input whose 6-sample mean clears the threshold can swing
around it (0.1/0.5: 0.26 and 0.34 against 280 ms), so ``promtool test rules`` of Prometheus 3 failed
the case. This test evaluates the rule's two conditions and its ``for`` on the case's own input
under both bounds (``avg_over_time``, and ``stddev_over_time`` as the population standard
deviation, as ``promql/functions.go`` computes them).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
ALERT = "CrossClusterLatencyHigh"


def _expand(values: str) -> list[float | None]:
    """promtool's series notation (``a``, ``axn``, ``a+bxn``, ``a-bxn``, ``_``, ``_xn``)."""
    out: list[float | None] = []
    for tok in values.split():
        m = re.fullmatch(r"(_|-?[\d.]+)(?:([+-][\d.]+))?(?:x(\d+))?", tok)
        assert m, tok
        start, step, times = m.group(1), m.group(2), m.group(3)
        if start == "_":
            out += [None] * (int(times) if times else 1)
            continue
        if times is None:
            out.append(float(start))
            continue
        inc = float(step) if step else 0.0
        out += [float(start) + i * inc for i in range(int(times) + 1)]
    return out


def _rule() -> dict:
    groups = yaml.safe_load((DEPLOY / "fleetmind-rules.yml").read_text())["groups"]
    return next(r for g in groups for r in g["rules"] if r.get("alert") == ALERT)


def _case() -> dict:
    tests = yaml.safe_load((DEPLOY / "fleetmind-rules.test.yml").read_text())["tests"]
    return next(t for t in tests if any(a["alertname"] == ALERT for a in t["alert_rule_test"]))


def _minutes(text: str) -> int:
    m = re.fullmatch(r"(\d+)m", text)
    assert m, text
    return int(m.group(1))


def _firing(series: list[float | None], at: int, left_open: bool) -> bool:
    """Whether the rule fires at minute ``at`` on samples one per minute from minute 0."""
    rule = _rule()
    expr = rule["expr"]
    window = _minutes(re.search(r"\[(\d+m)\]", expr).group(1))
    mean_min, cv_min = (float(x) for x in re.findall(r">\s*([\d.]+)", expr))
    hold = _minutes(rule["for"])

    def active(t: int) -> bool:
        lo = t - window
        w = [v for i, v in enumerate(series) if v is not None and (lo < i if left_open else lo <= i) and i <= t]  # fmt: skip
        if not w:
            return False
        mean = sum(w) / len(w)
        sd = math.sqrt(sum((v - mean) ** 2 for v in w) / len(w))
        return mean > mean_min and mean > 0 and sd / mean > cv_min

    # fires once active at every evaluation (1m) of the last ``hold`` minutes
    return all(active(t) for t in range(at - hold, at + 1))


@pytest.mark.parametrize("left_open", [False, True], ids=["prometheus2-left-closed", "prometheus3-left-open"])  # fmt: skip
def test_cross_cluster_latency_case_holds_under_both_window_bounds(left_open: bool) -> None:
    case = _case()
    assert _minutes(case["interval"]) == 1
    for check in (a for a in case["alert_rule_test"] if a["alertname"] == ALERT):
        at = _minutes(check["eval_time"])
        expected = {e["exp_labels"]["target_cluster"] for e in check["exp_alerts"]}
        fired = set()
        for s in case["input_series"]:
            target = re.search(r'target_cluster="([^"]+)"', s["series"]).group(1)
            if _firing(_expand(s["values"]), at, left_open):
                fired.add(target)
        assert fired == expected, (at, fired, expected)


def test_expand_reads_promtool_notation() -> None:
    assert _expand("0.3x2 1+2x2 _x1 5") == [0.3, 0.3, 0.3, 1.0, 3.0, 5.0, None, 5.0]
