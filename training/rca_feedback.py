"""Feedback labels from the service's database as training and evaluation data.

``fleetmind rca train --data DIR --feedback-db URL`` trains on ``DIR`` plus every incident an
engineer confirmed or corrected (:func:`merge_feedback` writes the combined dataset folder: DIR's
splits and graphs, with the feedback incidents appended to ``train.jsonl`` ``weight`` times each,
each line marked with a ``feedback`` key so that training keeps them out of validation and
subsampling, :class:`fleetmind.rca.lightning_module.RCADataModule`);
``fleetmind rca evaluate --feedback-db URL`` ranks those incidents with every method. The labels
come from :mod:`fleetmind.serving.feedback` (the latest feedback per incident given in the period
asked for, with the alerts and graph it was given on).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from fleetmind.data.errors import ConfigError, DataError
from fleetmind.serving.db import shown_url
from fleetmind.serving.feedback import feedback_incidents, feedback_time


def merge_feedback(
    data_dir: str | Path,
    feedback_url: str,
    out_dir: str | Path,
    weight: int = 1,
    since: float | None = None,
    until: float | None = None,
) -> dict[str, Any]:
    """Write ``out_dir``: the dataset ``data_dir`` with the feedback incidents added to training.

    Args:
        data_dir: a dataset folder (``{train,val,test}.jsonl`` + ``graphs/``).
        feedback_url: the service's database URL (``sqlite:///fleetmind.db``, ``postgresql+...``).
        out_dir: the combined folder to write (replaced when it exists).
        weight: copies of each feedback incident in ``train.jsonl`` (>= 1): a few real labels
            among thousands of simulated ones otherwise weigh little.
        since, until: only feedback given in ``[since, until)`` (unix seconds; ``None``: open),
            see :func:`fleetmind.serving.feedback.feedback_incidents`.

    Returns:
        ``{"n_feedback", "n_untyped", "weight", "graphs", "dir"}`` (``n_untyped``: incidents
        without a fault type, which train the ranking only).

    Raises:
        ConfigError: ``weight`` < 1 or ``data_dir`` is not a dataset folder.
        NotAvailableError: the database cannot be read.
        DataError: it holds no usable feedback.
    """
    if weight < 1:
        raise ConfigError(f"--feedback-weight must be >= 1, got {weight}")
    src = Path(data_dir)
    if not (src / "train.jsonl").is_file() or not (src / "graphs").is_dir():
        raise ConfigError(f"{src} is not a dataset folder (needs train.jsonl and graphs/)")
    incidents, graphs = feedback_incidents(feedback_url, since, until)
    if not incidents:
        period = "" if since is None and until is None else " given in the period asked for"
        raise DataError(
            f"the feedback database {safe_url(feedback_url)!r} holds no labelled incident{period}"
        )
    out = Path(out_dir)
    if out.exists():
        shutil.rmtree(out)
    (out / "graphs").mkdir(parents=True)
    for g in (src / "graphs").glob("*.json"):
        _link_or_copy(g, out / "graphs" / g.name)
    for name, graph in graphs.items():
        graph.save(out / "graphs" / f"{name}.json")
    for split in src.glob("*.jsonl"):
        if split.name != "train.jsonl":
            _link_or_copy(split, out / split.name)
    if (src / "meta.json").is_file():
        shutil.copy(src / "meta.json", out / "meta.json")
    with (out / "train.jsonl").open("w") as fh:
        fh.write((src / "train.jsonl").read_text().rstrip("\n") + "\n")
        for inc in incidents:
            for k in range(weight):
                line = {key: v for key, v in inc.items() if key != "feedback"}
                line["id"] = f"{inc['id']}#{k}" if weight > 1 else inc["id"]
                line["feedback"] = {"id": inc["id"], "created_at": inc["feedback"]["created_at"]}
                fh.write(json.dumps(line) + "\n")
    return {
        "n_feedback": len(incidents),
        "n_untyped": sum(1 for inc in incidents if inc["fault_type"] is None),
        "weight": weight,
        "graphs": sorted(graphs),
        "dir": str(out),
    }


def feedback_period(args: Any) -> tuple[float | None, float | None]:
    """``(since, until)`` of ``--feedback-since`` / ``--feedback-until`` in unix seconds
    (:func:`fleetmind.serving.feedback.feedback_time`; ``None``: not given); ``args``: a
    :class:`fleetmind.training.rca_train.Args` or the parsed flags of ``rca train`` / ``rca
    evaluate`` (``feedback_db``, ``feedback_since``, ``feedback_until``).

    Raises:
        ConfigError: either without ``--feedback-db``, a value that is no ISO 8601 date, or a
            period that ends before it starts.
    """
    given = {
        "--feedback-since": getattr(args, "feedback_since", None),
        "--feedback-until": getattr(args, "feedback_until", None),
    }
    if not getattr(args, "feedback_db", None) and any(v is not None for v in given.values()):
        flags = [f for f, v in given.items() if v is not None]
        verb = "select" if len(flags) > 1 else "selects"
        raise ConfigError(f"{' and '.join(flags)} {verb} feedback: give --feedback-db URL as well")
    since, until = (None if v is None else feedback_time(v, f) for f, v in given.items())
    if since is not None and until is not None and since >= until:
        raise ConfigError(
            f"--feedback-since {given['--feedback-since']} must come before --feedback-until "
            f"{given['--feedback-until']}"
        )
    return since, until


def merged_dir(
    out: str | Path,
    data_dir: str | Path,
    feedback_url: str,
    weight: int,
    since: float | None = None,
    until: float | None = None,
) -> Path:
    """Where :func:`merge_feedback` writes for these inputs (under the run's ``--out``)."""
    period = "" if since is None and until is None else f"|{since}|{until}"
    key = hashlib.sha256(f"{Path(data_dir).resolve()}|{feedback_url}|{weight}{period}".encode())
    return Path(out) / f"data-with-feedback-{key.hexdigest()[:10]}"


def safe_url(url: str) -> str:
    """``url`` with any password masked (for logs and JSON): :func:`fleetmind.serving.db.shown_url`."""
    return shown_url(url)


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        dst.symlink_to(src.resolve())
    except OSError:
        shutil.copy(src, dst)
