"""Outside text reaches the operator's terminal with its control characters shown, not run.

Alert label values, Prometheus label values, graph node ids, Kubernetes Status messages, remote
error bodies and fleet file names are outside text. Printed raw, their ESC/BEL sequences ran on
the operator's terminal (OSC 8 fake links, OSC 52 clipboard writes, CSI clear-screen and cursor
moves; CWE-150) and their CR/LF forged extra lines (a doctor ``ok`` finding, a second
``fleetmind: warning:`` line; CWE-117). Each command here runs against a fake that answers such
text; what it prints holds no control character and no extra line, and shows the escapes.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from fleetmind.cli import main
from fleetmind.cli import replay as replay_cli
from fleetmind.redact import terminal_safe
from tests.http_helpers import serve
from tests.replay_helpers import FakeClock, replay_service

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

REPO = Path(__file__).resolve().parents[1]
GPU_XID = REPO / "examples" / "storm-gpu-xid.json"
LINK = "\x1b]8;;http://evil.example/\x07CLICK\x1b]8;;\x07"  # OSC 8 hyperlink
CLIP = "\x1b]52;c;cm0gLXJmIH4K\x07"  # OSC 52: writes "rm -rf ~" to the clipboard
CLEAR = "\x1b[2J\x1b[1A\x1b[2K"  # CSI: clear the screen, cursor up, erase the line
EVIL = f"{LINK}{CLIP}{CLEAR}"
RAW = ("\x1b", "\x07", "\r", "\u202e")


def _clean(text: str) -> None:
    """No control character of ``EVIL`` (nor CR, nor a bidi override) reaches the terminal, and
    the escape shows as ``\\x1b``."""
    for c in RAW:
        assert c not in text, (c, text)
    assert "\\x1b]52;c;cm0gLXJmIH4K\\x07" in text


def test_terminal_safe_escapes_controls_and_keeps_other_unicode() -> None:
    assert terminal_safe("ok") == "ok"
    assert terminal_safe("gpu\x1b[2J\x07\r\n\t\x7f\x85") == "gpu\\x1b[2J\\x07\\r\\n\\t\\x7f\\x85"
    assert terminal_safe("a\u202eexe.gnp\u200b\ufeff\u2066\u061c") == (
        "a\\u202eexe.gnp\\u200b\\ufeff\\u2066\\u061c"
    )
    assert terminal_safe("节点-é-😀 back\\slash") == "节点-é-😀 back\\slash"
    assert terminal_safe(terminal_safe(EVIL)) == terminal_safe(EVIL)  # idempotent


@contextmanager
def _serve(answer: Any) -> Iterator[str]:
    """A local HTTP server whose every GET/POST gets ``answer(path, body) -> (status, bytes)``."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            status, out = answer(self.path, body)
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        do_GET = do_POST = _answer

        def log_message(self, *args: object) -> None:
            pass

    with serve(Handler) as url:
        yield url


def test_doctor_findings_show_a_label_value_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    """Prometheus's instant-query answer (https://prometheus.io/docs/prometheus/latest/querying/
    api/#instant-queries: ``{"status": "success", "data": {"resultType": "vector", "result":
    [{"metric": {...labels}, "value": [t, "v"]}]}}``): a dcgm-exporter target down whose ``node``
    label carries escapes and a CR LF with a forged ``ok`` finding after it."""
    node = f"gpu-node-7{EVIL}\r\nok     metrics: all 7 required series are there ("

    def answer(path: str, body: bytes) -> tuple[int, bytes]:
        query = httpx.QueryParams(body.decode()).get("query") or ""
        result = []
        if "dcgm" in query and query.startswith("max without") and query.endswith("== 0"):
            labels = {"job": "dcgm-exporter", "instance": "10.0.0.7:9400", "node": node}
            result = [{"metric": labels, "value": [1, "0"]}]
        data = {"resultType": "vector", "result": result}
        return 200, json.dumps({"status": "success", "data": data}).encode()

    with _serve(answer) as url:
        main(["doctor", "--prometheus", url])
    out = capsys.readouterr().out
    _clean(out)
    target = [line for line in out.splitlines() if "dcgm-exporter target(s) down" in line]
    assert len(target) == 1 and "\\r\\nok     metrics" in target[0]
    assert not any(line.startswith("ok     metrics: all 7") for line in out.splitlines())


def test_graph_build_warns_in_one_line_with_the_status_message_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The API server's 403 ``Status`` (kind Status, apiVersion v1, status Failure, message,
    reason, code: k8s.io/apimachinery/pkg/apis/meta/v1/types.go) for endpointslices, whose
    message (filled from the request: user and resource names) holds a newline and escapes."""
    pytest.importorskip("kubernetes")
    message = f"endpointslices is forbidden\nfleetmind: warning: graph signed off by admin{EVIL}"
    status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
              "message": message, "reason": "Forbidden", "code": 403}  # fmt: skip
    empty = {"kind": "List", "apiVersion": "v1", "metadata": {}, "items": []}

    def answer(path: str, body: bytes) -> tuple[int, bytes]:
        if "endpointslices" in path:
            return 403, json.dumps(status).encode()
        return 200, json.dumps(empty).encode()

    with _serve(answer) as url:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "t",
            "clusters": [{"name": "t", "cluster": {"server": url}}],
            "contexts": [{"name": "t", "context": {"cluster": "t", "user": "u"}}],
            "users": [{"name": "u", "user": {"token": "t0k3n"}}],
        }))  # fmt: skip
        args = ["graph", "build", "--kubeconfig", str(kubeconfig)]
        assert main([*args, "--out", str(tmp_path / "g.json")]) == 0
    err = capsys.readouterr().err
    _clean(err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("fleetmind: warning: cannot list endpoint")
    assert "graph signed off by admin\\x1b]8;;" in lines[0]


def test_fleet_show_prints_names_and_regions_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        json.dumps(
            {
                "name": f"evil{EVIL}",
                "clusters": [
                    {
                        "name": "east\x1b[2J",
                        "region": "us\r\nfleet forged: 0 cluster(s)",
                        "nodes": [
                            {
                                "name": "east-dgx-0\u202egnp.exe",
                                "template": "dgx1-v100",
                                "cpu_milli": 80000,
                                "memory_mib": 524288,
                            }
                        ],
                    }
                ],
            }
        ),  # YAML is a superset of JSON  # fmt: skip
        encoding="utf-8",
    )
    assert main(["fleet", "show", "--topology", str(fleet)]) == 0
    out = capsys.readouterr().out
    _clean(out)
    assert "\\r\\nfleet forged" in out and "east-dgx-0\\u202egnp.exe" in out
    assert not any(line.startswith("fleet forged") for line in out.splitlines())


def _evil_storm() -> dict[str, Any]:
    """``storm-gpu-xid.json`` plus two alerts whose alertname carries escapes: one the service
    takes, one it rejects (``endsAt`` before ``startsAt``)."""
    storm = json.loads(GPU_XID.read_text())
    good = copy.deepcopy(storm["alerts"][0])
    good["labels"]["alertname"] = f"GPUXidError{EVIL}"
    good["fingerprint"] = "00000000000000ab"
    bad = copy.deepcopy(good)
    bad["labels"]["gpu"] = "2"
    bad.update(startsAt="2026-12-01T09:00:01Z", endsAt="2026-12-01T08:00:00Z")
    bad["fingerprint"] = "00000000000000ac"
    storm["alerts"] += [good, bad]
    return storm


def test_replay_lines_show_alert_labels_and_the_rejected_reason_escaped(tmp_path: Path) -> None:
    from fleetmind.training.replay import replay

    lines: list[str] = []
    with replay_service(tmp_path) as service:
        replay(_evil_storm(), "http://testserver", say=lines.append, sleep=lambda s: None,
               client=service)  # fmt: skip
    text = "\n".join(lines)
    _clean(text)
    group = [line for line in lines if "alertname=GPUXidError\\x1b]8;;" in line]
    assert len(group) == 1 and "(1 rejected)" in group[0]
    assert "the first: GPUXidError\\x1b]8;;" in lines[-1] and "endsAt" in lines[-1]


def test_replay_cli_prints_the_storm_and_the_top_cause_escaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The service answers the API's shapes (docs/serving/api.md: ``GET /api/v1/incidents``, an
    incident's ``causes``) with a graph node id and a fault type that carry escapes."""
    storm = json.loads(GPU_XID.read_text())
    storm.update(name=f"gpu-xid{LINK}", description=f"GPU 1 fails\r\nforged{CLIP}",
                 expected_root=f"c0/gpu/c0-h1/1{CLEAR}")  # fmt: skip
    path = tmp_path / "storm.json"
    path.write_text(json.dumps(storm))
    clock = FakeClock()
    monkeypatch.setattr(
        replay_cli, "time", SimpleNamespace(monotonic=clock.monotonic, sleep=clock.sleep)
    )
    now = datetime.now(UTC)
    posted: list[dict[str, Any]] = []
    cause = {"node": f"c0/gpu/c0-h1/1{EVIL}", "kind": "gpu", "cluster": "c0", "score": 0.9,
             "fault_type": "xid\x1b[2J"}  # fmt: skip
    stamp = (now + timedelta(seconds=1)).isoformat().replace("+00:00", "Z")
    incident = {"id": 1, "status": "open", "first_alert_at": stamp, "last_alert_at": stamp,
                "alert_count": 6, "firing_count": 6, "nodes": [cause["node"]], "clusters": ["c0"],
                "causes": [cause], "method": "gat", "model_version": "v"}  # fmt: skip

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v1/alerts":
            posted.extend(json.loads(request.content)["alerts"])
            return httpx.Response(200, json={"status": "ok"})
        if request.url.path == "/api/v1/rca":
            return httpx.Response(200, json={"mapped_alerts": 6, "graph": "g"})
        if request.url.path == "/api/v1/incidents":
            return httpx.Response(200, json=[incident])
        if request.url.path == "/api/v1/incidents/1":
            return httpx.Response(200, json={**incident, "alerts": posted})
        return httpx.Response(404, json={"detail": "not found"})

    monkeypatch.setattr(
        replay_cli,
        "_client",
        lambda url: httpx.Client(base_url=url, transport=httpx.MockTransport(handler)),
    )
    argv = ["replay", str(path), "--url", "http://fake", "--speed", "1e9", "--wait", "30"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    _clean(out)
    assert out.splitlines()[0].startswith("gpu-xid\\x1b]8;;") and "\\r\\nforged" in out
    top = [line for line in out.splitlines() if line.startswith("incident #1")]
    assert len(top) == 1 and "c0/gpu/c0-h1/1\\x1b]8;;" in top[0] and "xid\\x1b[2J" in top[0]
    assert "(storm's root: c0/gpu/c0-h1/1\\x1b[2J" in top[0]


def test_a_502_body_is_one_error_line_with_its_escapes_shown(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A proxy in front of the service answers 502 with a text body that carries escapes."""
    body = f"upstream error\r\n{EVIL}".encode()
    with _serve(lambda path, data: (502, body)) as url:
        assert main(["replay", str(GPU_XID), "--url", url, "--wait", "0", "--speed", "1e9"]) == 2
    err = capsys.readouterr().err
    _clean(err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("fleetmind: error: ")
    assert "answered 502: upstream error \\x1b]8;;" in lines[0]


def test_an_exec_plugin_error_line_is_escaped() -> None:
    from fleetmind.cli.kubeconfig import _exec_error

    err = _exec_error("u", {"exec": {"command": "aws"}}, [f"exec: token expired{EVIL}\nmore"])
    _clean(str(err))
    assert "\n" not in str(err) and "exec plugin aws: token expired\\x1b]8;;" in str(err)


def test_joiners_and_spaces_that_text_needs_stay_as_they_are() -> None:
    """ZWJ inside an emoji sequence, ZWNJ inside a Persian word and a no-break space are part of
    ordinary names; a joiner between ASCII letters (a spoofing trick) still shows escaped."""
    for kept in (
        "team-\U0001f469\u200d\U0001f4bb rack",
        "\u0645\u06cc\u200c\u062e\u0648",
        "caf\u00e9\u00a0bar",
    ):
        assert terminal_safe(kept) == kept
    assert terminal_safe("gpu\u200d-0") == "gpu\\u200d-0"
    assert terminal_safe("\u200d") == "\\u200d"


def test_warning_hooks_of_rca_and_sched_escape_outside_text(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Scenario and trace warnings quote folder and file names of downloaded data."""
    import warnings

    from fleetmind.cli.rca import _scenario_warnings
    from fleetmind.cli.sched import trace_warnings_on_stderr
    from fleetmind.data.openb import TraceWarning
    from fleetmind.data.petshop import ScenarioWarning

    with _scenario_warnings():
        warnings.warn(
            "issue_\x1b]52;c;eA==\x07\r\nfleetmind: warning: forged", ScenarioWarning, stacklevel=1
        )
    with trace_warnings_on_stderr():
        warnings.warn("trace \x1b[2Jcleared", TraceWarning, stacklevel=1)
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and "\r" not in err
    lines = err.splitlines()
    assert len(lines) == 2 and all(line.startswith("fleetmind: warning:") for line in lines)
    assert "\\x1b]52;c;eA==\\x07" in err


def test_rca_petshop_roles_warning_escapes_the_scenario_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.test_rca_user_data import _scenario

    scen = _scenario(tmp_path / "s")
    key = "x\x1b]8;;http://evil\x1b\\click\x1b[2K\rfleetmind: note: all fine"
    (scen / "roles.yaml").write_text(f"latency: latency\n{json.dumps(key)}: traffic\n")
    rc = main(
        [
            "rca",
            "petshop",
            "--scenario",
            str(scen),
            "--methods",
            "propagation",
            "--json",
            str(tmp_path / "r.json"),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 0
    assert "\x1b" not in err and "\r" not in err and "x\\x1b]8;;http://evil" in err


def test_graph_build_summary_escapes_the_cluster_label(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The default graph name is k8s-<cluster>, the cluster from the nodes' fleetmind.io/cluster label."""
    rec = tmp_path / "rec"
    rec.mkdir()
    label = "c\x1b]8;;http://evil\x07x\x1b]8;;\x07\x1b[2J"
    node = {"metadata": {"name": "n0", "labels": {"fleetmind.io/cluster": label}}, "status": {}}
    (rec / "nodes.json").write_text(json.dumps({"kind": "NodeList", "items": [node]}))
    for kind in ("pods", "services"):
        (rec / f"{kind}.json").write_text(json.dumps({"kind": "List", "items": []}))
    rc = main(["graph", "build", "--from-dir", str(rec), "--out", str(tmp_path / "g.json")])
    out = capsys.readouterr().out
    assert rc == 0 and out.startswith("graph k8s-c\\x1b]8;;http://evil\\x07x")
    assert "\x1b" not in out and "\x07" not in out
