"""Command-line value types shared by every layer's ``add_arguments`` (the CLI in
:mod:`fleetmind.cli` and the training modules that define their own options).

* :func:`seed`: an ``argparse`` type for seeds, ``0 <= seed < 2**32``, the range every generator
  FleetMind seeds takes (NumPy refuses negative seeds; Lightning's ``seed_everything`` refuses
  seeds from ``2**32`` on); a value outside is a one-line usage error rather than a traceback
  from deep inside a run;
* :func:`finite_float`: an ``argparse`` type for numbers that must be finite.
"""

from __future__ import annotations

import argparse
import math

SEED_LIMIT = 2**32
"""Seeds lie in ``[0, SEED_LIMIT)``."""


def seed(text: str) -> int:
    """``argparse`` type: ``text`` as a seed in ``[0, 2**32)``.

    Raises:
        argparse.ArgumentTypeError: not an integer, or outside that range.
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer seed, got {text!r}") from None
    if not 0 <= value < SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"a seed lies in [0, 2**32), got {value}")
    return value


def finite_float(text: str) -> float:
    """``argparse`` type: ``text`` as a finite float (``nan`` and ``inf`` parse as floats, and
    then pass every ``>= 0`` check or loop forever).

    Raises:
        argparse.ArgumentTypeError: not a number, or not finite.
    """
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value
