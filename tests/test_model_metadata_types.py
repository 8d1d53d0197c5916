"""A placement model whose ``metadata.json`` has a wrong-typed field, or is not UTF-8, is a
``ModelLoadError`` (one line from ``fleetmind sched evaluate``, exit 2), never a traceback.

``metadata.json`` is JSON (RFC 8259 section 8.1: exchanged as UTF-8); Python's ``json`` gives
``None`` for ``null`` and a ``str`` for ``"sixteen"``, which ``int()`` refuses with a
``TypeError``/``ValueError`` that is not a load error unless the loader says so.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from fleetmind.cli import main
from fleetmind.data.errors import ModelLoadError
from fleetmind.data.paths import MODELS_DIR
from fleetmind.rl.dynamic_eval import DynEvalConfig, load_dynamic_actor, model_config
from fleetmind.rl.policy_adapter import load_ppo_policy

PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,1000,1000,1,1000\n"


def _copy(tmp_path: Path, name: str, edit: Any) -> Path:
    """The released model ``name`` copied to ``tmp_path`` with ``edit(meta)`` applied (or the raw
    bytes written, when ``edit`` is bytes)."""
    out = tmp_path / name
    shutil.copytree(MODELS_DIR / name, out)
    if isinstance(edit, bytes):
        (out / "metadata.json").write_bytes(edit)
    else:
        meta = json.loads((out / "metadata.json").read_text())
        edit(meta)
        (out / "metadata.json").write_text(json.dumps(meta))
    return out


def _set(key: str, value: Any) -> Any:
    return lambda m: m.__setitem__(key, value)


def _set_env(key: str, value: Any) -> Any:
    return lambda m: m["env_kwargs"].__setitem__(key, value)


@pytest.mark.parametrize(
    "edit",
    [_set("n_candidates", None), _set("n_candidates", "sixteen"), _set("n_candidates", True)],
)
def test_fgd_model_with_a_wrong_typed_n_candidates(tmp_path: Path, edit: Any) -> None:
    folder = _copy(tmp_path, "placement", edit)
    with pytest.raises(ModelLoadError, match="n_candidates must be an integer"):
        load_ppo_policy(folder)


def test_fgd_model_with_metadata_that_is_not_utf8(tmp_path: Path) -> None:
    folder = _copy(tmp_path, "placement", b"\xff\xfe{}")
    with pytest.raises(ModelLoadError, match="corrupt placement model metadata"):
        load_ppo_policy(folder)


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (_set_env("backfill_depth", "deep"), "backfill_depth"),
        (_set_env("n_candidates", None), "n_candidates"),
        (_set_env("n_candidates", "sixteen"), "n_candidates"),
        (_set_env("node_fraction", "0.1"), "node_fraction"),
        (_set_env("target_util", None), "target_util"),
        (_set_env("queue_features", "false"), "queue_features"),
        (_set_env("queue_order", ["a", 1]), "queue_order"),
        (_set_env("candidate_set", 3), "candidate_set"),
        (_set_env("n_jobs", 0), "n_jobs"),
    ],
)
def test_dynamic_model_with_a_wrong_typed_setting(tmp_path: Path, edit: Any, field: str) -> None:
    folder = _copy(tmp_path, "placement-dynamic", edit)
    with pytest.raises(ModelLoadError, match=f"bad env_kwargs: {field}"):
        model_config(folder)
    with pytest.raises(ModelLoadError, match=field):
        load_dynamic_actor(folder)


def test_dynamic_model_with_metadata_that_is_not_utf8(tmp_path: Path) -> None:
    folder = _copy(tmp_path, "placement-dynamic", b"\xff\xfe{}")
    for load in (model_config, load_dynamic_actor):
        with pytest.raises(ModelLoadError, match="corrupt metadata"):
            load(folder)


def test_released_settings_still_read() -> None:
    meta = json.loads((MODELS_DIR / "placement-dynamic" / "metadata.json").read_text())
    cfg = model_config(MODELS_DIR / "placement-dynamic")
    assert cfg == DynEvalConfig.from_metadata(meta["env_kwargs"])
    assert cfg.backfill_depth == meta["env_kwargs"]["backfill_depth"]
    assert DynEvalConfig.from_metadata({"node_fraction": 1, "target_util": 1}).node_fraction == 1


@pytest.mark.parametrize(
    ("name", "edit", "mode"),
    [
        ("placement", _set("n_candidates", None), "fgd"),
        ("placement-dynamic", _set_env("backfill_depth", "deep"), "dynamic"),
        ("placement-dynamic", b"\xff\xfe{}", "dynamic"),
    ],
)
def test_sched_evaluate_says_one_line_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, edit: Any, mode: str
) -> None:
    folder = _copy(tmp_path, name, edit)
    (tmp_path / "t.csv").write_text(PODS)
    argv = ["sched", "evaluate", "--mode", mode, "--trace", str(tmp_path / "t.csv")]
    assert main([*argv, "--seeds", "1", "--policies", "ppo", "--model", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("fleetmind: error:") and "Traceback" not in "\n".join(err)


def _bom(name: str) -> bytes:
    """The released ``metadata.json`` of ``name`` behind a UTF-8 byte order mark (what Windows
    editors and PowerShell's ``Out-File -Encoding utf8`` write; RFC 8259 section 8.1 lets a parser
    ignore it)."""
    return b"\xef\xbb\xbf" + (MODELS_DIR / name / "metadata.json").read_bytes()


def test_metadata_behind_a_byte_order_mark_loads(tmp_path: Path) -> None:
    load_ppo_policy(_copy(tmp_path, "placement", _bom("placement")))
    folder = _copy(tmp_path, "placement-dynamic", _bom("placement-dynamic"))
    assert model_config(folder) == model_config(MODELS_DIR / "placement-dynamic")


def test_metadata_with_an_integer_python_cannot_read_is_a_load_error(tmp_path: Path) -> None:
    huge = b'{"n_candidates": 1' + b"0" * 5000 + b"}"  # over CPython's 4,300-digit limit
    with pytest.raises(ModelLoadError, match="more than 4,300 digits"):
        load_ppo_policy(_copy(tmp_path, "placement", huge))
    with pytest.raises(ModelLoadError, match="more than 4,300 digits"):
        model_config(_copy(tmp_path, "placement-dynamic", huge))
