"""``fleetmind serve`` refuses, with one line naming the variable (exit 2), configuration files it
could not use: TLS certificate, key and client CA that are not PEM, swapped, mismatched or
encrypted (uvicorn's ``ssl.SSLContext.load_cert_chain`` gave a traceback, and OpenSSL prompts for
the passphrase of an encrypted key on a terminal: Python docs, ``ssl``, ``load_cert_chain``'s
``password``), a Prometheus CA bundle that is not PEM (the telemetry source only warned), and a
SQLite file or folder that cannot be written (the service reported ready and answered 503 to every
write). Also: an empty ``FLEETMIND_RCA_MODEL``/``FLEETMIND_PLACEMENT_MODEL`` (or ``--rca-model ""``)
means unset, and a refused pair of notification scores names both variables and where each came
from. uvicorn is replaced by a recorder.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
from pathlib import Path
from typing import Any

import pytest
from serving_helpers import free_port

from fleetmind.cli import main
from fleetmind.cli import serve as cli_serve
from fleetmind.serving.settings import Settings, get_settings

PORT = free_port()
"""A port to check and not serve on (uvicorn is replaced)."""


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A database under tmp_path, no tokens, one worker, and the test process's SIGHUP back."""
    import signal

    monkeypatch.setenv("FLEETMIND_DATABASE_URL", f"sqlite:///{tmp_path / 'serve.db'}")
    for var in ("API", "READ", "INGEST", "SCHEDULE", "ADMIN"):
        monkeypatch.delenv(f"FLEETMIND_{var}_TOKEN", raising=False)
    for var in (
        "WORKERS",
        "RCA_MODEL",
        "PLACEMENT_MODEL",
        "TLS_CERT",
        "TLS_KEY",
        "SCHEDULER_CLIENT_CA",
        "TELEMETRY",
        "PROMETHEUS_CA_FILE",
        "NOTIFY_CRITICAL_SCORE",
        "NOTIFY_WARNING_SCORE",
    ):
        monkeypatch.delenv(f"FLEETMIND_{var}", raising=False)
    before = signal.getsignal(signal.SIGHUP) if hasattr(signal, "SIGHUP") else None
    yield
    if before is not None:
        signal.signal(signal.SIGHUP, before)
    get_settings.cache_clear()


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Records each uvicorn start (its keyword arguments) instead of serving."""
    import uvicorn

    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: seen.append(kw))
    return seen


def serve_args(**kw: Any) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli_serve.register(parser.add_subparsers(), "serve", "serve")
    ns = parser.parse_args(["serve"])
    for k, v in kw.items():
        setattr(ns, k, v)
    return ns


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1, err
    return err[0]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A self-signed certificate and its key, another key, the key encrypted, a text file and a
    folder (``cryptography``, deterministic apart from the key material)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    d = tmp_path_factory.mktemp("pki")
    key, other = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fleetmind")])
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem, pkcs8 = serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8
    plain = serialization.NoEncryption()
    files = {
        "cert": cert.public_bytes(pem),
        "key": key.private_bytes(pem, pkcs8, plain),
        "other_key": other.private_bytes(pem, pkcs8, plain),
        "encrypted_key": key.private_bytes(
            pem, pkcs8, serialization.BestAvailableEncryption(b"secret")
        ),
        "text": b"not a certificate\n",
    }
    out = {}
    for label, data in files.items():
        out[label] = d / f"{label}.pem"
        out[label].write_bytes(data)
    out["folder"] = d / "folder"
    out["folder"].mkdir()
    return out


@pytest.mark.parametrize(
    ("cert", "key", "client_ca", "variable", "says"),
    [
        ("key", "cert", None, "FLEETMIND_TLS_CERT", "swapped with FLEETMIND_TLS_KEY"),
        ("text", "key", None, "FLEETMIND_TLS_CERT", "no PEM certificate"),
        ("cert", "text", None, "FLEETMIND_TLS_KEY", "no PEM private key"),
        ("folder", "key", None, "FLEETMIND_TLS_CERT", "no readable file"),
        ("cert", "folder", None, "FLEETMIND_TLS_KEY", "no readable file"),
        ("cert", "encrypted_key", None, "FLEETMIND_TLS_KEY", "encrypted"),
        ("cert", "other_key", None, "FLEETMIND_TLS_KEY", "not the private key"),
        ("cert", "key", "text", "FLEETMIND_SCHEDULER_CLIENT_CA", "no PEM certificate"),
        ("cert", "key", "key", "FLEETMIND_SCHEDULER_CLIENT_CA", "no PEM certificate"),
    ],
)
def test_unusable_tls_files_are_one_line_exit_2_before_the_database(
    cert: str,
    key: str,
    client_ca: str | None,
    variable: str,
    says: str,
    pki: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    started: list[dict[str, Any]],
) -> None:
    """uvicorn's traceback and exit 1 before; an encrypted key stopped to prompt on a TTY."""
    monkeypatch.setenv("FLEETMIND_TLS_CERT", str(pki[cert]))
    monkeypatch.setenv("FLEETMIND_TLS_KEY", str(pki[key]))
    if client_ca:
        monkeypatch.setenv("FLEETMIND_SCHEDULER_CLIENT_CA", str(pki[client_ca]))
    assert main(["serve", "--port", str(PORT)]) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"fleetmind: error: {variable}=") and says in line, line
    assert started == []
    assert not (tmp_path / "serve.db").exists()  # refused before the schema upgrade


def test_good_tls_files_start(
    pki: dict[str, Path], monkeypatch: pytest.MonkeyPatch, started: list[dict[str, Any]]
) -> None:
    monkeypatch.setenv("FLEETMIND_TLS_CERT", str(pki["cert"]))
    monkeypatch.setenv("FLEETMIND_TLS_KEY", str(pki["key"]))
    monkeypatch.setenv("FLEETMIND_SCHEDULER_CLIENT_CA", str(pki["cert"]))
    assert cli_serve.run(serve_args(port=PORT)) == 0
    assert started[0]["ssl_certfile"] == str(pki["cert"])


@pytest.fixture(scope="module")
def rsa_pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A self-signed RSA certificate and its key, made by the ``openssl`` command."""
    import shutil
    import subprocess

    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no openssl command")
    d = tmp_path_factory.mktemp("rsa")
    out = {"cert": d / "rsa_cert.pem", "key": d / "rsa_key.pem"}
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=fleetmind"]
        + ["-days", "1", "-keyout", str(out["key"]), "-out", str(out["cert"])],
        check=True,
        capture_output=True,
    )
    return out


@pytest.mark.parametrize(("cert_type", "key_type"), [("rsa", "ec"), ("ec", "rsa")])
def test_a_key_of_another_type_than_the_certificate_is_named_as_such(
    cert_type: str,
    key_type: str,
    pki: dict[str, Path],
    rsa_pki: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    started: list[dict[str, Any]],
) -> None:
    """An RSA certificate with an EC key (or the reverse) was reported as "no PEM private key in
    it": OpenSSL refuses it with ``NO_CERTIFICATE_ASSIGNED`` (the key goes to the slot of its
    type, which holds no certificate: ``ssl/ssl_lib.c``, ``SSL_CTX_check_private_key``), not the
    ``KEY_VALUES_MISMATCH`` of another key of the same type."""
    files = {"ec": pki, "rsa": rsa_pki}
    cert, key = files[cert_type]["cert"], files[key_type]["key"]
    monkeypatch.setenv("FLEETMIND_TLS_CERT", str(cert))
    monkeypatch.setenv("FLEETMIND_TLS_KEY", str(key))
    assert main(["serve", "--port", str(PORT)]) == 2
    assert one_error_line(capsys) == (
        f"fleetmind: error: FLEETMIND_TLS_KEY={str(key)!r} is not the private key of "
        f"FLEETMIND_TLS_CERT={str(cert)!r}"
    )
    assert started == []
    monkeypatch.setenv("FLEETMIND_TLS_KEY", str(files[cert_type]["key"]))  # its own key
    assert main(["serve", "--port", str(PORT)]) == 0


@pytest.mark.parametrize("ca_file", ["text", "key", "folder", "missing"])
def test_a_prometheus_ca_file_that_is_not_pem_is_refused(
    ca_file: str,
    pki: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    started: list[dict[str, Any]],
) -> None:
    """docs/serving/settings.md calls it a configuration error; the service only warned at start
    (the telemetry source's ConfigError is caught there) and then had no telemetry."""
    path = pki.get(ca_file, tmp_path / "missing.pem")
    monkeypatch.setenv("FLEETMIND_TELEMETRY", "prometheus")
    monkeypatch.setenv("FLEETMIND_PROMETHEUS_CA_FILE", str(path))
    assert main(["serve", "--port", str(PORT)]) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"fleetmind: error: FLEETMIND_PROMETHEUS_CA_FILE={str(path)!r}: "), line
    assert started == []
    monkeypatch.setenv("FLEETMIND_PROMETHEUS_CA_FILE", str(pki["cert"]))
    assert cli_serve.run(serve_args(port=PORT)) == 0
    monkeypatch.setenv("FLEETMIND_TELEMETRY", "sim")  # not used by the sim source: not checked
    monkeypatch.setenv("FLEETMIND_PROMETHEUS_CA_FILE", str(path))
    assert cli_serve.run(serve_args(port=PORT)) == 0
    assert len(started) == 2


@pytest.mark.parametrize("what", ["file", "folder"])
def test_a_sqlite_file_or_folder_that_cannot_be_written_is_refused(
    what: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    started: list[dict[str, Any]],
) -> None:
    """/readyz said ready and every webhook answered 503. ``access(2)`` is what refuses a 0444 file
    or a read-only mount to a service user; it is stubbed for the one path, as the tests may run as
    root (whom it lets write anything outside a read-only mount)."""
    db = tmp_path / "serve.db"
    assert cli_serve.run(serve_args(port=PORT)) == 0  # the file exists, at the newest schema
    capsys.readouterr()
    denied = str(db) if what == "file" else str(tmp_path)
    real = os.access

    def access(path: Any, mode: int, **kw: Any) -> bool:
        return False if str(path) == denied and mode & os.W_OK else real(path, mode, **kw)

    monkeypatch.setattr(os, "access", access)
    assert main(["serve", "--port", str(PORT)]) == 2
    line = one_error_line(capsys)
    assert "not writable" in line and "FLEETMIND_DATABASE_URL" in line and str(db) in line, line
    assert len(started) == 1


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_model_reference_means_the_released_artifact(
    value: str, monkeypatch: pytest.MonkeyPatch, started: list[dict[str, Any]]
) -> None:
    """As a path, "" is the working directory: a recursive search there served whatever model it
    found (placement: BestFit instead of the released policy), reported as the released one."""
    monkeypatch.setenv("FLEETMIND_RCA_MODEL", value)
    monkeypatch.setenv("FLEETMIND_PLACEMENT_MODEL", value)
    settings = Settings()
    assert (settings.rca_model, settings.placement_model) == (None, None)
    monkeypatch.delenv("FLEETMIND_RCA_MODEL")
    monkeypatch.delenv("FLEETMIND_PLACEMENT_MODEL")
    assert cli_serve.run(serve_args(port=PORT, rca_model=value, placement_model=value)) == 0
    assert (Settings().rca_model, Settings().placement_model) == (None, None)
    assert Settings(rca_model="baseline:deepest").rca_model == "baseline:deepest"


def test_a_refused_score_pair_names_both_variables_and_their_source(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], started: list[Any]
) -> None:
    """Only the critical score was set; the line blamed the warning score's default alone."""
    monkeypatch.setenv("FLEETMIND_NOTIFY_CRITICAL_SCORE", "0.2")
    assert main(["serve", "--port", str(PORT)]) == 2
    line = one_error_line(capsys)
    assert "FLEETMIND_NOTIFY_WARNING_SCORE=0.3 (default)" in line, line
    assert "FLEETMIND_NOTIFY_CRITICAL_SCORE=0.2 (from the environment)" in line, line
    monkeypatch.setenv("FLEETMIND_NOTIFY_WARNING_SCORE", "0.5")
    assert main(["serve", "--port", str(PORT)]) == 2
    line = one_error_line(capsys)
    assert "FLEETMIND_NOTIFY_WARNING_SCORE='0.5': " in line, line
    assert "FLEETMIND_NOTIFY_CRITICAL_SCORE=0.2 (from the environment)" in line, line
    assert started == []


def test_no_setting_describes_an_unset_value_it_cannot_have() -> None:
    """FLEETMIND_GC_GEN0_THRESHOLD and FLEETMIND_TORCH_THREADS said "(unset: Python's 700)" and
    "(unset: torch's default)", but default to 100000 and 1 and refuse an empty value."""
    for name, field in Settings.model_fields.items():
        if field.default is not None:
            assert "unset" not in (field.description or ""), name
