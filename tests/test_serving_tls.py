"""HTTPS and kube-scheduler's client certificate, over real TLS.

kube-scheduler's HTTP extender sends no bearer token; with ``enableHTTPS: true`` and a ``tlsConfig``
(``certFile``, ``keyFile``, ``caFile``; ``k8s.io/kube-scheduler/config/v1`` ``ExtenderTLSConfig``)
it presents a client certificate and verifies the extender's. The service runs here on uvicorn
with the options ``fleetmind serve`` gives it (:func:`fleetmind.serving.tls.uvicorn_options`); certificates
are made with ``cryptography``: a server CA, the scheduler's client CA, and a stranger's CA.
The ``ExtenderArgs`` bodies are shaped as kube-scheduler sends them with ``nodeCacheCapable: true``
(``Pod``, ``NodeNames``; ``staging/src/k8s.io/kube-scheduler/extender/v1/types.go``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from serving_helpers import free_port

from fleetmind.serving.app import create_app
from fleetmind.serving.settings import Settings
from fleetmind.serving.tls import uvicorn_options

READ = "read-token-for-the-tls-test"
SCHEDULE = "schedule-token-for-the-tls-test"


def _key() -> Any:
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _cert(subject: str, key: Any, issuer: tuple[str, Any] | None, *, ca: bool,
          server: bool = False) -> Any:  # fmt: skip
    """A certificate for ``key`` named CN=``subject``, signed by ``issuer`` (name, key) or itself."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    iname = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer[0])]) if issuer else name
    now = dt.datetime.now(dt.UTC)
    b = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(iname)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        b = b.add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
    else:
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        b = b.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if server:
        b = b.add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                ]
            ),
            critical=False,
        )
    return b.sign(issuer[1] if issuer else key, hashes.SHA256())


def _write(path: Path, cert: Any, key: Any | None = None) -> None:
    from cryptography.hazmat.primitives import serialization

    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    if key is not None:
        path.with_suffix(".key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )


def make_pki(d: Path) -> dict[str, Path]:
    """Server CA + server cert, scheduler CA + kube-scheduler's client cert, a stranger's pair."""
    out = {}
    for ca_name in ("server-ca", "scheduler-ca", "stranger-ca"):
        k = _key()
        c = _cert(ca_name, k, None, ca=True)
        _write(d / f"{ca_name}.crt", c, k)
        out[ca_name] = (ca_name, k)
    for leaf, ca, server in (("fleetmind", "server-ca", True), ("kube-scheduler", "scheduler-ca", False),
                             ("stranger", "stranger-ca", False)):  # fmt: skip
        k = _key()
        _write(d / f"{leaf}.crt", _cert(leaf, k, out[ca], ca=False, server=server), k)
    return {p.stem + p.suffix: p for p in d.iterdir()}


def shipped_pki(d: Path) -> dict[str, Path]:
    """The certificates of the shipped how-to (``deploy/kubernetes/tls/make-certs.sh``, openssl),
    with the server certificate for 127.0.0.1; the stranger's pair from :func:`make_pki`."""
    import shutil
    import subprocess

    from fleetmind.data.paths import REPO_ROOT

    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    script = REPO_ROOT / "deploy" / "kubernetes" / "tls" / "make-certs.sh"
    out = subprocess.run(["bash", str(script), str(d / "shipped"), "127.0.0.1"],
                         capture_output=True, text=True)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "create secret generic fleetmind-tls" in out.stdout
    (d / "own").mkdir()
    pki = make_pki(d / "own")
    s = d / "shipped"
    pki.update({
        "server-ca.crt": s / "fleetmind-ca.crt",
        "fleetmind.crt": s / "fleetmind.crt",
        "fleetmind.key": s / "fleetmind.key",
        "scheduler-ca.crt": s / "scheduler-ca.crt",
        "kube-scheduler.crt": s / "kube-scheduler.crt",
        "kube-scheduler.key": s / "kube-scheduler.key",
    })  # fmt: skip
    return pki


@pytest.fixture(scope="module", params=["cryptography", "make-certs.sh"])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, dict[str, Path]]]:
    d = tmp_path_factory.mktemp("pki")
    pki = make_pki(d) if request.param == "cryptography" else shipped_pki(d)
    settings = Settings(
        database_url=f"sqlite:///{d}/tls.db",
        rca_model="baseline:upstream-coverage",
        placement_model="heuristic:builtin-bestfit",
        incident_worker=False,
        read_token=READ,
        schedule_token=SCHEDULE,
        tls_cert=str(pki["fleetmind.crt"]),
        tls_key=str(pki["fleetmind.key"]),
        scheduler_client_ca=str(pki["scheduler-ca.crt"]),
    )
    assert settings.tls_problem() is None and not settings.weak_tokens()
    with serve_tls(settings) as url:
        yield url, pki


@contextlib.contextmanager
def serve_tls(settings: Settings) -> Iterator[str]:
    """The app on ``settings`` served by uvicorn with their TLS options
    (:func:`fleetmind.serving.tls.uvicorn_options`) in a thread on a free port; yields its
    ``https://`` URL once started, stops it after."""
    import uvicorn

    port = free_port()
    config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning",
                            **uvicorn_options(settings))  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 60
    while not server.started and time.time() < deadline:
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    try:
        yield f"https://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def tls_client(pki: dict[str, Path], who: str | None) -> httpx.Client:
    """A client trusting ``pki``'s server CA, presenting ``who``'s certificate (none if None)."""
    import ssl

    ctx = ssl.create_default_context(cafile=str(pki["server-ca.crt"]))
    if who is not None:
        ctx.load_cert_chain(str(pki[f"{who}.crt"]), str(pki[f"{who}.key"]))
    return httpx.Client(verify=ctx, timeout=10.0)


def _args(url: str, pki: dict[str, Path]) -> dict[str, Any]:
    with tls_client(pki, None) as c:
        fleet = c.get(url + "/api/v1/fleet", headers={"Authorization": f"Bearer {READ}"})
    assert fleet.status_code == 200, fleet.text
    names = [n["name"] for n in fleet.json()["nodes"] if n["gpus"]][:4]
    pod = {
        "metadata": {"name": "train-0", "namespace": "ml", "uid": "0b1c"},
        "spec": {
            "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
        },
    }
    return {"Pod": pod, "Nodes": None, "NodeNames": names}


def test_the_scheduler_certificate_opens_filter_and_prioritize(served: Any) -> None:
    url, pki = served
    args = _args(url, pki)
    with tls_client(pki, "kube-scheduler") as c:
        r = c.post(url + "/api/v1/scheduler/filter", json=args)
        assert r.status_code == 200, r.text
        assert r.json()["NodeNames"] and r.json()["Error"] == ""
        r = c.post(url + "/api/v1/scheduler/prioritize", json=args)
        assert r.status_code == 200, r.text
        assert max(h["Score"] for h in r.json()) == 10
        # the certificate opens the extender routes only
        assert c.get(url + "/api/v1/fleet").status_code == 401
        assert c.post(url + "/api/v1/placements", json={"num_gpu": 1}).status_code == 401


def test_without_the_certificate_the_extender_needs_a_schedule_token(served: Any) -> None:
    url, pki = served
    args = _args(url, pki)
    with tls_client(pki, None) as c:
        assert c.post(url + "/api/v1/scheduler/filter", json=args).status_code == 401
        read = {"Authorization": f"Bearer {READ}"}
        assert c.post(url + "/api/v1/scheduler/filter", json=args, headers=read).status_code == 403
        sched = {"Authorization": f"Bearer {SCHEDULE}"}
        assert c.post(url + "/api/v1/scheduler/filter", json=args, headers=sched).status_code == 200


def test_a_stranger_certificate_is_refused_at_the_handshake(served: Any) -> None:
    url, pki = served
    with tls_client(pki, "stranger") as c, pytest.raises(httpx.TransportError):
        c.post(url + "/api/v1/scheduler/filter", json={"Pod": {}, "NodeNames": []})


def test_plain_http_is_not_served(served: Any) -> None:
    url, _ = served
    with pytest.raises(httpx.TransportError):
        httpx.get(url.replace("https://", "http://") + "/healthz", timeout=5.0)


def test_cookies_are_secure_when_the_service_holds_the_certificate(served: Any) -> None:
    """With ``FLEETMIND_TLS_CERT`` set and ``FLEETMIND_PUBLIC_URL`` at its ``http://`` default, the
    UI's cookies still carry ``Secure`` (RFC 6265 section 4.1.2.5; OWASP Session Management Cheat
    Sheet): without it a browser sends the session to the same host over plain HTTP."""
    url, pki = served
    with tls_client(pki, None) as c:
        form = c.get(url + "/ui/login")
        csrf = c.cookies.get("fm_csrf")
        done = c.post(
            url + "/ui/login",
            data={"token": READ, "csrf": csrf, "next": "/ui/"},
            headers={"Origin": url},
            follow_redirects=False,
        )
    assert form.status_code == 200 and done.status_code == 303, done.text
    for resp, name in ((form, "fm_csrf"), (done, "fm_session")):
        (cookie,) = [h for h in resp.headers.get_list("set-cookie") if h.startswith(name + "=")]
        assert "secure" in cookie.lower().split("; "), cookie
