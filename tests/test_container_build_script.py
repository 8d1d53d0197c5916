"""deploy/container/build.sh against a stand-in container engine: the build context it prepares (the
checkout's files, local wheels and their checksums) and the base image it asks for. Nothing is built:
the stand-in `podman`/`docker` on PATH records its arguments and the context's files."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fleetmind.data.paths import REPO_ROOT

CONTAINER = REPO_ROOT / "deploy" / "container"
TORCH = "torch-2.5.1+cpu-cp311-cp311-linux_x86_64.whl"

ENGINE = f"""#!{sys.executable}
import hashlib, json, os, sys
from pathlib import Path

rec = Path(os.environ["ENGINE_RECORD"])
calls = json.loads(rec.read_text()) if rec.exists() else []
argv = sys.argv[1:]
call = {{"engine": Path(sys.argv[0]).name, "argv": argv}}
if argv[:1] == ["build"]:
    ctx = Path(argv[-1])
    call["files"] = sorted(str(p.relative_to(ctx)) for p in ctx.rglob("*") if p.is_file())
    call["wheels.sha256"] = (ctx / "wheels.sha256").read_text() if (ctx / "wheels.sha256").exists() else None
calls.append(call)
rec.write_text(json.dumps(calls))
sys.exit(0)  # `image exists`: the base image is there, build-base.sh has nothing to do
"""


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    """A small git checkout with this repository's deploy/container scripts."""
    repo = tmp_path / "repo"
    (repo / "deploy" / "container").mkdir(parents=True)
    for name in ("build.sh", "build-base.sh", "Dockerfile"):
        shutil.copy(CONTAINER / name, repo / "deploy" / "container" / name)
    (repo / "pyproject.toml").write_text(
        '[project]\nname = "demo"\nversion = "9.9.9"\ndependencies = ["numpy>=1"]\n'
    )
    (repo / "constraints.txt").write_text("numpy==2.0.0\n")
    (repo / "docs").mkdir()
    (repo / "docs" / "a.md").write_text("a\n")
    (repo / "docs" / "b.md").write_text("b\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "init")
    return repo


def _build(
    repo: Path, tmp_path: Path, env: dict[str, str] | None = None, cp: str | None = None
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """Runs build.sh with the stand-in engines (and an optional `cp` wrapper) first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in ("podman", "docker"):
        (bin_dir / name).write_text(ENGINE)
        (bin_dir / name).chmod(0o755)
    if cp is not None:
        (bin_dir / "cp").write_text(cp.replace("REAL_CP", shutil.which("cp") or "/bin/cp"))
        (bin_dir / "cp").chmod(0o755)
    record = tmp_path / "engine.json"
    record.unlink(missing_ok=True)
    base_env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("CONTAINER", "FLEETMIND_BASE_IMAGE", "PIP_FIND_LINKS")
    }
    run_env = {
        **base_env,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHON": sys.executable,
        "ENGINE_RECORD": str(record),
        **(env or {}),
    }
    proc = subprocess.run(
        ["bash", str(repo / "deploy" / "container" / "build.sh"), "localhost/demo:test"],
        cwd=repo,
        env=run_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    calls = json.loads(record.read_text()) if record.exists() else []
    return proc, calls


def _build_call(calls: list[dict[str, Any]]) -> dict[str, Any]:
    (call,) = [c for c in calls if c["argv"][:1] == ["build"]]
    return call


def _base_arg(argv: list[str]) -> str | None:
    for flag, value in zip(argv, argv[1:], strict=False):
        if flag == "--build-arg" and value.startswith("BASE="):
            return value.removeprefix("BASE=")
    return None


def test_a_tracked_file_deleted_from_the_tree_is_left_out(project: Path, tmp_path: Path) -> None:
    (project / "docs" / "a.md").unlink()  # deleted, not staged: git ls-files still lists it
    proc, calls = _build(project, tmp_path)
    assert proc.returncode == 0, proc.stderr
    files = _build_call(calls)["files"]
    assert "src/docs/a.md" not in files
    assert {"src/docs/b.md", "src/pyproject.toml", "src/deploy/container/build.sh"} <= set(files)


def test_file_names_are_data_not_shell_code(project: Path, tmp_path: Path) -> None:
    odd = ["notes $(touch INJECTED).txt", "quote \" and ' .txt", "-dash.txt", "line\nbreak.txt"]
    for name in odd:  # untracked, not ignored: they go into the context too
        (project / name).write_text("x\n")
    proc, calls = _build(project, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not (project / "INJECTED").exists()
    files = set(_build_call(calls)["files"])
    assert {f"src/{name}" for name in odd} <= files


def test_the_torch_wheel_is_copied_where_hard_links_fail(project: Path, tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / TORCH).write_bytes(b"not really a wheel")
    (wheels / "numpy-2.0.0-cp311-cp311-linux_x86_64.whl").write_bytes(b"x")  # only torch is taken
    # cp -l fails as it does across file systems (EXDEV: TMPDIR on a tmpfs)
    no_links = """#!/bin/sh
for a; do case $a in -l|--link) echo "cp: Invalid cross-device link" >&2; exit 1;; esac; done
exec REAL_CP "$@"
"""
    proc, calls = _build(project, tmp_path, env={"PIP_FIND_LINKS": f"{wheels}"}, cp=no_links)
    assert proc.returncode == 0, proc.stderr
    call = _build_call(calls)
    assert f"wheels/{TORCH}" in call["files"]
    assert not any(f.startswith("wheels/numpy") for f in call["files"])
    # the dependency layer's cache key: buildah does not look into the bind-mounted wheels
    sha = subprocess.run(
        ["sha256sum", TORCH], cwd=wheels, capture_output=True, text=True, check=True
    ).stdout.split()[0]
    assert call["wheels.sha256"] == f"{sha}  ./{TORCH}\n"


def test_a_torch_wheel_that_cannot_be_copied_stops_the_build(project: Path, tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / TORCH).write_bytes(b"x")
    refuse_torch = """#!/bin/sh
for a; do case $a in */torch-*) echo "cp: Permission denied" >&2; exit 1;; esac; done
exec REAL_CP "$@"
"""
    proc, calls = _build(project, tmp_path, env={"PIP_FIND_LINKS": str(wheels)}, cp=refuse_torch)
    assert proc.returncode != 0
    assert not [c for c in calls if c["argv"][:1] == ["build"]]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("build.sh: cannot copy ") and TORCH in line


def test_the_first_folders_wheel_wins_and_no_folder_is_written(
    project: Path, tmp_path: Path
) -> None:
    """Two PIP_FIND_LINKS folders with the same wheel name: the first is hard-linked into the
    context, so a second copy would have written through that link into the first folder."""
    first, second = tmp_path / "w1", tmp_path / "w2"
    for folder, body in ((first, b"FIRST"), (second, b"SECOND")):
        folder.mkdir()
        (folder / TORCH).write_bytes(body)
    proc, calls = _build(project, tmp_path, env={"PIP_FIND_LINKS": f"{first} {second}"})
    assert proc.returncode == 0, proc.stderr
    assert (first / TORCH).read_bytes() == b"FIRST"
    assert (second / TORCH).read_bytes() == b"SECOND"
    sha = subprocess.run(
        ["sha256sum", TORCH], cwd=first, capture_output=True, text=True, check=True
    ).stdout.split()[0]
    assert _build_call(calls)["wheels.sha256"] == f"{sha}  ./{TORCH}\n"


def test_pip_find_links_split_on_newlines_as_pip_does(project: Path, tmp_path: Path) -> None:
    """pip splits the variable on any whitespace (``str.split()``): a wheel in the folder on the
    second line is found."""
    empty, wheels = tmp_path / "empty", tmp_path / "wheels"
    empty.mkdir()
    wheels.mkdir()
    (wheels / TORCH).write_bytes(b"x")
    proc, calls = _build(project, tmp_path, env={"PIP_FIND_LINKS": f"{empty}\n{wheels}\n"})
    assert proc.returncode == 0, proc.stderr
    assert f"wheels/{TORCH}" in _build_call(calls)["files"]


def test_a_podman_path_is_podman(project: Path, tmp_path: Path) -> None:
    """``CONTAINER=/path/to/podman`` still builds the local base image and passes podman's
    options, not docker's registry default."""
    engine = tmp_path / "bin" / "podman"
    proc, calls = _build(project, tmp_path, env={"CONTAINER": str(engine)})
    assert proc.returncode == 0, proc.stderr
    argv = _build_call(calls)["argv"]
    assert _base_arg(argv) == "localhost/fleetmind-base:bookworm"
    assert "--format" in argv


def test_no_wheels_and_an_index_url_in_pip_find_links(project: Path, tmp_path: Path) -> None:
    proc, calls = _build(
        project, tmp_path, env={"PIP_FIND_LINKS": "https://download.example.invalid/whl/cpu"}
    )
    assert proc.returncode == 0, proc.stderr
    call = _build_call(calls)
    assert not [f for f in call["files"] if f.startswith("wheels/")]
    assert call["wheels.sha256"] == ""


def test_podman_builds_on_the_base_image_from_build_base(project: Path, tmp_path: Path) -> None:
    proc, calls = _build(project, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert ["image", "exists", "localhost/fleetmind-base:bookworm"] in [c["argv"] for c in calls]
    assert _base_arg(_build_call(calls)["argv"]) == "localhost/fleetmind-base:bookworm"


def test_docker_builds_on_a_registry_python_image(project: Path, tmp_path: Path) -> None:
    # docker reads `localhost/...` as a registry host and would try to pull the podman-made base
    # (distribution/reference, normalize.go splitDockerDomain), and build-base.sh needs podman
    proc, calls = _build(project, tmp_path, env={"CONTAINER": "docker"})
    assert proc.returncode == 0, proc.stderr
    assert {c["engine"] for c in calls} == {"docker"}
    assert _base_arg(_build_call(calls)["argv"]) == "docker.io/library/python:3.11-slim-bookworm"


@pytest.mark.parametrize("engine", ["podman", "docker"])
def test_fleetmind_base_image_is_forwarded(project: Path, tmp_path: Path, engine: str) -> None:
    base = "registry.example.invalid/python:3.11-slim-bookworm"
    proc, calls = _build(project, tmp_path, env={"CONTAINER": engine, "FLEETMIND_BASE_IMAGE": base})
    assert proc.returncode == 0, proc.stderr
    assert [c["argv"][0] for c in calls] == ["build"]  # no build-base.sh for a registry image
    assert _base_arg(calls[0]["argv"]) == base


def test_local_wheels_stay_out_of_the_image_layers() -> None:
    """A COPY of wheels/ kept PyTorch's wheel (about 190 MB) in a layer although a later RUN deleted
    it; a bind mount lends the wheels to the one RUN that installs them."""
    dockerfile = (CONTAINER / "Dockerfile").read_text()
    copies = re.findall(r"^COPY (?!--from)([^\n]*)$", dockerfile, re.M)
    assert not [c for c in copies if "wheels/" in c or "wheels " in c], copies
    assert any("wheels.sha256" in c for c in copies)  # the cache key of the dependency layer
    assert re.search(
        r"^RUN --mount=type=bind,source=wheels,target=(\S+) \\\n[^\n]*pip install[^\n]*\\\n"
        r"\s+--find-links \1 ",
        dockerfile,
        re.M,
    )
