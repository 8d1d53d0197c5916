"""A role map that is not a regular file is refused in one line, at the default place too.

Before 2026-12-06 a folder named ``roles.yaml`` in a scenario was silently skipped (roles by name
only, as if there were no file) and ``--roles FOLDER`` said "role map not found"; a FIFO there
would have blocked the reader.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fleetmind.data.errors import DataError
from fleetmind.data.metric_roles import (
    ROLE_MAP_FILE,
    RoleMap,
    load_role_map,
    role_map_source,
    scenario_role_map,
)


def test_a_folder_named_roles_yaml_is_refused(tmp_path: Path) -> None:
    assert role_map_source(tmp_path) is None
    assert scenario_role_map(tmp_path).to_dict() == RoleMap().to_dict()
    folder = tmp_path / ROLE_MAP_FILE
    folder.mkdir()
    assert role_map_source(tmp_path) == str(folder)
    for read in (lambda: scenario_role_map(tmp_path), lambda: load_role_map(folder)):
        with pytest.raises(DataError, match=r"roles\.yaml is a folder, not a file"):
            read()
    with pytest.raises(DataError, match="role map not found"):
        load_role_map(tmp_path / "missing.yaml")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_refused_without_reading_it(tmp_path: Path) -> None:
    fifo = tmp_path / ROLE_MAP_FILE
    os.mkfifo(fifo)
    with pytest.raises(DataError, match="is not a regular file"):
        scenario_role_map(tmp_path)


def test_a_regular_file_still_reads(tmp_path: Path) -> None:
    (tmp_path / ROLE_MAP_FILE).write_text("p90: latency\n")
    assert scenario_role_map(tmp_path).to_dict() == {"p90": "latency"}
