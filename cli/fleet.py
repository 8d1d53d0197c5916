"""``fleetmind fleet ...``: show a fleet topology, discover the local host through NVML."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fleetmind import argtypes
from fleetmind.cli.common import add_group, refuse_input_as_output, refuse_same_output
from fleetmind.redact import pad, terminal_safe
from fleetmind.training.io import write_json

JSON_HELP = "write the summary as JSON (-: to stdout alone, the table then on stderr)"
"""The help of ``--json`` (``fleetmind.cli.main`` runs a command given ``--json -`` so)."""


def register(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> None:
    _, sub = add_group(subparsers, name, help_text)
    p = sub.add_parser(
        "show",
        help="summarise a fleet: clusters, nodes by GPU model, one node's link matrix",
        description="Summarise a fleet topology: clusters (region), nodes and GPUs by GPU model and "
        "template, and one node's GPU link matrix in the style of 'nvidia-smi topo -m'.",
    )
    p.add_argument(
        "--topology",
        default="openb",
        help="a fleet YAML file, the name of an example fleet shipped with FleetMind ('small', "
        "'example_multicluster'), 'openb' (the openb node list) or 'nvml' (this host); "
        "default: openb",
    )
    p.add_argument(
        "--clusters", type=int, default=1, help="openb only: split into N clusters (default 1)"
    )
    p.add_argument(
        "--seed", type=argtypes.seed, default=0, help="openb only: seed of the cluster split"
    )
    p.add_argument(
        "--node",
        default=None,
        help="node whose link matrix to print (default: the first 8-GPU V100 node, else the node "
        "with the most GPUs)",
    )
    p.add_argument("--json", default=None, metavar="PATH", help=JSON_HELP)
    p.set_defaults(func=_show)

    d = sub.add_parser(
        "discover",
        help="discover this host's GPUs and links through NVML",
        description="Discover the local GPUs through NVML (pynvml) and print the link matrix.",
    )
    d.add_argument(
        "--node",
        default=None,
        help="name of this host's node (default: $NODE_NAME, the Kubernetes Node a pod runs on, "
        "else the host name)",
    )
    d.add_argument("--out", default=None, metavar="FILE.yaml", help="save the fleet as YAML")
    d.add_argument("--json", default=None, metavar="PATH", help=JSON_HELP)
    d.set_defaults(func=_discover)


def _default_node(fleet: Any) -> int:
    """First 8-GPU V100 node, else the first node with the most GPUs.

    Raises:
        DataError: the fleet has no nodes (the loaders refuse such files; a fleet built otherwise).
    """
    from fleetmind.data.errors import DataError

    if fleet.n_nodes == 0:
        raise DataError(f"fleet {fleet.name!r} has no nodes, so no node to show")
    for i in range(fleet.n_nodes):
        if fleet.gpu_count[i] == 8 and str(fleet.gpu_model[i]).startswith("V100"):
            return i
    return int(fleet.gpu_count.argmax())


def _node_view(fleet: Any, node: str | None) -> tuple[int, Any]:
    """``(index, template)`` of the node whose link matrix is shown (``node``, else the default)."""
    idx = fleet.node_index(node) if node is not None else _default_node(fleet)
    return idx, fleet.template_of(idx)


def _fleet_summary(fleet: Any, node: str | None) -> dict[str, Any]:
    """The fleet's summary as ``--json`` writes it, with the node shown (``shown_node``)."""
    s = fleet.summary()
    idx, tpl = _node_view(fleet, node)
    s["shown_node"] = {
        "name": fleet.node_names[idx],
        "template": tpl.name,
        "links": tpl.labels(),
        "numa": [int(x) for x in tpl.numa],
    }
    return s


def _say(line: str) -> None:
    """Print ``line`` of ``fleet show``: names and regions come from the fleet file, so their
    control characters print escaped (no escape sequence or CR/LF reaches the terminal)."""
    print(terminal_safe(line))


def _row(*cells: tuple[Any, int]) -> str:
    """One table line of ``fleet show``: each ``(value, columns)`` cell escaped first
    (:func:`~fleetmind.redact.terminal_safe`), then padded to ``columns`` terminal columns by
    display width (a CJK character takes 2), left-aligned for text and right-aligned for a
    number (shown with thousands separators), so that columns line up whatever the names hold."""
    out = []
    for value, columns in cells:
        if isinstance(value, int):
            out.append(pad(f"{value:,}", columns, ">"))
        else:
            out.append(pad(terminal_safe(str(value)), columns))
    return "".join(out)


def _print_fleet(fleet: Any, s: dict[str, Any], node: str | None) -> None:
    """Print the summary ``s`` of ``fleet`` (from :func:`_fleet_summary`) and the node's matrix."""
    from fleetmind.data.topology import nvidia_smi_topo

    _say(
        f"fleet {s['name']}: {s['n_clusters']} cluster(s), {s['n_nodes']:,} nodes, "
        f"{s['n_gpus']:,} GPUs  (source: {s['source']})"
    )
    print()
    _say(f"{'cluster':<20}{'region':<16}{'nodes':>8}{'GPUs':>8}")
    for c in s["clusters"]:
        _say(_row((c["name"], 20), (c["region"], 16), (c["nodes"], 8), (c["gpus"], 8)))
    print()
    _say(f"{'GPU model':<12}{'nodes':>8}{'GPUs':>8}   nodes by GPUs per node")
    for model, m in s["gpu_models"].items():
        sizes = ", ".join(f"{k}x{v}" for k, v in m["nodes_by_gpu_count"].items())
        _say(_row((model, 12), (m["nodes"], 8), (m["gpus"], 8)) + f"   {sizes}")
    print()
    _say(f"{'template':<22}{'nodes':>8}{'GPUs':>8}")
    for name, t in s["templates"].items():
        _say(_row((name, 22), (t["nodes"], 8), (t["gpus"], 8)))
    if fleet.n_clusters > 1:
        print()
        _say("WAN round trip (ms) / bandwidth (GB/s) between clusters:")
        for i, a in enumerate(fleet.clusters):
            cells = []
            for j in range(fleet.n_clusters):
                if i == j:
                    cells.append("-".center(13))
                else:
                    cells.append(
                        f"{fleet.wan_latency_ms[i, j]:6.1f}/{fleet.wan_bandwidth_gbps[i, j]:<6.2f}"
                    )
            _say("  " + _row((a.name, 18)) + " ".join(cells))
    idx, tpl = _node_view(fleet, node)
    print()
    _say(
        f"node {fleet.node_names[idx]} (cluster {fleet.clusters[int(fleet.node_cluster[idx])].name}, "
        f"template {tpl.name}, {tpl.n_gpus}x {tpl.gpu_model}):"
    )
    print(nvidia_smi_topo(tpl))


def _load(load: Any, *args: Any, **kwargs: Any) -> Any:
    """``load(*args, **kwargs)``; each ``UserWarning`` it raises (an unknown GPU model) is printed
    as one ``fleetmind: warning:`` line on stderr."""
    import sys
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        fleet = load(*args, **kwargs)
    for w in caught:
        if issubclass(w.category, UserWarning):
            text = terminal_safe(" ".join(str(w.message).split()))
            print(f"fleetmind: warning: {text}", file=sys.stderr)
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    return fleet


def _show(args: argparse.Namespace) -> int:
    from fleetmind.data.fleet_io import load_fleet, resolve_fleet_path

    spec = args.topology
    if spec not in ("openb", "nvml"):  # the file it reads: a packaged example fleet's, by name
        resolved = _load(resolve_fleet_path, spec)
        spec = spec if resolved == Path(spec) else str(resolved)  # ./openb stays a file
    inputs: list[tuple[str, str, tuple[str, ...]]] = [("--topology", spec, ())]
    if spec == "openb":  # the openb node lists it reads, in whichever folder holds them
        from fleetmind.data.errors import DataError
        from fleetmind.data.paths import openb_csv_dir

        try:
            inputs.append(("--topology", str(openb_csv_dir()), ("openb_node_list_*.csv",)))
        except DataError:
            pass  # no openb data: load_fleet says so in one line
    refuse_input_as_output(args.json, "--json", inputs)
    argtypes.check_writable_file(args.json, "--json")
    fleet = _load(load_fleet, spec, n_clusters=args.clusters, seed=args.seed)
    summary = _fleet_summary(fleet, args.node)
    # the file before the screen: a reader that stops early (| head) does not cost the file
    write_json(args.json, summary)
    _print_fleet(fleet, summary, args.node)
    return 0


def _discover(args: argparse.Namespace) -> int:
    from fleetmind.data.fleet_io import discover_local_fleet, dump_fleet_yaml

    refuse_same_output([("--out", args.out), ("--json", args.json)])
    fleet = _load(discover_local_fleet, node_name=args.node)
    summary = _fleet_summary(fleet, None)
    if args.out:
        dump_fleet_yaml(fleet, args.out)
    write_json(args.json, summary)
    _print_fleet(fleet, summary, None)
    if args.out:
        print(f"\nsaved {args.out}")
    return 0
