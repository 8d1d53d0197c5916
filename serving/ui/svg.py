"""Server-side SVG: each cause's propagation graph, and an incident's alert timeline.

No layout library and no JavaScript. A cause's graph is the shortest-path tree from the cause to
the incident's alerting nodes it explains (:func:`fleetmind.serving.ui.router.explained_alerting`: those a fault of it reaches
along dependencies, the notifier's rule), drawn in layers, one column per hop (:func:`tree_svg`),
with the ranker's own path (laid down first, hop by hop as given) in bold; the alerting nodes it
does not explain are listed under the drawing.
When the cause is not in the served graph (it was replaced since), the stored path alone is drawn
as a chain (:func:`path_svg`). Every box is sized from its label; output is SVG text with labels
escaped, scaled by ``viewBox``.
"""

from __future__ import annotations

import threading
import unicodedata
import weakref
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from html import escape
from itertools import accumulate

from fleetmind.data.graph import DependencyGraph
from fleetmind.redact import (
    can_cut,
    char_width,
    display_width,
    head_in_width,
    tail_in_width,
)
from fleetmind.serving.graphstore import barrier_nodes, shared_nodes

KIND_COLOURS = {
    "service": "#2563eb",
    "pod": "#7c3aed",
    "host": "#0f766e",
    "gpu": "#b45309",
    "link": "#be185d",
    "cluster": "#475569",
    "registry": "#0369a1",
    "dns": "#0369a1",
    "config": "#0369a1",
}
_CHAR_W = 7.6  # px per column (display_width: a CJK character takes 2) of the 12.5 px label font
_BOX_H = 46
_GAP_X = 64
_GAP_Y = 40
_PAD = 12
_MAX_LABEL = 40
_CUT_NOTE_H = 24  # px under a tree for each line of note (cut walk, nodes not explained)
_Adjacency = dict[str, list[tuple[str, str]]]
_LINE = "#7c8aa0"
"""A plain box's outline and a thin edge: 3.5:1 on the white card (WCAG 2.1 SC 1.4.11, non-text
contrast, asks 3:1 of the parts of a graphic needed to understand it; ``#cbd5e1`` was 1.48:1)."""
MIN_FONT_PX = 10.0
"""The smallest text a drawing may show on screen, in CSS px (the operators' guide promises it)."""
SMALL_FONT_PX = 11.0
"""The smallest font size used in any drawing (kind tags, edge labels, the timeline), in px."""
MIN_SCALE = MIN_FONT_PX / SMALL_FONT_PX
"""Drawings shrink to fit their card down to this scale, so that their smallest text stays
:data:`MIN_FONT_PX` or more; wider ones scroll inside their box."""

# Advance widths of DejaVu Sans (what ``system-ui``/``sans-serif`` is on most Linux desktops, and
# wider than Helvetica, Arial or Segoe UI), in em, read from the font's horizontal metrics: a
# label estimated with them fits in any of those fonts.
_SANS_EM = {
    **dict.fromkeys("ijlI.,:;'|!· ", 0.32),
    **dict.fromkeys("ftr()[]/-J", 0.42),
    **dict.fromkeys("_sczkvxyELFTPYS", 0.64),
    **dict.fromkeys("abdeghnopqu0123456789", 0.64),
    **dict.fromkeys("ABKRVXZCU", 0.74),
    **dict.fromkeys("DGHNOQ", 0.79),
    **dict.fromkeys("mMw#%", 0.98),
    "W": 0.99,
    # bidi controls (LRE..RLO, LRI..PDI, LRM, RLM, ALM) take no room
    **dict.fromkeys(
        "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c", 0.0
    ),
}
_BOLD = 1.12  # DejaVu Sans Bold is about this much wider than Book


_REORDERING = frozenset(
    {"R", "AL", "AN", "LRE", "RLE", "LRO", "RLO", "PDF", "LRI", "RLI", "FSI", "PDI", "B"}
)
"""Bidi classes (Unicode TR9, table 4) of the characters that can move text around them:
right-to-left letters, Arabic digits, the explicit embeddings, overrides and isolates, and the
paragraph separators (``B``, see :func:`one_paragraph`), after which a control would reach past
the isolate around the text. Text without any is left-to-right, and in a left-to-right page
reorders nothing."""
_FSI, _PDI = "\u2068", "\u2069"


def one_paragraph(text: str) -> str:
    """``text`` with each paragraph separator (bidi class ``B``: LF, CR, U+001C..U+001E, U+0085
    NEL, U+2029; all legal in a Prometheus label value) shown as a space, for display only. A
    paragraph separator ends every isolate open before it (Unicode TR9 rule X8), so a right-to-left
    override after one would run on past the isolate, or the ``<bdi>`` element (Chromium splits
    it there), into the text that follows."""
    if not any(unicodedata.bidirectional(ch) == "B" for ch in text):
        return text
    return "".join(" " if unicodedata.bidirectional(ch) == "B" else ch for ch in text)


def isolate(text: str) -> str:
    """``text`` as a bidi isolate (Unicode TR9 section 2.7: U+2068 FSI ... U+2069 PDI) when it
    holds a character that can reorder what is around it (:data:`_REORDERING`: a right-to-left
    letter, or a control such as U+202E RIGHT-TO-LEFT OVERRIDE, legal in a Prometheus label
    value); other text is returned as it is (nothing to isolate, and copied text stays clean).

    For display only, never for stored data: each paragraph separator is shown as a space
    (:func:`one_paragraph`: one would end the isolate and let an override after it run on into
    the text that follows); a PDI in ``text`` that closes nothing of its own (it would close
    this isolate early) is left out; and isolates ``text`` opens and leaves open are closed, so
    nothing of ``text`` reaches past its end. Drawn text, ``<title>`` tooltips and HTML
    attributes use it; HTML text uses ``<bdi>`` elements."""
    if not any(unicodedata.bidirectional(ch) in _REORDERING for ch in text):
        return text
    return _FSI + balanced(one_paragraph(text)) + _PDI


_ISOLATE_OPEN = frozenset("\u2066\u2067\u2068")  # LRI, RLI, FSI


def balanced(text: str) -> str:
    """``text`` with its isolates balanced, for display inside an isolate (:func:`isolate`) or a
    ``<bdi>`` element (which Chromium lays out as text between U+2068 FSI and U+2069 PDI): a PDI
    that closes no isolate ``text`` opened is left out (it would close the isolate around the
    text early, and an override after it would reverse the text beside it), and the isolates
    ``text`` opens and leaves open are closed at its end (else the isolate around it would end
    at the next PDI outside it). Embeddings and overrides (U+202A..U+202E) need no closing: the
    end of the isolate around the text ends them (Unicode TR9 rule X6a). Text without an isolate
    control is returned as it is."""
    if not any(ch in _ISOLATE_OPEN or ch == _PDI for ch in text):
        return text
    out = []
    depth = 0
    for ch in text:
        if ch in _ISOLATE_OPEN:
            depth += 1
        elif ch == _PDI:
            if depth == 0:
                continue
            depth -= 1
        out.append(ch)
    return "".join(out) + _PDI * depth


def text_width(text: str, size: float, bold: bool = False) -> float:
    """Estimated width in px of ``text`` set in the pages' sans-serif font at ``size`` px; an
    over-estimate rather than an under-estimate (characters outside the table count 1 em, a
    CJK ideograph's width; those that take no room, such as combining marks, ZWJ and variation
    selectors, :func:`~fleetmind.redact.char_width` 0, count 0)."""
    em = sum(_SANS_EM.get(ch, 1.0 if char_width(ch) else 0.0) for ch in text)
    return em * size * (_BOLD if bold else 1.0)


@dataclass
class _Box:
    node: str
    kind: str
    x: float
    y: float
    w: float


def short_id(node: str, limit: int = _MAX_LABEL) -> str:
    """A node id shortened to at most ``limit`` columns (:func:`~fleetmind.redact.display_width`:
    a CJK character takes 2): the middle gives way, so the cluster (its first segment) and the
    node's own name (its end) stay readable. Cut only where
    :func:`~fleetmind.redact.can_cut` allows: never inside an emoji ZWJ sequence or before a
    combining mark."""
    if display_width(node) <= limit:
        return node
    if "/" in node:  # a node id: its cluster, then the end of its own name
        head = head_in_width(node.split("/", 1)[0], limit // 3) + "/…"
    else:
        head = head_in_width(node, limit // 2) + "…"
    return head + tail_in_width(node, limit - display_width(head))


def _svg_open(
    width: float, height: float, title: str, cls: str = "path-graph", text_id: str = ""
) -> str:
    """The ``<svg>`` start tag of a drawing: natural size, shrinkable to :data:`MIN_SCALE` of it
    (a CSS ``min-width``: a narrower box scrolls); with ``text_id``, described by the element of
    that id (``aria-describedby``: its text equivalent, :func:`tree_text`)."""
    described = f' aria-describedby="{escape(text_id)}"' if text_id else ""
    return (
        f'<svg class="{cls}" role="img"{described} viewBox="0 0 {width:.0f} {height:.0f}" '
        f'width="{width:.0f}" height="{height:.0f}" style="min-width:{MIN_SCALE * width:.0f}px" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>'
    )


def _arrow_defs(marker_id: str) -> str:
    """The ``<defs>`` of a drawing's arrowhead, ``<marker id="marker_id">``."""
    return (
        f'<defs><marker id="{escape(marker_id)}" viewBox="0 0 10 10" refX="9" refY="5" '
        'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
        '<path d="M0,0 L10,5 L0,10 z" fill="#64748b"/></marker></defs>'
    )


def edge_kinds(graph: DependencyGraph | None, path: Sequence[str]) -> list[str]:
    """The edge kind between each consecutive pair of ``path`` (either direction; ``""`` if none)."""
    if graph is None:
        return [""] * max(0, len(path) - 1)
    pairs = {(e.src, e.dst): e.kind for e in graph.edges} if len(graph.edges) < 200_000 else {}
    out = []
    for a, b in zip(path, path[1:], strict=False):
        out.append(pairs.get((a, b)) or pairs.get((b, a)) or "")
    return out


def path_svg(
    path: Sequence[str],
    kinds: Mapping[str, str],
    alerting: set[str],
    edges: Sequence[str] = (),
    per_row: int = 4,
    title: str = "",
    marker_id: str = "arrow",
    text_id: str = "",
) -> str:
    """An SVG of a propagation path.

    Args:
        path: node ids from the cause (first) to an alerting node (last).
        kinds: node id -> kind (colours the box's kind tag).
        alerting: node ids with a firing alert (drawn with a red outline and a dot).
        edges: the edge kind between consecutive nodes (label on the arrow), ``len(path) - 1``.
        per_row: boxes per row before the chain wraps (snake layout).
        title: accessible title of the figure.
        marker_id: the id of its arrowhead ``<marker>``, unique in the page when a page shows
            several drawings (ids are document-wide: ``arrow-1``, ``arrow-2``...).
        text_id: the id of its text equivalent in the page (:func:`path_text`), which
            describes it (``aria-describedby``); none when empty.
    """
    if not path:
        return ""
    widths = [_box_w(n, kinds.get(n, "?"), i == 0, 120.0) for i, n in enumerate(path)]
    col_w = max(widths)
    # a label on a row's arrow sits in the gap between two boxes: the gap fits the longest
    gap_x = max([_GAP_X] + [text_width(k, SMALL_FONT_PX) + 16 for k in edges])
    boxes: list[_Box] = []
    for i, n in enumerate(path):
        row, col = divmod(i, per_row)
        if row % 2 == 1:  # snake: odd rows run right to left
            col = per_row - 1 - col
        x = _PAD + col * (col_w + gap_x)
        y = _PAD + row * (_BOX_H + _GAP_Y)
        boxes.append(_Box(n, kinds.get(n, "?"), x + (col_w - widths[i]) / 2, y, widths[i]))
    ncols = min(per_row, len(path))
    nrows = (len(path) - 1) // per_row + 1
    width = 2 * _PAD + ncols * col_w + (ncols - 1) * gap_x
    height = 2 * _PAD + nrows * _BOX_H + (nrows - 1) * _GAP_Y
    out = [
        _svg_open(width, height, title or " → ".join(map(isolate, path)), text_id=text_id),
        _arrow_defs(marker_id),
    ]
    for i in range(len(boxes) - 1):
        a, b = boxes[i], boxes[i + 1]
        if abs(a.y - b.y) < 1:  # same row
            if b.x > a.x:
                x1, x2 = a.x + a.w, b.x
            else:
                x1, x2 = a.x, b.x + b.w
            y1 = y2 = a.y + _BOX_H / 2
        else:  # down to the next row
            x1 = x2 = a.x + a.w / 2
            y1, y2 = a.y + _BOX_H, b.y
        out.append(
            f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="#64748b" '
            f'stroke-width="1.6" marker-end="url(#{escape(marker_id)})"/>'
        )
        label = edges[i] if i < len(edges) else ""
        if label:
            out.append(
                f'<text class="edge" x="{(x1 + x2) / 2 + (6 if x1 == x2 else 0):.1f}" '
                f'y="{(y1 + y2) / 2 - 5:.1f}" text-anchor="{"start" if x1 == x2 else "middle"}" '
                f'font-size="{SMALL_FONT_PX:g}" fill="#64748b">{escape(label)}</text>'
            )
    for i, b in enumerate(boxes):
        out.append(_box(b.node, b.kind, b.x, b.y, b.w, i == 0, b.node in alerting))
    out.append("</svg>")
    return "".join(out)


MAX_TREE_NODES = 50_000
"""The most nodes :func:`propagation_tree` visits from a cause (tens of milliseconds): past them
the walk stops and the drawing says it was cut. On a 200,000-node graph a walk from a node every
service depends on (a global DNS) would otherwise cover most of the graph on every view of the
incident page."""


class TreeDepths(dict[str, int]):
    """What :func:`propagation_tree` returns first: node id -> hops from the cause.

    Attributes:
        cut: the walk stopped at its node limit (:data:`MAX_TREE_NODES`, or the caller's
            ``max_nodes``) before it had reached every alerting node it could: ones farther from
            the cause may be missing (:func:`tree_svg` says so under the drawing).
        visited: how many nodes the walk visited (reached), the cause included.
    """

    cut: bool = False
    visited: int = 0


_ADJ: weakref.WeakKeyDictionary[DependencyGraph, tuple[_Adjacency, frozenset[str]]] = (
    weakref.WeakKeyDictionary()
)
_REACH: weakref.WeakKeyDictionary[
    DependencyGraph, tuple[Mapping[str, Sequence[str]], _Adjacency]
] = weakref.WeakKeyDictionary()
_ADJ_LOCK = threading.Lock()


def _adjacency(graph: DependencyGraph) -> tuple[_Adjacency, frozenset[str]]:
    """Undirected adjacency ``node -> [(neighbour, edge kind)]``, each list sorted by neighbour id
    (stable: edges between one pair keep the graph's order), and the ids of the nodes a walk does
    not cross (incident grouping's rule: ``cluster`` nodes and Services that ``runs_on`` several
    hosts, :func:`~fleetmind.serving.graphstore.barrier_nodes`, and infrastructure several clusters
    depend on, :func:`~fleetmind.serving.graphstore.shared_nodes`); built once per graph object."""
    with _ADJ_LOCK:
        hit = _ADJ.get(graph)
        if hit is None:
            adj: _Adjacency = {}
            for e in graph.edges:
                adj.setdefault(e.src, []).append((e.dst, e.kind))
                adj.setdefault(e.dst, []).append((e.src, e.kind))
            for nbrs in adj.values():
                nbrs.sort(key=lambda t: t[0])
            stops = barrier_nodes(graph) | shared_nodes(graph)
            barriers = frozenset(graph.nodes[i].id for i in stops)
            hit = _ADJ[graph] = (adj, barriers)
        return hit


def _directed(graph: DependencyGraph, reach: Mapping[str, Sequence[str]]) -> _Adjacency:
    """``reach`` (node -> the nodes a fault of it reaches in one hop, on ``graph``) as
    ``node -> [(node reached, edge kind)]``, sorted by node id, the kind that of an edge between
    the two (either direction); built once per graph object and table."""
    with _ADJ_LOCK:
        hit = _REACH.get(graph)
        if hit is None or hit[0] is not reach:
            kinds: dict[tuple[str, str], str] = {}  # (src, dst) -> the first edge's kind
            for e in graph.edges:
                kinds.setdefault((e.src, e.dst), e.kind)
            table: _Adjacency = {
                u: sorted({(v, kinds.get((v, u)) or kinds.get((u, v), "")) for v in vs})
                for u, vs in reach.items()
            }
            hit = _REACH[graph] = (reach, table)
        return hit[1]


def _path_chain(adj: _Adjacency, cause: str, path: Sequence[str]) -> list[tuple[str, str]]:
    """The longest prefix of the ranker's ``path`` that is a walk of the graph from ``cause``
    without a repeated node, as ``(node, edge kind from its predecessor)`` (the cause's kind
    ``""``); empty when the path does not start at ``cause``. A hop the served graph lacks (such
    as the per-incident pod->GPU edge the ranker may add from alert labels) ends it."""
    if not path or path[0] != cause:
        return []
    chain = [(cause, "")]
    seen = {cause}
    for a, b in zip(path, path[1:], strict=False):
        kind = next((k for v, k in adj.get(a, []) if v == b), None)
        if kind is None or b in seen:
            break
        chain.append((b, kind))
        seen.add(b)
    return chain


def _walk(
    graph: DependencyGraph,
    cause: str,
    path: Sequence[str],
    wanted: set[str],
    max_depth: int,
    max_nodes: int,
    alerting: Set[str] = frozenset(),
    reach: Mapping[str, Sequence[str]] | None = None,
) -> tuple[TreeDepths, dict[str, tuple[str, str]], dict[str, int]]:
    """Breadth-first from ``cause`` (see :func:`propagation_tree`), then the ranker's ``path``
    overlaid for drawing: ``(depth, parent, dist)``, parent being ``(node, edge kind)`` and
    ``dist`` each walked node's true distance in hops from ``cause``.

    The walk is a plain shortest-path walk up to ``max_depth`` hops, along ``reach`` (node -> the
    nodes a fault of it reaches in one hop) where given, else along edges in both directions,
    that does not cross a barrier node: a node of the path is expanded at its true distance, however late it comes on the path.
    It stops once every node of ``wanted`` is reached (farther nodes change nothing the tree keeps;
    the path's nodes the overlay places anyway are waited for only when they alert) or at
    ``max_nodes`` nodes (then ``depth.cut``). The path (as far as the graph has its hops) is
    then laid over it, each of its nodes the child of its predecessor, also past a ``cluster``
    node; a path node the walk did not reach (one behind a barrier) is drawn but not expanded.
    Every node's ``depth`` is its parent's plus one: the column :func:`tree_svg` draws it in."""
    adj, barriers = _adjacency(graph)
    nbrs = adj if reach is None else _directed(graph, reach)
    chain = _path_chain(adj, cause, path)
    dist = {cause: 0}
    parent: dict[str, tuple[str, str]] = {}
    cut = False
    # a target is ranked by its true distance; the path's nodes the overlay places are not waited
    # for (one behind a barrier is never reached: waiting would walk max_nodes) unless they alert
    on_chain = {c for c, _ in chain[1:]}
    left = (wanted - {cause} - on_chain) | (on_chain & set(alerting))
    frontier = [cause]
    level = 0
    while frontier and left and level < max_depth and not cut:
        nxt: list[str] = []
        for u in frontier:
            if u in barriers and u != cause:
                continue
            for v, kind in nbrs.get(u, []):
                if v in dist:
                    continue
                if len(dist) >= max_nodes:
                    cut = True
                    break
                dist[v] = level + 1
                parent[v] = (u, kind)
                nxt.append(v)
                left.discard(v)
                if not left:  # the last target: nothing farther changes the tree
                    break
            if cut or not left:
                break
        level += 1
        frontier = nxt
    for i in range(1, len(chain)):  # the ranker's path, hop by hop, over the walk's tree
        parent[chain[i][0]] = (chain[i - 1][0], chain[i][1])
    depth = TreeDepths({cause: 0})

    for n in [*dist, *(c for c, _ in chain)]:  # parents first, up to a node already placed
        up: list[str] = []
        while n not in depth:
            up.append(n)
            n = parent[n][0]
        for m in reversed(up):
            depth[m] = depth[n] + 1
            n = m
    depth.cut, depth.visited = cut, len(dist)
    return depth, parent, dist


def propagation_tree(
    graph: DependencyGraph,
    cause: str,
    alerting: set[str],
    path: Sequence[str] = (),
    max_depth: int = 4,
    max_targets: int = 12,
    max_nodes: int = MAX_TREE_NODES,
    reach: Mapping[str, Sequence[str]] | None = None,
) -> tuple[TreeDepths, list[tuple[str, str, str]]]:
    """How a fault at ``cause`` reaches the incident's alerting nodes: a shortest-path tree.

    Breadth-first from ``cause``, up to ``max_depth`` hops, along ``reach``: node id -> the node
    ids a fault of it reaches in one hop (the incident page passes the notifier's table,
    :func:`~fleetmind.serving.incidents.manager.dependents`: what depends on a node, a pod's
    Service, a link's GPUs; never from a pod to its host or GPU); without it, along the graph's
    edges in both directions (a neighbourhood, not what a fault explains). Nodes incident
    grouping does not cross are reached but not crossed (``cluster`` nodes, Services that ``runs_on`` several hosts, such as the kubelet's, and infrastructure several
    clusters depend on, such as a global DNS: see :func:`~fleetmind.serving.graphstore.barrier_nodes`
    and :func:`~fleetmind.serving.graphstore.shared_nodes`). The walk visits at most ``max_nodes``
    nodes (then the returned depths' ``cut`` is set). The tree keeps the nodes on the paths to the
    first ``max_targets`` alerting nodes reached (nearest first, by true distance), and the
    ranker's own ``path``: its hops are the tree's edges (laid over the walk's tree, so a path
    longer than the shortest route, or one that crosses a ``cluster`` node, is drawn as the ranker
    gave it), up to the first hop the graph lacks. The walk expands each path node at its true
    distance (what hangs off it is drawn under it, one column further per hop) and does not go on
    from a path node behind a node it does not cross.

    Returns:
        ``(depth, edges)``: node id -> the column it is drawn in, its parent's plus one (a
        :class:`TreeDepths`; hops from ``cause`` along the drawn tree), and
        ``(parent, child, edge kind)``.
    """
    if cause not in graph.index:
        return TreeDepths(), []
    whole_path = all(n in graph.index for n in path)
    wanted = {n for n in alerting if n in graph.index} | (set(path) if whole_path else set())
    depth, parent, dist = _walk(graph, cause, path, wanted, max_depth, max_nodes, alerting, reach)
    targets = sorted(
        (n for n in alerting if n in depth and n != cause),
        key=lambda n: (dist.get(n, depth[n]), n),
    )
    keep = {cause} | {n for n in path if n in depth}  # up to a hop the graph lacks, too
    for t in targets[:max_targets]:
        n = t
        while n != cause and n not in keep:
            keep.add(n)
            n = parent[n][0]
    for n in list(keep):  # the ranker's path may not be a BFS-tree path: keep its parents too
        while n != cause and n in parent and parent[n][0] not in keep:
            n = parent[n][0]
            keep.add(n)
    edges = [(parent[n][0], n, parent[n][1]) for n in sorted(keep) if n != cause and n in parent]
    kept = TreeDepths({n: depth[n] for n in keep})
    kept.cut, kept.visited = depth.cut, depth.visited
    return kept, edges


MAX_UNEXPLAINED_LISTED = 8
"""Most alerting nodes a cause does not explain that :func:`tree_svg` names under its drawing
(then how many more)."""


def _unexplained_note(unexplained: Sequence[str], html: bool = False) -> str:
    """The line under a drawing naming the alerting nodes its cause does not explain, each id cut
    like a box's label (:func:`short_id`, at most :data:`_MAX_LABEL` columns); with ``html``, the
    same line as HTML for its text equivalent (:func:`tree_text`), each id whole (:func:`_bdi`)."""
    if not unexplained:
        return ""
    names = sorted(unexplained)[:MAX_UNEXPLAINED_LISTED]
    shown = ", ".join(_bdi(n) if html else isolate(short_id(n)) for n in names)
    more = len(unexplained) - MAX_UNEXPLAINED_LISTED
    tail = f" and {more:,} more" if more > 0 else ""
    return f"Not explained by this cause (no dependency path from it): {shown}{tail}"


def _tree_notes(depth: Mapping[str, int], unexplained: Sequence[str]) -> list[tuple[str, str]]:
    """The lines under a tree drawing, ``(class, text)``: the walk was cut (``depth.cut``), the
    alerting nodes its cause does not explain."""
    notes: list[tuple[str, str]] = []
    if isinstance(depth, TreeDepths) and depth.cut:
        notes.append(
            (
                "cut",
                f"Cut: the walk stopped after {depth.visited:,} nodes; alerting nodes farther "
                "from the cause may be missing",
            )
        )
    if unexplained:
        notes.append(("unexplained", _unexplained_note(unexplained)))
    return notes


def _bdi(text: str) -> str:
    """``text`` escaped in a ``<bdi>`` element, its paragraph separators and isolates made safe
    as :func:`isolate` makes them (HTML text; the pages' ``bdi`` filter does the same)."""
    return f"<bdi>{escape(balanced(one_paragraph(text)))}</bdi>"


def _drawing_text(
    text_id: str,
    steps: Sequence[tuple[str, str, str, bool]],
    kinds: Mapping[str, str],
    state: Mapping[str, str],
    notes: Sequence[tuple[str, str]] = (),
) -> str:
    """A drawing's text equivalent: a visually hidden ``<div id="text_id">`` listing its nodes in
    ``steps`` order, ``(node, node it is reached from or "", edge kind, on the ranker's path)``,
    each with its kind and ``state`` (node -> words such as ``alerting``; ``no firing alert``
    when absent),
    then ``notes`` (``(class, HTML text)``), each a paragraph."""
    items = []
    for node, parent, edge, strong in steps:
        said = state.get(node, "no firing alert")
        line = f"{_bdi(node)} ({escape(kinds.get(node, '?'))}, {said})"
        if parent:
            along = f" along {escape(edge)}" if edge else ""
            line += f": reached from {_bdi(parent)}{along}"
            line += ", on the ranker's path" if strong else ""
        else:
            line += ": the cause"
        items.append(f"<li>{line}.</li>")
    paras = "".join(f'<p class="{cls}">{text}</p>' for cls, text in notes)
    return (
        f'<div class="visually-hidden graph-text" id="{escape(text_id)}">'
        f"<p>Nodes drawn, from the cause:</p><ul>{''.join(items)}</ul>{paras}</div>"
    )


def _tree_children(
    depth: Mapping[str, int], edges: Sequence[tuple[str, str, str]]
) -> tuple[str, dict[str, list[tuple[str, str]]]]:
    """The tree's root (the node of least ``depth``) and each node's ``(child, edge kind)`` list
    from ``edges`` ``(parent, child, kind)``, in their order: shared by the drawing and its text."""
    root = min(depth, key=lambda n: depth[n])
    children: dict[str, list[tuple[str, str]]] = {}
    for a, b, k in edges:
        children.setdefault(a, []).append((b, k))
    return root, children


def tree_text(
    depth: Mapping[str, int],
    edges: Sequence[tuple[str, str, str]],
    kinds: Mapping[str, str],
    alerting: Set[str],
    text_id: str,
    highlight: Sequence[str] = (),
    unexplained: Sequence[str] = (),
) -> str:
    """The text equivalent of :func:`tree_svg` (same arguments), HTML for the page under the
    drawing: screen readers read a ``role="img"`` drawing as its title alone (its children are
    presentational, WAI-ARIA 1.2 "img"), so the drawing names this text by ``text_id``
    (``aria-describedby``). It lists the drawn nodes depth first from the cause, each with its
    kind, whether it alerts (``alerting``: explained; ``unexplained``: alerting, not explained)
    and the node and edge kind it is reached by, then the drawing's notes (walk cut, the alerting
    nodes not explained, each id whole). Empty when ``depth`` is."""
    if not depth:
        return ""
    root, children = _tree_children(depth, edges)
    bold = set(zip(highlight, highlight[1:], strict=False))
    steps: list[tuple[str, str, str, bool]] = []
    stack: list[tuple[str, str, str]] = [(root, "", "")]
    seen: set[str] = set()
    while stack:
        node, parent, kind = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        steps.append((node, parent, kind, (parent, node) in bold))
        kids = sorted(children.get(node, []), key=lambda t: (t[0] not in alerting, t[0]))
        stack.extend((v, node, k) for v, k in reversed(kids))
    others = set(unexplained) - set(alerting)
    state = {n: "alerting" for n in seen if n in alerting}
    state.update({n: "alerting, not explained by this cause" for n in seen if n in others})
    notes = [(c, escape(t)) for c, t in _tree_notes(depth, ())]  # the cut walk's, if any
    if unexplained:
        notes.append(("unexplained", _unexplained_note(unexplained, html=True)))
    return _drawing_text(text_id, steps, kinds, state, notes)


def path_text(
    path: Sequence[str],
    kinds: Mapping[str, str],
    alerting: Set[str],
    text_id: str,
    edges: Sequence[str] = (),
) -> str:
    """The text equivalent of :func:`path_svg` (same arguments; see :func:`tree_text`), drawn
    when the cause is no longer in the served graph: the ranker's stored path from the cause,
    each node with its kind, whether it alerts and the edge kind from the node before it. Empty
    when ``path`` is."""
    if not path:
        return ""
    steps = [
        (n, path[i - 1] if i else "", edges[i - 1] if 0 < i <= len(edges) else "", False)
        for i, n in enumerate(path)
    ]
    state = {n: "alerting" for n in path if n in alerting}
    note = "The ranker's path as stored: the cause is not in the served dependency graph."
    return _drawing_text(text_id, steps, kinds, state, [("stored-path", note)])


def tree_svg(
    depth: Mapping[str, int],
    edges: Sequence[tuple[str, str, str]],
    kinds: Mapping[str, str],
    alerting: set[str],
    highlight: Sequence[str] = (),
    title: str = "",
    marker_id: str = "arrow",
    unexplained: Sequence[str] = (),
    text_id: str = "",
) -> str:
    """A layered drawing of :func:`propagation_tree`: one column per hop, the cause on the left.

    Rows in a column follow their parents' rows (fewer crossings); the edges of ``highlight`` (the
    ranker's path) are drawn bold; alerting nodes get a red outline and dot. A walk that was cut
    (``depth.cut``, see :class:`TreeDepths`) gets a line under the drawing saying so, and the
    alerting nodes the cause does not explain (``unexplained``, :func:`fleetmind.serving.ui.router.explained_alerting`) a
    line naming them (at most :data:`MAX_UNEXPLAINED_LISTED`; the caller leaves them out of
    ``alerting``, so one drawn on the ranker's path has no red outline). ``marker_id`` is the id of its arrowhead ``<marker>`` (unique in the
    page, as in :func:`path_svg`); ``text_id`` that of its text equivalent in the page
    (:func:`tree_text`), which describes it (``aria-describedby``).
    """
    if not depth:
        return ""
    root, children = _tree_children(depth, edges)
    order: dict[str, float] = {root: 0.0}
    layers: list[list[str]] = [[root]]
    while True:
        nxt = []
        for u in layers[-1]:
            for v, _ in sorted(children.get(u, []), key=lambda t: (t[0] not in alerting, t[0])):
                nxt.append(v)
        if not nxt:
            break
        for i, v in enumerate(nxt):
            order[v] = i
        layers.append(nxt)
    widths = {n: _box_w(n, kinds.get(n, "?"), n == root, 110.0) for n in order}
    col_w = [max(widths[n] for n in layer) for layer in layers]
    # each child has one incoming edge, labelled just left of its box: the gap fits the longest
    gap = max([_GAP_X] + [text_width(k, SMALL_FONT_PX) + 34 for _, _, k in edges])
    xs = [_PAD + sum(col_w[:i]) + i * gap for i in range(len(layers))]
    tallest = max(len(layer) for layer in layers)
    row_h = _BOX_H + 16
    height = 2 * _PAD + tallest * row_h - 16
    pos: dict[str, tuple[float, float, float]] = {}
    for li, layer in enumerate(layers):
        top = _PAD + (tallest - len(layer)) * row_h / 2
        for i, n in enumerate(layer):
            w = widths[n]
            pos[n] = (xs[li] + (col_w[li] - w) / 2, top + i * row_h, w)
    width = xs[-1] + col_w[-1] + _PAD
    notes = _tree_notes(depth, unexplained)  # (class, text): lines under the drawing
    for _, note in notes:
        width = max(width, 2 * _PAD + text_width(note, SMALL_FONT_PX))
        height += _CUT_NOTE_H
    bold = set(zip(highlight, highlight[1:], strict=False))
    out = [
        _svg_open(width, height, title or isolate(root), text_id=text_id),
        _arrow_defs(marker_id),
    ]
    for a, b, kind in edges:
        if a not in pos or b not in pos:
            continue
        ax, ay, aw = pos[a]
        bx, by, _ = pos[b]
        x1, y1, x2, y2 = ax + aw, ay + _BOX_H / 2, bx, by + _BOX_H / 2
        mid = (x1 + x2) / 2
        strong = (a, b) in bold
        out.append(
            f'<path d="M{x1:.1f},{y1:.1f} C{mid:.1f},{y1:.1f} {mid:.1f},{y2:.1f} {x2:.1f},{y2:.1f}" '
            f'fill="none" stroke="{"#0f172a" if strong else _LINE}" '
            f'stroke-width="{2.2 if strong else 1.3}" marker-end="url(#{escape(marker_id)})"/>'
            f'<text class="edge" x="{x2 - 8:.1f}" y="{y2 - 6:.1f}" text-anchor="end" '
            f'font-size="{SMALL_FONT_PX:g}" fill="#64748b">{escape(kind)}</text>'
        )
    for n, (x, y, w) in pos.items():
        out.append(_box(n, kinds.get(n, "?"), x, y, w, n == root, n in alerting))
    for i, (cls, note) in enumerate(notes):
        y = height - _PAD - (len(notes) - 1 - i) * _CUT_NOTE_H
        out.append(
            f'<text class="{cls}" x="{_PAD}" y="{y:.1f}" font-size="{SMALL_FONT_PX:g}" '
            f'fill="#64748b">{escape(note)}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def _tag(kind: str, root: bool) -> str:
    """The kind tag above a box's node id (``HOST``; the cause's ``HOST · CAUSE``)."""
    return kind.upper() + (" · CAUSE" if root else "")


def _box_w(node: str, kind: str, root: bool, least: float) -> float:
    """A box's width in px: its node id (12.5 px monospace) or its kind tag (bold, letter-spaced
    0.4 px, clear of the alert dot at the right), whichever is wider, and at least ``least``."""
    tag = _tag(kind, root)
    tag_w = text_width(tag, SMALL_FONT_PX, bold=True) + 0.4 * len(tag)
    return max(least, _CHAR_W * display_width(short_id(node)) + 28, tag_w + 13 + 18)


def _box(node: str, kind: str, x: float, y: float, w: float, root: bool, hot: bool) -> str:
    fill = "#eff6ff" if root else "#ffffff"
    stroke = "#dc2626" if hot else ("#1d4ed8" if root else _LINE)
    colour = KIND_COLOURS.get(kind, "#475569")
    parts = [
        f'<g class="node{" root" if root else ""}{" alerting" if hot else ""}">'
        f"<title>{escape(isolate(node))} ({escape(isolate(kind))})"
        f"{' - firing alert' if hot else ''}</title>"
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{_BOX_H}" rx="7" '
        f'fill="{fill}" stroke="{stroke}" stroke-width="{2 if root or hot else 1.2}"/>'
        f'<rect x="{x + 1:.1f}" y="{y + 6:.1f}" width="4" height="{_BOX_H - 12}" rx="2" '
        f'fill="{colour}"/>'
        f'<text x="{x + 13:.1f}" y="{y + 18:.1f}" font-size="{SMALL_FONT_PX:g}" fill="{colour}" '
        f'font-weight="700" letter-spacing=".4">{escape(_tag(kind, root))}</text>'
        f'<text x="{x + 13:.1f}" y="{y + 35:.1f}" font-size="12.5" fill="#0f172a" '
        f'font-family="ui-monospace,SFMono-Regular,Menlo,monospace">'
        f"{escape(isolate(short_id(node)))}</text>"
    ]
    if hot:
        parts.append(f'<circle cx="{x + w - 10:.1f}" cy="{y + 12:.1f}" r="3.5" fill="#dc2626"/>')
    parts.append("</g>")
    return "".join(parts)


_WHERE_KEEP = (32, 24, 16)
"""Columns a timeline label's node part is cut to, in turn, before its alert name is cut."""


def _cut_middle(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` columns (:func:`~fleetmind.redact.display_width`: a CJK
    character takes 2): its start and (the longer) end, ``…`` between, each cut where
    :func:`~fleetmind.redact.can_cut` allows (never inside an emoji sequence or before an
    accent)."""
    if display_width(text) <= limit:
        return text
    head = head_in_width(text, max(1, (limit - 1) * 2 // 5))
    return head + "…" + tail_in_width(text, limit - 1 - display_width(head))


def _word_ends(text: str) -> list[int]:
    """Where a word of ``text`` ends (a prefix ``text[:i]`` is whole words): before a separator,
    a capital starting a new word (``Gpu|Xid``, ``GPU|Xid``) or a number (``Above|85``). A number
    and the unit after it stay together (``85C``)."""
    ends = []
    for i in range(1, len(text)):
        a, b = text[i - 1], text[i]
        nxt = text[i + 1] if i + 1 < len(text) else ""
        if (
            (a.isalnum() and not b.isalnum())
            or (a.islower() and b.isupper())
            or (a.isupper() and b.isupper() and nxt.islower())
            or (a.isalpha() and b.isdigit())
            or (a.isdigit() and b.isupper() and nxt.islower())
        ):
            ends.append(i)
    return ends


def _cut_words(text: str, room: float, size: float) -> str:
    """``text`` cut after its last whole word that fits ``room`` px with ``…``; a character cut
    when whole words would fill less than half of the room (one long word). Every cut is one
    :func:`~fleetmind.redact.can_cut` allows: never inside an emoji sequence or before an
    accent."""
    if text_width(text, size) <= room:
        return text
    room -= text_width("…", size)
    prefix = list(accumulate((text_width(ch, size) for ch in text), initial=0.0))
    ends = [j for j in _word_ends(text) if can_cut(text, j)]
    i = max((j for j in ends if prefix[j] <= room), default=0)
    if prefix[i] < room / 2:
        i = max((j for j in range(len(text)) if prefix[j] <= room and can_cut(text, j)), default=0)
    return text[:i].rstrip(" _-.:/·") + "…"


def _label(name: str, where: str) -> str:
    """A timeline label, ``name · where`` (or ``name``), each part a bidi isolate (:func:`isolate`):
    a right-to-left override at the end of an alert's name reverses neither its node nor the
    separator."""
    return f"{isolate(name)} · {isolate(where)}" if where else isolate(name)


def _fit_label(name: str, where: str, room: float, size: float) -> str:
    """A timeline label ``name · where`` (:func:`_label`) in at most ``room`` px of ``size`` px
    text: first the node part (``where``) gives way in the middle, down to 16 columns, then
    the alert name is cut at the end of a word (a cut in its middle could drop a number, such as
    a threshold)."""
    full = _label(name, where)
    if text_width(full, size) <= room:
        return full
    cut = where
    for keep in _WHERE_KEEP if where else (0,):
        cut = _cut_middle(where, keep) if where else ""
        if text_width(_label(name, cut), size) <= room:
            return _label(name, cut)
    tail = text_width(_label("", cut), size) if cut else 0.0
    return _label(_cut_words(name, room - tail, size), cut)


def timeline_svg(
    events: Sequence[tuple[float, float | None, str | tuple[str, str], str]],
    width: int = 760,
    row_h: int = 18,
    max_rows: int = 40,
) -> str:
    """Alert bars on a shared time axis.

    Args:
        events: ``(start_s, end_s or None, label, status)`` per alert, Unix seconds; open-ended
            alerts run to the latest time shown. ``label`` is the alert's name, or a pair
            ``(alert name, node)`` drawn as ``name · node``; a label too long for its column (at
            most 40 % of ``width``) is shortened (:func:`_fit_label`), its full text in a
            ``<title>`` (the tooltip).
        width: drawing width in px, shrinking to :data:`MIN_SCALE` of it (then scrolling);
            rows of ``row_h`` px, at most ``max_rows``: the firing alerts first, then the latest
            to start (what on-call needs of a long incident), drawn in order of start.

    A firing bar is solid red, a resolved one grey with a dashed outline (status not told by
    colour alone, WCAG 2.1 SC 1.4.1); each bar's ``<title>`` names its alert, node, status and
    times, and the drawing's title counts the bars of each status.
    """
    if not events:
        return ""
    chosen = sorted(events, key=lambda e: (e[3] != "firing", -e[0]))[:max_rows]
    rows = sorted(chosen, key=lambda e: e[0])
    t0 = min(e[0] for e in rows)
    t1 = max(max(e[0], e[1] or e[0]) for e in rows)
    span = max(t1 - t0, 60.0)
    size = SMALL_FONT_PX
    parts = [(e[2], "") if isinstance(e[2], str) else e[2] for e in rows]
    full = [_label(n, w) for n, w in parts]
    # the label column fits the longest label, up to 40 %; its text ends 8 px left of the bars
    # and starts 4 px or more right of the drawing's edge
    label_w = min(max(120.0, max(text_width(t, size) for t in full) + 12), 0.4 * width)
    labels = [_fit_label(n, w, label_w - 12, size) for n, w in parts]
    plot_w = width - label_w - 24
    height = 28 + row_h * len(rows)

    def x(t: float) -> float:
        return label_w + (t - t0) / span * plot_w

    firing_n = sum(e[3] == "firing" for e in rows)
    summary = (
        f"Alert timeline: {len(rows)} alerts ({firing_n} firing, {len(rows) - firing_n} resolved) "
        f"over {span / 60:.1f} min; firing bars solid red, resolved bars grey with a dashed "
        "outline; each bar's tooltip names its alert, node and status"
    )
    out = [_svg_open(width, height, summary, cls="timeline")]
    for k in range(5):  # axis ticks: minutes after the first alert
        t = t0 + span * k / 4
        out.append(
            f'<line x1="{x(t):.1f}" y1="14" x2="{x(t):.1f}" y2="{height}" stroke="#e2e8f0"/>'
            f'<text x="{x(t):.1f}" y="10" font-size="{size:g}" fill="#64748b" '
            f'text-anchor="{"start" if k == 0 else "end" if k == 4 else "middle"}">'
            f"+{(t - t0) / 60:.1f} min</text>"
        )
    for i, (start, end, _, status) in enumerate(rows):
        y = 20 + i * row_h
        firing = status == "firing"
        xe = x(end if (end is not None and not firing) else t1)
        colour = "#dc2626" if firing else "#94a3b8"
        # not by colour alone (WCAG 2.1 SC 1.4.1): a resolved bar has a dashed outline, and each
        # bar's tooltip says its status and times
        began = f"+{(start - t0) / 60:.1f}"
        ended = f"+{((end if end is not None else t1) - t0) / 60:.1f}"
        when = f"firing since {began} min" if firing else f"resolved, {began} to {ended} min"
        outline = "" if firing else ' stroke="#334155" stroke-width="1" stroke-dasharray="3 2"'
        text = (
            f'<text x="{label_w - 8:.1f}" y="{y + 11}" font-size="{size:g}" fill="#334155" '
            f'text-anchor="end">{escape(labels[i])}</text>'
        )
        if labels[i] != full[i]:  # shortened: the whole label is the tooltip
            text = f"<g><title>{escape(full[i])}</title>{text}</g>"
        out.append(
            text + f'<rect x="{x(start):.1f}" y="{y + 2}" width="{max(4.0, xe - x(start)):.1f}" '
            f'height="{row_h - 6}" rx="3" fill="{colour}" opacity="0.85"{outline}>'
            f"<title>{escape(full[i])} ({when})</title></rect>"
        )
    out.append("</svg>")
    return "".join(out)
