"""GPU-to-GPU topology of one node: link levels, NVLink counts, NUMA sockets and bandwidths.

The vocabulary follows ``nvidia-smi topo -m`` and NVML's ``nvmlGpuTopologyLevel_t``:

==========  =======================  =================================================================
label       NVML level               meaning (path between two GPUs)
==========  =======================  =================================================================
``SYS``     ``TOPOLOGY_SYSTEM``      crosses the inter-socket link (QPI/UPI/Infinity Fabric)
``NODE``    ``TOPOLOGY_NODE``        different PCIe host bridges of the same NUMA node
``PHB``     ``TOPOLOGY_HOSTBRIDGE``  through one PCIe host bridge (the CPU root complex)
``PXB``     ``TOPOLOGY_MULTIPLE``    through several PCIe switches, not the host bridge
``PIX``     ``TOPOLOGY_SINGLE``      through one PCIe switch
``BRD``     ``TOPOLOGY_INTERNAL``    same board (dual-GPU cards); FleetMind's label, nvidia-smi has none
``NV#``     (NVLink state)           ``#`` bonded NVLinks between the pair (``NV1``, ``NV2``, ``NV12``...)
``X``       -                        the GPU itself (diagonal)
==========  =======================  =================================================================

A :class:`NodeTemplate` stores the PCIe level of every pair in ``level`` (always, also for NVLink pairs,
because NVML reports both and go-gpuallocator scores both) and the number of bonded NVLinks in
``nvlinks``; :meth:`NodeTemplate.effective_level` folds the two into the label that
``nvidia-smi topo -m`` prints. Higher :class:`LinkLevel` values mean closer GPUs.

Bandwidths (GB/s, one direction, peak; ``docs/fleet.md`` has the derivation and sources):

* NVLink per link and direction: 20 GB/s for NVLink 1 (Tesla P100, "NVIDIA Tesla P100" whitepaper:
  4 links, 160 GB/s bidirectional), 25 GB/s for NVLink 2 (V100, "NVIDIA Tesla V100 GPU Architecture"
  whitepaper: 6 links, 300 GB/s), NVLink 3 (A100, "NVIDIA A100 Tensor Core GPU Architecture"
  whitepaper: 12 links, 600 GB/s) and NVLink 4 (H100, "NVIDIA H100 Tensor Core GPU Architecture"
  whitepaper: 18 links, 900 GB/s; H200 and GH200 likewise, "NVIDIA H200 Tensor Core GPU" datasheet:
  900 GB/s, "NVIDIA GH200 Grace Hopper Superchip" datasheet: 900 GB/s NVLink 4); 50 GB/s for
  NVLink 5 (B200 and GB200, "NVIDIA Blackwell Architecture Technical Brief" and the "NVIDIA DGX
  B200" / "GB200 NVL72" datasheets: 18 links, 1.8 TB/s per GPU). The figures are 900 or 1800 GB/s
  bidirectional over 18 links, so 25 or 50 GB/s per link and direction. A pair with ``n`` bonded
  links gets ``n`` times the per-link figure.
* GPU models without NVLink (PCIe cards): T4 ("NVIDIA T4" datasheet: PCIe gen3, 16 GB), A10 (gen4,
  24 GB), L4 ("NVIDIA L4 Tensor Core GPU" datasheet: PCIe gen4 x16, 24 GB), L40 and L40S ("NVIDIA
  L40" / "NVIDIA L40S" datasheets: PCIe gen4 x16, 48 GB, no NVLink).
* Host interface of the new SXM boards: PCIe gen5 for H200 (datasheet: "PCIe Gen5 128 GB/s") and
  for B200 on HGX B200 / DGX B200 (whose hosts are "2x Intel Xeon 8570 PCIe Gen5", "NVIDIA DGX B200
  User Guide"; the B200 itself supports gen6, which these hosts do not run). GH200 and GB200 reach
  their Grace CPU over NVLink-C2C, not PCIe; their ``pcie_gen`` 5 (Grace's PCIe generation, "NVIDIA
  Grace CPU" datasheet) is a FleetMind assumption for any path between GPUs without NVLink.
* PCIe x16 per direction: 15.75 (gen3, 8 GT/s, 128b/130b), 31.5 (gen4), 63.0 (gen5), from the PCI-SIG
  base specifications' signalling rates.
* Inter-socket link per direction (``socket_gbps``, the sum over the links between the sockets):
  Intel QPI 9.6 GT/s = 19.2 GB/s per link (Xeon E5-2698 v4 in DGX-1, Intel ARK), UPI 10.4 GT/s =
  20.8 GB/s per link (Xeon Scalable), UPI 16 GT/s = 32 GB/s per link (Xeon Platinum 8480C in DGX H100).
* Paths without NVLink are the PCIe x16 peak times an efficiency that grows with the number of hops
  (:data:`PCIE_PATH_EFFICIENCY`). These factors are modelling assumptions of FleetMind, not published
  figures; replace them with ``p2pBandwidthLatencyTest`` (CUDA samples) measurements of your own hosts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np

from fleetmind.data.errors import ConfigError


class LinkLevel(IntEnum):
    """Closeness of two GPUs; larger is closer (so ``max``/sorting pick the best path).

    ``SYS`` .. ``BRD`` are PCIe levels (what :attr:`NodeTemplate.level` holds off the diagonal),
    ``NV`` is "at least one NVLink" (only in :meth:`NodeTemplate.effective_level`) and ``X`` the diagonal.
    """

    SYS = 0
    NODE = 1
    PHB = 2
    PXB = 3
    PIX = 4
    BRD = 5
    NV = 6
    X = 7


PCIE_LEVELS: tuple[LinkLevel, ...] = (
    LinkLevel.SYS,
    LinkLevel.NODE,
    LinkLevel.PHB,
    LinkLevel.PXB,
    LinkLevel.PIX,
    LinkLevel.BRD,
)
"""Levels allowed off the diagonal of :attr:`NodeTemplate.level`."""

LEVEL_DESCRIPTIONS: dict[str, str] = {
    "X": "Self",
    "SYS": "PCIe + the inter-socket link between NUMA nodes (QPI/UPI/Infinity Fabric)",
    "NODE": "PCIe + the interconnect between PCIe host bridges within one NUMA node",
    "PHB": "PCIe + one PCIe host bridge (typically the CPU)",
    "PXB": "several PCIe bridges, without the PCIe host bridge",
    "PIX": "at most one PCIe bridge (switch)",
    "BRD": "same board (dual-GPU card; NVML TOPOLOGY_INTERNAL)",
    "NV#": "a bonded set of # NVLinks",
}
"""Legend printed under :func:`nvidia_smi_topo` (wording ours, levels as in ``nvidia-smi topo -m``)."""

PCIE_X16_GBPS: dict[int, float] = {3: 15.75, 4: 31.5, 5: 63.0, 6: 121.0}
"""Peak one-direction bandwidth of a PCIe x16 link per generation (GB/s), after line encoding."""

PCIE_PATH_EFFICIENCY: dict[LinkLevel, float] = {
    LinkLevel.BRD: 1.0,
    LinkLevel.PIX: 1.0,
    LinkLevel.PXB: 0.9,
    LinkLevel.PHB: 0.8,
    LinkLevel.NODE: 0.7,
    LinkLevel.SYS: 0.5,
}
"""Share of the PCIe (or, for SYS, the slower of PCIe and socket link) peak a GPU pair gets.

Modelling assumption, not a published figure: each hop through a bridge or the CPU costs bandwidth, and
cross-socket peer traffic is often staged through host memory.
"""


@dataclass(frozen=True)
class GpuSpec:
    """Interconnect facts of one GPU model.

    :param name: model name as used in fleets (``"V100"``, ``"T4"``, openb's ``"V100M16"``...).
    :param arch: NVIDIA architecture, ``"unknown"`` for anonymised models.
    :param nvlink_gbps: one-direction bandwidth of one NVLink in GB/s (0 for PCIe-only cards).
    :param pcie_gen: PCIe generation of the card's x16 host interface.
    :param memory_gib: device memory in GiB (0 when unknown).
    """

    name: str
    arch: str
    nvlink_gbps: float
    pcie_gen: int
    memory_gib: float


GPU_SPECS: dict[str, GpuSpec] = {
    s.name: s
    for s in (
        GpuSpec("P100", "Pascal", 20.0, 3, 16),
        GpuSpec("V100", "Volta", 25.0, 3, 32),
        GpuSpec("V100M16", "Volta", 25.0, 3, 16),
        GpuSpec("V100M32", "Volta", 25.0, 3, 32),
        GpuSpec("T4", "Turing", 0.0, 3, 16),
        GpuSpec("A10", "Ampere", 0.0, 4, 24),
        GpuSpec("L40S", "Ada Lovelace", 0.0, 4, 48),
        GpuSpec("A100", "Ampere", 25.0, 4, 80),
        GpuSpec("H100", "Hopper", 25.0, 5, 80),
        # Added later; a key's position matters to no vocabulary (openb's model ids are
        # fleetmind.data.openb.GPU_MODELS, which this table does not feed).
        GpuSpec("H200", "Hopper", 25.0, 5, 141),  # H200 datasheet: 141 GB HBM3e, NVLink 4
        GpuSpec("B200", "Blackwell", 50.0, 5, 180),  # DGX B200: 1,440 GB over 8 GPUs, NVLink 5
        # Grace superchips: the size in NVML's name is the CPU's LPDDR5X ("NVIDIA GH200 480GB"),
        # and the GPU's varies (GH200: 96 GB HBM3 or 144 GB HBM3e; GB200: up to 186 or 192 GB
        # HBM3e per GPU), so memory is 0, unknown: NVML's and GFD's own figures give it.
        GpuSpec("GB200", "Blackwell", 50.0, 5, 0),
        GpuSpec("GH200", "Hopper", 25.0, 5, 0),
        GpuSpec("L4", "Ada Lovelace", 0.0, 4, 24),
        GpuSpec("L40", "Ada Lovelace", 0.0, 4, 48),
        # openb's anonymised models: no public specification, assume a PCIe gen3 card.
        GpuSpec("G2", "unknown", 0.0, 3, 0),
        GpuSpec("G3", "unknown", 0.0, 3, 0),
    )
}
"""Known GPU models. Sources: the NVIDIA architecture whitepapers named in the module docstring."""


def gpu_spec(model: str) -> GpuSpec:
    """Spec of ``model``; unknown models get a PCIe gen3 card without NVLink (documented default)."""
    return GPU_SPECS.get(model, GpuSpec(model, "unknown", 0.0, 3, 0))


def link_label(level: int, nvlinks: int = 0) -> str:
    """The ``nvidia-smi topo -m`` label of a pair: ``"NV2"``, ``"PIX"``, ``"SYS"``, ``"X"``..."""
    if level == LinkLevel.X:
        return "X"
    if nvlinks > 0:
        return f"NV{int(nvlinks)}"
    return LinkLevel(int(level)).name


NVML_NVLINK_MAX_LINKS = 36
"""``NVML_NVLINK_MAX_LINKS`` of nvidia-ml-py 13.x (its ``pynvml.py``): the most NVLinks NVML
reports for one GPU, so the most a GPU pair can bond. :func:`nvlink_max_links` is the
largest ``NV#`` label a template takes: this, or the installed pynvml's constant when larger."""

_NVLINK_CAP: list[int] = []


def nvlink_max_links() -> int:
    """The largest ``NV#`` label a template takes: the larger of :data:`NVML_NVLINK_MAX_LINKS`
    (36) and the installed pynvml's ``NVML_NVLINK_MAX_LINKS`` (read once, when first asked), so
    every count NVML discovery (:func:`fleetmind.data.fleet_io.discover_local_fleet`) writes loads
    again."""
    if not _NVLINK_CAP:
        cap = NVML_NVLINK_MAX_LINKS
        try:
            import pynvml

            cap = max(cap, int(pynvml.NVML_NVLINK_MAX_LINKS))
        except Exception:  # noqa: BLE001 - not installed, or no such constant: the default
            pass
        _NVLINK_CAP.append(cap)
    return _NVLINK_CAP[0]


def parse_link_label(label: str) -> tuple[int, int]:
    """Inverse of :func:`link_label`: ``"NV12"`` -> ``(LinkLevel.NV, 12)``, ``"PIX"`` -> ``(PIX, 0)``.

    Raises:
        ConfigError: for a label that is none of ``X``, ``NV#`` (``#`` in ASCII digits, 1 to
            :func:`nvlink_max_links`, 36), ``BRD``, ``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``.
    """
    text = str(label).strip().upper()
    digits = text[2:]
    # ASCII digits only: str.isdigit() also takes superscripts ("NV\u00b3"), which int() refuses
    if text.startswith("NV") and digits and digits.isascii() and digits.isdigit():
        cap = nvlink_max_links()
        n = int(digits) if len(digits) <= 6 else cap + 1  # int() refuses 4,300+ digits
        if not 0 < n <= cap:
            raise ConfigError(
                f"link label {label!r}: a GPU pair has 1 to {cap} NVLinks (NVML_NVLINK_MAX_LINKS)"
            )
        return int(LinkLevel.NV), n
    if text in LinkLevel.__members__ and text != "NV":
        return int(LinkLevel[text]), 0
    raise ConfigError(
        f"unknown link label {label!r}; expected X, NV<n>, BRD, PIX, PXB, PHB, NODE or SYS"
    )


def _readonly(arr: np.ndarray) -> np.ndarray:
    arr = np.ascontiguousarray(arr)
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True, eq=False)
class NodeTemplate:
    """A node type: GPU model, GPU count and the GPU-to-GPU topology.

    Shapes: ``G = n_gpus``; ``level`` and ``nvlinks`` are ``(G, G)`` int8, symmetric, ``numa`` and
    ``board`` are ``(G,)`` int. Arrays are read-only (templates are shared by many nodes and cached).

    :param name: unique template name (``"dgx1-v100"``, ``"pcie-4gpu:T4"``, or a custom one).
    :param gpu_model: GPU model name (see :data:`GPU_SPECS`).
    :param n_gpus: number of GPUs ``G`` (>= 1).
    :param level: PCIe level per pair (:class:`LinkLevel` ``SYS``..``BRD``), ``X`` on the diagonal.
    :param nvlinks: bonded NVLinks per pair, 0 = none; 0 on the diagonal.
    :param numa: NUMA node (socket) of each GPU.
    :param board: board id of each GPU; two GPUs share a board id only on dual-GPU cards.
    :param pcie_gen: PCIe generation of the GPUs' host links (3, 4, 5).
    :param nvlink_gbps: one-direction GB/s of one NVLink (0 when the model has none).
    :param socket_gbps: one-direction GB/s between the two sockets (sum over inter-socket links).
    :param cpus_per_numa: physical cores per NUMA node, for the CPU-affinity column (0 = unknown).
    :param smt: whether each core has two hardware threads (affinity lists the sibling range too).
    :param numa_nodes: NUMA nodes of the host (0 = ``max(numa) + 1``); sockets without GPUs count.
    :param description: one line on where the topology comes from.
    """

    name: str
    gpu_model: str
    n_gpus: int
    level: np.ndarray
    nvlinks: np.ndarray
    numa: np.ndarray
    board: np.ndarray
    pcie_gen: int = 3
    nvlink_gbps: float = 25.0
    socket_gbps: float = 41.6
    cpus_per_numa: int = 0
    smt: bool = True
    numa_nodes: int = 0
    description: str = ""
    _cache: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        g = int(self.n_gpus)
        if g < 1:
            raise ConfigError(f"template {self.name!r}: n_gpus must be >= 1, got {g}")
        level = np.asarray(self.level, dtype=np.int8)
        nvlinks = np.asarray(self.nvlinks, dtype=np.int8)
        numa = np.asarray(self.numa, dtype=np.int64)
        board = np.asarray(self.board, dtype=np.int64)
        for key, arr, shape in (
            ("level", level, (g, g)),
            ("nvlinks", nvlinks, (g, g)),
            ("numa", numa, (g,)),
            ("board", board, (g,)),
        ):
            if arr.shape != shape:
                raise ConfigError(
                    f"template {self.name!r}: {key} has shape {arr.shape}, expected {shape}"
                )
        if not (np.array_equal(level, level.T) and np.array_equal(nvlinks, nvlinks.T)):
            raise ConfigError(f"template {self.name!r}: link matrix is not symmetric")
        diag = np.eye(g, dtype=bool)
        if np.any(level[diag] != LinkLevel.X) or np.any(nvlinks[diag] != 0):
            raise ConfigError(f"template {self.name!r}: diagonal must be X with no NVLinks")
        off = level[~diag]
        if np.any((off < LinkLevel.SYS) | (off > LinkLevel.BRD)):
            raise ConfigError(
                f"template {self.name!r}: off-diagonal levels must be PCIe levels SYS..BRD"
            )
        if np.any(nvlinks < 0):
            raise ConfigError(f"template {self.name!r}: negative NVLink count")
        if int(self.pcie_gen) not in PCIE_X16_GBPS:
            raise ConfigError(
                f"template {self.name!r}: pcie_gen must be one of {sorted(PCIE_X16_GBPS)}"
            )
        object.__setattr__(self, "n_gpus", g)
        object.__setattr__(self, "level", _readonly(level))
        object.__setattr__(self, "nvlinks", _readonly(nvlinks))
        object.__setattr__(self, "numa", _readonly(numa))
        object.__setattr__(self, "board", _readonly(board))

    # -- pickling (SubprocVecEnv workers): drop the caches, keep arrays read-only -------------------
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_cache"] = {}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for key, val in state.items():
            if isinstance(val, np.ndarray):
                val = _readonly(val)
            object.__setattr__(self, key, val)

    # -- comparisons -------------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NodeTemplate):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash((self.name, self.gpu_model, self.n_gpus, self.level.tobytes()))

    # -- derived views -------------------------------------------------------------------------
    def effective_level(self) -> np.ndarray:
        """``(G, G)`` int8: :attr:`level` with ``LinkLevel.NV`` wherever the pair has an NVLink."""
        out = self.level.copy()
        out[self.nvlinks > 0] = LinkLevel.NV
        return out

    def labels(self) -> list[list[str]]:
        """``G x G`` nested list of ``nvidia-smi topo -m`` labels (``"X"``, ``"NV2"``, ``"PIX"``...)."""
        g = self.n_gpus
        return [
            [link_label(self.level[i, j], self.nvlinks[i, j]) for j in range(g)] for i in range(g)
        ]

    def pcie_labels(self) -> list[list[str]]:
        """``G x G`` PCIe level labels, ignoring NVLink (``"X"`` on the diagonal)."""
        g = self.n_gpus
        return [[link_label(self.level[i, j]) for j in range(g)] for i in range(g)]

    def bandwidth_gbps(self) -> np.ndarray:
        """``(G, G)`` float64 peak one-direction GB/s between each GPU pair; ``inf`` on the diagonal.

        NVLink pairs: ``nvlinks * nvlink_gbps``. Other pairs: PCIe x16 peak of :attr:`pcie_gen`
        (for ``SYS`` the slower of that and :attr:`socket_gbps`) times
        :data:`PCIE_PATH_EFFICIENCY` of the level.
        """
        cached = self._cache.get("bandwidth")
        if cached is None:
            pcie = PCIE_X16_GBPS[int(self.pcie_gen)]
            per_level = np.zeros(int(LinkLevel.X) + 1, dtype=np.float64)
            for lvl, eff in PCIE_PATH_EFFICIENCY.items():
                peak = min(pcie, float(self.socket_gbps)) if lvl == LinkLevel.SYS else pcie
                per_level[int(lvl)] = eff * peak
            per_level[int(LinkLevel.X)] = np.inf
            out = per_level[self.level.astype(np.int64)]
            nv = self.nvlinks > 0
            out[nv] = self.nvlinks[nv].astype(np.float64) * float(self.nvlink_gbps)
            cached = _readonly(out)
            self._cache["bandwidth"] = cached
        return cached

    def cpu_affinity(self, gpu: int) -> str:
        """CPU list of the GPU's NUMA node as ``nvidia-smi`` prints it (``"0-19,40-59"``), or ``"N/A"``."""
        c = int(self.cpus_per_numa)
        if c <= 0:
            return "N/A"
        n_numa = max(int(self.numa_nodes), int(self.numa.max()) + 1)
        s = int(self.numa[gpu])
        text = f"{s * c}-{s * c + c - 1}"
        if self.smt:
            base = n_numa * c + s * c
            text += f",{base}-{base + c - 1}"
        return text

    def to_dict(self) -> dict[str, Any]:
        """Plain-Python form (YAML/JSON): scalars plus ``links`` (nvidia-smi labels) and ``pcie``."""
        return {
            "name": self.name,
            "gpu_model": self.gpu_model,
            "n_gpus": self.n_gpus,
            "links": [" ".join(row) for row in self.labels()],
            "pcie": [" ".join(row) for row in self.pcie_labels()],
            "numa": [int(x) for x in self.numa],
            "board": [int(x) for x in self.board],
            "pcie_gen": int(self.pcie_gen),
            "nvlink_gbps": float(self.nvlink_gbps),
            "socket_gbps": float(self.socket_gbps),
            "cpus_per_numa": int(self.cpus_per_numa),
            "smt": bool(self.smt),
            "numa_nodes": int(self.numa_nodes),
            "description": self.description,
        }

    def with_model(self, gpu_model: str, name: str | None = None) -> NodeTemplate:
        """Same topology with another GPU model (PCIe gen and NVLink speed taken from its spec)."""
        spec = gpu_spec(gpu_model)
        return NodeTemplate(
            name=name or f"{self.name.split(':', 1)[0]}:{gpu_model}",
            gpu_model=gpu_model,
            n_gpus=self.n_gpus,
            level=self.level,
            nvlinks=self.nvlinks,
            numa=self.numa,
            board=self.board,
            pcie_gen=spec.pcie_gen,
            nvlink_gbps=spec.nvlink_gbps if spec.nvlink_gbps > 0 else float(self.nvlink_gbps),
            socket_gbps=self.socket_gbps,
            cpus_per_numa=self.cpus_per_numa,
            smt=self.smt,
            numa_nodes=self.numa_nodes,
            description=self.description,
        )


# ---------------------------------------------------------------------------------------------
# Building templates
# ---------------------------------------------------------------------------------------------


def template_from_pairs(
    name: str,
    gpu_model: str,
    n_gpus: int,
    *,
    default_level: LinkLevel,
    numa: list[int],
    pcie_pairs: dict[tuple[int, int], LinkLevel] | None = None,
    nvlink_pairs: dict[tuple[int, int], int] | None = None,
    cross_numa_level: LinkLevel = LinkLevel.SYS,
    board: list[int] | None = None,
    **kwargs: Any,
) -> NodeTemplate:
    """Build a template from a default level plus pair overrides.

    Pairs on different NUMA nodes get ``cross_numa_level``; pairs on the same NUMA node get
    ``default_level`` unless ``pcie_pairs`` names them; same-board pairs get ``BRD``.
    """
    g = n_gpus
    numa_arr = np.asarray(numa, dtype=np.int64)
    level = np.full((g, g), int(default_level), dtype=np.int8)
    level[numa_arr[:, None] != numa_arr[None, :]] = int(cross_numa_level)
    for (i, j), lvl in (pcie_pairs or {}).items():
        level[i, j] = level[j, i] = int(lvl)
    board_arr = np.arange(g, dtype=np.int64) if board is None else np.asarray(board)
    level[(board_arr[:, None] == board_arr[None, :])] = int(LinkLevel.BRD)
    np.fill_diagonal(level, int(LinkLevel.X))
    nv = np.zeros((g, g), dtype=np.int8)
    for (i, j), n in (nvlink_pairs or {}).items():
        nv[i, j] = nv[j, i] = n
    spec = gpu_spec(gpu_model)
    kwargs.setdefault("pcie_gen", spec.pcie_gen)
    kwargs.setdefault("nvlink_gbps", spec.nvlink_gbps or 25.0)
    return NodeTemplate(
        name=name,
        gpu_model=gpu_model,
        n_gpus=g,
        level=level,
        nvlinks=nv,
        numa=numa_arr,
        board=board_arr,
        **kwargs,
    )


DGX1_V100_NVLINKS: dict[tuple[int, int], int] = {
    **{p: 2 for p in ((0, 3), (0, 4), (1, 2), (1, 5), (2, 3), (4, 7), (5, 6), (6, 7))},
    **{p: 1 for p in ((0, 1), (0, 2), (1, 3), (2, 6), (3, 7), (4, 5), (4, 6), (5, 7))},
}
"""Bonded NVLinks of the DGX-1 (Tesla V100) hybrid cube-mesh ("NVIDIA DGX-1 With Tesla V100 System
Architecture" whitepaper, WP-08437-002): each GPU uses its 6 NVLink 2 links as two 2-link bonds and
two single links."""


def dgx1_v100() -> NodeTemplate:
    """DGX-1 with 8 Tesla V100 SXM2: NVLink hybrid cube-mesh, 2 Xeon E5-2698 v4 (20 cores each).

    PCIe: GPU pairs 0-1, 2-3, 4-5, 6-7 share a PCIe switch (``PIX``), the other pairs within a half
    (GPUs 0-3 on socket 0, 4-7 on socket 1) meet at the CPU host bridge (``PHB``), pairs across halves
    cross QPI (``SYS``).
    """
    return template_from_pairs(
        "dgx1-v100",
        "V100",
        8,
        default_level=LinkLevel.PHB,
        numa=[0, 0, 0, 0, 1, 1, 1, 1],
        pcie_pairs={p: LinkLevel.PIX for p in ((0, 1), (2, 3), (4, 5), (6, 7))},
        nvlink_pairs=DGX1_V100_NVLINKS,
        socket_gbps=2 * 19.2,
        cpus_per_numa=20,
        description="DGX-1 V100 hybrid cube-mesh (NVIDIA DGX-1 with Tesla V100 whitepaper)",
    )


def dgx_a100() -> NodeTemplate:
    """DGX A100: 8 A100 SXM4 on 6 NVSwitches (12 NVLink 3 links per GPU: ``NV12`` to every peer).

    PCIe (hidden behind NVLink in ``nvidia-smi``): pairs 0-1, 2-3, 4-5, 6-7 share a PCIe switch tree
    (``PXB``), other pairs of a socket (GPUs 0-3 / 4-7 on the two AMD EPYC 7742) are ``NODE``,
    cross-socket ``SYS``. NUMA is simplified to one node per socket.
    """
    return template_from_pairs(
        "dgx-a100",
        "A100",
        8,
        default_level=LinkLevel.NODE,
        numa=[0, 0, 0, 0, 1, 1, 1, 1],
        pcie_pairs={p: LinkLevel.PXB for p in ((0, 1), (2, 3), (4, 5), (6, 7))},
        nvlink_pairs={(i, j): 12 for i in range(8) for j in range(i + 1, 8)},
        socket_gbps=4 * 32.0,
        cpus_per_numa=64,
        description="DGX A100, NVSwitch all-to-all NV12 (NVIDIA DGX A100 User Guide)",
    )


def _all_pairs(n_gpus: int, links: int) -> dict[tuple[int, int], int]:
    """``links`` bonded NVLinks between every GPU pair (an NVSwitch board: ``NV<links>`` all pairs)."""
    return {(i, j): links for i in range(n_gpus) for j in range(i + 1, n_gpus)}


def dgx_h100() -> NodeTemplate:
    """DGX H100: 8 H100 SXM5 on 4 NVSwitches (18 NVLink 4 links per GPU: ``NV18`` to every peer).

    PCIe: every GPU has its own PCIe gen5 switch (shared with a ConnectX-7), so same-socket pairs are
    ``NODE`` and cross-socket pairs ``SYS`` (2x Xeon Platinum 8480C, 56 cores, 4 UPI links at 16 GT/s).
    """
    return template_from_pairs(
        "dgx-h100",
        "H100",
        8,
        default_level=LinkLevel.NODE,
        numa=[0, 0, 0, 0, 1, 1, 1, 1],
        nvlink_pairs=_all_pairs(8, 18),
        socket_gbps=4 * 32.0,
        cpus_per_numa=56,
        description="DGX H100, NVSwitch all-to-all NV18 (NVIDIA DGX H100 User Guide)",
    )


def hgx_h200() -> NodeTemplate:
    """HGX H200 (DGX H200): 8 H200 SXM on 4 NVSwitches (18 NVLink 4 links per GPU: ``NV18``).

    The H200 is a drop-in for the H100 on the same board ("NVIDIA H200 Tensor Core GPU" datasheet:
    HGX H200, NVLink 900 GB/s, PCIe gen5), so the layout is :func:`dgx_h100`'s: NODE within a socket,
    SYS across (DGX H200: 2x Xeon Platinum 8480C, 56 cores, 4 UPI links at 16 GT/s). OEM HGX H200
    servers may carry other CPUs; the NVLink part, which is what placement scores, is the same.
    """
    return dataclasses.replace(
        dgx_h100().with_model("H200", name="hgx-h200"),
        description="HGX H200, NVSwitch all-to-all NV18 (NVIDIA H200 datasheet, DGX H200)",
    )


def hgx_b200() -> NodeTemplate:
    """HGX B200 (DGX B200): 8 B200 on 2 NVLink 5 switches (18 NVLink 5 links per GPU: ``NV18``).

    "NVIDIA DGX B200 User Guide": 8 B200, 2 fifth-generation NVLink switches (14.4 TB/s aggregate:
    1.8 TB/s per GPU), 2x Intel Xeon 8570 (PCIe gen5, 56 cores each). GPUs 0-3 on socket 0, 4-7 on
    socket 1, as ``nvidia-smi topo -m`` of an HGX B200 shows (NV18 all pairs). The PCIe level under
    the NVLinks (NODE within a socket, SYS across) and the inter-socket link (4 UPI links at
    20 GT/s, 40 GB/s each) are FleetMind assumptions after :func:`dgx_h100`'s: its board with
    B200s (NVLink 5 speed from the spec table) and a faster inter-socket link.
    """
    return dataclasses.replace(
        dgx_h100().with_model("B200", name="hgx-b200"),
        socket_gbps=4 * 40.0,
        description="HGX B200, NVSwitch all-to-all NV18 of NVLink 5 (NVIDIA DGX B200 User Guide)",
    )


def gb200_tray() -> NodeTemplate:
    """A GB200 NVL72 compute tray: 2 GB200 superchips, each one Grace CPU and 2 B200 GPUs.

    Each GPU's 18 NVLink 5 links go to the rack's NVLink switch trays, so every pair of the tray is
    ``NV18`` through the switches ("NVIDIA GB200 NVL72" datasheet: 18 compute trays of 4 GPUs, 1.8
    TB/s per GPU). GPUs 0-1 are on Grace 0 and 2-3 on Grace 1 (72 Neoverse V2 cores each, no SMT).
    FleetMind assumptions: the PCIe level under the NVLinks (NODE on one Grace, SYS across) and the
    link between the two Graces (the :class:`NodeTemplate` default); no GPU pair of the tray uses
    either, since every pair has NVLink. The GB200 NVL4 board links its 4 GPUs to each other directly (fewer links
    per pair); its GPUs have the same NVML name and get this template too.
    """
    return template_from_pairs(
        "gb200-tray",
        "GB200",
        4,
        default_level=LinkLevel.NODE,
        numa=[0, 0, 1, 1],
        nvlink_pairs=_all_pairs(4, 18),
        cpus_per_numa=72,
        smt=False,
        description="GB200 compute tray: 2 Grace + 4 B200, NV18 all pairs (GB200 NVL72 datasheet)",
    )


PCIE_DEFAULT_MODEL = "A10"
"""GPU model of the PCIe-only templates when none is given."""

MAX_PCIE_GPUS = 16
"""Largest GPU count :func:`pcie_server` builds."""


def pcie_server(n_gpus: int, gpu_model: str = PCIE_DEFAULT_MODEL) -> NodeTemplate:
    """A PCIe-only server with ``n_gpus`` GPUs (no NVLink) and two 24-core sockets.

    Layout (that of common 1U/2U/4U GPU servers; the built-in names cover 1, 2, 4 and 8 GPUs):

    * 1 or 2 GPUs: on CPU root ports of socket 0; the pair meets at the host bridge -> ``PHB``.
    * 3 or more ("dual-root"): the first ``ceil(G/2)`` GPUs on socket 0, the rest on socket 1; GPUs
      ``2i`` and ``2i+1`` of a socket share a PCIe switch -> ``PIX``; the switches of a socket hang
      below a common switch -> ``PXB``; pairs across sockets -> ``SYS``. So 4 GPUs: 0-1 and 2-3
      ``PIX``, the rest ``SYS``; 8 GPUs: 0-1, 2-3, 4-5, 6-7 ``PIX``, 0-3 / 4-7 otherwise ``PXB``.
    """
    if not 1 <= int(n_gpus) <= MAX_PCIE_GPUS:
        raise ConfigError(f"PCIe server templates have 1..{MAX_PCIE_GPUS} GPUs, not {n_gpus}")
    g = int(n_gpus)
    base = f"pcie-{g}gpu"
    name = base if gpu_model == PCIE_DEFAULT_MODEL else f"{base}:{gpu_model}"
    desc = f"PCIe-only {g}-GPU server (FleetMind layout, docs/fleet.md)"
    if g <= 2:
        numa = [0] * g
        pix: dict[tuple[int, int], LinkLevel] = {}
        default = LinkLevel.PHB
    else:
        half = (g + 1) // 2
        numa = [0] * half + [1] * (g - half)
        pix = {
            (i, i + 1): LinkLevel.PIX
            for i in range(g - 1)
            if numa[i] == numa[i + 1] and (i - (0 if numa[i] == 0 else half)) % 2 == 0
        }
        default = LinkLevel.PXB
    return template_from_pairs(
        name,
        gpu_model,
        g,
        default_level=default,
        numa=numa,
        pcie_pairs=pix,
        socket_gbps=2 * 20.8,
        cpus_per_numa=24,
        numa_nodes=2,
        description=desc,
    )


BUILTIN_TEMPLATES: dict[str, Any] = {
    "dgx1-v100": dgx1_v100,
    "dgx-a100": dgx_a100,
    "dgx-h100": dgx_h100,
    "hgx-h200": hgx_h200,
    "hgx-b200": hgx_b200,
    "gb200-tray": gb200_tray,
    "pcie-1gpu": lambda: pcie_server(1),
    "pcie-2gpu": lambda: pcie_server(2),
    "pcie-4gpu": lambda: pcie_server(4),
    "pcie-8gpu": lambda: pcie_server(8),
}
"""Built-in template factories by name."""

_TEMPLATE_CACHE: dict[str, NodeTemplate] = {}


def get_template(name: str, gpu_model: str | None = None) -> NodeTemplate:
    """A built-in template by name, optionally with another GPU model.

    ``name`` may carry the model after a colon (``"pcie-4gpu:T4"``, ``"dgx1-v100:V100M32"``); the
    result's name then has that form too. The same object is returned for the same request, so
    per-template caches (:mod:`fleetmind.data.gpu_alloc`) are shared.

    Raises:
        ConfigError: if the base name is not one of :data:`BUILTIN_TEMPLATES`.
    """
    base, _, suffix = str(name).partition(":")
    model = gpu_model or suffix or None
    hit = _TEMPLATE_CACHE.get(f"{base}:{model}" if model else base)
    if hit is not None:
        return hit
    default = _TEMPLATE_CACHE.get(base)
    if default is None:
        pcie_n = _pcie_count(base)
        if base in BUILTIN_TEMPLATES:
            default = BUILTIN_TEMPLATES[base]()
        elif pcie_n is not None:
            default = pcie_server(pcie_n)
        else:
            raise ConfigError(
                f"unknown template {name!r}; built-in templates are "
                f"{', '.join(BUILTIN_TEMPLATES)} (or pcie-<n>gpu)"
            )
        _TEMPLATE_CACHE[base] = default
    if model is None or model == default.gpu_model:
        return default
    if base.startswith("pcie-"):
        made = pcie_server(default.n_gpus, model)
    else:
        made = default.with_model(model, name=f"{base}:{model}")
    _TEMPLATE_CACHE[f"{base}:{model}"] = made
    return made


def _pcie_count(base: str) -> int | None:
    """``"pcie-12gpu"`` -> 12; ``None`` for other names."""
    if base.startswith("pcie-") and base.endswith("gpu") and base[5:-3].isdigit():
        return int(base[5:-3])
    return None


def nvidia_smi_topo(template: NodeTemplate, legend: bool = True) -> str:
    """Render the template like ``nvidia-smi topo -m``: the GPU matrix, CPU and NUMA affinity, legend."""
    g = template.n_gpus
    labels = template.labels()
    cols = [f"GPU{j}" for j in range(g)]
    width = max(6, max(len(c) for c in cols) + 2, max(len(x) for row in labels for x in row) + 2)
    aff = [template.cpu_affinity(i) for i in range(g)]
    aff_w = max(14, max(len(a) for a in aff) + 2)
    head = " " * 8 + "".join(c.ljust(width) for c in cols) + "CPU Affinity".ljust(aff_w)
    lines = [head + "NUMA Affinity"]
    for i in range(g):
        row = f"GPU{i}".ljust(8) + "".join(x.ljust(width) for x in labels[i])
        row += aff[i].ljust(aff_w) + str(int(template.numa[i]))
        lines.append(row.rstrip())
    if legend:
        lines.append("")
        lines.append("Legend:")
        lines.append("")
        for key, text in LEVEL_DESCRIPTIONS.items():
            lines.append(f"  {key:<4} = {text}")
    return "\n".join(lines)


DCGM_MODEL_NAMES: dict[str, str] = {
    "dgx1-v100": "Tesla V100-SXM2-32GB",
    "dgx-a100": "NVIDIA A100-SXM4-80GB",
    "dgx-h100": "NVIDIA H100 80GB HBM3",
    "pcie-l40s-8": "NVIDIA L40S",
    "pcie-a10-4": "NVIDIA A10",
}
"""Device names as NVML / DCGM exporter's ``modelName`` label report them, per RCA host template."""


@dataclass(frozen=True)
class HostTemplate:
    """A GPU server layout for the RCA graph generator (:mod:`fleetmind.data.rca_gen.graphs`).

    Attributes:
        name: template name.
        gpu_model: GPU model string (as DCGM's ``modelName``).
        n_gpus: GPUs per host.
        links: interconnect ``link`` nodes: ``(link label, GPU indices joined, level, GB/s)``.
    """

    name: str
    gpu_model: str
    n_gpus: int
    links: tuple[tuple[str, tuple[int, ...], str, float], ...]


def rca_host_templates() -> dict[str, HostTemplate]:
    """Host layouts for the RCA graph generator (:mod:`fleetmind.data.rca_gen.graphs`), built from the templates.

    Returns ``{name: HostTemplate}`` for the names in :data:`DCGM_MODEL_NAMES`; each template lists
    its interconnect ``link`` nodes: one per NVLink-connected pair (``"nvl-i-j"``, level ``NV#``,
    bandwidth from :meth:`NodeTemplate.bandwidth_gbps`) or, on PCIe-only servers, one per PCIe
    switch shared by GPUs (``"pcie-swK"``, level ``PIX``).
    """
    sources = {
        "dgx1-v100": get_template("dgx1-v100"),
        "dgx-a100": get_template("dgx-a100"),
        "dgx-h100": get_template("dgx-h100"),
        "pcie-l40s-8": get_template("pcie-8gpu", "L40S"),
        "pcie-a10-4": get_template("pcie-4gpu", "A10"),
    }
    return {
        name: HostTemplate(name, DCGM_MODEL_NAMES[name], t.n_gpus, template_links(t))
        for name, t in sources.items()
    }


def template_links(t: NodeTemplate) -> tuple[tuple[str, tuple[int, ...], str, float], ...]:
    """The interconnect ``link`` nodes of template ``t``, as :func:`rca_host_templates` lists them:
    ``(label, GPU indices joined, level, GB/s)``, one per NVLink-connected pair (``"nvl-i-j"``,
    level ``NV#``) or, on a server without NVLink, one per PCIe switch shared by GPUs
    (``"pcie-swK"``, level ``PIX``); bandwidth from :meth:`NodeTemplate.bandwidth_gbps`."""
    bw = t.bandwidth_gbps()
    g = t.n_gpus
    links: list[tuple[str, tuple[int, ...], str, float]] = []
    if (t.nvlinks > 0).any():
        for i in range(g):
            for j in range(i + 1, g):
                if t.nvlinks[i, j] > 0:
                    label = link_label(int(t.level[i, j]), int(t.nvlinks[i, j]))
                    links.append((f"nvl-{i}-{j}", (i, j), label, float(bw[i, j])))
        return tuple(links)
    groups: dict[int, list[int]] = {}
    for i in range(g):
        peers = [j for j in range(g) if t.level[i, j] in (LinkLevel.PIX, LinkLevel.BRD)]
        if peers:
            groups.setdefault(min([i, *peers]), []).append(i)
    for k, members in enumerate(groups.values()):
        a, b = members[0], members[-1]
        links.append((f"pcie-sw{k}", tuple(members), "PIX", float(bw[a, b])))
    return tuple(links)
