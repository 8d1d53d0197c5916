"""Calibrated root-cause scores: temperature scaling and expected calibration error.

The GAT scores the nodes of an incident's candidate subgraph with a softmax over their logits. A
single temperature ``T`` (Guo et al., "On Calibration of Modern Neural Networks", ICML 2017) turns
those scores into probabilities that can be read as such: ``softmax(z / T)`` keeps the ranking, and
``T`` is fitted on a validation split by minimising the negative log-likelihood of the true root.
The top cause's score then estimates how often the top cause is right, which is what decides the
``severity`` of a ``FleetMindRootCause`` alert.

Everything here is numpy and scipy; the logits come from
:meth:`fleetmind.rca.gat_analyzer.GATAnalyzer.crop_logits_many`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

T_MIN, T_MAX = 0.05, 20.0
"""Search range of the temperature (the analyzer accepts 0.01-100)."""


def _log_softmax(z: np.ndarray) -> np.ndarray:
    m = z.max()
    return z - m - np.log(np.exp(z - m).sum())


def root_nll(logits: Sequence[np.ndarray], targets: Sequence[int], temperature: float) -> float:
    """Mean negative log-likelihood of the true roots under ``softmax(z / T)``.

    Args:
        logits: per incident, float ``(m_i,)`` logits of its candidate nodes.
        targets: per incident, the index of the true root among them (incidents whose root is not
            a candidate must be left out by the caller: no temperature can score them).
        temperature: ``T > 0``.
    """
    if not logits:
        raise ValueError("no incidents to fit on")
    t = float(temperature)
    return float(
        -np.mean([_log_softmax(np.asarray(z) / t)[y] for z, y in zip(logits, targets, strict=True)])
    )


def fit_temperature(logits: Sequence[np.ndarray], targets: Sequence[int]) -> float:
    """The temperature in ``[T_MIN, T_MAX]`` that minimises :func:`root_nll` (bounded Brent search
    on ``log T``; the NLL is smooth and, in practice, unimodal in it)."""
    from scipy.optimize import minimize_scalar

    res = minimize_scalar(
        lambda lt: root_nll(logits, targets, float(np.exp(lt))),
        bounds=(np.log(T_MIN), np.log(T_MAX)),
        method="bounded",
        options={"xatol": 1e-4},
    )
    return float(np.exp(res.x))


@dataclass(frozen=True)
class Reliability:
    """Top-1 reliability of a set of incidents.

    Attributes:
        ece: expected calibration error of the top score (weighted mean |accuracy - confidence|
            over equal-width confidence bins), in probability units.
        accuracy: share of incidents whose top cause is the root (AC@1).
        mean_confidence: mean top score.
        n: incidents.
        bins: per non-empty bin ``(low, high, count, accuracy, mean confidence)``.
    """

    ece: float
    accuracy: float
    mean_confidence: float
    n: int
    bins: tuple[tuple[float, float, int, float, float], ...]

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form (rounded to 4 places)."""
        return {
            "ece": round(self.ece, 4),
            "accuracy": round(self.accuracy, 4),
            "mean_confidence": round(self.mean_confidence, 4),
            "n": self.n,
            "bins": [
                {"low": lo, "high": hi, "n": k, "accuracy": round(a, 4), "confidence": round(c, 4)}
                for lo, hi, k, a, c in self.bins
            ],
        }


def reliability(confidence: np.ndarray, correct: np.ndarray, n_bins: int = 10) -> Reliability:
    """Expected calibration error of top-1 scores.

    Args:
        confidence: float ``(N,)`` top score of each incident, in ``[0, 1]``.
        correct: bool ``(N,)`` whether that top cause is the true root.
        n_bins: equal-width bins over ``[0, 1]``.
    """
    conf = np.asarray(confidence, dtype=np.float64)
    ok = np.asarray(correct, dtype=bool)
    if conf.shape != ok.shape or conf.ndim != 1 or conf.size == 0:
        raise ValueError("confidence and correct must be 1-D arrays of the same non-zero length")
    idx = np.minimum((conf * n_bins).astype(np.int64), n_bins - 1)
    ece = 0.0
    bins = []
    for b in range(n_bins):
        sel = idx == b
        k = int(sel.sum())
        if not k:
            continue
        acc, mc = float(ok[sel].mean()), float(conf[sel].mean())
        ece += k / conf.size * abs(acc - mc)
        bins.append((b / n_bins, (b + 1) / n_bins, k, acc, mc))
    return Reliability(
        float(ece), float(ok.mean()), float(conf.mean()), int(conf.size), tuple(bins)
    )


def top1(
    logits: Sequence[np.ndarray], targets: Sequence[int], temperature: float
) -> tuple[np.ndarray, np.ndarray]:
    """Top score and correctness of each incident under ``softmax(z / T)``.

    ``targets[i]`` is the root's index among the candidates, or ``-1`` when the root is not a
    candidate (then the top cause is wrong whatever its score). An exact tie goes to the lowest
    candidate index (the analyzer breaks it by node id; float logits practically never tie).
    """
    conf = np.empty(len(logits))
    ok = np.empty(len(logits), dtype=bool)
    for i, (z, y) in enumerate(zip(logits, targets, strict=True)):
        p = np.exp(_log_softmax(np.asarray(z, dtype=np.float64) / temperature))
        j = int(np.argmax(p))
        conf[i], ok[i] = p[j], j == y
    return conf, ok
