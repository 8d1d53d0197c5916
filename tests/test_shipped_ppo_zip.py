"""Every shipped ``models/*/ppo.zip`` loads with bare ``sb3_contrib.MaskablePPO.load``.

``docs/ppo.md`` calls ``ppo.zip`` "the SB3 model, for further fine-tuning", so it must load without
FleetMind's :func:`fleetmind.compat.legacy_module_names` alias: SB3 unpickles ``policy_class`` from
the ``data`` member (``stable_baselines3/common/save_util.py``, ``json_to_data`` ->
``cloudpickle.loads``; https://github.com/DLR-RM/stable-baselines3/blob/master/stable_baselines3/common/save_util.py),
and a class pickled as ``rl.policy.CandidateScorerPolicy`` (before the ``fleetmind`` namespace)
raised ``ModuleNotFoundError: No module named 'rl'``.
"""

from __future__ import annotations

import base64
import json
import os
import pickletools
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ZIPS = sorted(ROOT.glob("models/*/ppo.zip"))


def _pickled_globals(zip_path: Path) -> list[str]:
    """``module.name`` of every global that the pickles in the ``data`` member reference."""
    with zipfile.ZipFile(zip_path) as z:
        data = json.loads(z.read("data"))
    out: list[str] = []
    for value in data.values():
        if not (isinstance(value, dict) and ":serialized:" in value):
            continue
        strings: list[str] = []
        for op, arg, _ in pickletools.genops(base64.b64decode(value[":serialized:"])):
            if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
                strings.append(str(arg))
            elif op.name == "STACK_GLOBAL":
                out.append(".".join(strings[-2:]))
            elif op.name == "GLOBAL":
                out.append(str(arg).replace(" ", "."))
    return out


def test_there_are_shipped_models() -> None:
    assert len(ZIPS) >= 2, ZIPS


@pytest.mark.parametrize("zip_path", ZIPS, ids=lambda p: p.parent.name)
def test_no_pre_namespace_module_is_pickled(zip_path: Path) -> None:
    names = _pickled_globals(zip_path)
    assert "fleetmind.rl.policy.CandidateScorerPolicy" in names
    assert not [n for n in names if n == "rl" or n.startswith("rl.")], names


@pytest.mark.parametrize("zip_path", ZIPS, ids=lambda p: p.parent.name)
def test_bare_maskableppo_load_in_a_fresh_process(zip_path: Path, tmp_path: Path) -> None:
    # a fresh interpreter outside the checkout: no ``rl`` folder on sys.path, no alias installed
    code = (
        "import sys\n"
        "from sb3_contrib import MaskablePPO\n"
        f"m = MaskablePPO.load({str(zip_path)!r}, device='cpu')\n"
        "assert not [n for n in sys.modules if n == 'rl' or n.startswith('rl.')]\n"
        "print(type(m.policy).__module__, type(m.policy).__name__)\n"
    )
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    env.pop("PYTHONPATH", None)
    res = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split() == ["fleetmind.rl.policy", "CandidateScorerPolicy"]
