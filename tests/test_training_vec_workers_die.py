"""``SubprocVecEnv`` workers end with the process that started them, however it ends.

A command stopped by SIGTERM (``kill``, a Job's deadline) or SIGKILL must not leave its PPO
worker processes running: :func:`fleetmind.rl.vec_workers.subproc_vec_env` has each worker ask
for SIGKILL when its parent ends (``prctl(PR_SET_PDEATHSIG)``, prctl(2)).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only"
)

CHILD = """
import os, sys, tempfile, time
import gymnasium as gym
import numpy as np
from fleetmind.rl.vec_workers import subproc_vec_env

class Tiny(gym.Env):
    observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)
    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}
    def step(self, action):
        return np.zeros(1, np.float32), 0.0, False, False, {}

err_dir = tempfile.TemporaryDirectory(prefix="fleetmind-workers-test-")
venv = subproc_vec_env([Tiny, Tiny], err_dir)
venv.reset()
print(" ".join(str(p.pid) for p in venv.processes), flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_workers_end_when_parent_is_killed(sig: int) -> None:
    env = dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true")
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD], env=env, stdout=subprocess.PIPE, text=True
    )
    workers: list[int] = []
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        workers = [int(p) for p in line.split()]
        assert len(workers) == 2, line
        assert all(_alive(p) for p in workers)
        proc.send_signal(sig)
        proc.wait(timeout=60)
        deadline = time.monotonic() + 60  # a failure bound only, not a timing assertion
        while any(_alive(p) for p in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = [p for p in workers if _alive(p)]
        assert not left, f"workers {left} outlived their parent"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for p in workers:  # clean up what this test started, should it fail
            if _alive(p):
                os.kill(p, signal.SIGKILL)
