"""The self-contained Python snippets of the user docs run as written.

A reader copies these blocks into a shell; one that names an undefined variable fails at the first
try. Only blocks meant to run on their own are run here (the others show call shapes with
placeholders such as ``graph`` or ``model``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNNABLE = ["README.md", "docs/fleet.md"]


def _python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S)


NEEDS_DATA = {"docs/fleet.md"}
"""Docs whose snippets read the shared data (the fleet topologies): skipped without it."""


@pytest.mark.parametrize("doc", RUNNABLE)
def test_snippets_run_as_written(
    doc: str, capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest
) -> None:
    if doc in NEEDS_DATA:
        request.getfixturevalue("shared_data")
    blocks = _python_blocks(ROOT / doc)
    assert blocks, f"{doc} has no python block"
    for code in blocks:
        exec(compile(code, doc, "exec"), {"__name__": "__doc_snippet__"})  # noqa: S102


def test_fleet_snippet_gives_the_pair_it_promises(shared_data: object) -> None:
    (code,) = _python_blocks(ROOT / "docs/fleet.md")
    scope: dict[str, object] = {}
    exec(compile(code, "docs/fleet.md", "exec"), scope)  # noqa: S102
    from fleetmind.data.gpu_alloc import best_gpu_set

    # The comment in the block says (2, 3) on an idle DGX-1 V100.
    assert tuple(best_gpu_set(scope["dgx"], scope["free_mask"], k=2)) == (2, 3)
