"""``fleetmind graph build`` reads kubeconfig files as kubectl does, and says what went wrong.

The references are client-go (``tools/clientcmd/loader.go``: merging and relative paths;
``transport/token_source.go``: a token file's whitespace), the kubernetes.io page "Organizing
Cluster Access Using kubeconfig Files" (merging rules), the client authentication page (``exec``
plugins) and Go's ``golang.org/x/net/http/httpproxy`` (no proxy for a loopback host). The kubernetes
Python client (``kubernetes/config/kube_config.py``) differs on each point tested here.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from fleetmind.cli import main

pytest.importorskip("kubernetes")

API_PATHS = {
    "/api/v1/nodes": "nodes",
    "/api/v1/pods": "pods",
    "/api/v1/services": "services",
    "/apis/discovery.k8s.io/v1/endpointslices": "endpointslices",
}


class FakeApi:
    """A fake API server (HTTP on 127.0.0.1, a free port): ``nodes`` Nodes named
    ``<prefix>-<i>``, no pods, services or slices; ``token``: the bearer token it requires (401
    otherwise); ``pages``: replacements for the nodes list answer, the ``continue`` token its
    index. Records each request's path and ``Authorization`` header."""

    def __init__(self, prefix: str, nodes: int = 1, token: str | None = None) -> None:
        self.prefix, self.nodes, self.token = prefix, nodes, token
        self.pages: list[Any] = []
        self.seen: list[tuple[str, str | None]] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                url = urlparse(self.path)
                auth = self.headers.get("Authorization")
                api.seen.append((url.path, auth))
                page = int((parse_qs(url.query).get("continue") or ["0"])[0])
                code, body = api.respond(url.path, auth, page)
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def respond(self, path: str, auth: str | None, page: int = 0) -> tuple[int, Any]:
        if self.token is not None and auth != f"Bearer {self.token}":
            return 401, {"kind": "Status", "status": "Failure", "message": "Unauthorized"}
        what = API_PATHS.get(path)
        if what is None:
            return 404, {"kind": "Status", "status": "Failure", "message": "not found"}
        if what == "nodes" and self.pages:
            return 200, self.pages[page]
        items = []
        if what == "nodes":
            items = [
                {"metadata": {"name": f"{self.prefix}-{i}"}, "status": {"allocatable": {}}}
                for i in range(self.nodes)
            ]
        return 200, {"kind": "List", "apiVersion": "v1", "metadata": {}, "items": items}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_api() -> Iterator[Callable[..., FakeApi]]:
    servers: list[FakeApi] = []

    def start(prefix: str = "n", nodes: int = 1, token: str | None = None) -> FakeApi:
        servers.append(FakeApi(prefix, nodes, token))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No kubeconfig, proxy or home of the machine running the tests."""
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ("KUBECONFIG", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def _kubeconfig(
    path: Path,
    *,
    context: str | None = None,
    clusters: dict[str, dict] | None = None,
    users: dict[str, dict] | None = None,
    contexts: dict[str, tuple[str, str]] | None = None,
) -> Path:
    """Write a kubeconfig (JSON is YAML) with the named clusters, users and contexts."""
    doc: dict[str, Any] = {"apiVersion": "v1", "kind": "Config"}
    if context is not None:
        doc["current-context"] = context
    if clusters:
        doc["clusters"] = [{"name": k, "cluster": v} for k, v in clusters.items()]
    if users:
        doc["users"] = [{"name": k, "user": v} for k, v in users.items()]
    if contexts:
        doc["contexts"] = [
            {"name": k, "context": {"cluster": c, "user": u}} for k, (c, u) in contexts.items()
        ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def _simple(path: Path, api: FakeApi, user: dict, name: str = "c") -> Path:
    return _kubeconfig(
        path,
        context=name,
        clusters={name: {"server": api.url}},
        users={name: user},
        contexts={name: (name, name)},
    )


def _build(tmp_path: Path, *extra: str) -> int:
    return main(["graph", "build", *extra, "--out", str(tmp_path / "g.json")])


def _hosts(tmp_path: Path) -> list[str]:
    doc = json.loads((tmp_path / "g.json").read_text())
    return sorted(n["id"] for n in doc["nodes"] if n["kind"] == "host")


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.startswith("fleetmind: error: ") and err.count("\n") == 1, err
    return err


def _script(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


# -- a token file that ends in a newline; secrets never printed -------------------------------------


def test_token_file_newline_is_trimmed_on_every_request(
    fake_api: Callable[..., FakeApi], tmp_path: Path
) -> None:
    """client-go trims a token file (``transport/token_source.go``, ``fileTokenSource.Token``:
    ``strings.TrimSpace``); ``echo tok > f`` writes ``tok\\n``, and the Python client sent it,
    which urllib3 refused with a message quoting the token."""
    api = fake_api(token="sekrit-token")
    (tmp_path / "tok").write_text("sekrit-token\n")
    kc = _simple(tmp_path / "kc.yaml", api, {"tokenFile": str(tmp_path / "tok")})
    assert _build(tmp_path, "--kubeconfig", str(kc)) == 0
    assert {p for p, _ in api.seen} == set(API_PATHS)  # every list, each with the trimmed token
    assert {a for _, a in api.seen} == {"Bearer sekrit-token"}


def test_messages_never_show_a_bearer_token_or_basic_credentials() -> None:
    from fleetmind.cli.graph import _connection_text
    from fleetmind.cli.kubeconfig import mask_secrets

    text = _connection_text(ValueError("Invalid header value b'Bearer sekrit-token\\n'"), 30)
    assert "sekrit" not in text and "Bearer ***" in text
    assert mask_secrets("Authorization: Basic dTpwYXNz") == "Authorization: Basic ***"
    assert "pw" not in mask_secrets("ProxyError: http://u:pw@proxy:3128 refused")


# -- several files in KUBECONFIG: the first current-context wins ----------------------------------


def test_first_file_to_set_current_context_wins(
    fake_api: Callable[..., FakeApi], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kubernetes.io, "Organizing Cluster Access Using kubeconfig Files", merging rules: "the
    first file to set a particular map key wins" (``current-context`` included); the Python client
    let the later file's ``current-context`` win, and the build read the other cluster."""
    prod, dev = fake_api("prod", nodes=3), fake_api("dev", nodes=1)
    a = _simple(tmp_path / "a.yaml", prod, {"token": "x"}, name="prod")
    b = _simple(tmp_path / "b.yaml", dev, {"token": "y"}, name="dev")
    monkeypatch.setenv("KUBECONFIG", f"{a}{os.pathsep}{b}")
    assert _build(tmp_path) == 0
    assert _hosts(tmp_path) == ["default/host/prod-0", "default/host/prod-1", "default/host/prod-2"]
    assert not dev.seen
    assert _build(tmp_path, "--context", "dev") == 0  # --context still picks the other one
    assert _hosts(tmp_path) == ["default/host/dev-0"]


# -- a 200 answer that is not a list ---------------------------------------------------------------


def test_a_200_answer_without_items_stops_the_build(
    fake_api: Callable[..., FakeApi], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An SSO proxy's ``200 {"error": "session expired"}`` is no list response (kubectl: "Object
    'Kind' is missing"); it was read as an empty list, and the graph lost every host."""
    api = fake_api()
    api.pages = [{"error": "session expired, please log in"}]
    kc = _simple(tmp_path / "kc.yaml", api, {"token": "x"})
    assert _build(tmp_path, "--kubeconfig", str(kc)) == 2
    assert "cannot list nodes" in (err := _one_error_line(capsys))
    assert "the answer is not a list response" in err and not (tmp_path / "g.json").exists()
    # the same on a later page: the list would be silently partial
    node = {"metadata": {"name": "n-0"}, "status": {"allocatable": {}}}
    api.pages = [{"metadata": {"continue": "1"}, "items": [node]}, {"metadata": {}}]
    assert _build(tmp_path, "--kubeconfig", str(kc)) == 2
    assert "cannot list nodes" in (err := _one_error_line(capsys))
    assert "the answer is not a list response" in err and not (tmp_path / "g.json").exists()
    # "items": null is an empty list (Go marshals a nil slice so); kubectl reads it as one
    api.pages = [{"metadata": {"continue": "1"}, "items": [node]}, {"items": None}]
    assert _build(tmp_path, "--kubeconfig", str(kc)) == 0
    assert _hosts(tmp_path) == ["default/host/n-0"]


# -- connection errors named by their cause ------------------------------------------------------


def _build_against_refused_port(tmp_path: Path, url_template: str) -> str:
    """Run ``graph build`` against a server URL (``url_template`` with ``{port}``) whose port is
    bound but never listening, so the connection is refused; assert exit 2 and return the URL."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = url_template.format(port=sock.getsockname()[1])
        kc = _kubeconfig(
            tmp_path / "kc.yaml",
            context="c",
            clusters={"c": {"server": url}},
            users={"u": {"token": "x"}},
            contexts={"c": ("c", "u")},
        )
        assert _build(tmp_path, "--kubeconfig", str(kc)) == 2
    return url


def test_a_refused_connection_is_not_reported_as_a_timeout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """urllib3 2.x makes ``NewConnectionError`` a subclass of ``ConnectTimeoutError``; a refused
    connection was reported as "could not connect within 30 s (--timeout)"."""
    _build_against_refused_port(tmp_path, "http://127.0.0.1:{port}")
    err = _one_error_line(capsys)
    assert "cannot connect: connection refused" in err and "--timeout" not in err


def test_a_host_name_that_does_not_resolve_says_so() -> None:
    urllib3 = pytest.importorskip("urllib3")
    if not hasattr(urllib3.exceptions, "NameResolutionError"):
        pytest.skip("urllib3 1.x has no NameResolutionError")
    from fleetmind.cli.graph import _connection_text

    gai = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    cause = urllib3.exceptions.NameResolutionError("no-such-host.invalid", None, gai)
    cause.__cause__ = gai  # as urllib3 raises it: ``from e``
    err = urllib3.exceptions.MaxRetryError(None, "/api/v1/nodes", cause)
    text = _connection_text(err, 30)
    assert text == "cannot resolve the host name (Name or service not known)"


# -- a failing exec credential plugin -----------------------------------------------------------


def test_a_failing_exec_plugin_stops_with_its_message(
    fake_api: Callable[..., FakeApi],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """kubectl stops: "getting credentials: exec: executable ... failed with exit code 1"; the
    Python client logged ``exec: process returned 1`` on the root logger and sent the requests
    without credentials (401, or ``system:anonymous`` on a real server)."""
    api = fake_api(token="t")
    plugin = _script(
        tmp_path / "fail.sh", "echo \"error: run 'corp-login'\" >&2\necho more >&2\nexit 1\n"
    )
    exec_ = {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin)}
    kc = _simple(tmp_path / "kc.yaml", api, {"exec": exec_})
    assert _build(tmp_path, "--kubeconfig", str(kc)) == 2
    err = _one_error_line(capsys)
    assert f"exec plugin {plugin}: process returned 1. error: run 'corp-login'" in err
    assert not api.seen and not [r for r in caplog.records if "exec" in r.getMessage()]
    exec_["command"] = str(tmp_path / "no-such-plugin")
    kc = _simple(tmp_path / "kc.yaml", api, {"exec": exec_})
    assert _build(tmp_path, "--kubeconfig", str(kc)) == 2
    assert "no-such-plugin: executable not found" in _one_error_line(capsys)
    # a plugin that works gives its token
    ok = _script(
        tmp_path / "ok.sh",
        'echo \'{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", '
        '"status": {"token": "t"}}\'\n',
    )
    exec_["command"] = str(ok)
    kc = _simple(tmp_path / "kc.yaml", api, {"exec": exec_})
    assert _build(tmp_path, "--kubeconfig", str(kc)) == 0
    assert {a for _, a in api.seen} == {"Bearer t"}


# -- KUBECONFIG set but empty, or naming only missing files -------------------------------------


def test_empty_kubeconfig_variable_falls_back_to_the_default(
    fake_api: Callable[..., FakeApi],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """client-go ignores an empty ``$KUBECONFIG`` (``filepath.SplitList("")`` is empty) and reads
    ``~/.kube/config``; the Python client found "No configuration"."""
    api = fake_api()
    _simple(tmp_path / "home" / ".kube" / "config", api, {"token": "x"})
    monkeypatch.setenv("KUBECONFIG", "")
    assert _build(tmp_path) == 0
    missing = [str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")]
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join(missing))
    assert _build(tmp_path) == 2
    assert f"no kubeconfig file found in: {missing[0]}, {missing[1]} ($KUBECONFIG" in (
        _one_error_line(capsys)
    )


# -- relative paths against the file that defines the entry -------------------------------------


def test_relative_paths_resolve_against_the_defining_file(
    fake_api: Callable[..., FakeApi],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """client-go ``ResolveLocalPaths`` makes each entry's relative file paths absolute against the
    file that defines it; the Python client resolved a user's ``client-certificate`` against the
    cluster's file (``File does not exist: clusters/cli.crt``), and ran its ``exec`` plugin there."""
    from fleetmind.cli.graph import _client_configuration

    users, clusters = tmp_path / "users", tmp_path / "clusters"
    users.mkdir()
    (users / "cli.crt").write_text("not read before a connection")
    (users / "cli.key").write_text("not read before a connection")
    _kubeconfig(
        users / "config",
        context="tls",
        users={"u": {"client-certificate": "cli.crt", "client-key": "cli.key"}},
        contexts={"tls": ("tls", "u")},
    )
    _kubeconfig(clusters / "config", clusters={"tls": {"server": "https://127.0.0.1:1"}})
    monkeypatch.setenv("KUBECONFIG", f"{users / 'config'}{os.pathsep}{clusters / 'config'}")
    monkeypatch.chdir(tmp_path)
    cfg = _client_configuration(None, None, False)
    assert (cfg.cert_file, cfg.key_file) == (str(users / "cli.crt"), str(users / "cli.key"))
    # an exec command with a "/" is resolved against its own file too
    api = fake_api(token="t")
    _script(
        users / "bin" / "plugin",
        'echo \'{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", '
        '"status": {"token": "t"}}\'\n',
    )
    exec_ = {"apiVersion": "client.authentication.k8s.io/v1", "command": "./bin/plugin"}
    _kubeconfig(
        users / "config", context="x", users={"u": {"exec": exec_}}, contexts={"x": ("x", "u")}
    )
    _kubeconfig(clusters / "config", clusters={"x": {"server": api.url}})
    assert _build(tmp_path) == 0
    assert {a for _, a in api.seen} == {"Bearer t"}


def test_relative_paths_of_a_symlinked_kubeconfig_resolve_against_the_link(
    fake_api: Callable[..., FakeApi], tmp_path: Path
) -> None:
    """client-go ``ResolveLocalPaths`` resolves against ``filepath.Abs(filepath.Dir(
    LocationOfOrigin))``, the folder of the path as named, without following a symbolic link (as
    the Python client's ``os.path.abspath(os.path.dirname(...))`` did): a ``~/.kube/config`` that
    links into a dotfiles repository (GNU Stow, home-manager) reads ``~/.kube/tok``, not the
    repository's."""
    api = fake_api(token="tok-home")
    kube, dotfiles = tmp_path / "home" / ".kube", tmp_path / "dotfiles"
    kube.mkdir(parents=True)
    (kube / "tok").write_text("tok-home\n")
    _simple(dotfiles / "config", api, {"tokenFile": "tok"})
    (dotfiles / "tok").write_text("tok-dotfiles\n")
    (kube / "config").symlink_to(Path("..", "..", "dotfiles", "config"))
    assert _build(tmp_path) == 0  # ~/.kube/config, HOME is tmp_path/home
    assert {a for _, a in api.seen} == {"Bearer tok-home"}


# -- a proxy from the environment and a loopback API server -------------------------------------


def test_environment_proxy_is_not_used_for_a_loopback_server(
    fake_api: Callable[..., FakeApi], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Go never proxies ``localhost`` or a loopback address (``golang.org/x/net/http/httpproxy``,
    ``useProxy``), so kubectl reaches kind/k3d/minikube at ``https://127.0.0.1:PORT`` with a
    corporate ``HTTPS_PROXY`` set; the Python client sent the request to the proxy. A kubeconfig's
    ``proxy-url`` is still used."""
    from fleetmind.cli.graph import _client_configuration

    api = fake_api()
    with socket.socket() as dead:  # a proxy that refuses every connection
        dead.bind(("127.0.0.1", 0))
        proxy = f"http://127.0.0.1:{dead.getsockname()[1]}"
        monkeypatch.setenv("HTTP_PROXY", proxy)
        monkeypatch.setenv("HTTPS_PROXY", proxy)
        kc = _simple(tmp_path / "kc.yaml", api, {"token": "x"})
        assert _build(tmp_path, "--kubeconfig", str(kc)) == 0
    assert api.seen
    own = _kubeconfig(
        tmp_path / "own.yaml",
        context="c",
        clusters={"c": {"server": api.url, "proxy-url": "http://proxy.example:3128"}},
        users={"u": {"token": "x"}},
        contexts={"c": ("c", "u")},
    )
    assert _client_configuration(str(own), None, False).proxy == "http://proxy.example:3128"
    remote = _kubeconfig(
        tmp_path / "remote.yaml",
        context="c",
        clusters={"c": {"server": "https://k8s.example:6443"}},
        users={"u": {"token": "x"}},
        contexts={"c": ("c", "u")},
    )
    assert _client_configuration(str(remote), None, False).proxy == proxy


def test_a_refreshed_auth_provider_token_is_saved_to_its_file(
    fake_api: Callable[..., FakeApi], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``load_kube_config`` wrote a refreshed ``gcp``/``oidc`` token back into the kubeconfig (its
    ``persist_config``), as kubectl does; the merged loading keeps that, into the file defining
    the user (here the second of ``$KUBECONFIG``). A guard against losing that with the merged
    loading; ``kubernetes.config`` reads ``$KUBECONFIG`` once, when imported, so the old code also
    missed a ``$KUBECONFIG`` set later in the same process."""
    import yaml

    api = fake_api(token="fresh")
    helper = _script(
        tmp_path / "token.sh",
        'echo \'{"credential": {"access_token": "fresh", "token_expiry": "2099-01-01T00:00:00Z"}}\'\n',
    )
    gcp = {"name": "gcp", "config": {"cmd-path": str(helper), "cmd-args": ""}}
    first = _kubeconfig(tmp_path / "first.yaml", context="c", contexts={"c": ("c", "u")})
    second = _kubeconfig(
        tmp_path / "second.yaml",
        clusters={"c": {"server": api.url}},
        users={"u": {"auth-provider": gcp}},
    )
    second.chmod(0o600)
    monkeypatch.setenv("KUBECONFIG", f"{first}{os.pathsep}{second}")
    assert _build(tmp_path) == 0
    assert {a for _, a in api.seen} == {"Bearer fresh"}
    saved = yaml.safe_load(second.read_text())["users"][0]["user"]["auth-provider"]["config"]
    assert saved["access-token"] == "fresh" and saved["cmd-path"] == str(helper)
    assert stat.S_IMODE(second.stat().st_mode) == 0o600 and "users" not in first.read_text()


def test_a_refreshed_token_keeps_the_owner_of_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kubectl (client-go ``clientcmd.ModifyConfig``) writes a refreshed token into the user's
    kubeconfig in place, so root running on a user's file leaves it the user's; the save renamed a
    temporary file over it, which made it root's. The new file gets the old one's owner and group
    (``os.chown``) before its mode, and a process that may not set them still saves the token."""
    import yaml

    from fleetmind.cli.kubeconfig import _saver

    kc = _kubeconfig(tmp_path / "kc.yaml", users={"u": {"auth-provider": {"name": "oidc"}}})
    kc.chmod(0o600)
    st = kc.stat()
    calls: list[tuple[int, int]] = []

    def chown(path: str, uid: int, gid: int) -> None:
        calls.append((uid, gid))
        raise PermissionError(1, "Operation not permitted")  # as for a user who is not root

    monkeypatch.setattr(os, "chown", chown)
    new = {"name": "oidc", "config": {"id-token": "new"}}
    _saver(kc, "u", {"auth-provider": new})()
    assert calls == [(st.st_uid, st.st_gid)]  # asked for the old file's owner and group
    assert yaml.safe_load(kc.read_text())["users"][0]["user"]["auth-provider"] == new
    assert stat.S_IMODE(kc.stat().st_mode) == 0o600
    monkeypatch.undo()
    if os.getuid() == 0:  # root really gives the file back to its owner
        os.chown(kc, 65534, 65534)
        _saver(kc, "u", {"auth-provider": {"name": "oidc", "config": {"id-token": "newer"}}})()
        assert (kc.stat().st_uid, kc.stat().st_gid) == (65534, 65534)
        assert "newer" in kc.read_text() and stat.S_IMODE(kc.stat().st_mode) == 0o600


def test_a_password_in_the_server_url_is_never_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server URL with ``user:password@`` is named in every list error (and in the
    EndpointSlice warning); the message showed the password."""
    from fleetmind.cli.graph import _ListError

    url = _build_against_refused_port(tmp_path, "http://admin:hunter2@127.0.0.1:{port}")
    err = _one_error_line(capsys)
    assert "cannot list nodes" in err and "hunter2" not in err and "admin:" not in err
    text = str(_ListError(f"cannot list endpointslices at {url}: 403 Forbidden", 403))
    assert "hunter2" not in text and "403 Forbidden" in text


def test_a_token_file_with_leading_whitespace_gives_one_space_after_bearer(
    fake_api: Callable[..., FakeApi], tmp_path: Path
) -> None:
    """client-go ``fileTokenSource.Token`` trims the file (``strings.TrimSpace``) and sends
    ``Bearer <token>``; the API server splits the header on one space (``strings.SplitN(auth, " ",
    3)`` in ``plugin/pkg/authenticator/request/bearertoken``), so ``Bearer  tok`` is an empty
    token: 401. A file `` tok`` or ``\\ntok\\n`` gave that double space."""
    api = fake_api(token="sekrit-token")
    for i, content in enumerate((" sekrit-token\n", "\nsekrit-token\n", "\t sekrit-token \n")):
        (tmp_path / f"tok{i}").write_text(content)
        kc = _simple(tmp_path / "kc.yaml", api, {"tokenFile": str(tmp_path / f"tok{i}")})
        assert _build(tmp_path, "--kubeconfig", str(kc)) == 0, repr(content)
    assert {a for _, a in api.seen} == {"Bearer sekrit-token"}


def test_a_failing_exec_plugin_run_from_a_terminal_names_no_python_error(
    fake_api: Callable[..., FakeApi],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With stdout a terminal the client's ``ExecProvider`` passes the plugin's stderr through
    (``stderr=sys.stderr``), so ``communicate()`` returns ``None`` for it, and calls ``.strip()``
    on it: the message was "'NoneType' object has no attribute 'strip'". The plugin's own error
    is on the terminal already (kubectl lets it through as well)."""
    import types

    from kubernetes.config import exec_provider

    class Terminal:
        def isatty(self) -> bool:
            return True

    err_sink = (tmp_path / "plugin-stderr").open("w")  # the terminal the plugin writes to
    fake_sys = types.SimpleNamespace(
        stdout=Terminal(), stderr=err_sink, stdin=None, platform=exec_provider.sys.platform
    )
    monkeypatch.setattr(exec_provider, "sys", fake_sys)
    api = fake_api(token="t")
    plugin = _script(tmp_path / "fail.sh", "echo \"error: run 'corp-login'\" >&2\nexit 1\n")
    exec_ = {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin)}
    kc = _simple(tmp_path / "kc.yaml", api, {"exec": exec_})
    try:
        assert _build(tmp_path, "--kubeconfig", str(kc)) == 2
    finally:
        err_sink.close()
    err = _one_error_line(capsys)
    assert f"exec plugin {plugin}: process failed (its error output is above)" in err, err
    assert "NoneType" not in err and not api.seen
    assert "corp-login" in (tmp_path / "plugin-stderr").read_text()
