"""``fleetmind sched ...`` refuses bad inputs up front, in one line, instead of hanging, crashing
late or reporting numbers that do not describe the run (tiny CSV files; nothing trains)."""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import signal
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetmind.cli import main
from fleetmind.data.errors import ConfigError, DataError, ModelLoadError

NODES = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
    f"n{i},64000,262144,{[2, 4, 8][i % 3]},{['T4', 'P100', 'V100'][i % 3]}\n" for i in range(6)
)
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "".join(
    f"p{i:02d},{1000 + 500 * (i % 3)},1024,{1 + i % 2},{1000 if i % 2 else [250, 500, 1000][i % 3]}\n"
    for i in range(30)
)
"""Single-GPU pods share a GPU (250, 500 or 1000 milli); a 2-GPU pod takes whole GPUs (1000, as the
FGD simulator reads it: below 1000 the loader warns, ``TraceWarning``)."""
CPU_PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "".join(
    f"c{i},{1000 * (1 + i % 4)},2048,0,0\n" for i in range(10)
)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    (tmp_path / "cpu.csv").write_text(CPU_PODS)
    return {k: str(tmp_path / f"{k}.csv") for k in ("nodes", "pods", "cpu")}


@contextlib.contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Turn a hang into a test failure (SIGALRM)."""

    def fail(*_: object) -> None:
        raise TimeoutError(f"still running after {seconds} s (hang)")

    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.startswith("fleetmind: error:")]
    assert len(lines) == 1, err
    return lines[0]


# 1. a trace without GPU demand ------------------------------------------------------------------


def test_cpu_only_trace_is_refused_not_resampled_forever(files) -> None:
    from fleetmind.data.openb import load_openb_trace
    from fleetmind.envs.fgd_mode import build_workload

    trace = load_openb_trace(files["cpu"])
    with deadline(10), pytest.raises(DataError, match="requests no GPU"):
        build_workload(trace, 6, 6 * 8000, seed=42)


def test_cpu_only_trace_evaluate_exits_2(files, capsys) -> None:
    argv = ["sched", "evaluate", "--trace", files["cpu"], "--nodes", files["nodes"]]
    with deadline(20):
        rc = main([*argv, "--policies", "BestFit", "--seeds", "42"])
    assert rc == 2
    assert "requests no GPU" in one_line_error(capsys)


def test_fixture_traces_load_without_trace_warnings(files) -> None:
    # the fixtures are valid openb-schema traces: a 2-GPU pod at gpu_milli 500 warned (the FGD
    # simulator, like fleetmind.data.openb, reads a multi-GPU pod as whole GPUs)
    from fleetmind.data.openb import TraceWarning, load_openb_trace

    with warnings.catch_warnings():
        warnings.simplefilter("error", TraceWarning)
        for key in ("pods", "cpu"):
            load_openb_trace(files[key])


def test_resampling_is_capped(files, monkeypatch) -> None:
    from fleetmind.data.openb import load_openb_trace
    from fleetmind.envs import fgd_mode

    trace = load_openb_trace(files["pods"])
    fgd_mode.build_workload(trace, 6, 6 * 8000, seed=1)  # within the cap
    monkeypatch.setattr(fgd_mode, "MAX_RESAMPLE_SLACK", 0)
    monkeypatch.setattr(fgd_mode, "MAX_RESAMPLE_FACTOR", 0)
    with deadline(10), pytest.raises(DataError, match="gave up"):
        fgd_mode.build_workload(trace, 6, 6 * 8000, seed=1)


# 2. published values only for the openb trace on the openb node list -----------------------------


def test_published_values_not_shown_for_a_csv_named_default(tmp_path, files, capsys) -> None:
    shutil.copy(files["pods"], tmp_path / "default.csv")
    out = tmp_path / "r.json"
    argv = [
        "sched",
        "evaluate",
        "--trace",
        str(tmp_path / "default.csv"),
        "--nodes",
        files["nodes"],
    ]
    assert main([*argv, "--policies", "FGD", "--seeds", "42", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert not any(k.startswith("published") for k in res["policies"]["FGD"])
    assert res["published"] is None and "omitted" in res["published_reason"]
    assert "pub@100" not in capsys.readouterr().out


def test_published_mismatch_names_the_reason(shared_data, tmp_path, files) -> None:
    from fleetmind.cli.sched import published_mismatch
    from fleetmind.data.openb import load_openb_nodes, load_openb_trace, trace_file

    trace, openb_nodes = load_openb_trace("default"), load_openb_nodes()
    assert published_mismatch(trace, openb_nodes) is None
    assert "node list" in published_mismatch(trace, load_openb_nodes(files["nodes"]))
    copy = tmp_path / "openb_pod_list_default.csv"
    shutil.copy(trace_file("default"), copy)
    assert "not one of the shared openb" in published_mismatch(load_openb_trace(copy), openb_nodes)


# 3. --model needs a policy that reads it, in both modes -----------------------------------------


@pytest.mark.parametrize("policies", [["--policies", "FGD"], []])
def test_model_without_its_policy_in_dynamic_mode(files, capsys, monkeypatch, policies) -> None:
    from fleetmind.cli import sched

    monkeypatch.setattr(sched, "_evaluate_dynamic", lambda *a: {"policies": {}})
    argv = ["sched", "evaluate", "--mode", "dynamic", "--trace", files["pods"], "--seeds", "1"]
    assert main([*argv, *policies, "--model", str(Path(files["pods"]).parent / "nope")]) == 2
    assert "--model" in one_line_error(capsys)


# 4. a policy named twice runs once ---------------------------------------------------------------


def test_duplicate_policy_names_run_once(tmp_path, files) -> None:
    out = tmp_path / "r.json"
    argv = ["sched", "evaluate", "--trace", files["pods"], "--nodes", files["nodes"]]
    assert main([*argv, "--policies", "FGD", "fgd", "--seeds", "42-43", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert list(res["policies"]) == ["FGD"]
    m = res["policies"]["FGD"]
    vals = [v["unallocated_gpu_pct_at_100"] for v in m["per_seed"].values()]
    assert len(vals) == 2 and vals[0] != vals[1]
    mean = sum(vals) / 2
    std = math.sqrt(sum((v - mean) ** 2 for v in vals))  # ddof=1 over the 2 seeds
    assert m["unallocated_gpu_pct_at_100_std"] == pytest.approx(std, abs=1e-3)


def test_unique_policies_compares_canonical_names() -> None:
    from fleetmind.cli.sched import _unique_policies

    got = _unique_policies(["ppo", "PPO", "FGD", "fgd", "best_fit", "BestFit", "clone"])
    assert got == ["ppo", "FGD", "best_fit", "clone"]


# 5. a corrupt clone.onnx -------------------------------------------------------------------------


def test_corrupt_clone_onnx_is_a_model_load_error(tmp_path) -> None:
    from fleetmind.data.paths import MODELS_DIR
    from fleetmind.rl.paired import load_clone

    good = (MODELS_DIR / "placement-dynamic" / "clone.onnx").read_bytes()
    (tmp_path / "clone.onnx").write_bytes(good[:4000])
    with pytest.raises(ModelLoadError, match="clone.onnx") as err:
        load_clone(tmp_path)
    assert "\n" not in str(err.value)


# 6, 7, minor: the PPO recipes' settings, checked before anything runs ---------------------------


@pytest.fixture
def no_training(monkeypatch, tmp_path):
    """Make ``recipe.run`` a stub (so that a setting that slips through ends the test at once),
    with MLflow in ``tmp_path``."""
    from fleetmind.training.recipes import dynamic, fgd

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    for mod in (fgd, dynamic):
        monkeypatch.setattr(mod, "run", lambda a: {"run_id": "stub: the recipe ran"})


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--eval-freq", "0"], "--eval-freq"),
        (["--eval-freq", "-5"], "--eval-freq"),
        (["--fgd-until-pct", "500"], "--fgd-until-pct"),
        (["--fgd-until-pct", "101"], "--fgd-until-pct"),
        (["--fgd-until-pct", "-1"], "--fgd-until-pct"),
        (["--eval-fgd-until-pct", "120"], "--eval-fgd-until-pct"),
        (["--bc-fgd-until-pct", "-3"], "--bc-fgd-until-pct"),
        (["--bc-episodes", "-1"], "--bc-episodes"),
        (["--max-minutes", "0"], "--max-minutes"),
        (["--max-minutes", "-1"], "--max-minutes"),
        (["--mode", "dynamic", "--eval-freq", "0"], "--eval-freq"),
        (["--mode", "dynamic", "--bc-episodes", "-2"], "--bc-episodes"),
    ],
)
def test_train_refuses_bad_settings(files, tmp_path, capsys, no_training, flags, needle) -> None:
    argv = ["sched", "train", "--trace", files["pods"], "--out", str(tmp_path / "runs")]
    assert main([*argv, "--no-register", *flags]) == 2
    assert needle in one_line_error(capsys)


def test_train_refuses_cpu_only_trace(files, tmp_path, capsys, no_training) -> None:
    argv = ["sched", "train", "--trace", files["cpu"], "--out", str(tmp_path / "runs")]
    assert main([*argv, "--no-register"]) == 2
    assert "requests no GPU" in one_line_error(capsys)


def test_fgd_recipe_check(files) -> None:
    from fleetmind.training.recipes.fgd import FgdArgs, _check

    _check(FgdArgs(traces=[files["pods"]], eval_traces=[files["pods"]]))
    for bad in ({"eval_freq": 0}, {"fgd_until_pct": 101.0}, {"max_minutes": 0.0}):
        with pytest.raises(ConfigError):
            _check(FgdArgs(traces=[files["pods"]], eval_traces=[files["pods"]], **bad))


def test_learner_recipes_refuse_non_positive_max_minutes() -> None:
    from fleetmind.training.recipes.es import EsArgs, check

    check(EsArgs(max_minutes=1.5))
    with pytest.raises(ConfigError, match="--max-minutes"):
        check(EsArgs(max_minutes=-1.0))


def test_eval_callback_refuses_eval_freq_below_one() -> None:
    from fleetmind.rl.callbacks import MlflowEvalCallback

    with pytest.raises(ConfigError, match="--eval-freq"):
        MlflowEvalCallback(lambda step: None, 0, lambda info: {})


def test_effective_timesteps_logged() -> None:
    from fleetmind.training.recipes.fgd import FgdArgs
    from fleetmind.training.recipes.tracking import effective_timesteps, run_params

    assert run_params(FgdArgs(timesteps=600, n_envs=2))["timesteps_effective"] == 1024
    assert effective_timesteps(0, 512, 2) == 0
    assert effective_timesteps(1024, 512, 2) == 1024


# 8. search-teacher ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags",
    [
        ["--init-sd", "0"],
        ["--init-sd", "-1"],
        ["--init-sd", "nan"],
        ["--fgd-until-pct", "101"],
        ["--fgd-until-pct", "-1"],
    ],
)
def test_search_teacher_refuses_bad_settings(files, tmp_path, capsys, monkeypatch, flags) -> None:
    from fleetmind.rl import teacher_search

    def ran(*a: object, **k: object) -> None:
        raise AssertionError("the search ran")

    monkeypatch.setattr(teacher_search, "cmaes_search", ran)
    argv = ["sched", "search-teacher", "--trace", files["pods"], "--nodes", files["nodes"]]
    assert main([*argv, "--out", str(tmp_path / "s.json"), *flags]) == 2
    assert flags[0] in one_line_error(capsys)


def test_cmaes_search_checks_before_any_episode(monkeypatch) -> None:
    from fleetmind.rl import teacher_search

    monkeypatch.setattr(teacher_search, "run_tasks", lambda *a, **k: pytest.fail("episodes ran"))
    cfg = {"traces": ["x"], "fgd_until_pct": 80.0, "stop_arrived_pct": 101.0}
    with pytest.raises(ConfigError, match="--init-sd"):
        teacher_search.cmaes_search(cfg, [("x", 1)], init_sd=0.0)


# minor: --json that cannot be written fails before the work --------------------------------------


def test_unwritable_json_fails_before_the_runs(files, tmp_path, capsys, monkeypatch) -> None:
    from fleetmind.cli import sched

    monkeypatch.setattr(sched, "_evaluate_fgd", lambda *a: pytest.fail("the runs started"))
    bad = Path(files["pods"]) / "r.json"  # under a file
    argv = ["sched", "evaluate", "--trace", files["pods"], "--nodes", files["nodes"]]
    assert main([*argv, "--seeds", "1", "--json", str(bad)]) == 2
    assert "--json" in one_line_error(capsys)
    assert main([*argv, "--seeds", "1", "--json", str(tmp_path)]) == 2  # a folder
    assert "a folder is there" in one_line_error(capsys)
