"""A result's ``command`` pastes back into a shell as the same arguments.

``benchmarks.provenance.command`` joined the arguments with spaces, so ``--note "2-core machine"``
came back as two arguments. It quotes them as ``shlex.join`` does (Python's ``shlex`` module: the
inverse of ``shlex.split`` for a POSIX shell).
"""

from __future__ import annotations

import shlex

from benchmarks.provenance import command, provenance


def test_an_argument_with_a_space_or_a_quote_survives_the_round_trip() -> None:
    argv = ["--note", "2-core machine", "--out", "/tmp/it's here.json", "--seeds", "42-51"]
    line = command("benchmarks.placement.fgd_fidelity", argv)
    assert shlex.split(line) == ["python", "-m", "benchmarks.placement.fgd_fidelity", *argv]
    assert provenance("benchmarks.x", ["--workers", "2"])["command"] == (
        "python -m benchmarks.x --workers 2"  # plain arguments read as before
    )
