"""Best GPU set on a node: exact search over bitmasks, precomputed per topology, cached.

Among the free allocatable GPUs (healthy, not in MIG mode) meeting the placement policy, the
chosen set of the requested size has the highest ring bus bandwidth (`bandwidth.py`: what an
all-reduce over it can reach); ties go to the highest set score (sum of pair scores), then to
the set that leaves the remaining free GPUs best connected (highest set score among them),
then to the lowest indices. For a single GPU there is no ring and every set scores 0, so the
pick is the free GPU whose loss costs the others least, which keeps NVLink pairs and quads
whole.

Per topology (many nodes share one) the set score and the busbw of every subset are
precomputed with numpy, so a query is a filter over the subsets of the requested size; answers
are cached by (topology, free mask, size, placement). Exact up to MAX_EXACT_GPUS GPUs; larger
nodes use a greedy search (Selection.exact is False).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from scheduler.core.topology.bandwidth import (
    DEFAULT_BANDWIDTH,
    BandwidthMatrix,
    LinkBandwidth,
    bandwidth_matrix,
    ring_busbw,
    ring_busbw_all,
)
from scheduler.core.topology.device_plugin import device_plugin_set
from scheduler.core.topology.schema import Placement, Topology
from scheduler.core.topology.scoring import (
    DEFAULT_TABLE,
    PairMatrix,
    PairScoreTable,
    mask_to_indices,
    set_score,
    topology_graph,
)

MAX_EXACT_GPUS = 16
"""Largest node searched exhaustively (2**16 subsets precomputed per topology)."""

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Selection:
    """A chosen GPU set: indices, bitmask, its set score, the score left to the others, and
    its ring bus bandwidth in GB/s (None for one GPU)."""

    gpus: tuple[int, ...]
    mask: int
    score: int
    leftover_score: int
    exact: bool = True
    busbw: float | None = None


@dataclass(frozen=True, eq=False)
class CompiledTopology:
    """Per-topology tables for the search. Arrays are indexed by GPU-set bitmask.

    The arrays are empty for nodes above MAX_EXACT_GPUS (greedy search).
    """

    key: str
    size: int
    matrix: PairMatrix
    allocatable: int
    nvlink_adjacency: tuple[int, ...]
    numa_masks: tuple[int, ...]
    set_scores: IntArray
    by_size: tuple[IntArray, ...]
    nvlink_clique: BoolArray
    single_numa: BoolArray
    lex_rank: IntArray
    bandwidth: BandwidthMatrix
    busbw: FloatArray

    def score_of(self, mask: int) -> int:
        """Set score of a bitmask."""
        if self.size <= MAX_EXACT_GPUS:
            return int(self.set_scores[mask])
        return set_score(self.matrix, mask_to_indices(mask))

    def busbw_of(self, mask: int) -> float | None:
        """Ring bus bandwidth of a bitmask (GB/s); None for one GPU or a set too big to ring."""
        if mask & (mask - 1) == 0:
            return None
        if self.size <= MAX_EXACT_GPUS:
            return float(self.busbw[mask])
        return ring_busbw(self.bandwidth, mask_to_indices(mask))

    def satisfies(self, mask: int, placement: Placement) -> bool:
        """Whether a GPU set meets the placement policy."""
        if placement is Placement.NVLINK:
            return all(
                (mask & ~(self.nvlink_adjacency[i] | (1 << i))) == 0 for i in mask_to_indices(mask)
            )
        if placement is Placement.SINGLE_NUMA:
            return any(mask & ~group == 0 for group in self.numa_masks)
        return True


def compile_topology(
    topology: Topology,
    table: PairScoreTable = DEFAULT_TABLE,
    bandwidth: LinkBandwidth = DEFAULT_BANDWIDTH,
) -> CompiledTopology:
    """Build the search tables of a topology from its graph model."""
    n = topology.size
    links = bandwidth_matrix(topology, bandwidth)
    import networkx as nx  # imported on first use, like `topology_graph`

    graph = topology_graph(topology, table)
    weights = nx.to_numpy_array(graph, nodelist=range(n), weight="weight", dtype=np.int64)
    matrix: PairMatrix = tuple(tuple(int(v) for v in row) for row in weights)
    adjacency = tuple(
        sum(1 << j for j in graph.neighbors(i) if graph.edges[i, j]["nvlinks"] > 0)
        for i in range(n)
    )
    groups: dict[int, int] = {}
    for gpu in topology.gpus:
        if gpu.numa_node is not None:
            groups[gpu.numa_node] = groups.get(gpu.numa_node, 0) | (1 << gpu.index)
    numa_masks = tuple(groups[k] for k in sorted(groups))
    empty_i: IntArray = np.zeros(0, dtype=np.int64)
    empty_b: BoolArray = np.zeros(0, dtype=np.bool_)
    empty_f: FloatArray = np.zeros(0, dtype=np.float64)
    if n > MAX_EXACT_GPUS:
        return CompiledTopology(
            topology.key, n, matrix, topology.allocatable_mask, adjacency, numa_masks,
            empty_i, (), empty_b, empty_b, empty_i, links, empty_f,
        )  # fmt: skip
    masks: IntArray = np.arange(1 << n, dtype=np.int64)
    bits: IntArray = (masks[None, :] >> np.arange(n, dtype=np.int64)[:, None]) & 1
    scores: IntArray = (bits * (weights @ bits)).sum(axis=0) // 2
    popcount = bits.sum(axis=0)
    by_size = tuple(np.flatnonzero(popcount == k).astype(np.int64) for k in range(n + 1))
    clique: BoolArray = np.ones(1 << n, dtype=np.bool_)
    full = (1 << n) - 1
    for i in range(n):
        outside = full & ~(adjacency[i] | (1 << i))
        clique &= (bits[i] == 0) | ((masks & outside) == 0)
    single: BoolArray = np.zeros(1 << n, dtype=np.bool_)
    for group in numa_masks:
        single |= (masks & (full & ~group)) == 0
    lex: IntArray = (bits << np.arange(n - 1, -1, -1, dtype=np.int64)[:, None]).sum(axis=0)
    busbw = ring_busbw_all(links)
    for array in (scores, clique, single, lex, busbw, *by_size):
        array.flags.writeable = False
    return CompiledTopology(
        topology.key, n, matrix, topology.allocatable_mask, adjacency, numa_masks,
        scores, by_size, clique, single, lex, links, busbw,
    )  # fmt: skip


@dataclass
class SelectorStats:
    """Work counters, for tests and metrics."""

    compiled: int = 0
    queries: int = 0
    cache_hits: int = 0
    candidates: int = 0


K = TypeVar("K")
V = TypeVar("V")


@dataclass
class _Lru(Generic[K, V]):
    """Small least-recently-used map."""

    limit: int
    data: OrderedDict[K, V] = field(default_factory=OrderedDict)

    def get(self, key: K) -> tuple[bool, V | None]:
        if key in self.data:
            self.data.move_to_end(key)
            return True, self.data[key]
        return False, None

    def put(self, key: K, value: V) -> None:
        self.data[key] = value
        self.data.move_to_end(key)
        while len(self.data) > self.limit:
            self.data.popitem(last=False)


class GpuSelector:
    """Chooses GPU sets; owns the per-topology tables and the answer cache.

    One instance per scheduler (or simulator run); not shared across threads.
    """

    def __init__(
        self,
        table: PairScoreTable = DEFAULT_TABLE,
        *,
        bandwidth: LinkBandwidth = DEFAULT_BANDWIDTH,
        max_topologies: int = 64,
        max_answers: int = 200_000,
    ) -> None:
        self.table = table
        self.bandwidth = bandwidth
        self.stats = SelectorStats()
        self._compiled: _Lru[str, CompiledTopology] = _Lru(max_topologies)
        self._answers: _Lru[tuple[str, int, int, Placement], Selection | None] = _Lru(max_answers)
        self._plugin_answers: _Lru[tuple[str, int, int], tuple[int, ...]] = _Lru(max_answers)

    def compile(self, topology: Topology) -> CompiledTopology:
        """The (cached) search tables of a topology."""
        found, compiled = self._compiled.get(topology.key)
        if found and compiled is not None:
            return compiled
        compiled = compile_topology(topology, self.table, self.bandwidth)
        self.stats.compiled += 1
        self._compiled.put(topology.key, compiled)
        return compiled

    def busbw(self, topology: Topology, gpus: tuple[int, ...]) -> float | None:
        """Ring bus bandwidth of a GPU set on a topology (GB/s; None for one GPU)."""
        return self.compile(topology).busbw_of(sum(1 << g for g in set(gpus)))

    def best_set(
        self,
        topology: Topology,
        free_mask: int,
        size: int,
        placement: Placement = Placement.BEST_EFFORT,
    ) -> Selection | None:
        """Best set of `size` GPUs among `free_mask` under `placement`; None if none fits."""
        compiled = self.compile(topology)
        free = free_mask & compiled.allocatable
        self.stats.queries += 1
        key = (compiled.key, free, size, placement)
        found, answer = self._answers.get(key)
        if found:
            self.stats.cache_hits += 1
            return answer
        if compiled.size <= MAX_EXACT_GPUS:
            answer = self._exact(compiled, free, size, placement)
        else:
            answer = self._greedy(compiled, free, size, placement)
        self._answers.put(key, answer)
        return answer

    def _exact(
        self, c: CompiledTopology, free: int, size: int, placement: Placement
    ) -> Selection | None:
        if size <= 0 or size > c.size or bin(free).count("1") < size:
            return None
        candidates = c.by_size[size]
        candidates = candidates[(candidates & ~free) == 0]
        if placement is Placement.NVLINK:
            candidates = candidates[c.nvlink_clique[candidates]]
        elif placement is Placement.SINGLE_NUMA:
            candidates = candidates[c.single_numa[candidates]]
        self.stats.candidates += int(candidates.size)
        if candidates.size == 0:
            return None
        busbw = c.busbw[candidates]
        candidates = candidates[busbw == busbw.max()]
        scores = c.set_scores[candidates]
        candidates = candidates[scores == scores.max()]
        leftover = c.set_scores[free ^ candidates]
        candidates = candidates[leftover == leftover.max()]
        mask = int(candidates[int(np.argmax(c.lex_rank[candidates]))])
        return Selection(
            mask_to_indices(mask), mask, int(c.set_scores[mask]), int(c.set_scores[free ^ mask]),
            busbw=c.busbw_of(mask),
        )  # fmt: skip

    def _greedy(
        self, c: CompiledTopology, free: int, size: int, placement: Placement
    ) -> Selection | None:
        free_list = mask_to_indices(free)
        if size <= 0 or len(free_list) < size:
            return None
        best: tuple[float, int, int, tuple[int, ...]] | None = None
        for seed in free_list:
            chosen = [seed]
            mask = 1 << seed
            while len(chosen) < size:
                options = [
                    (sum(c.matrix[g][o] for o in chosen), -g, g)
                    for g in free_list
                    if not mask & (1 << g) and c.satisfies(mask | (1 << g), placement)
                ]
                self.stats.candidates += len(options)
                if not options:
                    break
                g = max(options)[2]
                chosen.append(g)
                mask |= 1 << g
            if len(chosen) < size or not c.satisfies(mask, placement):
                continue
            indices = tuple(sorted(chosen))
            ring = c.busbw_of(mask) or 0.0
            key = (ring, c.score_of(mask), c.score_of(free ^ mask), tuple(-i for i in indices))
            if best is None or key > (*best[:3], tuple(-i for i in best[3])):
                best = (ring, key[1], key[2], indices)
        if best is None:
            return None
        mask = sum(1 << i for i in best[3])
        return Selection(
            best[3], mask, best[1], best[2], exact=False, busbw=c.busbw_of(mask)
        )  # fmt: skip

    def device_plugin_set(self, topology: Topology, free_mask: int, size: int) -> tuple[int, ...]:
        """NVIDIA device plugin's default pick (see device_plugin.device_plugin_set), cached."""
        free = free_mask & topology.allocatable_mask
        key = (topology.key, free, size)
        found, answer = self._plugin_answers.get(key)
        if found and answer is not None:
            return answer
        answer = device_plugin_set(topology, free, size)
        self._plugin_answers.put(key, answer)
        return answer
