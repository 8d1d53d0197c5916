"""Cross-entropy search of the deployed placement network's logit head on whole-episode metrics.

Why this exists. The released fgd-mode model (``models/placement/``) is a behaviour clone of a
linear teacher found by a cross-entropy search (:mod:`fleetmind.rl.teacher`). That recipe loses twice: the
teacher is linear, and the clone copies it imperfectly (accuracy 0.972). This module searches the
deployed network itself: the shared row MLP ``(F+G) -> 64 -> 64`` (tanh) of the released
:class:`fleetmind.rl.policy.CandidateScorerNet` stays frozen, and only its final logit layer (64 weights and a
bias) is searched, with the same CEM loop (:func:`fleetmind.rl.teacher.cem_loop`) and the same episode runner
(:func:`fleetmind.rl.teacher.episode_metric`) as the linear teachers. The result is a policy in the deployed
architecture, so no cloning step follows: :func:`export_head` writes it back into a copy of the
model folder.

Scorer. For an observation ``obs (K*F + G,)``, every row ``x_k = [row_k, globals]`` goes through
the frozen MLP to ``h_k (64,)``; the logit is ``w . h_k + b`` and the scorer picks the valid row
with the highest logit (ties to the lowest index), exactly as :class:`fleetmind.rl.export.PlacementActor`
does. The MLP runs in torch (float32, no grad, the same modules as the actor), so the released head
reproduces the released actor's choices bit for bit.

Search vector. ``v = [w (64,), b]`` (65 numbers). The choice is an argmax, so neither ``b`` nor the
scale of ``w`` changes any decision: ``b`` is the CEM's fixed coordinate (spread 0, as the FGD flag
is for the linear teachers), and every sampled ``w`` is rescaled to the released head's norm before
it is scored or saved, so stored vectors keep the released logit scale (which matters for the
stochastic policy in ``ppo.zip``, not for greedy choices).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fleetmind.data.errors import ModelLoadError
from fleetmind.rl.teacher import (
    GenerationCallback,
    LinearScorer,
    TeacherScorer,
    cem_loop,
    episode_metric,
)

HEAD_FORMAT = "fleetmind-head-scorer/1"
"""Format tag of a head scorer JSON (:meth:`HeadScorer.to_dict`)."""


def _load_actor(model_dir: str | Path) -> Any:
    from fleetmind.rl.export import load_torch

    return load_torch(Path(model_dir) / "policy.pt")


class HeadScorer(TeacherScorer):
    """The released network's frozen row MLP with a searchable logit head.

    Args:
        actor: a :class:`fleetmind.rl.export.PlacementActor` (its row MLP is used, never changed).
        head: ``(H+1,)`` ``[w, b]``; ``None``: the actor's own head.
        model_dir: where the actor came from (stored in the JSON so the scorer can be rebuilt).

    Calling it as ``scorer(obs, mask)`` with ``obs (K*F + G,)`` and ``mask (K,)`` bool returns the
    chosen action (an ``int`` in ``[0, K)``, always a masked-in one).
    """

    def __init__(
        self, actor: Any, head: np.ndarray | None = None, model_dir: str | Path = ""
    ) -> None:
        self.actor = actor
        net = actor.scorer
        self.n_candidates = int(net.n_candidates)
        self.n_cand_features = int(net.n_cand_features)
        self.hidden = int(net.hidden)
        self.model_dir = str(model_dir)
        if head is None:
            head = released_head(actor)
        v = np.asarray(head, dtype=np.float64).reshape(-1)
        if v.shape != (self.hidden + 1,):
            raise ValueError(f"head must have shape ({self.hidden + 1},), got {v.shape}")
        self.head = v
        self._w = torch.as_tensor(v[: self.hidden], dtype=torch.float32).reshape(1, -1)
        self._b = torch.as_tensor(v[self.hidden :], dtype=torch.float32)

    @classmethod
    def from_model_dir(cls, model_dir: str | Path, head: np.ndarray | None = None) -> HeadScorer:
        """The scorer of ``model_dir/policy.pt`` (with its own head unless ``head`` is given)."""
        return cls(_load_actor(model_dir), head, model_dir)

    def with_head(self, head: np.ndarray) -> HeadScorer:
        """The same frozen MLP with another head (shares the actor)."""
        return HeadScorer(self.actor, head, self.model_dir)

    @torch.no_grad()
    def scores(self, obs: np.ndarray) -> np.ndarray:
        """``(K,)`` logits (before masking), float64."""
        o = torch.as_tensor(np.asarray(obs, dtype=np.float32).reshape(1, -1))
        _, _, h = self.actor.scorer._rows(o)
        logits = torch.nn.functional.linear(h, self._w, self._b).squeeze(-1)
        return logits[0].numpy().astype(np.float64)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": HEAD_FORMAT,
            "model_dir": self.model_dir,
            "n_candidates": self.n_candidates,
            "hidden": self.hidden,
            "head": [float(x) for x in self.head],
        }

    @classmethod
    def load(cls, path: str | Path, model_dir: str | Path | None = None) -> HeadScorer:
        """Read a head scorer JSON; ``model_dir`` overrides the folder stored in it.

        Raises:
            ModelLoadError: the file is missing, not a head scorer, or does not fit the model.
        """
        p = Path(path)
        try:
            d = json.loads(p.read_text())
            if d.get("format") != HEAD_FORMAT:
                raise ValueError(f"format tag {d.get('format')!r}")
            return cls.from_model_dir(model_dir or d["model_dir"], np.asarray(d["head"]))
        except FileNotFoundError as e:
            raise ModelLoadError(f"head scorer file {p} does not exist") from e
        except (ValueError, KeyError, TypeError) as e:
            raise ModelLoadError(f"{p} is not a fleetmind head scorer: {e}") from e


def released_head(actor: Any) -> np.ndarray:
    """``(H+1,)`` ``[w, b]`` of an actor's logit head (float64)."""
    lin = actor.scorer.logit_head
    w = lin.weight.detach().numpy().reshape(-1).astype(np.float64)
    return np.concatenate([w, lin.bias.detach().numpy().reshape(-1).astype(np.float64)])


def load_scorer(path: str | Path) -> TeacherScorer:
    """A linear teacher or a head scorer JSON, by its format tag."""
    p = Path(path)
    try:
        tag = json.loads(p.read_text()).get("format")
    except (OSError, ValueError, AttributeError):
        tag = None
    return HeadScorer.load(p) if tag == HEAD_FORMAT else LinearScorer.load(p)


def mean_gap_objective(traces: Sequence[str]) -> Callable[[np.ndarray, np.ndarray], float]:
    """Objective ``(metrics (E,), fgd_metrics (E,)) -> score``: the mean over trace families of
    (the family's mean metric / FGD's mean metric on the same episodes - 1); lower is better, FGD
    scores 0. It is the issue's target statistic (mean over traces of the relative gap) computed on
    the search episodes.

    Args:
        traces: ``(E,)`` the trace of each search episode, in the order of the episodes.
    """
    names = np.asarray(list(traces))
    groups = [names == t for t in dict.fromkeys(names.tolist())]

    def objective(m: np.ndarray, fgd_m: np.ndarray) -> float:
        if m.size != names.size or fgd_m.size != names.size:
            raise ValueError(f"mean_gap_objective: expected {names.size} episode metrics")
        gaps = [m[g].mean() / fgd_m[g].mean() - 1.0 for g in groups]
        if not np.all(np.isfinite(gaps)):
            raise ValueError("mean_gap_objective: FGD's metric is 0 on a whole trace family")
        return float(np.mean(gaps))

    return objective


@dataclass
class HeadSearchResult:
    """Outcome of :func:`head_cem_search` (scores in the objective's units, lower is better).

    Attributes:
        best: the best head scorer scored (the released head if nothing beat it).
        best_score, fgd_score, init_score: the best's, FGD's and the released head's scores.
        final_mean: the search distribution's mean after the last refit, as a scorer (rescaled;
            never scored on the search episodes).
        history: per generation ``{"generation", "best", "elite_mean", "best_so_far", "sd_mean"}``.
        episodes: the ``(trace, workload seed)`` pairs.
        init_sd: the initial standard deviation used (absolute, per weight).
        fgd_metrics, init_metrics: ``(E,)`` per-episode metrics of FGD and the released head.
    """

    best: HeadScorer
    best_score: float
    fgd_score: float
    init_score: float
    final_mean: HeadScorer
    history: list[dict[str, float]] = field(default_factory=list)
    episodes: list[tuple[str, int]] = field(default_factory=list)
    init_sd: float = 0.0
    fgd_metrics: list[float] = field(default_factory=list)
    init_metrics: list[float] = field(default_factory=list)


def head_cem_search(
    env: Any,
    start: HeadScorer,
    episodes: Sequence[tuple[str, int]],
    *,
    generations: int = 8,
    population: int = 12,
    n_elite: int = 4,
    init_sd_rel: float = 0.2,
    sd_floor_rel: float = 0.02,
    seed: int = 0,
    objective: Callable[[np.ndarray, np.ndarray], float] | None = None,
    progress: Callable[[int], None] | None = None,
    on_generation: GenerationCallback | None = None,
    on_start: Callable[[list[float], list[float]], None] | None = None,
) -> HeadSearchResult:
    """CEM over the logit head of ``start`` (see the module docstring).

    Args:
        env: a placement env (unwrapped, ``n_candidates`` equal to the actor's ``K``).
        start: the head the search starts at (scored too: the best is never worse on the
            episodes).
        episodes: ``(trace, workload seed)`` pairs every vector is scored on.
        generations, population, n_elite: CEM sizes.
        init_sd_rel, sd_floor_rel: initial spread and the noise added after every refit, as
            multiples of the start head's root-mean-square weight ``rms(w)``.
        seed: sampling seed.
        objective: ``(metrics (E,), fgd_metrics (E,)) -> score``; ``None``: the mean metric.
        progress: called with 1 after each scored vector.
        on_generation: ``(best, best_score, history, mu)`` after each generation (``mu`` already
            rescaled to the start's norm).
        on_start: ``(fgd_metrics, start_metrics)`` (per episode) once both are scored, before the
            first generation, so that a search stopped later still has them.
    """
    if not episodes:
        raise ValueError("head_cem_search needs at least one (trace, workload seed) episode")
    if not 1 <= n_elite <= population:
        raise ValueError(f"n_elite must be in [1, population], got {n_elite}")
    if env.n_candidates != start.n_candidates:
        raise ValueError(f"env has K={env.n_candidates}, the network K={start.n_candidates}")
    hdim = start.hidden
    norm0 = float(np.linalg.norm(start.head[:hdim]))
    if norm0 <= 0:
        raise ValueError("the start head's weights are all 0")
    rms = norm0 / np.sqrt(hdim)

    def rescale(v: np.ndarray) -> np.ndarray:
        v = np.array(v, dtype=np.float64)
        n = np.linalg.norm(v[:hdim])
        if n > 0:
            v[:hdim] *= norm0 / n
        return v

    def make(v: np.ndarray) -> HeadScorer:
        return start.with_head(rescale(v))

    def metrics(s: TeacherScorer | Callable) -> np.ndarray:
        return np.array([episode_metric(env, s, t, w) for t, w in episodes])

    fgd_m = metrics(lambda obs, mask: 0)
    objective = objective or (lambda m, _f: float(np.mean(m)))
    fgd_score = objective(fgd_m, fgd_m)
    init_m = metrics(start)
    init_score = objective(init_m, fgd_m)
    if progress is not None:
        progress(2)
    if on_start is not None:
        on_start(fgd_m.tolist(), init_m.tolist())

    def score(s: Any) -> float:
        return objective(metrics(s), fgd_m)

    def on_gen(best: Any, best_score: float, history: list, mu: np.ndarray) -> None:
        if on_generation is not None:
            on_generation(best, best_score, history, rescale(mu))

    sd = np.full(hdim + 1, init_sd_rel * rms)
    sd[hdim] = 0.0
    best, best_score, history, mu = cem_loop(
        start.head.copy(),
        sd,
        hdim,
        make,
        score,
        start,
        init_score,
        generations=generations,
        population=population,
        n_elite=n_elite,
        sd_floor=sd_floor_rel * rms,
        rng=np.random.default_rng(seed),
        progress=progress,
        on_generation=on_gen,
    )
    return HeadSearchResult(
        best=best,  # type: ignore[arg-type]
        best_score=float(best_score),
        fgd_score=fgd_score,
        init_score=init_score,
        final_mean=make(mu),
        history=history,
        episodes=[(t, int(w)) for t, w in episodes],
        init_sd=float(init_sd_rel * rms),
        fgd_metrics=fgd_m.tolist(),
        init_metrics=init_m.tolist(),
    )


def export_head(
    head: np.ndarray,
    model_dir: str | Path,
    out_dir: str | Path,
    note: dict[str, Any] | None = None,
) -> dict[str, Path]:
    """Write a copy of the model in ``model_dir`` with its logit head replaced by ``head``.

    Writes ``policy.pt`` and ``policy.onnx`` (the actor), ``ppo.zip`` (the SB3 model with the same
    head, when ``model_dir`` has one), ``metadata.json`` (copied; ``version`` gets a ``+head``
    suffix and ``head_search`` holds ``note``) and ``head.json`` (the head scorer, pointing at
    ``out_dir``). The row MLP and the critic are unchanged.

    Returns:
        ``{"torch", "onnx", "metadata", "head"[, "ppo"]}`` paths.
    """
    from fleetmind.rl.export import load_sb3_model, save_onnx, save_torch

    src, out = Path(model_dir), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    actor = _load_actor(src)
    v = np.asarray(head, dtype=np.float64).reshape(-1)
    hdim = actor.scorer.hidden
    if v.shape != (hdim + 1,):
        raise ValueError(f"head must have shape ({hdim + 1},), got {v.shape}")
    with torch.no_grad():
        actor.scorer.logit_head.weight.copy_(torch.as_tensor(v[:hdim].reshape(1, -1)))
        actor.scorer.logit_head.bias.copy_(torch.as_tensor(v[hdim:]))
    paths = {
        "torch": save_torch(actor, out / "policy.pt"),
        "onnx": save_onnx(actor, out / "policy.onnx"),
    }
    if (src / "ppo.zip").is_file():
        model = load_sb3_model(src / "ppo.zip")
        lin = model.policy.mlp_extractor.logit_head
        with torch.no_grad():
            lin.weight.copy_(actor.scorer.logit_head.weight)
            lin.bias.copy_(actor.scorer.logit_head.bias)
        model.save(out / "ppo.zip")
        paths["ppo"] = out / "ppo.zip"
    meta: dict[str, Any] = {}
    if (src / "metadata.json").is_file():
        meta = json.loads((src / "metadata.json").read_text())
    meta["version"] = f"{meta.get('version', src.name)}+head"
    meta["head_search"] = {"source_model": str(src), **(note or {})}
    (out / "metadata.json").write_text(json.dumps(meta, indent=1) + "\n")
    paths["metadata"] = out / "metadata.json"
    paths["head"] = HeadScorer(actor, v, out).save(out / "head.json")
    for extra in ("model_card.md",):
        if (src / extra).is_file() and not (out / extra).exists():
            shutil.copy(src / extra, out / f"source_{extra}")
    return paths
