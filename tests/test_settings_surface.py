"""How ``FLEETMIND_*`` variables are read: list settings as JSON arrays, misspelled names warned
about, and ``fleetmind serve``'s own checks reading names case-insensitively as the settings do."""

from __future__ import annotations

import os
from typing import Any

import pytest

from fleetmind.cli import main
from fleetmind.cli import serve as cli_serve
from fleetmind.serving import settings as fm_settings
from fleetmind.serving.rca.request import is_heartbeat, ungrouped_names
from fleetmind.serving.settings import Settings, get_settings


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A database under tmp_path, no ``FLEETMIND_*`` variable but that, uvicorn replaced by a
    recorder, and the options a ``serve`` leaves in ``os.environ`` put back."""
    import signal

    import uvicorn

    for key in list(os.environ):
        if key.lower().startswith("fleetmind_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("FLEETMIND_DATABASE_URL", f"sqlite:///{tmp_path / 'serve.db'}")
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: None)
    before = signal.getsignal(signal.SIGHUP) if hasattr(signal, "SIGHUP") else None
    options = {env: os.environ.get(env) for env in cli_serve._ENV_OPTIONS.values()}
    get_settings.cache_clear()
    yield
    for env, value in options.items():
        if value is None:
            os.environ.pop(env, None)
        else:
            os.environ[env] = value
    if before is not None:
        signal.signal(signal.SIGHUP, before)
    get_settings.cache_clear()


@pytest.mark.parametrize(
    "value",
    [
        '["Watchdog","InfoInhibitor"]',
        ' [ "Watchdog" , "InfoInhibitor" ] ',
        "Watchdog, InfoInhibitor",
    ],
)
def test_ungrouped_alerts_as_a_json_array_or_commas(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The JSON array was cut at its commas into '["Watchdog"' and '"InfoInhibitor"]': Watchdog,
    which always fires, opened an incident that never closed (and paged)."""
    monkeypatch.setenv("FLEETMIND_UNGROUPED_ALERTS", value)
    assert Settings().ungrouped_alert_names() == {"Watchdog", "InfoInhibitor"}
    assert ungrouped_names() == {"Watchdog", "InfoInhibitor"}  # what the ingest path reads
    assert is_heartbeat({"alertname": "Watchdog", "severity": "warning"}, ungrouped_names())
    monkeypatch.setenv("FLEETMIND_SLO_ALERTS", value.replace("Watchdog", "CheckoutSLOBurn"))
    assert Settings().slo_alert_names() == {"CheckoutSLOBurn", "InfoInhibitor"}


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ('["Watchdog","InfoInhibitor"', "not a JSON array"),  # its last bracket lost
        ('Watchdog,"InfoInhibitor"]', "cut at its commas"),
        ("['Watchdog','InfoInhibitor']", "cut at its commas"),  # a YAML or Python list
        ('["Watchdog", 3]', "array of strings"),
        ('[{"name": "Watchdog"}]', "array of strings"),
        ("[3]", "array of strings"),
        ('"Watchdog","InfoInhibitor"', "double quotes"),
        ("[Watchdog, InfoInhibitor]", "bracketed list"),  # YAML flow style written as a string
    ],
)
@pytest.mark.parametrize("variable", ["FLEETMIND_UNGROUPED_ALERTS", "FLEETMIND_SLO_ALERTS"])
def test_a_malformed_alert_list_stops_serve_with_one_line(
    variable: str,
    value: str,
    why: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(variable, value)
    assert main(["serve"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1, err
    assert err[0].startswith(f"fleetmind: error: invalid setting {variable}="), err
    assert why in err[0] and "Traceback" not in err[0]


@pytest.mark.parametrize(
    ("value", "names"),
    [
        ("[Prod] Checkout SLO burn", {"[Prod] Checkout SLO burn"}),
        ("Watchdog,[Grafana] DatasourceError", {"Watchdog", "[Grafana] DatasourceError"}),
        ("[Prod] A, [Dev] B ,", {"[Prod] A", "[Dev] B"}),
        ("Disk full [db]", {"Disk full [db]"}),
        ('Checkout "slow" burn', {'Checkout "slow" burn'}),
        ('["[Prod] Checkout SLO burn", "\\"Quoted\\""]', {"[Prod] Checkout SLO burn", '"Quoted"'}),
    ],
)
def test_grafana_rule_titles_with_brackets_are_alert_names(
    value: str, names: set[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Grafana-managed alert's alertname is its rule title, e.g. "[Prod] Checkout SLO burn"
    (grafana/grafana pkg/services/ngalert/state/state.go: the alertname label is the rule's
    Title); such a list stopped serve ("starts with [ but is not a JSON array", "holds a quote or
    bracket"). It is read at its commas and serve starts."""
    monkeypatch.setenv("FLEETMIND_SLO_ALERTS", value)
    monkeypatch.setenv("fleetmind_ungrouped_alerts", value)
    assert Settings().slo_alert_names() == names
    assert Settings().ungrouped_alert_names() == names
    assert main(["serve"]) == 0
    assert "invalid setting" not in capsys.readouterr().err


def test_a_misspelled_variable_is_warned_with_the_closest_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """FLEETMIND_API_TOKENS (for FLEETMIND_API_TOKEN) was ignored without a word: every route
    stayed open. serve still starts (a warning, not a refusal) and never prints the value."""
    monkeypatch.setenv("FLEETMIND_API_TOKENS", "s3cret-value-not-shown-0123")
    monkeypatch.setenv("fleetmind_promethues_url", "http://127.0.0.1:9/")
    monkeypatch.setenv("FLEETMIND_RETENTION_DAYS", "30")
    assert main(["serve"]) == 0
    err = capsys.readouterr().err
    assert (
        "fleetmind: warning: FLEETMIND_API_TOKENS is not a FleetMind setting and is ignored "
        "(did you mean FLEETMIND_API_TOKEN?)"
    ) in err
    assert "fleetmind_promethues_url" in err and "did you mean FLEETMIND_PROMETHEUS_URL?" in err
    assert "FLEETMIND_RETENTION_DAYS" in err and "did you mean FLEETMIND_RETENTION_S?" in err
    assert "s3cret" not in err


def test_settings_other_project_variables_and_service_links_are_not_warned() -> None:
    """A Service named fleetmind gives every pod {SVCNAME}_SERVICE_HOST, {SVCNAME}_SERVICE_PORT
    (and _<PORT NAME>) and Docker-link {SVCNAME}_PORT* variables (kubernetes.io/docs/concepts/
    services-networking/service/#environment-variables; kubernetes/kubernetes
    pkg/kubelet/envvars/envvars.go FromServices)."""
    env = {
        "FLEETMIND_SERVICE_HOST": "10.96.0.12",
        "FLEETMIND_SERVICE_PORT": "8000",
        "FLEETMIND_SERVICE_PORT_HTTP": "8000",
        "FLEETMIND_PORT": "tcp://10.96.0.12:8000",
        "FLEETMIND_PORT_8000_TCP": "tcp://10.96.0.12:8000",
        "FLEETMIND_PORT_8000_TCP_PROTO": "tcp",
        "FLEETMIND_PORT_8000_TCP_PORT": "8000",
        "FLEETMIND_PORT_8000_TCP_ADDR": "10.96.0.12",
        "FLEETMIND_GRAPH_SERVICE_HOST": "10.96.0.13",  # a Service named fleetmind-graph
        "FLEETMIND_WORKERS": "2",
        "FLEETMIND_SHARED_DATA": "/data",
        "FLEETMIND_CACHE_DIR": "/cache",
        "FLEETMIND_OPENB_FALLBACK": "1",
        "fleetmind_database_url": "sqlite:///x.db",
        "FLEETMIND_API_TOKEN": "x" * 20,
        "PATH": "/usr/bin",
    }
    assert fm_settings.unknown_variable_warnings(env) == []
    assert fm_settings.unknown_variable_warnings({**env, "FLEETMIND_TLS_CRT": "/c.pem"}) == [
        "FLEETMIND_TLS_CRT is not a FleetMind setting and is ignored "
        "(did you mean FLEETMIND_TLS_CERT?)"
    ]
    # the kubelet's other shapes: IPv6 ClusterIP, UDP and SCTP ports, a fleetmind-db Service
    assert not fm_settings.unknown_variable_warnings(
        {
            "FLEETMIND_SERVICE_HOST": "fd00:10:96::c",
            "FLEETMIND_PORT": "tcp://[fd00:10:96::c]:8000",
            "FLEETMIND_PORT_53_UDP": "udp://10.96.0.12:53",
            "FLEETMIND_PORT_53_UDP_PROTO": "udp",
            "FLEETMIND_PORT_9_SCTP_ADDR": "10.96.0.12",
            "FLEETMIND_DB_SERVICE_PORT_POSTGRES": "5432",
            "FLEETMIND_DB_PORT_5432_TCP_PORT": "5432",
        }
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("FLEETMIND_PORT", "8000"),  # a made-up bind port: the kubelet writes tcp://<ip>:<port>
        ("FLEETMIND_BIND_PORT", "8000"),
        ("FLEETMIND_DATABASE_PORT", "5432"),
        ("FLEETMIND_PORT_8000_TCP", "8000"),
        ("FLEETMIND_SERVICE_PORT", "http"),
        ("FLEETMIND_SERVICE_PORT_HTTP", "８０００"),  # fullwidth digits are no port
        ("FLEETMIND_DATABASE_SERVICE_HOST", "db.internal"),  # a host name, not a ClusterIP
        ("FLEETMIND_PORT_8000_TCP_ADDR", "localhost"),
        ("FLEETMIND_PORT_8000_TCP_PROTO", "http"),
        ("FLEETMIND_PORT_8000_TCP_PORT", "8000/tcp"),
    ],
)
def test_a_service_link_name_with_another_value_is_warned(name: str, value: str) -> None:
    """Every FLEETMIND_<x>_PORT and FLEETMIND_PORT was exempt whatever its value, so a made-up
    FLEETMIND_BIND_PORT=8000 (the port is --port) was ignored without a word. A name is exempt
    only with the value the kubelet writes for it (kubernetes/kubernetes
    pkg/kubelet/envvars/envvars.go: FromServices writes the ClusterIP and port numbers,
    makeLinkVariables "<proto>://<ip>:<port>", the protocol in lower case, the ClusterIP)."""
    warned = fm_settings.unknown_variable_warnings({name: value})
    assert len(warned) == 1 and warned[0].startswith(f"{name} is not a FleetMind setting"), warned
    assert warned[0].count(value) == name.count(value)  # the value is never shown


def test_names_compare_in_lower_case_as_pydantic_settings_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pydantic-settings lower-cases names (pydantic_settings/sources/utils.py _get_env_var_key:
    key.lower()); the checks upper-cased them, which disagrees where a letter has no round trip:
    the Kelvin sign (U+212A) lower-cases to k but upper-cases to itself, the long s (U+017F)
    upper-cases to S but lower-cases to itself."""
    kelvin, long_s = "FLEETMIND_\u212aEEP_WARM_S", "FLEETMIND_\u017fLO_ALERTS"
    monkeypatch.setenv(kelvin, "42")
    monkeypatch.setenv(long_s, "CheckoutSLOBurn")
    assert Settings().keep_warm_s == 42  # pydantic-settings reads the Kelvin spelling...
    assert Settings().slo_alert_names() == frozenset()  # ...and ignores the long s one
    assert fm_settings.env_value("FLEETMIND_KEEP_WARM_S") == "42"
    assert fm_settings.env_value("FLEETMIND_SLO_ALERTS") is None
    warned = fm_settings.unknown_variable_warnings({kelvin: "42", long_s: "CheckoutSLOBurn"})
    assert warned == [
        f"{long_s} is not a FleetMind setting and is ignored (did you mean FLEETMIND_SLO_ALERTS?)"
    ]


@pytest.mark.parametrize("spelling", ["FLEETMIND_PROMETHEUS_URL", "fleetmind_prometheus_url"])
def test_a_prometheus_url_with_sim_telemetry_is_refused_in_any_case(
    spelling: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The settings read fleetmind_prometheus_url, the check only FLEETMIND_PROMETHEUS_URL: the
    lower-case spelling started the service on the simulated fleet without a word."""
    monkeypatch.setenv(spelling, "http://127.0.0.1:9/")
    assert main(["serve"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "--telemetry prometheus" in err[0], err
    monkeypatch.setenv("fleetmind_telemetry", "sim")  # chosen explicitly: it starts
    assert main(["serve"]) == 0


def test_workers_are_read_in_any_case(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """FLEETMIND_WORKERS was read case-sensitively while every setting is not."""
    monkeypatch.setenv("fleetmind_workers", "0")
    assert main(["serve"]) == 2
    assert "(FLEETMIND_WORKERS) must lie in [1, " in capsys.readouterr().err


def test_doctor_reads_the_telemetry_cluster_in_any_case(monkeypatch: pytest.MonkeyPatch) -> None:
    """fleetmind doctor read FLEETMIND_TELEMETRY_CLUSTER case-sensitively, the service not: the
    doctor checked cluster 'local' while the service labelled series 'gpu-east'."""
    from fleetmind.serving.telemetry import doctor

    seen: list[str] = []

    def record(url: str, timeout_s: float, cluster: str) -> list[Any]:
        seen.append(cluster)
        return []

    monkeypatch.setattr(doctor, "diagnose", record)
    monkeypatch.setenv("fleetmind_telemetry_cluster", "gpu-east")
    assert main(["doctor", "--prometheus", "http://127.0.0.1:9"]) == 0
    assert seen == ["gpu-east"]


def test_doctor_reads_prometheus_files_headers_and_graph_in_any_case(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """diagnose read FLEETMIND_PROMETHEUS_BEARER_TOKEN_FILE, _HEADERS, _CA_FILE and FLEETMIND_GRAPH
    case-sensitively, the service not: with lower-case names the doctor queried Prometheus without
    the tenant header and token the service sends."""
    from fleetmind.serving.telemetry import doctor

    seen: dict[str, Any] = {}

    class Source:
        def __init__(self, url: str, **kwargs: Any) -> None:
            seen.update(kwargs)

        def close(self) -> None:
            pass

    def graph_findings(src: Any, graph: str | None) -> list[Any]:
        seen["graph"] = graph
        return []

    monkeypatch.setattr(doctor, "PrometheusApiSource", Source)
    monkeypatch.setattr(doctor, "_diagnose", lambda src: [])
    monkeypatch.setattr(doctor, "graph_findings", graph_findings)
    monkeypatch.setenv("fleetmind_prometheus_bearer_token_file", str(tmp_path / "token"))
    monkeypatch.setenv("fleetmind_prometheus_headers", "X-Scope-OrgID=team-a")
    monkeypatch.setenv("Fleetmind_Prometheus_Ca_File", str(tmp_path / "ca.pem"))
    monkeypatch.setenv("fleetmind_graph", str(tmp_path / "graph.json"))
    assert doctor.diagnose("http://127.0.0.1:9") == []
    assert seen["bearer_token_file"] == str(tmp_path / "token")
    assert seen["headers"] == {"X-Scope-OrgID": "team-a"}
    assert seen["ca_file"] == str(tmp_path / "ca.pem")
    assert seen["graph"] == str(tmp_path / "graph.json")


def test_doctor_reads_its_numeric_settings_in_any_case(monkeypatch: pytest.MonkeyPatch) -> None:
    """The doctor's own settings (the max age of its telemetry queries, ...) went through an
    exact-case lookup: a lower-case value the service refuses was ignored by the doctor."""
    from fleetmind.data.errors import ConfigError
    from fleetmind.serving.telemetry import doctor

    monkeypatch.setenv("fleetmind_telemetry_max_age_s", "-5")
    with pytest.raises(ConfigError, match="FLEETMIND_TELEMETRY_MAX_AGE_S"):
        doctor._env_setting("telemetry_max_age_s", 120.0)
    monkeypatch.setenv("fleetmind_telemetry_max_age_s", "30")
    assert doctor._env_setting("telemetry_max_age_s", 120.0) == 30.0
