"""RCA dataset folders: incidents JSONL per split plus one graph JSON per topology (no torch).

A dataset folder (DESIGN.md, "Alerts and incidents")::

    DIR/
      train.jsonl, val.jsonl, test.jsonl   one incident a line (other ``*.jsonl`` splits allowed,
                                           e.g. ``test_large.jsonl``)
      graphs/<graph>.json                  the topology each incident names (``data.graph`` JSON)
      meta.json                            optional: generator settings, seed, split -> graphs,
                                           ``counts`` (incidents per split) and ``complete``

An incident line::

    {"id": "inc-000042", "graph": "g0007", "alerts": [<Alertmanager v4 alert>, ...],
     "root_cause": "us-east/host/h12/gpu3", "fault_type": "gpu_xid", ...}

Extra keys (``secondary`` ground truth, ``silent_root``, ...) are kept as they are.

:class:`DatasetWriter` marks a folder ``"complete": false`` in ``meta.json`` while it writes and
``true`` once every split is whole; :func:`load_dataset` refuses a folder it left incomplete
(:func:`check_complete`). A folder without ``meta.json`` (made by hand) is read as it is.

Example:
    >>> ds = load_dataset("/tmp/rca_small")          # doctest: +SKIP
    >>> inc = ds.splits["test"][0]; g = ds.graph_of(inc)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import re
import stat
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from fleetmind.data.errors import DataError
from fleetmind.data.files import read_json
from fleetmind.data.graph import DependencyGraph

STANDARD_SPLITS: tuple[str, ...] = ("train", "val", "test")
"""Split names every generated dataset has; :func:`load_dataset` also reads any other ``*.jsonl``."""

REQUIRED_KEYS: tuple[str, ...] = ("id", "graph", "alerts", "root_cause", "fault_type")
"""Keys every incident line must have."""


# ------------------------------------------------------------------------------ alert timestamps
_ZERO_TIME = datetime(1970, 1, 1).timestamp()  # endsAt "0001-01-01..." (firing) falls below this

_FRAC_RE = re.compile(r"(\.\d{6})\d+")


_TIME_CACHE: dict[str, float | None] = {}

_TIME_CACHE_MAX = 200_000


MS_LIKE = 1e11
"""Numeric alert timestamps from this size on read as milliseconds and are refused (unix seconds
reach it in the year 5138; unix milliseconds passed it in 1973): the threshold of
``fleetmind.data.petshop.MS_LIKE`` (kept here so that reading an alert does not import pandas)."""


def parse_time(value: Any) -> float | None:
    """Parse an alert timestamp to unix seconds: an RFC 3339 string (Alertmanager style, ``Z`` or
    offset, up to ns; without an offset, UTC) or a number of unix seconds.

    Returns ``None`` for a missing value (``None``, ``""``), Alertmanager's zero time
    (``0001-01-01T00:00:00Z``) or any time before 1970 (as the service reads it). Parsed strings
    are memoised (alert storms repeat the same evaluation timestamps).

    Raises:
        DataError: for a string that is not RFC 3339, a boolean, a number that is not finite, or a
            number of at least :data:`MS_LIKE` (milliseconds, not seconds).
    """
    if value is None or value == "":
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _parse_time_number(value)
    if type(value) is str:
        try:
            return _TIME_CACHE[value]
        except KeyError:
            t = _parse_time_str(value)
            if len(_TIME_CACHE) >= _TIME_CACHE_MAX:
                _TIME_CACHE.clear()
            _TIME_CACHE[value] = t
            return t
    return _parse_time_str(value)


def _parse_time_number(value: float) -> float | None:
    """A number of unix seconds, checked (see :func:`parse_time`)."""
    try:
        t = float(value)
    except OverflowError:  # an int too large for a float
        t = math.inf
    if not math.isfinite(t):
        raise DataError(f"alert timestamp {value!r} is not a finite number of unix seconds")
    if abs(t) >= MS_LIKE:
        raise DataError(
            f"alert timestamp {value!r} is after the year 5138 as unix seconds; it looks like "
            "milliseconds: write unix seconds or RFC 3339"
        )
    return None if t < _ZERO_TIME else t


def _parse_time_str(value: Any) -> float | None:
    s = str(value).strip()
    if s.startswith("0001-01-01"):
        return None
    dot = s.find(".")
    # more than 6 fraction digits (Go's nanoseconds): keep microseconds; skipped when the first
    # fraction has no 7th digit and there is no other dot (then the pattern cannot match)
    if dot >= 0 and (s[dot + 7 : dot + 8].isdigit() or s.count(".") > 1):
        s = _FRAC_RE.sub(r"\1", s)
    if s.endswith(("Z", "z")):
        s = s[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(s)
    except ValueError:
        raise DataError(f"alert timestamp {value!r} is not RFC 3339") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    t = dt.timestamp()
    return None if t < _ZERO_TIME else t


@dataclass
class RCADataset:
    """An RCA dataset folder read into memory.

    Attributes:
        root: the folder.
        splits: split name -> incidents (dicts of the incident contract), in file order.
        graphs: graph name -> :class:`DependencyGraph` (every graph an incident names).
        meta: the parsed ``meta.json`` (empty when the folder has none).
    """

    root: Path
    splits: dict[str, list[dict[str, Any]]]
    graphs: dict[str, DependencyGraph]
    meta: dict[str, Any] = field(default_factory=dict)

    def graph_of(self, incident: Mapping[str, Any]) -> DependencyGraph:
        """The graph an incident refers to."""
        return self.graphs[incident["graph"]]

    def split(self, name: str) -> list[dict[str, Any]]:
        """Incidents of split ``name``; DataError naming the available splits when absent."""
        if name not in self.splits:
            raise DataError(
                f"dataset {self.root} has no split {name!r} (has: {', '.join(sorted(self.splits))})"
            )
        return self.splits[name]

    def graphs_in(self, split: str) -> list[str]:
        """Sorted names of the graphs that incidents of ``split`` use."""
        return sorted({inc["graph"] for inc in self.split(split)})


def validate_incident(
    inc: Any, where: str, graphs: Mapping[str, DependencyGraph] | None = None
) -> None:
    """Check one incident dict; raises DataError naming ``where`` (file:line) and the bad field."""
    if not isinstance(inc, dict):
        raise DataError(f"{where}: an incident must be a JSON object")
    for key in REQUIRED_KEYS:
        if key not in inc:
            raise DataError(f"{where}: incident has no {key!r} field")
    if not isinstance(inc["alerts"], list):
        raise DataError(f"{where}: 'alerts' must be a list of Alertmanager alert objects")
    for j, alert in enumerate(inc["alerts"]):
        if not isinstance(alert, dict) or not isinstance(alert.get("labels"), dict):
            raise DataError(f"{where}: alert {j} has no 'labels' object")
        if "alertname" not in alert["labels"]:
            raise DataError(f"{where}: alert {j} has no 'alertname' label")
        _check_alert(alert, f"{where}: alert {j}")
    if graphs is not None:
        g = graphs.get(inc["graph"])
        if g is None:
            raise DataError(
                f"{where}: graph {inc['graph']!r} has no file graphs/{inc['graph']}.json"
            )
        if inc["root_cause"] not in g.index:
            raise DataError(
                f"{where}: root_cause {inc['root_cause']!r} is not a node of graph {inc['graph']!r}"
            )


def _check_alert(alert: dict[str, Any], where: str) -> None:
    """The Alertmanager types of one alert's fields that the rankers read: ``labels`` (an object,
    checked by the caller) and ``annotations`` (an object when present) map names to strings, and
    ``startsAt``/``endsAt`` are timestamps :func:`parse_time` reads (RFC 3339, unix seconds) or
    absent. A label value that is no string would be read as its text by the alert mapping, and
    ``severity: 3`` as no severity at all."""
    for key, value in alert["labels"].items():
        if type(value) is not str:
            raise DataError(
                f"{where}: label {key!r} is {_json_type(value)}; label values must be strings"
            )
    ann = alert.get("annotations")
    if ann is not None:
        if not isinstance(ann, dict):
            raise DataError(
                f"{where}: 'annotations' is {_json_type(ann)}; it must be an object of strings"
            )
        for key, value in ann.items():
            if type(value) is not str:
                raise DataError(
                    f"{where}: annotation {key!r} is {_json_type(value)}; annotation values "
                    "must be strings"
                )
    for key in ("startsAt", "endsAt"):
        value = alert.get(key)
        if value is None or type(value) is str and value in _TIME_CACHE:
            continue
        try:
            parse_time(value)
        except DataError as err:
            raise DataError(f"{where}: {key}: {err}") from None


def _json_type(value: Any) -> str:
    """``value``'s JSON type in words, for messages ("a number", "an array", ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"a number ({value!r})"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


def read_incidents(path: str | Path) -> list[dict[str, Any]]:
    """Read one split file (JSONL); raises DataError naming the file and line of a bad entry."""
    p = Path(path)
    out: list[dict[str, Any]] = []
    try:
        with p.open("rb") as fh:
            for lineno, raw in enumerate(fh, 1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    raise DataError(
                        f"{p}:{lineno}: not UTF-8 text (byte 0x{raw[err.start]:02x} is byte "
                        f"{err.start + 1} of the line)"
                    ) from None
                if not line.strip():
                    continue
                if lineno == 1 and line.startswith("\ufeff"):  # a BOM, as utf-8-sig reads it
                    line = line[1:]
                try:
                    inc = json.loads(line)
                except json.JSONDecodeError as err:
                    raise DataError(f"{p}:{lineno}: not valid JSON ({err.msg})") from None
                except ValueError as err:  # an integer over Python's 4,300-digit limit
                    raise DataError(f"{p}:{lineno}: not valid JSON ({err})") from None
                except RecursionError:  # deeper than the interpreter's recursion limit
                    raise DataError(
                        f"{p}:{lineno}: not valid JSON (arrays or objects nested too deeply)"
                    ) from None
                validate_incident(inc, f"{p}:{lineno}")
                out.append(inc)
    except FileNotFoundError:
        raise DataError(f"split file not found: {p}") from None
    except IsADirectoryError:
        raise DataError(f"split file {p} is a folder, not a file") from None
    return out


def load_dataset(path: str | Path, splits: str | Iterable[str] | None = None) -> RCADataset:
    """Read a dataset folder.

    Args:
        path: the folder (``{train,val,test}.jsonl`` + ``graphs/``).
        splits: the split names to read, or one name (default: every ``*.jsonl`` in the
            folder). A named split that is missing is an error.

    Raises:
        DataError: the folder, a split file or a graph file is missing or malformed, or an incident
            names an unknown graph or a root cause that is not a node of its graph.
    """
    root = Path(path)
    if not root.is_dir():
        raise DataError(f"dataset folder not found: {root}")
    if not any(root.glob("*.jsonl")) and (root / "graph.csv").is_file():
        raise DataError(  # a scenario in the PetShop layout (docs/petshop.md), not a dataset
            f"{root} holds a scenario in the PetShop layout (graph.csv, metric windows), not an "
            f"incident dataset: evaluate it with `fleetmind rca petshop --scenario {root}`"
        )
    if splits is None:
        names = sorted(p.stem for p in root.glob("*.jsonl"))
        if not names:
            raise DataError(
                f"dataset folder {root} has no split files (expected train.jsonl, val.jsonl, test.jsonl)"
            )
    else:
        names = [splits] if isinstance(splits, str) else list(splits)  # "test": one split
        missing = [n for n in names if not (root / f"{n}.jsonl").is_file()]
        if missing:
            have = sorted(p.stem for p in root.glob("*.jsonl"))
            raise DataError(
                f"dataset {root} has no split {missing[0]!r} "
                f"(has: {', '.join(have) if have else 'no *.jsonl split files'})"
            )
    gdir = root / "graphs"
    if not gdir.is_dir():
        raise DataError(f"dataset folder {root} has no graphs/ folder")
    data = {name: read_incidents(root / f"{name}.jsonl") for name in names}
    graphs: dict[str, DependencyGraph] = {}
    for name, incidents in data.items():
        for inc in incidents:
            gname = inc["graph"]
            if gname not in graphs:
                gpath = gdir / f"{gname}.json"
                if not gpath.is_file():
                    raise DataError(
                        f"{root / (name + '.jsonl')}: incident {inc['id']!r} names graph {gname!r} but {gpath} does not exist"
                    )
                graphs[gname] = DependencyGraph.load(gpath)
            validate_incident(inc, f"{root / (name + '.jsonl')}: incident {inc['id']!r}", graphs)
    meta: dict[str, Any] = {}
    mpath = root / "meta.json"
    if mpath.is_file():
        meta = read_json(mpath, "dataset metadata")
    check_complete(root, meta, {name: len(incs) for name, incs in data.items()})
    return RCADataset(root=root, splits=data, graphs=graphs, meta=meta)


def check_folder_complete(path: str | Path) -> None:
    """:func:`check_complete` for a folder without parsing its incidents (each split's size is its
    count of non-blank lines): for readers that may skip :func:`load_dataset`, such as a feature
    cache.

    Raises:
        DataError: as :func:`check_complete`; a folder that is not there passes (its reader says so).
    """
    root = Path(path)
    mpath = root / "meta.json"
    if not mpath.is_file():
        return
    meta = read_json(mpath, "dataset metadata")
    sizes = {}
    for split in sorted(root.glob("*.jsonl")):
        with split.open("rb") as fh:
            sizes[split.stem] = sum(1 for line in fh if line.strip())
    check_complete(root, meta, sizes)


def check_complete(root: Path, meta: Any, sizes: Mapping[str, int]) -> None:
    """Refuse a dataset folder whose writer did not finish.

    Args:
        root: the folder (for the message).
        meta: its parsed ``meta.json`` (``{}`` when it has none: a folder made by hand passes).
        sizes: split name -> incidents read from ``<split>.jsonl``.

    Raises:
        DataError: one line saying to regenerate the folder, when ``meta.json`` says
            ``"complete": false`` (the writer stopped, or is still writing), holds nothing but
            ``counts`` (what an interrupted ``fleetmind rca generate`` left before ``complete``
            was recorded), or records more incidents for a split than its file holds, or a
            different number for a split other than ``train`` (``rca train --feedback-db`` and
            ``benchmarks/rca/merge_train.py`` append training incidents to a copy).
    """
    if not meta:
        return
    if not isinstance(meta, dict):
        raise DataError(f"dataset metadata {root / 'meta.json'} must be a JSON object")
    redo = "regenerate it (fleetmind rca generate --out DIR)"
    complete = meta.get("complete")
    if complete is False:
        why = f" ({meta['stopped_by']})" if meta.get("stopped_by") else ""
        raise DataError(
            f"dataset {root} is incomplete: its writer stopped before the end{why}; {redo}"
        )
    if complete is None and set(meta) == {"counts"}:
        raise DataError(
            f"dataset {root} may be incomplete: its meta.json holds only split counts, as an "
            f"interrupted `fleetmind rca generate` left it; {redo}, or delete meta.json if every "
            "split file is whole"
        )
    counts = meta.get("counts")
    if not isinstance(counts, dict):
        return
    for name, n in sizes.items():
        want = counts.get(name)
        if not isinstance(want, int) or n == want or (name == "train" and n > want):
            continue
        raise DataError(
            f"dataset {root} is incomplete: {name}.jsonl holds {n} incidents but meta.json "
            f"records {want}; {redo}"
        )


LOCK_NAME = ".fleetmind-writing.lock"
"""The file in a dataset folder that :class:`DatasetWriter` locks while it writes (hidden, and not
a ``*.jsonl``, ``meta.json`` or ``graphs/`` file: no reader or dataset hash sees it)."""


class DatasetWriter:
    """Streams a dataset folder to disk: graphs once, incidents line by line.

    Use as a context manager::

        with DatasetWriter(out) as w:
            w.add_graph(g)
            w.add_incident("train", inc)
            w.set_meta({...})

    On entering, the writer takes an exclusive lock on ``.fleetmind-writing.lock`` in the folder
    (``flock``, held to the end of the block and released by the kernel if the process dies; the
    file, holding the writer's pid, is removed when the block ends, and one a killed writer left is
    ignored and taken over): a second writer of the same folder is refused with
    :class:`DataError` naming the first one's pid, instead of deleting the split files the first
    one is writing. Then ``meta.json`` becomes ``{"complete": false}`` (replacing an earlier dataset's,
    whose split files are removed, a split written again keeping its old file's permission
    bits; a non-empty folder that is not a dataset is refused); on
    a clean exit it is the :meth:`set_meta` dict plus ``counts`` and ``"complete": true``. When an
    exception (Ctrl-C included) leaves the block, it stays ``"complete": false`` with the
    ``counts`` written so far and ``stopped_by`` (the exception's type), so that
    :func:`load_dataset` refuses the partial folder; a killed process leaves the first marker.
    """

    def __init__(self, path: str | Path) -> None:
        self.root = Path(path)
        self._files: dict[str, IO[str]] = {}
        self._graphs: set[str] = set()
        self.counts: dict[str, int] = {}
        self.meta: dict[str, Any] = {}
        self._modes: dict[str, int] = {}  # split -> permission bits of the file it replaces
        self._lock: int | None = None  # the descriptor of the locked LOCK_NAME

    def __enter__(self) -> DatasetWriter:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise DataError(f"cannot create dataset folder {self.root}: {err}") from None
        self._take_lock()
        try:
            self._start()
        except BaseException:
            self._release_lock()
            raise
        return self

    def _start(self) -> None:
        """The first marker, after the lock is held: the earlier dataset's split files go."""
        old_splits = self._earlier_splits()
        try:
            (self.root / "graphs").mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise DataError(f"cannot create dataset folder {self.root}: {err}") from None
        for split in old_splits:  # only the split files a dataset writes, never other files
            path = self.root / f"{split}.jsonl"
            try:  # the new file gets the old one's permission bits, whatever the umask
                self._modes[split] = stat.S_IMODE(path.stat().st_mode)
            except OSError:  # not there
                pass
            path.unlink(missing_ok=True)
        self._write_meta({"complete": False})

    def _take_lock(self) -> None:
        """Lock :data:`LOCK_NAME` in the folder for this writer (``flock``, non-blocking) and write
        this process's pid into it; :class:`DataError` when another writer holds it
        (``EWOULDBLOCK``, ``EAGAIN``; ``EACCES``, which some systems answer for a held lock). A lock
        file removed by the writer that held it between our open and our lock is opened again, so
        that two writers never hold locks on two different files of that name. A file system that cannot lock (``ENOLCK``: NFS without ``lockd``;
        ``ENOSYS``, ``EOPNOTSUPP``...) is no other writer: the folder is written unguarded, with
        one warning line on stderr."""
        held = {errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES}
        path = self.root / LOCK_NAME
        for _ in range(100):
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as err:
                raise DataError(f"cannot create {path}: {err.strerror or err}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                if err.errno not in held:  # ENOLCK (NFS without lockd), ENOSYS...
                    os.close(fd)
                    with contextlib.suppress(OSError):  # no lock, so no lock file left behind
                        path.unlink()
                    from tqdm import tqdm  # clears a progress bar on screen, then redraws it

                    tqdm.write(
                        f"fleetmind: warning: {self.root}: the file system does not support locks "
                        f"({err.strerror or err}); not guarded against a second writer",
                        file=sys.stderr,
                    )
                    return
                pid = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
                os.close(fd)
                who = f" (pid {pid})" if pid.isdigit() else ""
                raise DataError(
                    f"{self.root} is being written by another process{who}: wait for it to end, "
                    "or choose another folder"
                ) from None
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                same = False
            if same:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
                self._lock = fd
                return
            os.close(fd)  # the file we locked was removed as its writer ended: open the new one
        raise DataError(f"cannot lock {path}: it keeps being replaced")

    def _release_lock(self) -> None:
        """Remove :data:`LOCK_NAME` (while still holding it) and release the lock."""
        if self._lock is None:
            return
        with contextlib.suppress(OSError):
            (self.root / LOCK_NAME).unlink()
        os.close(self._lock)
        self._lock = None

    def _earlier_splits(self) -> set[str]:
        """The split names of the dataset this folder already holds (their ``*.jsonl`` are
        replaced); an empty set for a new or empty folder. A folder holding anything else (no
        ``meta.json`` that a :class:`DatasetWriter` wrote) is refused with :class:`DataError`:
        its files are the user's, not a dataset's to overwrite."""
        if not self.root.is_dir() or not any(p.name != LOCK_NAME for p in self.root.iterdir()):
            return set()
        try:
            meta = json.loads((self.root / "meta.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            meta = None
        # "generator" or "complete": a writer's meta.json; only "counts": one an interrupted
        # generation left before "complete" existed (check_complete asks to regenerate it)
        legacy = (
            isinstance(meta, dict) and set(meta) == {"counts"} and isinstance(meta["counts"], dict)
        )
        if not isinstance(meta, dict) or not ("generator" in meta or "complete" in meta or legacy):
            raise DataError(
                f"{self.root} is not empty and not a FleetMind dataset folder (no meta.json of "
                "one): choose a new or empty folder"
            )
        counts = meta.get("counts")
        named = (
            [k for k in counts if "/" not in k and "\\" not in k]
            if isinstance(counts, dict)
            else []
        )
        return {*STANDARD_SPLITS, "test_large", *named}

    def _write_meta(self, meta: Mapping[str, Any]) -> None:
        (self.root / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")

    def add_graph(self, graph: DependencyGraph) -> None:
        """Write ``graphs/<name>.json`` (once per name)."""
        if graph.name not in self._graphs:
            graph.save(self.root / "graphs" / f"{graph.name}.json")
            self._graphs.add(graph.name)

    def open_split(self, split: str) -> None:
        """Create ``<split>.jsonl`` even if it gets no incidents."""
        if split not in self._files:
            fh = (self.root / f"{split}.jsonl").open("w")
            self._files[split] = fh
            if split in self._modes:  # the bits of the earlier dataset's file of that split
                os.fchmod(fh.fileno(), self._modes[split])
            self.counts.setdefault(split, 0)

    def add_incident(self, split: str, incident: Mapping[str, Any]) -> None:
        """Append one incident line to ``<split>.jsonl``."""
        self.open_split(split)
        self._files[split].write(json.dumps(incident, separators=(",", ":")) + "\n")
        self.counts[split] += 1

    def set_meta(self, meta: Mapping[str, Any]) -> None:
        """What ``meta.json`` holds once the block ends without an error."""
        self.meta = dict(meta)

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        try:
            for fh in self._files.values():
                fh.close()
            if exc_type is not None:
                stopped = {
                    "complete": False,
                    "counts": self.counts,
                    "stopped_by": exc_type.__name__,
                }
                self._write_meta(stopped)
                return
            meta = dict(self.meta)
            meta.setdefault("counts", self.counts)
            meta["complete"] = True
            self._write_meta(meta)
        finally:
            self._release_lock()


def write_dataset(
    path: str | Path,
    splits: Mapping[str, Iterable[Mapping[str, Any]]],
    graphs: Iterable[DependencyGraph],
    meta: Mapping[str, Any] | None = None,
) -> Path:
    """Write a whole dataset folder at once (see :class:`DatasetWriter` for streaming)."""
    with DatasetWriter(path) as w:
        for g in graphs:
            w.add_graph(g)
        for name, incidents in splits.items():
            w.open_split(name)
            for inc in incidents:
                w.add_incident(name, inc)
        if meta:
            w.set_meta(meta)
    return Path(path)
