"""Permutation-equivariant candidate scorer: the actor-critic network of the placement agent.

The placement envs (``fleetmind/GpuPlacement-v0``, ``fleetmind/MultiClusterPlacement-v0``) propose ``K``
candidate placements per step and flatten the observation as ``K`` rows of ``F`` candidate features
(row-major) followed by ``G`` global features. Which slot holds which candidate carries no meaning, so the
actor scores every row with one shared MLP (a DeepSets-style equivariant layer: permuting the rows permutes
the logits) and the critic reads a masked mean of the row embeddings plus the globals (invariant).

Shapes:
    - **input**: observation ``(B, K*F + G)``; row feature 0 is the ``valid`` flag (1 for a real
      candidate, 0 for padding) used for the critic's masked pooling.
    - **output**: logits ``(B, K)`` (actor), value ``(B,)`` (critic).

With the defaults (``hidden=64``, ``K=16``, ``F=18``, ``G=10``) the network has 15,106 parameters.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from torch import nn

MASKED_LOGIT = -1e8
"""Logit given to masked actions (the value sb3-contrib's ``MaskableCategorical`` uses)."""


class CandidateScorerNet(nn.Module):
    """Shared row MLP (actor) and pooled critic over ``K`` candidate rows.

    Args:
        n_candidates (int): ``K``, candidate rows per observation.
        n_cand_features (int): ``F``, features per candidate row.
        n_global_features (int): ``G``, global features after the rows.
        hidden (int, optional): width of every hidden layer. (default: ``64``)
        activation (type[nn.Module], optional): hidden activation. (default: :class:`nn.Tanh`)

    Shapes:
        - **forward input**: ``(B, K*F + G)``
        - **forward output**: ``(logits (B, K), critic latent (B, hidden))``
    """

    def __init__(
        self,
        n_candidates: int,
        n_cand_features: int,
        n_global_features: int,
        hidden: int = 64,
        activation: type[nn.Module] = nn.Tanh,
    ) -> None:
        super().__init__()
        self.n_candidates = n_candidates
        self.n_cand_features = n_cand_features
        self.n_global_features = n_global_features
        self.hidden = hidden
        d_in = n_cand_features + n_global_features
        self.row_net = nn.Sequential(
            nn.Linear(d_in, hidden), activation(), nn.Linear(hidden, hidden), activation()
        )
        self.logit_head = nn.Linear(hidden, 1)
        self.critic_net = nn.Sequential(
            nn.Linear(hidden + n_global_features, hidden),
            activation(),
            nn.Linear(hidden, hidden),
            activation(),
        )
        # SB3's MlpExtractor interface
        self.latent_dim_pi = n_candidates
        self.latent_dim_vf = hidden

    def _rows(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        k, f = self.n_candidates, self.n_cand_features
        rows = obs[:, : k * f].reshape(-1, k, f)
        glob = obs[:, k * f :]
        x = torch.cat([rows, glob.unsqueeze(1).expand(-1, k, -1)], dim=-1)
        return rows, glob, self.row_net(x)

    def forward_actor(self, obs: torch.Tensor) -> torch.Tensor:
        """Unmasked logits ``(B, K)``."""
        _, _, h = self._rows(obs)
        return self.logit_head(h).squeeze(-1)

    def forward_critic(self, obs: torch.Tensor) -> torch.Tensor:
        """Critic latent ``(B, hidden)`` from the masked mean of row embeddings and the globals."""
        rows, glob, h = self._rows(obs)
        return self._critic(rows, glob, h)

    def _critic(self, rows: torch.Tensor, glob: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        valid = rows[:, :, :1]
        pooled = (h * valid).sum(1) / valid.sum(1).clamp(min=1.0)
        return self.critic_net(torch.cat([pooled, glob], dim=-1))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rows, glob, h = self._rows(obs)
        return self.logit_head(h).squeeze(-1), self._critic(rows, glob, h)


class CandidateScorerPolicy(MaskableActorCriticPolicy):
    """sb3-contrib ``MaskableActorCriticPolicy`` whose actor is a :class:`CandidateScorerNet`.

    The scorer's logits are the action logits (``action_net`` is the identity), so the policy is
    equivariant to the order of candidate rows. The observation must be the flat
    ``K*F + G`` vector of the placement envs; ``n_candidates``, ``n_cand_features`` and
    ``n_global_features`` come from the env (``policy_kwargs``).

    :param n_candidates: ``K``
    :param n_cand_features: ``F``
    :param n_global_features: ``G``
    :param hidden: hidden width of the row MLP and critic (default 64)
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        lr_schedule: Any,
        *args: Any,
        n_candidates: int = 16,
        n_cand_features: int = 18,
        n_global_features: int = 10,
        hidden: int = 64,
        **kwargs: Any,
    ) -> None:
        self.n_candidates = n_candidates
        self.n_cand_features = n_cand_features
        self.n_global_features = n_global_features
        self.hidden = hidden
        expected = n_candidates * n_cand_features + n_global_features
        if observation_space.shape != (expected,):
            raise ValueError(
                f"observation shape {observation_space.shape} does not match K*F+G = {expected}"
            )
        kwargs.setdefault("activation_fn", nn.Tanh)
        super().__init__(observation_space, action_space, lr_schedule, *args, **kwargs)

    def _build_mlp_extractor(self) -> None:
        self.mlp_extractor = CandidateScorerNet(
            self.n_candidates,
            self.n_cand_features,
            self.n_global_features,
            hidden=self.hidden,
            activation=self.activation_fn,
        )

    def _build(self, lr_schedule: Any) -> None:
        super()._build(lr_schedule)
        self.action_net = nn.Identity()
        # small initial logits (uniform policy over valid candidates), as SB3 does for action_net
        nn.init.orthogonal_(self.mlp_extractor.logit_head.weight, gain=0.01)
        nn.init.zeros_(self.mlp_extractor.logit_head.bias)
        self.optimizer = self.optimizer_class(
            self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs
        )

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(
            n_candidates=self.n_candidates,
            n_cand_features=self.n_cand_features,
            n_global_features=self.n_global_features,
            hidden=self.hidden,
        )
        return data


def count_parameters(module: nn.Module) -> int:
    """Number of trainable parameters of ``module``."""
    return int(sum(p.numel() for p in module.parameters() if p.requires_grad))


def masked_argmax(logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Argmax of ``logits`` over ``mask``-ed entries (``(B, K)`` or ``(K,)``); ties -> lowest index."""
    return np.argmax(np.where(mask, logits, MASKED_LOGIT), axis=-1)
