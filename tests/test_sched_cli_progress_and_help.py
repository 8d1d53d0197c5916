"""``fleetmind sched``: the teacher search's progress bar ends at its total, help texts read as
printed, and a node list without GPU nodes gets its one clear error, no misleading warning first.

Upstream behaviour behind the expectations: argparse applies ``%`` formatting to argument help
(``HelpFormatter._expand_help``) but not to a parser's description unless it names ``%(prog)``
(``HelpFormatter._format_text``), so ``%%`` prints as is there; tqdm shows ``n/total``, so a total
larger than the work done leaves the bar short of 100 %.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import tqdm

from fleetmind.cli import main

PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "".join(
    f"p{i},1000,1024,1,{300 + 100 * (i % 5)}\n" for i in range(20)
)


@pytest.mark.parametrize("with_init", [False, True])
def test_search_teacher_bar_total_is_the_episodes_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, with_init: bool
) -> None:
    import fleetmind.rl.teacher_search as ts

    jobs_run: list[int] = []

    def fake_run_tasks(fn: Any, jobs: list, *, progress: Any = None, **kw: Any) -> list[float]:
        # every episode job "runs" at once; scores differ so that CMA-ES has something to rank
        jobs_run.append(len(jobs))
        for _ in jobs:
            progress(1)
        return [float(i % 5) for i in range(len(jobs))]

    monkeypatch.setattr(ts, "run_tasks", fake_run_tasks)
    bars: list[list[float]] = []  # [updates, total] per bar (tests run with TQDM_DISABLE set)

    class Bar(tqdm.tqdm):
        def __init__(self, *a: Any, **kw: Any) -> None:
            super().__init__(*a, **kw)
            bars.append([0, kw.get("total")])

        def update(self, n: float = 1) -> bool | None:
            bars[-1][0] += n
            return super().update(n)

    monkeypatch.setattr(tqdm, "tqdm", Bar)
    trace = tmp_path / "pods.csv"
    trace.write_text(PODS)
    argv = ["sched", "search-teacher", "--trace", str(trace), "--episode-seeds", "1000-1001"]
    argv += ["--generations", "1", "--population", "2", "--out", str(tmp_path / "s.json")]
    if with_init:
        assert main([*argv[:-1], str(tmp_path / "init.json")]) == 0  # a scorer to start from
        argv += ["--init", str(tmp_path / "init.json")]
        jobs_run.clear()
    assert main(argv) == 0
    n, total = bars[-1]
    assert n == total == sum(jobs_run) == (1 + with_init + 1 * 2) * 2


def test_search_teacher_description_prints_single_percent_signs(capsys) -> None:
    with pytest.raises(SystemExit) as done:
        main(["sched", "search-teacher", "--help"])
    assert done.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "unallocated GPU % at 100 % arrived" in out and "%%" not in out


def test_no_register_help_says_what_the_flag_does(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["sched", "train", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    text = out[out.index("--no-register fgd mode:") :][:200]
    assert text.startswith("--no-register fgd mode: do not register the model"), text
    assert "champion alias where it is" in text


def test_a_node_list_without_gpu_nodes_gets_one_clear_error(tmp_path: Path, capsys) -> None:
    trace = tmp_path / "pods.csv"
    trace.write_text(PODS)
    nodes = tmp_path / "cpunodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,64000,262144,0,\nn2,64000,262144,0,\n")
    argv = ["sched", "evaluate", "--trace", str(trace), "--nodes", str(nodes)]
    assert main([*argv, "--policies", "BestFit", "--seeds", "0"]) == 2
    err = capsys.readouterr().err
    assert f"fleetmind: error: node list {nodes} has no GPUs" in err
    assert "warning" not in err and "largest node has 0" not in err
