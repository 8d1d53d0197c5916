"""``fleetmind doctor --prometheus URL``: check the metrics FleetMind needs on a live Prometheus
(see :mod:`fleetmind.serving.telemetry.doctor`). Exit status 0: no error found; 1: errors found; 2: bad input
or Prometheus unreachable."""

from __future__ import annotations

import argparse
from pathlib import Path

from fleetmind import argtypes


def register(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> None:
    p = subparsers.add_parser(name, help=help_text, description=help_text)
    p.add_argument(
        "--prometheus", required=True, metavar="URL", help="Prometheus server (http://host:9090)"
    )
    p.add_argument(
        "--timeout",
        type=argtypes.finite_float,
        default=10.0,
        help="query timeout, s (default: 10; at most 31536000, a year)",
    )
    p.add_argument(
        "--cluster",
        default=None,
        help="cluster of series without a 'cluster' label, as the service names it "
        "(default: FLEETMIND_TELEMETRY_CLUSTER, else 'local')",
    )
    p.add_argument("--json", type=Path, help="also write the findings as JSON to this path")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fleetmind.data.errors import ConfigError
    from fleetmind.data.fetch import check_http_url
    from fleetmind.serving.telemetry.doctor import as_json, diagnose, has_errors
    from fleetmind.serving.telemetry.prometheus import is_exporter_url

    check_http_url(args.prometheus, "--prometheus")
    if is_exporter_url(args.prometheus):
        raise ConfigError("--prometheus is a Prometheus server, not an exporter's /metrics URL")
    from fleetmind.serving.settings import MAX_DURATION_S, env_value

    if not 0 < args.timeout <= MAX_DURATION_S:
        raise ConfigError(
            f"--timeout must be a number of seconds > 0 and at most {MAX_DURATION_S:.0f} "
            f"(a year, the service's longest duration), got {args.timeout:g}"
        )
    from fleetmind.cli.common import refuse_input_as_output

    argtypes.check_writable_file(args.json, "--json")  # before probing for up to --timeout
    refuse_input_as_output(
        args.json,
        "--json",
        [
            (f"FLEETMIND_{name}", env_value(f"FLEETMIND_{name}") or None, ())
            for name in ("GRAPH", "PROMETHEUS_CA_FILE", "PROMETHEUS_BEARER_TOKEN_FILE")
        ],
    )
    cluster = args.cluster or env_value("FLEETMIND_TELEMETRY_CLUSTER") or "local"
    findings = diagnose(args.prometheus, timeout_s=args.timeout, cluster=cluster)
    unwritten: OSError | None = None
    if args.json is not None:  # the file before the screen: a reader that stops early keeps it
        from fleetmind.training.io import write_json  # whole or not at all, as README says

        try:
            write_json(args.json, as_json(args.prometheus, findings))
        except OSError as err:  # the findings are still printed, then the one error line
            if _is_std_stream(args.json) or argtypes.is_stdout(args.json):
                # --json /dev/stdout goes through the stream: a reader gone or a full disk there
                # is stdout's failure, the runner's to report (quiet 141, or its one line)
                raise
            unwritten = err
    for f in findings:
        print(f.line())
    if unwritten is not None:
        raise ConfigError(
            f"--json {args.json}: cannot write the findings "
            f"({unwritten.strerror or unwritten}); they are printed above"
        )
    return 1 if has_errors(findings) else 0


def _is_std_stream(path: Path) -> bool:
    """Whether ``path`` is the file this process's stdout or stderr writes to (``--json
    /dev/stdout``), which :func:`fleetmind.training.io.write_json` writes through that stream."""
    import os

    from fleetmind.training.io import _std_stream

    try:
        st = os.stat(path)
    except OSError:
        return False
    return _std_stream(st) is not None
