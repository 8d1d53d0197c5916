"""``fleetmind fleet ...``: fleet topology commands."""

from __future__ import annotations

import argparse

from training.cli_common import add_group, not_landed


def register(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> None:
    _, sub = add_group(subparsers, name, help_text)
    p = sub.add_parser("show", help="summarise a fleet topology")
    p.add_argument("--topology", default="openb", help="a fleet YAML file, or 'openb'")
    p.set_defaults(func=not_landed("fleetmind fleet show", 2))
