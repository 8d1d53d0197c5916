"""``fleetmind sched evaluate --mode dynamic`` with the agent's stages (ppo, clone, teacher,
rollout) warns as the heuristic path does (docs/placement.md, "Warnings").

The agent path runs every policy on the model's own node sample and called neither
``check_gpu_specs`` nor ``check_pod_sizes``: a ``gpu_spec`` no node has and a pod larger than any
node went unmentioned, while ``--policies BestFit`` alone warned about both.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fleetmind import cli
from fleetmind.data.paths import MODELS_DIR

HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n"
)


def _trace(path: Path) -> Path:
    """Twelve small pods, one that names the GPU model ZZ9 (on no openb node) and one of 1,000
    cores (the largest openb node has far fewer)."""
    rows = [f"p{i},2000,4096,1,500,,LS,Running,{10 * i},{10 * i + 600},{10 * i}" for i in range(12)]
    rows.append("spec,2000,4096,1,1000,ZZ9,LS,Running,130,700,130")
    rows.append("big,1000000,8192,1,1000,,LS,Running,140,800,140")
    path.write_text(HEADER + "\n".join(rows) + "\n")
    return path


@pytest.mark.filterwarnings("ignore:offered load:UserWarning")  # a short stream on purpose
def test_agent_stages_warn_about_unknown_models_and_oversized_pods(
    shared_data, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "dyn"  # the release, asking for a short stream (16 jobs)
    shutil.copytree(MODELS_DIR / "placement-dynamic", folder)
    meta = json.loads((folder / "metadata.json").read_text())
    meta["env_kwargs"]["n_jobs"] = 16
    (folder / "metadata.json").write_text(json.dumps(meta))
    trace = _trace(tmp_path / "t.csv")
    argv = ["sched", "evaluate", "--trace", str(trace), "--mode", "dynamic", "--seeds", "0"]
    argv += ["--model", str(folder), "--policies", "teacher", "--json", str(tmp_path / "o.json")]
    assert cli.main(argv) == 0
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("fleetmind: warning:")]
    spec = [x for x in lines if "gpu_spec names GPU model(s) that no node of" in x]
    assert len(spec) == 1 and "'ZZ9' (1 pod)" in spec[0] and "model's node sample" in spec[0]
    size = [x for x in lines if "ask for more than any node of" in x]
    assert len(size) == 1 and "cpu_milli: 1 pod asks up to 1,000,000" in size[0], size
    assert json.loads((tmp_path / "o.json").read_text())["policies"]["teacher"]
