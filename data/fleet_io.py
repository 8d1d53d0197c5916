"""Loading and saving fleets: YAML files, the openb node list, and live NVML discovery.

YAML schema (full description with examples in ``docs/fleet.md``)::

    name: example                 # optional, default: the file name
    templates:                    # optional custom node templates, by name
      my-box:
        gpu_model: A10
        links: ["X PIX", "PIX X"]     # rows of nvidia-smi topo -m labels (X, NV#, BRD, PIX, ...)
        pcie: ["X PHB", "PHB X"]      # optional PCIe level under NV# pairs (default NODE/SYS)
        numa: [0, 0]
        board: [0, 1]                 # optional, default one board per GPU
        pcie_gen: 4                   # optional; nvlink_gbps, socket_gbps, cpus_per_numa, smt,
                                      # numa_nodes, description likewise
    clusters:
      - name: east
        region: us-east
        nodes:
          - {name: east-dgx-0, template: dgx1-v100, cpu_milli: 80000, memory_mib: 524288}
          - {name_prefix: east-t4-, count: 3, template: "pcie-4gpu:T4"}
    wan:                          # optional overrides of the region-based defaults
      - {between: [east, west], latency_ms: 62.0, bandwidth_gbps: 1.25}

Errors name the file, the line and the key (:class:`~fleetmind.data.errors.DataError` for unreadable or
malformed files, :class:`~fleetmind.data.errors.ConfigError` for an unknown template or region reference).
"""

from __future__ import annotations

import csv
import math
import os
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from fleetmind.data.errors import ConfigError, DataError, NotAvailableError
from fleetmind.data.files import read_text, value_error_text
from fleetmind.data.fleet import MAX_FLEET_NODES, REGION_ORDER, Cluster, Fleet
from fleetmind.data.openb import OpenbNodes
from fleetmind.data.paths import openb_csv_dir
from fleetmind.data.topology import (
    BUILTIN_TEMPLATES,
    GPU_SPECS,
    LinkLevel,
    NodeTemplate,
    _pcie_count,
    get_template,
    gpu_spec,
    nvlink_max_links,
    parse_link_label,
)
from fleetmind.folders import write_file_whole

# ---------------------------------------------------------------------------------------------
# YAML with line numbers
# ---------------------------------------------------------------------------------------------


class _LineDict(dict):
    """A mapping that remembers the (1-based) line it started on."""

    line: int = 0


_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _LineLoader(_BaseLoader):  # type: ignore[misc,valid-type]
    """Safe YAML loader (libyaml when present) whose mappings remember their line."""


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> _LineDict:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if isinstance(key, str) and key in seen:
            raise DataError(f"line {key_node.start_mark.line + 1}: duplicate key {key!r}")
        seen.add(key)
    out = _LineDict(loader.construct_mapping(node, deep=True))
    out.line = node.start_mark.line + 1
    return out


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _scalar_with_line(construct: Any) -> Any:
    """``construct`` (a SafeLoader scalar constructor) with its ``ValueError`` as a
    :class:`DataError` naming the line: an integer of more than 4,300 digits (CPython's limit,
    CVE-2020-10735) or a date such as ``2026-13-01``."""

    def wrapped(loader: _LineLoader, node: yaml.ScalarNode) -> Any:
        try:
            return construct(loader, node)
        except ValueError as err:
            raise DataError(f"line {node.start_mark.line + 1}: {value_error_text(err)}") from None

    return wrapped


for _tag, _construct in (
    ("tag:yaml.org,2002:int", _BaseLoader.construct_yaml_int),
    ("tag:yaml.org,2002:timestamp", _BaseLoader.construct_yaml_timestamp),
):
    _LineLoader.add_constructor(_tag, _scalar_with_line(_construct))


def _where(src: str, obj: Any) -> str:
    line = getattr(obj, "line", 0)
    return f"{src}:{line}" if line else src


def _check_keys(src: str, obj: Mapping[str, Any], allowed: set[str], what: str) -> None:
    extra = sorted(set(obj) - allowed)
    if extra:
        raise DataError(
            f"{_where(src, obj)}: unknown key {extra[0]!r} in {what}; allowed: "
            + ", ".join(sorted(allowed))
        )


def _need(src: str, obj: Mapping[str, Any], key: str, what: str) -> Any:
    if key not in obj:
        raise DataError(f"{_where(src, obj)}: {what} needs the key {key!r}")
    return obj[key]


_MAX_COUNT = 2**53
"""Largest integer a fleet file may give (``cpu_milli``, ``memory_mib``, ``count``, ...): the
arrays are int64, and every integer up to it is exact as a float (2**53 MiB is 8 ZiB)."""


def _shown(val: Any) -> str:
    """``repr(val)``, except for an integer too long to print in a message line (``0x`` and 2,000
    hex digits is a valid YAML integer that ``repr`` even refuses to write, CVE-2020-10735)."""
    if isinstance(val, int) and val.bit_length() > 128:  # 39 digits and more: not worth a line
        return f"an integer of {val.bit_length():,} bits"
    if isinstance(val, str) and len(val) > 64:
        return f"a text of {len(val):,} characters"
    return repr(val)


def _as_int(src: str, obj: Mapping[str, Any], key: str, default: int | None = None) -> int:
    val = obj.get(key, default)
    whole = isinstance(val, int) or (isinstance(val, float) and val.is_integer())
    if isinstance(val, bool) or not whole or val < 0:
        raise DataError(
            f"{_where(src, obj)}: {key!r} must be a non-negative integer, got {_shown(val)}"
        )
    if val > _MAX_COUNT:
        raise DataError(f"{_where(src, obj)}: {key!r} is too large: {_shown(val)} (at most 2**53)")
    return int(val)


def _as_float(src: str, obj: Mapping[str, Any], key: str) -> float:
    val = obj.get(key)
    if isinstance(val, bool) or not isinstance(val, (int, float)) or not val >= 0:  # NaN too
        raise DataError(
            f"{_where(src, obj)}: {key!r} must be a non-negative number, got {_shown(val)}"
        )
    try:
        return float(val)
    except OverflowError:  # an integer beyond 1.8e308
        raise DataError(f"{_where(src, obj)}: {key!r} is too large: {_shown(val)}") from None


_INT_TEXT = re.compile(r"[0-9]+")
_FLOAT_TEXT = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
_ASCII_SPACE = " \t\n\r\x0b\x0c"


def _plain_number(val: Any, decimal_point: bool) -> Any:
    """A template field's value with a text that is a plain decimal number read as that number, and
    a numpy scalar as the Python number; any other value (``"N/A"``, ``"0-63"``, ``"-1"``, ``"+4"``,
    ``"1_0"``, a bool) unchanged, for :func:`_as_int` / :func:`_as_float` to accept or refuse.

    The text, once its surrounding ASCII whitespace is stripped (``" 4"``, a ``|`` block's
    ``"4\\n"``), must be ASCII digits (``"24"`` -> 24); with ``decimal_point``, also at most one
    ``.`` and an exponent (``"41.6"`` -> 41.6, ``"2.5e1"`` -> 25.0: what PyYAML leaves as text where
    YAML 1.1 wants a ``.`` and a signed exponent), read only when finite (``"1e400"`` stays text).
    No sign, ``_`` or non-ASCII digit."""
    if isinstance(val, np.integer):
        return int(val)
    if isinstance(val, np.floating):
        return float(val)
    if not isinstance(val, str) or len(val) > 4000:  # 4,000 digits: under int()'s 4,300
        return val
    text = val.strip(_ASCII_SPACE)
    if _INT_TEXT.fullmatch(text):
        return int(text)
    if decimal_point and _FLOAT_TEXT.fullmatch(text):
        num = float(text)
        return num if math.isfinite(num) else val
    return val


def _field(spec: Mapping[str, Any], key: str, val: Any) -> _LineDict:
    """A one-key mapping ``{key: val}`` on ``spec``'s line, for the error messages."""
    item = _LineDict()
    item.line = getattr(spec, "line", 0)
    item[key] = val
    return item


def _tpl_int(src: str, spec: Mapping[str, Any], key: str, default: int) -> int:
    """A template's integer field (``pcie_gen``, ``cpus_per_numa``, ``numa_nodes``): ``default``
    when absent, else :func:`_as_int` of the value, a quoted ``"24"`` read as 24."""
    if key not in spec:
        return default
    return _as_int(src, _field(spec, key, _plain_number(spec[key], False)), key)


def _tpl_float(src: str, spec: Mapping[str, Any], key: str, default: float) -> float:
    """A template's GB/s field (``nvlink_gbps``, ``socket_gbps``): ``default`` when absent, else
    :func:`_as_float` of the value, a quoted ``"41.6"`` read as 41.6."""
    if key not in spec:
        return default
    return _as_float(src, _field(spec, key, _plain_number(spec[key], True)), key)


def _tpl_smt(src: str, spec: Mapping[str, Any]) -> bool:
    """A template's ``smt``: true or false (default true), also written 1 or 0 or as the text
    ``"true"`` / ``"false"`` (any case); anything else (``"yes please"``, 2) is refused."""
    val = spec.get("smt", True)
    if isinstance(val, (bool, np.bool_)):
        return bool(val)
    if isinstance(val, (int, np.integer)) and val in (0, 1):
        return bool(val)
    if isinstance(val, str) and val.lower() in ("true", "false"):
        return val.lower() == "true"
    raise DataError(
        f"{_where(src, spec)}: 'smt' must be true or false (or 1 or 0), got {_shown(val)}"
    )


_TEMPLATE_KEYS = {
    "gpu_model",
    "n_gpus",
    "links",
    "pcie",
    "numa",
    "board",
    "pcie_gen",
    "nvlink_gbps",
    "socket_gbps",
    "cpus_per_numa",
    "smt",
    "numa_nodes",
    "description",
}
_NODE_KEYS = {"name", "name_prefix", "count", "template", "gpu_model", "cpu_milli", "memory_mib"}
_CLUSTER_KEYS = {"name", "region", "nodes"}
_TOP_KEYS = {"name", "templates", "clusters", "wan"}
_WAN_KEYS = {"between", "latency_ms", "bandwidth_gbps"}


def _label_matrix(src: str, obj: Mapping[str, Any], key: str, g: int | None) -> list[list[str]]:
    rows = obj[key]
    if not isinstance(rows, list) or not rows:
        raise DataError(f"{_where(src, obj)}: {key!r} must be a list of rows")
    out = [r.split() if isinstance(r, str) else [str(x) for x in r] for r in rows]
    n = g if g is not None else len(out)
    if len(out) != n or any(len(r) != n for r in out):
        raise DataError(f"{_where(src, obj)}: {key!r} must be a {n}x{n} matrix of link labels")
    return out


def _int_list(src: str, spec: Mapping[str, Any], key: str, g: int, name: str) -> np.ndarray:
    """``spec[key]`` (``numa`` or ``board``) as ``(g,)`` int64, each entry a non-negative integer,
    also quoted (``"0"``; :func:`_as_int`'s rules otherwise: ``N/A`` as ``nvidia-smi topo -m``
    prints it, ``0-63``, ``-1``, ``a`` or a bool is an error naming the line); default ``[0] * g``
    for ``numa``, ``0..g-1`` for ``board``.

    Raises:
        DataError: not a list of ``g`` such integers.
    """
    if key not in spec:
        return np.zeros(g, dtype=np.int64) if key == "numa" else np.arange(g, dtype=np.int64)
    vals = spec[key]
    if isinstance(vals, np.ndarray) and vals.ndim == 1:
        vals = vals.tolist()
    if not isinstance(vals, (list, tuple)) or len(vals) != g:
        raise DataError(f"{_where(src, spec)}: template {name!r}: {key} needs {g} entries")
    out = np.empty(g, dtype=np.int64)
    for k, val in enumerate(vals):
        entry = f"{key}[{k}]"
        out[k] = _as_int(src, _field(spec, entry, _plain_number(val, False)), entry)
    return out


def template_from_dict(name: str, spec: Mapping[str, Any], src: str = "<dict>") -> NodeTemplate:
    """Build a custom :class:`NodeTemplate` from its YAML mapping (see the module docstring).

    Raises:
        DataError: missing/unknown keys or malformed matrices, naming ``src`` and the line.
    """
    if not isinstance(spec, Mapping):
        raise DataError(f"{src}: template {name!r} must be a mapping")
    _check_keys(src, spec, _TEMPLATE_KEYS, f"template {name!r}")
    model = str(_need(src, spec, "gpu_model", f"template {name!r}"))
    _need(src, spec, "links", f"template {name!r}")
    links = _label_matrix(src, spec, "links", None)
    g = len(links)
    if "n_gpus" in spec and _tpl_int(src, spec, "n_gpus", g) != g:
        raise DataError(f"{_where(src, spec)}: template {name!r}: n_gpus disagrees with links")
    numa = _int_list(src, spec, "numa", g, name)
    level = np.zeros((g, g), dtype=np.int8)
    nv = np.zeros((g, g), dtype=np.int8)
    pcie = _label_matrix(src, spec, "pcie", g) if "pcie" in spec else None
    try:
        for i in range(g):
            for j in range(g):
                lvl, n = parse_link_label(links[i][j])
                if lvl == LinkLevel.NV:
                    nv[i, j] = n
                    if pcie is not None:
                        lvl, _ = parse_link_label(pcie[i][j])
                    else:
                        lvl = LinkLevel.NODE if numa[i] == numa[j] else LinkLevel.SYS
                level[i, j] = lvl
    except ConfigError as err:
        raise DataError(f"{_where(src, spec)}: template {name!r}: {err}") from None
    specd = gpu_spec(model)
    kwargs: dict[str, Any] = {
        "pcie_gen": _tpl_int(src, spec, "pcie_gen", specd.pcie_gen),
        "nvlink_gbps": _tpl_float(src, spec, "nvlink_gbps", specd.nvlink_gbps or 25.0),
        "socket_gbps": _tpl_float(src, spec, "socket_gbps", 41.6),
        "cpus_per_numa": _tpl_int(src, spec, "cpus_per_numa", 0),
        "smt": _tpl_smt(src, spec),
        "numa_nodes": _tpl_int(src, spec, "numa_nodes", 0),
        "description": str(spec.get("description", "")),
    }
    try:
        return NodeTemplate(
            name=name,
            gpu_model=model,
            n_gpus=g,
            level=level,
            nvlinks=nv,
            numa=numa,
            board=_int_list(src, spec, "board", g, name),
            **kwargs,
        )
    except ConfigError as err:
        raise DataError(f"{_where(src, spec)}: {err}") from None


def template_to_dict(t: NodeTemplate) -> dict[str, Any]:
    """YAML mapping of a custom template (inverse of :func:`template_from_dict`)."""
    d = t.to_dict()
    d.pop("name")
    return d


def _is_builtin_name(name: str) -> bool:
    base = name.partition(":")[0]
    return base in BUILTIN_TEMPLATES or _pcie_count(base) is not None


def _is_builtin(t: NodeTemplate) -> bool:
    """Whether ``t`` is exactly the built-in template of its name, which a saved fleet can omit.

    A fleet's own template under a built-in name (a fleet file written before that name was
    built in, e.g. its own ``hgx-h200``) wins on load and so must be written out again.
    """
    if not _is_builtin_name(t.name):
        return False
    return template_to_dict(t) == template_to_dict(get_template(t.name))


def fleet_from_dict(doc: Mapping[str, Any], src: str = "<dict>") -> Fleet:
    """Build a :class:`Fleet` from a parsed YAML document (see the module docstring for the schema).

    Raises:
        DataError: malformed document (names file, line, key).
        ConfigError: unknown template or cluster reference.
    """
    if not isinstance(doc, Mapping):
        raise DataError(f"{src}: a fleet file must be a mapping with a 'clusters' list")
    _check_keys(src, doc, _TOP_KEYS, "the fleet")
    name = str(doc.get("name") or Path(src).stem)
    table = _TemplateTable(src, _custom_templates(doc, src))
    clusters_doc = _need(src, doc, "clusters", "the fleet")
    if not isinstance(clusters_doc, list) or not clusters_doc:
        raise DataError(f"{_where(src, doc)}: 'clusters' must be a non-empty list")
    clusters: list[Cluster] = []
    nodes = _NodeColumns()
    for ci, cdoc in enumerate(clusters_doc):
        clusters.append(_read_cluster(src, ci, cdoc, table, nodes))
    if not nodes.names:
        raise DataError(
            f"{_where(src, doc)}: the fleet has no nodes (every cluster's 'nodes' is empty or absent)"
        )
    c_index = {c.name: i for i, c in enumerate(clusters)}
    if len(c_index) != len(clusters):
        raise DataError(f"{src}: duplicate cluster names")
    seen: set[str] = set()
    for nm in nodes.names:
        if nm in seen:
            raise DataError(f"{src}: duplicate node name {nm!r}")
        seen.add(nm)

    columns = (nodes.names, nodes.cluster, nodes.template, nodes.cpu, nodes.mem)
    fleet = Fleet(name, clusters, table.templates, *columns)
    wan = doc.get("wan") or []
    if wan:
        lat, bw = _wan_matrices(src, doc, wan, fleet, c_index)
        fleet = Fleet(name, clusters, table.templates, *columns, lat, bw)
    fleet.source = src
    return fleet


def _custom_templates(doc: Mapping[str, Any], src: str) -> dict[str, NodeTemplate]:
    """The fleet file's own ``templates:``, by name."""
    tdefs = doc.get("templates") or {}
    if not isinstance(tdefs, Mapping):
        raise DataError(f"{_where(src, doc)}: 'templates' must be a mapping name -> template")
    return {str(tname): template_from_dict(str(tname), spec, src) for tname, spec in tdefs.items()}


class _TemplateTable:
    """The templates a fleet uses, in order of first use, resolved from custom or built-in names."""

    def __init__(self, src: str, custom: dict[str, NodeTemplate]) -> None:
        self.src = src
        self.custom = custom
        self.templates: list[NodeTemplate] = []
        self.index: dict[str, int] = {}

    def resolve(self, node: Mapping[str, Any]) -> int:
        """Index in :attr:`templates` of a node mapping's ``template`` (with its ``gpu_model``)."""
        src, custom = self.src, self.custom
        tname = str(_need(src, node, "template", "a node"))
        model = node.get("gpu_model")
        if tname in custom:
            tpl = custom[tname]
            if model is not None and str(model) != tpl.gpu_model:
                tpl = tpl.with_model(str(model))
        elif _is_builtin_name(tname):
            try:
                tpl = get_template(tname, None if model is None else str(model))
            except ConfigError as err:
                raise ConfigError(f"{_where(src, node)}: {err}") from None
        else:
            known = ", ".join([*BUILTIN_TEMPLATES, *custom])
            raise ConfigError(
                f"{_where(src, node)}: unknown template {tname!r}; known templates: {known} "
                "(or pcie-<n>gpu, or define it under 'templates:')"
            )
        if tpl.name not in self.index:
            self.index[tpl.name] = len(self.templates)
            self.templates.append(tpl)
        return self.index[tpl.name]


@dataclass
class _NodeColumns:
    """Per-node columns of a fleet being read (name, cluster index, template index, CPU, memory)."""

    names: list[str] = field(default_factory=list)
    cluster: list[int] = field(default_factory=list)
    template: list[int] = field(default_factory=list)
    cpu: list[int] = field(default_factory=list)
    mem: list[int] = field(default_factory=list)


def _read_cluster(
    src: str, ci: int, cdoc: Any, table: _TemplateTable, nodes: _NodeColumns
) -> Cluster:
    """Read cluster ``ci``'s mapping: append its nodes to ``nodes``, return the cluster."""
    if not isinstance(cdoc, Mapping):
        raise DataError(f"{src}: cluster #{ci + 1} must be a mapping")
    _check_keys(src, cdoc, _CLUSTER_KEYS, "a cluster")
    cname = str(_need(src, cdoc, "name", "a cluster"))
    cluster = Cluster(cname, str(cdoc.get("region", "unknown")))
    ndocs = cdoc.get("nodes") or []
    if not isinstance(ndocs, list):
        raise DataError(f"{_where(src, cdoc)}: 'nodes' of cluster {cname!r} must be a list")
    for ndoc in ndocs:
        if not isinstance(ndoc, Mapping):
            raise DataError(f"{_where(src, cdoc)}: each node of {cname!r} must be a mapping")
        _check_keys(src, ndoc, _NODE_KEYS, f"a node of cluster {cname!r}")
        ti = table.resolve(ndoc)
        names = _node_names(src, ndoc, MAX_FLEET_NODES - len(nodes.names))
        c_default, m_default = default_node_resources(table.templates[ti])
        c_val = _as_int(src, ndoc, "cpu_milli", c_default)
        m_val = _as_int(src, ndoc, "memory_mib", m_default)
        for nm in names:
            nodes.names.append(nm)
            nodes.cluster.append(ci)
            nodes.template.append(ti)
            nodes.cpu.append(c_val)
            nodes.mem.append(m_val)
    return cluster


def _node_names(src: str, ndoc: Mapping[str, Any], room: int) -> list[str]:
    """A node entry's names: its ``name``, or ``name_prefix`` + 0 .. ``count`` - 1.

    ``room``: how many more nodes the fleet may hold (:data:`MAX_FLEET_NODES` minus those read so
    far); more raises :class:`DataError` before any name is made.
    """
    if "name" in ndoc:
        if "count" in ndoc or "name_prefix" in ndoc:
            raise DataError(f"{_where(src, ndoc)}: give either 'name' or 'name_prefix' + 'count'")
        count = 1
    else:
        prefix = str(_need(src, ndoc, "name_prefix", "a node without 'name'"))
        count = _as_int(src, ndoc, "count", 1)
    if count > room:
        raise DataError(
            f"{_where(src, ndoc)}: {count:,} more nodes after {MAX_FLEET_NODES - room:,} take the "
            f"fleet past {MAX_FLEET_NODES:,}, the most a fleet may hold"
        )
    if "name" in ndoc:
        return [str(ndoc["name"])]
    return [f"{prefix}{k}" for k in range(count)]


def _wan_matrices(
    src: str, doc: Mapping[str, Any], wan: Any, fleet: Fleet, c_index: dict[str, int]
) -> tuple[np.ndarray, np.ndarray]:
    """``(latency ms, bandwidth Gbit/s)``, ``(C, C)`` each: the fleet's defaults with the ``wan``
    entries' pairs overridden (symmetric)."""
    if not isinstance(wan, list):
        raise DataError(f"{_where(src, doc)}: 'wan' must be a list of pairs")
    lat = fleet.wan_latency_ms.copy()
    bw = fleet.wan_bandwidth_gbps.copy()
    for wdoc in wan:
        if not isinstance(wdoc, Mapping):
            raise DataError(f"{src}: each 'wan' entry must be a mapping")
        _check_keys(src, wdoc, _WAN_KEYS, "a wan entry")
        pair = _need(src, wdoc, "between", "a wan entry")
        if not isinstance(pair, list) or len(pair) != 2:
            raise DataError(f"{_where(src, wdoc)}: 'between' must name two clusters")
        ij = []
        for cn in pair:
            if str(cn) not in c_index:
                raise ConfigError(f"{_where(src, wdoc)}: 'between' names unknown cluster {cn!r}")
            ij.append(c_index[str(cn)])
        i, j = ij
        if "latency_ms" in wdoc:
            lat[i, j] = lat[j, i] = _as_float(src, wdoc, "latency_ms")
        if "bandwidth_gbps" in wdoc:
            bw[i, j] = bw[j, i] = _as_float(src, wdoc, "bandwidth_gbps")
    return lat, bw


def default_node_resources(t: NodeTemplate) -> tuple[int, int]:
    """``(cpu_milli, memory_mib)`` when the YAML omits them: all hardware threads of the host and
    64 GiB per GPU (a FleetMind default)."""
    sockets = max(int(t.numa_nodes), int(t.numa.max()) + 1)
    threads = t.cpus_per_numa * sockets * (2 if t.smt else 1)
    return (threads * 1000 if threads else 8000 * t.n_gpus), 65536 * t.n_gpus


PACKAGED_FLEETS_DIR = Path(__file__).resolve().parent / "fleets"
"""The example fleets shipped with FleetMind (``data/fleets/`` in a checkout, package data of
``fleetmind.data`` in a wheel)."""


def packaged_fleet_names() -> list[str]:
    """Names of the example fleets shipped with FleetMind (``small``, ``example_multicluster``)."""
    return sorted(f.stem for f in PACKAGED_FLEETS_DIR.glob("*.yaml"))


def resolve_fleet_path(path: str | os.PathLike[str]) -> Path:
    """Path of a fleet file, looking a packaged example fleet up by name when the path is missing.

    An existing path is returned as given. A missing one names the packaged file of that name
    (when there is one), so the examples work from a pip install too, in two forms only:

    * a bare name (``small``, ``small.yaml``): no path separator, so not ``./small``;
    * the checkout path the docs use, exactly ``data/fleets/<name>.yaml`` (relative, nothing
      before ``data``): ``../proj/data/fleets/small.yaml`` or ``mydir/data/fleets/small.yaml``
      name the user's own file. This form warns (a ``UserWarning``, which the CLI prints as one
      ``fleetmind: warning:`` line on stderr) that the packaged file is read instead.

    Otherwise the path is returned unchanged (and :func:`load_fleet_yaml` says it is missing).
    """
    p = Path(path)
    if p.exists():
        return p
    raw = os.fspath(path)
    separators = {"/", os.sep, *((os.altsep,) if os.altsep else ())}
    bare = not any(sep in raw for sep in separators)
    checkout_path = len(p.parts) == 3 and p.parts[:2] == ("data", "fleets")
    if bare or checkout_path:
        name = p.name if p.suffix in (".yaml", ".yml") else f"{p.name}.yaml"
        packaged = PACKAGED_FLEETS_DIR / name
        if packaged.is_file():
            if checkout_path:
                warnings.warn(
                    f"{raw} not found here; using the packaged example fleet {packaged}",
                    UserWarning,
                    stacklevel=2,
                )
            return packaged
    return p


def load_fleet_yaml(path: str | os.PathLike[str]) -> Fleet:
    """Load a fleet YAML file (schema in the module docstring and ``docs/fleet.md``).

    A missing path that names a packaged example fleet (:func:`resolve_fleet_path`: ``small``,
    ``data/fleets/small.yaml``) loads that file.

    Raises:
        DataError: file missing, not YAML, or malformed (message names file, line and key).
        ConfigError: unknown template / cluster reference (names file and line).
    """
    p = resolve_fleet_path(path)
    if not p.exists():
        names = ", ".join(packaged_fleet_names())
        raise DataError(
            f"fleet file {p} not found (give a YAML file, an example fleet name ({names}) or 'openb')"
        )
    text = read_text(p, "fleet file")  # a folder, unreadable, not UTF-8: names the file already
    try:
        doc = yaml.load(text, Loader=_LineLoader)  # noqa: S506 - SafeLoader subclass
    except DataError as err:
        raise DataError(f"{p}: {err}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{p}:{mark.line + 1}" if mark is not None else str(p)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise DataError(f"{where}: not valid YAML ({problem})") from None
    except RecursionError:
        raise DataError(f"{p}: not valid YAML (mappings or lists nested too deeply)") from None
    return fleet_from_dict(doc, str(p))


def fleet_to_dict(fleet: Fleet) -> dict[str, Any]:
    """Plain mapping in the YAML schema; ``fleet_from_dict(fleet_to_dict(f)) == f``."""
    templates = {t.name: template_to_dict(t) for t in fleet.templates if not _is_builtin(t)}
    clusters = []
    for ci, cl in enumerate(fleet.clusters):
        nodes = []
        for n in fleet.nodes_in_cluster(ci):
            nodes.append(
                {
                    "name": fleet.node_names[n],
                    "template": fleet.templates[int(fleet.node_template[n])].name,
                    "cpu_milli": int(fleet.cpu_milli[n]),
                    "memory_mib": int(fleet.memory_mib[n]),
                }
            )
        clusters.append({"name": cl.name, "region": cl.region, "nodes": nodes})
    wan = []
    for i in range(fleet.n_clusters):
        for j in range(i + 1, fleet.n_clusters):
            bw = float(fleet.wan_bandwidth_gbps[i, j])
            wan.append(
                {
                    "between": [fleet.clusters[i].name, fleet.clusters[j].name],
                    "latency_ms": float(fleet.wan_latency_ms[i, j]),
                    "bandwidth_gbps": bw if math.isfinite(bw) else float("inf"),
                }
            )
    out: dict[str, Any] = {"name": fleet.name}
    if templates:
        out["templates"] = templates
    out["clusters"] = clusters
    if wan:
        out["wan"] = wan
    return out


def dump_fleet_yaml(fleet: Fleet, path: str | os.PathLike[str] | None = None) -> str:
    """The fleet as YAML text (written to ``path`` when given). Node order within each cluster is
    kept; a fleet whose clusters interleave nodes reloads with nodes grouped by cluster."""
    text = yaml.dump(
        fleet_to_dict(fleet), Dumper=_Dumper, sort_keys=False, default_flow_style=None, width=100
    )
    if path is not None:  # whole or not at all: a failed write leaves the old file
        write_file_whole(path, text.encode())
    return text


# ---------------------------------------------------------------------------------------------
# openb
# ---------------------------------------------------------------------------------------------

OPENB_NODE_FILE = "openb_node_list_gpu_node.csv"

OPENB_SXM_MODELS = ("V100M16", "V100M32")
"""openb models whose 8-GPU nodes are taken as SXM2 boards with the DGX-1 hybrid cube-mesh."""


def openb_template_for(model: str, n_gpus: int) -> NodeTemplate:
    """Template of an openb node: 8-GPU V100 -> ``dgx1-v100:<model>``; else ``pcie-<n>gpu:<model>``.

    Why: an 8-GPU V100 server in 2019-2020 is almost always an SXM2 board with the hybrid cube-mesh
    (DGX-1 / HGX-1 / their OEM clones); the trace does not say, so that is an assumption. T4 and
    A10 are PCIe-only cards. P100 nodes have 1-2 GPUs (no cube-mesh) and the anonymised G2/G3
    models have no public specification, so they get the PCIe layout of their size.
    """
    if model in OPENB_SXM_MODELS and n_gpus == 8:
        return get_template("dgx1-v100", model)
    return get_template(f"pcie-{n_gpus}gpu", model)


SXM_BOARD_TEMPLATES: dict[str, tuple[str, frozenset[str]]] = {
    "V100": ("dgx1-v100", frozenset({"SXM2"})),
    "A100": ("dgx-a100", frozenset({"SXM4"})),
    "H100": ("dgx-h100", frozenset({"SXM5", "HBM3"})),
    "H200": ("hgx-h200", frozenset()),
    "B200": ("hgx-b200", frozenset()),
    "GB200": ("gb200-tray", frozenset()),
}
"""GPU family -> (built-in board template, words of its SXM form factor in the NVML / DCGM name).
A node gets the board when it has the board's GPU count (8; 4 for ``gb200-tray``) and its name
carries one of the words, or, for a family with none (an empty set), carries no word of
:data:`PCIE_FORM_WORDS`. Names as ``nvidia-smi -L`` and dcgm-exporter's ``modelName`` label print
them (the values of :data:`fleetmind.data.topology.DCGM_MODEL_NAMES`): "Tesla V100-SXM2-32GB"
(DGX-1 / HGX-1 hybrid cube-mesh), "NVIDIA A100-SXM4-80GB" (DGX A100 / HGX A100, NVSwitch),
"NVIDIA H100 80GB HBM3" (the SXM5 board of DGX H100 / HGX H100; the PCIe card is "NVIDIA H100
PCIe", the NVL "NVIDIA H100 NVL"). The newer boards' names carry no form-factor word: "NVIDIA
H200" (HGX H200; the PCIe card is "NVIDIA H200 NVL"), "NVIDIA B200" (HGX B200, no PCIe card),
"NVIDIA GB200" (a GB200 NVL72 compute tray of 4 GPUs); GPU feature discovery's
``nvidia.com/gpu.product`` spells them with dashes and may add the memory and a ``-SHARED``
suffix ("NVIDIA-H200-141GB-HBM3e-SHARED"), which read the same. SXM3 V100s are the 16-GPU DGX-2,
which no built-in template describes."""

PCIE_FORM_WORDS = frozenset({"PCIE", "NVL"})
"""Words of a PCIe card's NVML name ("NVIDIA H100 PCIe", "NVIDIA H200 NVL"): a family of
:data:`SXM_BOARD_TEMPLATES` without SXM words keeps such a card on ``pcie-<n>gpu``."""

_UNKNOWN_MODELS_WARNED: set[str] = set()
"""Telemetry model names :func:`telemetry_template_for` has warned about (once per name)."""


def names_mig_instances(name: str) -> bool:
    """Whether a telemetry model name names MIG instances: ``MIG`` (any case) is one of its words
    split on whitespace, ``-`` and ``_`` ("NVIDIA H100 80GB HBM3 MIG 1g.10gb",
    "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb"); the rule of
    :func:`fleetmind.serving.scheduler.placement.names_mig`, which the data layer cannot import."""
    return any(w.upper() == "MIG" for w in re.split(r"[-_\s]+", str(name)))


def telemetry_template_for(model: str, n_gpus: int) -> NodeTemplate:
    """Template of a live node from its GPUs' telemetry model name and count.

    A name of openb's vocabulary (a :data:`~fleetmind.data.topology.GPU_SPECS` key such as
    ``V100M32``) gets exactly :func:`openb_template_for`'s template. An NVML / DCGM product name is
    normalised with :func:`gpu_model_from_nvml`'s rules: 8 GPUs of an SXM board
    (:data:`SXM_BOARD_TEMPLATES`) -> ``dgx1-v100``, ``dgx-a100`` or ``dgx-h100`` with the spec-table
    model ("Tesla V100-SXM2-32GB" -> ``dgx1-v100:V100M32``, the template openb's ``V100M32`` nodes
    get); 8 GPUs named "NVIDIA H200" or "NVIDIA B200" -> ``hgx-h200`` / ``hgx-b200`` and 4 named
    "NVIDIA GB200" -> ``gb200-tray`` (names without a form-factor word, see
    :data:`SXM_BOARD_TEMPLATES`); any other known card -> ``pcie-<n>gpu:<model>`` ("NVIDIA
    A100-PCIE-40GB" and "NVIDIA H200 NVL" stay PCIe). An unknown name keeps
    :func:`openb_template_for`'s ``pcie-<n>gpu:<name>`` and warns once per name and process (a
    ``UserWarning``, as :func:`gpu_model_from_nvml` warns) that its nodes are modelled as PCIe gen 3
    servers without NVLink; a MIG instance's name (``MIG`` one of its words, the rule of
    :func:`fleetmind.serving.scheduler.placement.names_mig`: "NVIDIA A100-SXM4-40GB MIG 3g.20gb")
    keeps that template too: MIG slices of a GPU are no positions on the SXM board.

    :param model: the GPU model as telemetry reports it (dcgm-exporter's ``modelName``).
    :param n_gpus: GPUs of the node (>= 1).
    """
    name = str(model).strip()
    if name in GPU_SPECS:
        return openb_template_for(name, n_gpus)
    key, known = _spec_key(name, None)
    if not known:
        _warn_unknown_model(name, n_gpus)
    if not known or names_mig_instances(name):
        return openb_template_for(name, n_gpus)
    board = SXM_BOARD_TEMPLATES.get(re.sub(r"M\d+$", "", key))
    if board is not None and n_gpus == get_template(board[0]).n_gpus:
        if _has_board_form(name, board[1]):
            return get_template(board[0], key)
    return get_template(f"pcie-{n_gpus}gpu", key)


def _has_board_form(name: str, board_words: frozenset[str]) -> bool:
    """Whether NVML / DCGM name ``name`` is of its family's board form factor: one of
    ``board_words`` (:data:`SXM_BOARD_TEMPLATES`) among its words, or, for a family whose names carry
    none (an empty set), no word of :data:`PCIE_FORM_WORDS`."""
    words = {w.upper() for w in _model_words(name)}
    return bool(words & board_words) if board_words else not words & PCIE_FORM_WORDS


def names_board_part(model: str) -> bool:
    """Whether ``model`` (an NVML / DCGM or GPU feature discovery name) names an SXM / board GPU,
    not a PCIe card: a known name with an ``SXM<n>`` word ("Tesla V100-SXM3-32GB", the 16 GPUs of a
    DGX-2), or of a family of :data:`SXM_BOARD_TEMPLATES` in its board's form factor
    (:func:`_has_board_form`: "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "NVIDIA-H200").
    Such GPUs sit on an NVLink / NVSwitch board at any count (GCP a3-highgpu-4g and a2-highgpu-4g
    give 4 of a board's 8), so :func:`telemetry_template_for`'s ``pcie-<n>gpu`` fallback for a
    count that is not the board's is no picture of their interconnect. False for openb's names
    (:data:`~fleetmind.data.topology.GPU_SPECS` keys, which carry no form factor), MIG instances'
    names and unknown names.

    :param model: the GPU model as telemetry or a node label reports it.
    """
    name = str(model or "").strip()
    if name in GPU_SPECS or names_mig_instances(name):
        return False
    key, known = _spec_key(name, None)
    if not known:
        return False
    if any(re.fullmatch(r"SXM\d*", w.upper()) for w in _model_words(name)):
        return True
    board = SXM_BOARD_TEMPLATES.get(re.sub(r"M\d+$", "", key))
    return board is not None and _has_board_form(name, board[1])


def known_telemetry_template(model: str, n_gpus: int) -> NodeTemplate | None:
    """:func:`telemetry_template_for`'s template of a node whose GPU model is known (a
    :data:`~fleetmind.data.topology.GPU_SPECS` key, or an NVML / DCGM name of one), without its
    warning; None for an unknown name, a MIG instance's name (:func:`names_mig_instances`) or no GPUs.

    :param model: the GPU model as telemetry or a node label reports it.
    :param n_gpus: GPUs of the node.
    """
    name = str(model or "").strip()
    if n_gpus < 1 or names_mig_instances(name):
        return None
    if name not in GPU_SPECS and not _spec_key(name, None)[1]:
        return None
    return telemetry_template_for(name, n_gpus)


def _warn_unknown_model(name: str, n_gpus: int) -> None:
    """Warn once per process that telemetry model ``name`` is not in the spec table.

    Telemetry's own placeholders for a GPU it has no name for (``"unknown"``: a device that
    kube-state-metrics counts and DCGM does not report, an NVML GPU that was lost; or no name at
    all) are no model to add, so they do not warn.
    """
    if name in _UNKNOWN_MODELS_WARNED or name.strip().lower() in ("", "unknown"):
        return
    _UNKNOWN_MODELS_WARNED.add(name)
    warnings.warn(
        f"GPU model {name!r} is not in the spec table (known: {', '.join(GPU_SPECS)}): its nodes "
        f"are modelled as PCIe gen 3 servers without NVLink (template pcie-{n_gpus}gpu:{name})",
        UserWarning,
        stacklevel=3,
    )


def load_openb_fleet(
    path: str | os.PathLike[str] | None = None, n_clusters: int = 1, seed: int = 0
) -> Fleet:
    """The openb GPU nodes (1,213 nodes, 6,212 GPUs) as a fleet.

    :param path: the CSV (``sn,cpu_milli,memory_mib,gpu,model``) or a folder holding
        ``openb_node_list_gpu_node.csv``; default :func:`fleetmind.data.paths.openb_csv_dir`.
    :param n_clusters: split the nodes into this many clusters (regions from
        :data:`fleetmind.data.fleet.REGION_ORDER`); 1 keeps one cluster ``openb``.
    :param seed: seed of the split: nodes are shuffled with ``numpy.random.default_rng(seed)`` and
        dealt round-robin, so cluster sizes differ by at most one. Node order stays that of the file.
    :raises DataError: missing file or malformed row (names file and line).
    :raises ConfigError: ``n_clusters`` < 1 or more than the nodes, or ``seed`` not an integer
        >= 0.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError(f"seed must be an integer >= 0, got {seed!r}")
    p = Path(path) if path is not None else openb_csv_dir()
    if p.is_dir():
        p = p / OPENB_NODE_FILE
    if not p.is_file():
        raise DataError(f"openb node list {p} not found")
    names: list[str] = []
    tmpl_ids: list[int] = []
    cpu: list[int] = []
    mem: list[int] = []
    templates: list[NodeTemplate] = []
    t_index: dict[str, int] = {}
    with p.open(newline="", encoding="utf-8-sig") as fh:  # Excel's "CSV UTF-8" starts with a BOM
        reader = csv.DictReader(fh)
        need = {"sn", "cpu_milli", "memory_mib", "gpu", "model"}
        if reader.fieldnames is None or not need <= set(reader.fieldnames):
            raise DataError(f"{p}: header must have columns {', '.join(sorted(need))}")
        for lineno, row in enumerate(reader, start=2):
            try:
                g = int(row["gpu"])
                c = int(row["cpu_milli"])
                m = int(row["memory_mib"])
            except (TypeError, ValueError):
                raise DataError(f"{p}:{lineno}: non-integer gpu/cpu_milli/memory_mib") from None
            if g <= 0:
                continue  # CPU-only node (the all-node list has them)
            try:
                tpl = openb_template_for(str(row["model"]), g)
            except ConfigError as err:
                raise DataError(f"{p}:{lineno}: {err}") from None
            if tpl.name not in t_index:
                t_index[tpl.name] = len(templates)
                templates.append(tpl)
            names.append(str(row["sn"]))
            tmpl_ids.append(t_index[tpl.name])
            cpu.append(c)
            mem.append(m)
    n = len(names)
    if n == 0:
        raise DataError(f"{p}: no GPU nodes (a fleet needs at least one)")
    clusters, node_cluster = _split_clusters(n, n_clusters, seed)
    fleet = Fleet("openb", clusters, templates, names, node_cluster, tmpl_ids, cpu, mem)
    fleet.source = str(p)
    return fleet


def _split_clusters(n: int, n_clusters: int, seed: int) -> tuple[list[Cluster], np.ndarray]:
    """``n_clusters`` openb clusters and each of ``n`` nodes' cluster index ``(n,)``: the nodes
    shuffled with ``numpy.random.default_rng(seed)`` and dealt round-robin.

    Raises:
        ConfigError: ``n_clusters`` < 1 or more than the nodes.
    """
    if n_clusters < 1 or n_clusters > max(n, 1):
        raise ConfigError(f"--clusters must be between 1 and {n}, got {n_clusters}")
    if n_clusters == 1:
        return [Cluster("openb", REGION_ORDER[0])], np.zeros(n, dtype=np.int64)
    clusters = [
        Cluster(f"openb-{i}", REGION_ORDER[i % len(REGION_ORDER)]) for i in range(n_clusters)
    ]
    perm = np.random.default_rng(seed).permutation(n)
    node_cluster = np.empty(n, dtype=np.int64)
    node_cluster[perm] = np.arange(n) % n_clusters
    return clusters, node_cluster


def fleet_from_openb_nodes(nodes: OpenbNodes, n_clusters: int = 1, seed: int = 0) -> Fleet:
    """A node list read by :func:`fleetmind.data.openb.load_openb_nodes` (GPU nodes only) as a fleet,
    with the templates and cluster split of :func:`load_openb_fleet`.

    :param nodes: the node list (node order kept: ``load_openb_nodes`` sorts by name).
    :param n_clusters: clusters to deal the nodes into (at most the node count).
    :param seed: seed of the split.
    :raises DataError: no GPU node in the list.
    :raises ConfigError: ``n_clusters`` < 1 or more than the nodes.
    """
    keep = np.flatnonzero(nodes.num_gpu > 0)
    if keep.size == 0:
        raise DataError(f"node list {nodes.source or '<memory>'}: no GPU nodes")
    templates: list[NodeTemplate] = []
    t_index: dict[str, int] = {}
    tmpl_ids: list[int] = []
    for i in keep.tolist():
        tpl = openb_template_for(str(nodes.model[i]), int(nodes.num_gpu[i]))
        if tpl.name not in t_index:
            t_index[tpl.name] = len(templates)
            templates.append(tpl)
        tmpl_ids.append(t_index[tpl.name])
    clusters, node_cluster = _split_clusters(int(keep.size), n_clusters, seed)
    fleet = Fleet(
        "openb",
        clusters,
        templates,
        nodes.names[keep].tolist(),
        node_cluster,
        tmpl_ids,
        nodes.cpu_milli[keep],
        nodes.memory_mib[keep],
    )
    fleet.source = nodes.source
    return fleet


# ---------------------------------------------------------------------------------------------
# NVML discovery
# ---------------------------------------------------------------------------------------------

NVML_LEVELS: dict[int, LinkLevel] = {
    0: LinkLevel.BRD,  # NVML_TOPOLOGY_INTERNAL
    10: LinkLevel.PIX,  # NVML_TOPOLOGY_SINGLE
    20: LinkLevel.PXB,  # NVML_TOPOLOGY_MULTIPLE
    30: LinkLevel.PHB,  # NVML_TOPOLOGY_HOSTBRIDGE
    40: LinkLevel.NODE,  # NVML_TOPOLOGY_NODE (formerly NVML_TOPOLOGY_CPU)
    50: LinkLevel.SYS,  # NVML_TOPOLOGY_SYSTEM
}
"""``nvmlGpuTopologyLevel_t`` values -> :class:`LinkLevel`."""

NOT_AVAILABLE_HINT = (
    "use a fleet file (--topology FILE.yaml, or an example fleet: --topology small) or the openb "
    "node list (--topology openb)"
)


def local_node_name(name: str | None = None) -> str:
    """The name of this host's node: ``name`` when given, else the ``NODE_NAME`` environment
    variable (the Kubernetes Node a pod runs on, from the downward API ``spec.nodeName``, which
    differs from the pod's hostname; dcgm-exporter reads the same variable), else the host name.
    """
    import socket

    for value in (name, os.environ.get("NODE_NAME"), socket.gethostname()):
        if value and value.strip():
            return value.strip()
    return "localhost"


VENDOR_PREFIXES = ("NVIDIA", "Tesla")
"""Words NVML puts before the model in ``nvmlDeviceGetName`` ("NVIDIA A100-SXM4-80GB", "Tesla
V100-SXM2-32GB"); left out when the model is looked up."""


def gpu_model_from_nvml(name: str, memory_mib: float | None = None) -> str:
    """The :data:`~fleetmind.data.topology.GPU_SPECS` key of an NVML product name.

    The vendor words (:data:`VENDOR_PREFIXES`) are dropped and the rest split on ``-``, ``_`` and
    whitespace; the first word's longest known prefix not followed by a digit is the model
    ("A100-PCIE-40GB" -> ``A100``, "A10G" -> ``A10``, "V100S-PCIE-32GB" -> ``V100``, but "A1000" is
    not ``A100``). Where the table has memory variants (``V100M16``, ``V100M32``) the size in the
    name ("32GB"), else ``memory_mib`` (MiB, NVML's total) rounded to GiB, picks one. An unknown
    model is its words joined by ``-`` ("RTX A6000" -> ``RTX-A6000``) and warns once per name (a
    ``UserWarning``): it gets the spec table's default (PCIe gen 3, no NVLink).

    :param name: ``nvmlDeviceGetName``'s text.
    :param memory_mib: the GPU's framebuffer (MiB), or None.
    """
    if not _model_words(name):
        return "GPU"
    model, known = _spec_key(name, memory_mib)
    if not known:
        warnings.warn(
            f"GPU model {name!r} is not in the spec table (known: {', '.join(GPU_SPECS)}): "
            f"modelled as {model!r}, a PCIe gen 3 card without NVLink",
            UserWarning,
            stacklevel=2,
        )
    return model


def _model_words(name: str) -> list[str]:
    """An NVML product name's words (split on ``-``, ``_``, whitespace), vendor words dropped."""
    words = [w for w in re.split(r"[-_\s]+", name.strip()) if w]
    while words and words[0].upper() in (v.upper() for v in VENDOR_PREFIXES):
        words = words[1:]
    return words


def _spec_key(name: str, memory_mib: float | None) -> tuple[str, bool]:
    """:func:`gpu_model_from_nvml` without its warning: ``(model, whether GPU_SPECS knows it)``."""
    words = _model_words(name)
    if not words:
        return "GPU", False
    first = words[0].upper()
    known = [
        k
        for k in GPU_SPECS
        if first.startswith(k.upper()) and not first[len(k) : len(k) + 1].isdigit()
    ]
    if not known:
        return "-".join(words), False
    model = max(known, key=len)
    sizes = [int(m.group(1)) for w in words[1:] if (m := re.fullmatch(r"(\d+)GB", w.upper()))]
    gib = sizes[0] if sizes else round(memory_mib / 1024) if memory_mib else None
    if gib is not None and f"{model}M{gib}" in GPU_SPECS:
        return f"{model}M{gib}", True
    return model, True


def _bus_id(pci: Any) -> str:
    bid = getattr(pci, "busId", b"")
    if isinstance(bid, bytes):
        bid = bid.decode(errors="replace")
    return str(bid).strip("\x00").lower()


def discover_local_fleet(
    cluster: str = "local", region: str = "local", node_name: str | None = None
) -> Fleet:
    """Discover this host's GPUs through NVML (pynvml) as a one-node fleet.

    Per GPU pair: ``nvmlDeviceGetTopologyCommonAncestor`` gives the PCIe level
    (INTERNAL/SINGLE/MULTIPLE/HOSTBRIDGE/NODE/SYSTEM -> BRD/PIX/PXB/PHB/NODE/SYS); NVLinks are counted
    over the links whose ``nvmlDeviceGetNvLinkState`` is enabled, matching
    ``nvmlDeviceGetNvLinkRemotePciInfo`` bus ids to the peer's. Links that end on an NVSwitch (no GPU
    has that bus id and ``nvmlDeviceGetNvLinkRemoteDeviceType`` says SWITCH; every such link where
    the driver lacks that call) give every pair of switch-attached GPUs ``min`` of their switch
    link counts, as ``nvidia-smi topo -m`` shows on DGX A100/H100; links to a CPU (IBM POWER9's
    NPU) connect no pair. NUMA (:func:`_numa_ids`): each GPU's NUMA affinity as the driver or the
    kernel numbers it (``nvmlDeviceGetMemoryAffinity``, else the PCI device's sysfs ``numa_node``;
    what ``nvidia-smi topo -m`` prints under "NUMA Affinity", not renumbered), else, when a GPU has
    neither, groups of GPUs not separated by ``SYS`` numbered 0, 1, ...

    The one node is named by :func:`local_node_name`: ``node_name`` when given, else ``NODE_NAME``
    (the Kubernetes Node a pod runs on, which differs from the pod's hostname), else this host's
    name. The GPU model is the spec-table key of the first GPU's NVML name
    (:func:`gpu_model_from_nvml`).

    :raises NotAvailableError: NVML (library or driver) is absent or fails; the message names the
        alternatives (``--topology FILE.yaml`` or ``--topology openb``).
    """
    try:
        import pynvml
    except ImportError:
        raise NotAvailableError(
            f"GPU discovery needs the nvidia-ml-py package (pynvml); {NOT_AVAILABLE_HINT}"
        ) from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        raise NotAvailableError(
            f"NVML is not available on this host ({err}); {NOT_AVAILABLE_HINT}"
        ) from None
    try:
        return _discover(pynvml, cluster, region, node_name)
    except pynvml.NVMLError as err:
        raise NotAvailableError(f"NVML query failed ({err}); {NOT_AVAILABLE_HINT}") from None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # pragma: no cover - shutdown failures are irrelevant here
            pass


def _discover(nv: Any, cluster: str, region: str, node_name: str | None = None) -> Fleet:
    g = int(nv.nvmlDeviceGetCount())
    if g == 0:
        raise NotAvailableError(f"NVML found no GPUs on this host; {NOT_AVAILABLE_HINT}")
    handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(g)]
    names = []
    for h in handles:
        nm = nv.nvmlDeviceGetName(h)
        names.append(nm.decode() if isinstance(nm, bytes) else str(nm))
    buses = [_bus_id(nv.nvmlDeviceGetPciInfo(h)) for h in handles]
    level = np.full((g, g), int(LinkLevel.X), dtype=np.int8)
    for i in range(g):
        for j in range(i + 1, g):
            raw = int(nv.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j]))
            level[i, j] = level[j, i] = int(NVML_LEVELS.get(raw, LinkLevel.SYS))
    nvl = np.zeros((g, g), dtype=np.int8)
    to_switch = np.zeros(g, dtype=np.int64)
    # at most the largest NV# a fleet file takes, so what discovery writes loads again
    max_links = min(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)), nvlink_max_links())
    enabled = int(getattr(nv, "NVML_FEATURE_ENABLED", 1))
    bus_to_gpu = {b: i for i, b in enumerate(buses)}
    for i, h in enumerate(handles):
        for link in range(max_links):
            try:
                if int(nv.nvmlDeviceGetNvLinkState(h, link)) != enabled:
                    continue
                remote = _bus_id(nv.nvmlDeviceGetNvLinkRemotePciInfo(h, link))
            except nv.NVMLError:
                continue  # link not supported on this GPU / driver
            j = bus_to_gpu.get(remote)
            if j is None:
                if _remote_is_switch(nv, h, link):
                    to_switch[i] += 1
            elif j != i:
                nvl[i, j] += 1
    # Count each direction once: a bonded pair is seen from both ends.
    nvl = np.minimum(nvl, nvl.T)
    sw = np.flatnonzero(to_switch > 0)
    for a in sw:
        for b in sw:
            if a != b:
                nvl[a, b] = max(int(nvl[a, b]), int(min(to_switch[a], to_switch[b])))
    numa = _numa_ids(nv, handles, buses, level)
    model = gpu_model_from_nvml(names[0], _memory_mib(nv, handles[0]))
    host = local_node_name(node_name)
    tpl = NodeTemplate(
        name=f"nvml-{host}",
        gpu_model=model,
        n_gpus=g,
        level=level,
        nvlinks=nvl,
        numa=numa,
        board=_boards(level),
        pcie_gen=gpu_spec(model).pcie_gen,
        nvlink_gbps=gpu_spec(model).nvlink_gbps or 25.0,
        numa_nodes=int(numa.max()) + 1,
        description=f"discovered through NVML on {host}: {', '.join(sorted(set(names)))}",
    )
    cpu = (os.cpu_count() or 1) * 1000
    try:
        mem = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        mem = 0
    fleet = Fleet("local", [Cluster(cluster, region)], [tpl], [host], [0], [0], [cpu], [mem])
    fleet.source = "nvml"
    return fleet


NVML_NVLINK_DEVICE_TYPE_GPU = 0
NVML_NVLINK_DEVICE_TYPE_IBMNPU = 1
NVML_NVLINK_DEVICE_TYPE_SWITCH = 2
"""``nvmlDeviceGetNvLinkRemoteDeviceType``'s answers (``nvmlIntNvLinkDeviceType_t`` in ``nvml.h``
and nvidia-ml-py's ``pynvml.py``: GPU 0, IBM NPU 1, SWITCH 2, UNKNOWN 0xFF)."""


def _remote_is_switch(nv: Any, handle: Any, link: int) -> bool:
    """Whether an NVLink whose remote bus id is no GPU ends on an NVSwitch.

    ``nvmlDeviceGetNvLinkRemoteDeviceType`` tells: only ``GPU`` (0) and ``IBMNPU`` (1) are no
    switch link (the links of an IBM POWER9 host's V100s to the CPU connect no GPU pair). Where
    the call is absent or fails (older drivers lack it, or answer NotSupported) or answers
    ``UNKNOWN`` (0xFF), the link is taken as a switch link, as before the call existed: the switch
    systems of those drivers (DGX-2, HGX-2) are the common case.
    """
    getter = getattr(nv, "nvmlDeviceGetNvLinkRemoteDeviceType", None)
    if getter is None:
        return True
    try:
        kind = int(getter(handle, link))
    except Exception:  # noqa: BLE001 - NVMLError (NotSupported, FunctionNotFound): as before
        return True
    return kind not in (NVML_NVLINK_DEVICE_TYPE_GPU, NVML_NVLINK_DEVICE_TYPE_IBMNPU)


def _memory_mib(nv: Any, handle: Any) -> float | None:
    """A GPU's framebuffer (MiB) from ``nvmlDeviceGetMemoryInfo``, or None when NVML has none."""
    try:
        return float(nv.nvmlDeviceGetMemoryInfo(handle).total) / 2**20
    except Exception:  # noqa: BLE001 - NVMLError, or a stand-in without the call: no size
        return None


PCI_DEVICES_DIR = Path("/sys/bus/pci/devices")
"""Linux's PCI device folders (``<domain>:<bus>:<device>.<function>``, lower-case hex, 4-digit
domain); each holds ``vendor`` and ``numa_node`` (-1 where the kernel has no NUMA node for it)."""

PCI_VENDOR_NVIDIA = "0x10de"
"""The ``vendor`` file of an NVIDIA PCI function."""

NUMA_NODE_SET_WORDS = 16
"""64-bit words of the node set asked of ``nvmlDeviceGetMemoryAffinity``: NUMA nodes 0 to 1023
(Linux's ``CONFIG_NODES_SHIFT`` of 10, its largest)."""

_PCI_BUS_ID = re.compile(r"([0-9a-f]{1,8}):([0-9a-f]{2}:[0-9a-f]{2}\.[0-7])")


def _memory_affinity_node(nv: Any, handle: Any) -> int | None:
    """The one NUMA node of ``nvmlDeviceGetMemoryAffinity(handle, nodeSetSize,
    NVML_AFFINITY_SCOPE_NODE)`` (the node whose memory is nearest the GPU), or None where the call
    is absent, fails (NotSupported, an older driver's FunctionNotFound) or sets no bit or more
    than one: nvml.h says that where the scope does not apply, NVML reports the affinity of the
    GPU's immediate non-I/O ancestor, which can span several nodes (``nvidia-smi topo -m`` prints
    ``0-1``), so a set of nodes names none of them."""
    getter = getattr(nv, "nvmlDeviceGetMemoryAffinity", None)
    if getter is None:
        return None
    scope = int(getattr(nv, "NVML_AFFINITY_SCOPE_NODE", 0))
    try:
        words = [int(w) for w in getter(handle, NUMA_NODE_SET_WORDS, scope)]
    except Exception:  # noqa: BLE001 - NVMLError, or a stand-in without the call: not known
        return None
    mask = 0
    for k, word in enumerate(words):
        mask |= (word & ((1 << 64) - 1)) << (64 * k)
    if mask == 0 or mask & (mask - 1):  # no node, or several: not one node's memory
        return None
    return mask.bit_length() - 1


def _sysfs_numa_node(bus_id: str) -> int | None:
    """The kernel's NUMA node of the NVIDIA PCI function ``bus_id`` (NVML's ``00000000:C4:00.0``,
    read as sysfs's ``0000:c4:00.0``): :data:`PCI_DEVICES_DIR`'s ``numa_node``, or None where the
    folder is absent, is no NVIDIA device, or says -1 (unknown)."""
    m = _PCI_BUS_ID.fullmatch(bus_id.strip().lower())
    if m is None:
        return None
    folder = PCI_DEVICES_DIR / f"{int(m.group(1), 16):04x}:{m.group(2)}"
    try:
        if (folder / "vendor").read_text().strip().lower() != PCI_VENDOR_NVIDIA:
            return None
        node = int((folder / "numa_node").read_text().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def _numa_ids(nv: Any, handles: list[Any], buses: list[str], level: np.ndarray) -> np.ndarray:
    """``(G,)`` NUMA node of each GPU (``buses``: their PCI bus ids, lower case), as
    ``nvidia-smi topo -m``'s "NUMA Affinity" column.

    Per GPU: the node of ``nvmlDeviceGetMemoryAffinity`` (scope NODE) where it names exactly one,
    else the PCI device's sysfs ``numa_node``; the ids are kept as the driver and the kernel number
    them (``3 3 1 1 7 7 5 5`` on a DGX A100 with its EPYCs in NPS4 mode).
    ``nvmlDeviceGetNumaNodeId`` is not read: it is the "GPU NUMA ID" column, the GPU's own memory
    as a NUMA node where the GPU is one (the CPU-less HBM node of a Grace Hopper GH200),
    NotSupported on x86 hosts. When some GPU has neither answer, the GPUs not separated by ``SYS``
    form groups numbered 0, 1, ...
    """
    g = len(handles)
    ids: list[int | None] = []
    for h, bus in zip(handles, buses, strict=True):
        node = _memory_affinity_node(nv, h)
        ids.append(_sysfs_numa_node(bus) if node is None else node)
    if all(x is not None for x in ids):
        return np.array(ids, dtype=np.int64)
    numa = np.full(g, -1, dtype=np.int64)
    nxt = 0
    for i in range(g):
        if numa[i] < 0:
            same = (level[i] != LinkLevel.SYS) & (numa < 0)
            numa[same] = nxt
            numa[i] = nxt
            nxt += 1
    return numa


def _boards(level: np.ndarray) -> np.ndarray:
    g = level.shape[0]
    board = np.arange(g, dtype=np.int64)
    for i in range(g):
        for j in range(i):
            if level[i, j] == LinkLevel.BRD:
                board[i] = board[j]
                break
    return board


def load_fleet(spec: str, n_clusters: int = 1, seed: int = 0) -> Fleet:
    """Resolve a ``--topology`` value: ``"openb"``, ``"nvml"``, a YAML file path or the name of a
    packaged example fleet (``small``, ``example_multicluster``; :func:`resolve_fleet_path`)."""
    if spec == "openb":
        return load_openb_fleet(n_clusters=n_clusters, seed=seed)
    if spec == "nvml":
        return discover_local_fleet()
    if n_clusters != 1:
        raise ConfigError("--clusters applies to --topology openb only; a YAML file sets clusters")
    return load_fleet_yaml(spec)
