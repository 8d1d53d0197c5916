r"""The GAT root-cause ranker: edge-type aware GATv2 layers over per-node alert features.

Architecture (one incident graph, or a PyG batch of several):

1. ``h = MLP(x)``: alert features (:mod:`fleetmind.rca.features`) to ``hidden`` channels.
2. ``layers`` residual blocks ``h = h + Dropout(ELU(GATv2Conv(LayerNorm(h), edge_attr=E[r])))``, where
   the message graph holds every dependency edge in **both directions as separate relation types**
   (``r = kind`` for dependent -> dependency, ``r = kind + 6`` for dependency -> dependent) plus a
   self-loop relation, and ``E`` is a learned relation embedding fed to GATv2's attention as edge
   features (Brody et al., "How Attentive are Graph Attention Networks?", ICLR 2022,
   https://arxiv.org/abs/2105.14491).
3. Heads: ``score = MLP(h)`` (one logit per node; softmax over each graph's nodes is the root-cause
   distribution, trained with listwise cross-entropy), and ``fault = MLP([h_v, mean_pool(h)])`` (fault
   type logits of candidate node ``v``, trained at the true root).
"""

from __future__ import annotations

import linecache
import sys
import tempfile
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torch_geometric.nn import GATv2Conv
from torch_geometric.utils import scatter

from fleetmind.data.graph import EDGE_KINDS
from fleetmind.rca.features.layout import FEATURE_VERSION, NUM_FEATURES
from fleetmind.rca.features.neighbours import NUM_EDGE_FEATURES, NUM_NODE_EXTRA

NUM_RELATIONS = 2 * len(EDGE_KINDS) + 1
"""Relation types of the message graph: forward kinds, reverse kinds, self loop."""

SELF_LOOP = 2 * len(EDGE_KINDS)


_RENDERING = threading.Lock()
"""Held while a :class:`GATRanker` builds its convolutions: torch_geometric checks
``sys.modules`` and renders without a lock, so threads building the first model at once each
rendered (and left) their own files."""


def _drop_rendered_sources() -> list[Path]:
    """Delete the source files torch_geometric rendered into ``$TMPDIR`` for this process.

    The first ``GATv2Conv`` of a process makes torch_geometric render its ``propagate`` and
    ``edge_updater`` from Jinja templates into ``NamedTemporaryFile(delete=False)`` files in
    :func:`tempfile.gettempdir` and import them (``torch_geometric/template.py``,
    ``module_from_template``, 2.5 to 2.8 at least); nothing deletes them, so every CLI run, service
    worker and test left two ``torch_geometric.nn.conv.*.py`` files behind. The modules are imported
    by then (their code is in memory); their text is kept in :mod:`linecache` (an entry without an
    mtime, which :func:`linecache.checkcache` never drops), so tracebacks and
    :func:`inspect.getsource` still show it. Only files of modules this process imported are
    touched: ``sys.modules`` is per process, so another process's files stay.

    Returns:
        The files deleted (empty when there were none, e.g. on a second call).
    """
    tmp = Path(tempfile.gettempdir()).resolve()
    dropped: list[Path] = []
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if not name.startswith("torch_geometric.") or not file:
            continue
        path = Path(file)
        if path.parent.resolve() != tmp or not path.name.startswith(f"{name}_"):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            continue  # gone already (a tmp cleaner) or unreadable: nothing to keep or delete
        lines = text.splitlines(keepends=True)
        linecache.cache[file] = (len(text), None, lines, file)
        path.unlink(missing_ok=True)
        dropped.append(path)
    return dropped


@dataclass
class GATConfig:
    """Hyper-parameters of :class:`GATRanker` (stored next to its weights).

    Attributes:
        in_dim: width F of the input features (:data:`fleetmind.rca.features.layout.NUM_FEATURES`).
        hidden: hidden channels (divisible by ``heads``).
        heads: attention heads H per layer (concatenated to ``hidden``).
        layers: number of GATv2 layers (>= 2); the receptive field in hops.
        edge_dim: width of the relation embedding fed to attention.
        dropout: dropout on block outputs and attention coefficients.
        fault_types: fault type names, index = class id of the fault head.
        feature_version: :data:`fleetmind.rca.features.layout.FEATURE_VERSION` the model was trained with.
        crop_hops: candidate subgraph radius used in training and inference
            (:func:`fleetmind.rca.features.dense.candidate_mask`; ``None``: the whole graph).
        neighbours: the model also reads :mod:`fleetmind.rca.features.neighbours`: its input is
            ``F + NUM_NODE_EXTRA`` wide (propagation verdict, XID and link labels) and each message
            edge adds a projection of its caller/callee comparison row to the relation embedding.
            ``False`` (the default, and what a stored config without the key means) is the model
            as it was before 2026-12-02, with the same parameters and the same outputs.
    """

    in_dim: int = NUM_FEATURES
    hidden: int = 64
    heads: int = 4
    layers: int = 3
    edge_dim: int = 16
    dropout: float = 0.1
    fault_types: list[str] = field(default_factory=list)
    feature_version: int = FEATURE_VERSION
    crop_hops: int | None = 1
    neighbours: bool = False

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if not self.neighbours:  # configs written before the switch existed stay byte-identical
            d.pop("neighbours")
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GATConfig:
        known = set(cls.__dataclass_fields__)
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown GATConfig keys: {sorted(unknown)}")
        return cls(**d)


def elu(x: Tensor) -> Tensor:
    """ELU (alpha 1) whose result for an element does not depend on where it sits in the tensor.

    ``F.elu`` on CPU runs the vectorised ``expm1`` over whole vector blocks and a scalar ``expm1``
    over the last, partial block, and the two can differ in the last bit; so a node's value could
    change with its position in a batch (seen for the 2026-12-03 release: 1 row of 53 in a batch of
    six incidents). ``torch.expm1`` maps every element, the tail too, through the vectorised
    function; the clamp keeps positive inputs out of it (no overflow, no NaN gradient). Equal to
    ``F.elu``'s vectorised path bit for bit. Shapes: any -> the same.
    """
    return torch.where(x > 0, x, torch.expm1(x.clamp(max=0)))


def input_width(neighbours: bool) -> int:
    """Width of the node input: ``F``, plus ``NUM_NODE_EXTRA`` for a ``neighbours`` model."""
    return NUM_FEATURES + (NUM_NODE_EXTRA if neighbours else 0)


def message_graph(edge_index: Tensor, edge_type: Tensor, num_nodes: int) -> tuple[Tensor, Tensor]:
    """Both directions of every edge plus self loops, with their relation ids.

    Args:
        edge_index: ``(2, |E|)`` dependency edges ``dependent -> dependency``.
        edge_type: ``(|E|,)`` edge kind ids.
        num_nodes: ``|V|``.

    Returns:
        ``(edge_index', relation)`` of shapes ``(2, 2|E| + |V|)`` and ``(2|E| + |V|,)``. Messages flow
        ``edge_index'[0] -> edge_index'[1]``; the first ``|E|`` columns are the forward edges, the next
        ``|E|`` the reversed ones (dependency -> dependent, the way faults propagate), then self loops.
    """
    loops = torch.arange(num_nodes, device=edge_index.device)
    ei = torch.cat([edge_index, edge_index.flip(0), torch.stack([loops, loops])], dim=1)
    rel = torch.cat(
        [
            edge_type,
            edge_type + len(EDGE_KINDS),
            torch.full((num_nodes,), SELF_LOOP, dtype=edge_type.dtype, device=edge_type.device),
        ]
    )
    return ei, rel


class GATRanker(nn.Module):
    r"""Edge-type aware GATv2 network that scores every node as a root cause.

    Args:
        config (GATConfig): hyper-parameters (see :class:`GATConfig`).

    Shapes:
        - **input:** node features :math:`(|V|, F)`, edge indices :math:`(2, |E|)`,
          edge types :math:`(|E|,)`, optional batch vector :math:`(|V|,)`
        - **output:** root-cause logits :math:`(|V|,)`, node embeddings :math:`(|V|, \text{hidden})`
          and, with ``return_attention=True``, a list of ``layers`` attention tensors
          :math:`(2|E| + |V|, H)` over :func:`message_graph`'s edges
    """

    def __init__(self, config: GATConfig) -> None:
        super().__init__()
        if config.layers < 2:
            raise ValueError("GATConfig.layers must be >= 2")
        if config.heads < 1:
            raise ValueError("GATConfig.heads must be >= 1")
        if config.hidden % config.heads:
            raise ValueError("GATConfig.hidden must be divisible by heads")
        self.config = config
        c = config
        self.inp = nn.Sequential(
            nn.Linear(c.in_dim, c.hidden), nn.ELU(), nn.Linear(c.hidden, c.hidden)
        )
        self.rel_emb = nn.Embedding(NUM_RELATIONS, c.edge_dim)
        # only a neighbours model has this module (an old state dict has no such keys)
        self.edge_in: nn.Linear | None = (
            nn.Linear(NUM_EDGE_FEATURES, c.edge_dim) if c.neighbours else None
        )
        self.norms = nn.ModuleList(nn.LayerNorm(c.hidden) for _ in range(c.layers))
        with _RENDERING:  # torch_geometric renders without a lock: one thread at a time
            self.convs = self._convs(c)
            _drop_rendered_sources()
        self.drop = nn.Dropout(c.dropout)
        self.score_head = nn.Sequential(
            nn.LayerNorm(c.hidden), nn.Linear(c.hidden, c.hidden), nn.ELU(), nn.Linear(c.hidden, 1)
        )
        n_fault = max(len(c.fault_types), 1)
        self.fault_head = nn.Sequential(
            nn.Linear(2 * c.hidden, c.hidden), nn.ELU(), nn.Linear(c.hidden, n_fault)
        )

    @staticmethod
    def _convs(c: GATConfig) -> nn.ModuleList:
        """The ``layers`` GATv2 convolutions of config ``c``."""
        return nn.ModuleList(
            GATv2Conv(
                c.hidden,
                c.hidden // c.heads,
                heads=c.heads,
                edge_dim=c.edge_dim,
                dropout=c.dropout,
                add_self_loops=False,
            )
            for _ in range(c.layers)
        )

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        edge_type: Tensor,
        batch: Tensor | None = None,
        return_attention: bool = False,
        edge_attr: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, list[Tensor]]:
        """Score all nodes.

        Args:
            x: ``(|V|, F)`` node features.
            edge_index: ``(2, |E|)`` dependency edges (``dependent -> dependency``).
            edge_type: ``(|E|,)`` edge kind ids.
            batch: ``(|V|,)`` graph id of each node (``None``: one graph).
            return_attention: also return the attention weights of every layer.
            edge_attr: ``(|E|, NUM_EDGE_FEATURES)`` caller/callee comparisons of the dependency
                edges (:func:`fleetmind.rca.features.neighbours.edge_features`); required by a
                ``neighbours`` model, ignored by others.

        Returns:
            ``(logits (|V|,), h (|V|, hidden), attention)``; ``attention`` is empty unless requested.
        """
        n = x.size(0)
        ei, rel = message_graph(edge_index, edge_type, n)
        ea = self.rel_emb(rel)
        if self.edge_in is not None:
            if edge_attr is None:
                raise ValueError("a neighbours GATRanker needs edge_attr")
            loops = edge_attr.new_zeros((n, edge_attr.size(1)))
            ea = ea + self.edge_in(torch.cat([edge_attr, edge_attr, loops]))
        h = self.inp(x)
        att: list[Tensor] = []
        for norm, conv in zip(self.norms, self.convs, strict=True):
            if return_attention:
                out, (_, alpha) = conv(norm(h), ei, edge_attr=ea, return_attention_weights=True)
                att.append(alpha)
            else:
                out = conv(norm(h), ei, edge_attr=ea)
            h = h + self.drop(elu(out))
        logits = self.score_head(h).squeeze(-1)
        return logits, h, att

    @torch.no_grad()
    def infer(
        self,
        x: Tensor,
        edge_index: Tensor,
        edge_type: Tensor,
        logits: bool = True,
        edge_attr: Tensor | None = None,
        h0: Tensor | None = None,
    ) -> tuple[Tensor | None, Tensor, list[Tensor]]:
        """:meth:`forward` with ``return_attention=True`` in eval mode, with less per-call overhead.

        The same arithmetic in the same order as torch_geometric's ``GATv2Conv``, so the same bits
        (``tests/test_serving_rca_fastpath.py`` checks logits, embeddings and attention for
        equality), written as a dozen tensor operations per layer instead of message passing's
        generic machinery. Two
        shortcuts that do not change a bit: each relation's edge embedding goes through the layer's
        edge projection once (a 13-row table, gathered per edge, instead of projecting every edge),
        and the self loops are computed densely (no gathers). The linear layers, layer norms and
        ELUs are called as the functions their modules call (no module dispatch). Dropout is off
        (evaluation): in training mode this is :meth:`forward`.

        ``logits=False`` skips the score head and returns ``None`` for the logits (a caller that
        scores each graph of a batch on its own, see ``rca.gat_analyzer``). ``h0``: the input
        layer's output ``(|V|, hidden)`` computed by the caller (``rca.gat_analyzer`` runs it per
        graph of a batch: its product over a batch's rows can round differently from one graph's). A ``neighbours`` model
        (per-edge inputs ``edge_attr``) adds each edge's projected input to the relation table's
        row; that sum is taken in another order than :meth:`forward`'s, so its outputs agree with
        :meth:`forward` to float rounding (``tests/test_gat_neighbours.py``), not bit for bit.

        Shapes:
            ``x (|V|, F)``, ``edge_index (2, |E|)``, ``edge_type (|E|,)`` ->
            ``logits (|V|,)``, ``h (|V|, hidden)``, per layer attention ``(2|E| + |V|, H)``.
        """
        if self.training:  # dropout on
            out, h, att = self.forward(
                x, edge_index, edge_type, return_attention=True, edge_attr=edge_attr
            )
            return (out if logits else None), h, att
        n = x.size(0)
        n_e = edge_index.size(1)
        ein = loop_in = None
        if self.edge_in is not None:
            if edge_attr is None:
                raise ValueError("a neighbours GATRanker needs edge_attr")
            # forward's edge input is rel_emb[rel] + edge_in(edge_attr) (zeros for the self loops);
            # lin_edge has no bias, so per layer its projection is the relation table plus
            # lin_edge(edge_in(edge_attr)), the same sum in another order (float rounding only)
            ein = F.linear(edge_attr, self.edge_in.weight, self.edge_in.bias)
            loop_in = self.edge_in.bias.view(1, -1)
        # message_graph's edges without its self loops: forward, then reversed; each node's self
        # loop is handled densely (it is the last message every node receives, so adding it after
        # the scatter keeps torch_geometric's order of summation)
        src = torch.cat([edge_index[0], edge_index[1]])
        dst = torch.cat([edge_index[1], edge_index[0]])
        rel = torch.cat([edge_type, edge_type + len(EDGE_KINDS)])
        idx2 = idx3 = None
        h = _sequential(self.inp, x) if h0 is None else h0
        att: list[Tensor] = []
        for norm, conv, table in zip(self.norms, self.convs, self._relation_tables(), strict=True):
            heads, ch = conv.heads, conv.out_channels
            hn = F.layer_norm(h, norm.normalized_shape, norm.weight, norm.bias, norm.eps)
            x_l = F.linear(hn, conv.lin_l.weight, conv.lin_l.bias).view(-1, heads, ch)
            x_r = F.linear(hn, conv.lin_r.weight, conv.lin_r.bias).view(-1, heads, ch)
            x_j = x_l.index_select(0, src)
            z = x_r.index_select(0, dst)
            z += x_j  # x_i + x_j
            z += table.index_select(0, rel).view(-1, heads, ch)
            if ein is not None:
                e_l = F.linear(ein, conv.lin_edge.weight).view(-1, heads, ch)
                z[:n_e] += e_l
                z[n_e:] += e_l
            z = nn.functional.leaky_relu_(z, conv.negative_slope)
            a = z.mul_(conv.att).sum(dim=-1)
            z_loop = x_r + x_l
            z_loop += table[SELF_LOOP].view(1, heads, ch)
            if loop_in is not None:
                z_loop += F.linear(loop_in, conv.lin_edge.weight).view(1, heads, ch)
            z_loop = nn.functional.leaky_relu_(z_loop, conv.negative_slope)
            a_loop = z_loop.mul_(conv.att).sum(dim=-1)
            if idx2 is None:
                idx2 = dst.view(-1, 1).expand_as(a)
                idx3 = dst.view(-1, 1, 1).expand_as(x_j)
            # softmax over each node's incoming messages (torch_geometric.utils.softmax)
            amax = a_loop.clone().scatter_reduce_(0, idx2, a, reduce="amax", include_self=True)
            # in place from here where the operand is not needed again (the same kernels)
            a = a.sub_(amax.index_select(0, dst)).exp_()
            a_loop = a_loop.sub_(amax).exp_()
            asum = a.new_zeros((n, heads)).scatter_add_(0, idx2, a)
            asum += a_loop
            asum += 1e-16
            a = a.div_(asum.index_select(0, dst))
            a_loop = a_loop.div_(asum)
            out = x_j.new_zeros((n, heads, ch)).scatter_add_(0, idx3, x_j.mul_(a.unsqueeze(-1)))
            out += x_l.mul_(a_loop.unsqueeze(-1))
            out = out.view(-1, heads * ch).add_(conv.bias)
            att.append(torch.cat([a, a_loop]))
            h = h.add_(elu(out))
        if not logits:
            return None, h, att
        return self.score(h), h, att

    def embed(self, x: Tensor) -> Tensor:
        """The input layer, ``inp(x)``, without module dispatch. Shapes: ``(|V|, F) -> (|V|, hidden)``."""
        return _sequential(self.inp, x)

    def score(self, h: Tensor) -> Tensor:
        """The score head, ``score_head(h).squeeze(-1)``, without module dispatch.

        Shapes: ``h (|V|, hidden)`` -> ``(|V|,)``.
        """
        return _sequential(self.score_head, h).squeeze(-1)

    def _relation_tables(self) -> list[Tensor]:
        """Per layer, ``lin_edge(rel_emb.weight)``: the projected embedding of each relation.

        Cached until the weights change (tensor versions), e.g. by training or ``load_state_dict``.
        """
        key = (self.rel_emb.weight._version, *(c.lin_edge.weight._version for c in self.convs))
        cached = getattr(self, "_tables_cache", None)
        if cached is None or cached[0] != key or cached[1][0].device != self.rel_emb.weight.device:
            with torch.no_grad():
                tables = [c.lin_edge(self.rel_emb.weight).detach() for c in self.convs]
            cached = (key, tables)
            self._tables_cache = cached
        return cached[1]

    def fault_logits(self, h: Tensor, nodes: Tensor, batch: Tensor | None = None) -> Tensor:
        """Fault-type logits for candidate nodes.

        Args:
            h: ``(|V|, hidden)`` node embeddings from :meth:`forward`.
            nodes: ``(K,)`` node indices (one or several per graph).
            batch: ``(|V|,)`` graph ids (``None``: one graph).

        Returns:
            ``(K, C)`` logits over :attr:`GATConfig.fault_types`.
        """
        if batch is None:
            pooled = h.mean(0, keepdim=True).expand(nodes.numel(), -1)
        else:
            pooled = scatter(h, batch, dim=0, reduce="mean")[batch[nodes]]
        return _sequential(self.fault_head, torch.cat([h[nodes], pooled], dim=-1))


def _sequential(seq: nn.Sequential, x: Tensor) -> Tensor:
    """``seq(x)`` for a stack of ``Linear``, ``LayerNorm`` and ``ELU`` modules, calling the
    functions their ``forward`` calls (the same kernels, the same bits) without module dispatch."""
    for mod in seq:
        if isinstance(mod, nn.Linear):
            x = F.linear(x, mod.weight, mod.bias)
        elif isinstance(mod, nn.LayerNorm):
            x = F.layer_norm(x, mod.normalized_shape, mod.weight, mod.bias, mod.eps)
        elif isinstance(mod, nn.ELU):
            x = F.elu(x, mod.alpha)
        else:
            x = mod(x)
    return x


def graph_log_softmax(logits: Tensor, batch: Tensor | None) -> Tensor:
    """Log-softmax of node logits within each graph.

    Shapes: ``logits (|V|,)``, ``batch (|V|,)`` -> ``(|V|,)``.
    """
    if batch is None:
        return torch.log_softmax(logits, dim=0)
    m = scatter(logits.detach(), batch, dim=0, reduce="max")
    z = (logits - m[batch]).exp()
    lse = scatter(z, batch, dim=0, reduce="sum").log() + m
    return logits - lse[batch]


def listwise_loss(logits: Tensor, batch: Tensor | None, root_index: Tensor) -> Tensor:
    """Listwise cross-entropy: ``-log softmax_graph(logits)[root]`` averaged over graphs.

    Args:
        logits: ``(|V|,)`` node scores of a batch.
        batch: ``(|V|,)`` graph ids.
        root_index: ``(B,)`` global node index of each graph's true root cause.
    """
    return -graph_log_softmax(logits, batch)[root_index].mean()


def root_ranks(logits: Tensor, batch: Tensor | None, root_index: Tensor) -> Tensor:
    """0-based rank of each graph's true root (number of same-graph nodes scoring strictly higher).

    Shapes: ``logits (|V|,)``, ``batch (|V|,)``, ``root_index (B,)`` -> ``(B,)`` int64.
    """
    if batch is None:
        batch = torch.zeros_like(logits, dtype=torch.long)
    root_score = logits[root_index]
    g = batch.new_zeros(int(batch.max()) + 1 if batch.numel() else 0)
    g[batch[root_index]] = torch.arange(root_index.numel(), device=batch.device)
    higher = (logits > root_score[g[batch]]).long()
    return scatter(higher, batch, dim=0, reduce="sum", dim_size=g.numel())[batch[root_index]]
