"""``fleetmind demo``: the end-to-end demo."""

from __future__ import annotations

import argparse

from training.cli_common import not_landed


def register(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> None:
    p = subparsers.add_parser(name, help=help_text, description=help_text)
    p.set_defaults(func=not_landed("fleetmind demo", 9))
