"""Adapter for PetShop-format scenario folders: metrics -> Alertmanager alerts, call graph -> graph.

The PetShop dataset (Hardt et al., "The PetShop Dataset -- Finding Causes of Performance Issues across
Microservices", arXiv:2311.04806, CC-BY-4.0) records a real microservice application with injected
performance issues. A *scenario folder* (e.g. ``petshop/low_traffic``) holds::

    graph.csv                      square 0/1 adjacency, row -> column = caller -> callee
    noissue/metrics.csv            normal operation (any length, any time range)
    {train,test}/issue_N/metrics.csv   a few rows around one injected issue
    {train,test}/issue_N/target.json   {"target": {node, metric, agg, timestamp},
                                        "root_cause": {"node": ...}, "metadata": {...}}

``metrics.csv`` has a three-row header (node, metric, statistic) and a unix-timestamp index.

What the adapter produces (the dataset contract of DESIGN.md):

* **Graph.** One ``service`` node per graph.csv row, ``match = {"service": <name>}``; for every caller ->
  callee entry an edge ``caller -> callee`` of kind ``calls`` (the caller depends on the callee).
* **Alerts.** Per node and metric (``latency``, ``availability``, ``requests`` or any other metric a
  scenario carries) one Alertmanager v4 alert object when the metric is anomalous in the issue window
  against the normal period, using the robust rule documented in :class:`DetectorConfig`.
* **Incident.** ``{"id", "graph", "alerts", "root_cause", "fault_type", "split", "target", "window"}``;
  ``root_cause`` comes from ``target.json`` and is checked to be a graph node.

Robustness: NaN cells are ignored (a NaN never counts as anomalous and breaks a run of anomalous points);
a column absent from the normal period, or with fewer than ``min_normal_points`` values there, gets no
baseline and raises no alert (it is listed in ``incident["window"]["unscored"]``); only the normal
period's *distribution* is used, never its timestamps, so normal data recorded at another time (as in
PetShop, where it was recorded months later) is fine; window rows are sorted by time and duplicate
timestamps dropped; names in headers are stripped of surrounding whitespace. A malformed folder raises
:class:`~fleetmind.data.errors.DataError` naming the file and problem (``graph.csv`` cells must be 0 or
1; a file must be comma-separated; a window must name at least one graph node; a metric value must be
a number, not ``inf`` nor text such as ``123ms``; timestamps are unix seconds, not milliseconds; a
timestamp of the normal period must not repeat). Node names that are not graph nodes and gaps in a
window's rows are warned about (:class:`ScenarioWarning`). :meth:`PetShopScenario.check_baseline` and
:meth:`PetShopScenario.check_evidence` say why a scenario would give no alert at all (``rca petshop``
runs them before ranking).
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import warnings
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fleetmind.data.errors import DataError
from fleetmind.data.fetch import load_manifest
from fleetmind.data.files import read_json, read_text
from fleetmind.data.graph import DependencyGraph, GraphEdge, GraphNode
from fleetmind.data.metric_roles import (
    RoleMap,
    check_role_map,
    role_map_source,
    scenario_role_map,
)

SPLITS: tuple[str, ...] = ("train", "test")
"""Issue splits of a PetShop scenario folder, in the order ``split="all"`` returns them."""

ALERTNAMES: dict[str, str] = {
    "latency": "HighLatency",
    "availability": "HighErrorRate",
    "requests": "TrafficAnomaly",
    "cpu": "HighCPU",
    "memory": "HighMemory",
}
"""Alertname per metric kind; any other metric gets :func:`fleetmind.data.metric_roles.metric_alertname`."""

DIRECTIONS: dict[str, str] = {
    "latency": "up",
    "availability": "down",
    "requests": "both",
    "cpu": "up",
    "memory": "up",
}
"""Which deviation is a symptom: ``up`` (only increases), ``down`` (only drops), ``both``; any other
metric gets :func:`fleetmind.data.metric_roles.metric_direction` (``cpu_usage`` up, ``success_rate`` down, ...)."""

NO_END = "0001-01-01T00:00:00Z"
"""Alertmanager's ``endsAt`` for an alert that is still firing."""


class ScenarioWarning(UserWarning):
    """Something in a scenario folder the commands read past but a user should know: metric node
    names that are not graph nodes (their columns are ignored), gaps in a window's rows. The CLI
    prints each as one ``fleetmind: warning:`` line."""


@dataclass(frozen=True)
class NodeMatch:
    """How the node names of a metrics file match the graph's nodes.

    Attributes:
        not_in_graph: node names of the file that are no graph node, sorted (their columns are
            ignored: no alert of theirs reaches a graph node, the synthesiser skips them).
        case_matches: ``{name: graph node}`` for names of ``not_in_graph`` that equal a graph node
            up to case (``DB`` for ``db``).
        without_metrics: graph nodes with no column in the file, sorted.
        n_graph: graph nodes.
    """

    not_in_graph: tuple[str, ...]
    case_matches: dict[str, str]
    without_metrics: tuple[str, ...]
    n_graph: int

    def to_dict(self) -> dict[str, Any]:
        """``{"count", "names", "case_matches", "graph_nodes_without_metrics"}`` (JSON-ready)."""
        return {
            "count": len(self.not_in_graph),
            "names": list(self.not_in_graph),
            "case_matches": dict(self.case_matches),
            "graph_nodes_without_metrics": len(self.without_metrics),
        }

    def warning(self, path: str | Path) -> str | None:
        """One line naming the node names not in the graph (with their case-insensitive match)
        and how many graph nodes have no metrics; ``None`` when every name is a graph node."""
        if not self.not_in_graph:
            return None
        shown = [
            f"{n!r}"
            + (f" (graph.csv has {self.case_matches[n]!r})" if n in self.case_matches else "")
            for n in self.not_in_graph[:8]
        ]
        more = f", ... ({len(self.not_in_graph)} in all)" if len(self.not_in_graph) > 8 else ""
        case = "; names must match exactly, case included" if self.case_matches else ""
        return (
            f"{path}: {len(self.not_in_graph)} node name(s) are not graph.csv nodes and their "
            f"columns are ignored: {', '.join(shown)}{more}{case}; {len(self.without_metrics)} of "
            f"the {self.n_graph} graph nodes have no metrics in this file"
        )


def match_nodes(names: Iterable[str], graph: DependencyGraph) -> NodeMatch:
    """Match the node names of a metrics file (its first header row) against ``graph``."""
    present = {str(n) for n in names}
    ids = [n.id for n in graph.nodes]
    lower: dict[str, str] = {}
    for i in ids:
        lower.setdefault(i.lower(), i)
    missing = sorted(n for n in present if n not in graph.index)
    return NodeMatch(
        not_in_graph=tuple(missing),
        case_matches={n: lower[n.lower()] for n in missing if n.lower() in lower},
        without_metrics=tuple(sorted(i for i in ids if i not in present)),
        n_graph=len(ids),
    )


@dataclass
class DetectorConfig:
    """Rules that turn a metric column into an alert (the same for every scenario; no per-node tuning).

    For a column ``x`` with normal-period values ``n``:

    * ``median = med(n)``, ``MAD = med(|n - median|)``;
    * ``spread = 1.4826 * MAD``, or ``1.2533 * mean(|n - median|)`` when MAD is 0 (more than half of
      the normal values are equal, e.g. availability pinned at 100 %); ``1.4826 * MAD`` and
      ``1.2533 * MeanAD`` both estimate the standard deviation of Gaussian data (Rousseeuw & Croux
      1993; the MeanAD fallback is the usual "modified z-score" convention, Iglewicz & Hoaglin 1993);
    * ``scale = max(spread, rel_scale_floor * |median|, abs_scale_floor)`` and, for count metrics
      (``count_metrics``), additionally ``>= sqrt(median + 1)`` (Poisson noise of a count); the floors
      keep a constant normal period from making every wobble infinitely anomalous;
    * robust z-score ``z_t = (x_t - median) / scale`` with the metric's sign (:data:`DIRECTIONS`);
    * a point is anomalous when ``z_t > z_threshold``; the column alerts when at least
      ``min_consecutive`` consecutive window points are anomalous (a NaN breaks a run).

    ``startsAt`` is the timestamp of the first point of the first qualifying run; ``endsAt`` is one step
    after its last anomalous point, or "still firing" when the window ends anomalous.

    Attributes:
        z_threshold: robust z-score above which a point is anomalous (5, the PetShop baseline's value).
        min_consecutive: consecutive anomalous points needed for an alert.
        min_normal_points: non-NaN normal-period values needed to fit a baseline (a median and MAD
            from fewer than a few tens of points are too unstable to alert on).
        rel_scale_floor: scale floor as a fraction of ``|median|``.
        abs_scale_floor: absolute scale floor (guards zero medians).
        count_metrics: metric kinds that are event counts (Poisson floor applies).
        statistic_preference: which statistic represents a (node, metric); first present wins.
        metrics: metric kinds to alert on; ``None`` for every metric in the file.
        critical_z: z-score from which an alert's severity is ``critical`` (else ``warning``).
        pre_onset: also score each window against its own rows before the onset (see below).
        pre_fraction / min_pre_rows / min_post_rows: the window's first
            ``max(min_pre_rows, floor(pre_fraction * T))`` rows are its pre-onset reference, leaving at
            least ``min_post_rows`` rows to score; shorter windows are scored against the normal
            period only.
        min_window_rows: issue windows of a scenario must have at least this many rows.
        roles: metric name -> role (:class:`~fleetmind.data.metric_roles.RoleMap`: detected by name
            unless overridden by a ``roles.yaml``); decides directions, alertnames, count metrics.

    **Pre-onset scoring** (``pre_onset``; BARO's idea, Pham et al. FSE 2024: compare with the data just
    before the fault, robustly). The normal period may be recorded days or months away from the window
    (PetShop's was), so a metric that drifted since then deviates in every row of the window. With
    ``k`` reference rows (:func:`reference_rows`; no label, no symptom time is used), for rows
    ``t >= k`` a second robust z-score is taken against the window's own rows ``[0, k)``:
    centre ``med(x[:k])``, scale the normal period's (a MAD from a few rows, one of them perhaps
    already faulty, would be meaningless); the evidence z-score is
    the smaller of the two (both must exceed ``z_threshold``), and rows before ``k`` never alert. A
    drift that is already there before the onset therefore raises no alert; a fault that starts at
    ``k`` does, with the same z as before when the pre-onset rows sit at the normal level.
    """

    z_threshold: float = 5.0
    min_consecutive: int = 2
    min_normal_points: int = 30
    rel_scale_floor: float = 0.001
    abs_scale_floor: float = 1e-6
    count_metrics: tuple[str, ...] = ("requests",)
    statistic_preference: tuple[str, ...] = ("Average", "Sum", "p50", "p90", "p95", "p99")
    metrics: tuple[str, ...] | None = None
    critical_z: float = 20.0
    pre_onset: bool = True
    pre_fraction: float = 0.2
    min_pre_rows: int = 2
    min_post_rows: int = 2
    min_window_rows: int = 5
    roles: RoleMap = field(default_factory=RoleMap)

    def __post_init__(self) -> None:
        if self.z_threshold <= 0 or self.min_consecutive < 1 or self.min_normal_points < 2:
            raise DataError(
                "DetectorConfig needs z_threshold > 0, min_consecutive >= 1, min_normal_points >= 2"
            )
        if self.min_pre_rows < 1 or self.min_post_rows < 1:
            raise DataError("DetectorConfig needs min_pre_rows >= 1 and min_post_rows >= 1")

    def direction(self, metric: str) -> str:
        """``up``/``down``/``both`` for ``metric``: the role map's override, else :data:`DIRECTIONS`,
        else the role detected from the name."""
        if metric in self.roles.overrides:
            return self.roles.direction(metric)
        return DIRECTIONS.get(metric) or self.roles.direction(metric)

    def alertname(self, metric: str) -> str:
        """Alertname for ``metric`` (override, else :data:`ALERTNAMES`, else by role)."""
        if metric in self.roles.overrides:
            return self.roles.alertname(metric)
        return ALERTNAMES.get(metric) or self.roles.alertname(metric)

    def is_count(self, metric: str) -> bool:
        """Whether ``metric`` is an event count (Poisson floor)."""
        if metric in self.roles.overrides:
            return self.roles.is_count(metric)
        return metric in self.count_metrics or self.roles.is_count(metric)


# ---------------------------------------------------------------------------- file readers
def read_metrics_csv(path: str | Path, unique_times: bool = False) -> pd.DataFrame:
    """Read a PetShop ``metrics.csv``.

    Args:
        path: the file.
        unique_times: a timestamp written on more than one row is an error (the normal period,
            whose rows are the baseline's sample: dropping one would change it silently); when
            ``False`` (issue windows) later rows of a repeated timestamp are dropped.

    Returns:
        DataFrame indexed by unix time in seconds (float, sorted ascending, unique), with a 3-level
        column index ``(node, metric, statistic)`` (names stripped of surrounding whitespace, so a
        header written ``a, b, c`` reads as ``a``, ``b``, ``c``) and float values (NaN where missing).

    Raises:
        DataError: missing file, wrong header (one naming the separator when the file is not
            comma-separated; one whose third row holds numbers: a 2-row header; a blank header
            cell, named by its row and column position), a row whose number of cells differs from
            the header's (named with both counts), a column named twice, an empty or non-numeric timestamp, timestamps in milliseconds
            (:func:`check_unix_seconds`), no rows, a cell that is neither a number nor
            missing (``123ms``, ``1,234``: missing is an empty cell or one of pandas' NA strings such
            as ``nan``, ``NA``, ``N/A``, ``null``), a value that is ``inf`` or ``-inf``, or
            (``unique_times``) a repeated timestamp.
    """
    p = Path(path)
    if not p.is_file():
        raise DataError(f"metrics file not found: {p}")
    blank_tail = 0 if _separator_hint(p) else _check_row_widths(p)
    try:
        df = pd.read_csv(p, header=[0, 1, 2], index_col=0)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError, IndexError) as err:
        if isinstance(err, UnicodeDecodeError):
            read_text(p, "metrics file")  # raises "... is not UTF-8 text (byte 0x.. at offset N)"
        raise DataError(
            f"{p}: not a PetShop metrics CSV (3-row header expected): {err}{_separator_hint(p)}"
        ) from None
    if df.shape[1] == 0 and _separator_hint(p):
        raise DataError(f"{p}: one column read{_separator_hint(p)}")
    if not isinstance(df.columns, pd.MultiIndex) or df.columns.nlevels != 3:
        raise DataError(f"{p}: expected a 3-row header (node, metric, statistic)")
    if blank_tail and df.shape[1] > blank_tail:
        df = df.iloc[:, : df.shape[1] - blank_tail]  # a trailing comma on every line
    _check_raw_header(p, df.shape[1], blank_tail)
    if df.shape[0] == 0 or df.shape[1] == 0:
        raise DataError(f"{p}: no metric rows or columns")
    index = pd.to_numeric(pd.Series(df.index), errors="coerce")
    if index.isna().any():
        r = int(np.flatnonzero(index.isna().to_numpy())[0])
        bad = df.index[r]
        if pd.isna(bad) or not str(bad).strip():
            raise DataError(
                f"{p}: data row {r + 1} has an empty or missing timestamp; every row needs a "
                "unix time in seconds in its first cell"
            )
        raise DataError(f"{p}: data row {r + 1}: timestamp {str(bad)!r} is not a unix time")
    df.index = pd.Index(index.to_numpy(dtype=float), name="time")
    df.columns = pd.MultiIndex.from_tuples(
        [tuple(str(level).strip() for level in c) for c in df.columns],
        names=["node", "metric", "statistic"],
    )
    df = _to_numbers(df, p)
    _check_finite(df, p)
    repeated = df.index.duplicated(keep="first")
    if unique_times and repeated.any():
        raise DataError(
            f"{p}: timestamp {df.index[int(np.argmax(repeated))]:.15g} is on more than one row; "
            "the normal period needs one row per timestamp"
        )
    df = df[~repeated].sort_index()
    check_unix_seconds(df.index.to_numpy(dtype=float), p)
    dup = df.columns[df.columns.duplicated()]
    if len(dup):
        raise DataError(f"{p}: column {'/'.join(dup[0])!r} appears more than once in the header")
    return df


_NA_TEXT = frozenset(("", "nan", "na", "n/a", "null", "none", "-nan", "<na>"))
"""Lower-cased cell texts that a data row may hold for a missing value (pandas' NA strings)."""


def _csv_rows(path: Path, n: int) -> list[list[str]]:
    """The first ``n`` non-empty rows of CSV file ``path`` as the ``csv`` module reads them (cells
    stripped of surrounding spaces, a UTF-8 byte order mark dropped); fewer at the end of the file,
    ``[]`` when it cannot be read. Unlike ``pd.read_csv`` they keep header names as written: no
    ``.1`` added to a repeated name, no number or NA parsing."""
    rows: list[list[str]] = []
    try:
        with path.open(encoding="utf-8-sig", errors="replace", newline="") as f:
            for row in csv.reader(f):
                if row:
                    rows.append([c.strip() for c in row])
                if len(rows) == n:
                    break
    except (OSError, csv.Error):
        return []
    return rows


class _Quoted(Exception):
    """A line of a ``metrics.csv`` holds a quote or a carriage return (CR) that does not end it
    as CR LF (old Mac line endings, a lone CR): its cells are counted by the ``csv`` module, which
    splits lines at a lone CR as ``pd.read_csv`` does."""


class _NotText(Exception):
    """A ``metrics.csv`` is not 8-bit text (a UTF-16 or UTF-32 byte order mark, a NUL byte): its
    rows are not counted, so that reading it names the encoding."""


_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
"""UTF-16 byte order marks (little and big endian; a UTF-32 LE one starts as the first)."""


def _plain_rows(lines: Iterable[bytes]) -> Iterator[tuple[int, int, bytes | list[str]]]:
    """``(line number, cell count, line)`` of every line of an unquoted CSV file read as bytes
    that is not blank or whitespace only (``pd.read_csv`` skips those); the cells are counted by
    their commas, without decoding or copying the line.

    Raises:
        _NotText: the first line starts with a UTF-16 byte order mark, or a line holds a NUL byte.
        _Quoted: a line holds ``"`` (a quoted cell may hold a comma or a line break) or a CR other
            than a final CR LF (a file with CR line endings would read as one line)."""
    for i, line in enumerate(lines, 1):
        if b"\0" in line or (i == 1 and line.startswith(_UTF16_BOMS)):
            raise _NotText
        if b'"' in line:
            raise _Quoted
        cr = line.find(b"\r")
        if cr >= 0 and (cr != len(line) - 2 or not line.endswith(b"\n")):
            raise _Quoted
        if not line.isspace():
            yield i, line.count(b",") + 1, line


def _csv_width_rows(lines: Iterable[str]) -> Iterator[tuple[int, int, bytes | list[str]]]:
    """:func:`_plain_rows` read by the ``csv`` module (quoted cells), rows as lists of cells.

    Raises:
        _NotText: a row holds a NUL character."""
    reader = csv.reader(lines)
    for row in reader:
        if any("\0" in c for c in row):
            raise _NotText
        if row and (len(row) > 1 or row[0].strip()):
            yield reader.line_num, len(row), row


def _cells(row: bytes | list[str]) -> list[str]:
    """The cells of a row of :func:`_plain_rows` (a line) or :func:`_csv_width_rows` (a list)."""
    if isinstance(row, bytes):
        return row.decode("utf-8-sig", errors="replace").rstrip("\r\n").split(",")
    return row


def _check_row_widths(path: Path) -> int:
    """Raise :class:`DataError` for a ``metrics.csv`` row with another number of cells than the
    first header row (a trailing comma on the data rows, a truncated or merged row): "data row N
    (line L) has M cells, the header has K"; a trailing comma on the header rows only is named as
    such. ``pd.read_csv`` would blame the header, or fill a short row with NaN silently. Blank and
    whitespace-only lines are skipped, as ``pd.read_csv`` skips them, and so is an index-name row
    under the header (``unix_timestamp`` alone or followed by empty cells). One pass, counting
    commas per line (the ``csv`` module only for a file with quotes or CR line endings). A
    UTF-16 file (byte order mark or NUL bytes) is not checked: reading it names the encoding.

    Returns:
        The number of trailing columns that are blank in every header row and every data row (a
        trailing comma on every line): :func:`read_metrics_csv` drops them; 0 when there are none.
    """
    try:
        try:
            with path.open("rb") as f:
                return _scan_row_widths(path, _plain_rows(f))
        except _Quoted:
            with path.open(encoding="utf-8-sig", errors="replace", newline="") as f:
                return _scan_row_widths(path, _csv_width_rows(f))
    except (OSError, csv.Error, _NotText):
        return 0  # pd.read_csv reports what it cannot read


def _scan_row_widths(path: Path, rows: Iterable[tuple[int, int, bytes | list[str]]]) -> int:
    """:func:`_check_row_widths` over ``(line number, cell count, row)`` triples."""
    width = 0
    header: list[list[str]] = []
    trailing = 0  # trailing columns blank in all three header rows
    tail_empty = True  # ... and in every data row so far
    n = 0
    skipped = 0
    full_width_seen = False  # a data row had the header's width, trailing comma included
    for line_no, k, row in rows:
        n += 1
        if n <= 3:
            header.append(_cells(row))
            width = width or k
            if k != width:
                raise DataError(
                    f"{path}: header row {n} has {k} cells, the header has {width}; every row "
                    "needs one timestamp cell and one cell per header column"
                )
            if n == 3:
                while trailing < width - 2 and all(
                    not r[width - 1 - trailing].strip() for r in header
                ):
                    trailing += 1
            continue
        if n == 4:
            cells = _cells(row)
            if not any(c.strip() for c in cells[1:]) and not _is_number_text(cells[0].strip()):
                skipped = 1  # the index-name row `DataFrame.to_csv` writes ("unix_timestamp,,")
                continue
        if k != width:
            where = f"data row {n - 3 - skipped} (line {line_no})"
            if trailing and k == width - trailing and not full_width_seen:
                raise DataError(
                    f"{path}: the header rows end with {trailing} empty cell(s) (a trailing "
                    f"comma) that the data rows lack ({where} has {k} cells, the header has "
                    f"{width}); remove the trailing comma from the header rows"
                )
            raise DataError(
                f"{path}: {where} has {k} cells, the header has {width}; every row needs one "
                "timestamp cell and one cell per header column"
            )
        full_width_seen = True
        if trailing and tail_empty:
            if isinstance(row, bytes):
                tail_empty = not any(c.strip() for c in row.rsplit(b",", trailing)[1:])
            else:
                tail_empty = not any(c.strip() for c in row[-trailing:])
    return trailing if tail_empty else 0


def _is_number_text(text: str) -> bool:
    """Whether cell ``text`` parses as a finite number (``0.0503``, ``1e-3``)."""
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _check_raw_header(path: Path, n_columns: int, blank_tail: int = 0) -> None:
    """Raise :class:`DataError` for a ``metrics.csv`` whose three header rows, as written, name a
    column twice (``pd.read_csv`` renames a repeated ``Average`` to ``Average.1``) or whose third
    row holds numbers instead of statistic names, its first cell included (a 2-row header: the
    first data row would be read as statistics and lost; ``statistic,50,90`` is a header), or
    one of whose column cells is blank (pandas would name it by position, ``Unnamed: 3_level_2``,
    which no other file's header matches). Rows
    whose width differs from ``n_columns`` + 1 are not judged here, after dropping their last
    ``blank_tail`` cells (blank columns of a trailing comma on every line: dropped on reading)."""
    rows = _csv_rows(path, 3)
    if blank_tail:
        rows = [r[: len(r) - blank_tail] for r in rows]
    if len(rows) != 3 or any(len(r) != n_columns + 1 for r in rows):
        return
    stats = [c for c in rows[2][1:] if c.lower() not in _NA_TEXT]
    # a data row has its timestamp there; a header its row label (text), or nothing where pandas
    # wrote an unnamed column level (`df.to_csv()` of numeric statistics such as 0.5, 0.99)
    first = rows[2][0]
    if stats and all(_is_number_text(c) for c in stats) and _is_number_text(first):
        raise DataError(
            f"{path}: expected a 3-row header (node, metric, statistic); its third row holds "
            f"numbers ({rows[2][0]!r}, {stats[0]!r}, ...), not statistic names such as Average"
        )
    for i, row in enumerate(rows):
        for j, cell in enumerate(row[1:]):
            if not cell:  # pandas would name it by position ("Unnamed: 3_level_2")
                raise DataError(
                    f"{path}: header row {i + 1} ({('node', 'metric', 'statistic')[i]}) is blank "
                    f"in column {j + 2} (the first column holds the timestamps); every column "
                    "needs a node, a metric and a statistic name"
                )
    seen: set[tuple[str, ...]] = set()
    for col in zip(*(r[1:] for r in rows), strict=True):
        if col in seen:
            raise DataError(
                f"{path}: column {'/'.join(col)!r} appears more than once in the header"
            )
        seen.add(col)


def _separator_hint(path: Path) -> str:
    """``"; the file must be comma-separated (...)"`` when the first line of ``path`` has a ``;``
    or a tab and no comma (a spreadsheet's export in another locale), else ``""``."""
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            first = f.readline()
    except OSError:
        return ""
    if "," in first:
        return ""
    for sep, name in ((";", "';'"), ("\t", "tabs")):
        if sep in first:
            return f"; the file must be comma-separated (its first line is separated by {name})"
    return ""


def _to_numbers(df: pd.DataFrame, path: Path) -> pd.DataFrame:
    """``df`` as floats; a cell that is text but neither a number nor empty raises.

    ``pd.read_csv`` has already turned empty cells and its NA strings (``nan``, ``NA``, ``N/A``,
    ``null``, ...) into NaN; a cell of spaces only is missing too. Anything else that does not
    parse as a number (``123ms``, ``"1,234"``, ``-``) is an error naming its column, its data row
    (1 = the first row under the header, file order) and its text, rather than a value silently
    dropped (``pd.to_numeric(errors="coerce")`` would make a whole column with units vanish).
    """
    text_cols = [k for k, t in enumerate(df.dtypes) if not pd.api.types.is_numeric_dtype(t)]
    if not text_cols:
        return df.astype(float)
    out = df.copy()
    bad = np.zeros(df.shape, dtype=bool)
    for k in text_cols:
        raw = df.iloc[:, k]
        text = raw.where(raw.isna(), raw.astype(str).str.strip())
        text = text.where(text != "", np.nan)
        num = pd.to_numeric(text, errors="coerce")
        bad[:, k] = (num.isna() & text.notna()).to_numpy()
        out.isetitem(k, num)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise DataError(
            f"{path}: column {'/'.join(df.columns[c])!r}, data row {r + 1} (time "
            f"{df.index[r]:.15g}) is {str(df.iat[r, c])!r}, not a number; write plain numbers "
            "(no units, no thousands separators; leave a cell empty or write nan for a missing "
            "value)"
        )
    return out.astype(float)


def _check_finite(df: pd.DataFrame, path: Path) -> None:
    """Raise :class:`DataError` naming the first ``inf``/``-inf`` cell of ``df`` (file order): its
    column, its data row (1 = the first row under the header) and that row's timestamp."""
    bad = np.isinf(df.to_numpy(dtype=float))
    if not bad.any():
        return
    r, c = np.argwhere(bad)[0]
    raise DataError(
        f"{path}: column {'/'.join(df.columns[c])!r}, data row {r + 1} (time {df.index[r]:.15g}) is "
        f"{df.iat[r, c]:g}; values must be finite numbers (leave a cell empty or write nan for a "
        "missing value)"
    )


def read_graph_csv(path: str | Path, name: str = "petshop") -> DependencyGraph:
    """Read ``graph.csv`` (square 0/1 adjacency, row caller -> column callee) as a DependencyGraph.

    Every node is a ``service`` with ``match = {"service": <name>}`` (names stripped of surrounding
    whitespace); every cell ``(caller, callee)`` that is 1 becomes the edge ``caller -> callee`` of
    kind ``calls``, a 0 is no edge. Self-loops are dropped.

    Raises:
        DataError: missing file, a file separated by ``;`` or tabs (named as such), a non-square
            matrix, row and column names that differ or repeat, or a cell that is not 0 or 1 (an
            absent edge written as ``-1`` would otherwise be an edge).
    """
    p = Path(path)
    if not p.is_file():
        raise DataError(f"graph file not found: {p}")
    try:
        # names as written: dtype=str and no NA strings keep node "01" and node "NA" text
        adj = pd.read_csv(p, index_col=0, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as err:
        raise DataError(f"{p}: not an adjacency-matrix CSV: {err}{_separator_hint(p)}") from None
    rows = [str(r).strip() for r in adj.index]
    cols = [str(c).strip() for c in adj.columns]
    head = _csv_rows(p, 1)
    if head and len(head[0]) == len(cols) + 1:
        cols = head[0][1:]  # as written: pandas renames a repeated column name to "name.1"
    if len(cols) == 0 and _separator_hint(p):
        raise DataError(f"{p}: one column read{_separator_hint(p)}")
    if len(rows) == 0 or len(rows) != len(cols):
        raise DataError(f"{p}: adjacency matrix must be square, got {len(rows)}x{len(cols)}")
    for names, what in ((rows, "row"), (cols, "column")):
        seen: set[str] = set()
        for n in names:
            if n in seen:
                raise DataError(f"{p}: node {n!r} names more than one {what}")
            seen.add(n)
    if set(rows) != set(cols):
        missing = sorted(set(rows) ^ set(cols))[0]
        raise DataError(f"{p}: node {missing!r} is a row or a column but not both")
    values = adj.apply(lambda c: pd.to_numeric(c.str.strip(), errors="coerce"))
    if values.isna().any().any():
        r, c = np.argwhere(values.isna().to_numpy())[0]
        raise DataError(f"{p}: cell ({rows[r]!r}, {cols[c]!r}) is not a number")
    not01 = ~values.isin([0, 1]).to_numpy()
    if not01.any():
        r, c = np.argwhere(not01)[0]
        raise DataError(
            f"{p}: cell (row {rows[r]!r}, column {cols[c]!r}) is {values.iat[r, c]:g}; "
            "cells must be 1 (the row calls the column) or 0 (no call)"
        )
    nodes = [GraphNode(id=n, kind="service", cluster=None, match={"service": n}) for n in rows]
    edges = []
    arr = values.to_numpy()
    for i, j in zip(*np.nonzero(arr), strict=True):
        if rows[i] != cols[j]:
            edges.append(GraphEdge(src=rows[i], dst=cols[j], kind="calls"))
    return DependencyGraph(name, nodes, edges)


def read_target(path: str | Path) -> dict[str, Any]:
    """Read ``target.json``; returns ``{"target": {...}, "root_cause": str, "metadata": {...}}``.

    Raises:
        DataError: missing file, invalid JSON, or missing ``root_cause.node`` / ``target.node``.
    """
    p = Path(path)
    if not p.is_file():
        raise DataError(f"target file not found: {p}")
    obj = read_json(p, "target file")
    try:
        root = str(obj["root_cause"]["node"])
        target = dict(obj["target"])
        str(target["node"])
    except (KeyError, TypeError):
        raise DataError(
            f"{p}: needs 'root_cause': {{'node': ...}} and 'target': {{'node': ...}}"
        ) from None
    return {"target": target, "root_cause": root, "metadata": obj.get("metadata") or {}}


# ---------------------------------------------------------------------------- detection
@dataclass
class Baseline:
    """Per-column normal statistics. ``median``/``scale`` are indexed by ``(node, metric, statistic)``."""

    median: pd.Series
    scale: pd.Series
    n_points: pd.Series


def fit_baseline(normal: pd.DataFrame, config: DetectorConfig | None = None) -> Baseline:
    """Fit the robust per-column baseline of :class:`DetectorConfig` on the normal period.

    Columns with fewer than ``min_normal_points`` non-NaN values get no baseline (dropped).
    """
    cfg = config or DetectorConfig()
    counts = normal.notna().sum()
    keep = counts[counts >= cfg.min_normal_points].index
    data = normal[keep]
    median = data.median(skipna=True)
    absdev = (data - median).abs()
    mad = absdev.median(skipna=True)
    spread = (1.4826 * mad).where(mad > 0, 1.2533 * absdev.mean(skipna=True))
    scale = np.maximum(spread, cfg.rel_scale_floor * median.abs())
    scale = np.maximum(scale, cfg.abs_scale_floor)
    is_count = pd.Series([cfg.is_count(c[1]) for c in scale.index], index=scale.index, dtype=bool)
    scale[is_count] = np.maximum(scale[is_count], np.sqrt(median[is_count].clip(lower=0) + 1.0))
    return Baseline(median=median, scale=scale, n_points=counts[keep])


def metrics_without_baseline(normal: pd.DataFrame, baseline: Baseline) -> dict[str, int]:
    """Metrics of the normal period none of whose columns has a baseline (fewer than
    ``min_normal_points`` non-NaN values in every one: :func:`fit_baseline` drops them, so they
    raise no alert), each with the most non-NaN values any of its columns has, sorted by name."""
    with_baseline = {str(c[1]) for c in baseline.median.index}
    out: dict[str, int] = {}
    for col, n in normal.notna().sum().items():
        metric = str(col[1])
        if metric not in with_baseline:
            out[metric] = max(out.get(metric, 0), int(n))
    return dict(sorted(out.items()))


def no_baseline_warning(path: str | Path, missing: Mapping[str, int], need: int) -> str | None:
    """One line naming the metrics without a baseline (:func:`metrics_without_baseline`), each with
    its count of normal values, and the minimum ``need``; ``None`` when there are none."""
    if not missing:
        return None
    items = list(missing.items())
    shown = ", ".join(f"{m!r} ({n} values)" for m, n in items[:8])
    more = f", ... ({len(items)} in all)" if len(items) > 8 else ""
    return (
        f"{path}: {len(items)} metric(s) have no baseline and raise no alert: {shown}{more}; a "
        f"column needs at least {need} non-NaN values in the normal period"
    )


def mark_no_baseline(
    report: dict[str, dict[str, str]], missing: Collection[str]
) -> dict[str, dict[str, str]]:
    """A role report (:meth:`fleetmind.data.metric_roles.RoleMap.report`) whose metrics of
    ``missing`` carry ``"baseline": "none"`` (the roles line prints them ``(no baseline)``)."""
    return {m: ({**r, "baseline": "none"} if m in missing else r) for m, r in report.items()}


_ISO_MIN = "0001-01-01T00:00:00Z"
_ISO_MAX = "9999-12-31T23:59:59Z"


def _iso(ts: float) -> str:
    """RFC 3339 UTC string of unix time ``ts`` (seconds); never raises: a time outside the years
    1-9999 (or NaN) is clamped to the nearest end of that range, so order is kept."""
    try:
        return datetime.fromtimestamp(float(ts), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return _ISO_MAX if float(ts) > 0 else _ISO_MIN


def _first_run(flags: np.ndarray, min_len: int) -> tuple[int, int] | None:
    """``(start, end_inclusive)`` of the first run of ``True`` at least ``min_len`` long, else None."""
    start = None
    for i, f in enumerate(list(flags) + [False]):
        if f and start is None:
            start = i
        elif not f and start is not None:
            if i - start >= min_len:
                return start, i - 1
            start = None
    return None


def _pick_statistics(
    columns: pd.Index,
    preference: tuple[str, ...],
    scorable: Collection[tuple[str, str, str]] | None = None,
) -> dict[tuple[str, str], str]:
    """For each (node, metric) the statistic used for detection: first of ``preference`` present,
    else the first by name. With ``scorable`` (the columns that have a baseline) the choice is
    made among the statistics with a baseline when there is one (a window with ``Average`` and
    ``p90`` latency whose normal period has only ``p90`` scores ``p90``)."""
    present: dict[tuple[str, str], set[str]] = {}
    for node, metric, stat in columns:
        present.setdefault((node, metric), set()).add(stat)
    chosen = {}
    for key, stats in present.items():
        if scorable is not None:
            with_baseline = {s for s in stats if (*key, s) in scorable}
            stats = with_baseline or stats
        ordered = [s for s in preference if s in stats] or sorted(stats)
        chosen[key] = ordered[0]
    return chosen


def reference_rows(n_rows: int, config: DetectorConfig) -> int | None:
    """How many leading rows of an ``n_rows`` window are its own pre-onset reference.

    ``max(min_pre_rows, floor(pre_fraction * n_rows))``, capped so that ``min_post_rows`` rows remain;
    ``None`` (normal period only) when pre-onset scoring is off or the window is shorter than
    ``min_pre_rows + min_post_rows``. An incident window opens before its fault (PetShop's windows two
    rows before the symptom, Train Ticket's four minutes before the injection; an alert's look-back
    does the same), so its first rows show the system as it was just before, drift included.
    """
    if not config.pre_onset or n_rows < config.min_pre_rows + config.min_post_rows:
        return None
    k = max(config.min_pre_rows, int(config.pre_fraction * n_rows))
    return min(k, n_rows - config.min_post_rows)


def _column_nanmedian(a: np.ndarray) -> np.ndarray:
    """``np.nanmedian(a, axis=0)`` for a ``(k, C)`` array (NaN for all-NaN columns), without the
    slow masked-array path numpy takes for small arrays."""
    srt = np.sort(a, axis=0)  # NaN sorts last
    cnt = (~np.isnan(srt)).sum(axis=0)
    lo = np.clip((cnt - 1) // 2, 0, None)
    hi = np.clip(cnt // 2, 0, srt.shape[0] - 1)
    cols = np.arange(srt.shape[1])
    med = 0.5 * (srt[lo, cols] + srt[hi, cols])
    return np.where(cnt > 0, med, np.nan)


def window_scores(
    x: np.ndarray,
    median: np.ndarray,
    scale: np.ndarray,
    directions: Sequence[str],
    config: DetectorConfig,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int | None]:
    """Evidence z-scores and anomaly flags of a window (the rule of :class:`DetectorConfig`).

    Args:
        x: ``(T, C)`` window values (rows sorted by time; NaN = missing).
        median / scale: ``(C,)`` the normal period's robust centre and scale per column.
        directions: ``C`` of ``up``/``down``/``both``.
        config: detection rules.

    Returns:
        ``(z, flags, reference, onset)``: ``z`` ``(T, C)`` direction-signed evidence z-scores (the
        smaller of the normal-period and pre-onset scores when pre-onset scoring applies; ``-inf``
        before the onset), ``flags`` ``(T, C)`` bool ``z > z_threshold``, ``reference`` ``(C,)`` the
        level a change is measured from (the pre-onset median, else the normal median), ``onset``
        the first row scored against the reference rows (:func:`reference_rows`) or ``None``.
    """
    sign = np.array([{"up": 1.0, "down": -1.0}.get(d, 0.0) for d in directions])
    dev = (x - median) / scale
    signed = np.where(sign == 0.0, np.abs(dev), dev * sign)
    reference = np.asarray(median, dtype=float).copy()
    onset = reference_rows(x.shape[0], config)
    z = signed
    if onset is not None:
        pre = x[:onset]
        pmed = _column_nanmedian(pre)
        pdev = (x - pmed) / scale
        psigned = np.where(sign == 0.0, np.abs(pdev), pdev * sign)
        known = np.isfinite(pmed)
        z = np.where(known, np.fmin(signed, psigned), signed)
        z = np.where(np.isnan(signed), np.nan, z)
        z[:onset] = -np.inf
        reference = np.where(known, pmed, reference)
    flags = np.nan_to_num(z, nan=-np.inf, neginf=-np.inf) > config.z_threshold
    return z, flags, reference, onset


def detector_alert(
    column: tuple[str, str, str],
    run: tuple[int, int],
    signed: np.ndarray,
    x: np.ndarray,
    baseline: tuple[float, float, str],
    times: np.ndarray,
    step: float,
    critical_z: float,
    extra_labels: dict[str, str] | None = None,
    alertname: str | None = None,
    reference: float | None = None,
) -> dict[str, Any]:
    """One detector alert (Alertmanager v4 object) for a run of anomalous rows of one column.

    Args:
        column: ``(node, metric, statistic)``.
        run: first and last row of the run (inclusive).
        signed: ``(T,)`` evidence z-scores in the alert's direction (see :func:`window_scores`).
        x: ``(T,)`` the column's values.
        baseline: ``(median, scale, direction)`` of the column in the normal period.
        times: ``(T,)`` row times, seconds since the epoch.
        step: seconds between rows (the end of a resolved alert is one step after its last row).
        critical_z: z-score from which the alert is ``critical`` instead of ``warning``.
        extra_labels: labels added to the alert.
        alertname: the alert's name (default: by the metric's role).
        reference: the level the change is measured from (``baseline``/``delta`` annotations; the
            pre-onset median when pre-onset scoring applies), default the normal median.
    """
    node, metric, stat = column
    med, scale, direction = baseline
    ref = med if reference is None or not math.isfinite(reference) else float(reference)
    start, end = run
    peak = int(start + np.nanargmax(signed[start : end + 1]))
    z = float(signed[peak])
    value = float(x[peak])
    still_firing = end == len(x) - 1
    labels = {
        "alertname": alertname or ALERTNAMES.get(metric) or RoleMap().alertname(metric),
        "severity": "critical" if z >= critical_z else "warning",
        "service": node,
        "metric": metric,
        "statistic": stat,
    }
    labels.update({str(k): str(v) for k, v in (extra_labels or {}).items()})
    fp_src = json.dumps(labels, sort_keys=True).encode()
    return {
        "status": "firing" if still_firing else "resolved",
        "labels": labels,
        "annotations": {
            "summary": f"{node} {metric} ({stat}) {value:.6g} vs normal median {med:.6g}",
            "z_score": f"{z:.4g}",
            "value": f"{value:.6g}",
            "baseline": f"{ref:.6g}",
            "normal_median": f"{med:.6g}",
            "delta": f"{value - ref:.6g}",
            "scale": f"{scale:.6g}",
            "direction": direction,
        },
        "startsAt": _iso(times[start]),
        "endsAt": NO_END if still_firing else _iso(times[end] + step),
        "generatorURL": "",
        "fingerprint": hashlib.sha1(fp_src).hexdigest()[:16],
    }


def alerts_from_scores(
    columns: Sequence[tuple[str, str, str]],
    x: np.ndarray,
    median: np.ndarray,
    scale: np.ndarray,
    directions: Sequence[str],
    times: np.ndarray,
    config: DetectorConfig,
    extra_labels: Mapping[str, str] | None = None,
) -> tuple[list[dict[str, Any]], int | None]:
    """Alerts of a window given as an array (shared by :func:`detect_alerts` and the synthesiser).

    Args:
        columns: ``C`` column keys ``(node, metric, statistic)``.
        x: ``(T, C)`` values, rows sorted by time.
        median / scale: ``(C,)`` normal-period centre and scale.
        directions: ``C`` directions.
        times: ``(T,)`` unix seconds.
        config: detection rules.
        extra_labels: labels added to every alert.

    Returns:
        ``(alerts, onset)``: alerts sorted by ``startsAt`` then descending z-score, and the number
        of reference rows (``None`` when the window is too short for pre-onset scoring).
    """
    if len(columns) == 0:
        return [], None
    z, flags, reference, onset = window_scores(x, median, scale, directions, config)
    step = float(np.median(np.diff(times))) if len(times) > 1 else 0.0
    extra = {str(k): str(v) for k, v in (extra_labels or {}).items()}
    alerts = []
    for k in np.flatnonzero(flags.sum(axis=0) >= config.min_consecutive):
        run = _first_run(flags[:, k], config.min_consecutive)
        if run is None:
            continue
        node, metric, stat = columns[k]
        alerts.append(
            detector_alert(
                columns[k], run, z[:, k], x[:, k],
                (float(median[k]), float(scale[k]), directions[k]), times, step,
                config.critical_z, extra, config.alertname(metric), float(reference[k]),
            )
        )  # fmt: skip
    alerts.sort(key=lambda a: (a["startsAt"], -float(a["annotations"]["z_score"])))
    return alerts, onset


def detect_alerts(
    window: pd.DataFrame,
    baseline: Baseline,
    config: DetectorConfig | None = None,
    extra_labels: Mapping[str, str] | None = None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """Turn an issue window into Alertmanager v4 alert objects.

    Args:
        window: metrics of the issue window (see :func:`read_metrics_csv`), shape ``(T, C)``.
        baseline: normal-period baseline from :func:`fit_baseline`.
        config: detection rules.
        extra_labels: labels added to every alert (e.g. ``{"scenario": "low_traffic"}``).

    Returns:
        ``(alerts, unscored)``: alerts sorted by ``startsAt`` then descending z-score; ``unscored`` names
        the ``node/metric/statistic`` columns that had no baseline.

    Each alert has ``labels`` ``{alertname, severity, service, metric, statistic, ...extra}``,
    ``annotations`` ``{summary, z_score, value, baseline, normal_median, delta, scale, direction}``
    (numbers as strings, as Alertmanager carries them; ``baseline`` and ``delta`` are measured from the
    pre-onset level when pre-onset scoring applies), ``startsAt``, ``endsAt``, ``generatorURL`` and
    ``fingerprint``.
    """
    alerts, unscored, _ = detect_window(window, baseline, config, extra_labels)
    return alerts, unscored


def detect_window(
    window: pd.DataFrame,
    baseline: Baseline,
    config: DetectorConfig | None = None,
    extra_labels: Mapping[str, str] | None = None,
) -> tuple[list[dict[str, Any]], list[str], int | None]:
    """:func:`detect_alerts` that also returns the number of pre-onset reference rows (``None``:
    normal period only)."""
    cfg = config or DetectorConfig()
    times = window.index.to_numpy(dtype=float)
    chosen = _pick_statistics(
        window.columns, cfg.statistic_preference, frozenset(baseline.median.index)
    )
    cols: list[tuple[str, str, str]] = []
    unscored: list[str] = []
    for (node, metric), stat in chosen.items():
        if cfg.metrics is not None and metric not in cfg.metrics:
            continue
        col = (node, metric, stat)
        if col not in baseline.median.index:
            unscored.append("/".join(col))
            continue
        cols.append(col)
    x = (
        window[cols].to_numpy(dtype=float)
        if cols
        else np.zeros((len(times), 0))
    )  # fmt: skip
    med = np.array([float(baseline.median[c]) for c in cols])
    scale = np.array([float(baseline.scale[c]) for c in cols])
    dirs = [cfg.direction(c[1]) for c in cols]
    alerts, onset = alerts_from_scores(cols, x, med, scale, dirs, times, cfg, extra_labels)
    return alerts, unscored, onset


# ---------------------------------------------------------------------------- scenario
@dataclass
class PetShopIssue:
    """One issue folder: ``split`` (train/test), ``name`` (issue_N), ``path``."""

    split: str
    name: str
    path: Path

    @property
    def id(self) -> str:
        return f"{self.split}/{self.name}"


@dataclass
class PetShopScenario:
    """A PetShop-format scenario folder, loaded.

    Attributes:
        root: the scenario folder.
        graph: the call graph as a :class:`DependencyGraph` (name = folder name).
        normal: the normal-period metrics (``noissue/metrics.csv``).
        baseline: robust per-column baseline fitted on ``normal``.
        config: detection rules used for every issue.
        nodes: how the normal period's node names match the graph (``None``: not matched).
    """

    root: Path
    graph: DependencyGraph
    normal: pd.DataFrame
    baseline: Baseline
    config: DetectorConfig = field(default_factory=DetectorConfig)
    nodes: NodeMatch | None = None

    @property
    def name(self) -> str:
        return self.graph.name

    def issues(self, split: str = "all") -> list[PetShopIssue]:
        """Issue folders of ``split`` (``train``, ``test`` or ``all``), ordered by issue number."""
        if split not in (*SPLITS, "all"):
            raise DataError(f"unknown split {split!r}; expected one of train, test, all")
        out = []
        for s in SPLITS if split == "all" else (split,):
            d = self.root / s
            if not d.is_dir():
                if split != "all":
                    raise DataError(f"{self.root}: split folder {s}/ not found")
                continue
            dirs = [p for p in d.iterdir() if p.is_dir()]
            dirs.sort(key=lambda p: (_issue_number(p.name), p.name))
            out.extend(PetShopIssue(s, p.name, p) for p in dirs)
        return out

    def incident(self, issue: PetShopIssue) -> dict[str, Any]:
        """Build the incident dict of one issue (alerts, ground truth, target, window info).

        ``window`` holds ``start``/``end`` (RFC 3339), ``n_points``, ``step_s``, ``unscored`` (the
        ``node/metric/statistic`` columns without a baseline), ``scored`` (how many columns were
        scored), ``reference_rows`` and ``not_in_graph`` (:meth:`NodeMatch.to_dict`: the window's
        node names that are not graph nodes, whose alerts reach no node). Node names not in the
        graph and gaps in the window's rows (:func:`gap_warning`) are warned about
        (:class:`ScenarioWarning`).

        Raises:
            DataError: a malformed window or target, a root cause outside the graph, a window
                none of whose node names is a graph node, or a window none of whose columns has a
                normal-period baseline because none is named in ``noissue/metrics.csv`` (a name
                mismatch: it would raise no alert and count as a miss; columns there with too few
                values are left to :meth:`check_evidence`).
        """
        target = read_target(issue.path / "target.json")
        window = read_metrics_csv(issue.path / "metrics.csv")
        root = target["root_cause"]
        if root not in self.graph.index:
            raise DataError(
                f"{issue.path / 'target.json'}: root cause {root!r} is not in graph.csv"
            )
        times = window.index.to_numpy(dtype=float)
        check_window(window, issue.path / "metrics.csv", self.config.min_window_rows)
        nodes = sorted(set(window.columns.get_level_values(0)))
        if not any(n in self.graph.index for n in nodes):
            raise DataError(
                f"{issue.path / 'metrics.csv'}: none of its {len(nodes)} node names is a graph.csv "
                f"node (e.g. {nodes[0]!r}; graph.csv has e.g. {self.graph.nodes[0].id!r}); "
                "names must match exactly, case included"
            )
        match = match_nodes(nodes, self.graph)
        for message in (
            match.warning(issue.path / "metrics.csv"),
            gap_warning(times, issue.path / "metrics.csv"),
        ):
            if message is not None:
                warnings.warn(message, ScenarioWarning, stacklevel=2)
        alerts, unscored, onset = detect_window(
            window, self.baseline, self.config, extra_labels={"scenario": self.name}
        )
        metrics = self.config.metrics
        chosen = _pick_statistics(
            window.columns, self.config.statistic_preference, frozenset(self.baseline.median.index)
        )
        n_cols = sum(1 for _, m in chosen if metrics is None or m in metrics)
        if unscored and n_cols == len(unscored) and not set(unscored) & self._normal_names():
            # a name mismatch; columns of the normal period with too few values are not refused
            # here (a metric-level method may still run): check_evidence names them
            raise DataError(
                f"{issue.path / 'metrics.csv'}: no column of this issue window has a "
                f"normal-period baseline (e.g. {unscored[0]!r}; {len(unscored)} columns); node, "
                "metric and statistic names must match noissue/metrics.csv, case included"
            )
        return {
            "id": issue.id,
            "graph": self.graph.name,
            "alerts": alerts,
            "root_cause": root,
            "fault_type": target["target"].get("metric"),
            "split": issue.split,
            "target": target["target"],
            "window": {
                "start": _iso(times[0]),
                "end": _iso(times[-1]),
                "n_points": int(len(times)),
                "step_s": float(np.median(np.diff(times))) if len(times) > 1 else math.nan,
                "unscored": unscored,
                "scored": n_cols - len(unscored),
                "reference_rows": onset,
                "not_in_graph": match.to_dict(),
            },
        }

    def check_baseline(self) -> None:
        """Check that the normal period gives the detector something to score: at least one column
        of a graph node has a baseline (``min_normal_points`` non-NaN values).

        Raises:
            DataError: naming the likely cause: too few normal rows or values, or metric node names
                that are not graph.csv nodes.
        """
        path = self.root / "noissue" / "metrics.csv"
        need = self.config.min_normal_points
        if len(self.baseline.median) == 0:
            most = int(self.normal.notna().sum().max()) if self.normal.shape[1] else 0
            raise DataError(
                f"{path}: no metric column has a baseline: one needs at least {need} non-NaN "
                f"values and the most any column has is {most} (of {len(self.normal)} rows)"
            )
        nodes = sorted({str(c[0]) for c in self.baseline.median.index})
        if not any(n in self.graph.index for n in nodes):
            raise DataError(
                f"{path}: none of its {len(nodes)} node names with a baseline is a graph.csv node "
                f"(e.g. {nodes[0]!r}; graph.csv has e.g. {self.graph.nodes[0].id!r}); names must "
                "match exactly, case included"
            )

    def _normal_names(self) -> set[str]:
        """``node/metric/statistic`` of every column of the normal period, as ``unscored`` names
        them (:func:`detect_window`)."""
        return {"/".join(map(str, c)) for c in self.normal.columns}

    def check_evidence(self) -> None:
        """Check that at least one issue window raises an alert, reading windows until one does
        (usually the first); without any, every alert-based ranking is by node name alone.

        Raises:
            DataError: naming the likely cause: no window column has a baseline (its columns have
                fewer than ``min_normal_points`` normal values, or window names differ from the
                normal period's), or no window deviates from the normal period.
        """
        issues = self.issues("all")
        example: tuple[str, str] | None = None
        any_scored = False
        for issue in issues:
            window = self.incident(issue)
            if window["alerts"]:
                return
            any_scored = any_scored or window["window"]["scored"] > 0
            if example is None and window["window"]["unscored"]:
                example = (issue.id, window["window"]["unscored"][0])
        if not issues:
            return
        if not any_scored:
            counts = {"/".join(map(str, c)): int(n) for c, n in self.normal.notna().sum().items()}
            if example is not None and example[1] in counts:
                raise DataError(
                    f"{self.root}: no column of any issue window has a normal-period baseline "
                    f"(e.g. {example[0]} has {example[1]!r}, with {counts[example[1]]} values in "
                    f"noissue/metrics.csv: fewer than {self.config.min_normal_points} normal "
                    "values); give the normal period more rows or fewer missing values"
                )
            seen = f" (e.g. {example[0]} has {example[1]!r})" if example else ""
            raise DataError(
                f"{self.root}: no column of any issue window has a normal-period baseline{seen}; "
                "node, metric and statistic names of the windows must match noissue/metrics.csv, "
                "case included"
            )
        cfg = self.config
        raise DataError(
            f"{self.root}: none of the {len(issues)} issue windows raised an alert (robust z > "
            f"{cfg.z_threshold:g} in {cfg.min_consecutive} consecutive rows against the normal "
            "period), so alert-based rankings would order nodes by name alone; check that the "
            "windows hold the issues and noissue/ a normal period of the same metrics"
        )

    def unmatched_roles(self) -> list[str]:
        """Role-map override entries that name no metric of the normal period (likely typos)."""
        return self.config.roles.unmatched(self.normal.columns.get_level_values(1))

    def roles(self) -> dict[str, dict[str, str]]:
        """``{metric: {"role", "source"}}`` for every metric of the normal period (source
        ``override`` from the role map, or ``name``); a metric none of whose columns has a
        baseline also carries ``"baseline": "none"`` (:func:`metrics_without_baseline`)."""
        return mark_no_baseline(
            self.config.roles.report(self.normal.columns.get_level_values(1)),
            metrics_without_baseline(self.normal, self.baseline),
        )

    def incidents(self, split: str = "all") -> Iterator[dict[str, Any]]:
        """Incident dicts of every issue of ``split``."""
        for issue in self.issues(split):
            yield self.incident(issue)


def _issue_number(name: str) -> int:
    tail = name.rsplit("_", 1)[-1]
    return int(tail) if tail.isdigit() else 1 << 30


MIN_STEP_S = 1.0
MAX_STEP_S = 300.0
"""Row intervals the reader accepts (1 s to 5 min, within :data:`STEP_TOLERANCE`)."""

STEP_TOLERANCE = 0.01
"""Relative slack at both bounds of the row interval: 1 s rows whose scrape timestamps carry a few
ms of jitter (a median interval of 0.999 s) and 5 min rows a little over are accepted (0.99 s to
303 s)."""


def _step_ok(step: float) -> bool:
    """Whether a median row interval ``step`` (seconds) is within the accepted range."""
    return MIN_STEP_S * (1.0 - STEP_TOLERANCE) <= step <= MAX_STEP_S * (1.0 + STEP_TOLERANCE)


MS_LIKE = 1e11
"""Timestamps from this size on read as milliseconds (unix seconds reach it in the year 5138; unix
milliseconds passed it in 1973)."""


def check_unix_seconds(times: np.ndarray, path: str | Path) -> None:
    """Refuse timestamps in milliseconds: any time at least :data:`MS_LIKE`.

    Read as seconds they would lie after the year 5138 (every alert's ``startsAt`` clamped to
    9999-12-31), whatever the row interval; the reader refuses them in every file (issue windows
    and the normal period, for ``rca petshop`` and ``rca fit`` alike).

    Args:
        times: ``(T,)`` row times as written, sorted ascending.
        path: the file, named in the error.

    Raises:
        DataError: naming the file, the row interval read as seconds and the milliseconds.
    """
    t = np.asarray(times, dtype=float)
    if t.size == 0 or float(np.max(np.abs(t))) < MS_LIKE:
        return
    step = float(np.median(np.diff(t))) if t.size > 1 else math.nan
    where = f"timestamp {t[-1]:.15g} is after the year 5138 as unix seconds"
    if t.size > 1 and not _step_ok(step):
        where = f"rows are {step:g} s apart; the reader takes 1 s to 300 s (5 min)"
    raise DataError(f"{path}: {where}; the timestamps look like milliseconds: write unix seconds")


GAP_FACTOR = 10.0
"""A row interval above this many times the median one is a gap (warned about, not refused)."""


def gap_warning(times: np.ndarray, path: str | Path, factor: float = GAP_FACTOR) -> str | None:
    """The warning for gaps in a metrics file's rows, or ``None`` when there is none.

    The reader checks only the median row interval (:func:`check_row_interval`); a window with
    an hour missing in its middle passes it, and its rows after the gap are read as if they
    followed on.

    Args:
        times: ``(T,)`` row times, unix seconds, sorted ascending.
        path: the file, named in the warning.
        factor: an interval above ``factor`` times the median interval is a gap.

    Returns:
        One line naming the file, how many gaps, the largest and the times around it (unix seconds
        and RFC 3339), or ``None``.
    """
    t = np.asarray(times, dtype=float)
    if t.size < 3:
        return None
    d = np.diff(t)
    step = float(np.median(d))
    gaps = np.flatnonzero(d > factor * step) if step > 0 else np.array([], dtype=int)
    if gaps.size == 0:
        return None
    k = int(gaps[np.argmax(d[gaps])])
    return (
        f"{path}: {gaps.size} gap(s) of more than {factor:g} x the median row interval "
        f"({step:g} s); the largest, {d[k]:g} s, lies between rows at {t[k]:.15g} and "
        f"{t[k + 1]:.15g} ({_iso(t[k])} and {_iso(t[k + 1])}); rows after a gap are read as if "
        "they followed on"
    )


def check_row_interval(times: np.ndarray, path: str | Path) -> float:
    """Check the median interval between rows of a metrics file: 1 s to 5 min, with 1 % slack at
    both bounds (:data:`STEP_TOLERANCE`: jittered 1 s scrapes). Returns it in seconds.

    Args:
        times: ``(T,)`` row times, unix seconds, sorted ascending (at least 2 rows).
        path: the file, named in the error.

    Raises:
        DataError: the interval is outside 0.99 s..303 s; the message says that the timestamps look
            like milliseconds when the interval divided by 1000 would be accepted and the times
            are at least :data:`MS_LIKE`.
    """
    t = np.asarray(times, dtype=float)
    step = float(np.median(np.diff(t)))
    if _step_ok(step):
        return step
    hint = ""
    if _step_ok(step / 1000.0) and float(np.max(np.abs(t))) >= MS_LIKE:
        hint = "; the timestamps look like milliseconds: write unix seconds"
    raise DataError(
        f"{path}: rows are {step:g} s apart; the reader takes 1 s to 300 s (5 min){hint}"
    )


def check_window(window: pd.DataFrame, path: str | Path, min_rows: int = 5) -> float:
    """Check an issue window's shape: at least ``min_rows`` rows, a median row interval of 1 s to
    5 min (:func:`check_row_interval`). Returns the interval in seconds.

    Raises:
        DataError: naming the file and the problem.
    """
    times = window.index.to_numpy(dtype=float)
    if len(times) < min_rows:
        raise DataError(
            f"{path}: {len(times)} rows; an issue window needs at least {min_rows} "
            "(rows before the onset are the window's own reference)"
        )
    return check_row_interval(times, path)


def missing_published_files(root: str | Path) -> str | None:
    """The warning for a scenario folder that ``fleetmind data fetch petshop`` fills
    (``<dest>/petshop/<scenario>``, e.g. ``low_traffic``) and that misses some of the published
    files (a fetch that failed midway), or ``None``; other folders are not checked.

    Results on such a folder cover fewer issues than the published figures (9 of 26, say) while
    reading as the whole scenario.
    """
    root = Path(root)
    try:
        entry = load_manifest()["petshop"]
    except (DataError, KeyError):
        return None
    if root.resolve().parent.name != entry["folder"]:
        return None
    prefix = root.resolve().name + "/"
    expected = [f["path"][len(prefix) :] for f in entry["files"] if f["path"].startswith(prefix)]
    missing = [p for p in expected if not (root / p).is_file()]
    if not missing:
        return None
    return (
        f"{root}: {len(missing)} of the {len(expected)} files of the published PetShop "
        f"{root.resolve().name} scenario are missing (e.g. {missing[0]}; an interrupted "
        "`fleetmind data fetch petshop`?): results cover fewer issues than the published figures; "
        "run the fetch again to complete it"
    )


def load_scenario(
    path: str | Path, config: DetectorConfig | None = None, roles: str | Path | None = None
) -> PetShopScenario:
    """Load a PetShop-format scenario folder (graph, normal period, baseline).

    Args:
        path: the scenario folder.
        config: detection rules (its ``roles`` are replaced by the scenario's role map).
        roles: a role-map override file; default ``path/roles.yaml`` when present
            (:func:`fleetmind.data.metric_roles.scenario_role_map`).

    Raises:
        DataError: the folder, ``graph.csv`` or ``noissue/metrics.csv`` is missing or malformed, no
            ``train/``/``test/`` split folder exists, or the role map is invalid or none of its
            entries names a metric of the normal period (:func:`~fleetmind.data.metric_roles.check_role_map`;
            entries of which only some match are listed by :meth:`PetShopScenario.unmatched_roles`).

    Warns:
        ScenarioWarning: node names of the normal period that are not graph nodes (their columns
            are ignored), with the graph node of the same name up to case when there is one; a
            fetched PetShop scenario that misses published files (:func:`missing_published_files`);
            metrics none of whose columns has a baseline (:func:`no_baseline_warning`).
    """
    root = Path(path)
    if not root.is_dir():
        raise DataError(f"PetShop scenario folder not found: {root}")
    if not (root / "graph.csv").is_file():
        raise DataError(f"{root}: graph.csv not found (is this a PetShop scenario folder?)")
    if not any((root / s).is_dir() for s in SPLITS):
        raise DataError(f"{root}: neither train/ nor test/ issue folder found")
    cfg = replace(config or DetectorConfig(), roles=scenario_role_map(root, roles))
    graph = read_graph_csv(root / "graph.csv", name=root.name)
    normal = read_metrics_csv(root / "noissue" / "metrics.csv", unique_times=True)
    check_role_map(
        cfg.roles, normal.columns.get_level_values(1), role_map_source(root, roles) or "role map"
    )
    nodes = match_nodes(normal.columns.get_level_values(0), graph)
    message = nodes.warning(root / "noissue" / "metrics.csv")
    if message is not None:
        warnings.warn(message, ScenarioWarning, stacklevel=2)
    message = missing_published_files(root)
    if message is not None:
        warnings.warn(message, ScenarioWarning, stacklevel=2)
    baseline = fit_baseline(normal, cfg)
    message = no_baseline_warning(
        root / "noissue" / "metrics.csv",
        metrics_without_baseline(normal, baseline),
        cfg.min_normal_points,
    )
    if message is not None and len(baseline.median):  # none at all: check_baseline says why
        warnings.warn(message, ScenarioWarning, stacklevel=2)
    return PetShopScenario(
        root=root,
        graph=graph,
        normal=normal,
        baseline=baseline,
        config=cfg,
        nodes=nodes,
    )
