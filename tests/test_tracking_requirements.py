"""The requirements a logged pyfunc model declares carry no local version label.

``pip_requirements`` pinned ``torch==2.13.0+cpu`` (the CPU wheel's local label), which only the
PyTorch index serves: ``mlflow models serve`` or ``pip install -r requirements.txt`` elsewhere
could not install it. MLflow strips the label from the requirements it infers
(``mlflow/utils/requirements_utils.py``, ``_strip_local_version_label``; PEP 440, "Local version
identifiers"), and so does FleetMind now.
"""

from __future__ import annotations

import importlib.metadata

import pytest

from fleetmind.training.tracking import pip_requirements


@pytest.mark.parametrize(
    ("installed", "pinned"),
    [("2.13.0+cpu", "2.13.0"), ("2.5.1+cu121", "2.5.1"), ("1.26.4", "1.26.4"), ("weird", "weird")],
)
def test_local_labels_are_stripped(installed: str, pinned: str) -> None:
    from fleetmind.training.tracking import strip_local_version

    assert strip_local_version(installed) == pinned


def test_logged_requirements_pin_public_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    installed = {"torch": "2.13.0+cpu", "numpy": "2.4.6"}
    monkeypatch.setattr(importlib.metadata, "version", lambda name: installed[name])
    assert pip_requirements(["torch", "numpy"]) == ["torch==2.13.0", "numpy==2.4.6"]
