"""Ring bus bandwidth of a GPU set: what an all-reduce over the set can reach.

NCCL runs an all-reduce as a ring through the GPUs; a ring moves data at the speed of its
slowest hop, and NCCL builds the fastest ring it can, so the model is

    busbw(set) = max over Hamiltonian cycles C of the set ( min over hops (a, b) of C: bw(a, b) )

A pair's ring is its link; one GPU has none (None). `bw(a, b)` is per direction, from the
topology annotation: NVLinks x per-link bandwidth (links through an NVSwitch count), else by
the PCIe common-ancestor level, bounded by NUMA like the pair scores (unknown level: NODE on
one NUMA node, SYS across, SYS when NUMA is unknown too). Limits: a single ring; NCCL's several
channels at once and NVLink SHARP (NVLS) are not modelled.

All subsets of a node up to 16 GPUs are computed at once per topology: for each distinct link
bandwidth t (ascending), a bitmask dynamic programme over the graph of links >= t finds every
subset with a Hamiltonian cycle in it, and that subset's busbw is the largest such t.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from scheduler.core.decode import shown
from scheduler.core.topology.schema import GpuInfo, GpuLink, Topology, TopologyError

__all__ = [
    "DEFAULT_BANDWIDTH",
    "MAX_RING_GPUS",
    "BandwidthMatrix",
    "LinkBandwidth",
    "bandwidth_matrix",
    "ring_busbw",
    "ring_busbw_all",
]

MAX_RING_GPUS = 16
"""Largest GPU set (and node, for the all-subsets table) whose busbw is computed exactly."""

BandwidthMatrix = tuple[tuple[float, ...], ...]
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_LEVELS = ("board", "pix", "pxb", "phb", "node", "sys")
MAX_GBPS = 1_000
"""Each link-bandwidth argument's ceiling (GB/s per link or level; NVLink 5 carries 50): with
MAX_NVLINKS links a pair stays below 64,000 GB/s, which keeps GPUTopology's node key inside
int64 (see scoring.MAX_PAIR_SCORE)."""
MIN_GBPS = 0.001
"""Each bandwidth figure's floor (GB/s, 1 MB/s): times and scores made from it stay finite."""


def gbps_problem(value: Any) -> str | None:
    """Why `value` is no bandwidth figure (GB/s), or None when it is one."""
    valid = isinstance(value, int | float) and not isinstance(value, bool)
    if valid and MIN_GBPS <= value <= MAX_GBPS:
        return None
    return f"must be a number from {MIN_GBPS:g} to {MAX_GBPS:,} (GB/s), got {shown(value)}"


@dataclass(frozen=True)
class LinkBandwidth:
    """GB/s per direction: per NVLink (NVLink 2, 3 and 4 carry 25 GB/s per link and
    direction: V100 NV2 = 50, A100 NV12 = 300, H100 NV18 = 450), and per PCIe common-ancestor
    level for pairs without NVLink (PCIe 4.0 x16 peer-to-peer)."""

    nvlink: float = 25.0
    board: float = 24.0
    pix: float = 22.0
    pxb: float = 20.0
    phb: float = 16.0
    node: float = 12.0
    sys: float = 8.0

    def nvlink_gbps(self, a: GpuInfo, b: GpuInfo) -> float:
        """Per-link NVLink bandwidth between two GPUs.

        One figure for every GPU model today; the place where a per-model figure from the
        annotation would be looked up.
        """
        return self.nvlink

    def level_gbps(self, level: str | None) -> float:
        """PCIe peer-to-peer bandwidth at a common-ancestor level (unknown: SYS)."""
        if level is None:
            return self.sys
        return float(getattr(self, level.lower()))

    def link_gbps(self, a: GpuInfo, b: GpuInfo, link: GpuLink) -> float:
        """One-direction bandwidth between two GPUs of a node."""
        if link.nvlinks:
            return self.nvlink_gbps(a, b) * link.nvlinks
        level = link.pcie
        if a.numa_node is not None and b.numa_node is not None:
            if a.numa_node != b.numa_node:
                level = "SYS"  # crossing sockets, whatever the PCIe tree says
            elif level is None or level == "SYS":
                level = "NODE"
        return self.level_gbps(level)

    @classmethod
    def from_args(
        cls, raw: Mapping[str, Any] | None, *, path: str = "linkBandwidth"
    ) -> LinkBandwidth:
        """Build from plugin args, e.g. `{"nvlink": 25, "sys": 8}` (GB/s); errors name the field."""
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise TopologyError(f"{path}: must be a mapping")
        values: dict[str, float] = {}
        for key, value in raw.items():
            if key not in ("nvlink", *_LEVELS):
                known = ", ".join(("nvlink", *_LEVELS))
                raise TopologyError(f"{path}.{key}: unknown field (known: {known})")
            problem = gbps_problem(value)
            if problem is not None:
                raise TopologyError(f"{path}.{key}: {problem}")
            values[key] = float(value)
        return cls(**values)


DEFAULT_BANDWIDTH = LinkBandwidth()


def bandwidth_matrix(
    topology: Topology, table: LinkBandwidth = DEFAULT_BANDWIDTH
) -> BandwidthMatrix:
    """Symmetric matrix of link bandwidths in GB/s (zero diagonal)."""
    n = topology.size
    rows = [[0.0] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            bw = table.link_gbps(topology.gpus[i], topology.gpus[j], topology.link(i, j))
            rows[i][j] = rows[j][i] = bw
    return tuple(tuple(row) for row in rows)


def _hamiltonian(n: int, adjacency: Sequence[int]) -> npt.NDArray[np.bool_]:
    """Per bitmask of n vertices: whether the induced graph has a Hamiltonian cycle (a pair:
    an edge). `ends[m]`: the vertices v such that a path from m's lowest vertex through all of
    m ends at v; paths only grow by vertices above the start, so each cycle is found once."""
    size = 1 << n
    masks: IntArray = np.arange(size, dtype=np.int64)
    popcount = np.bitwise_count(masks).astype(np.int64)
    lowest = masks & -masks
    ends: IntArray = np.zeros(size, dtype=np.int64)
    for v in range(n):
        ends[1 << v] = 1 << v
    adj = np.asarray(adjacency, dtype=np.int64)
    for k in range(1, n):
        layer = np.flatnonzero((popcount == k) & (ends != 0))
        if layer.size == 0:
            break
        layer_ends = ends[layer]
        layer_low = lowest[layer]
        for u in range(n):
            bit = 1 << u
            grow = ((layer & bit) == 0) & (layer_low < bit) & ((layer_ends & adj[u]) != 0)
            ends[layer[grow] | bit] |= bit
    low_index = np.bitwise_count(np.maximum(lowest - 1, 0)).astype(np.int64)
    closes: npt.NDArray[np.bool_] = (ends & adj[low_index]) != 0
    return closes & (popcount >= 2)


def ring_busbw_all(matrix: BandwidthMatrix) -> FloatArray:
    """busbw of every subset of the node, indexed by bitmask (0 for fewer than 2 GPUs)."""
    n = len(matrix)
    if n > MAX_RING_GPUS:
        raise ValueError(f"{n} GPUs: the all-subsets table stops at {MAX_RING_GPUS}")
    out: FloatArray = np.zeros(1 << n, dtype=np.float64)
    thresholds = sorted({matrix[i][j] for i in range(n) for j in range(i + 1, n)})
    for t in thresholds:
        adjacency = [
            sum(1 << j for j in range(n) if j != i and matrix[i][j] >= t) for i in range(n)
        ]
        out[_hamiltonian(n, adjacency)] = t
    return out


def ring_busbw(matrix: BandwidthMatrix, gpus: Sequence[int]) -> float | None:
    """busbw of one set: None for fewer than 2 GPUs or more than MAX_RING_GPUS."""
    members = sorted(set(gpus))
    if len(members) < 2 or len(members) > MAX_RING_GPUS:
        return None
    if len(members) == 2:
        return matrix[members[0]][members[1]]
    sub = tuple(tuple(matrix[a][b] for b in members) for a in members)
    return float(ring_busbw_all(sub)[(1 << len(members)) - 1])
