"""Topology-aware choice of GPUs on one node, scored like NVIDIA go-gpuallocator's best-effort policy.

Pair score (go-gpuallocator ``calculateGPUPairScore``; every P2P link between the two GPUs adds points):

========  ====  ====  ====  ====  ====  ==========  ==============
level     SYS   NODE  PHB   PXB   PIX   same board  each NVLink
========  ====  ====  ====  ====  ====  ==========  ==============
points    10    20    30    40    50    60          +100
========  ====  ====  ====  ====  ====  ==========  ==============

A pair always has a PCIe path, so an ``NV2`` pair behind one PCIe switch scores ``50 + 200 = 250``.
A set of GPUs scores the sum over its unordered pairs (a single GPU scores 0).

Two selection rules are offered by :func:`best_gpu_set`:

* ``policy="greedy"`` (default, the simulator's hot path): the free ``k``-set with the highest set score.
* ``policy="partition"``: go-gpuallocator's best-effort rule: partition the free GPUs (padded to a
  multiple of ``k``) into ``k``-sets, take the partition with the highest total score, and return
  its best fully-real set. This keeps good sets for later requests; it costs more, so results are cached.

Ties: the lexicographically smallest GPU tuple wins (combinations are scanned in
``itertools.combinations`` order and only a strictly higher score replaces the incumbent), e.g. on an
idle DGX-1 V100 ``k=4`` returns ``(0, 1, 2, 3)`` rather than the equally scored ``(4, 5, 6, 7)``.

Speed: per template and ``k`` the candidate sets, their bitmasks and scores are precomputed once;
each distinct ``(free GPUs, k)`` answer is memoised on the template, so repeated queries cost a dict
lookup plus the conversion of the mask to an integer (see ``benchmarks/placement/fleet_speed.py``).
"""

from __future__ import annotations

from itertools import combinations
from typing import Literal

import numpy as np

from fleetmind.data.errors import ConfigError
from fleetmind.data.topology import LinkLevel, NodeTemplate

LEVEL_SCORE: dict[LinkLevel, int] = {
    LinkLevel.SYS: 10,
    LinkLevel.NODE: 20,
    LinkLevel.PHB: 30,
    LinkLevel.PXB: 40,
    LinkLevel.PIX: 50,
    LinkLevel.BRD: 60,
}
"""go-gpuallocator points per PCIe level (P2PLinkCrossCPU .. P2PLinkSameBoard)."""

NVLINK_SCORE = 100
"""go-gpuallocator points per bonded NVLink."""

Policy = Literal["greedy", "partition"]


def pair_score_matrix(template: NodeTemplate) -> np.ndarray:
    """``(G, G)`` int64 pair scores (0 on the diagonal); cached on the template, read-only."""
    cached = template._cache.get("pair_score")
    if cached is None:
        table = np.zeros(int(LinkLevel.X) + 1, dtype=np.int64)
        for lvl, pts in LEVEL_SCORE.items():
            table[int(lvl)] = pts
        scores = table[template.level.astype(np.int64)] + NVLINK_SCORE * template.nvlinks.astype(
            np.int64
        )
        np.fill_diagonal(scores, 0)
        scores.setflags(write=False)
        template._cache["pair_score"] = scores
        cached = scores
    return cached


def set_score(template: NodeTemplate, gpus: tuple[int, ...] | list[int] | np.ndarray) -> int:
    """Sum of pair scores over the unordered pairs of ``gpus`` (0 for fewer than two GPUs)."""
    idx = np.asarray(gpus, dtype=np.int64)
    if idx.size < 2:
        return 0
    m = pair_score_matrix(template)
    return int(m[np.ix_(idx, idx)].sum() // 2)


class _Candidates:
    """All k-subsets of one template: ``sets (M, k)``, ``masks (M,)`` bitmasks, ``scores (M,)``."""

    __slots__ = ("sets", "masks", "scores", "order", "tuples")

    def __init__(self, template: NodeTemplate, k: int) -> None:
        g = template.n_gpus
        sets = np.array(list(combinations(range(g), k)), dtype=np.int64).reshape(-1, k)
        m = pair_score_matrix(template)
        if k >= 2:
            sub = m[sets[:, :, None], sets[:, None, :]]
            scores = sub.sum(axis=(1, 2)) // 2
        else:
            scores = np.zeros(len(sets), dtype=np.int64)
        masks = (np.int64(1) << sets).sum(axis=1) if k else np.zeros(len(sets), dtype=np.int64)
        # Best first; stable sort keeps combinations (lexicographic) order among equal scores.
        order = np.argsort(-scores, kind="stable")
        self.sets = sets[order]
        self.masks = masks[order]
        self.scores = scores[order]
        self.tuples = [tuple(int(x) for x in row) for row in self.sets]


def _candidates(template: NodeTemplate, k: int) -> _Candidates:
    key = ("cand", k)
    c = template._cache.get(key)
    if c is None:
        c = _Candidates(template, k)
        template._cache[key] = c
    return c


def mask_to_bits(free_mask: np.ndarray | list[bool]) -> int:
    """``(G,)`` bool free-GPU mask -> integer with bit ``i`` set when GPU ``i`` is free."""
    packed = np.packbits(np.asarray(free_mask, dtype=bool), bitorder="little")
    return int.from_bytes(packed.tobytes(), "little")


def best_gpu_set(
    template: NodeTemplate,
    free_mask: np.ndarray | list[bool] | int,
    k: int,
    policy: Policy = "greedy",
) -> tuple[int, ...] | None:
    """The best ``k`` free GPUs of a node, or ``None`` when fewer than ``k`` are free.

    :param template: the node's template.
    :param free_mask: ``(G,)`` bool, True where the GPU is free; or the same as an integer bitmask.
    :param k: number of GPUs wanted (0 returns ``()``).
    :param policy: ``"greedy"`` (highest set score) or ``"partition"`` (go-gpuallocator best-effort).
    :return: sorted GPU indices; ties go to the lexicographically smallest tuple.
    :raises ConfigError: for a negative ``k``, a mask of the wrong length or an unknown policy.
    """
    if isinstance(free_mask, (int, np.integer)):
        return best_gpu_set_bits(template, int(free_mask), k, policy)
    arr = free_mask if isinstance(free_mask, np.ndarray) else np.asarray(free_mask)
    if arr.dtype != np.bool_:
        arr = arr.astype(bool)
    if arr.shape != (template.n_gpus,):
        raise ConfigError(
            f"free_mask has shape {arr.shape}, template {template.name!r} has "
            f"{template.n_gpus} GPUs"
        )
    # Memo keyed by the mask's bytes: skips the bool -> int conversion on repeated masks.
    memo = template._cache.setdefault(("bytes", policy), {})
    key = (arr.tobytes(), k)
    hit = memo.get(key, _MISS)
    if hit is not _MISS:
        return hit
    bits = 0
    for i, v in enumerate(arr.tolist()):
        if v:
            bits |= 1 << i
    result = best_gpu_set_bits(template, bits, k, policy)
    memo[key] = result
    return result


_MISS = object()


def best_gpu_set_bits(
    template: NodeTemplate, free_bits: int, k: int, policy: Policy = "greedy"
) -> tuple[int, ...] | None:
    """:func:`best_gpu_set` with the free GPUs as an integer bitmask (the fastest entry point)."""
    cache = template._cache.setdefault(("best", policy), {})
    key = (free_bits, k)
    hit = cache.get(key, _MISS)
    if hit is not _MISS:
        return hit
    if k < 0:
        raise ConfigError(f"k must be >= 0, got {k}")
    if policy not in ("greedy", "partition"):
        raise ConfigError(f"unknown allocation policy {policy!r}; use 'greedy' or 'partition'")
    free_bits &= (1 << template.n_gpus) - 1
    if k == 0:
        result: tuple[int, ...] | None = ()
    elif bin(free_bits).count("1") < k:
        result = None
    elif policy == "greedy":
        result = _greedy(template, free_bits, k)
    else:
        result = _partition(template, free_bits, k)
    cache[key] = result
    return result


def _greedy(template: NodeTemplate, free_bits: int, k: int) -> tuple[int, ...] | None:
    c = _candidates(template, k)
    ok = (c.masks & ~np.int64(free_bits)) == 0
    i = int(np.argmax(ok))
    return c.tuples[i] if ok[i] else None


def _partition(template: NodeTemplate, free_bits: int, k: int) -> tuple[int, ...] | None:
    """go-gpuallocator's best-effort choice by enumerating partitions in its order.

    The free GPUs are padded with ``pad = (-n) % k`` empty slots (``-1``) and split into ``k``-sets,
    each led by the lowest remaining device and holding no padding or all of it; the first partition
    with the highest total score wins, and its best fully-real set (first on ties) is returned.
    Worst case on 8 GPUs (all free, k=7) is about 15 ms on this project's CI machine; answers
    are memoised by :func:`best_gpu_set_bits`.
    """
    free = [i for i in range(template.n_gpus) if free_bits >> i & 1]
    if len(free) < k:
        return None
    if k == 1:
        return (free[0],)
    m = pair_score_matrix(template)
    pad = (-len(free)) % k

    def sc(s: tuple[int, ...]) -> int:
        return sum(int(m[a, b]) for a, b in combinations([x for x in s if x >= 0], 2))

    best_total, best_part = -1, []

    def walk(rest: list[int], acc: list[tuple[int, ...]], total: int) -> None:
        nonlocal best_total, best_part
        if len(rest) == k:
            t = total + sc(tuple(rest))
            if t > best_total:
                best_total, best_part = t, [*acc, tuple(rest)]
            return
        head, tail = rest[0], rest[1:]
        for idx in combinations(range(len(tail)), k - 1):
            s = (head, *[tail[i] for i in idx])
            if sum(1 for x in s if x < 0) not in (0, pad):
                continue
            remaining = [x for i, x in enumerate(tail) if i not in idx]
            walk(remaining, [*acc, s], total + sc(s))

    walk(free + [-1] * pad, [], 0)
    real = [s for s in best_part if -1 not in s]
    best = real[0]
    for s in real[1:]:
        if sc(s) > sc(best):
            best = s
    return tuple(sorted(best))


def clear_cache(template: NodeTemplate) -> None:
    """Drop the memoised allocation answers of ``template`` (pair scores stay)."""
    for key in [k for k in template._cache if isinstance(k, tuple)]:
        del template._cache[key]
