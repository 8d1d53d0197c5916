"""A stray U+2069 POP DIRECTIONAL ISOLATE in alert text shown in a ``<bdi>``.

Chromium lays a ``<bdi>`` out as its text between U+2068 FSI and U+2069 PDI; a PDI of the text's
own (legal in a Prometheus label value: a cluster label ``A`` U+2069 U+202E ``edge``) closed that
isolate early, and the U+202E RIGHT-TO-LEFT OVERRIDE after it reversed the rest of the line: the
other clusters' names and the page's own words. :func:`~fleetmind.serving.ui.router.bdi` now
balances the text as :func:`~fleetmind.serving.ui.svg.isolate` does (Unicode TR9 rules X6a, BD9:
a PDI matches only an isolate initiator opened before it in the same text).
"""

from __future__ import annotations

import os

from fleetmind.serving.ui import router as ui_router
from fleetmind.serving.ui.svg import balanced, isolate

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

LRI, RLI, FSI, PDI, RLO = "\u2066", "\u2067", "\u2068", "\u2069", "\u202e"
STRAY = "A" + PDI + RLO + "edge"  # the cluster label of the finding


def test_bdi_leaves_out_a_pdi_that_closes_nothing_and_closes_what_is_left_open() -> None:
    assert ui_router.bdi(STRAY) == f"<bdi>A{RLO}edge</bdi>"
    assert ui_router.bdi(PDI + PDI + "x") == "<bdi>x</bdi>"
    assert ui_router.bdi(RLI + "ab") == f"<bdi>{RLI}ab{PDI}</bdi>"
    assert ui_router.bdi(LRI + "a" + PDI + PDI + "b") == f"<bdi>{LRI}a{PDI}b</bdi>"
    assert ui_router.bdi("c0") == "<bdi>c0</bdi>"  # plain text as it is


def test_bdi_and_isolate_balance_alike() -> None:
    for text in (STRAY, RLI + "ab", FSI + "a" + PDI + PDI + RLO, "x" + PDI):
        assert isolate(text) == FSI + balanced(text) + PDI
        assert ui_router.bdi(text) == f"<bdi>{balanced(text)}</bdi>"
