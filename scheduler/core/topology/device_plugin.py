"""Emulation of the NVIDIA device plugin's default GPU choice (go-gpuallocator besteffort).

Upstream pads the available GPUs to a multiple of the request with empty slots, walks every
partition of them into request-sized groups (a group holds either no padding or all of it),
keeps the first partition with the highest total score, and returns that partition's first
group with the highest score. Its pair scores count only direct GPU-to-GPU NVLinks (NVSwitch
links earn nothing) and no NUMA correction: `DEVICE_PLUGIN_TABLE`. A single GPU is the
lowest free index.

We reproduce the walk's order exactly with a memoised recursion over bitmasks (the first
partition found in upstream's order is the one our strict-greater comparison keeps), so it
stays fast on 16-GPU nodes (above 16 free GPUs a greedy pick stands in). One deliberate
difference: a group containing padding is never returned (upstream can return one when it
outscores every full group, which hands the kubelet fewer GPUs than asked); we return the
best full group of the winning partition instead.

The scheduler uses this for pods holding GPUs nobody recorded and for the simulator's
count-only policy.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from itertools import combinations

import numpy as np

from scheduler.core.topology.schema import Topology
from scheduler.core.topology.scoring import DEVICE_PLUGIN_TABLE, PairScoreTable, pair_matrix

MAX_EXACT_FREE = 16
"""Most free GPUs walked exactly; beyond, a greedy pick (upstream itself would not finish)."""


def _greedy(matrix: tuple[tuple[int, ...], ...], real: list[int], size: int) -> tuple[int, ...]:
    """Grow a group from the lowest free GPU by the best-scoring addition (lowest on ties)."""
    chosen = [real[0]]
    while len(chosen) < size:
        _, neg_index = max((sum(matrix[g][c] for c in chosen), -g) for g in real if g not in chosen)
        chosen.append(-neg_index)
    return tuple(sorted(chosen))


def device_plugin_set(
    topology: Topology,
    free_mask: int,
    size: int,
    table: PairScoreTable = DEVICE_PLUGIN_TABLE,
) -> tuple[int, ...]:
    """GPU indices the device plugin would pick from `free_mask`; () when too few are free."""
    free = free_mask & topology.allocatable_mask
    real = [i for i in range(topology.size) if free & (1 << i)]
    if size <= 0 or len(real) < size:
        return ()
    if size == 1:
        return (real[0],)
    matrix = pair_matrix(topology, table)
    if len(real) > MAX_EXACT_FREE:
        return _greedy(matrix, real, size)
    r = len(real)
    padding = (-r) % size
    # Slots: bit s < r is the s-th free GPU (index order), bits r.. are padding (score 0).
    slot_count = r + padding
    pad_bits = ((1 << slot_count) - 1) & ~((1 << r) - 1)
    weights = np.array([[matrix[a][b] for b in real] for a in real], dtype=np.int64)
    masks = np.arange(1 << r, dtype=np.int64)
    bits = (masks[None, :] >> np.arange(r, dtype=np.int64)[:, None]) & 1
    scores: list[int] = ((bits * (weights @ bits)).sum(axis=0) // 2).tolist()
    real_bits = (1 << r) - 1

    memo: dict[int, tuple[int, tuple[int, ...]]] = {}

    def best(remaining: int) -> tuple[int, tuple[int, ...]]:
        """Best partition of the slots in `remaining`: (score, group masks in upstream order)."""
        cached = memo.get(remaining)
        if cached is not None:
            return cached
        if remaining.bit_count() == size:
            result = (scores[remaining & real_bits], (remaining,))
            memo[remaining] = result
            return result
        first = remaining & -remaining
        rest = [s for s in range(r) if remaining & (1 << s) and (1 << s) != first]
        # Upstream walks combinations of all remaining slots in lexicographic order and skips
        # groups holding only part of the padding; merge the two valid kinds in that order.
        streams: list[Iterator[tuple[int, ...]]] = [combinations(rest, size - 1)]
        if remaining & pad_bits and size - 1 - padding >= 0:
            pads = tuple(range(r, slot_count))
            streams.append(c + pads for c in combinations(rest, size - 1 - padding))
        winner: tuple[int, tuple[int, ...]] | None = None
        for combo in heapq.merge(*streams):
            group = first
            for s in combo:
                group |= 1 << s
            sub_score, sub_groups = best(remaining & ~group)
            total = scores[group & real_bits] + sub_score
            if winner is None or total > winner[0]:
                winner = (total, (group, *sub_groups))
        assert winner is not None  # padding keeps every remainder divisible by size
        memo[remaining] = winner
        return winner

    _, partition = best((1 << slot_count) - 1)
    chosen = max(
        (g for g in partition if not g & pad_bits),
        key=lambda g: (scores[g], -partition.index(g)),
    )
    return tuple(real[s] for s in range(r) if chosen & (1 << s))
