"""``fleetmind rca ...``: root-cause analysis commands."""

from __future__ import annotations

import argparse

from training.cli_common import add_group, not_landed


def register(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> None:
    _, sub = add_group(subparsers, name, help_text)
    for cmd, issue in [("generate", 3), ("train", 4), ("evaluate", 3), ("petshop", 8)]:
        p = sub.add_parser(cmd, help=f"(issue #{issue})")
        p.set_defaults(func=not_landed(f"fleetmind rca {cmd}", issue))
