"""What a user reads holds together: every result file and image a document names exists, the
benchmark index is current, the project speaks of itself by date, version and commit (no work
sessions, rounds or engineers), and nothing points at a folder beside the checkout."""

from __future__ import annotations

import fnmatch
import re
import subprocess
from pathlib import Path

import pytest

from benchmarks import index

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DOCS = [
    ROOT / "README.md",
    ROOT / "CHANGELOG.md",
    ROOT / "benchmarks" / "INDEX.md",
    ROOT / "benchmarks" / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
    *sorted((ROOT / "models").rglob("*.md")),
]
RESULT_NAME = re.compile(
    r"^(serving|ppo|placement|dynamic|fgd|gat|rca|incident|petshop|fleet)[\w.{},*-]*\.json$"
)
WORK_WORDS = re.compile(
    r"session [0-9]|session-[0-9]|sessions [0-9]|round [0-9]|round-[0-9]|engineer [A-Z]\b|issue #[0-9]",
    re.IGNORECASE,
)
WORK_NAMES = re.compile(r"(^|[/_.-])(s[0-9]+|round[0-9]+|round|session[0-9]*)([/_.-]|$)")


def tracked() -> list[str]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [p for p in out.decode().split("\0") if p]


def named_paths(text: str) -> set[str]:
    """``benchmarks/results/...`` and ``docs/img/...`` paths in ``text``, braces expanded.

    Left out: folders, elided paths (``benchmarks/results/...``, a cut ``serving_...``) and
    templates (``serving_<run>.json``, ``batch{b}_run{i}.json``)."""
    found = set()
    for m in re.finditer(r"(?:benchmarks/results|docs/img)/[\w.{},*/-]*", text):
        raw = m.group(0)
        token = raw.rstrip(".,")
        if (
            token.endswith(("/", "_", "-"))
            or "..." in raw
            or text[m.end() : m.end() + 1] == "<"
            or re.search(r"\{(?![^}]*(,|\.\.))[^}]*\}", token)
        ):
            continue
        found.update(index.expand_braces(token))
    return found


def test_every_result_file_and_image_a_document_names_exists() -> None:
    missing = []
    for doc in (d for d in DOCS if d.is_file()):
        text = doc.read_text()
        base = doc.parent
        if doc.name == "INDEX.md":
            # its command column quotes the recorded commands, whose output paths may name a file
            # as it was first written; the file column's links are checked below
            text = "\n".join(line.split(" | ")[0] for line in text.splitlines())
        for path in named_paths(text):
            if not any((ROOT / p).exists() for p in [path] if "*" not in path) and not list(
                ROOT.glob(path)
            ):
                missing.append(f"{doc.relative_to(ROOT)}: {path}")
        # bare result file names (`ppo_dynamic_eval.json`, `serving_*_run1.json`)
        for token in re.findall(r"`([^`\s/]+\.json)`", text):
            for name in index.expand_braces(token):
                if RESULT_NAME.match(name) and not any(
                    fnmatch.fnmatchcase(p.name, name) for p in RESULTS.rglob("*.json")
                ):
                    missing.append(f"{doc.relative_to(ROOT)}: {name}")
        # relative Markdown links
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" not in target and not target.startswith("mailto:"):
                if not (base / target).exists():
                    missing.append(f"{doc.relative_to(ROOT)}: link {target}")
    assert not missing, "\n".join(missing)


def heading_anchors(page: Path) -> set[str]:
    """The anchors GitHub gives ``page``'s headings: lower case, punctuation but ``-`` and ``_``
    dropped, spaces as ``-``, a repeated heading numbered ``-1``, ``-2``... (code blocks skipped)."""
    anchors: set[str] = set()
    in_code = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        m = None if in_code else re.match(r"#{1,6} (.+)", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            name, n = slug, 0
            while name in anchors:
                n += 1
                name = f"{slug}-{n}"
            anchors.add(name)
    return anchors


def test_every_link_anchor_names_a_heading() -> None:
    # the pages of docs/serving/ link to each other's sections; a renamed heading breaks them
    bad = []
    for doc in (d for d in DOCS if d.is_file()):
        for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", doc.read_text()):
            page = (doc.parent / target) if target else doc
            if page.suffix == ".md" and page.is_file() and anchor not in heading_anchors(page):
                bad.append(f"{doc.relative_to(ROOT)}: {target}#{anchor}")
    assert not bad, "\n".join(bad)


def test_no_blank_line_splits_a_table() -> None:
    """A blank line ends a Markdown table (CommonMark GFM "Tables (extension)": the table is broken
    at the first empty line), so rows after one inside a table render as plain text. A table row
    right after a blank line that follows a row, and is not the header of a new table (a
    delimiter row next), is such a split."""
    row = re.compile(r"^\s*\|")
    delimiter = re.compile(r"^\s*\|?\s*:?-{3,}")
    bad = []
    for doc in (d for d in DOCS if d.is_file()):
        lines = doc.read_text().splitlines()
        for i in range(2, len(lines) - 1):
            if (
                row.match(lines[i])
                and not lines[i - 1].strip()
                and row.match(lines[i - 2])
                and not delimiter.match(lines[i + 1])
            ):
                bad.append(f"{doc.relative_to(ROOT)}:{i + 1}")
    assert not bad, "\n".join(bad)


def test_benchmark_index_is_current() -> None:
    assert (ROOT / "benchmarks" / "INDEX.md").read_text() == index.render(), (
        "benchmarks/INDEX.md is out of date: run python -m benchmarks.index"
    )


def test_every_research_note_is_in_the_notes_index() -> None:
    notes = sorted(p.name for p in (ROOT / "docs" / "research").glob("20*.md"))
    index_text = (ROOT / "docs" / "research" / "README.md").read_text()
    missing = [n for n in notes if f"({n})" not in index_text]
    assert not missing, f"docs/research/README.md does not list {missing}"


def test_no_work_session_words_in_tracked_files_or_their_names() -> None:
    hits = []
    for rel in tracked():
        if WORK_NAMES.search(rel.lower()):
            hits.append(f"file name: {rel}")
        path = ROOT / rel
        if not path.is_file() or path.suffix in (".zip", ".pt", ".onnx", ".png", ".npz"):
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if WORK_WORDS.search(line):
                hits.append(f"{rel}:{n}: {line.strip()[:100]}")
    assert not hits, "\n".join(hits[:50]) + f"\n({len(hits)} in all)"


def test_nothing_a_user_reads_points_beside_the_checkout() -> None:
    # benchmarks/index.py is the one exception: it rewrites the "../shared" paths that older results
    # recorded in their commands to $FLEETMIND_SHARED_DATA when it lists them
    readable = [
        rel
        for rel in tracked()
        if not rel.startswith(("tests/", ".ci/")) and rel != "benchmarks/index.py"
    ]
    hits = []
    for rel in readable:
        path = ROOT / rel
        if path.suffix not in (".md", ".py", ".ipynb", ".yml", ".yaml", ".toml", ".txt", ""):
            continue
        if path.is_file() and "../shared" in path.read_text(errors="replace"):
            hits.append(rel)
    assert not hits, hits


def test_readme_keeps_the_two_make_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme and "make demo" in readme  # .ci/run runs `make test`
