"""Loaders for the Alibaba openb GPU trace (node list and pod traces, cluster-trace-gpu-v2023).

Where to get the files and what they hold: ``docs/data.md``. Everything is returned as numpy
arrays (one entry per node or pod) so that the simulator's hot path never touches Python objects.

Units: CPU in milli-cores (1 core = 1000), memory in MiB, GPU share in milli-GPU (1 GPU = 1000),
times in seconds.

GPU models are encoded as small integer ids into :data:`GPU_MODELS`; a pod's ``gpu_spec`` (a
``|``-separated list of allowed models) becomes a bitmask over those ids, with :data:`ANY_GPU_MODEL`
(all bits set, ``-1``) when the pod has no constraint. A node with model id ``i`` may host a pod when
``gpu_spec_mask & (1 << i) != 0``. A model name that :data:`GPU_MODELS` does not know is appended to
the (process-wide) vocabulary, so YAML fleets with other models still work; it holds at most
:data:`MAX_GPU_MODELS` (62) models, over every file loaded in the process.

Added fields: none yet. The simulator's dynamic mode (``envs/dynamic/``) may attach extra per-pod
arrays (e.g. communication intensity, data home cluster) through :meth:`PodTrace.with_fields`; they are
kept in :attr:`PodTrace.extra` and documented in ``docs/dynamic.md``.
"""

from __future__ import annotations

import csv
import math
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from fleetmind.data.errors import DataError
from fleetmind.data.paths import openb_csv_dir

GPU_MODELS: list[str] = ["A10", "G2", "G3", "P100", "T4", "V100M16", "V100M32"]
"""GPU model vocabulary; the index is the model id (the openb models first, then any seen later)."""

ANY_GPU_MODEL: int = -1
"""``gpu_spec_mask`` of a pod without a GPU-model constraint (all bits set)."""

GPU_MILLI: int = 1000
"""Milli-GPU units in one whole GPU."""

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_REQUIRED = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
POD_OPTIONAL_STR = ("gpu_spec", "qos", "pod_phase")
POD_TIME_COLUMNS = ("creation_time", "deletion_time", "scheduled_time")


class TraceWarning(UserWarning):
    """A trace value the loader changed (``gpu_milli`` above 1000, clipped; below 1000 on a
    multi-GPU pod, read as 1000; above 0 on a pod with ``num_gpu`` 0, read as 0), a ``gpu_spec``
    that names a GPU model no node of the node list has (:func:`check_gpu_specs`), pods larger than
    every node (:func:`check_pod_sizes`), or a job stream too short for the offered load of
    dynamic mode. The CLI prints these as ``fleetmind: warning: <message>``."""


MAX_GPU_MODELS: int = 62
"""Most GPU models :data:`GPU_MODELS` holds, over every trace and node list loaded in one process
(a ``gpu_spec_mask`` is an int64 bitmask over the model ids, kept positive for ``1 << id``)."""


def gpu_model_id(name: str) -> int:
    """Return the id of GPU model ``name`` (registered on first use; at most
    :data:`MAX_GPU_MODELS` models per process).

    Raises:
        DataError: a new name when :data:`GPU_MODELS` is full.
    """
    name = name.strip()
    try:
        return GPU_MODELS.index(name)
    except ValueError:
        if len(GPU_MODELS) >= MAX_GPU_MODELS:
            raise DataError(
                f"too many distinct GPU models: the traces and node lists loaded in this process"
                f" already name {MAX_GPU_MODELS}, the most a gpu_spec bitmask holds; cannot"
                f" register {name!r}"
            ) from None
        GPU_MODELS.append(name)
        return len(GPU_MODELS) - 1


MISSING_GPU_SPECS: frozenset[str] = frozenset(
    ("nan", "-nan", "none", "null", "na", "n/a", "<na>", "#n/a", "#n/a n/a", "#na")
    + ("-1.#ind", "-1.#qnan", "1.#ind", "1.#qnan")
)
"""``gpu_spec`` values read as "no GPU-model constraint" (compared stripped and lower-cased): the
strings pandas reads as missing (``pandas.read_csv``'s default ``na_values``). The upstream README
(``README.upstream.md`` in the openb data folder, ``gpu_spec``) says "``nan`` means no GPU type
constraints", and the FGD authors' ``pod_csv_to_yaml.py`` reads the CSV with ``pandas.read_csv``
(which reads each of these strings as NaN) and ``fillna('')``: no constraint."""


def normalize_gpu_spec(spec: str) -> str:
    """``spec`` stripped, or ``""`` (no constraint) when it is blank or one of
    :data:`MISSING_GPU_SPECS` (any case)."""
    spec = spec.strip()
    return "" if spec.lower() in MISSING_GPU_SPECS else spec


def gpu_spec_mask(spec: str) -> int:
    """Bitmask of the models allowed by a ``|``-separated ``gpu_spec``; :data:`ANY_GPU_MODEL` if empty
    or missing (:func:`normalize_gpu_spec`: ``nan``, ``None``... are no constraint, not a model)."""
    parts = [p.strip() for p in normalize_gpu_spec(spec).split("|") if p.strip()]
    if not parts:
        return ANY_GPU_MODEL
    mask = 0
    for p in parts:
        mask |= 1 << gpu_model_id(p)
    return mask


@dataclass(frozen=True)
class OpenbNodes:
    """A node list: one entry per node.

    Attributes:
        names: ``(N,)`` str, node names (``sn`` column).
        cpu_milli: ``(N,)`` int64, CPU capacity in milli-cores.
        memory_mib: ``(N,)`` int64, memory capacity in MiB.
        num_gpu: ``(N,)`` int64, GPUs on the node (0..8).
        model: ``(N,)`` str, GPU model name ("" for CPU-only nodes).
        model_id: ``(N,)`` int64, index into :data:`GPU_MODELS` (-1 for CPU-only nodes).
        source: the file it came from.
    """

    names: np.ndarray
    cpu_milli: np.ndarray
    memory_mib: np.ndarray
    num_gpu: np.ndarray
    model: np.ndarray
    model_id: np.ndarray
    source: str = ""

    def __len__(self) -> int:
        return len(self.names)

    @property
    def total_gpus(self) -> int:
        return int(self.num_gpu.sum())


@dataclass(frozen=True)
class PodTrace:
    """A pod trace: one entry per pod, in file order.

    Attributes:
        name: trace name (``default``, ``gpuspec20``...) or the file stem.
        pod_names: ``(P,)`` str.
        cpu_milli: ``(P,)`` int64, CPU request in milli-cores.
        memory_mib: ``(P,)`` int64, memory request in MiB.
        num_gpu: ``(P,)`` int64, GPUs requested (0 = CPU-only pod).
        gpu_milli: ``(P,)`` int64, per-GPU share in milli-GPU, clipped to 1000 (0 for CPU-only
            pods, 1000 for pods of several GPUs).
        gpu_spec: ``(P,)`` str, the ``gpu_spec`` as written, stripped ("" when absent, blank or
            a missing-value spelling such as ``nan``: :func:`normalize_gpu_spec`).
        gpu_spec_mask: ``(P,)`` int64, allowed-model bitmask (:data:`ANY_GPU_MODEL` = no constraint).
        qos: ``(P,)`` str ("" when the file has no such column).
        creation_time, deletion_time, scheduled_time: ``(P,)`` float64 seconds, NaN when absent
            (the ``multigpu*`` traces have no times at all).
        extra: extra per-pod arrays added by a simulation mode (see the module docstring).
        source: the file it came from.
        pod_phase: ``(P,)`` str, the file's ``pod_phase`` (``Running``, ``Pending``...; "" where
            blank), or None when the file has no such column (and for in-memory traces).
    """

    name: str
    pod_names: np.ndarray
    cpu_milli: np.ndarray
    memory_mib: np.ndarray
    num_gpu: np.ndarray
    gpu_milli: np.ndarray
    gpu_spec: np.ndarray
    gpu_spec_mask: np.ndarray
    qos: np.ndarray
    creation_time: np.ndarray
    deletion_time: np.ndarray
    scheduled_time: np.ndarray
    extra: dict[str, np.ndarray] = field(default_factory=dict)
    source: str = ""
    pod_phase: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.pod_names)

    @property
    def gpu_request(self) -> np.ndarray:
        """``(P,)`` int64, total GPU request ``num_gpu * gpu_milli`` in milli-GPU."""
        return self.num_gpu * self.gpu_milli

    @property
    def has_times(self) -> bool:
        return bool(np.isfinite(self.creation_time).any())

    def take(self, index: np.ndarray) -> PodTrace:
        """A new trace with the pods at ``index`` (an int array; repeats allowed), in that order."""
        idx = np.asarray(index, dtype=np.int64)
        arrays = {
            k: getattr(self, k)[idx]
            for k in (
                "pod_names",
                "cpu_milli",
                "memory_mib",
                "num_gpu",
                "gpu_milli",
                "gpu_spec",
                "gpu_spec_mask",
                "qos",
                "creation_time",
                "deletion_time",
                "scheduled_time",
            )
        }
        phase = None if self.pod_phase is None else self.pod_phase[idx]
        extra = {k: v[idx] for k, v in self.extra.items()}
        return replace(self, extra=extra, pod_phase=phase, **arrays)

    def with_fields(self, **arrays: np.ndarray) -> PodTrace:
        """A copy with extra per-pod arrays (each of shape ``(P, ...)``) added to :attr:`extra`."""
        for key, arr in arrays.items():
            if len(arr) != len(self):
                raise DataError(f"extra field {key!r} has {len(arr)} entries for {len(self)} pods")
        return replace(self, extra={**self.extra, **arrays})


def _resolve(name_or_path: str | Path, kind: str) -> Path:
    p = Path(name_or_path)
    if p.suffix == ".csv" or p.exists():
        if not p.is_file():
            raise DataError(f"{kind} file not found: {p}")
        return p
    stem = str(name_or_path)
    prefix = "openb_pod_list_" if kind == "trace" else "openb_node_list_"
    cand = openb_csv_dir() / f"{prefix}{stem}.csv"
    if not cand.is_file():
        known = sorted(f.stem.removeprefix(prefix) for f in openb_csv_dir().glob(f"{prefix}*.csv"))
        raise DataError(
            f"unknown openb {kind} {stem!r}: no file {cand.name} (known: {', '.join(known)})"
        )
    return cand


def trace_file(name_or_path: str | Path) -> Path:
    """The CSV file an openb trace name (``default``, ``gpushare40``, ...) or path means, without
    reading it.

    Raises:
        DataError: no such trace (the message lists the known names) or file.
    """
    return _resolve(name_or_path, "trace")


def node_file(name_or_path: str | Path) -> Path:
    """The CSV file an openb node-list name (``gpu_node``, ``all_node``) or path means, without
    reading it.

    Raises:
        DataError: no such node list (the message lists the known names) or file.
    """
    return _resolve(name_or_path, "node")


_MAX_FIELD = float(2**53)
"""Largest count a trace field may hold (every integer up to it is exact as a float; 2**53 MiB is
8 ZiB)."""


def _int_field(value: str, path: Path, row: int, col: str) -> int:
    try:
        f = float(value)
    except ValueError:
        raise DataError(
            f"{path}: row {row} (line {row + 1}): field {col!r} is not a number: {value!r}"
        ) from None
    if not math.isfinite(f) or f < 0 or f != int(f):
        raise DataError(
            f"{path}: row {row} (line {row + 1}): field {col!r} must be a non-negative integer, got {value!r}"
        )
    if f > _MAX_FIELD:  # beyond int64 the arrays cannot hold it; far beyond any real request
        raise DataError(
            f"{path}: row {row} (line {row + 1}): field {col!r} is too large: {value!r} "
            f"(at most {_MAX_FIELD:.0f})"
        )
    return int(f)


def _float_field(value: str, path: Path, row: int, col: str) -> float:
    if value.strip() == "":
        return math.nan
    try:
        f = float(value)
    except ValueError:
        raise DataError(
            f"{path}: row {row} (line {row + 1}): field {col!r} is not a number: {value!r}"
        ) from None
    if math.isinf(f):  # a time at infinity would never arrive or never end
        raise DataError(f"{path}: row {row} (line {row + 1}): field {col!r} is infinite: {value!r}")
    return f


def _read_rows(
    path: Path, required: tuple[str, ...], optional: tuple[str, ...] = ()
) -> tuple[list[str], list[list[str]]]:
    """The header (names stripped) and the rows of the CSV ``path``.

    A UTF-8 byte order mark before the header is dropped (Excel's "CSV UTF-8" export writes one;
    Python's ``utf-8-sig`` codec). A column of ``required`` or ``optional`` named twice is refused:
    which one holds the values would be a guess.

    Raises:
        DataError: unreadable or not UTF-8, no header, a ``required`` column missing, a column
            named twice.
    """
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            reader = csv.reader(fh)
            try:
                header = [h.strip() for h in next(reader)]
            except StopIteration:
                raise DataError(f"{path}: empty file (no header row)") from None
            missing = [c for c in required if c not in header]
            if missing:
                raise DataError(f"{path}: header lacks column(s) {', '.join(missing)}")
            twice = [c for c in (*required, *optional) if header.count(c) > 1]
            if twice:
                raise DataError(f"{path}: header names column(s) {', '.join(twice)} more than once")
            rows = list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise DataError(f"{path}: cannot read CSV: {err}") from None
    return header, rows


def load_openb_nodes(path: str | Path | None = None, gpu_only: bool = True) -> OpenbNodes:
    """Load an openb node list.

    Args:
        path: a CSV path, or an openb node-list name (``gpu_node``, ``all_node``); ``None`` loads
            ``openb_node_list_gpu_node.csv`` from the shared data folder.
        gpu_only: drop nodes without GPUs (the FGD setup uses only the 1,213 GPU nodes).

    Returns:
        :class:`OpenbNodes`, sorted by node name.

    Raises:
        DataError: missing file or column, a row (1-based data row number) with a bad field or
            another number of fields than the header, a node name (``sn``) listed twice, or a
            GPU model past :data:`MAX_GPU_MODELS` (the row and field named).
    """
    p = _resolve(path if path is not None else "gpu_node", "node list")
    header, rows = _read_rows(p, NODE_COLUMNS)
    col = {c: header.index(c) for c in NODE_COLUMNS}
    names, cpu, mem, ngpu, model = [], [], [], [], []
    data_rows: list[int] = []  # each node's data row
    seen: dict[str, int] = {}  # node name -> its data row
    for r, row in enumerate(rows, start=1):
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise DataError(
                f"{p}: row {r} (line {r + 1}): expected {len(header)} fields, got {len(row)}"
            )
        name = row[col["sn"]].strip()
        if name in seen:
            raise DataError(
                f"{p}: row {r} (line {r + 1}): node {name!r} is listed twice (first on line"
                f" {seen[name] + 1}); each node name may appear once"
            )
        seen[name] = r
        data_rows.append(r)
        names.append(name)
        cpu.append(_int_field(row[col["cpu_milli"]], p, r, "cpu_milli"))
        mem.append(_int_field(row[col["memory_mib"]], p, r, "memory_mib"))
        g = _int_field(row[col["gpu"]], p, r, "gpu")
        if g > 8:
            raise DataError(f"{p}: row {r} (line {r + 1}): field 'gpu' must be 0..8, got {g}")
        m = row[col["model"]].strip()
        if g > 0 and not m:
            raise DataError(
                f"{p}: row {r} (line {r + 1}): field 'model' is empty for a node with {g} GPUs"
            )
        ngpu.append(g)
        model.append(m if g > 0 else "")
    order = np.argsort(np.array(names, dtype=str), kind="stable")
    keep = order[np.array(ngpu, dtype=np.int64)[order] > 0] if gpu_only else order
    model_arr = np.array(model, dtype=object)[keep].astype(str)
    model_id = np.full(len(model_arr), -1, dtype=np.int64)
    rows_kept = np.asarray(data_rows, dtype=np.int64)[keep].tolist()
    for i, (m, r) in enumerate(zip(model_arr.tolist(), rows_kept, strict=True)):
        if m:
            try:
                model_id[i] = gpu_model_id(m)
            except DataError as err:
                raise DataError(f"{p}: row {r} (line {r + 1}): field 'model': {err}") from None
    return OpenbNodes(
        names=np.array(names, dtype=str)[keep],
        cpu_milli=np.array(cpu, dtype=np.int64)[keep],
        memory_mib=np.array(mem, dtype=np.int64)[keep],
        num_gpu=np.array(ngpu, dtype=np.int64)[keep],
        model=model_arr,
        model_id=model_id,
        source=str(p),
    )


def _warn_gpu_milli_read(
    p: Path,
    clipped: list[tuple[int, int, int]],
    partial: list[tuple[int, int, int]],
    cpu_only: list[tuple[int, int, int]],
) -> None:
    """One :class:`TraceWarning` per kind of ``gpu_milli`` that :func:`load_openb_trace` reads
    otherwise: above 1000 (``clipped``), below 1000 on a multi-GPU pod (``partial``) and above 0
    on a pod with ``num_gpu`` 0 (``cpu_only``), each a list of ``(data row, num_gpu,
    gpu_milli)``; the warning counts them and names the first."""
    if clipped:
        r, _, v = clipped[0]
        warnings.warn(
            f"{p}: {len(clipped):,} GPU pod(s) ask for gpu_milli above {GPU_MILLI} (first: row {r}"
            f" (line {r + 1}), gpu_milli {v}); gpu_milli is the share of each GPU, so they are"
            f" clipped to {GPU_MILLI} as the FGD simulator does (ask for whole GPUs with num_gpu)",
            TraceWarning,
            stacklevel=3,
        )
    if partial:
        r, ng, v = partial[0]
        warnings.warn(
            f"{p}: {len(partial):,} multi-GPU pod(s) ask for gpu_milli below {GPU_MILLI} (first:"
            f" row {r} (line {r + 1}), num_gpu {ng}, gpu_milli {v}); a pod of several GPUs takes"
            f" whole GPUs, as in the FGD simulator, so they are read as gpu_milli {GPU_MILLI}",
            TraceWarning,
            stacklevel=3,
        )
    if cpu_only:
        r, _, v = cpu_only[0]
        warnings.warn(
            f"{p}: {len(cpu_only):,} pod(s) with num_gpu 0 ask for gpu_milli above 0 (first: row"
            f" {r} (line {r + 1}), gpu_milli {v}); num_gpu 0 makes a pod CPU-only, so they are read"
            f" as CPU-only pods, gpu_milli 0 (ask for a share of one GPU with num_gpu 1)",
            TraceWarning,
            stacklevel=3,
        )


def _check_new_pod_name(p: Path, r: int, name: str, seen: dict[str, int]) -> None:
    """Record pod ``name`` of data row ``r`` in ``seen`` (name -> data row); a name already there
    is a :class:`DataError` naming both lines."""
    if name in seen:
        raise DataError(
            f"{p}: row {r} (line {r + 1}): pod {name!r} is listed twice (first on line"
            f" {seen[name] + 1}); each pod name may appear once"
        )
    seen[name] = r


def _check_gpu_fields(p: Path, r: int, num_gpu: int, gpu_milli: int) -> None:
    """A :class:`DataError` for data row ``r`` when ``num_gpu`` is above 8, or ``gpu_milli`` is 0
    for a GPU pod."""
    if num_gpu > 8:
        raise DataError(f"{p}: row {r} (line {r + 1}): field 'num_gpu' must be 0..8, got {num_gpu}")
    if num_gpu > 0 and gpu_milli == 0:
        raise DataError(
            f"{p}: row {r} (line {r + 1}): field 'gpu_milli' is 0 for a pod with num_gpu > 0"
        )


def _spec_masks(p: Path, spec: np.ndarray, data_rows: np.ndarray) -> np.ndarray:
    """``(P,)`` int64 :func:`gpu_spec_mask` of each pod's ``gpu_spec`` (``data_rows``: each pod's
    data row, named in the :class:`DataError` of a model past :data:`MAX_GPU_MODELS`)."""
    cache: dict[str, int] = {}
    mask = np.empty(len(spec), dtype=np.int64)
    for i, s in enumerate(spec):
        if s not in cache:
            try:
                cache[s] = gpu_spec_mask(s)
            except DataError as err:
                r = int(data_rows[i])
                raise DataError(f"{p}: row {r} (line {r + 1}): field 'gpu_spec': {err}") from None
        mask[i] = cache[s]
    return mask


def load_openb_trace(name_or_path: str | Path) -> PodTrace:
    """Load an openb pod trace by name (``default``, ``gpuspec20``, ``multigpu30``...) or CSV path.

    ``gpu_milli`` (the share of each GPU) is set to 0 for CPU-only pods and clipped to 1000 for GPU
    pods, as the FGD simulator does; a file with GPU pods above 1000 (no openb trace has one) gets a
    :class:`TraceWarning` naming the first such row and how many there are. A pod of several GPUs
    takes whole GPUs (the FGD simulator's rule, which ``envs.core`` follows), so one that asks for
    less than 1000 of each is read as 1000, with a :class:`TraceWarning` of the same kind (no openb
    trace has one either): the GPU it arrives with is then the GPU it holds. A pod with
    ``num_gpu`` 0 is CPU-only whatever its ``gpu_milli``; one with ``gpu_milli`` above 0 gets a
    :class:`TraceWarning` of the same kind (no openb trace has one). Files with only the
    five columns ``name, cpu_milli, memory_mib, num_gpu, gpu_milli`` (the ``multigpu*`` traces) get
    empty strings and NaN times.

    Pod names are unique: a name listed twice is an error naming both lines (the draws of fgd and
    dynamic mode are made in name order, so with two pods of one name the results would depend on
    the file's row order).

    Raises:
        DataError: unknown name, missing file or column, a malformed row, a pod name listed twice,
            or a ``gpu_spec`` model past :data:`MAX_GPU_MODELS`; the message names the file, the
            1-based data row and the field.
    """
    p = _resolve(name_or_path, "trace")
    header, rows = _read_rows(p, POD_REQUIRED, (*POD_OPTIONAL_STR, *POD_TIME_COLUMNS))
    col = {
        c: header.index(c)
        for c in (*POD_REQUIRED, *POD_OPTIONAL_STR, *POD_TIME_COLUMNS)
        if c in header
    }
    n = len(rows)
    ints = {c: np.zeros(n, dtype=np.int64) for c in POD_REQUIRED[1:]}
    strs: dict[str, list[str]] = {c: [""] * n for c in ("name", *POD_OPTIONAL_STR)}
    times = {c: np.full(n, np.nan) for c in POD_TIME_COLUMNS}
    kept = 0
    # (data row, num_gpu, gpu_milli) of GPU pods asking for more than GPU_MILLI per GPU, and of
    # multi-GPU pods asking for less than a whole GPU each
    clipped: list[tuple[int, int, int]] = []
    partial: list[tuple[int, int, int]] = []
    cpu_only: list[tuple[int, int, int]] = []  # num_gpu 0 with a GPU share: read as CPU-only
    data_rows = np.zeros(n, dtype=np.int64)  # each kept pod's data row
    seen: dict[str, int] = {}  # pod name -> its data row
    for r, row in enumerate(rows, start=1):
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise DataError(
                f"{p}: row {r} (line {r + 1}): expected {len(header)} fields, got {len(row)}"
            )
        for c in POD_REQUIRED[1:]:
            ints[c][kept] = _int_field(row[col[c]], p, r, c)
        for c in ("name", *POD_OPTIONAL_STR):
            if c in col:
                strs[c][kept] = row[col[c]].strip()
        pod_name = strs["name"][kept]
        if not pod_name:
            raise DataError(f"{p}: row {r} (line {r + 1}): field 'name' is empty")
        _check_new_pod_name(p, r, pod_name, seen)
        data_rows[kept] = r
        for c in POD_TIME_COLUMNS:
            if c in col:
                times[c][kept] = _float_field(row[col[c]], p, r, c)
        ng, gm = int(ints["num_gpu"][kept]), int(ints["gpu_milli"][kept])
        _check_gpu_fields(p, r, ng, gm)
        if ng > 0 and gm > GPU_MILLI:
            clipped.append((r, ng, gm))
        if ng > 1 and gm < GPU_MILLI:
            partial.append((r, ng, gm))
        if ng == 0 and gm > 0:
            cpu_only.append((r, ng, gm))
        kept += 1
    if kept == 0:
        raise DataError(f"{p}: no pod rows")
    _warn_gpu_milli_read(p, clipped, partial, cpu_only)
    num_gpu = ints["num_gpu"][:kept]
    gpu_milli = np.where(num_gpu > 0, np.minimum(ints["gpu_milli"][:kept], GPU_MILLI), 0)
    gpu_milli = np.where(num_gpu > 1, GPU_MILLI, gpu_milli)  # whole GPUs (the warning above)
    spec = np.array([normalize_gpu_spec(x) for x in strs["gpu_spec"][:kept]], dtype=object)
    spec = np.where(num_gpu > 0, spec, "").astype(str)
    mask = _spec_masks(p, spec, data_rows[:kept])
    name = p.stem.removeprefix("openb_pod_list_")
    return PodTrace(
        name=name,
        pod_names=np.array(strs["name"][:kept], dtype=str),
        cpu_milli=ints["cpu_milli"][:kept],
        memory_mib=ints["memory_mib"][:kept],
        num_gpu=num_gpu,
        gpu_milli=gpu_milli,
        gpu_spec=spec,
        gpu_spec_mask=mask,
        qos=np.array(strs["qos"][:kept], dtype=str),
        creation_time=times["creation_time"][:kept],
        deletion_time=times["deletion_time"][:kept],
        scheduled_time=times["scheduled_time"][:kept],
        source=str(p),
        pod_phase=np.array(strs["pod_phase"][:kept], dtype=str) if "pod_phase" in col else None,
    )


def openb_trace_names() -> list[str]:
    """Names of the openb pod traces in the shared data folder, sorted."""
    return sorted(
        f.stem.removeprefix("openb_pod_list_") for f in openb_csv_dir().glob("openb_pod_list_*.csv")
    )


def load_fgd_published(
    path: str | Path | None = None,
) -> dict[tuple[str, str], dict[int, tuple[float, float]]]:
    """Published per-seed FGD results (``fgd_published_unallocated.csv`` of the shared openb folder).

    Returns:
        ``{(trace, policy): {seed: (unallocated % at 100, unallocated % at 130)}}``.

    Raises:
        DataError: missing file or a malformed row.
    """
    p = Path(path) if path is not None else openb_csv_dir().parent / "fgd_published_unallocated.csv"
    if not p.is_file():
        raise DataError(f"published FGD results not found: {p}")
    cols = ("trace", "policy", "seed", "unallocated_gpu_pct_at_100", "unallocated_gpu_pct_at_130")
    header, rows = _read_rows(p, cols)
    ix = {c: header.index(c) for c in cols}
    out: dict[tuple[str, str], dict[int, tuple[float, float]]] = {}
    for r, row in enumerate(rows, start=1):
        if not row:
            continue
        seed = _int_field(row[ix["seed"]], p, r, "seed")
        u100 = _float_field(
            row[ix["unallocated_gpu_pct_at_100"]], p, r, "unallocated_gpu_pct_at_100"
        )
        u130 = _float_field(
            row[ix["unallocated_gpu_pct_at_130"]], p, r, "unallocated_gpu_pct_at_130"
        )
        out.setdefault((row[ix["trace"]].strip(), row[ix["policy"]].strip()), {})[seed] = (
            u100,
            u130,
        )
    return out


def trace_from_arrays(
    cpu_milli: np.ndarray | list[int],
    memory_mib: np.ndarray | list[int],
    num_gpu: np.ndarray | list[int],
    gpu_milli: np.ndarray | list[int],
    gpu_spec: np.ndarray | list[str] | None = None,
    *,
    name: str = "synthetic",
    creation_time: np.ndarray | list[float] | None = None,
    deletion_time: np.ndarray | list[float] | None = None,
) -> PodTrace:
    """A :class:`PodTrace` built in memory (synthetic traces, tests); pods are named ``pod-00000``...

    ``gpu_milli`` is clipped to 1000 and zeroed for CPU-only pods, as in :func:`load_openb_trace`.
    """
    ng = np.asarray(num_gpu, dtype=np.int64)
    n = len(ng)
    gm = np.where(ng > 0, np.minimum(np.asarray(gpu_milli, dtype=np.int64), GPU_MILLI), 0)
    if ((ng > 0) & (gm <= 0)).any():
        raise DataError("a pod with num_gpu > 0 has gpu_milli 0")
    raw = [str(x) for x in gpu_spec] if gpu_spec is not None else [""] * n
    spec = np.array([normalize_gpu_spec(x) for x in raw], dtype=object)
    spec = np.where(ng > 0, spec, "").astype(str)
    nan = np.full(n, np.nan)
    return PodTrace(
        name=name,
        pod_names=np.array([f"pod-{i:05d}" for i in range(n)], dtype=str),
        cpu_milli=np.asarray(cpu_milli, dtype=np.int64).copy(),
        memory_mib=np.asarray(memory_mib, dtype=np.int64).copy(),
        num_gpu=ng.copy(),
        gpu_milli=gm,
        gpu_spec=spec,
        gpu_spec_mask=np.array([gpu_spec_mask(s) for s in spec], dtype=np.int64),
        qos=np.full(n, "", dtype=str),
        creation_time=np.asarray(creation_time, dtype=float) if creation_time is not None else nan,
        deletion_time=np.asarray(deletion_time, dtype=float)
        if deletion_time is not None
        else nan.copy(),
        scheduled_time=nan.copy(),
    )


def nodes_from_arrays(
    cpu_milli: np.ndarray | list[int],
    memory_mib: np.ndarray | list[int],
    num_gpu: np.ndarray | list[int],
    model: np.ndarray | list[str],
) -> OpenbNodes:
    """An :class:`OpenbNodes` built in memory (hand-made fleets, tests); nodes named ``node-0000``..."""
    ng = np.asarray(num_gpu, dtype=np.int64)
    models = np.array(
        [m if g > 0 else "" for m, g in zip(model, ng.tolist(), strict=True)], dtype=str
    )
    return OpenbNodes(
        names=np.array([f"node-{i:04d}" for i in range(len(ng))], dtype=str),
        cpu_milli=np.asarray(cpu_milli, dtype=np.int64).copy(),
        memory_mib=np.asarray(memory_mib, dtype=np.int64).copy(),
        num_gpu=ng.copy(),
        model=models,
        model_id=np.array([gpu_model_id(m) if m else -1 for m in models], dtype=np.int64),
        source="<memory>",
    )


# ---------------------------------------------------------------------------------------------
# A trace against a node list
# ---------------------------------------------------------------------------------------------


def unknown_gpu_specs(trace: PodTrace, models: Iterable[str]) -> tuple[dict[str, int], int]:
    """The ``gpu_spec`` model names of GPU pods that no node of a node list has.

    Matching is exact (case-sensitive; the openb files spell each model one way, and the
    feasibility rule compares model ids): ``v100`` does not name ``V100``.

    Args:
        trace: the pods.
        models: the GPU models of the node list (e.g. ``OpenbNodes.model``, ``Fleet.model_names``).

    Returns:
        ``({model: GPU pods whose gpu_spec names it}, pods that can run on no node)``: the second
        counts pods whose every named model is unknown (they stay unplaced whatever the policy).
    """
    have = {str(m) for m in models if str(m)}
    spec = trace.gpu_spec[trace.num_gpu > 0]
    names, counts = np.unique(spec[spec != ""], return_counts=True)
    unknown: dict[str, int] = {}
    stranded = 0
    for s, k in zip(names.tolist(), counts.tolist(), strict=True):
        parts = {x.strip() for x in str(s).split("|") if x.strip()}
        missing = parts - have
        for m in missing:
            unknown[m] = unknown.get(m, 0) + int(k)
        if parts and missing == parts:
            stranded += int(k)
    return dict(sorted(unknown.items())), stranded


def check_gpu_specs(trace: PodTrace, models: Iterable[str], what: str = "the node list") -> bool:
    """Warn (:class:`TraceWarning`) when a ``gpu_spec`` of ``trace`` names a GPU model that no node
    of ``what`` has: the unknown names, how many pods carry each, how many can run nowhere, and a
    model that differs only in case. Returns True when it warned."""
    have = sorted({str(m) for m in models if str(m)})
    unknown, stranded = unknown_gpu_specs(trace, have)
    if not unknown:
        return False
    by_lower = {m.lower(): m for m in have}
    items = []
    for name, k in list(unknown.items())[:8]:
        hint = by_lower.get(name.lower())
        pods = f"{k:,} pod" + ("" if k == 1 else "s")
        items.append(f"{name!r} ({pods}" + (f"; the nodes have {hint!r})" if hint else ")"))
    more = f" and {len(unknown) - 8} more" if len(unknown) > 8 else ""
    warnings.warn(
        f"trace {trace.source or trace.name}: gpu_spec names GPU model(s) that no node of {what} has: "
        f"{', '.join(items)}{more}; {stranded:,} pod(s) can run on no node and stay unplaced "
        f"(model names are case-sensitive; the nodes have {', '.join(have) or 'no GPU model'})",
        TraceWarning,
        stacklevel=2,
    )
    return True


def check_pod_sizes(
    trace: PodTrace,
    cpu_milli: np.ndarray,
    memory_mib: np.ndarray,
    num_gpu: np.ndarray,
    what: str = "the node list",
) -> bool:
    """Warn (:class:`TraceWarning`) when pods of ``trace`` ask for more GPUs, CPU or memory than
    the largest node of ``what`` has: such a pod can run on no node, whatever the policy, and is
    counted as failed. Per resource, the largest request, the largest node and how many pods ask
    for more. Returns True when it warned.

    Args:
        trace: the pods.
        cpu_milli, memory_mib, num_gpu: ``(N,)`` capacities of the nodes (milli-cores, MiB, GPUs).
        what: how the message names the nodes.
    """
    over = np.zeros(len(trace), dtype=bool)
    parts = []
    for col, cap in (("num_gpu", num_gpu), ("cpu_milli", cpu_milli), ("memory_mib", memory_mib)):
        want = np.asarray(getattr(trace, col), dtype=np.int64)
        most = int(np.max(cap)) if len(cap) else 0
        big = want > most
        if big.any():
            k = int(np.count_nonzero(big))
            pods = f"{k:,} pod asks" if k == 1 else f"{k:,} pods ask"
            parts.append(f"{col}: {pods} up to {int(want.max()):,}, the largest node has {most:,}")
            over |= big
    if not over.any():
        return False
    warnings.warn(
        f"trace {trace.source or trace.name}: {int(over.sum()):,} pod(s) ask for more than any "
        f"node of {what} has ({'; '.join(parts)}); they can run on no node and stay unplaced",
        TraceWarning,
        stacklevel=2,
    )
    return True


def nodes_fitting(trace: PodTrace, nodes: OpenbNodes) -> np.ndarray:
    """``(P,)`` int64: how many nodes of ``nodes`` could host each pod while empty (CPU, memory,
    ``gpu_spec``, GPU count; the feasibility rule of :class:`fleetmind.envs.core.ClusterState`)."""
    bit = np.where(nodes.model_id >= 0, np.left_shift(1, np.maximum(nodes.model_id, 0)), 0)
    shape = np.stack(
        [trace.cpu_milli, trace.memory_mib, trace.num_gpu, trace.gpu_spec_mask], axis=1
    )
    uniq, inverse = np.unique(shape, axis=0, return_inverse=True)  # one check per pod shape
    counts = np.zeros(len(uniq), dtype=np.int64)
    for u, (cpu, mem, ngpu, mask) in enumerate(uniq.tolist()):
        ok = (nodes.cpu_milli >= cpu) & (nodes.memory_mib >= mem)
        if ngpu > 0:
            ok &= nodes.num_gpu >= ngpu
            if mask != ANY_GPU_MODEL:
                ok &= (bit & mask) != 0
        counts[u] = int(np.count_nonzero(ok))
    return counts[inverse.reshape(-1)]


def no_fit_reason(trace: PodTrace, nodes: OpenbNodes, i: int) -> str:
    """Why pod ``i`` of ``trace`` fits no empty node of ``nodes``, in a few words (the first
    resource it asks more of than the largest node has)."""
    name = str(trace.pod_names[i])
    if len(nodes) == 0:
        return "the node list has no nodes"
    for col, what in (("cpu_milli", "cpu_milli"), ("memory_mib", "memory_mib")):
        want, most = int(getattr(trace, col)[i]), int(getattr(nodes, col).max())
        if want > most:
            return f"pod {name} asks for {what} {want:,} (the largest node has {most:,})"
    ngpu = int(trace.num_gpu[i])
    if ngpu > int(nodes.num_gpu.max()):
        return f"pod {name} asks for {ngpu} GPUs (the largest node has {int(nodes.num_gpu.max())})"
    if trace.gpu_spec[i]:
        spec = str(trace.gpu_spec[i])  # a plain str: numpy 2's repr reads np.str_('H100')
        return f"pod {name} asks for GPU model(s) {spec!r} that no node with room has"
    return f"pod {name} fits no node by CPU, memory and GPUs together"
