"""How good a GPU set is: set score vs the best possible, NVLink, NUMA, all-reduce bandwidth.

Bandwidth model (docs/simulator.md): a job's all-reduce runs as one ring over its GPUs; the
ring's speed is its slowest hop, and NCCL picks the fastest ring, so the estimate is

    busbw(set) = max over Hamiltonian cycles C of the set ( min over hops (a, b) in C of bw(a, b) )

with bw(a, b) = 25 GB/s per NVLink between a and b (per direction; NVLink 2, 3 and 4 all carry
25 GB/s per link, so V100 NV2 = 50, A100 NV12 = 300, H100 NV18 = 450), else by the PCIe level
of their common ancestor (PCIe 4.0 x16 peer-to-peer, per direction): BOARD 24, PIX 22, PXB 20,
PHB 16, NODE 12, SYS 8 GB/s. This is NCCL's *bus* bandwidth for a single ring; real NCCL runs
several rings at once on the DGX-1 mesh, so absolute V100 figures are pessimistic, but the
comparison between sets on one node holds.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from scheduler.core.topology.schema import Topology
from scheduler.core.topology.scoring import DEFAULT_TABLE, PairMatrix, pair_matrix, set_score
from scheduler.core.topology.select import GpuSelector

__all__ = ["NVLINK_GBPS", "PCIE_GBPS", "QualityModel", "SetQuality", "link_gbps", "ring_gbps"]

NVLINK_GBPS = 25.0
"""Per NVLink, per direction (NVLink 2/3/4)."""
PCIE_GBPS: dict[str | None, float] = {
    "BOARD": 24.0,
    "PIX": 22.0,
    "PXB": 20.0,
    "PHB": 16.0,
    "NODE": 12.0,
    "SYS": 8.0,
    None: 8.0,
}
"""Peer-to-peer per PCIe common-ancestor level (PCIe 4.0 x16, per direction)."""


def link_gbps(topology: Topology, a: int, b: int) -> float:
    """Estimated one-direction bandwidth between two GPUs of a node."""
    link = topology.link(a, b)
    if link.nvlinks:
        return NVLINK_GBPS * link.nvlinks
    level = link.pcie
    if level is None:
        na, nb = topology.gpus[a].numa_node, topology.gpus[b].numa_node
        if na is not None and nb is not None:
            level = "NODE" if na == nb else "SYS"
    return PCIE_GBPS[level]


def ring_gbps(topology: Topology, gpus: tuple[int, ...]) -> float | None:
    """Bus bandwidth of the best single ring over the set; None for fewer than 2 GPUs."""
    if len(gpus) < 2:
        return None
    if len(gpus) == 2:
        return link_gbps(topology, gpus[0], gpus[1])
    bw = {(a, b): link_gbps(topology, a, b) for a in gpus for b in gpus if a != b}
    first, rest = gpus[0], gpus[1:]
    best = 0.0
    for order in itertools.permutations(rest):
        if order[0] > order[-1]:
            continue  # each cycle once (its reverse is the same ring)
        hops = (first, *order, first)
        slowest = min(bw[hops[i], hops[i + 1]] for i in range(len(hops) - 1))
        if slowest > best:
            best = slowest
    return best


@dataclass(frozen=True, slots=True)
class SetQuality:
    """One placement's GPU set judged against the best set on the same node and free mask."""

    score: int
    best_score: int
    all_nvlink: bool
    cross_numa: bool
    busbw_gbps: float | None

    @property
    def best_possible(self) -> bool:
        return self.score >= self.best_score


class QualityModel:
    """Judges GPU sets with the scheduler's default pair scores (cached per topology/set)."""

    def __init__(self) -> None:
        self.selector = GpuSelector(DEFAULT_TABLE)
        self._matrices: dict[str, PairMatrix] = {}
        self._cache: dict[tuple[str, int, tuple[int, ...]], SetQuality] = {}
        self._rings: dict[tuple[str, tuple[int, ...]], float | None] = {}

    def matrix(self, topology: Topology) -> PairMatrix:
        found = self._matrices.get(topology.key)
        if found is None:
            found = self._matrices[topology.key] = pair_matrix(topology, DEFAULT_TABLE)
        return found

    def score(self, topology: Topology, gpus: tuple[int, ...]) -> int:
        return set_score(self.matrix(topology), gpus)

    def judge(self, topology: Topology, free_mask: int, gpus: tuple[int, ...]) -> SetQuality:
        """Quality of `gpus`, chosen when `free_mask` was free on a node with `topology`."""
        key = (topology.key, free_mask, gpus)
        found = self._cache.get(key)
        if found is not None:
            return found
        score = self.score(topology, gpus)
        best = self.selector.best_set(topology, free_mask, len(gpus))
        best_score = best.score if best is not None else score
        pairs = itertools.combinations(gpus, 2)
        all_nvlink = all(topology.link(a, b).nvlinks > 0 for a, b in pairs)
        numas = {topology.gpus[g].numa_node for g in gpus}
        ring_key = (topology.key, gpus)
        if ring_key not in self._rings:
            self._rings[ring_key] = ring_gbps(topology, gpus)
        quality = SetQuality(score, best_score, all_nvlink, len(numas) > 1, self._rings[ring_key])
        self._cache[key] = quality
        return quality
