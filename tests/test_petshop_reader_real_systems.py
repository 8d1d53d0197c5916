"""The PetShop-format reader on scenarios exported from real systems (Prometheus, cAdvisor).

* A CPU column named as cAdvisor names it (``container_cpu_usage_seconds_total``) is CPU seconds,
  not an event count: it gets no Poisson floor (``sqrt(median + 1)`` >= 1 core would hide a jump
  from 0.2 to 1.2 cores), and a role-map override to a resource or latency role turns the floor
  off (one to ``errors``/``success``/``other`` keeps the name's answer). The
  Prometheus naming guide (https://prometheus.io/docs/practices/naming/) puts ``_total`` on a
  counter "in addition to the unit"; a histogram's ``_count`` counts observations
  (https://prometheus.io/docs/concepts/metric_types/#histogram).
* A blank header cell, a window none of whose columns has a baseline, a row with another number of
  cells than the header, and a role map naming a metric twice stop with one line; a metric with
  too few normal values is warned about and marked ``no baseline``; a metric-level method that
  ranked no issue is ``skipped`` with its reason instead of scoring AC@1 0.000.
* The shipped scenarios (PetShop ``low_traffic``, Train Ticket ``nezha_tt``, the test slice) keep
  the count classification and baseline scale of every column, so released figures do not move.

Each test fails on the reader before these checks (noted per test).
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from fleetmind.cli import main  # noqa: E402
from fleetmind.data.errors import DataError  # noqa: E402
from fleetmind.data.metric_roles import (  # noqa: E402
    RoleMap,
    is_count_metric,
    load_role_map,
    roles_line,
)
from fleetmind.data.petshop import (  # noqa: E402
    DetectorConfig,
    ScenarioWarning,
    detect_alerts,
    fit_baseline,
    load_scenario,
    read_metrics_csv,
)

NODES = ("front", "cart", "db", "auth")
EDGES = {("front", "cart"), ("cart", "db"), ("front", "auth")}
SLICE = Path(__file__).parent / "data" / "petshop_slice"


def _write(path: Path, metrics: list[str], values: np.ndarray, t0: float) -> None:
    """A metrics.csv of ``values`` ``(T, len(NODES) * len(metrics))``, 15 s rows."""
    path.parent.mkdir(parents=True, exist_ok=True)
    cols = [(n, m) for n in NODES for m in metrics]
    lines = [
        "microservice," + ",".join(c[0] for c in cols),
        "metric," + ",".join(c[1] for c in cols),
        "statistic," + ",".join("Average" for _ in cols),
    ]
    for i, row in enumerate(values):
        lines.append(f"{t0 + 15 * i:.15g}," + ",".join(f"{v:.6g}" for v in row))
    path.write_text("\n".join(lines) + "\n")


def _scenario(
    root: Path, metrics: list[str], level: float = 100.0, noise: float = 1.0, jump: float = 500.0
) -> Path:
    """Four services (front -> cart -> db, front -> auth), 60 normal rows, two test issues (roots
    db and auth) whose first metric rises by ``jump`` on the root and its callers from row 3."""
    rng = np.random.default_rng(0)
    root.mkdir(parents=True)
    lines = ["," + ",".join(NODES)] + [
        a + "," + ",".join("1" if (a, b) in EDGES else "0" for b in NODES) for a in NODES
    ]
    (root / "graph.csv").write_text("\n".join(lines) + "\n")
    k = len(metrics)
    normal = level + noise * rng.standard_normal((60, len(NODES) * k))
    _write(root / "noissue" / "metrics.csv", metrics, normal, 1.7e9)
    for i, (cause, hit) in enumerate(
        [("db", ("db", "cart", "front")), ("auth", ("auth", "front"))]
    ):
        win = level + noise * rng.standard_normal((8, len(NODES) * k))
        for j, node in enumerate(NODES):
            if node in hit:
                win[3:, j * k] += jump
        d = root / "test" / f"issue_{i}"
        _write(d / "metrics.csv", metrics, win, 1.69e9 + 1e4 * i)
        target = {"node": "front", "metric": metrics[0], "agg": "Average", "timestamp": 0}
        (d / "target.json").write_text(
            json.dumps({"target": target, "root_cause": {"node": cause}, "metadata": {}})
        )
    return root


def _n_alerts(root: Path, roles: Path | None = None) -> list[int]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ScenarioWarning)
        s = load_scenario(root, roles=roles)
        return [len(s.incident(i)["alerts"]) for i in s.issues("all")]


# ---------------------------------------------------------------------------- F1: count floor
@pytest.mark.parametrize(
    "name",
    [
        "container_cpu_usage_seconds_total",
        "process_cpu_seconds_total",
        "node_cpu_seconds_total",
        "http_server_request_duration_seconds_sum",
        "jvm_gc_pause_seconds_sum",
        "container_network_receive_bytes_total",
        "cache_hit_ratio_sum",
    ],
)
def test_a_name_with_a_unit_is_no_count(name: str) -> None:
    """Old code: ``_total``/``_sum`` made every one of them a count."""
    assert not is_count_metric(name)
    assert not RoleMap().is_count(name)
    assert not DetectorConfig().is_count(name)


@pytest.mark.parametrize(
    "name",
    [
        "requests",
        "http_requests_total",
        "request_count",
        "http_request_duration_seconds_count",
        "HTTPCode_Target_5XX_Count",
        "RequestCount",
    ],
)
def test_dimensionless_counts_keep_the_floor(name: str) -> None:
    assert DetectorConfig().is_count(name)


def test_cadvisor_cpu_column_alerts_like_cpu_usage(tmp_path: Path) -> None:
    """~0.20 cores (sd 0.002) jumping to 1.2 cores: alerts under either name. Old code: the
    cAdvisor name got scale sqrt(0.2 + 1) = 1.1 cores and no issue window raised an alert."""
    kw = {"level": 0.2, "noise": 0.002, "jump": 1.0}
    cadvisor = _scenario(tmp_path / "a", ["container_cpu_usage_seconds_total"], **kw)
    plain = _scenario(tmp_path / "b", ["cpu_usage"], **kw)
    assert _n_alerts(cadvisor) == _n_alerts(plain) == [3, 2]
    normal = read_metrics_csv(cadvisor / "noissue" / "metrics.csv")
    assert float(fit_baseline(normal).scale.max()) < 0.01


def test_an_override_to_a_non_traffic_role_turns_the_floor_off(tmp_path: Path) -> None:
    """``jobs_total: cpu`` (no unit word, so a count by name). Old code: still a count."""
    assert RoleMap().is_count("jobs_total")
    assert not RoleMap({"jobs_total": "cpu"}).is_count("jobs_total")
    assert not DetectorConfig(roles=RoleMap({"jobs_total": "latency"})).is_count("jobs_total")
    assert RoleMap({"cpu_seconds": "traffic"}).is_count("cpu_seconds")
    kw = {"level": 0.2, "noise": 0.002, "jump": 1.0}
    scen = _scenario(tmp_path / "s", ["jobs_total"], **kw)
    assert _n_alerts(scen) == [0, 0]  # a count by name: floor 1.1 hides the jump
    roles = tmp_path / "roles.yaml"
    roles.write_text("jobs_total: cpu\n")
    assert _n_alerts(scen, roles) == [3, 2]


# ---------------------------------------------------------------------------- F2: headers, windows
def test_a_blank_statistic_cell_is_refused_naming_its_position(tmp_path: Path) -> None:
    """Old code: read as 'Unnamed: 1_level_2', matched by position only, no error."""
    scen = _scenario(tmp_path / "s", ["latency", "requests"])
    p = scen / "noissue" / "metrics.csv"
    lines = p.read_text().splitlines()
    lines[2] = "statistic," + ",".join("" for _ in lines[2].split(",")[1:])
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"header row 3 \(statistic\) is blank in column 2") as e:
        read_metrics_csv(p)
    assert str(p) in str(e.value) and "\n" not in str(e.value)


def test_a_window_with_no_baselined_column_is_refused(tmp_path: Path) -> None:
    """Statistic names in another case in one window. Old code: 0 alerts, scored as a miss."""
    scen = _scenario(tmp_path / "s", ["latency", "requests"])
    p = scen / "test" / "issue_1" / "metrics.csv"
    lines = p.read_text().splitlines()
    lines[2] = lines[2].replace("Average", "average")
    p.write_text("\n".join(lines) + "\n")
    s = load_scenario(scen)
    first, second = s.issues("all")
    assert s.incident(first)["alerts"]
    with pytest.raises(DataError, match="no column of this issue window has a normal-period") as e:
        s.incident(second)
    assert "issue_1" in str(e.value) and "'front/latency/average'" in str(e.value)


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda ln: ln + ",", "data row 1 (line 4) has 10 cells, the header has 9"),
        (lambda ln: ln.rsplit(",", 1)[0], "data row 1 (line 4) has 8 cells, the header has 9"),
    ],
)
def test_a_row_of_another_width_is_named(tmp_path: Path, edit, words: str) -> None:
    """Old code: a trailing comma on every data row blamed the header ('expected a 3-row
    header'); a short row was filled with NaN silently."""
    scen = _scenario(tmp_path / "s", ["latency", "requests"])
    p = scen / "test" / "issue_0" / "metrics.csv"
    lines = p.read_text().splitlines()
    lines[3:] = [edit(ln) for ln in lines[3:]]
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=words.replace("(", r"\(").replace(")", r"\)")):
        read_metrics_csv(p)


def test_an_index_name_row_is_still_read(tmp_path: Path) -> None:
    """``unix_timestamp,,,`` under the header (PetShop's own files, ``DataFrame.to_csv``)."""
    scen = _scenario(tmp_path / "s", ["latency"])
    p = scen / "noissue" / "metrics.csv"
    lines = p.read_text().splitlines()
    p.write_text("\n".join([*lines[:3], "unix_timestamp" + "," * 4, *lines[3:]]) + "\n")
    assert len(read_metrics_csv(p)) == 60
    lines = p.read_text().splitlines()
    lines[5] += ","
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"data row 2 \(line 6\) has 6 cells, the header has 5"):
        read_metrics_csv(p)


# ---------------------------------------------------------------------------- F3: no baseline
def test_a_metric_without_baseline_is_warned_and_marked(tmp_path: Path) -> None:
    """Latency on every 4th normal row only (15 values < 30). Old code: no warning, and the roles
    line listed latency as found."""
    scen = _scenario(tmp_path / "s", ["latency", "cpu_usage"])
    p = scen / "noissue" / "metrics.csv"
    lines = p.read_text().splitlines()
    metric = lines[1].split(",")
    for i in range(3, len(lines)):
        if (i - 3) % 4:
            cells = lines[i].split(",")
            lines[i] = ",".join(
                "" if k and metric[k] == "latency" else c for k, c in enumerate(cells)
            )
    p.write_text("\n".join(lines) + "\n")
    with pytest.warns(
        ScenarioWarning, match=r"'latency' \(15 values\); a column needs at least 30"
    ):
        s = load_scenario(scen)
    roles = s.roles()
    assert roles["latency"]["baseline"] == "none" and "baseline" not in roles["cpu_usage"]
    line = roles_line("s", roles)
    assert "latency=latency (no baseline)" in line and "cpu_usage=saturation," in line


# ---------------------------------------------------------------------------- F4: skipped method
def _traversal_run(tmp_path: Path, metrics: list[str], target: str) -> dict:
    """``rca petshop --methods propagation petshop_traversal`` on a scenario of ``metrics`` whose
    issues name ``target`` as their symptom's metric; returns the ``--json`` result."""
    scen = _scenario(tmp_path / "s", metrics)
    for t in scen.glob("test/*/target.json"):
        obj = json.loads(t.read_text())
        obj["target"]["metric"] = target
        t.write_text(json.dumps(obj))
    out = tmp_path / "r.json"
    argv = ["rca", "petshop", "--scenario", str(scen), "--json", str(out)]
    assert main([*argv, "--methods", "propagation", "petshop_traversal"]) == 0
    return json.loads(out.read_text())


def test_traversal_that_never_ranks_is_skipped_with_its_reason(tmp_path: Path) -> None:
    """target.json names metric 'latency' but the data calls it otherwise. Old code: AC@1 0.000
    reported for petshop_traversal, ``skipped`` empty."""
    res = _traversal_run(
        tmp_path, ["http_server_request_duration_seconds", "requests"], target="latency"
    )
    assert "petshop_traversal" not in res["methods"]
    why = res["skipped"]["petshop_traversal"]
    assert "no ranking for any of the 2 issues" in why and "front/latency/Average" in why
    for row in res["per_incident"]:
        assert "petshop_traversal" not in row["ranks"]
        assert row["reasons"]["petshop_traversal"].startswith("target not scored")


# ---------------------------------------------------------------------------- F5: roles.yaml
@pytest.mark.parametrize(
    "text", ["lat_x: latency\nlat_x: errors\n", 'lat_x: latency\n" lat_x ": errors\n']
)
def test_a_metric_named_twice_in_the_role_map_is_refused(tmp_path: Path, text: str) -> None:
    """Old code: the last entry won silently."""
    p = tmp_path / "roles.yaml"
    p.write_text(text)
    with pytest.raises(DataError, match="metric 'lat_x' is named more than once") as e:
        load_role_map(p)
    assert "\n" not in str(e.value)


def test_yaml_merge_keys_still_load(tmp_path: Path) -> None:
    p = tmp_path / "roles.yaml"
    p.write_text("<<: {a: latency}\nb: errors\n")
    assert load_role_map(p).overrides == {"a": "latency", "b": "errors"}
    p.write_text("a: &x latency\nb: *x\n")
    assert load_role_map(p).overrides == {"a": "latency", "b": "latency"}


# ---------------------------------------------------------------------------- shipped systems
RELEASED_COUNTS = {"requests"}
"""Metric names of the shipped scenarios that are counts (Poisson floor), as released."""


def _released_scale(normal: pd.DataFrame, cfg: DetectorConfig) -> pd.Series:
    """The baseline scale as released: the count floor on ``requests`` columns only."""
    counts = normal.notna().sum()
    data = normal[counts[counts >= cfg.min_normal_points].index]
    median = data.median(skipna=True)
    absdev = (data - median).abs()
    mad = absdev.median(skipna=True)
    spread = (1.4826 * mad).where(mad > 0, 1.2533 * absdev.mean(skipna=True))
    scale = np.maximum(np.maximum(spread, cfg.rel_scale_floor * median.abs()), cfg.abs_scale_floor)
    is_count = np.array([c[1] in RELEASED_COUNTS for c in scale.index])
    scale[is_count] = np.maximum(scale[is_count], np.sqrt(median[is_count].clip(lower=0) + 1.0))
    return scale


def _check_unchanged(root: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", ScenarioWarning)  # no new warning on shipped data
        s = load_scenario(root)
        for issue in s.issues("all"):
            assert s.incident(issue)["window"]["scored"] > 0
    names = set(s.normal.columns.get_level_values(1))
    assert {n for n in names if s.config.is_count(n)} == RELEASED_COUNTS & names
    want = _released_scale(s.normal, s.config)
    pd.testing.assert_series_equal(s.baseline.scale, want, check_names=False)
    assert all("baseline" not in r for r in s.roles().values())


def test_the_test_slice_keeps_counts_and_scales() -> None:
    _check_unchanged(SLICE)


@pytest.mark.parametrize("name", ["petshop/low_traffic", "nezha_tt"])
def test_shipped_scenarios_keep_counts_and_scales(shared_data: os.PathLike[str], name: str) -> None:
    root = Path(shared_data) / name
    if not root.is_dir():
        pytest.skip(f"{root} absent")
    _check_unchanged(root)


# ---------------------------------------------------------------------------- follow-ups
# The Prometheus naming guide (https://prometheus.io/docs/practices/naming/) writes a unit as
# ``<name>_<unit>_total`` / ``_sum``: the unit is the word before that suffix, else the last word.
_NAMES_COUNT = {
    "http_requests_total": True,
    "requests_total": True,
    "http_server_requests_seconds_count": True,
    "http_server_requests_seconds_sum": False,
    "container_cpu_usage_seconds_total": False,
    "process_cpu_seconds_total": False,
    "node_network_receive_bytes_total": False,
    "node_network_transmit_packets_total": True,
    "container_network_receive_bytes_total": False,
    "istio_requests_total": True,
    "istio_request_bytes_sum": False,
    "istio_request_duration_milliseconds_count": True,
    "kube_pod_container_status_restarts_total": True,
    "node_context_switches_total": True,
    "go_gc_duration_seconds_count": True,
    "requests_per_minute": True,
    "RequestsPerMinute": True,
    "calls_per_second": False,
    "hits_per_hour": True,
    "requests_per_second": False,
    "requestsPerSecond": False,
    "requests_per_s": False,
    "haproxy_backend_bytes_in_total": False,
    "haproxy_frontend_bytes_out_total": False,
    "mysql_global_status_bytes_received": False,
    "mysql_global_status_bytes_sent": False,
    "kafka_consumer_bytes_consumed_total": False,
    "bytes_sent_total": False,
    "http.server.request.count": True,
    "http_server_duration_ms_count": True,
    "jvm_gc_pause_seconds_count": True,
    "jvm_gc_pause_seconds_sum": False,
    "http_server_request_duration_seconds_sum": False,
    "node_time_seconds": False,
    "RequestCount": True,
    "HTTPCode_Target_5XX_Count": True,
    "error_count": True,
    "errors_total": True,
    "ms_requests_total": True,
    "bytes_total": False,
    "node_disk_io_time_seconds_total": False,
    "time_series_total": True,
    "first_time_users_total": True,
    "ns_requests_total": True,
    "core_dns_requests_total": True,
    "sent_bytes": False,
    "cache_hit_ratio": False,
    "events_per_minute_total": True,
    "container_fs_reads_bytes_total": False,
    "otelcol_exporter_sent_spans": True,
}


@pytest.mark.parametrize(("name", "count"), sorted(_NAMES_COUNT.items()))
def test_the_unit_is_read_where_prometheus_puts_it(name: str, count: bool) -> None:
    """Old code (a unit word anywhere): ``requests_per_minute``, ``hits_per_hour``,
    ``events_per_minute_total``, ``time_series_total``, ``first_time_users_total``,
    ``ns_requests_total``, ``core_dns_requests_total`` and ``ms_requests_total`` lost the floor.
    A per-second rate and a byte amount are no counts wherever the word stands: the code before
    this one (the unit at its Prometheus position only) gave ``requests_per_second``,
    ``calls_per_second``, ``requestsPerSecond`` and the ``bytes`` names above the floor."""
    assert is_count_metric(name) is count
    assert DetectorConfig().is_count(name) is count


def _restart_alerts(overrides: dict[str, str]) -> tuple[bool, int]:
    """Pod restarts: 58 zeros and two 1s in the normal period, window 0,0,0,0,1,1,0,0."""
    metric = "kube_pod_container_status_restarts_total"
    cols = pd.MultiIndex.from_tuples([("svc", metric, "Sum")])
    normal = pd.DataFrame(
        np.array([0.0] * 58 + [1.0, 1.0])[:, None], index=1.7e9 + 60 * np.arange(60), columns=cols
    )
    window = pd.DataFrame(
        np.array([0, 0, 0, 0, 1, 1, 0, 0], float)[:, None],
        index=1.701e9 + 60 * np.arange(8),
        columns=cols,
    )
    cfg = DetectorConfig(roles=RoleMap(overrides))
    alerts, _ = detect_alerts(window, fit_baseline(normal, cfg), cfg)
    return cfg.is_count(metric), len(alerts)


@pytest.mark.parametrize("role", ["errors", "success", "other"])
def test_an_errors_override_keeps_the_names_count(role: str) -> None:
    """Old code: any override other than traffic dropped the floor, so two restarts in a row gave
    a z of about 24 (an alert)."""
    name = "kube_pod_container_status_restarts_total"
    assert _restart_alerts({}) == (True, 0)
    assert _restart_alerts({name: role}) == (True, 0)
    assert not RoleMap({"cpu_seconds": role}).is_count("cpu_seconds")  # the name's answer


@pytest.mark.parametrize("role", ["latency", "saturation", "cpu", "memory"])
def test_a_resource_or_latency_override_is_no_count(role: str) -> None:
    assert not RoleMap({"jobs_total": role}).is_count("jobs_total")
    assert RoleMap({"cpu_seconds": "traffic"}).is_count("cpu_seconds")


def test_traversal_that_ran_and_missed_keeps_its_row(tmp_path: Path) -> None:
    """The target (requests) is scored but never anomalous: a miss, not a method that could not
    run. Old code: any reason on every issue moved petshop_traversal to ``skipped``."""
    res = _traversal_run(tmp_path, ["latency", "requests"], target="requests")
    assert "petshop_traversal" not in res["skipped"]
    assert res["methods"]["petshop_traversal"]["ac@1"] == 0.0
    for row in res["per_incident"]:
        assert row["ranks"]["petshop_traversal"] is None
        assert row["reasons"]["petshop_traversal"] == "target not anomalous"
        assert "_not_run" not in row


def _thin_normal(scen: Path, metric: str, keep_every: int = 3) -> None:
    """Blank ``metric`` on all but every ``keep_every``-th normal row (60 rows -> 20 values)."""
    p = scen / "noissue" / "metrics.csv"
    lines = p.read_text().splitlines()
    names = lines[1].split(",")
    for i in range(3, len(lines)):
        if (i - 3) % keep_every:
            cells = lines[i].split(",")
            lines[i] = ",".join("" if k and names[k] == metric else c for k, c in enumerate(cells))
    p.write_text("\n".join(lines) + "\n")


def test_a_metric_only_run_on_thin_normal_columns_still_works(tmp_path: Path) -> None:
    """20 normal values per column (< 30): no alert baseline, but the traversal (10 values)
    ranks. Old code: every window was refused as a name mismatch."""
    scen = _scenario(tmp_path / "s", ["latency"])
    _thin_normal(scen, "latency")
    out = tmp_path / "r.json"
    argv = ["rca", "petshop", "--scenario", str(scen), "--json", str(out)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ScenarioWarning)
        assert main([*argv, "--methods", "petshop_traversal"]) == 0
    res = json.loads(out.read_text())
    assert res["methods"]["petshop_traversal"]["ac@1"] == 1.0


def test_thin_window_columns_are_named_as_too_few_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Windows hold latency only, whose normal column has 20 values; cpu_usage has a baseline.
    Old code: 'no column of this issue window has a normal-period baseline ... names must match',
    blaming the names."""
    scen = _scenario(tmp_path / "s", ["latency", "cpu_usage"])
    _thin_normal(scen, "latency")
    for p in scen.glob("test/*/metrics.csv"):
        rows = [ln.split(",") for ln in p.read_text().splitlines()]
        keep = [0] + [k for k in range(1, len(rows[1])) if rows[1][k] == "latency"]
        p.write_text("\n".join(",".join(r[k] for k in keep) for r in rows) + "\n")
    argv = ["rca", "petshop", "--scenario", str(scen), "--methods", "propagation"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ScenarioWarning)
        assert main(argv) == 2
    err = capsys.readouterr().err
    assert "fewer than 30 normal values" in err and "with 20 values" in err
    assert "names must match" not in err


def test_whitespace_only_lines_are_skipped(tmp_path: Path) -> None:
    """As ``pd.read_csv`` skips them. Old code: 'data row 4 ... has 1 cells'."""
    scen = _scenario(tmp_path / "s", ["latency"])
    p = scen / "test" / "issue_0" / "metrics.csv"
    lines = p.read_text().splitlines()
    p.write_text("\n".join([*lines[:6], "   ", "\t", *lines[6:]]) + "\n")
    assert len(read_metrics_csv(p)) == 8


def test_a_trailing_comma_on_every_line_is_dropped(tmp_path: Path) -> None:
    """Old code: 'header row 1 (node) is blank in column 6'."""
    scen = _scenario(tmp_path / "s", ["latency"])
    p = scen / "test" / "issue_0" / "metrics.csv"
    before = read_metrics_csv(p)
    p.write_text("\n".join(ln + "," for ln in p.read_text().splitlines()) + "\n")
    pd.testing.assert_frame_equal(read_metrics_csv(p), before)
    lines = p.read_text().splitlines()
    lines[5] += "7"  # a value under the blank header column: the header is blank there
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"header row 1 \(node\) is blank in column 6"):
        read_metrics_csv(p)


def test_a_trailing_comma_on_the_header_only_names_the_header(tmp_path: Path) -> None:
    """Old code: 'data row 1 (line 4) has 5 cells, the header has 6', which blames the data."""
    scen = _scenario(tmp_path / "s", ["latency"])
    p = scen / "test" / "issue_0" / "metrics.csv"
    lines = p.read_text().splitlines()
    p.write_text("\n".join([*(ln + "," for ln in lines[:3]), *lines[3:]]) + "\n")
    with pytest.raises(DataError, match="the header rows end with 1 empty cell") as e:
        read_metrics_csv(p)
    assert "remove the trailing comma from the header rows" in str(e.value)


def test_a_quoted_file_is_still_checked_row_by_row(tmp_path: Path) -> None:
    """Quoted cells are counted by the csv module: a comma or a line break inside quotes is no
    separator (RFC 4180, https://www.rfc-editor.org/rfc/rfc4180#section-2). Old test quoted a
    name without a comma, so it passed with the csv-module fallback removed; this one fails then
    ('header row 2 has 1 cells, the header has 6')."""
    scen = _scenario(tmp_path / "s", ["latency"])
    p = scen / "test" / "issue_0" / "metrics.csv"
    lines = p.read_text().splitlines()
    lines[0] = lines[0].replace("front", '"front,eu"').replace("auth", '"auth\nv2"')
    p.write_text("\n".join(lines) + "\n")
    df = read_metrics_csv(p)
    assert len(df) == 8
    assert list(df.columns.get_level_values(0)) == ["front,eu", "cart", "db", "auth\nv2"]
    lines[4] = lines[4].rsplit(",", 1)[0]
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"data row 2 \(line 6\) has 4 cells, the header has 5"):
        read_metrics_csv(p)


def _cr_file(path: Path, header: list[str], rows: list[str]) -> Path:
    """A metrics.csv with old-Mac line endings: every line ends with a lone CR."""
    path.write_bytes("".join(ln + "\r" for ln in [*header, *rows]).encode())
    return path


_HDR = ["node,a,a,b", "metric,latency,requests,latency", "statistic,Average,Sum,Average"]
_ROWS = [f"{1700000000 + 60 * i},{i + 1}.0,{10 + i},2.0" for i in range(5)]


def test_cr_line_endings_are_read(tmp_path: Path) -> None:
    """``pd.read_csv`` splits lines at a lone CR (old Mac files); so does the row check."""
    df = read_metrics_csv(_cr_file(tmp_path / "m.csv", _HDR, _ROWS))
    assert df.shape == (5, 3)
    assert df[("a", "requests", "Sum")].tolist() == [10.0, 11.0, 12.0, 13.0, 14.0]


@pytest.mark.parametrize(
    ("hdr", "rows", "words"),
    [
        (_HDR, [*_ROWS[:2], _ROWS[2].rsplit(",", 1)[0], *_ROWS[3:]], "data row 3 (line 6) has 3"),
        (_HDR, [*_ROWS[:2], _ROWS[2] + ",9", *_ROWS[3:]], "data row 3 (line 6) has 5 cells"),
        (_HDR, [r + "," for r in _ROWS], "data row 1 (line 4) has 5 cells, the header has 4"),
        ([h + "," for h in _HDR], _ROWS, "the header rows end with 1 empty cell"),
    ],
    ids=["short", "long", "trailing_comma_data", "trailing_comma_header"],
)
def test_cr_line_endings_keep_the_row_check(tmp_path: Path, hdr, rows, words: str) -> None:
    """Old code split on LF only: a CR-only file was one line, so a short row was filled with
    NaN silently, a long one blamed the header ('Error tokenizing data'), a trailing comma on
    the data rows said 'expected a 3-row header'."""
    p = _cr_file(tmp_path / "m.csv", hdr, rows)
    with pytest.raises(DataError, match=words.replace("(", r"\(").replace(")", r"\)")):
        read_metrics_csv(p)


def test_cr_line_endings_with_a_trailing_comma_on_every_line(tmp_path: Path) -> None:
    """Old code: 'header row 1 (node) is blank in column 5' (the blank column not dropped)."""
    p = _cr_file(tmp_path / "m.csv", [h + "," for h in _HDR], [r + "," for r in _ROWS])
    assert read_metrics_csv(p).shape == (5, 3)


def test_mixed_lf_and_cr_line_endings_name_the_short_row(tmp_path: Path) -> None:
    """Header lines end with LF, data lines with CR. Old code: 'data row 1 (line 4) has 11
    cells' (the CR-separated data rows counted as one line)."""
    p = tmp_path / "m.csv"
    rows = [*_ROWS[:3], "1700000500,1"]
    p.write_bytes(("".join(h + "\n" for h in _HDR) + "".join(r + "\r" for r in rows)).encode())
    with pytest.raises(DataError, match=r"data row 4 \(line 7\) has 2 cells, the header has 4"):
        read_metrics_csv(p)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be"])
@pytest.mark.parametrize("trailing", ["", ","])
def test_a_utf16_file_names_its_encoding(tmp_path: Path, encoding: str, trailing: str) -> None:
    """Python's ``utf-16`` codec writes a byte order mark (FF FE on little-endian machines);
    ``-le``/``-be`` write none, only NUL bytes. Old code: 'data row 6 (line 9) has 1 cells' (the
    LF bytes of UTF-16 text counted as line ends)."""
    p = tmp_path / "m.csv"
    p.write_bytes("".join(ln + trailing + "\n" for ln in [*_HDR, *_ROWS]).encode(encoding))
    with pytest.raises(DataError) as e:
        read_metrics_csv(p)
    assert "has 1 cells" not in str(e.value)
    if p.read_bytes()[:2] in (b"\xff\xfe", b"\xfe\xff"):
        assert f"is not UTF-8 text (byte 0x{p.read_bytes()[0]:02x} at offset 0)" in str(e.value)


def test_a_header_comma_after_full_width_rows_names_the_row(tmp_path: Path) -> None:
    """Every line but one ends with a trailing comma: the short row is the odd one, not the
    header. Old code: 'the header rows end with 1 empty cell(s) ... remove the trailing comma
    from the header rows'."""
    p = tmp_path / "m.csv"
    rows = [r + "," for r in _ROWS]
    rows[3] = _ROWS[3]
    p.write_text("\n".join([*(h + "," for h in _HDR), *rows]) + "\n")
    with pytest.raises(DataError, match=r"data row 4 \(line 7\) has 4 cells, the header has 5;"):
        read_metrics_csv(p)


def test_a_per_second_rate_is_no_count_and_alerts() -> None:
    """0.5 +- 0.05 requests per second jumping to 3.0: with the Poisson floor sqrt(0.5 + 1)
    (a count per sample) the jump hid below the threshold; as a rate it alerts."""
    rng = np.random.default_rng(0)
    for metric in ("requests_per_second", "haproxy_backend_bytes_in_total"):
        cols = pd.MultiIndex.from_tuples([("svc", metric, "Average")])
        normal = pd.DataFrame(
            0.5 + 0.05 * rng.standard_normal((60, 1)),
            index=1.7e9 + 60 * np.arange(60),
            columns=cols,
        )
        window = pd.DataFrame(
            np.array([0.5] * 4 + [3.0] * 4)[:, None],
            index=1.701e9 + 60 * np.arange(8),
            columns=cols,
        )
        cfg = DetectorConfig()
        alerts, _ = detect_alerts(window, fit_baseline(normal, cfg), cfg)
        assert not cfg.is_count(metric)
        assert len(alerts) == 1, metric
