"""Feedback labels from the service's database as training and evaluation data.

``fleetmind rca train --data DIR --feedback-db URL`` trains on ``DIR`` plus every incident an
engineer confirmed or corrected (:func:`merge_feedback` writes the combined dataset folder: DIR's
splits and graphs, with the feedback incidents appended to ``train.jsonl`` ``weight`` times each);
``fleetmind rca evaluate --feedback-db URL`` ranks those incidents with every method. The labels
come from :mod:`fleetmind.serving.feedback` (the latest feedback per incident, with the alerts and graph it
was given on).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from fleetmind.data.errors import ConfigError, DataError
from fleetmind.serving.feedback import feedback_incidents


def merge_feedback(
    data_dir: str | Path, feedback_url: str, out_dir: str | Path, weight: int = 1
) -> dict[str, Any]:
    """Write ``out_dir``: the dataset ``data_dir`` with the feedback incidents added to training.

    Args:
        data_dir: a dataset folder (``{train,val,test}.jsonl`` + ``graphs/``).
        feedback_url: the service's database URL (``sqlite:///fleetmind.db``, ``postgresql+...``).
        out_dir: the combined folder to write (replaced when it exists).
        weight: copies of each feedback incident in ``train.jsonl`` (>= 1): a few real labels
            among thousands of simulated ones otherwise weigh little.

    Returns:
        ``{"n_feedback", "weight", "graphs", "dir"}``.

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
    incidents, graphs = feedback_incidents(feedback_url)
    if not incidents:
        raise DataError(f"the feedback database {feedback_url!r} holds no labelled incident")
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
                fh.write(json.dumps(line) + "\n")
    return {
        "n_feedback": len(incidents),
        "weight": weight,
        "graphs": sorted(graphs),
        "dir": str(out),
    }


def merged_dir(out: str | Path, data_dir: str | Path, feedback_url: str, weight: int) -> Path:
    """Where :func:`merge_feedback` writes for these inputs (under the run's ``--out``)."""
    key = hashlib.sha256(f"{Path(data_dir).resolve()}|{feedback_url}|{weight}".encode())
    return Path(out) / f"data-with-feedback-{key.hexdigest()[:10]}"


def safe_url(url: str) -> str:
    """``url`` with any password masked (for logs and JSON)."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy can parse: say nothing about it
        return "<database URL>"


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        dst.symlink_to(src.resolve())
    except OSError:
        shutil.copy(src, dst)
