"""GPUTopology: GPU pods go where their best GPU set is best, and get that set.

Only pods requesting the GPU resource (`nvidia.com/gpu` unless `resourceName` says otherwise)
are concerned. PreFilter rejects a pod whose `topo-scheduler.io/gpu-placement` annotation is
not understood. Filter: the node needs enough free allocatable GPUs (healthy, not MIG) and a
set meeting the placement policy; a node without a valid topology annotation passes for
`best-effort` only (NodeResourcesFit counts its GPUs). Score (0..100, docs/gpu-topology.md):

    score = 80 * Q / Q_max  +  20 * k / F     (integer division for each part)

Q orders the node's best set for the pod as the selection does: its ring bus bandwidth B first,
its set score S second (Q = B in MB/s x (S_max + 1) + S; 0 on count-only nodes), Q_max: the
largest Q among the feasible nodes (the first part is 80 for every node when Q_max is 0), k:
GPUs asked, F: free GPUs on the node before placing. The fastest set wins across node types;
among equally good sets the node the pod fills most tightly wins. A one-GPU pod has no ring:
its first part is 80 x (P_max - P) / P_max, P the bandwidth of the node's fastest free GPU pair
(0 with fewer than two free GPUs or no topology), so it takes a GPU where rings lose least and
leaves the well-connected GPUs to multi-GPU pods.

The vector path groups the candidate nodes by (topology id, free-GPU mask) with numpy and asks
the selector once per group; the reference path walks nodes one by one with a brute-force
search, and tests hold the two equal. The Allocator hands the chosen node's best set to the
cycle, which assumes it with the pod (the lowest free indices on a node without a topology).

Per cycle (CycleState): PreFilter reads the GPU count and parses the placement annotation
once; Filter's per-node verdicts are reused by Score. A pod asking for no GPUs skips Filter.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from plugins._args import string_list
from scheduler.core.config import ConfigError, SchedulerConfiguration, strict_mapping
from scheduler.core.framework import (
    SKIP,
    Allocation,
    CycleState,
    PreFilterResult,
    ReasonMasks,
)
from scheduler.core.model import PodInfo
from scheduler.core.network import DEFAULT_NIC_GBPS, NetworkBandwidth, NodeLinks
from scheduler.core.quantity import is_extended_resource
from scheduler.core.reservation import MAX_TIMEOUT as MAX_RESERVATION
from scheduler.core.snapshot import BoolArray, IntArray, NodeState, Snapshot
from scheduler.core.topology.bandwidth import (
    DEFAULT_BANDWIDTH,
    LinkBandwidth,
    bandwidth_matrix,
    gbps_problem,
    ring_busbw,
)
from scheduler.core.topology.schema import (
    ANNOTATION_PLACEMENT,
    ANNOTATION_TOPOLOGY,
    GPU_RESOURCE,
    MAX_GPUS,
    Placement,
    Topology,
    TopologyError,
    parse_placement,
    parse_topology,
)
from scheduler.core.topology.scoring import DEFAULT_TABLE, PairScoreTable, pair_matrix
from scheduler.core.topology.select import GpuSelector

NAME = "GPUTopology"
_KEY_BITS = 32
_KEY_MASK = (1 << _KEY_BITS) - 1
DEFAULT_RESOURCE = GPU_RESOURCE
QUALITY_POINTS = 80
PACKING_POINTS = 20

REASON_NOT_ENOUGH = "node(s) didn't have enough free GPUs"
REASON_NO_TOPOLOGY = "node(s) didn't have a valid GPU topology"


def reason_for(placement: Placement, count: int) -> str:
    """Filter reason when free GPUs suffice in number but not under the placement policy."""
    if placement is Placement.NVLINK:
        return f"node(s) didn't have {count} NVLink-connected free GPUs"
    if placement is Placement.SINGLE_NUMA:
        return f"node(s) didn't have {count} free GPUs on one NUMA node"
    return REASON_NOT_ENOUGH


@dataclass(frozen=True, slots=True)
class GPUTopologyArgs:
    """Plugin args: the GPU resource name, the pair-score table, the link bandwidths, the
    network topology levels (node label keys, widest first) that pod groups are placed in, the
    network's bandwidths the group cycle prices their placements with (None: not given, the
    defaults), and the seconds a gang reservation holds its nodes (None: not given, 0: off;
    `scheduler.core.reservation`)."""

    resource_name: str = DEFAULT_RESOURCE
    pair_scores: PairScoreTable = DEFAULT_TABLE
    link_bandwidth: LinkBandwidth = DEFAULT_BANDWIDTH
    topology_levels: tuple[str, ...] = ()
    network_bandwidth: NetworkBandwidth | None = None
    gang_reservation_seconds: float | None = None

    @property
    def network(self) -> NetworkBandwidth:
        """The network figures for the group cycle (defaults when not given), with this
        profile's GPU link bandwidths."""
        network = self.network_bandwidth or NetworkBandwidth()
        return NetworkBandwidth(
            network.default, network.core_gbps, network.nodes, self.link_bandwidth
        )


def parse_args(raw: Mapping[str, Any] | None, path: str) -> GPUTopologyArgs:
    """GPUTopologyArgs: `resourceName`, `pairScores` ({sys,node,phb,pxb,pix,board,nvlink,...}),
    `linkBandwidth` (GB/s: {nvlink,board,pix,pxb,phb,node,sys}), `topologyLevels` ([node label
    key, ...], widest first), `networkBandwidth` ({node, levels: {key: GB/s}, core}),
    `gangReservationSeconds` (0 to 604,800; 0: no reservations)."""
    data = strict_mapping(
        raw,
        path,
        {
            "resourceName",
            "pairScores",
            "linkBandwidth",
            "topologyLevels",
            "networkBandwidth",
            "gangReservationSeconds",
        },
    )
    resource = data.get("resourceName", DEFAULT_RESOURCE)
    if not isinstance(resource, str) or not resource:
        raise ConfigError(f"{path}.resourceName: must be a non-empty string")
    if not is_extended_resource(resource):
        raise ConfigError(
            f"{path}.resourceName: must be an extended resource (a domain-qualified name "
            f"outside kubernetes.io, e.g. {DEFAULT_RESOURCE}), got {resource!r}"
        )
    try:
        table = PairScoreTable.from_args(data.get("pairScores"), path=f"{path}.pairScores")
        bandwidth = LinkBandwidth.from_args(data.get("linkBandwidth"), path=f"{path}.linkBandwidth")
    except TopologyError as exc:
        raise ConfigError(str(exc)) from None
    levels = topology_levels(data.get("topologyLevels"), path)
    network = None
    if data.get("networkBandwidth") is not None:
        network = network_bandwidth_args(data["networkBandwidth"], f"{path}.networkBandwidth")
    reservation = None
    if data.get("gangReservationSeconds") is not None:
        reservation = gang_reservation_seconds(
            data["gangReservationSeconds"], f"{path}.gangReservationSeconds"
        )
    return GPUTopologyArgs(resource, table, bandwidth, levels, network, reservation)


def gang_reservation_seconds(value: Any, path: str) -> float:
    """`gangReservationSeconds`: how long a gang reservation holds its nodes before it
    expires, 0 (no reservations) to 604,800 (7 days)."""
    valid = isinstance(value, int | float) and not isinstance(value, bool)
    if not valid or not math.isfinite(value) or not 0 <= value <= MAX_RESERVATION:
        raise ConfigError(
            f"{path}: must be seconds from 0 to {MAX_RESERVATION:,.0f}, got {value!r}"
        )
    return float(value)


def _gbps(value: Any, path: str) -> float:
    problem = gbps_problem(value)
    if problem is not None:
        raise ConfigError(f"{path}: {problem}")
    return float(value)


def network_bandwidth_args(raw: Any, path: str) -> NetworkBandwidth:
    """`networkBandwidth`: `node` (a node's NICs together, GB/s per direction; default 50),
    `levels` ({node label key: GB/s per GPU across the domains of that level}; a level not
    named is non-blocking), `core` (GB/s per GPU between nodes sharing no domain; default no
    limit beyond the levels')."""
    data = strict_mapping(raw, path, {"node", "levels", "core"})
    node = DEFAULT_NIC_GBPS
    if data.get("node") is not None:
        node = _gbps(data["node"], f"{path}.node")
    levels: dict[str, float] = {}
    raw_levels = data.get("levels")
    if raw_levels is not None:
        if not isinstance(raw_levels, Mapping):
            raise ConfigError(f"{path}.levels: must be a mapping of node label key to GB/s")
        for key, value in raw_levels.items():
            if not isinstance(key, str) or not key.strip() or any(c.isspace() for c in key):
                raise ConfigError(f"{path}.levels: must be keyed by node label keys, got {key!r}")
            levels[key] = _gbps(value, f"{path}.levels.{key}")
    core = _gbps(data["core"], f"{path}.core") if data.get("core") is not None else None
    return NetworkBandwidth(NodeLinks(node, levels), core)


def network_bandwidth(config: SchedulerConfiguration) -> tuple[NetworkBandwidth, bool]:
    """The network figures the group cycle prices placements with: those of the first profile
    that declares `networkBandwidth` (with that profile's link bandwidths), and whether one
    does; else the defaults with the first profile's link bandwidths (profiles share the
    group cycle, as they share `topologyLevels`)."""
    found: GPUTopologyArgs | None = None
    for profile in config.profiles:
        path = profile.args_path.get(NAME, "")
        args = parse_args(profile.plugin_args.get(NAME), path)
        if args.network_bandwidth is not None:
            return args.network, True
        found = found or args
    return (found.network if found is not None else NetworkBandwidth()), False


def topology_levels(raw: Any, path: str) -> tuple[str, ...]:
    """`topologyLevels`: distinct, non-empty node label keys, widest first."""
    levels = string_list(raw, f"{path}.topologyLevels")
    for i, key in enumerate(levels):
        where = f"{path}.topologyLevels[{i}]"
        if not key.strip() or any(c.isspace() for c in key):
            raise ConfigError(f"{where}: must be a node label key, got {key!r}")
        if key in levels[:i]:
            raise ConfigError(f'{where}: Duplicate value: "{key}"')
    return levels


@dataclass(frozen=True, slots=True)
class _Verdicts:
    """Per evaluated slot: whether a set exists, its set score, the free GPU count, and the
    bandwidth at stake (MB/s): the chosen set's busbw, or for a one-GPU pod the busbw of the
    node's fastest free pair."""

    slots: IntArray
    fits: BoolArray
    set_score: IntArray
    free_count: IntArray
    busbw: IntArray


def _popcount(values: IntArray) -> IntArray:
    return np.bitwise_count(values).astype(np.int64)


def _mbps(busbw: float | None) -> int:
    """GB/s -> integer MB/s for the node score (0 when there is no ring)."""
    return 0 if busbw is None else round(busbw * 1000)


def reference_best(
    topology: Topology,
    free: int,
    count: int,
    placement: Placement,
    table: PairScoreTable,
    bandwidth: LinkBandwidth = DEFAULT_BANDWIDTH,
) -> tuple[int, ...] | None:
    """Brute-force best set (max busbw, then set score, then leftover score, then lowest
    indices)."""
    matrix = pair_matrix(topology, table)
    links = bandwidth_matrix(topology, bandwidth)
    gpus = [g.index for g in topology.gpus if g.allocatable and free >> g.index & 1]

    def score(members: Sequence[int]) -> int:
        return sum(matrix[a][b] for a, b in itertools.combinations(members, 2))

    best: tuple[float, int, int] | None = None
    chosen: tuple[int, ...] | None = None
    for combo in itertools.combinations(gpus, count):
        if placement is Placement.NVLINK and any(
            topology.link(a, b).nvlinks == 0 for a, b in itertools.combinations(combo, 2)
        ):
            continue
        if placement is Placement.SINGLE_NUMA:
            numas = {topology.gpus[g].numa_node for g in combo}
            if len(numas) != 1 or None in numas:
                continue
        ring = ring_busbw(links, combo) or 0.0
        key = (ring, score(combo), score([g for g in gpus if g not in combo]))
        if best is None or key > best:
            best, chosen = key, combo
    return chosen


@dataclass(slots=True)
class _CycleData:
    """What one cycle knows of the pod: GPUs asked, placement (or why it is not understood),
    and Filter's verdicts for Score to reuse."""

    count: int
    placement: Placement
    problem: str | None
    verdicts: tuple[BoolArray, _Verdicts] | None = None  # (slots evaluated, verdicts)


class GPUTopology:
    """PreFilter, filter, score and allocator for GPU pods."""

    name = NAME

    def __init__(self, args: GPUTopologyArgs) -> None:
        self.args = args
        self.selector = GpuSelector(args.pair_scores, bandwidth=args.link_bandwidth)

    # ------------------------------------------------------------------ helpers

    def _count(self, pod: PodInfo) -> int:
        return int(pod.requests.get(self.args.resource_name, 0))

    def _placement(self, pod: PodInfo) -> tuple[Placement, str | None]:
        try:
            return parse_placement(pod.annotations.get(ANNOTATION_PLACEMENT), pod=pod.key), None
        except TopologyError as exc:
            return Placement.BEST_EFFORT, str(exc)

    def _cycle(self, state: CycleState, pod: PodInfo) -> _CycleData:
        """The pod's GPU request, parsed once per cycle (at PreFilter, or on first use)."""
        data: _CycleData | None = state.get(NAME)
        if data is None:
            placement, problem = self._placement(pod)
            data = _CycleData(self._count(pod), placement, problem)
            state.write(NAME, data)
        return data

    def _evaluate(self, data: _CycleData, snapshot: Snapshot, mask: BoolArray) -> _Verdicts:
        """Best set per slot in `mask` (slots with a topology); Score reuses Filter's work
        (the snapshot does not change within a cycle)."""
        if data.verdicts is not None:
            evaluated, done = data.verdicts
            if not np.any(mask & ~evaluated):
                keep = mask[done.slots]
                return _Verdicts(
                    done.slots[keep],
                    done.fits[keep],
                    done.set_score[keep],
                    done.free_count[keep],
                    done.busbw[keep],
                )
        verdicts = self._search(snapshot, mask, data.count, data.placement)
        data.verdicts = (mask.copy(), verdicts)
        return verdicts

    def _search(
        self, snapshot: Snapshot, mask: BoolArray, count: int, placement: Placement
    ) -> _Verdicts:
        """Best set per slot in `mask` (slots with a topology), one search per group."""
        gpus = snapshot.gpus
        slots = np.flatnonzero(mask & (gpus.topology_id >= 0)).astype(np.int64)
        fits = np.zeros(len(slots), np.bool_)
        scores = np.zeros(len(slots), np.int64)
        if len(slots) == 0:
            return _Verdicts(slots, fits, scores, np.zeros(0, np.int64), np.zeros(0, np.int64))
        allocatable = np.array([t.allocatable_mask for t in gpus.topologies], np.int64)
        tids = gpus.topology_id[slots]
        free = allocatable[tids] & ~gpus.used[slots]
        # Nodes sharing a topology and a free mask share the answer: one search per group.
        # Free masks of nodes up to 32 GPUs fit beside the topology id in one int64 key.
        if max(t.size for t in gpus.topologies) <= _KEY_BITS:
            keys, inverse = np.unique((tids << _KEY_BITS) | free, return_inverse=True)
            groups = [(int(k) >> _KEY_BITS, int(k) & _KEY_MASK) for k in keys]
        else:
            pairs, inverse = np.unique(np.stack([tids, free], axis=1), axis=0, return_inverse=True)
            groups = [(int(t), int(f)) for t, f in pairs]
        group_fits = np.zeros(len(groups), np.bool_)
        group_scores = np.zeros(len(groups), np.int64)
        group_busbw = np.zeros(len(groups), np.int64)
        for g, (tid, free_mask) in enumerate(groups):
            chosen = self.selector.best_set(gpus.topologies[tid], free_mask, count, placement)
            if chosen is not None:
                group_fits[g] = True
                group_scores[g] = chosen.score
                group_busbw[g] = _mbps(chosen.busbw)
                if count == 1:
                    pair = self.selector.best_set(gpus.topologies[tid], free_mask, 2)
                    group_busbw[g] = _mbps(pair.busbw if pair is not None else None)
        inverse = inverse.reshape(-1)
        fits = group_fits[inverse]
        scores = group_scores[inverse]
        return _Verdicts(slots, fits, scores, _popcount(free), group_busbw[inverse])

    # ------------------------------------------------------------------ pre-filter

    def pre_filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot
    ) -> PreFilterResult | None:
        """Parse the pod's GPU request once; reject a placement annotation not understood;
        a pod asking for no GPUs skips Filter."""
        data = self._cycle(state, pod)
        if data.count <= 0:
            return SKIP
        return PreFilterResult(unschedulable=data.problem) if data.problem else None

    # ------------------------------------------------------------------ filter

    def filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: BoolArray
    ) -> ReasonMasks:
        data = self._cycle(state, pod)
        count, placement = data.count, data.placement
        if count <= 0:
            return []
        if data.problem is not None:
            return [(data.problem, candidates.copy())]
        verdicts = self._evaluate(data, snapshot, candidates)
        not_enough = np.zeros(snapshot.capacity, np.bool_)
        policy = np.zeros(snapshot.capacity, np.bool_)
        short = verdicts.free_count < count
        not_enough[verdicts.slots[short]] = True
        policy[verdicts.slots[~short & ~verdicts.fits]] = True
        masks: ReasonMasks = [(REASON_NOT_ENOUGH, not_enough)]
        if placement is not Placement.BEST_EFFORT:
            masks.append((reason_for(placement, count), policy))
            masks.append((REASON_NO_TOPOLOGY, candidates & (snapshot.gpus.topology_id < 0)))
        return masks

    def _node_topology(self, node: NodeState) -> Topology | None:
        text = node.info.annotations.get(ANNOTATION_TOPOLOGY)
        if text is None:
            return None
        try:
            return parse_topology(text, node=node.info.name)
        except TopologyError:
            return None

    def _node_free(self, node: NodeState, topology: Topology) -> int:
        used = 0
        for held in node.gpu_sets.values():
            for index in held:
                used |= 1 << index
        return topology.allocatable_mask & ~used

    def filter_node(self, pod: PodInfo, node: NodeState) -> list[str]:
        count = self._count(pod)
        if count <= 0:
            return []
        placement, problem = self._placement(pod)
        if problem is not None:
            return [problem]
        topology = self._node_topology(node)
        if topology is None:
            return [] if placement is Placement.BEST_EFFORT else [REASON_NO_TOPOLOGY]
        free = self._node_free(node, topology)
        if bin(free).count("1") < count:
            return [REASON_NOT_ENOUGH]
        if self._reference_best(topology, free, count, placement) is None:
            return [reason_for(placement, count)]
        return []

    # ------------------------------------------------------------------ score

    def _reference_best(
        self, topology: Topology, free: int, count: int, placement: Placement
    ) -> tuple[int, ...] | None:
        args = self.args
        return reference_best(
            topology, free, count, placement, args.pair_scores, args.link_bandwidth
        )

    @staticmethod
    def _combine(
        set_scores: list[int], busbw: list[int], counts: list[int], count: int
    ) -> list[int]:
        if count == 1:  # the fastest free pair given up
            top = max(busbw, default=0)
            keys = [top - b for b in busbw]
        else:
            widest = max(set_scores, default=0) + 1
            keys = [b * widest + s for b, s in zip(busbw, set_scores, strict=True)]
            top = max(keys, default=0)
        out = []
        for key, free in zip(keys, counts, strict=True):
            quality = QUALITY_POINTS if top == 0 else QUALITY_POINTS * key // top
            out.append(quality + PACKING_POINTS * count // max(free, count))
        return out

    def score(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, feasible: BoolArray
    ) -> IntArray | None:
        data = self._cycle(state, pod)
        count = data.count
        if count <= 0:
            return None
        out = np.zeros(snapshot.capacity, np.int64)
        set_scores = np.zeros(snapshot.capacity, np.int64)
        busbw = np.zeros(snapshot.capacity, np.int64)
        free = np.zeros(snapshot.capacity, np.int64)
        verdicts = self._evaluate(data, snapshot, feasible)
        set_scores[verdicts.slots] = verdicts.set_score
        busbw[verdicts.slots] = verdicts.busbw
        free[verdicts.slots] = verdicts.free_count
        plain = feasible & (snapshot.gpus.topology_id < 0)
        row = snapshot.row.get(self.args.resource_name)
        if row is not None:
            left = snapshot.allocatable[row] - snapshot.requested[row]
            free[plain] = left[plain]
        if not feasible.any():
            return out
        if count == 1:  # the fastest free pair given up: the less, the better
            top = int(busbw[feasible].max())
            keys = top - busbw
        else:  # busbw first, set score second, ordered as the selection orders
            keys = busbw * (int(set_scores[feasible].max()) + 1) + set_scores
            top = int(keys[feasible].max())
        quality = (
            np.full(snapshot.capacity, QUALITY_POINTS, np.int64)
            if top == 0
            else QUALITY_POINTS * keys // top
        )
        packing = PACKING_POINTS * count // np.maximum(free, count)
        out[feasible] = (quality + packing)[feasible]
        return out

    def score_nodes(
        self, pod: PodInfo, feasible: Sequence[NodeState], all_nodes: Sequence[NodeState]
    ) -> list[int] | None:
        count = self._count(pod)
        if count <= 0:
            return None
        placement, _ = self._placement(pod)
        set_scores: list[int] = []
        busbw: list[int] = []
        counts: list[int] = []
        for node in feasible:
            topology = self._node_topology(node)
            if topology is None:
                held = sum(p.requests.get(self.args.resource_name, 0) for p in node.pods)
                allocatable = node.info.allocatable.get(self.args.resource_name, 0)
                set_scores.append(0)
                busbw.append(0)
                counts.append(allocatable - held)
                continue
            free = self._node_free(node, topology)
            chosen = self._reference_best(topology, free, count, placement) or ()
            matrix = pair_matrix(topology, self.args.pair_scores)
            pairs = itertools.combinations(chosen, 2)
            set_scores.append(sum(matrix[a][b] for a, b in pairs))
            links = bandwidth_matrix(topology, self.args.link_bandwidth)
            if count == 1:
                chosen = self._reference_best(topology, free, 2, Placement.BEST_EFFORT) or ()
            busbw.append(_mbps(ring_busbw(links, chosen)))
            counts.append(bin(free).count("1"))
        return self._combine(set_scores, busbw, counts, count)

    # ------------------------------------------------------------------ allocate

    def allocate(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, slot: int
    ) -> Allocation | None:
        """The best set on the chosen node.

        On a node without a topology every pair looks alike, so the set is the lowest free
        indices (what the device plugin picks when it sees no links), without a score.
        """
        data = self._cycle(state, pod)
        count = data.count
        if count <= 0:
            return None
        topology = snapshot.gpus.topology[slot]
        if topology is None:
            row = snapshot.row.get(self.args.resource_name)
            total = int(snapshot.allocatable[row, slot]) if row is not None else 0
            total = min(total, MAX_GPUS)  # GPU indices fit one int64 mask, whatever the node says
            used = int(snapshot.gpus.used[slot])
            unused = [i for i in range(total) if not used >> i & 1]
            return Allocation(tuple(unused[:count])) if len(unused) >= count else None
        free = snapshot.gpus.free_mask(slot)
        chosen = self.selector.best_set(topology, free, count, data.placement)
        if chosen is None:
            return None
        links = tuple(
            f"{a}-{b} " + (f"NV{lk.nvlinks}" if lk.nvlinks else (lk.pcie or "unknown"))
            for a, b in itertools.combinations(chosen.gpus, 2)
            for lk in (topology.link(a, b),)
        )
        return Allocation(chosen.gpus, chosen.score, links, chosen.busbw)


def new(args: Mapping[str, Any] | None, path: str) -> GPUTopology:
    return GPUTopology(parse_args(args, path))


__all__: list[str] = [
    "NAME",
    "GPUTopology",
    "GPUTopologyArgs",
    "network_bandwidth",
    "new",
    "parse_args",
    "reference_best",
]
