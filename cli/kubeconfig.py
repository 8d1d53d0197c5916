"""Kubeconfig files for ``fleetmind graph build``, read by kubectl's rules.

The kubernetes Python client (``kubernetes/config/kube_config.py``) reads kubeconfig files in ways
that differ from kubectl (client-go, ``tools/clientcmd/loader.go``); where they differ, a build
could reach another cluster than ``kubectl`` does, or fail where it works. This module reads the
files itself and hands the client one merged, flattened configuration
(``load_kube_config_from_dict``), as ``kubectl config view --flatten`` would print it:

* the files: ``--kubeconfig``, else ``$KUBECONFIG`` when it is set and not empty (``KUBECONFIG=``
  falls back), else ``~/.kube/config``; a list (``os.pathsep``-separated, ``a:b`` on POSIX) skips
  the files that do not exist, and fails naming every path tried when none does;
* merging: the first file to define a cluster, context or user of a name wins, and so does the
  first file to set ``current-context`` (the Python client let a later file's win: with
  ``KUBECONFIG=prod.yaml:dev.yaml`` it built the graph of dev);
* relative paths (``certificate-authority``, ``client-certificate``, ``client-key``,
  ``tokenFile``, an ``exec`` command with a ``/``) are resolved against the folder of the file
  that defines the entry, not the file of the cluster; that folder is the one of the path as named,
  a symbolic link not followed (client-go ``ResolveLocalPaths``: ``filepath.Abs`` of the file's
  folder), so a ``~/.kube/config`` linked to a dotfiles repository reads ``~/.kube/token``;
* a bearer token has its surrounding whitespace removed (``echo tok > f`` writes ``tok\\n``;
  client-go ``transport/token_source.go`` trims it), where the Python client sent the newline and
  urllib3 refused the header, quoting the token; the header is ``Bearer <token>`` with one space
  whatever whitespace the file starts with;
* a failing ``exec`` credential plugin stops the build with one line naming it (the Python client
  logged a line on the root logger and sent the request without credentials);
* a refreshed ``gcp``/``oidc`` auth-provider token is written back into the file that defines the
  user, which keeps its permission bits and, where the process may set them, its owner and group;
* a proxy from the environment (``HTTPS_PROXY``) is not used for a loopback API server
  (``localhost``, ``127.0.0.1``, ``::1``: kind, k3d, minikube), as Go's ``net/http`` never proxies
  one (``golang.org/x/net/http/httpproxy``); a kubeconfig's ``proxy-url`` is always used, and
  ``NO_PROXY`` is honoured by the client.

Every message this module or the graph command prints goes through :func:`mask_secrets`.
"""

from __future__ import annotations

import contextlib
import copy
import ipaddress
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fleetmind.errors import NotAvailableError
from fleetmind.redact import safe_uri, terminal_safe

DEFAULT_KUBECONFIG = "~/.kube/config"
"""kubectl's kubeconfig when neither ``--kubeconfig`` nor ``$KUBECONFIG`` names one."""

_FALLBACKS = "or --in-cluster in a pod, or --from-dir with recorded list responses"
_SECTIONS = ("clusters", "contexts", "users")
_FILE_KEYS = {
    "clusters": ("cluster", ("certificate-authority",)),
    "users": ("user", ("client-certificate", "client-key", "tokenFile")),
}
"""Per section, the entry's inner key and its fields that name files (client-go
``GetClusterFileReferences`` and ``GetAuthInfoFileReferences``)."""
_AUTH_HEADER = re.compile(r"(?i)\b(Bearer|Basic)(\s+)[^\s'\"]+")


def mask_secrets(text: str) -> str:
    """``text`` with the credentials of an ``Authorization`` value (``Bearer <token>``, ``Basic
    <base64>``) and of URLs (``user:password@``) replaced by ``***``."""
    return safe_uri(_AUTH_HEADER.sub(r"\1\2***", text))


def kubeconfig_paths(kubeconfig: str | None) -> tuple[list[Path], str]:
    """The kubeconfig files to read, in order, and where they came from (for messages).

    ``kubeconfig`` (``--kubeconfig``) wins, then ``$KUBECONFIG`` when it is not empty, then
    :data:`DEFAULT_KUBECONFIG`. Each may list several paths separated by ``os.pathsep``; empty
    entries and repeats are dropped, and ``~`` is expanded.

    Raises:
        NotAvailableError: a path starts with ``~`` and there is no home folder (``HOME`` unset
            and a user without a passwd entry), or with ``~user`` of a user the system does not
            know.
    """
    env = os.environ.get("KUBECONFIG") or ""
    if kubeconfig:
        text, source = kubeconfig, "--kubeconfig"
    elif env.strip(os.pathsep + " "):
        text, source = env, "$KUBECONFIG"
    else:
        text, source = DEFAULT_KUBECONFIG, "the default"
    paths: list[Path] = []
    for part in text.split(os.pathsep):
        if part.strip():
            try:
                p = Path(part).expanduser()
            except RuntimeError:  # "Could not determine home directory": no HOME, no passwd
                # entry (``~``, ``~/...``), or ``~user`` naming a user the system does not know
                if (part == "~" or part.startswith("~/")) and "HOME" not in os.environ:
                    raise NotAvailableError(
                        f"no Kubernetes configuration: {part} ({source}) names the home folder, "
                        "but HOME is not set and this user has none; set HOME, or give "
                        "--kubeconfig or KUBECONFIG"
                    ) from None
                user = part[1:].split("/", 1)[0]
                raise NotAvailableError(
                    f"no Kubernetes configuration: {part} ({source}): unknown user in ~{user}; "
                    "give another --kubeconfig or KUBECONFIG"
                ) from None
            if p not in paths:
                paths.append(p)
    return paths, source


def _read_file(path: Path) -> dict[str, Any]:
    """One kubeconfig file as a mapping (``{}`` when empty)."""
    import yaml

    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        detail = str(getattr(err, "strerror", None) or err)
        mark = getattr(err, "problem_mark", None)
        if isinstance(err, yaml.MarkedYAMLError) and mark is not None:
            detail = (
                f"not valid YAML: {err.problem} (line {mark.line + 1}, column {mark.column + 1})"
            )
        detail = mask_secrets(" ".join(detail.split()))
        raise NotAvailableError(f"no Kubernetes configuration: {path}: {detail}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise NotAvailableError(
            f"no Kubernetes configuration: {path}: not a kubeconfig (a YAML mapping)"
        )
    return doc


def _absolute(value: Any, base: Path) -> Any:
    """``value`` made absolute against ``base`` when it is a relative path."""
    if isinstance(value, str) and value and not os.path.isabs(value):
        return os.path.normpath(base / value)
    return value


def _entries(doc: dict[str, Any], section: str, path: Path) -> list[dict[str, Any]]:
    """The named entries of ``doc[section]``, their relative file paths made absolute."""
    items = doc.get(section) or []
    if not isinstance(items, list) or not all(
        isinstance(e, dict) and isinstance(e.get("name"), str) for e in items
    ):
        raise NotAvailableError(
            f"no Kubernetes configuration: {path}: {section} is not a list of named entries"
        )
    base = Path(os.path.abspath(path)).parent  # not resolve(): client-go keeps symlinks
    out = []
    for entry in copy.deepcopy(items):
        inner, keys = _FILE_KEYS.get(section, ("", ()))
        body = entry.get(inner) if inner else None
        if isinstance(body, dict):
            for key in keys:
                if key in body:
                    body[key] = _absolute(body[key], base)
            ex = body.get("exec")
            if isinstance(ex, dict) and "/" in str(ex.get("command") or ""):
                ex["command"] = _absolute(ex["command"], base)
        out.append(entry)
    return out


def merged_kubeconfig(
    kubeconfig: str | None,
) -> tuple[dict[str, Any], list[Path], dict[str, Path]]:
    """The kubeconfig files of :func:`kubeconfig_paths` merged by kubectl's rules: the first
    definition of a name wins, the first ``current-context`` wins, relative file paths resolve
    against their own file. Also returns the files read and, per user name, the file defining it.

    Raises:
        NotAvailableError: no file exists (naming every path tried), or one cannot be read or is
            no kubeconfig.
    """
    paths, source = kubeconfig_paths(kubeconfig)
    found = [p for p in paths if p.is_file()]
    if not found:
        named = ", ".join(str(p) for p in paths)
        what = "kubeconfig file not found" if len(paths) == 1 else "no kubeconfig file found in"
        raise NotAvailableError(
            f"no Kubernetes configuration: {what}: {named} ({source}; {_FALLBACKS})"
        )
    merged: dict[str, Any] = {"apiVersion": "v1", "kind": "Config"}
    merged.update({s: [] for s in _SECTIONS})
    user_files: dict[str, Path] = {}
    for path in found:
        doc = _read_file(path)
        for section in _SECTIONS:
            names = {e["name"] for e in merged[section]}
            merged[section] += [e for e in _entries(doc, section, path) if e["name"] not in names]
        for entry in doc.get("users") or []:
            user_files.setdefault(entry["name"], path)
        if doc.get("current-context") and not merged.get("current-context"):
            merged["current-context"] = doc["current-context"]
    return merged, found, user_files


def _active_user(merged: dict[str, Any], context: str) -> tuple[str, dict[str, Any]]:
    """The name and ``user`` body of the context's user (``("", {})`` when none)."""
    ctx = next((c for c in merged["contexts"] if c["name"] == context), None)
    name = ((ctx or {}).get("context") or {}).get("user") or ""
    user = next((u for u in merged["users"] if u["name"] == name), None)
    body = (user or {}).get("user")
    return name, body if isinstance(body, dict) else {}


def _active_cluster(merged: dict[str, Any], context: str) -> dict[str, Any]:
    ctx = next((c for c in merged["contexts"] if c["name"] == context), None)
    name = ((ctx or {}).get("context") or {}).get("cluster")
    cluster = next((c for c in merged["clusters"] if c["name"] == name), None)
    body = (cluster or {}).get("cluster")
    return body if isinstance(body, dict) else {}


class _Captured(logging.Filter):
    """Keeps, and keeps from the root logger's handlers, the errors ``kube_config.py`` logs."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and record.module == "kube_config":
            self.messages.append(record.getMessage())
            return False
        return True


@contextlib.contextmanager
def _client_errors() -> Iterator[list[str]]:
    """Collect the errors the kubernetes client logs on the root logger (``logging.error``, which
    would install a stderr handler when the root logger has none) instead of printing them."""
    root = logging.getLogger()
    captured, spare = _Captured(), logging.NullHandler()
    root.addFilter(captured)
    if not root.handlers:  # else logging.error() calls basicConfig()
        root.addHandler(spare)
    try:
        yield captured.messages
    finally:
        root.removeFilter(captured)
        root.removeHandler(spare)


_TTY_FAILURE = "'NoneType' object has no attribute 'strip'"
"""What the client logs for a failing ``exec`` plugin when stdout is a terminal: its
``ExecProvider`` then passes the plugin's stderr through (``stderr=sys.stderr``) and calls
``.strip()`` on the ``None`` that ``communicate()`` returns for it."""


def _exec_error(user_name: str, user: dict[str, Any], messages: list[str]) -> NotAvailableError:
    """One line for a failed ``exec`` credential plugin, from the first error the client logged."""
    command = str((user.get("exec") or {}).get("command") or "?")
    first = (messages[0].strip().splitlines() or [""])[0]
    first = terminal_safe(first.removeprefix("exec: "))
    if "No such file or directory" in first or "[Errno 2]" in first:
        first = "executable not found"
    elif first == _TTY_FAILURE:
        first = "process failed (its error output is above)"
    return NotAvailableError(
        mask_secrets(
            f"cannot get credentials for the kubeconfig user {user_name!r}: exec plugin "
            f"{command}: {first}"
        )
    )


def _strip_token(cfg: Any) -> None:
    """Remove whitespace around the bearer token the client stored (client-go trims a token
    file's content): ``Bearer  tok\\n`` (from a file that starts with a space) becomes ``Bearer tok``, one space
    after the scheme, as the API server splits the header on one space."""
    for key in ("BearerToken", "authorization"):
        value = cfg.api_key.get(key)
        if isinstance(value, str):
            parts = value.split(None, 1)
            if len(parts) == 2 and parts[0].lower() == "bearer":
                value = f"{parts[0]} {parts[1].strip()}"
            cfg.api_key[key] = value.strip()


def _guard_refresh(cfg: Any, user_name: str, user: dict[str, Any]) -> None:
    """Wrap the client's ``refresh_api_key_hook``, which sets the token again before every request
    (and re-runs an ``exec`` plugin once its token expires) and installs itself again: strip the
    token each time, and turn a failed plugin into :class:`NotAvailableError` instead of a
    root-logger line."""
    hook = cfg.refresh_api_key_hook
    if hook is None:
        return

    def refresh(configuration: Any) -> None:
        with _client_errors() as errors:
            hook(configuration)
        configuration.refresh_api_key_hook = refresh  # the client's hook put itself back
        if errors:
            raise _exec_error(user_name, user, errors)
        _strip_token(configuration)

    cfg.refresh_api_key_hook = refresh


def _saver(path: Path, user_name: str, user: dict[str, Any]) -> Callable[[], None]:
    """What the client calls after it refreshed a ``gcp`` or ``oidc`` auth-provider token: write
    the user's new ``auth-provider`` into ``path``, the file defining the user, as
    ``load_kube_config`` did (kubectl persists it too). A file it cannot write gives a warning."""

    def save() -> None:
        import yaml

        from fleetmind.cli.graph import write_whole

        try:
            doc = _read_file(path)
            for entry in doc.get("users") or []:
                if entry.get("name") == user_name and isinstance(entry.get("user"), dict):
                    entry["user"]["auth-provider"] = copy.deepcopy(user.get("auth-provider"))
            write_whole(path, yaml.safe_dump(doc, default_flow_style=False))
        except (OSError, NotAvailableError) as err:
            text = terminal_safe(mask_secrets(" ".join(str(err).split())))
            print(f"fleetmind: warning: the refreshed token is not saved: {text}", file=sys.stderr)

    return save


def _is_loopback(url: str) -> bool:
    """Whether the host of ``url`` is ``localhost`` or a loopback address (Go's ``useProxy``)."""
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def load_kubeconfig(cfg: Any, kubeconfig: str | None, context: str | None) -> None:
    """Set the client configuration ``cfg`` (a ``kubernetes.client.Configuration``) from the
    kubeconfig files by kubectl's rules (see the module's docstring).

    Raises:
        NotAvailableError: no kubeconfig, an unreadable or invalid one, no context to use, or an
            ``exec`` credential plugin that fails; one line, secrets masked.
    """
    from kubernetes.config.kube_config import KubeConfigLoader

    merged, found, user_files = merged_kubeconfig(kubeconfig)
    name = context or merged.get("current-context")
    if not name:
        files = ", ".join(str(p) for p in found)
        raise NotAvailableError(
            f"no Kubernetes configuration: no current-context in {files} (--context NAME, or "
            "kubectl config use-context NAME)"
        )
    user_name, user = _active_user(merged, name)
    path = user_files.get(user_name)
    try:
        with _client_errors() as errors:
            loader = KubeConfigLoader(
                merged,
                active_context=name,
                config_base_path="",
                config_persister=None if path is None else _saver(path, user_name, user),
            )
            loader.load_and_set(cfg)
    except Exception as err:  # noqa: BLE001 - ConfigException, a missing token or certificate
        text = " ".join(str(err).split())
        raise NotAvailableError(mask_secrets(f"no Kubernetes configuration: {text}")) from None
    if errors:
        raise _exec_error(user_name, user, errors)
    _strip_token(cfg)
    _guard_refresh(cfg, user_name, user)
    if "proxy-url" not in _active_cluster(merged, name) and _is_loopback(str(cfg.host)):
        cfg.proxy = None  # a proxy from the environment; Go never proxies a loopback host
