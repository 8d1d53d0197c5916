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


def _run_fresh(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter in ``cwd`` (outside the checkout: no ``rl`` folder on
    ``sys.path``, no ``PYTHONPATH``, no alias installed) and check it exits 0."""
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    env.pop("PYTHONPATH", None)
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-2000:]
    return res


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
    res = _run_fresh(code, tmp_path)
    assert res.stdout.split() == ["fleetmind.rl.policy", "CandidateScorerPolicy"]


# ``policy_class`` of models/placement-dynamic/ppo.zip as saved before the ``fleetmind`` namespace
# (the file at commit 024b9e1^): PROTO 5, FRAME 39, 'rl.policy' 'CandidateScorerPolicy' STACK_GLOBAL
PRE_NAMESPACE_POLICY_CLASS = "gAWVJwAAAAAAAACMCXJsLnBvbGljeZSMFUNhbmRpZGF0ZVNjb3JlclBvbGljeZSTlC4="


def _pre_namespace_pickle(raw: bytes) -> bytes:
    """``raw`` (one framed protocol-5 pickle of a class) with ``fleetmind.rl.policy`` renamed to
    ``rl.policy``: the SHORT_BINUNICODE length byte and the 8-byte FRAME length are rewritten."""
    ops = [(op.name, arg) for op, arg, _ in pickletools.genops(raw)]
    assert ops[:2] == [("PROTO", 5), ("FRAME", len(raw) - 11)], ops
    old, new = b"fleetmind.rl.policy", b"rl.policy"
    body = raw[11:].replace(b"\x8c" + bytes([len(old)]) + old, b"\x8c" + bytes([len(new)]) + new)
    assert body != raw[11:], "no fleetmind.rl.policy in the pickle"
    return raw[:2] + b"\x95" + len(body).to_bytes(8, "little") + body


def _pre_namespace_zip(src: Path, dest: Path) -> Path:
    """A copy of ``src`` whose ``data`` member pickles the policy class as 0.1.0 did."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dest, "w") as zout:
        for info in zin.infolist():
            blob = zin.read(info)
            if info.filename == "data":
                data = json.loads(blob)
                entry = data["policy_class"]
                raw = _pre_namespace_pickle(base64.b64decode(entry[":serialized:"]))
                entry[":serialized:"] = base64.b64encode(raw).decode()
                entry["__module__"] = "rl.policy"  # informational, as SB3 wrote it
                blob = json.dumps(data, indent=4).encode()
            zout.writestr(info, blob)
    return dest


def test_the_rewritten_pickle_is_the_one_saved_before_the_namespace() -> None:
    with zipfile.ZipFile(ROOT / "models/placement-dynamic/ppo.zip") as z:
        now = json.loads(z.read("data"))["policy_class"][":serialized:"]
    assert _pre_namespace_pickle(base64.b64decode(now)) == base64.b64decode(
        PRE_NAMESPACE_POLICY_CLASS
    )


@pytest.mark.parametrize("zip_path", ZIPS, ids=lambda p: p.parent.name)
def test_a_pre_namespace_zip_loads_only_through_load_sb3_model(
    zip_path: Path, tmp_path: Path
) -> None:
    # a zip fine-tuned or trained with FleetMind 0.1.0 names ``rl.policy``: bare sb3-contrib cannot
    # import it; fleetmind.rl.export.load_sb3_model maps the old names while it reads the file
    legacy = _pre_namespace_zip(zip_path, tmp_path / "ppo.zip")
    assert "rl.policy.CandidateScorerPolicy" in _pickled_globals(legacy)
    code = (
        "import sys\n"
        "from sb3_contrib import MaskablePPO\n"
        "from fleetmind.rl.export import load_sb3_model\n"
        "try:\n"
        f"    MaskablePPO.load({str(legacy)!r}, device='cpu')\n"
        "    print('bare-load-worked')\n"
        "except ModuleNotFoundError as exc:\n"
        "    print('bare:', exc.name)\n"
        f"m = load_sb3_model({str(legacy)!r})\n"
        f"ref = MaskablePPO.load({str(zip_path)!r}, device='cpu')\n"
        "a, b = m.policy.state_dict(), ref.policy.state_dict()\n"
        "assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)\n"
        "assert not [n for n in sys.modules if n == 'rl' or n.startswith('rl.')]\n"
        "print(type(m.policy).__module__, type(m.policy).__name__)\n"
    )
    res = _run_fresh(code, tmp_path)
    assert res.stdout.split() == ["bare:", "rl", "fleetmind.rl.policy", "CandidateScorerPolicy"]
