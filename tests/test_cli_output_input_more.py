"""More commands refuse an output file that is one of their inputs (README: "an output file that
is one of the command's inputs is refused before any work"): ``graph build --out`` over a
``--from-dir`` list response, a ``--spans`` file or the kubeconfig; ``rca petshop`` / ``rca fit
--json`` over the ``--roles`` file; ``doctor --json`` over the ``FLEETMIND_GRAPH`` it checks.
Before the fix each replaced its input with its result."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cli_helpers import refused_line

from fleetmind.cli import main

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str], path: Path, flag: str) -> None:
    """``argv`` exits 2 with one error line naming the input ``flag``, and leaves ``path`` byte for
    byte as it was."""
    line = refused_line(capsys, argv, path)
    assert f"is an input of this command ({flag}); choose another path" in line


@pytest.fixture
def lists(tmp_path: Path) -> Path:
    """A ``--from-dir`` folder of empty list responses."""
    d = tmp_path / "lists"
    d.mkdir()
    for name in ("nodes", "pods", "services", "endpointslices"):
        (d / f"{name}.json").write_text(json.dumps({"kind": "List", "items": []}) + "\n")
    return d


@pytest.mark.parametrize("name", ["nodes.json", "pods.json", "endpointslices.json"])
def test_graph_build_out_over_a_from_dir_file(
    lists: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = lists / name
    _refused(capsys, ["graph", "build", "--from-dir", str(lists), "--out", str(out)], out,
             "--from-dir")  # fmt: skip


def test_graph_build_out_over_a_spans_file(
    lists: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spans = tmp_path / "spans.json"
    spans.write_text('{"resourceSpans": []}\n')
    argv = ["graph", "build", "--from-dir", str(lists), "--spans", str(spans)]
    _refused(capsys, [*argv, "--out", str(spans)], spans, "--spans")
    link = tmp_path / "link.json"
    link.symlink_to(spans)
    _refused(capsys, [*argv, "--out", str(link)], spans, "--spans")


def test_graph_build_out_over_the_kubeconfig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    kc = tmp_path / "kubeconfig"
    kc.write_text("apiVersion: v1\nkind: Config\n")
    _refused(capsys, ["graph", "build", "--kubeconfig", str(kc), "--out", str(kc)], kc,
             "--kubeconfig")  # fmt: skip
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'none'}{os.pathsep}{kc}")
    _refused(capsys, ["graph", "build", "--out", str(kc)], kc, "$KUBECONFIG")


def test_graph_build_out_elsewhere_still_written(
    lists: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "g.json"
    out.write_text("old\n")
    assert main(["graph", "build", "--from-dir", str(lists), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["nodes"] is not None


@pytest.mark.parametrize("command", ["petshop", "fit"])
def test_rca_json_over_the_roles_file(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "scenario"
    scenario.mkdir()
    roles = tmp_path / "my_roles.yaml"
    roles.write_text("availability: success\nlatency: latency\n")
    argv = ["rca", command, "--scenario", str(scenario), "--roles", str(roles)]
    if command == "fit":
        argv += ["--out", str(tmp_path / "model")]
    _refused(capsys, [*argv, "--json", str(roles)], roles, "--roles")


def test_doctor_json_over_the_graph_it_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    graph = tmp_path / "served.json"
    graph.write_text('{"name": "g", "nodes": [], "edges": []}\n')
    monkeypatch.setenv("FLEETMIND_GRAPH", str(graph))
    # refused before Prometheus is asked: nothing listens on port 9 (discard)
    argv = ["doctor", "--prometheus", "http://127.0.0.1:9", "--timeout", "1"]
    _refused(capsys, [*argv, "--json", str(graph)], graph, "FLEETMIND_GRAPH")
    ca = tmp_path / "ca.pem"
    ca.write_text("not a bundle\n")
    monkeypatch.setenv("FLEETMIND_PROMETHEUS_CA_FILE", str(ca))
    _refused(capsys, [*argv, "--json", str(ca)], ca, "FLEETMIND_PROMETHEUS_CA_FILE")
