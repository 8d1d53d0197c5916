"""``fleetmind sched evaluate --mode fgd --json`` starts with the provenance dynamic mode,
``rca evaluate --json`` and the benchmarks record (``fleetmind.provenance.run_provenance``): the
command line that reruns it (quoted for a POSIX shell, ``shlex.join``), the commit, the date, the
machine and the package versions; the rest of the JSON is what it was."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from fleetmind import cli

NODES = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
    f"n{i},64000,262144,{[2, 4, 8][i % 3]},{['T4', 'P100', 'V100'][i % 3]}\n" for i in range(6)
)
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "".join(
    f"p{i:02d},{1000 + 500 * (i % 3)},1024,{1 + i % 2},{1000 if i % 2 else [250, 500][i % 4 // 2]}\n"
    for i in range(30)
)
PROVENANCE = ["command", "commit", "code_modified", "date", "machine", "versions"]
"""The keys of ``run_provenance``, in its order."""


def test_fgd_json_starts_with_provenance_that_reruns_it(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "a dir"  # a space: the command must quote it
    folder.mkdir()
    (folder / "nodes.csv").write_text(NODES)
    (folder / "pods.csv").write_text(PODS)
    out = folder / "r.json"
    argv = ["sched", "evaluate", "--trace", str(folder / "pods.csv"), "--nodes"]
    argv += [str(folder / "nodes.csv"), "--policies", "BestFit", "FGD", "--seeds", "1-2"]
    argv += ["--workers", "2", "--json", str(out)]
    assert cli.main(argv) == 0
    res = json.loads(out.read_text())
    assert list(res)[: len(PROVENANCE)] == PROVENANCE
    # the fgd-mode keys follow, unchanged
    assert list(res)[len(PROVENANCE) :] == ["trace", "mode", "seeds", "policies", "published"] + [
        "published_reason",
        "model",  # the input files' bytes, added after the keys of before
        "trace_file",
        "nodes_file",
    ]
    assert res["mode"] == "fgd" and set(res["policies"]) == {"BestFit", "FGD"}
    assert {"numpy", "fleetmind", "gymnasium", "onnxruntime"} <= set(res["versions"])
    assert set(res["machine"]) >= {"cpu_count", "loadavg_start", "loadavg_end"}
    want = (
        f"fleetmind sched evaluate --trace {shlex.quote(str(folder / 'pods.csv'))} --mode fgd "
        "--policies BestFit FGD --seeds 1-2 "
        f"--nodes {shlex.quote(str(folder / 'nodes.csv'))} --workers 2 "
        f"--json {shlex.quote(str(out))}"
    )
    assert res["command"] == want
    # the recorded line reruns the same evaluation
    capsys.readouterr()
    first = res["policies"]
    assert cli.main(shlex.split(res["command"])[1:]) == 0
    again = json.loads(out.read_text())
    assert again["command"] == res["command"]
    for name, m in first.items():
        assert again["policies"][name]["per_seed"] == m["per_seed"]
