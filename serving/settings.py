"""Service settings, read from ``FLEETMIND_*`` environment variables (pydantic-settings).

Every field below maps to ``FLEETMIND_<FIELD>`` (case-insensitive), e.g. ``FLEETMIND_DATABASE_URL``.
Routes receive the settings through the cached :func:`get_settings` dependency, which tests replace
with ``app.dependency_overrides[get_settings]``.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from collections.abc import Mapping
from functools import lru_cache
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from fleetmind.redact import safe_uri, without_password


def _url_problem(url: str) -> str | None:
    """What is wrong with a service URL setting (``None``: nothing): it must be ``http://`` or
    ``https://`` with a host and, if it names one, a port from 1 to 65535."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "expected an http:// or https:// URL with a host"
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        return "the URL's port is not a number from 1 to 65535"
    return None


def public_url_problem(url: str) -> str | None:
    """What is wrong with ``FLEETMIND_PUBLIC_URL`` (already stripped of surrounding whitespace;
    ``None``: nothing). It starts every link sent out (an incident's ``incident_url``, the
    ``generatorURL`` Alertmanager checks as a URI, chat messages), so it must be an ``http://`` or
    ``https://`` origin: no ``user:password@`` (copied into every message; checked first, so that
    no other message quotes it), no whitespace or control character (``urlsplit`` silently drops a
    tab, CR or LF), no query or fragment, and no path but slashes (the pages, redirects, form
    actions and cookie paths are rooted at ``/``)."""
    if "@" in url:  # anywhere: a value without scheme:// may hold it after a "/" or "?"
        return (
            "must not hold a user name or password (the userinfo before @): it is copied into "
            "every link sent to Alertmanager and chat"
        )
    if any(ch.isspace() or unicodedata.category(ch) in ("Cc", "Cf") for ch in url):
        return "contains whitespace or a control character; every incident link sent starts with it"
    problem = _url_problem(url)
    if problem is not None:
        return f"{problem}, got {safe_uri(repr(url))}"
    parts = urlsplit(url)
    if "?" in url or "#" in url:
        return (
            "must not hold a query or fragment: every incident link is built by appending "
            "/ui/incidents/<id> to it"
        )
    if parts.path.strip("/"):
        return (
            "a path prefix is not supported: the pages, redirects, form actions and cookie paths "
            "are rooted at /, so behind a proxy that strips the prefix links 404 and sign-in "
            "fails; serve it at the root of its own host name (e.g. "
            "https://fleetmind.example.com)"
        )
    return None


def database_url_problem(url: str) -> str | None:
    """What is wrong with a database URL's ``user:password@`` (``None``: nothing, or no URL of
    that form: SQLAlchemy's own parse reports the rest). An ``@`` after the one that ends the
    password means the password held an unencoded ``@``: SQLAlchemy's ``make_url`` ends the
    password at its first ``@`` (``_parse_url`` in ``sqlalchemy/engine/url.py``: the password is
    ``[^@]*``), so the rest of it becomes the host or the database name, and the driver's error
    quotes that (``failed to resolve host 'tP4ss@db'``). The URL is never quoted here. An ``@`` in
    the user name before the ``:`` (``fm@server:pw@db``) or in the query
    (``?application_name=ops@fleet``) is parsed as meant and left alone; one in the database name
    cannot be told from a password cut short, and is written ``%40`` there too (SQLAlchemy decodes
    it)."""
    _scheme, sep, rest = url.partition("://")
    if not sep:
        return None
    user_end = min((i for i in map(rest.find, ":/") if i >= 0), default=-1)
    if user_end < 0 or rest[user_end] != ":":
        return None  # no password: a user name holding an @ is parsed as meant
    password_end = rest.find("@", user_end + 1)
    query = rest.find("?", password_end + 1)  # an @ in the query is parsed as meant
    if password_end < 0 or "@" not in rest[password_end + 1 : None if query < 0 else query]:
        return None
    return (
        "an @ follows the one that ends the password, in the host or database name: a password "
        "holding an @ is cut at its first @ and the rest sent as the host or database name; "
        "percent-encode @ in the user name, password or database name as %40 (a password p@ss "
        "is written p%40ss)"
    )


_IPV4_NUMBERS = re.compile(r"[0-9A-Fa-fXx.]+")
"""The characters of an IPv4 address in the forms ``inet_aton`` (and so ``getaddrinfo``) reads:
``0``, ``0.0``, ``0x0``, ``127.1``."""


def is_wildcard_host(host: str) -> bool:
    """Whether listening on ``host`` means every interface (the unspecified address), so that no
    link can name it: ``""``, ``0.0.0.0``, ``::``, ``::0``, ``[::]``, and the short IPv4 forms the
    socket layer reads as ``0.0.0.0`` (``0``, ``0.0``, ``0x0``). Judged by the parsed address
    (:attr:`ipaddress.IPv4Address.is_unspecified`), not by spelling."""
    import socket

    host = host.strip().strip("[]")
    if not host:
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:  # ::ffff:0.0.0.0 listens on every IPv4 interface
        mapped = getattr(address, "ipv4_mapped", None)
        return address.is_unspecified or bool(mapped and mapped.is_unspecified)
    if not _IPV4_NUMBERS.fullmatch(host):  # a host name (glibc's inet_aton ignores a tail)
        return False
    try:
        return socket.inet_aton(host) == bytes(4)
    except OSError:
        return False


def default_public_url(host: str, port: int, tls: bool = False) -> str:
    """``FLEETMIND_PUBLIC_URL``'s default for a service listening on ``host``:``port`` (TCP port,
    1 to 65535): ``http://host:port``, or ``https://`` when ``tls`` (the service's own TLS,
    ``FLEETMIND_TLS_CERT``), with an IPv6 literal bracketed (RFC 3986 section 3.2.2, a zone's
    ``%`` as ``%25``, RFC 6874) and ``127.0.0.1`` for a wildcard address
    (:func:`is_wildcard_host`)."""
    host = host.strip()
    if is_wildcard_host(host):
        host = "127.0.0.1"
    host = host.strip("[]")
    if ":" in host:
        host = "[" + host.replace("%25", "%").replace("%", "%25") + "]"
    return f"{'https' if tls else 'http'}://{host}:{port}"


MAX_DURATION_S = 365 * 86400.0
"""The longest any duration setting may be (one year), unless its own bound is lower. A wait on a
thread (``Event.wait``, the graph refresh) raises ``OverflowError`` past ``threading.TIMEOUT_MAX``
(about 9.2e9 s on 64-bit Linux) and kills its thread with nothing reported; a year is far below
that and above any interval, timeout or grace period that makes sense, so a larger value is a typo
(``1e12``) and stops ``fleetmind serve`` with one line instead."""
MAX_RETENTION_S = 10 * 365 * 86400.0
"""The longest ``FLEETMIND_RETENTION_S`` (ten years): history is the one duration that may
sensibly exceed a year (0 keeps everything)."""
WEBHOOK_MAX_ALERTS = 10_000
"""The ``max_alerts`` of the receiver in ``deploy/alertmanager.yml``, which sizes
``FLEETMIND_MAX_WEBHOOK_BYTES``' default; a webhook may carry more alerts, up to
:data:`WEBHOOK_ALERT_CAP`."""
WEBHOOK_ALERT_CAP = 100_000
"""The most alerts one webhook may carry (a bigger one gets 422, nothing stored). The byte limit
alone let 610,000 minimal alerts (40.8 MB) through: 26 s of CPU and the process's resident memory
from 575 MB to 1.94 GB in one request, so two at once could pass a 4 GiB pod limit; 100,000 took
4.0 s and 180 MB (local runs, 2 shared cores). Alertmanager's groups are far smaller; a group this
large needs ``max_alerts`` on its receiver."""
WEBHOOK_ALERT_BYTES = 4096
"""The bytes per alert ``FLEETMIND_MAX_WEBHOOK_BYTES``' default allows (4 KiB). The project's own
GpuXidError with dcgm-exporter's labels takes about 2,290 bytes of webhook JSON, most of it the
``generatorURL`` (Prometheus ``util/strutil.TableLinkForExpression``: ``/graph?g0.expr=`` and the
query-escaped expression, 1,485 characters; Alertmanager's Go JSON encoder writes each ``&`` as
``\\u0026``): 4 KiB leaves 1.8 times that. Alerts bigger than this (long annotations, rules
with longer expressions) call for a lower ``max_alerts``, not a larger limit."""
MAX_STATEMENT_TIMEOUT_S = 86400.0
"""The longest ``FLEETMIND_DB_STATEMENT_TIMEOUT_S`` (one day; 0: none). PostgreSQL's own limit is
2,147,483,647 ms (24.8 days), past which every connection is refused."""

_FIELD_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
"""An HTTP field name: an RFC 9110 ``token`` (section 5.1)."""
_FIXED_HEADERS = ("host", "content-length", "content-type", "transfer-encoding")
"""Headers the HTTP client writes for each query itself (the form body's type and length)."""


def parse_prometheus_headers(
    text: str | None, bearer_token_file: str | None = None, url: str | None = None
) -> dict[str, str]:
    """``FLEETMIND_PROMETHEUS_HEADERS`` (``Name=value`` pairs separated by commas, e.g.
    ``X-Scope-OrgID=team-a``) as a header dict; blank or None: no headers. ``bearer_token_file``
    and ``url``: the token file and Prometheus URL set beside it (an ``Authorization`` header is
    refused when either sets one).

    Raises:
        ValueError: one line naming the pair (by its place) or header name and what is wrong;
            never a value, which may be a credential.
    """
    out: dict[str, str] = {}
    pairs = [p for p in (text or "").split(",") if p.strip()]
    for n, pair in enumerate(pairs, start=1):
        where = f"pair {n} of {len(pairs)}"
        name, eq, value = pair.partition("=")
        name, value = name.strip(), value.strip()
        if not eq or not name:
            raise ValueError(f"{where} is not Name=value (e.g. X-Scope-OrgID=team-a)")
        if not _FIELD_NAME.fullmatch(name):
            raise ValueError(
                f"the name of {where} is not an HTTP header name (RFC 9110 token: letters, "
                "digits and !#$%&'*+-.^_`|~; write Name=value, not Name: value)"
            )
        if not value or not all(" " <= c <= "~" for c in value):
            raise ValueError(
                f"{name}: the value is empty or holds a character other than visible ASCII or "
                "space (no CR or LF)"
            )
        if name.lower() in _FIXED_HEADERS:
            raise ValueError(f"{name} is written by the HTTP client itself; leave it out")
        if name.lower() in (k.lower() for k in out):
            raise ValueError(f"{name} is named twice")
        out[name] = value
    parts = urlsplit(url or "")
    if any(k.lower() == "authorization" for k in out) and (
        bearer_token_file or parts.username or parts.password
    ):
        raise ValueError(
            "Authorization is set here and also by FLEETMIND_PROMETHEUS_BEARER_TOKEN_FILE or the "
            "user name and password in FLEETMIND_PROMETHEUS_URL: which one wins would be ambiguous; keep "
            "one"
        )
    return out


_CUT_ARRAY_PIECE = re.compile(r"^\[\s*[\"']|[\"']\s*\]$")
"""A comma-separated piece that is the start (``["Watchdog"``) or end (``"InfoInhibitor"]``) of a
JSON array, or of a quoted list such as YAML's ``['Watchdog','InfoInhibitor']``, cut at its
commas: no alert is named so, while ``[Prod] Checkout SLO burn`` (a Grafana rule title, the
alertname of a Grafana-managed alert) is a name."""


def alert_names(value: str) -> frozenset[str]:
    """The alertnames of a list setting such as ``FLEETMIND_UNGROUPED_ALERTS``: a JSON array of
    strings (``["Watchdog","InfoInhibitor"]``, the format pydantic-settings reads for list
    settings) when the value parses as one, otherwise comma-separated
    (``Watchdog,[Grafana] DatasourceError``: brackets inside a name are kept, as in Grafana rule
    titles), each name stripped of surrounding whitespace, blank ones dropped.

    Raises:
        ValueError: one line: a value starting with ``[`` that parses as JSON but not as an array
            of strings; a comma-separated name that is a piece of an array cut at its commas
            (:data:`_CUT_ARRAY_PIECE`) or wholly in double quotes (``"Watchdog","InfoInhibitor"``),
            or an unquoted bracketed list (``[Watchdog, InfoInhibitor]``); each would match no
            alert.
    """
    import json

    text = value.strip()
    if text.startswith("["):
        try:
            parsed = json.loads(text)
        except ValueError:
            pass  # not JSON: a name such as "[Prod] Checkout SLO burn", read at its commas
        else:
            if not isinstance(parsed, list) or not all(isinstance(n, str) for n in parsed):
                raise ValueError("as JSON, must be an array of strings (alertnames)")
            return frozenset(n.strip() for n in parsed if n.strip())
    names = [n.strip() for n in text.split(",")]
    if any(_CUT_ARRAY_PIECE.search(n) for n in names):
        raise ValueError(
            "is not a JSON array of strings, yet a name is a piece of a quoted array cut at "
            "its commas (it starts with [\" or [' or ends with \"] or ']) and would match no "
            'alert: give a JSON array (["Watchdog","InfoInhibitor"]) or names separated by '
            "commas (Watchdog,InfoInhibitor)"
        )
    first, last = names[0], names[-1]
    if (
        len(names) >= 2
        and first[:1] == "["
        and "]" not in first
        and last[-1:] == "]"
        and "[" not in last
    ):
        # [Watchdog, InfoInhibitor]: an unquoted list (YAML flow style written as a string),
        # whose first and last pieces would match no alert; "[Prod] X,Y" keeps its ] in the first
        raise ValueError(
            "is a bracketed list that is not JSON ([a, b] without quotes) and would match no "
            'alert: give a JSON array (["Watchdog","InfoInhibitor"]) or names separated by '
            "commas (Watchdog,InfoInhibitor)"
        )
    if any(len(n) >= 2 and n[0] == n[-1] == '"' for n in names):
        raise ValueError(
            "an alertname is wholly in double quotes and would match no alert: give names "
            "separated by commas without quotes (Watchdog,InfoInhibitor) or a JSON array "
            '(["Watchdog","InfoInhibitor"])'
        )
    return frozenset(n for n in names if n)


def env_value(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The value of the environment variable ``name`` read case-insensitively, as the settings
    read theirs (``fleetmind_prometheus_url`` is ``FLEETMIND_PROMETHEUS_URL``): compared in lower
    case, as pydantic-settings compares (so the Kelvin sign U+212A matches ``k`` and the long s
    U+017F matches nothing); where several spellings are set, the last one in ``environ``'s order,
    as pydantic-settings takes it. ``environ``: ``os.environ`` when ``None``. ``None`` when
    unset."""
    import os

    found = None
    for key, value in (os.environ if environ is None else environ).items():
        if key.lower() == name.lower():
            found = value
    return found


class Settings(BaseSettings):
    """Configuration of the FleetMind service (see ``docs/serving/settings.md`` for the table)."""

    # allow_inf_nan: a duration of inf would overflow sleeps and database timeouts; the settings
    # that can mean "never" say so with 0
    # hide_input_in_errors: an error's text never repeats a value (tokens, webhook URLs)
    model_config = SettingsConfigDict(
        env_prefix="FLEETMIND_", extra="ignore", allow_inf_nan=False, hide_input_in_errors=True
    )

    database_url: str = Field(
        "sqlite:///fleetmind.db",
        description="SQLAlchemy URL: a SQLite file (WAL mode) or postgresql+psycopg://user@host/db",
    )
    sqlite_synchronous: Literal["OFF", "NORMAL", "FULL", "EXTRA"] = Field(
        "FULL",
        description="SQLite PRAGMA synchronous; FULL fsyncs every commit (durable on power loss)",
    )
    graph: str | None = Field(
        None, description="dependency graph JSON file; the committed example graph when unset"
    )
    graph_refresh_s: float = Field(
        0.0,
        ge=0,
        le=MAX_DURATION_S,
        description="reload FLEETMIND_GRAPH every this many seconds when the file changed "
        "(0: load once at start)",
    )
    api_token: str | None = Field(
        None,
        description="a bearer token with every scope (read, ingest, schedule, admin); when any "
        "token is set, every route but /healthz, /readyz and /metrics needs "
        "'Authorization: Bearer <token>'",
    )
    ingest_token: str | None = Field(
        None, description="a bearer token with the ingest scope only (the Alertmanager webhook)"
    )
    read_token: str | None = Field(
        None,
        description="a bearer token with the read scope (GET routes, RCA, placements without "
        "reserve, /docs)",
    )
    schedule_token: str | None = Field(
        None,
        description="a bearer token with the schedule scope (the kube-scheduler extender routes "
        "and placements with reserve=true: the routes that hold capacity)",
    )
    admin_token: str | None = Field(
        None, description="a bearer token with the admin scope (replace the graph, reload models)"
    )
    tls_cert: str | None = Field(
        None,
        description="PEM certificate (chain) file: with FLEETMIND_TLS_KEY, `fleetmind serve` "
        "serves HTTPS",
    )
    tls_key: str | None = Field(None, description="PEM private key file of FLEETMIND_TLS_CERT")
    scheduler_client_ca: str | None = Field(
        None,
        description="PEM CA bundle (needs TLS): a client certificate it signed carries the "
        "schedule scope on /api/v1/scheduler/* without a bearer token (kube-scheduler's extender "
        "tlsConfig); use a CA that signs nothing else",
    )
    migrate_on_start: bool = Field(
        True,
        description="upgrade the database schema to this release's newest revision at start "
        "(Alembic); false: refuse to start unless the schema is already there",
    )
    max_body_bytes: int = Field(
        16 * 1024 * 1024,
        ge=1024,
        description="largest request body accepted by every route but the Alertmanager webhook "
        "(FLEETMIND_MAX_WEBHOOK_BYTES) and the kube-scheduler extender's filter and prioritize "
        "(FLEETMIND_MAX_SCHEDULER_BYTES)",
    )
    max_scheduler_bytes: int = Field(
        5_000 * 16 * 1024,  # fleetmind.serving.middleware.SCHEDULER_MAX_BYTES
        ge=1024,
        description="largest POST /api/v1/scheduler/filter and /prioritize body accepted (the "
        "larger of this and FLEETMIND_MAX_BODY_BYTES); the default, 81,920,000 (about 78 MiB), "
        "holds the ExtenderArgs of 5,000 candidate v1.Nodes of 16 KiB (nodeCacheCapable: false)",
    )
    # Its own limit, not a larger global one: the webhook is the one route whose body size is set
    # by a sender that cannot shrink a refused request (Alertmanager drops a 4xx unretried,
    # notify.Retrier.Check), while every other route is bounded by what its client chooses to send.
    max_webhook_bytes: int = Field(
        WEBHOOK_MAX_ALERTS * WEBHOOK_ALERT_BYTES,
        ge=1024,
        description="largest POST /api/v1/alerts body accepted (the larger of this and "
        "FLEETMIND_MAX_BODY_BYTES); the default, 40,960,000 (about 39 MiB), holds a webhook of "
        "10,000 alerts (deploy/alertmanager.yml's max_alerts) of up to 4 KiB each",
    )
    telemetry: Literal["sim", "nvml", "prometheus"] = Field("sim", description="telemetry source")
    prometheus_url: str = Field(
        "http://127.0.0.1:9400/metrics",
        description="telemetry=prometheus: a Prometheus server (http://prometheus:9090: the whole "
        "fleet from DCGM and kube-state-metrics series) or one DCGM exporter's /metrics URL",
    )
    telemetry_cluster: str = Field(
        "local", description="cluster name for GPUs whose telemetry carries no 'cluster' label"
    )
    telemetry_timeout_s: float = Field(
        2.0, gt=0, le=MAX_DURATION_S, description="scrape timeout of the prometheus source"
    )
    telemetry_ttl_s: float = Field(
        5.0, ge=0, le=MAX_DURATION_S, description="how long a telemetry snapshot is reused"
    )
    # Stale-while-refresh (telemetry=prometheus): a 5,000-node fleet's DCGM query took 2-7 s on a
    # loaded Prometheus (one measurement, 2-core machine, 2026-12-06), past kube-scheduler's 5 s extender httpTimeout (DefaultExtenderTimeout),
    # so the request that refreshed timed out and an ignorable extender was skipped. A snapshot
    # older than the TTL but within this bound is served at once while one background refresh
    # runs; nothing reads between calls, so the first call after a lull longer than ttl + this
    # waits for a whole read. Holds: a decision may read a snapshot ttl + this (35 s) old, so a
    # bound hold's row is kept reservation_bound_grace_s + ttl + this (snapshot_lag_s of
    # DbReservations) and ends earlier only by the snapshot rule (a snapshot collected
    # bound_grace_s after the binding, or one listing the pod). reservation_ttl_s is a clock
    # deadline: a pod bound without /bound (or a reserve=true job) must show in telemetry within
    # reservation_ttl_s - ttl - this (120 - 35 = 85 s) of its hold, so keep reservation_ttl_s above
    # ttl + this + the binding-to-scrape time. Only what changed without FleetMind (pods another
    # scheduler placed, GPUs freed) is seen up to this much later.
    telemetry_max_stale_s: float = Field(
        30.0,
        ge=0,
        le=MAX_DURATION_S,
        description="telemetry=prometheus: a snapshot older than FLEETMIND_TELEMETRY_TTL_S by "
        "up to this (s) is still served, at once, while one background refresh runs; older "
        "ones (or none yet) make requests wait for the refresh; 0: always wait",
    )
    # Samples with their own timestamps (federation, remote write) get no staleness marker when
    # their source stops: Prometheus answers them for its whole 5-minute lookback (Prometheus docs,
    # querying/basics.md, "Staleness"), so a dead cluster looked alive and placeable for 5 minutes.
    telemetry_max_age_s: float = Field(
        120.0,
        ge=0,
        le=MAX_DURATION_S,
        description="telemetry=prometheus (server): series whose newest sample is older than "
        "this (s) are left out, so a federated cluster that stopped sending drops out after it "
        "instead of Prometheus's 5-minute lookback; 0: no bound",
    )
    prometheus_bearer_token_file: str | None = Field(
        None,
        description="telemetry=prometheus: send 'Authorization: Bearer <token>' with the token "
        "read from this file on every request (a rotated service-account token is picked up)",
    )
    prometheus_ca_file: str | None = Field(
        None,
        description="telemetry=prometheus: PEM bundle of CAs trusted for an https Prometheus, "
        "besides httpx's default ones (SSL_CERT_FILE when set, else certifi's bundle)",
    )
    prometheus_headers: str | None = Field(
        None,
        description="telemetry=prometheus: extra HTTP headers sent with every request, as "
        "Name=value pairs separated by commas (X-Scope-OrgID=team-a: the tenant of Grafana Mimir "
        "or Cortex); values are never printed",
    )
    scheduler_cluster: str | None = Field(
        None,
        description="the telemetry cluster the kube-scheduler extender places into (unset: node "
        "names are looked up in every cluster; a name several clusters use fails GPU pods, "
        "with a reason that says to set this)",
    )
    reservation_ttl_s: float = Field(
        120.0,
        gt=0,
        le=MAX_DURATION_S,
        description="an extender or reserve=true hold not seen bound is released "
        "after this many seconds",
    )
    reservation_bound_grace_s: float = Field(
        30.0,
        ge=0,
        le=MAX_DURATION_S,
        description="a bound pod's hold stays this long (s) unless telemetry shows "
        "the pod first (about two Prometheus scrape intervals)",
    )
    health_latency_histogram: str = Field(
        "http_server_request_duration_seconds",
        pattern=r"^[a-zA-Z_:][a-zA-Z0-9_:]*$",
        description="Prometheus histogram (seconds) of inference latency per cluster, for cluster "
        "health (P99), skew (P95) and request rate",
    )
    health_latency_slo_s: float = Field(
        1.0,
        gt=0,
        le=MAX_DURATION_S,
        description="P99 latency counted as fully degraded in cluster health (s)",
    )
    health_min: float = Field(
        0.2,
        ge=0,
        le=1,
        description="jobs without a cluster avoid clusters below this health "
        "when a healthier one can hold them",
    )
    rca_model: str | None = Field(
        None,
        description="RCA model: a local artifact path, an MLflow URI (models:/fleetmind-rca@champion), "
        "'baseline:<name>' for a baseline, or unset for the released artifact in models/rca/",
    )
    placement_model: str | None = Field(
        None,
        description="placement model: a local path, an MLflow URI, 'heuristic:<name>', or unset for "
        "the released artifact in models/placement/",
    )

    @field_validator("rca_model", "placement_model", mode="before")
    @classmethod
    def _empty_model_is_unset(cls, v: object) -> object:
        """An empty model reference (a manifest's ``value: ""``) means unset, the released
        artifact, as for the notification URLs: as a path, ``""`` is the working directory, whose
        recursive search served whatever model lay below it (placement: no model, BestFit)."""
        if isinstance(v, str) and not v.strip():
            return None
        return v

    incident_window_s: float = Field(
        600.0,
        gt=0,
        le=MAX_DURATION_S,
        description="alerts whose starts are this close (s) may join an incident; a new episode "
        "of an alert starting this soon after its incident resolved reopens it; an alert that "
        "resolved before it was grouped joins a resolved incident that closed at most this long "
        "before its resolution was stored",
    )
    incident_hops: int = Field(
        2,
        ge=0,
        le=10,
        description="alerts whose nodes are within this many graph hops group together",
    )
    incident_worker: bool = Field(
        True, description="let this process compete for the incident worker (leader lock)"
    )
    incident_rank_interval_s: float = Field(
        2.0,
        ge=0,
        le=MAX_DURATION_S,
        description="an incident is re-ranked at most this often during a storm (s)",
    )
    incident_auto_resolve_s: float = Field(
        86400.0,
        ge=0,
        le=MAX_DURATION_S,
        description="an open incident none of whose alerts changed or was delivered again "
        "(firing) for this long is resolved, its firing alerts with it (0: never); keep it above "
        "Alertmanager's repeat_interval",
    )
    alert_refire_margin_s: float = Field(
        15.0,
        ge=0,
        le=3600,
        description="a firing delivery of a resolved alert (same fingerprint and startsAt) "
        "reopens it when received more than this long (s) after the resolution was; an earlier "
        "one is taken as stale (sent before the resolution, delivered after it). 15 s is "
        "Alertmanager's default --cluster.peer-timeout, how long the second peer of an HA pair "
        "waits before sending what it computed earlier, and half the 30 s group_interval of "
        "deploy/alertmanager.yml, the earliest Alertmanager notifies a group again; keep it below "
        "your smallest group_interval (a re-fire taken as stale waits for the next re-send)",
    )
    retention_s: float = Field(
        30 * 86400.0,
        ge=0,
        le=MAX_RETENTION_S,
        description="incidents closed longer ago than this are deleted with their alerts (0: keep)",
    )
    leader_lease_s: float = Field(
        10.0,
        ge=2,
        le=3600,
        description="PostgreSQL: the incident worker's lock session ends this long after its "
        "holder stops checking it (a vanished host), so another replica takes over",
    )
    worker_startup_timeout_s: float = Field(
        120.0,
        ge=5,
        le=3600,
        description="fleetmind serve --workers N: how long uvicorn's supervisor waits for a new "
        "worker process to answer its health check (and, on a SIGHUP restart, to finish starting) "
        "before killing it, seconds. A worker imports torch and loads both models first, which "
        "takes longer than uvicorn's own 5 s on a busy host",
    )
    worker_stuck_s: float = Field(
        60.0,
        gt=0,
        le=MAX_DURATION_S,
        description="/readyz answers 503 once the incident worker has failed for this long",
    )
    db_connect_timeout_s: float = Field(
        5.0, gt=0, le=300, description="PostgreSQL connect (and pool checkout) timeout, seconds"
    )
    db_statement_timeout_s: float = Field(
        30.0,
        ge=0,
        le=MAX_STATEMENT_TIMEOUT_S,
        description="PostgreSQL statement_timeout, seconds (0: none)",
    )
    limit_concurrency: int = Field(
        1024,
        ge=1,
        description="most requests in progress at once per server process; beyond it new ones "
        "get 503 (/healthz, /readyz and /metrics are always answered; idle connections do not "
        "count: see max_connections)",
    )
    max_connections: int = Field(
        1000,
        ge=2,
        description="most open connections per server process; beyond it the oldest one with no "
        "request in progress is closed (keep it under the open-file limit, ulimit -n)",
    )
    header_timeout_s: float = Field(
        10.0,
        gt=0,
        le=300,
        description="a connection whose request headers are not complete this many seconds after "
        "it opened (or after its previous response) is closed",
    )
    body_timeout_s: float = Field(
        20.0,
        gt=0,
        le=3600,
        description="a request whose body receives no byte for this many seconds (between two "
        "reads, not in total) gets 408 and its connection is closed",
    )
    graceful_shutdown_s: float = Field(
        20.0,
        gt=0,
        le=3600,
        description="after SIGTERM or SIGINT, how long each server process waits for requests in "
        "flight to finish (seconds) before it cancels the rest and runs its shutdown (notifier, "
        "database); keep it some seconds under Kubernetes' terminationGracePeriodSeconds (30 s "
        "by default) or docker stop's timeout (10 s), which end in SIGKILL",
    )
    access_log: Literal["all", "no-probes", "off"] = Field(
        "no-probes",
        description="fleetmind serve's access lines on stdout: all, no-probes (not the 2xx/3xx "
        "GET and HEAD answers of /healthz, /readyz and /metrics; their errors are logged) or off",
    )
    max_header_bytes: int = Field(
        32 * 1024,
        ge=4096,
        le=1024 * 1024,
        description="largest request line plus headers; larger ones get 431 before authentication",
    )
    rca_max_queue: int = Field(
        256,
        ge=1,
        description="most POST /api/v1/rca requests queued or ranking at once per process; "
        "beyond it 429 with Retry-After",
    )
    rca_deadline_s: float = Field(
        30.0,
        gt=0,
        le=MAX_DURATION_S,
        description="an RCA request not answered within this many seconds gets 503 with Retry-After",
    )
    rca_top_k: int = Field(5, ge=1, le=1000, description="ranked causes kept per incident")
    slo_alerts: str = Field(
        "",
        description="alertnames of user-facing (SLO) alerts, comma-separated or a JSON array of "
        "strings; in an incident with "
        "one, the first is its symptom and causes that no alerting dependency path joins to it "
        "are down-weighted; incidents without one keep the model's ranking",
    )
    # DatasourceError/DatasourceNoData: Grafana-managed alerting raises them by default when a
    # rule's query fails or returns nothing (Grafana docs, "No Data and Error states",
    # alerting/fundamentals/alert-rule-evaluation/state-and-health); they keep the rule's labels
    # (a cluster label maps them onto the cluster node) but say the monitoring broke, not the
    # fleet. TestAlert: a contact point's Test button sends alertname=TestAlert, instance=Grafana
    # and never a resolve (grafana/alerting notify/receivers.go, newTestAlert). Stored, they are
    # resolved by FLEETMIND_INCIDENT_AUTO_RESOLVE_S once no longer delivered.
    ungrouped_alerts: str = Field(
        "Watchdog,InfoInhibitor,DatasourceError,DatasourceNoData,TestAlert",
        description="alertnames stored but never grouped into incidents, comma-separated or a "
        "JSON array of strings: "
        "heartbeats and inhibitor helpers (kube-prometheus' Watchdog always fires, "
        "InfoInhibitor carries severity none), and Grafana's alerts about alerting itself "
        "(DatasourceError and DatasourceNoData: a rule's query failed or returned no data; "
        "TestAlert: a contact point's test); alerts with severity none are never grouped "
        "either, nor FleetMind's own FleetMindRootCause, nor a Grafana rule's alert firing with "
        "the annotation grafana_state_reason Error or NoData (its query failed or returned none)",
    )
    bind_host: str = Field(
        "127.0.0.1",
        description="the address the service listens on: `fleetmind serve --host` sets it; with "
        "no token, the DNS-rebinding Host check applies only while it is a loopback address",
    )
    public_url: str = Field(
        "http://127.0.0.1:8000",
        description="the service's address as operators reach it (scheme, host and port, no "
        "path prefix); links to incident pages start here. Unset, `fleetmind serve` uses "
        "http://<--host>:<--port> (https:// with FLEETMIND_TLS_CERT; 127.0.0.1 for a "
        "wildcard host)",
    )
    trusted_proxies: str = Field(
        "",
        description="comma-separated IP addresses and networks (CIDR) of the reverse proxies "
        "(an ingress controller) whose X-Forwarded-Proto and X-Forwarded-For `fleetmind serve` "
        "believes, or '*' for any client; empty: uvicorn's default (FORWARDED_ALLOW_IPS, else "
        "127.0.0.1 and ::1 only). Behind a TLS-terminating proxy the request's scheme (Secure "
        "cookies, redirects) comes from X-Forwarded-Proto only when the proxy is trusted",
    )
    ui_session_hours: float = Field(
        12.0, gt=0, le=24 * 30, description="how long a browser login (the /ui cookie) lasts (h)"
    )
    auth_failure_limit: int = Field(
        20,
        ge=0,
        le=100_000,
        description="wrong tokens (a bearer header or the /ui login form) one client address may "
        "send within FLEETMIND_AUTH_FAILURE_WINDOW_S; past it, its requests with a token get 429 "
        "with Retry-After for that long, before the token is checked (0: no limit)",
    )
    auth_failure_window_s: float = Field(
        300.0,
        gt=0,
        le=MAX_DURATION_S,
        description="the window of FLEETMIND_AUTH_FAILURE_LIMIT, and how long a client address "
        "that went past it is refused (s)",
    )
    notify_alertmanager_url: str | None = Field(
        None,
        description="Alertmanager base URL: a settled root cause is posted to its /api/v2/alerts "
        "as a FleetMindRootCause alert, resolved when the incident resolves; several URLs "
        "separated by commas for an HA pair (each instance gets every alert: the peers gossip "
        "silences and notifications, not alerts)",
    )
    notify_webhook_url: str | None = Field(
        None, description="generic JSON webhook (Slack-compatible 'text') for settled root causes"
    )
    notify_critical_score: float = Field(
        0.7,
        ge=0,
        le=1,
        description="a settled root cause whose calibrated score is at least this is sent with "
        "severity critical (calibrated on simulated incidents only, no promise of how often a "
        "page is right on a real system: docs/operators.md)",
    )
    notify_warning_score: float = Field(
        0.3,
        ge=0,
        le=1,
        description="a settled root cause scored at least this (and below the critical score) is "
        "sent with severity warning; below it, no FleetMindRootCause alert is sent (the score "
        "is calibrated on simulated incidents only: docs/operators.md)",
    )

    @field_validator("notify_warning_score")
    @classmethod
    def _warning_below_critical(cls, v: float, info: ValidationInfo) -> float:
        critical = info.data.get("notify_critical_score")
        if critical is not None and v > critical:
            raise ValueError(  # both named: either may be the one set wrong
                f"the warning score must not exceed the critical score, "
                f"FLEETMIND_NOTIFY_CRITICAL_SCORE={critical}"
            )
        return v

    notify_settle_s: float = Field(
        30.0,
        ge=0,
        le=MAX_DURATION_S,
        description="a root cause is sent once an incident's top cause stayed the same this long (s)",
    )
    notify_resend_s: float = Field(
        60.0,
        gt=0,
        le=MAX_DURATION_S,
        description="a firing FleetMindRootCause alert is re-posted this often (Alertmanager "
        "expires alerts that are not re-sent within its resolve_timeout)",
    )
    notify_poll_s: float = Field(
        1.0, gt=0, le=60, description="how often the notifier reads the incidents (s)"
    )
    notify_retries: int = Field(
        5,
        ge=0,
        le=20,
        description="how many times a failing receiver's back-off doubles (then it stays there); "
        "a failed notification is tried again in later polls until FLEETMIND_NOTIFY_GIVE_UP_S",
    )
    notify_backoff_s: float = Field(
        0.5,
        ge=0,
        le=60,
        description="a receiver that failed (connection error, timeout, 408/425/429/5xx) is not "
        "tried again, for any incident, for this long; doubles with each failure in a row (s)",
    )
    notify_severity_margin: float = Field(
        0.05,
        ge=0,
        le=0.5,
        description="hysteresis of the severity: a settled cause's severity is lowered only once "
        "its score is this far below the threshold it crossed (raised at once)",
    )
    notify_give_up_s: float = Field(
        3600.0,
        ge=60,
        le=7 * 86400,
        description="a chat message, or a resolution for Alertmanager, not delivered this long "
        "after it was due is dropped with an error logged (s); a chat message answered with a "
        "status that is not retried (see FLEETMIND_NOTIFY_BACKOFF_S) is dropped at once. A firing root cause is re-sent to Alertmanager "
        "while its incident is open, whatever this says",
    )
    rca_max_batch: int = Field(
        16, ge=1, le=1024, description="most concurrent RCA requests ranked in one batch"
    )
    rca_processes: int = Field(
        0,
        ge=0,
        le=64,
        description="ranking processes for POST /api/v1/rca (0: rank in the server process); "
        "requests wait in one queue and a free process takes the next ones; about one per core",
    )
    rca_process_max_batch: int = Field(
        4,
        ge=1,
        le=1024,
        description="most RCA requests a ranking process takes from the queue for one batch; "
        "smaller than rca_max_batch: a request waits for the whole batch it is in, so big "
        "batches lengthen the latency tail more than they save (4 since 2026-11-30: in its "
        "pre-registered series, 4 had a lower median p99 than 2, with and without keep-warm)",
    )
    rca_process_nice: int = Field(
        0,
        ge=0,
        le=19,
        description="niceness added to the RCA ranking processes, so that the server process "
        "(HTTP, ingestion, incident worker) is scheduled before them when the CPUs are busy",
    )
    keep_warm_s: float = Field(
        0.0,
        ge=0,
        le=3600,
        description="keep the CPUs busy at idle priority (one SCHED_IDLE busy loop per CPU) until "
        "this many seconds after the last request, so that a VM's vCPUs do not halt between "
        "requests (0: off; Linux only; see docs/serving/operations.md)",
    )
    gc_gen0_threshold: int | None = Field(
        100_000,
        ge=1,
        le=2**31 - 1,  # gc.set_threshold takes a C int: a larger one raised OverflowError
        description="Python GC generation-0 threshold while serving (Python's own default is "
        "700); startup objects are also frozen out of collections",
    )
    malloc_mmap_threshold_mb: int | None = Field(
        32,
        ge=0,
        le=1024,
        description="glibc malloc: allocations below this many MiB come from the heap, and up to "
        "twice as much freed memory is kept for reuse instead of being returned to the OS "
        "(0: glibc's adaptive defaults, which map and unmap the GAT's per-request tensors)",
    )
    torch_threads: int | None = Field(
        1,
        ge=1,
        le=1024,  # torch.set_num_threads takes a C int; more threads than cores only slows it
        description="torch intra-op threads per process (1 suits one worker per core; torch's own "
        "default is one per core)",
    )

    @field_validator("prometheus_url", "notify_alertmanager_url", "notify_webhook_url")
    @classmethod
    def _http_url(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is None or (not v.strip() and info.field_name.startswith("notify_")):
            return None  # an empty notification URL (a common `value: ""`) means off, as unset does
        several = info.field_name == "notify_alertmanager_url"
        urls = [u.strip() for u in v.split(",")] if several else [v]
        for n, url in enumerate(urls, start=1):
            problem = _url_problem(url)
            if problem is None:
                continue
            if len(urls) > 1 and "@" in v:  # a piece may be part of a user:password holding
                # a comma (RFC 3986 section 3.2.1 allows one): named by its place, never quoted
                raise ValueError(
                    f"{problem}, in URL {n} of the {len(urls)} separated by commas (a comma in "
                    "a user name or password must be written %2C)"
                )
            # a webhook URL is a secret in its path (Slack's): never echoed; others masked
            secret = info.field_name == "notify_webhook_url"
            got = "" if secret else f", got {safe_uri(repr(url))}"
            raise ValueError(f"{problem}{got}")
        bases = [u.rstrip("/") for u in urls]
        keys = [without_password(u) for u in bases]  # the notifier's keys for them
        clash = [(keys.index(k), i) for i, k in enumerate(keys) if bases[keys.index(k)] != bases[i]]
        if clash:  # never quoted: they hold passwords
            raise ValueError(
                f"URLs {clash[0][0] + 1} and {clash[0][1] + 1} of the {len(urls)} separated by "
                "commas differ in their password alone: the outbox could not tell them apart "
                "(give each Alertmanager tenant its own user name, or list it once)"
            )
        return v

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, v: str) -> str:
        """Refuse a URL whose password holds an unencoded ``@`` (:func:`database_url_problem`)
        before anything connects: the driver's error would quote the part after it."""
        problem = database_url_problem(v)
        if problem is not None:
            raise ValueError(problem)  # never quoted (the CLI hides the value: shown_setting)
        return v

    @field_validator("prometheus_headers")
    @classmethod
    def _prometheus_headers(cls, v: str | None, info: ValidationInfo) -> str | None:
        """Refuse headers no request could carry (:func:`parse_prometheus_headers`); blank is
        unset."""
        if v is None or not v.strip():
            return None
        parse_prometheus_headers(
            v, info.data.get("prometheus_bearer_token_file"), info.data.get("prometheus_url")
        )
        return v

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, v: str) -> str:
        """Strip surrounding whitespace (a ConfigMap's trailing newline), refuse what would break
        every link built from it (:func:`public_url_problem`), and drop a path of slashes alone."""
        v = v.strip()
        problem = public_url_problem(v)
        if problem is not None:
            raise ValueError(problem)
        return v.rstrip("/")  # a path of slashes alone (``https://x.example//``) is no path

    @field_validator("trusted_proxies")
    @classmethod
    def _proxy_addresses(cls, v: str) -> str:
        """Normalise to uvicorn's ``forwarded_allow_ips`` form and refuse what it would silently
        never match: uvicorn keeps an entry that is neither an address nor a network as a literal
        compared with the client's address as text, so a typo (``10.0.0.1/8``, host bits set;
        ``10.0.0.0/33``) trusted nobody (``uvicorn/middleware/proxy_headers.py``,
        ``_TrustedHosts``), and ``*`` counts only alone."""
        items = [item.strip() for item in v.split(",") if item.strip()]
        if items == ["*"]:
            return "*"
        for item in items:
            if item == "*":
                raise ValueError("'*' (trust any client) cannot be combined with addresses")
            try:
                if "/" in item:
                    ipaddress.ip_network(item)  # strict, as uvicorn parses it
                else:
                    ipaddress.ip_address(item)
            except ValueError as err:
                raise ValueError(
                    f"{item[:60]!r} is not an IP address or network ({err}); expected e.g. "
                    "'10.0.0.0/8,fd00::/8', or '*'"
                ) from None
        return ",".join(items)

    def forwarded_allow_ips(self) -> str | None:
        """uvicorn's ``forwarded_allow_ips`` (``--forwarded-allow-ips``) for
        ``FLEETMIND_TRUSTED_PROXIES``: ``None`` when unset, leaving uvicorn's own default. Each
        IPv4 entry comes with its IPv4-mapped IPv6 form (``10.0.0.0/8`` and
        ``::ffff:10.0.0.0/104``): on a dual-stack socket (``--host ::`` with ``--workers`` above 1,
        where uvicorn binds the socket itself without ``IPV6_V6ONLY``) an IPv4 proxy connects as
        ``::ffff:10.0.0.5``, which uvicorn's check does not find in an IPv4 network."""
        if not self.trusted_proxies or self.trusted_proxies == "*":
            return self.trusted_proxies or None
        out: list[str] = []
        for item in self.trusted_proxies.split(","):
            out.append(item)
            net = ipaddress.ip_network(item)
            if net.version == 4:
                mapped = f"::ffff:{net.network_address}"
                out.append(mapped if "/" not in item else f"{mapped}/{96 + net.prefixlen}")
        return ",".join(out)

    @field_validator("telemetry_cluster", "scheduler_cluster", mode="before")
    @classmethod
    def _empty_cluster_is_unset(cls, v: object, info: ValidationInfo) -> object:
        """An empty cluster name (a manifest's ``value: ""``) means unset, as for the notification
        URLs: cluster '' would match no GPU, failing every GPU pod at the extender's filter."""
        if isinstance(v, str) and not v.strip():
            return cls.model_fields[info.field_name or ""].default
        return v

    @field_validator("slo_alerts", "ungrouped_alerts")
    @classmethod
    def _alert_list(cls, v: str) -> str:
        """A comma-separated list or a JSON array of alertnames (:func:`alert_names` refuses
        anything else: a JSON array split at its commas matched no alert)."""
        alert_names(v)
        return v

    @field_validator("api_token", "ingest_token", "read_token", "schedule_token", "admin_token")
    @classmethod
    def _no_empty_token(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError("an empty token is not 'auth off': unset the variable instead")
        if v is not None and (v != v.strip() or any(ord(c) < 33 or ord(c) > 126 for c in v)):
            raise ValueError("a token is printable ASCII without spaces")
        return v

    def tokens(self) -> dict[str, frozenset[str]]:
        """Each configured bearer token and its scopes (empty: authentication is off)."""
        out: dict[str, set[str]] = {}
        for token, scopes in (
            (self.ingest_token, {"ingest"}),
            (self.read_token, {"read"}),
            (self.schedule_token, {"schedule"}),
            (self.admin_token, {"admin"}),
            (self.api_token, set(SCOPES)),
        ):
            if token is not None:
                out.setdefault(token, set()).update(scopes)
        return {t: frozenset(s) for t, s in out.items()}

    def prometheus_header_map(self) -> dict[str, str]:
        """The headers of ``FLEETMIND_PROMETHEUS_HEADERS`` (empty when unset), sent with every
        telemetry request (:func:`parse_prometheus_headers`; checked when the settings load)."""
        return parse_prometheus_headers(
            self.prometheus_headers, self.prometheus_bearer_token_file, self.prometheus_url
        )

    def slo_alert_names(self) -> frozenset[str]:
        """The alertnames of ``FLEETMIND_SLO_ALERTS`` (comma-separated or a JSON array:
        :func:`alert_names`)."""
        return alert_names(self.slo_alerts)

    def ungrouped_alert_names(self) -> frozenset[str]:
        """The alertnames of ``FLEETMIND_UNGROUPED_ALERTS`` (comma-separated or a JSON array:
        :func:`alert_names`)."""
        return alert_names(self.ungrouped_alerts)

    def weak_tokens(self) -> list[str]:
        """``FLEETMIND_<NAME>_TOKEN`` of each token that is a placeholder (``change-me...``),
        shorter than :data:`MIN_TOKEN_CHARS` characters, or made of fewer than
        :data:`MIN_TOKEN_DISTINCT_CHARS` different characters (``0000000000000000``,
        ``abababababababab``): ``fleetmind serve`` refuses them."""
        out = []
        for name in ("api", "ingest", "read", "schedule", "admin"):
            token = getattr(self, f"{name}_token")
            if token is None:
                continue
            if (
                token.lower().startswith(PLACEHOLDER_PREFIX)
                or len(token) < MIN_TOKEN_CHARS
                or len(set(token)) < MIN_TOKEN_DISTINCT_CHARS
            ):
                out.append(f"FLEETMIND_{name.upper()}_TOKEN")
        return out

    def tls_problem(self) -> str | None:
        """Why the TLS settings cannot work, or None: half set, no readable file, a file that is
        not PEM, a certificate and key that do not match or are swapped, a key encrypted with a
        passphrase (the server would stop to prompt for it on a terminal), a client CA bundle
        without a certificate. Found by loading them as the server does (an ``ssl.SSLContext``)."""
        if bool(self.tls_cert) != bool(self.tls_key):
            return "set both FLEETMIND_TLS_CERT and FLEETMIND_TLS_KEY, or neither"
        if self.scheduler_client_ca and not self.tls_cert:
            return "FLEETMIND_SCHEDULER_CLIENT_CA needs FLEETMIND_TLS_CERT and FLEETMIND_TLS_KEY"
        if self.tls_cert and self.tls_key:
            problem = cert_chain_problem(self.tls_cert, self.tls_key)
            if problem:
                return problem
        if self.scheduler_client_ca:
            return ca_bundle_problem("FLEETMIND_SCHEDULER_CLIENT_CA", self.scheduler_client_ca)
        return None


class _PassphraseNeeded(Exception):
    """Raised by the password callback of :func:`cert_chain_problem`: the key is encrypted."""


def _refuse_passphrase() -> str:
    raise _PassphraseNeeded  # OpenSSL would otherwise prompt on the terminal


def _unreadable(var: str, path: str) -> str | None:
    import os

    if not os.path.isfile(path) or not os.access(path, os.R_OK):
        return f"{var}={path!r}: no readable file there"
    return None


def ca_bundle_problem(var: str, path: str) -> str | None:
    """Why ``path`` cannot serve as a PEM bundle of CA certificates (the variable ``var``), found
    by loading it into an ``ssl.SSLContext`` (``load_verify_locations``) as the server or client
    would; None when it can."""
    import ssl

    problem = _unreadable(var, path)
    if problem:
        return problem
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=path)
    except ssl.SSLError:
        return f"{var}={path!r}: no PEM certificate in it"
    except OSError as err:
        return f"{var}={path!r}: {err.strerror or err}"
    return None


def cert_chain_problem(cert: str, key: str) -> str | None:
    """Why ``FLEETMIND_TLS_CERT`` and ``FLEETMIND_TLS_KEY`` cannot serve HTTPS (None: they can),
    found by loading them into an ``ssl.SSLContext`` (``load_cert_chain``) with a password
    callback that refuses, so an encrypted key is reported instead of prompted for."""
    import ssl

    problem = _unreadable("FLEETMIND_TLS_CERT", cert) or _unreadable("FLEETMIND_TLS_KEY", key)
    if problem:
        return problem
    problem = ca_bundle_problem("FLEETMIND_TLS_CERT", cert)  # the certificates of the chain
    if problem:
        with open(cert, "rb") as fh:
            swapped = b"PRIVATE KEY-----" in fh.read(1 << 16)
        return problem + (" (a private key: swapped with FLEETMIND_TLS_KEY?)" if swapped else "")
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(
            cert, key, password=_refuse_passphrase
        )
    except _PassphraseNeeded:
        return (
            f"FLEETMIND_TLS_KEY={key!r}: the private key is encrypted, and the server cannot ask "
            "for its passphrase: give it the key unencrypted (openssl pkey -in KEY -out NEW_KEY)"
        )
    except ssl.SSLError as err:
        # A key that does not match the certificate: another key of its type
        # (KEY_VALUES_MISMATCH), or one of another type, e.g. an EC key for an RSA certificate
        # (NO_CERTIFICATE_ASSIGNED: the key goes to the slot of its type, which holds no
        # certificate, OpenSSL ssl/ssl_lib.c SSL_CTX_check_private_key; X509_check_private_key's
        # KEY_TYPE_MISMATCH where it compares them). The certificate itself was checked above.
        mismatch = ("KEY_VALUES_MISMATCH", "KEY_TYPE_MISMATCH", "NO_CERTIFICATE_ASSIGNED")
        if any(reason in str(err) for reason in mismatch):
            return (
                f"FLEETMIND_TLS_KEY={key!r} is not the private key of FLEETMIND_TLS_CERT={cert!r}"
            )
        return f"FLEETMIND_TLS_KEY={key!r}: no PEM private key in it"
    except OSError as err:
        return f"FLEETMIND_TLS_KEY={key!r}: {err.strerror or err}"
    return None


SCOPES = ("read", "ingest", "schedule", "admin")
"""The token scopes: ``read`` (GET routes, RCA, placements without ``reserve``, the API docs),
``ingest`` (the Alertmanager webhook), ``schedule`` (the kube-scheduler extender routes and
placements with ``reserve=true``: the routes that hold capacity), ``admin`` (replace the graph,
reload models, and routes that change state for everyone)."""
PLACEHOLDER_PREFIX = "change-me"
"""Tokens starting with this (any case) are the shipped examples' placeholders."""
MIN_TOKEN_CHARS = 16
"""The shortest token ``fleetmind serve`` accepts (``openssl rand -hex 32`` gives 64)."""
MIN_TOKEN_DISTINCT_CHARS = 5
"""The fewest different characters in a token ``fleetmind serve`` accepts: a repeated character
or pair passes the length check and falls to the first guesses (16 random hex characters have
fewer than 5 different ones with a probability below 1e-6)."""


OTHER_VARIABLES = frozenset(
    {
        "FLEETMIND_WORKERS",  # fleetmind serve --workers (cli/serve.py)
        "FLEETMIND_SHARED_DATA",  # data/paths.py, cli/data.py
        "FLEETMIND_CACHE_DIR",  # data/openb_synthetic.py
        "FLEETMIND_OPENB_FALLBACK",  # data/paths.py OPENB_FALLBACK_ENV
        "FLEETMIND_RESULTS_DIR",  # notebooks/execute.py
        "FLEETMIND_PPO_MODEL",  # notebooks/placement_evaluation.ipynb
        "FLEETMIND_NB_QUICK",  # the notebooks
        "FLEETMIND_BASE_IMAGE",  # deploy/container/build.sh
        "FLEETMIND_FAULT_FIGURES",  # tests/test_serving_faults.py
        "FLEETMIND_SCREENSHOT_DIR",  # tests/test_ui_browser.py
        "FLEETMIND_FUZZ_CASES",  # tests/test_serving_fuzz.py
        "FLEETMIND_FUZZ_EXAMPLES",  # tests/test_serving_schemathesis_pg.py
        "FLEETMIND_PROBE_OWN_SCARCITY",  # a benchmark probe's child process
    }
)
"""``FLEETMIND_*`` variables the project reads that are no :class:`Settings` field."""

# Kubernetes gives every pod variables for each Service (enableServiceLinks, on by default): a
# Service named fleetmind (deploy/kubernetes/base/service.yaml) gives FLEETMIND_SERVICE_HOST,
# FLEETMIND_SERVICE_PORT(_<PORT NAME>) and Docker-link style FLEETMIND_PORT and
# FLEETMIND_PORT_8000_TCP(_PROTO|_PORT|_ADDR) (kubernetes.io/docs/concepts/services-networking/
# service/#environment-variables; kubernetes/kubernetes pkg/kubelet/envvars/envvars.go
# FromServices, makeLinkVariables); a Service named fleetmind-<x> gives FLEETMIND_<X>_SERVICE_HOST
# and so on. Each name is paired with the shape of the value the kubelet writes, so that a made-up
# FLEETMIND_BIND_PORT=8000 is still warned about.
_SERVICE_LINKS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(r"FLEETMIND(?:_[A-Z0-9_]+)?_" + name, re.ASCII | re.IGNORECASE), kind)
    for name, kind in (
        (r"SERVICE_HOST", "ip"),  # the ClusterIP
        (r"SERVICE_PORT(?:_[A-Z0-9_]+)?", "number"),  # the first port; each named port
        (r"PORT(?:_[0-9]+_(?:TCP|UDP|SCTP))?", "url"),  # tcp://10.96.0.12:8000
        (r"PORT_[0-9]+_(?:TCP|UDP|SCTP)_PROTO", "protocol"),  # tcp
        (r"PORT_[0-9]+_(?:TCP|UDP|SCTP)_PORT", "number"),  # 8000
        (r"PORT_[0-9]+_(?:TCP|UDP|SCTP)_ADDR", "ip"),  # the ClusterIP
    )
)
"""The names of the Service link variables (any case), each with the kind of value the kubelet
writes (:func:`_link_value_fits`)."""


def _link_value_fits(kind: str, value: str) -> bool:
    """Whether ``value`` has the shape the kubelet writes for a Service link of ``kind``: ``ip``
    an IPv4 or IPv6 address, ``number`` a port (digits), ``url`` ``<protocol>://host:port``,
    ``protocol`` ``tcp``, ``udp`` or ``sctp``."""
    if kind == "ip":
        try:
            ipaddress.ip_address(value)
        except ValueError:
            return False
        return True
    if kind == "number":
        return re.fullmatch(r"[0-9]+", value) is not None
    if kind == "url":
        return re.match(r"(?:tcp|udp|sctp)://", value) is not None
    return value in ("tcp", "udp", "sctp")


def is_service_link(name: str, value: str) -> bool:
    """Whether the variable ``name=value`` is one the kubelet adds for a Kubernetes Service (see
    :data:`_SERVICE_LINKS`): a name of that form whose value has the shape the kubelet writes
    (``FLEETMIND_PORT=tcp://10.96.0.12:8000`` is one, ``FLEETMIND_PORT=8000`` is not)."""
    return any(
        pattern.fullmatch(name) and _link_value_fits(kind, value)
        for pattern, kind in _SERVICE_LINKS
    )


def unknown_variable_warnings(environ: Mapping[str, str] | None = None) -> list[str]:
    """One line per ``FLEETMIND_*`` variable of ``environ`` (``os.environ`` when ``None``; names
    compared in lower case, as pydantic-settings compares) that the service ignores: no
    :class:`Settings` field, none of :data:`OTHER_VARIABLES` and no Kubernetes Service link
    (:func:`is_service_link`), each with the closest known name when one is close
    (``FLEETMIND_API_TOKENS``: did you mean ``FLEETMIND_API_TOKEN``?). Values are never shown (a
    misspelled token is still a secret)."""
    import difflib
    import os

    env = os.environ if environ is None else environ
    known = {f"fleetmind_{f}".lower() for f in Settings.model_fields}
    known |= {v.lower() for v in OTHER_VARIABLES}
    out = []
    for key in sorted(env):
        name = key.lower()
        if not name.startswith("fleetmind_") or name in known or is_service_link(key, env[key]):
            continue
        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.8)
        hint = f" (did you mean {close[0].upper()}?)" if close else ""
        out.append(f"{key} is not a FleetMind setting and is ignored{hint}")
    return out


@lru_cache
def get_settings() -> Settings:
    """Return the process-wide settings (read once from the environment)."""
    return Settings()
