"""The network model: what an all-reduce costs a job on a placement (its nodes, the GPU set on
each, the network levels between them). The group cycle ranks a pod group's candidate
placements by it (`scheduler.core.group`); the simulator prices job times with it
(`scheduler.sim.network`).

All-reduce time per byte (NCCL's bus-bandwidth convention: an all-reduce over n ranks moves
2 (n - 1) / n bytes per byte through each rank's bottleneck link, busbw = algbw x 2 (n - 1) / n):

- inside one node, one ring over the job's GPUs there: `c(g) / busbw(set)`, with
  `c(n) = 2 (n - 1) / n` and `busbw` the ring model of `scheduler.core.topology.bandwidth`;
- across N nodes, hierarchical: a reduce-scatter inside each node, an all-reduce of each GPU's
  1/g shard across the N nodes over its own rail, an all-gather inside the node again:
  `max_i c(g_i) / busbw_i + c(N) / (g_min x B)`, where `g_min` is the fewest GPUs the job has
  on one of its nodes and `B` the slowest link the rails cross (GB/s per GPU and direction):
  each node's NIC share (its NICs together / its GPUs), and the bandwidth of every network
  level from the narrowest up to the narrowest one whose one domain holds all the nodes (every
  level and the core's when none does).

A placement's effective bus bandwidth is `c(n) / t` over its n GPUs.

The scheduler's figures (`NetworkBandwidth`) come from the GPUTopology plugin's
`networkBandwidth` args (docs/gang-scheduling.md): the NICs of a node (50 GB/s by default,
4 x 100 Gb/s), a bandwidth per level (none by default: a non-blocking fat tree, every GPU keeps
its NIC share) and the core's (none by default).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache

from scheduler.core.topology.bandwidth import DEFAULT_BANDWIDTH, LinkBandwidth

__all__ = [
    "DEFAULT_NIC_GBPS",
    "NetworkBandwidth",
    "NodeLinks",
    "allreduce_factor",
    "allreduce_time",
    "bus_bandwidth",
    "crossing_gbps",
]

DEFAULT_NIC_GBPS = 50.0
"""A node's NICs together, GB/s per direction: 4 x 100 Gb/s (a DGX-1's EDR InfiniBand)."""


@cache
def allreduce_factor(n: int) -> float:
    """Bytes through each rank's bottleneck per byte all-reduced over n ranks: 2 (n - 1) / n."""
    return 2.0 * (n - 1) / n if n > 1 else 0.0


def allreduce_time(
    intra: Iterable[tuple[int, float | None]], nodes: int, fewest: int, gbps: float
) -> float:
    """Seconds per GB of a hierarchical all-reduce: `intra` is (GPUs, ring busbw in GB/s) per
    node (a busbw of None or 0 costs nothing: one GPU, or a node whose links are unknown),
    `nodes` the node count, `fewest` the fewest GPUs on one node and `gbps` the slowest link
    the rails cross per GPU."""
    t = 0.0
    for gpus, busbw in intra:
        if gpus > 1 and busbw:
            t = max(t, allreduce_factor(gpus) / busbw)
    if nodes > 1 and fewest > 0 and gbps > 0 and math.isfinite(gbps):
        t += allreduce_factor(nodes) / (fewest * gbps)
    return t


def bus_bandwidth(gpus: int, seconds_per_gb: float | None) -> float | None:
    """The effective all-reduce bus bandwidth (GB/s) over `gpus` GPUs taking this long."""
    if not seconds_per_gb or gpus < 2:
        return None
    return allreduce_factor(gpus) / seconds_per_gb


def crossing_gbps(
    nic_per_gpu: Sequence[float],
    level_gbps: Sequence[Sequence[float]],
    domains: Sequence[Sequence[str | None]],
    levels: Sequence[str],
    core_gbps: float | None,
) -> tuple[float, str | None]:
    """The per-GPU bandwidth between these nodes (the slowest link crossed) and the narrowest
    level holding them all (None: none). Per node: its NIC share per GPU, the bandwidth of each
    level (widest first; inf: no limit) and its domain of each level (widest first; None:
    unlabelled)."""
    gbps = min(nic_per_gpu)
    for at in range(len(levels) - 1, -1, -1):  # narrowest first
        gbps = min([gbps, *(node[at] for node in level_gbps)])
        first = domains[0][at]
        if first is not None and all(node[at] == first for node in domains):
            return gbps, levels[at]
    if core_gbps is not None:
        gbps = min(gbps, core_gbps)
    return gbps, None


@dataclass(frozen=True, slots=True)
class NodeLinks:
    """One node's links to the network: its NICs together (GB/s per direction) and the
    bandwidth per GPU across the domains of each level (label key -> GB/s; a level not named
    is non-blocking)."""

    nic_gbps: float = DEFAULT_NIC_GBPS
    levels: Mapping[str, float] = field(default_factory=dict)

    def level(self, key: str) -> float:
        return self.levels.get(key, math.inf)


@dataclass(frozen=True, slots=True)
class NetworkBandwidth:
    """The network figures the group cycle prices placements with: every node's links
    (`default`, or a node's own in `nodes`, by name: the simulator's node templates), the core
    between nodes sharing no domain (None: no limit beyond the widest level's) and the GPU link
    bandwidths the rings inside a node are priced with (GPUTopology's `linkBandwidth`)."""

    default: NodeLinks = field(default_factory=NodeLinks)
    core_gbps: float | None = None
    nodes: Mapping[str, NodeLinks] = field(default_factory=dict)
    link_bandwidth: LinkBandwidth = DEFAULT_BANDWIDTH

    def links(self, node: str) -> NodeLinks:
        return self.nodes.get(node, self.default)
