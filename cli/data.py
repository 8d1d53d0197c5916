"""``fleetmind data ...``: the public datasets (``data fetch openb|petshop [--dest DIR]``).

Also holds :func:`synthetic_openb_note`, which the commands that fall back to the synthetic openb-schema
trace (``sched``, ``fleet show --topology openb``, ``demo``) use to say so.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from fleetmind.cli.common import add_group


def synthetic_openb_note(uses_openb_folder: bool = True) -> str | None:
    """Allow the synthetic openb fallback; return its label when this command will use it.

    Args:
        uses_openb_folder: whether the command reads from the openb folder at all (``False`` when
            the user gave every file explicitly); no fallback is enabled then.

    Returns:
        :data:`fleetmind.data.openb_synthetic.SYNTHETIC_LABEL` when the openb data is missing (the caller prints
        it and records it in its JSON), else ``None``.
    """
    if not uses_openb_folder:
        return None
    from fleetmind.data.openb_synthetic import SYNTHETIC_LABEL
    from fleetmind.data.paths import allow_synthetic_openb

    return SYNTHETIC_LABEL if allow_synthetic_openb() is not None else None


def register(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> None:
    _, sub = add_group(subparsers, name, help_text)
    fe = sub.add_parser(
        "fetch",
        help="download a public dataset, verify its checksums, print its citation and terms",
        description=(
            "Download a public dataset (openb: Alibaba's GPU cluster trace; petshop: the PetShop "
            "root-cause dataset) from its pinned upstream commit, check every file's SHA-256, and "
            "print the citation and the terms of use. Files already there with the right checksum "
            "are kept."
        ),
    )
    fe.add_argument("dataset", choices=["openb", "petshop"], help="which dataset")
    fe.add_argument(
        "--dest",
        default=None,
        help="the shared data folder to fill (default: $FLEETMIND_SHARED_DATA, else ./fleetmind-data)",
    )
    fe.add_argument(
        "--base-url",
        default=None,
        help="download from this mirror instead of the upstream repository (same file layout)",
    )
    fe.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help=(
            "seconds to connect, for each read and for a server's answer (status line and "
            "headers) in all; each file must also arrive within it plus 1 s per 1,000 bytes "
            "(default: 60; at most 10,000,000)"
        ),
    )
    fe.set_defaults(func=cmd_fetch)


def cmd_fetch(args: argparse.Namespace) -> int:
    """``fleetmind data fetch``: download, verify, print citation and terms."""
    from fleetmind.data.fetch import check_http_url, check_timeout, fetch_dataset, load_manifest

    if args.base_url is not None:  # before the header line: a bad URL is the only output
        check_http_url(args.base_url, "--base-url")
    check_timeout(args.timeout)  # before the header line too
    dest = Path(args.dest or os.environ.get("FLEETMIND_SHARED_DATA") or "fleetmind-data")
    entry = load_manifest()[args.dataset]
    print(
        f"{entry['title']}: {len(entry['files'])} files into {dest / entry['folder']}", flush=True
    )
    report = fetch_dataset(
        args.dataset,
        dest,
        base_url=args.base_url,
        timeout_s=args.timeout,
        progress=lambda line: print(line, flush=True),
    )
    print(
        f"verified: {len(report.downloaded)} downloaded, {len(report.kept)} already there "
        f"(SHA-256 of every file checked)"
    )
    print(f"cite: {report.citation}")
    print(f"terms: {report.terms}")
    if os.environ.get("FLEETMIND_SHARED_DATA") != str(dest):
        print(f"use it: export FLEETMIND_SHARED_DATA={shlex.quote(str(dest.resolve()))}")
    sys.stdout.flush()
    return 0
