"""``rca generate --out`` over an earlier dataset keeps the permission bits of the split files it
rewrites (README: "rewritten files keep their permission bits"), as it does for ``meta.json``.
Before the fix :class:`DatasetWriter` deleted the old ``*.jsonl`` and created new ones, whose bits
followed the umask: ``chmod 640`` on a dataset, then regenerating under ``umask 077``, left the
splits ``600`` and ``meta.json`` ``640``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetmind.data.rca_dataset import write_dataset

SPLITS = {"train": [{"id": "a"}], "val": [{"id": "b"}], "test": [{"id": "c"}]}


@pytest.fixture
def umask_077() -> Iterator[None]:
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_rewritten_split_files_keep_their_bits(tmp_path: Path, umask_077: None) -> None:
    out = tmp_path / "ds"
    write_dataset(out, SPLITS, [], meta={"generator": "test"})
    for name in ("train.jsonl", "val.jsonl", "test.jsonl", "meta.json"):
        os.chmod(out / name, 0o640)
    os.chmod(out / "val.jsonl", 0o604)
    write_dataset(out, {**SPLITS, "test_large": [{"id": "d"}]}, [], meta={"generator": "test"})
    assert _mode(out / "train.jsonl") == 0o640
    assert _mode(out / "test.jsonl") == 0o640
    assert _mode(out / "val.jsonl") == 0o604
    assert _mode(out / "meta.json") == 0o640
    assert _mode(out / "test_large.jsonl") == 0o600  # a new file: the umask's
    assert (out / "train.jsonl").read_text() == '{"id":"a"}\n'
