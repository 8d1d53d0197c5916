"""Property-based fuzzing of the whole service: no input may produce a 5xx, on SQLite or PostgreSQL.

Every route of the OpenAPI spec is fuzzed with schemathesis' strategies (valid and invalid
requests, ``GenerationMode.POSITIVE`` and ``NEGATIVE``), each request sent with a token of some
scope, and a share of them rewritten with the values that broke the service before (hypothesis
draws them all, so a run is reproducible from its seed):

* calendar edges: ``0001-01-01``, ``9999-12-31T23:59:59.999999Z``, leap days, offsets that cross a
  year boundary, the Unix epoch and the 2038 rollover;
* ``NaN``, ``Infinity`` and ``-Infinity`` (Python's JSON parser reads them), integers of thousands
  of digits, numbers such as ``1e999``;
* lone surrogates and NUL characters, in values and in keys;
* Kubernetes quantities (``"1e306"``, ``"1e308"``, ``"500m"``, ``"16Gi"``, ``"-1"``, ...) in pods
  posted to the scheduler extender, with hostile names, namespaces and uids.

A stateful phase follows every :attr:`FuzzConfig.read_every` requests: the incident worker groups
whatever was ingested, then every list and page is read (incidents of each status, each incident,
the alerts, feedback, graph, fleet, models, metrics, and the ``/ui`` pages with a session), which
is how the year-10000 alert was found: it was stored fine and broke every reader afterwards.

:func:`fuzz_app` runs it on one app; the CI-sized run is ``tests/test_serving_fuzz.py``. The long
run (the benchmark) writes JSON::

    .venv/bin/python -m benchmarks.serving.fuzz --cases 10000 --databases sqlite postgresql
    # writes benchmarks/results/serving/serving_fuzz.json

PostgreSQL comes from the Debian ``postgresql`` binaries (a throwaway cluster, as the tests start).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from benchmarks.provenance import REPO_ROOT, RESULTS, load_now, provenance
from fleetmind import argtypes
from fleetmind.cli.runner import run_main

# ------------------------------------------------------------------------------------ values
CALENDAR_EDGES = (
    "0001-01-01T00:00:00Z",
    "0001-01-01T00:00:00+14:00",
    "0001-01-01T00:00:00-00:01",
    "1969-12-31T23:59:59.999999Z",
    "1970-01-01T00:00:00Z",
    "2000-02-29T12:00:00Z",
    "2024-02-29T23:59:60Z",
    "2026-12-31T23:59:59-14:00",
    "2038-01-19T03:14:08Z",
    "9999-12-31T23:59:59Z",
    "9999-12-31T23:59:59.999999Z",
    "9999-12-31T23:59:59.999999-00:01",
    "9999-12-31T23:00:00-23:59",
    "10000-01-01T00:00:00Z",
    "2026-13-01T00:00:00Z",
    "2026-02-30T00:00:00Z",
    "",
)
QUANTITIES = (
    "1",
    "500m",
    "0.5",
    "16Gi",
    "1e3",
    "1e306",
    "1e308",
    "1e309",
    "-1",
    "NaN",
    "Infinity",
    "1Ei",
    "9" * 400,
    "0.000000001",
    "1E+2",
    "12Ki",
    "",
    " 1",
)
NASTY_TEXT = (
    "\ud800",
    "a\udfffb",
    "\x00",
    "nul\x00inside",
    "\u202e\u0000",
    "x" * 300,
    "ü" * 64,
    "../../etc/passwd",
    "   ",
    "<script>alert(1)</script>",
)


class Raw(str):
    """A JSON token written as it is (``NaN``, ``1e999``, an integer of 5,000 digits)."""


NASTY_NUMBERS: tuple[Any, ...] = (
    Raw("NaN"),
    Raw("Infinity"),
    Raw("-Infinity"),
    Raw("1e999"),
    Raw("-1e999"),
    Raw("9" * 4000),
    Raw("-" + "9" * 5000),
    2**31,
    2**63,
    -(2**63) - 1,
    2**64,
    -1,
    0,
    1e308,
    5e-324,
)


def nasty_values() -> st.SearchStrategy[Any]:
    """One value that broke the service before, or one of its kind."""
    return st.one_of(
        st.sampled_from(CALENDAR_EDGES),
        st.sampled_from(NASTY_NUMBERS),
        st.sampled_from(NASTY_TEXT),
        st.sampled_from(QUANTITIES),
        st.text(st.characters(codec=None, categories=("Cs", "Cc")), max_size=8),
        st.integers(min_value=-(2**80), max_value=2**80),
        st.floats(allow_nan=True, allow_infinity=True),
    )


def to_json(value: Any) -> str:
    """JSON text of ``value`` as a hostile client would send it: :class:`Raw` tokens as they are,
    NaN and infinities as Python writes them, lone surrogates escaped (``\\ud800``)."""
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, bytes | bytearray):  # a negative case's raw body
        return Raw(bytes(value).decode("latin-1"))
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return "{" + ",".join(f"{to_json(str(k))}:{to_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(to_json(v) for v in value) + "]"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**4000:
        return Raw(repr(value)[:4000])
    return json.dumps(value, default=str)  # ensure_ascii: a lone surrogate becomes "\ud800"


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, (*path, i))
    if path:
        yield path


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replace(value[head], rest, new)}
    out = list(value)
    out[head] = _replace(out[head], rest, new)
    return out


@st.composite
def mutated(draw: Any, value: Any) -> Any:
    """``value`` with one to three of its values (or a key) replaced by :func:`nasty_values`."""
    paths = list(_leaves(value))
    if not paths:
        return draw(nasty_values())
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths))
        try:
            parent = _get(value, path[:-1])
            if draw(st.integers(0, 5)) == 0 and isinstance(parent, dict):  # a hostile key
                key = draw(st.sampled_from(NASTY_TEXT))
                new_parent = {(key if k == path[-1] else k): v for k, v in parent.items()}
                value = _replace(value, path[:-1], new_parent)
                paths = list(_leaves(value))
            else:
                value = _replace(value, path, draw(nasty_values()))
        except (KeyError, IndexError, TypeError, AttributeError):
            continue  # the path went away with an earlier replacement
    return value


def _get(value: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        value = value[p]
    return value


# ------------------------------------------------------------------------------------ requests
@dataclass
class Request:
    method: str
    path: str
    body: str | None = None
    content_type: str = "application/json"
    scope: str = "admin"
    headers: dict[str, str] = field(default_factory=dict)

    def excerpt(self) -> str:
        return f"{self.method} {self.path[:200]} {(self.body or '')[:300]!r}"


def alert_objects() -> st.SearchStrategy[dict[str, Any]]:
    """Alertmanager alerts with calendar edges in their times and hostile labels now and then."""
    text = st.one_of(st.sampled_from(NASTY_TEXT), st.text(max_size=12))
    labels = st.fixed_dictionaries(
        {
            "alertname": st.sampled_from(["GpuXidError", "KubeNodeNotReady", "HostDown"]),
            "cluster": st.sampled_from(["c0", "c1", "c2"]),
        },
        optional={"node": st.sampled_from(["c0-h1", "c1-h2", "c2-h0"]), "pod": text},
    )
    times = st.one_of(st.sampled_from(CALENDAR_EDGES), st.sampled_from(NASTY_NUMBERS))
    return st.fixed_dictionaries(
        {"labels": labels},
        optional={
            "status": st.sampled_from(["firing", "resolved", "pending"]),
            "startsAt": times,
            "endsAt": times,
            "fingerprint": text,
            "annotations": st.dictionaries(text, text, max_size=2),
            "generatorURL": text,
        },
    )


@st.composite
def webhook_requests(draw: Any) -> Request:
    body: dict[str, Any] = {
        "version": "4",
        "status": "firing",
        "alerts": draw(st.lists(alert_objects(), min_size=1, max_size=6)),
    }
    if draw(st.booleans()):
        body["truncatedAlerts"] = draw(st.sampled_from(NASTY_NUMBERS))
    return Request("POST", "/api/v1/alerts", to_json(body), scope="ingest")


@st.composite
def extender_requests(draw: Any, nodes: list[str]) -> Request:
    """``ExtenderArgs`` whose pod asks for hostile quantities, with hostile names and uids."""
    quantity = st.one_of(st.sampled_from(QUANTITIES), st.sampled_from(NASTY_NUMBERS))
    resources = st.dictionaries(
        st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), quantity, max_size=3
    )
    container = st.fixed_dictionaries(
        {"name": st.just("c")},
        optional={
            "resources": st.fixed_dictionaries(
                {}, optional={"requests": resources, "limits": resources}
            )
        },
    )
    name = st.one_of(
        st.sampled_from(NASTY_TEXT), st.text(min_size=1, max_size=20), st.just("p" * 300)
    )
    meta = st.fixed_dictionaries(
        {"name": name},
        optional={
            "namespace": name,
            "uid": name,
            "annotations": st.dictionaries(name, name, max_size=2),
        },
    )
    pod = {
        "metadata": draw(meta),
        "spec": {"containers": draw(st.lists(container, min_size=1, max_size=3))},
    }
    candidates = draw(st.lists(st.sampled_from(nodes or ["n0"]), max_size=4))
    if draw(st.booleans()):
        candidates.append(draw(name))
    verb = draw(st.sampled_from(["filter", "prioritize", "bound"]))
    if verb == "bound":
        args: dict[str, Any] = {
            "PodName": pod["metadata"]["name"],
            "PodNamespace": pod["metadata"].get("namespace", "default"),
            "PodUID": pod["metadata"].get("uid", ""),
            "Node": candidates[0] if candidates else "n0",
        }
    else:
        args = {"Pod": pod, "NodeNames": candidates}
    return Request("POST", f"/api/v1/scheduler/{verb}", to_json(args), scope="schedule")


@st.composite
def login_requests(draw: Any) -> Request:
    """The login form (served without a token) with hostile values and origins."""
    text = st.one_of(st.sampled_from(NASTY_TEXT), st.text(max_size=40))
    fields = draw(st.dictionaries(st.sampled_from(["token", "csrf", "next"]), text, max_size=3))
    body = "&".join(f"{k}={quote(v.encode('utf-8', 'surrogatepass'))}" for k, v in fields.items())
    origin = draw(st.sampled_from([None, "null", "http://[", "http://evil.example", "ü://x"]))
    headers = {"origin": origin} if origin else {}
    return Request("POST", "/ui/login", body, "application/x-www-form-urlencoded", "none", headers)


@st.composite
def schema_requests(draw: Any, operations: list[Any]) -> Request:
    """A schemathesis case of some operation (valid or invalid), its body or query sometimes
    :func:`mutated`."""
    from schemathesis import GenerationMode

    op = draw(st.sampled_from(operations))
    mode = draw(st.sampled_from([GenerationMode.POSITIVE, GenerationMode.NEGATIVE]))
    case = draw(op.as_strategy(generation_mode=mode))
    body = getattr(case, "body", None)
    has_body = body is not None and type(body).__name__ != "NotSet"
    if has_body and draw(st.booleans()):
        body = draw(mutated(body))
    query = dict(case.query or {})
    if query and draw(st.integers(0, 3)) == 0:
        key = draw(st.sampled_from(sorted(query)))
        query[key] = draw(st.sampled_from([*NASTY_TEXT, *map(str, NASTY_NUMBERS)]))
    path = case.formatted_path
    if query:
        parts = []
        for k, v in query.items():
            for item in v if isinstance(v, list) else [v]:
                text = item if isinstance(item, str) else json.dumps(item)
                parts.append(f"{quote(str(k))}={quote(text.encode('utf-8', 'surrogatepass'))}")
        path += "?" + "&".join(parts)
    scope = draw(st.sampled_from(["admin", "admin", "read", "ingest", "schedule"]))
    return Request(case.method.upper(), path, to_json(body) if has_body else None, scope=scope)


# ------------------------------------------------------------------------------------ running
@dataclass
class FuzzConfig:
    """``cases``: fuzzed requests; ``read_every``: requests between stateful read phases;
    ``seed``: hypothesis' seed (the run is reproducible from it)."""

    cases: int = 200
    read_every: int = 50
    seed: int = 0


@dataclass
class FuzzReport:
    """What a run sent and got: status counts, and every 5xx with its request."""

    requests: int = 0
    reads: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    by_route: Counter[str] = field(default_factory=Counter)
    server_errors: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "reads": self.reads,
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "by_route": dict(sorted(self.by_route.items())),
            "server_errors": len(self.server_errors),
            "server_errors_by_route": dict(Counter(e["route"] for e in self.server_errors)),
            "server_error_examples": self.server_errors[:50],
        }


def route_of(path: str) -> str:
    """``/api/v1/incidents/12/feedback?x=1`` -> ``/api/v1/incidents/{id}/feedback``."""
    parts = path.split("?", 1)[0].split("/")
    return "/".join("{id}" if i and parts[i - 1] == "incidents" else p for i, p in enumerate(parts))


class Fuzzer:
    """Sends :class:`Request` s through a Starlette ``TestClient`` of a running app and records
    the answers. ``tokens``: scope name -> bearer token (``admin`` holds every scope)."""

    def __init__(self, client: Any, tokens: dict[str, str], report: FuzzReport) -> None:
        self.client = client
        self.tokens = tokens
        self.report = report
        self.ui_cookies: dict[str, str] = {}

    def send(self, req: Request, read: bool = False) -> int | None:
        headers = {"content-type": req.content_type, **req.headers}
        token = self.tokens.get(req.scope)
        if token:
            headers["authorization"] = f"Bearer {token}"
        raw_headers = [(k.encode(), v.encode("utf-8", "surrogatepass")) for k, v in headers.items()]
        try:
            r = self.client.request(
                req.method,
                req.path,
                content=req.body.encode("utf-8", "surrogatepass") if req.body is not None else None,
                headers=raw_headers,
                cookies=self.ui_cookies if req.path.startswith("/ui") else None,
                follow_redirects=False,
            )
        except Exception as err:  # the app raised: uvicorn would answer 500
            self.report.requests += 1
            self._record(req, 500, f"{type(err).__name__}: {str(err)[:300]}")
            return 500
        self.report.requests += 1
        self.report.reads += int(read)
        self._record(req, r.status_code, r.text[:300])
        return r.status_code

    def _record(self, req: Request, status: int, text: str) -> None:
        self.report.statuses[status] += 1
        route = f"{req.method} {route_of(req.path)}"
        self.report.by_route[route] += 1
        if status >= 500 and not (status == 503 and "too many" in text):
            self.report.server_errors.append(
                {"route": route, "status": status, "request": req.excerpt(), "response": text}
            )

    def login(self) -> None:
        """A ``/ui`` session for the read phase (admin token)."""
        c = self.client
        c.cookies.clear()
        c.get("/ui/login")
        csrf = c.cookies.get("fm_csrf")
        c.post(
            "/ui/login", data={"token": self.tokens["admin"], "csrf": csrf}, follow_redirects=False
        )
        self.ui_cookies = dict(c.cookies.items())
        c.cookies.clear()

    def read_everything(self, services: Any) -> None:
        """The stateful phase: group what was ingested, then read every list and page."""
        try:
            services.incidents.process_pending()
        except Exception as err:  # recorded as a server error: grouping must not fail either
            self._record(Request("WORKER", "process_pending"), 500, repr(err)[:300])
        gets = [
            "/api/v1/incidents?status=all&limit=1000",
            "/api/v1/incidents?status=open",
            "/api/v1/incidents?status=resolved",
            "/api/v1/incidents?status=merged",
            "/api/v1/alerts?limit=10000",
            "/api/v1/alerts?status=firing",
            "/api/v1/graph",
            "/api/v1/fleet",
            "/api/v1/models",
            "/metrics",
            "/readyz",
            "/healthz",
            "/ui/",
            "/ui/?show=recent",
            "/ui/fleet",
        ]
        for path in gets:
            self.send(Request("GET", path, scope="admin"), read=True)
        try:
            r = self.client.get(
                "/api/v1/incidents?status=all&limit=1000",
                headers={"authorization": f"Bearer {self.tokens['admin']}"},
            )
            ids = [i["id"] for i in r.json()] if r.status_code == 200 else []
        except Exception:  # recorded by the same read above
            ids = []
        for i in ids[:15]:
            for path in (
                f"/api/v1/incidents/{i}",
                f"/api/v1/incidents/{i}/feedback",
                f"/ui/incidents/{i}",
            ):
                self.send(Request("GET", path, scope="admin"), read=True)


def fuzz_app(app: Any, tokens: dict[str, str], config: FuzzConfig) -> FuzzReport:
    """Fuzz ``app`` (started here, lifespan included) with ``config.cases`` requests.

    ``tokens`` needs an ``admin`` entry holding every scope, and may hold ``read``, ``ingest`` and
    ``schedule``.
    """
    import schemathesis
    from fastapi.testclient import TestClient

    report = FuzzReport()
    schema = schemathesis.openapi.from_dict(app.openapi())
    operations = [r.ok() for r in schema.get_all_operations()]
    with TestClient(app) as client:  # an exception reaches the fuzzer: its type is recorded
        services = app.state.services
        fuzzer = Fuzzer(client, {"none": "", **tokens}, report)
        fuzzer.login()
        fleet = client.get("/api/v1/fleet", headers={"authorization": f"Bearer {tokens['admin']}"})
        nodes = (
            [n["name"] for n in fleet.json().get("nodes", [])] if fleet.status_code == 200 else []
        )
        requests = st.one_of(
            schema_requests(operations),
            schema_requests(operations),
            webhook_requests(),
            extender_requests(nodes),
            login_requests(),
        )
        sent = 0

        @seed(config.seed)
        @settings(
            max_examples=config.cases,
            phases=[Phase.generate],
            database=None,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(req=requests)
        def run(req: Request) -> None:
            nonlocal sent
            fuzzer.send(req)
            sent += 1
            if sent % config.read_every == 0:
                fuzzer.read_everything(services)
                fuzzer.login()  # the graph or tokens may have changed

        run()
        fuzzer.read_everything(services)
    return report


# ------------------------------------------------------------------------------------ apps
def _serving_helpers() -> Any:
    """``tests/serving_helpers.py`` (the throwaway PostgreSQL cluster), loaded from its file."""
    if "serving_helpers" not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            "serving_helpers", REPO_ROOT / "tests" / "serving_helpers.py"
        )
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules["serving_helpers"] = module
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    return sys.modules["serving_helpers"]


TOKENS = {
    "admin": "fuzz-admin-token",
    "read": "fuzz-read-token",
    "ingest": "fuzz-ingest-token",
    "schedule": "fuzz-schedule-token",
}


def make_settings(
    database_url: str, rca_model: str | None = None, placement_model: str | None = None
) -> Any:
    """The fuzzed service's settings: the released models unless told otherwise (``None``, the
    service's own default). The released GAT reads request bodies through its own column parser
    (``serving/rca/parse.py``) and result path, which a baseline model never reaches; fuzzed with a
    baseline only, an empty ``endsAt`` and an empty served graph got 500s there at the defaults."""
    from fleetmind.serving.settings import Settings

    return Settings(
        database_url=database_url,
        sqlite_synchronous="OFF",
        rca_model=rca_model,
        placement_model=placement_model,
        incident_worker=False,  # the read phase groups, in this thread: deterministic
        max_body_bytes=256 * 1024,
        api_token=TOKENS["admin"],
        read_token=TOKENS["read"],
        ingest_token=TOKENS["ingest"],
        schedule_token=TOKENS["schedule"],
    )


@contextlib.contextmanager
def database(kind: str) -> Iterator[str]:
    """A fresh database URL of ``kind`` (``sqlite`` or ``postgresql``)."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory(prefix="fleetmind-fuzz-") as tmp:
            yield f"sqlite:///{tmp}/fuzz.db"
        return
    helpers = _serving_helpers()
    bindir = helpers.pg_bindir()
    if bindir is None:
        raise RuntimeError("PostgreSQL binaries not installed (Debian package postgresql)")
    port = helpers.free_port()
    cluster = helpers.PgCluster(bindir, port=port).start()
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        cluster.close()


def run_database(kind: str, config: FuzzConfig, models: dict[str, str | None]) -> dict[str, Any]:
    from fleetmind.serving.app import create_app

    with database(kind) as url:
        t0 = time.perf_counter()
        report = fuzz_app(create_app(make_settings(url, **models)), TOKENS, config)
        elapsed = time.perf_counter() - t0
    return {"seconds": round(elapsed, 1), **report.to_json()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--cases", type=argtypes.positive_int, default=10_000, help="fuzzed requests per database"
    )
    p.add_argument(
        "--read-every", type=argtypes.positive_int, default=200, help="requests between read phases"
    )
    p.add_argument("--seed", type=argtypes.seed, default=0)
    p.add_argument("--databases", nargs="+", default=["sqlite", "postgresql"])
    p.add_argument(
        "--out", type=argtypes.output_path, default=RESULTS / "serving" / "serving_fuzz.json"
    )
    p.add_argument(
        "--rca-model", default=None, help="FLEETMIND_RCA_MODEL (default: the released GAT)"
    )
    p.add_argument(
        "--placement-model",
        default=None,
        help="FLEETMIND_PLACEMENT_MODEL (default: the released placement agent)",
    )
    args = p.parse_args(argv)
    models = {"rca_model": args.rca_model, "placement_model": args.placement_model}
    load0 = load_now()
    config = FuzzConfig(args.cases, args.read_every, args.seed)
    results = {}
    for kind in args.databases:
        print(f"fuzzing on {kind}: {args.cases} requests", file=sys.stderr)
        results[kind] = run_database(kind, config, models)
        print(
            f"  {results[kind]['server_errors']} server errors in {results[kind]['requests']} "
            f"requests ({results[kind]['seconds']} s)",
            file=sys.stderr,
        )
    out = {
        **provenance(
            __spec__.name if __spec__ else "benchmarks.serving.fuzz",
            argv,
            load_start=load0,
            packages=["schemathesis", "hypothesis", "fastapi", "sqlalchemy", "psycopg"],
        ),
        "config": {
            "cases": args.cases,
            "read_every": args.read_every,
            "seed": args.seed,
            "models": {k: v or "released" for k, v in models.items()},
        },
        "databases": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0 if all(r["server_errors"] == 0 for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.serving.fuzz"))
