"""Helpers shared by the CLI group modules."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def add_group(
    subparsers: argparse._SubParsersAction, name: str, help_text: str
) -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    """Add a command group and return ``(group_parser, its_subparsers)``."""
    group = subparsers.add_parser(name, help=help_text, description=help_text)
    group.set_defaults(group_parser=group)
    return group, group.add_subparsers(dest="command", metavar="COMMAND")


def write_json(path: str | Path | None, payload: dict[str, Any]) -> None:
    """Write ``payload`` as indented JSON to ``path`` (parent folders created); no-op for ``None``."""
    if path is None:
        return
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n")
