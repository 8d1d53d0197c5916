"""benchmarks/INDEX.md says of every result whether its provenance is complete, and how to rerun
an older command whose script's options changed.

Results are not rewritten after the fact; the index marks what each lacks: one of the fields
``benchmarks/provenance.py`` writes (command, commit, machine, versions), a commit this
repository does not hold, or code changed beside that commit (``code_modified``). The "run now as"
table used to send ``--repo`` to ``benchmarks.serving.cpu_loop`` and ``incident_worker``, which
no longer take it (their module docstrings: run them with the other checkout's Python instead).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from benchmarks import index

FULL = {
    "command": "python -m benchmarks.x",
    "commit": "a" * 40,
    "code_modified": False,
    "machine": {"platform": "Linux"},
    "versions": {"python": "3.11"},
}


@pytest.mark.parametrize(
    "change,expected",
    [
        ({}, "complete"),
        ({"commit": None, "versions": None}, "no commit, versions"),
        ({"versions": None, "machine": {"packages": {"torch": "2"}}}, "complete"),  # older layout
        ({"commit": "bae186cf25a974e01afbbe7c9e17da25ead721ab"}, "commit not in this repository"),
        ({"code_modified": True}, "code modified beside the commit"),
        (
            {"command": None, "commit": "8146e1e", "code_modified": True},
            "no command; commit not in this repository; code modified beside the commit",
        ),
    ],
)
def test_provenance_says_what_a_result_lacks(change: dict, expected: str) -> None:
    d = {k: v for k, v in {**FULL, **change}.items() if v is not None}
    assert index.provenance_of(d) == expected


def test_every_row_has_a_provenance_cell() -> None:
    text = index.render()
    assert "| file | command | commit | date (UTC) | provenance | headline | cited by |" in text
    k8s = next(ln for ln in text.splitlines() if ln.startswith("| [`serving/k8s.json`]"))
    assert "| commit not in this repository |" in k8s


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=index.REPO_ROOT, capture_output=True, text=True)


def test_unknown_commits_are_those_git_does_not_hold() -> None:
    """The list stands in for git (the index must not depend on the clone); here it is checked
    against git where the whole history is there."""
    shallow = _git("rev-parse", "--is-shallow-repository")
    if shallow.returncode != 0 or shallow.stdout.strip() != "false":
        pytest.skip("needs a git checkout with its whole history")
    history = _git("rev-list", "--all").stdout.split()
    recorded = set()
    for p in index.result_files():
        d = json.loads(p.read_text())
        commit = index.recorded_commit(d) if isinstance(d, dict) else None
        if commit:
            recorded.add(commit)
    unknown = {c for c in recorded if not any(h.startswith(c) for h in history)}
    listed = {c for c in recorded if any(c.startswith(u) for u in index.UNKNOWN_COMMITS)}
    assert unknown == listed


def test_run_now_as_covers_every_option_the_module_dropped() -> None:
    """Every recorded ``python benchmarks/<script>.py`` command whose option the module no longer
    takes is covered by :data:`benchmarks.index.REMOVED_OPTIONS` (checked with ``--help``)."""
    dropped: dict[str, set[str]] = {}
    for p in index.result_files():
        d = json.loads(p.read_text())
        cmd = index.command_of(d) if isinstance(d, dict) else None
        for script, module in index.MOVED_SCRIPTS.items():
            m = re.search(rf"python3? {re.escape(script)}(.*)", cmd or "")
            if m and module.startswith("benchmarks.serving."):  # light to import: --help is quick
                dropped.setdefault(module, set()).update(re.findall(r"(?<!\S)--[a-z-]+", m[1]))
    assert "--repo" in dropped["benchmarks.serving.cpu_loop"]
    for module, options in dropped.items():
        usage = subprocess.run(
            [sys.executable, "-m", module, "--help"],
            cwd=index.REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
        gone = {o for o in options if not re.search(rf"{o}\b", usage)}
        covered = {o.split()[0] for o in index.REMOVED_OPTIONS.get(module, {})}
        assert gone <= covered, (module, gone - covered)
        for option in covered:
            assert f"for a recorded `{option}" in index.run_now_as(module)
