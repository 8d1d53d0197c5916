"""``fleetmind demo``: the end-to-end demo (see :mod:`fleetmind.training.demo`)."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> None:
    p = subparsers.add_parser(name, help=help_text, description=help_text)
    p.add_argument("--out", default="out/demo", help="working folder (default: out/demo)")
    p.add_argument(
        "--quick",
        action="store_true",
        help="small sizes; placement scored with two heuristics on the synthetic openb-schema trace",
    )
    p.add_argument("--incidents", type=int, default=300, help="simulated incidents (default: 300)")
    p.add_argument("--seed", type=int, default=7, help="master seed (default: 7)")
    p.add_argument("--port", type=int, default=0, help="service port (default: a free one)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fleetmind.training.demo import DemoConfig, run_demo

    run_demo(
        DemoConfig(
            out=Path(args.out),
            quick=args.quick,
            incidents=args.incidents,
            seed=args.seed,
            port=args.port,
        )
    )
    return 0
