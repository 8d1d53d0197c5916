"""Helpers shared by the CLI group modules."""

from __future__ import annotations

import argparse


def add_group(
    subparsers: argparse._SubParsersAction, name: str, help_text: str
) -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    """Add a command group and return ``(group_parser, its_subparsers)``.

    The group parser is stored as ``group_parser`` in the parsed namespace, so that ``fleetmind
    <group>`` without a sub-command prints the group's help (:func:`fleetmind.cli.main`).
    """
    group = subparsers.add_parser(name, help=help_text, description=help_text)
    group.set_defaults(group_parser=group)
    return group, group.add_subparsers(dest="command", metavar="COMMAND")
