"""No usage telemetry from ONNX Runtime: the CLI and the image set ``ORT_DISABLE_TELEMETRY=1``.

ONNX Runtime 1.29 added telemetry on Linux (microsoft/onnxruntime#27379, PosixTelemetry): official
wheels store usage events under ``~/.cache/Microsoft/DeveloperTools/.onnxruntime`` and send them
to ``mobile.events.data.microsoft.com`` unless ``ORT_DISABLE_TELEMETRY`` is set before the library
initialises (its pybind module holds the variable's name); the service sent DNS queries for that
host. ``fleetmind`` sets it by default (as ``MLFLOW_DISABLE_TELEMETRY``), and so does the image.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fleetmind.data.paths import REPO_ROOT

PROBE = """
import os, sys
from fleetmind.cli import main
if sys.argv[1] == "cli":
    main([])  # any command: the default is set before the command runs
import onnx
from onnx import TensorProto, helper
import onnxruntime as ort
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
print(os.environ.get("ORT_DISABLE_TELEMETRY"))
"""


def _run(home: Path, how: str) -> tuple[str, list[str]]:
    """Run :data:`PROBE` in a clean environment (no CI variable, which also silences ONNX
    Runtime) with ``home`` as HOME; its printed variable and the telemetry files it left."""
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, how], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    store = home / ".cache" / "Microsoft"
    return done.stdout.strip().splitlines()[-1], sorted(
        p.name for p in store.rglob("*") if p.is_file()
    )


def test_the_cli_turns_onnxruntime_telemetry_off(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    var, files = _run(tmp_path / "cli", "cli")
    assert var == "1" and files == [], files
    # the control: without the CLI the same session starts the telemetry store (a wheel built
    # without telemetry leaves none either way, and then the check above proves less)
    var, files = _run(tmp_path / "bare", "bare")
    if not files:
        pytest.skip("this onnxruntime build keeps no telemetry store (built without telemetry)")
    assert var == "None"


def test_a_users_own_choice_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    from fleetmind.cli import main

    monkeypatch.setenv("ORT_DISABLE_TELEMETRY", "0")
    assert main([]) == 0
    assert os.environ["ORT_DISABLE_TELEMETRY"] == "0"


def test_the_image_turns_onnxruntime_telemetry_off() -> None:
    dockerfile = (REPO_ROOT / "deploy" / "container" / "Dockerfile").read_text()
    env_blocks = re.findall(r"^ENV ((?:.*\\\n)*.*)$", dockerfile, re.M)
    assert any(re.search(r"\bORT_DISABLE_TELEMETRY=1\b", block) for block in env_blocks)
