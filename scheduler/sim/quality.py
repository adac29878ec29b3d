"""How good a GPU set is: its ring bus bandwidth and set score against the best possible set on
the same node, NVLink, NUMA; and how long a job runs on it.

Bandwidth: `scheduler.core.topology.bandwidth` (the model the scheduler chooses sets by; one
ring, its slowest hop). Job time: a job spends a share `comm` of its best-case time in
communication, which slows down in proportion to the bandwidth it lost:

    run time = duration x ((1 - comm) + comm x best_busbw / busbw)

where `duration` is the trace's time at `best_busbw`, the fastest set of the job's size on an
empty node of the same type. Jobs spanning nodes ring over the inter-node link when it is
slower than their GPUs' ring.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from scheduler.core.topology.schema import Topology
from scheduler.core.topology.scoring import DEFAULT_TABLE
from scheduler.core.topology.select import GpuSelector

__all__ = ["QualityModel", "SetQuality", "stretched_duration"]


def stretched_duration(
    duration: float,
    comm: float,
    best_busbw: float | None,
    busbw: float | None,
    inter_node_busbw: float | None = None,
) -> float:
    """A job's run time on a set of `busbw` GB/s, given its `duration` at `best_busbw`.

    `inter_node_busbw`: for a job spanning nodes, the inter-node bandwidth (its ring crosses
    it). Without a bandwidth on either side (one GPU, a node without topology) the duration is
    unchanged.
    """
    if inter_node_busbw is not None:
        busbw = inter_node_busbw if busbw is None else min(busbw, inter_node_busbw)
    if comm <= 0 or not best_busbw or not busbw:
        return duration
    return duration * ((1.0 - comm) + comm * best_busbw / busbw)


@dataclass(frozen=True, slots=True)
class SetQuality:
    """One placement's GPU set judged against the best set on the same node and free mask."""

    score: int
    best_score: int
    all_nvlink: bool
    cross_numa: bool
    busbw_gbps: float | None
    best_busbw_gbps: float | None = None

    @property
    def best_possible(self) -> bool:
        """As fast as the best set, and as well connected by pair score (the selection order)."""
        mine = (self.busbw_gbps or 0.0, self.score)
        return mine >= (self.best_busbw_gbps or 0.0, self.best_score)


class QualityModel:
    """Judges GPU sets with the scheduler's default pair scores and link bandwidths (cached)."""

    def __init__(self) -> None:
        self.selector = GpuSelector(DEFAULT_TABLE)
        self._cache: dict[tuple[str, int, tuple[int, ...]], SetQuality] = {}
        self._best_on_node: dict[tuple[str, int], float | None] = {}

    def score(self, topology: Topology, gpus: tuple[int, ...]) -> int:
        return self.selector.compile(topology).score_of(sum(1 << g for g in gpus))

    def busbw(self, topology: Topology, gpus: tuple[int, ...]) -> float | None:
        return self.selector.busbw(topology, gpus)

    def best_busbw_on_node(self, topology: Topology, size: int) -> float | None:
        """The fastest ring of `size` GPUs on an empty node of this type."""
        key = (topology.key, size)
        if key not in self._best_on_node:
            best = self.selector.best_set(topology, topology.allocatable_mask, size)
            self._best_on_node[key] = best.busbw if best is not None else None
        return self._best_on_node[key]

    def judge(self, topology: Topology, free_mask: int, gpus: tuple[int, ...]) -> SetQuality:
        """Quality of `gpus`, chosen when `free_mask` was free on a node with `topology`."""
        key = (topology.key, free_mask, gpus)
        found = self._cache.get(key)
        if found is not None:
            return found
        score = self.score(topology, gpus)
        busbw = self.busbw(topology, gpus)
        best = self.selector.best_set(topology, free_mask, len(gpus))
        best_score = best.score if best is not None else score
        best_busbw = best.busbw if best is not None else busbw
        pairs = itertools.combinations(gpus, 2)
        all_nvlink = all(topology.link(a, b).nvlinks > 0 for a, b in pairs)
        numas = {topology.gpus[g].numa_node for g in gpus}
        quality = SetQuality(score, best_score, all_nvlink, len(numas) > 1, busbw, best_busbw)
        self._cache[key] = quality
        return quality
