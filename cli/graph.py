"""``fleetmind graph ...``: build the RCA dependency graph from a cluster; print the JSON Schema."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import stat
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fleetmind import argtypes
from fleetmind.cli.common import FolderInput, add_group, refuse_input_as_output
from fleetmind.errors import NotAvailableError
from fleetmind.redact import terminal_safe

DEFAULT_TIMEOUT_S = 30.0
"""``--timeout``: seconds to connect to the API server, and to wait for each part of an answer."""
PAGE_SIZE = 500
"""Items asked for per list request (``limit``); the client follows ``metadata.continue`` until the
list is complete, as ``kubectl get`` does (chunks of 500)."""


def register(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> None:
    _, sub = add_group(subparsers, name, help_text)
    b = sub.add_parser(
        "build",
        help="build the dependency graph from the Kubernetes API (+ NVML links, + trace spans)",
        description="Build the graph JSON (docs/graph.schema.json) from the Kubernetes API: nodes "
        "(hosts, their GPUs), services, pods (runs_on host/GPUs, member_of services by "
        "EndpointSlices or selectors), plus NVLink topology of this host (--nvml) and call edges "
        "from trace spans (--spans). The service loads it with FLEETMIND_GRAPH. What the graph "
        "leaves out (an ambiguous trace service name, NVLinks of an unknown node, the GPUs of a "
        "node whose GPU count cannot be made out) is printed as a warning.",
    )
    b.add_argument("--out", required=True, metavar="GRAPH.json", help="where to write the graph")
    b.add_argument(
        "--kubeconfig",
        default=None,
        help="kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)",
    )
    b.add_argument("--context", default=None, help="kubeconfig context (default: current)")
    b.add_argument(
        "--in-cluster", action="store_true", help="use the pod's service account (in a cluster)"
    )
    b.add_argument(
        "--from-dir",
        default=None,
        metavar="DIR",
        help="read recorded list responses instead of the API: nodes.json, pods.json, "
        "services.json and optionally endpointslices.json (e.g. from 'kubectl get -o json')",
    )
    b.add_argument("--cluster", default=None, help="cluster name (default: node label "
                   "fleetmind.io/cluster, else 'default')")  # fmt: skip
    b.add_argument("--name", default=None, help="graph name (default k8s-<cluster>)")
    b.add_argument(
        "--timeout",
        type=_positive_seconds,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help="seconds to connect to the Kubernetes API and to wait for its answer, per request "
        f"(default {DEFAULT_TIMEOUT_S:g})",
    )
    b.add_argument(
        "--spans",
        "--traces",
        dest="spans",
        nargs="*",
        default=[],
        metavar="FILE.json",
        help="OTLP JSON or Jaeger JSON trace exports, or JSON Lines of OTLP exports (the "
        "OpenTelemetry Collector's file exporter): calls edges between services, spans paired "
        "across all files",
    )
    b.add_argument(
        "--nvml", action="store_true", help="add this host's NVLink topology (NVML; a GPU host)"
    )
    b.add_argument(
        "--node",
        default=None,
        metavar="NAME",
        help="the Kubernetes Node this host is, for --nvml (default: environment variable "
        "NODE_NAME, set in a pod from the downward API's spec.nodeName; else the hostname)",
    )
    b.add_argument(
        "--template-links",
        action="store_true",
        help="add each GPU host's NVLink pairs or PCIe switches from its GPU model's template as "
        "link nodes, as the RCA model was trained on, so a broken link can be named (a host "
        "--nvml covers keeps NVML's links only; 28 per 8-GPU SXM host: about 2.3x the nodes and "
        "memory of a graph of such hosts)",
    )
    b.set_defaults(func=_build)

    s = sub.add_parser(
        "schema",
        help="print the graph JSON Schema",
        description="Print the JSON Schema of the graph JSON, generated from the pydantic model "
        "the CLI, the service and data/graph.py use (docs/graph.schema.json).",
    )
    s.add_argument(
        "--out", default=None, metavar="PATH", help="write it to this file instead of stdout"
    )
    s.set_defaults(func=_schema)


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, got {text!r}")
    return value


def _read(path: Path) -> Any:
    from fleetmind.data.files import read_json

    return read_json(path)


def fetch_lists(
    kubeconfig: str | None,
    context: str | None,
    in_cluster: bool,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> tuple[Any, Any, Any, Any]:
    """Nodes, pods, services and EndpointSlices (None when the API has none) as JSON list
    responses, each item cut down to the fields ``build_graph`` reads as its page arrives
    (:func:`fleetmind.data.graph_build.slim_list_items`).

    Each list is read in pages of :data:`PAGE_SIZE` (``limit``, then ``continue`` until the API
    server returns no ``metadata.continue``); each request waits at most ``timeout`` seconds to
    connect and for each part of the answer; a failed connection is tried twice more, a read
    timeout is not.
    EndpointSlices the API does not serve (404) or the account may not list (403) give a warning,
    and the build falls back to Service selectors.

    The kubeconfig is read by kubectl's rules (:mod:`fleetmind.cli.kubeconfig`).

    Raises:
        NotAvailableError: no client library, no configuration (naming the kubeconfig paths
            tried), a failing ``exec`` credential plugin, or a list request that fails: one line
            naming the resource and the server, with the HTTP status, reason and the API's Status
            message, an answer that is no list response (no ``items``, on any page), or the
            connection error (refused, a host name that does not resolve) or timeout; credentials
            masked.
    """
    try:
        from kubernetes import client
    except ImportError:
        raise NotAvailableError(
            "fleetmind graph build needs the kubernetes package (pip install 'fleetmind[k8s]'), "
            "or --from-dir with recorded list responses"
        ) from None
    api = client.ApiClient(_client_configuration(kubeconfig, context, in_cluster, timeout))
    core, disc = client.CoreV1Api(api), client.DiscoveryV1Api(api)
    host = str(api.configuration.host)
    nodes = _list_all(core.list_node, "nodes", host, timeout)
    pods = _list_all(core.list_pod_for_all_namespaces, "pods", host, timeout)
    services = _list_all(core.list_service_for_all_namespaces, "services", host, timeout)
    try:
        slices = _list_all(
            disc.list_endpoint_slice_for_all_namespaces, "endpointslices", host, timeout
        )
    except _ListError as err:
        if err.status not in (403, 404):
            raise
        # one line: the Status message is the API server's text (CR/LF, escapes shown escaped)
        text = terminal_safe(" ".join(str(err).split()))
        print(f"fleetmind: warning: {text}; Service selectors stand in for them (not-ready pods "
              "included)", file=sys.stderr)  # fmt: skip
        slices = None
    return nodes, pods, services, slices


def _client_configuration(
    kubeconfig: str | None,
    context: str | None,
    in_cluster: bool,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> Any:
    """The client's configuration from the pod's service account or a kubeconfig file, with
    retries that repeat a failed connection but never a request after a read timeout, and that
    wait out a 429's or 503's ``Retry-After`` (API Priority and Fairness) only up to ``timeout``
    seconds: urllib3 sleeps for any ``Retry-After`` by default, and a proxy's ``Retry-After: 100``
    held a build with ``--timeout 5`` for 202 s.

    A kubeconfig is read by kubectl's rules (:func:`fleetmind.cli.kubeconfig.load_kubeconfig`:
    merging, relative paths, token whitespace, ``exec`` plugin failures, no environment proxy for a
    loopback server)."""
    import urllib3
    from kubernetes import client, config

    from fleetmind.cli.kubeconfig import load_kubeconfig, mask_secrets

    cfg = client.Configuration()
    if in_cluster:
        try:
            config.load_incluster_config(client_configuration=cfg)
        except Exception as err:  # noqa: BLE001 - ConfigException, a missing token file
            text = mask_secrets(" ".join(str(err).split()))
            raise NotAvailableError(f"no Kubernetes configuration: {text}") from None
    else:
        load_kubeconfig(cfg, kubeconfig, context)
    try:
        cfg.retries = urllib3.Retry(total=2, read=0, retry_after_max=timeout)
    except TypeError:  # urllib3 before retry_after_max: such an answer fails at once instead
        cfg.retries = urllib3.Retry(total=2, read=0, respect_retry_after_header=False)
    return cfg


class _ListError(NotAvailableError):
    """A list request that failed; ``status`` is the HTTP status, if the server answered. The
    message has its credentials masked (:func:`fleetmind.cli.kubeconfig.mask_secrets`): the server
    URL it names may hold ``user:password@``, the API's message a token."""

    def __init__(self, message: str, status: int | None = None) -> None:
        from fleetmind.cli.kubeconfig import mask_secrets

        super().__init__(mask_secrets(message))
        self.status = status


def _list_all(fn: Callable[..., Any], what: str, host: str, timeout: float) -> dict[str, Any]:
    """The whole list response of ``fn`` (a ``list_*`` method), its pages' items joined.

    Raises:
        _ListError: one line naming ``what`` and ``host``.
    """
    from kubernetes.client.rest import ApiException

    doc: dict[str, Any] = {}
    items: list[Any] = []
    seen: set[str] = set()
    token = None
    where = f"cannot list {what} from the Kubernetes API at {host}"
    while True:
        kw = {"_continue": token} if token else {}
        try:
            resp = fn(
                limit=PAGE_SIZE, _request_timeout=(timeout, timeout), _preload_content=False, **kw
            )
        except ApiException as err:
            raise _ListError(f"{where}: {_status_text(err)}", err.status) from None
        except Exception as err:  # noqa: BLE001 - urllib3's connection errors and timeouts
            raise _ListError(f"{where}: {_connection_text(err, timeout)}") from None
        try:
            doc = json.loads(resp.data)
        except ValueError:  # not UTF-8, not JSON
            raise _ListError(f"{where}: the answer is not JSON") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("items", 0), list | None):
            raise _ListError(f"{where}: the answer is not a list response")
        from fleetmind.data.graph_build import slim_list_items

        items += slim_list_items(what, doc.get("items") or [])  # what build_graph reads
        token = (doc.get("metadata") or {}).get("continue")
        if not token:
            break
        if token in seen:
            raise _ListError(f"{where}: the server repeats the continue token {token!r}")
        seen.add(token)
    doc["items"] = items
    return doc


def _status_text(err: Any) -> str:
    """``403 Forbidden: <the Status body's message>`` of an ``ApiException``."""
    text = f"{err.status} {err.reason or ''}".strip()
    try:
        message = json.loads(err.body).get("message")
    except Exception:  # noqa: BLE001 - no body, not JSON, not a Status
        message = None
    return f"{text}: {message}" if message else text


def _connection_text(err: Exception, timeout: float) -> str:
    """Why a request got no answer, in one line with credentials masked (an invalid header's
    message quotes the ``Authorization`` value). urllib3 2.x makes ``NewConnectionError`` (a
    refused connection) and ``NameResolutionError`` subclasses of ``ConnectTimeoutError``, so they
    are told apart first."""
    import urllib3

    from fleetmind.cli.kubeconfig import mask_secrets

    if isinstance(err, NotAvailableError):  # a failed exec plugin, from the token refresh hook
        return str(err)
    reason = getattr(err, "reason", None) or err
    exc = urllib3.exceptions
    cause = getattr(reason, "__cause__", None)
    detail = getattr(cause, "strerror", None) or ""
    if isinstance(reason, getattr(exc, "NameResolutionError", ())):
        return f"cannot resolve the host name ({detail or 'name not resolved'})"
    if isinstance(reason, exc.NewConnectionError):
        detail = detail or str(reason).rsplit("] ", 1)[-1]
        return f"cannot connect: {detail[:1].lower()}{detail[1:]}"
    if isinstance(reason, exc.ReadTimeoutError):
        return f"no answer within {timeout:g} s (--timeout)"
    if isinstance(reason, exc.ConnectTimeoutError):
        return f"could not connect within {timeout:g} s (--timeout)"
    return mask_secrets(" ".join(f"{type(reason).__name__}: {reason}".split()))


def _build(args: argparse.Namespace) -> int:
    argtypes.refuse_stdout(args.out, "--out", no_json=True)  # "-": one line, not a file ./-
    from fleetmind.data.files import require_dir
    from fleetmind.data.graph import DependencyGraph
    from fleetmind.data.graph_build import (
        GraphBuildWarning,
        build_graph,
        calls_from_spans,
        nvlinks_from_nvml,
        read_span_file,
    )

    refuse_input_as_output(args.out, "--out", _build_inputs(args))
    if args.from_dir:
        d = require_dir(args.from_dir, "--from-dir folder")
        nodes, pods, services = (_read(d / f"{k}.json") for k in ("nodes", "pods", "services"))
        slices = _read(d / "endpointslices.json") if (d / "endpointslices.json").exists() else None
    else:
        nodes, pods, services, slices = fetch_lists(
            args.kubeconfig, args.context, args.in_cluster, args.timeout
        )
    calls = calls_from_spans(*(doc for f in args.spans for doc in read_span_file(f)))
    node = args.node or os.environ.get("NODE_NAME") or None
    nvlinks = nvlinks_from_nvml(node) if args.nvml else None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", GraphBuildWarning)
        model = build_graph(nodes, pods, services, slices, cluster=args.cluster, calls=calls,
                            nvlinks=nvlinks, name=args.name,
                            template_links=args.template_links)  # fmt: skip
    for w in caught:
        if issubclass(w.category, GraphBuildWarning):
            text = terminal_safe(" ".join(str(w.message).split()))
            print(f"fleetmind: warning: {text}", file=sys.stderr)
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    graph = DependencyGraph.from_model(model)  # ids unique, edge ends exist
    write_whole(args.out, model.model_dump_json() + "\n")  # compact: ~20% smaller than indented
    kinds: dict[str, int] = {}
    for n in graph.nodes:
        kinds[n.kind] = kinds.get(n.kind, 0) + 1
    summary = ", ".join(f"{v} {k}" for k, v in sorted(kinds.items()))
    print(  # the name holds the cluster label of the API's nodes: outside text
        terminal_safe(
            f"graph {graph.name}: {graph.num_nodes} nodes ({summary}), {graph.num_edges} edges"
            f" -> {args.out}"
        )
    )
    return 0


def _build_inputs(args: argparse.Namespace) -> list[FolderInput]:
    """The files ``graph build`` reads, for :func:`refuse_input_as_output`: the ``--from-dir``
    list responses or else the kubeconfig files (``--kubeconfig``, ``$KUBECONFIG`` or the
    default; none with ``--in-cluster``), and the ``--spans`` files."""
    inputs: list[FolderInput] = [("--spans", list(args.spans), ())]
    if args.from_dir:
        inputs.append(("--from-dir", args.from_dir, _FROM_DIR_FILES))
    elif not args.in_cluster:
        from fleetmind.cli.kubeconfig import kubeconfig_paths

        paths, source = kubeconfig_paths(args.kubeconfig)
        inputs.append((source if source != "the default" else "the kubeconfig", paths, ()))
    return inputs


_FROM_DIR_FILES = ("nodes.json", "pods.json", "services.json", "endpointslices.json")
"""The files of a ``--from-dir`` folder that ``graph build`` reads."""


def write_whole(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` whole or not at all.

    When ``path`` is a regular file or does not exist yet, the text goes to a temporary file in the
    same folder, is flushed to disk (``fsync``) and renamed over ``path`` (``os.replace``, atomic on
    POSIX file systems): a reader such as the service's refresher sees the old file or the new one,
    never a part, and a write that fails (a full disk, ``ulimit -f``, a killed CronJob) leaves the
    old file as it was. The new file keeps the permission bits of the file it replaces, and its
    owner and group where the process may set them (root rewriting a user's kubeconfig), else gets
    ``0666`` less the umask (what ``open()`` gives, usually ``0644``). A symbolic link is
    followed: its target is replaced. Anything else (a character device such as ``/dev/null``, a
    pipe such as ``/dev/stdout`` in a pipeline or ``>(cat)``, a FIFO, a socket) is opened and
    written in place, as a shell redirection would: renaming over it would replace the device or
    fail.

    Raises:
        OSError: one that names ``path`` (with ``filename`` set), whatever step failed.
    """
    try:
        st = os.stat(path)  # follows links, /dev/stdout -> /proc/self/fd/1 -> the pipe included
    except FileNotFoundError:
        st = None
    except OSError as err:
        raise OSError(err.errno, f"not written: {err.strerror or err}", str(path)) from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as err:
            raise OSError(err.errno, f"not written: {err.strerror or err}", str(path)) from None
        return
    _replace_whole(Path(os.path.realpath(path)), text, st, path)


def _replace_whole(
    target: Path, text: str, st: os.stat_result | None, path: str | os.PathLike[str]
) -> None:
    """Write ``text`` to a temporary file next to ``target`` and rename it over ``target``.

    ``st`` is the status of the file replaced (``None``: there is none), whose mode, owner and
    group the new file gets (owner and group only where the process may set them: a user who is
    not root cannot give a file away); errors name ``path``.
    """
    tmp: str | None = None
    try:
        if st is not None:
            mode = st.st_mode & 0o7777
        else:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if st is not None:  # before chmod, as chown clears set-user-ID bits
            with contextlib.suppress(OSError):  # not root, or a file system without owners
                os.chown(tmp, st.st_uid, st.st_gid)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
        tmp = None
    except OSError as err:
        raise OSError(err.errno, f"not written: {err.strerror or err}", str(path)) from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _schema(args: argparse.Namespace) -> int:
    from fleetmind.data.graph_schema import graph_json_schema

    # "-": a one-line error, not a file ./-
    argtypes.refuse_stdout(args.out, "--out", stdout_without=True)
    text = json.dumps(graph_json_schema(), indent=2) + "\n"
    if args.out:
        write_whole(args.out, text)
    else:
        print(text, end="")
    return 0
