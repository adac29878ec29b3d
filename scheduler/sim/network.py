"""The simulator's network model: what an all-reduce costs a job on the placement it got, the
best placement of its shape it is measured against, and how much room each network level has
left for a gang.

All-reduce time per byte (NCCL's bus-bandwidth convention: an all-reduce over n ranks moves
2 (n - 1) / n bytes per byte through each rank's bottleneck link, busbw = algbw x 2 (n - 1) / n):

- inside one node, one ring over the job's GPUs there: `c(g) / busbw(set)`, with
  `c(n) = 2 (n - 1) / n` and `busbw` the scheduler's own ring model;
- across N nodes, hierarchical: a reduce-scatter inside each node (the node's ring), an
  all-reduce of each GPU's 1/g shard across the N nodes over its own rail, and an all-gather
  inside the node again: `max_i c(g_i) / busbw_i + c(N) / (g_min x B)`, where `g_min` is the
  fewest GPUs the job has on one of its nodes and `B` the slowest link the rails cross: each
  node's NIC share per GPU (`interNodeBandwidth` / GPUs of the node), and the `bandwidth` of
  every network level from the narrowest up to the narrowest one holding all the nodes (or all
  levels and `coreBandwidth` when none does).

A job's effective bus bandwidth is `c(n) / t` over its n GPUs (one node: its set's busbw). Its
run time is `left x ((1 - comm) + comm x t / t_ref)`, `t_ref` being the best placement of the
same shape (workers x GPUs): anywhere in the cluster (`jobTimeReference: cluster`, default) or
on the node type(s) it landed on (`node-type`); see docs/simulator.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scheduler.core.network import (
    NetworkBandwidth,
    NodeLinks,
    allreduce_factor,
    allreduce_time,
    crossing_gbps,
)
from scheduler.core.topology.schema import Topology
from scheduler.sim.quality import QualityModel
from scheduler.sim.scenario import NodeTemplate, Scenario, _gpus

if TYPE_CHECKING:
    from scheduler.sim.engine import JobRecord, Simulation

__all__ = [
    "GANG_WORKER_GPUS",
    "JobTime",
    "NetworkModel",
    "allreduce_factor",
    "scheduler_network",
]

GANG_WORKER_GPUS = 8
"""The worker size the fragmentation figure counts in (a node with this many GPUs free)."""
CLUSTER = "cluster"
"""The fragmentation figure's name for the whole cluster (any nodes, no shared domain)."""


@dataclass(frozen=True, slots=True)
class JobTime:
    """One run of a job (all its workers): its shape, placement and the time it cost."""

    gpus: int  # all workers together
    workers: int
    nodes: int  # distinct nodes its workers ran on
    span: str | None  # narrowest network level holding all its nodes; None: none (or one node)
    left: float  # the run time it needed at the reference placement
    run: float  # the run time it got
    busbw_gbps: float | None  # effective all-reduce bus bandwidth of the placement
    reference_busbw_gbps: float | None  # the same for the reference placement

    @property
    def stretch(self) -> float:
        return self.run / self.left if self.left > 0 else 1.0


@dataclass(frozen=True, slots=True)
class _Node:
    template: NodeTemplate
    gpus: int
    nic_per_gpu: float
    domains: tuple[str | None, ...]  # label value per level (widest first); None: unlabelled


def scheduler_network(scenario: Scenario, declared: NetworkBandwidth) -> NetworkBandwidth:
    """The scenario's network as the group cycle's figures (what an operator declares in
    GPUTopology's `networkBandwidth`): each node's NICs and level bandwidths, and the core;
    the GPU link bandwidths of `declared` (the configuration's)."""
    nodes: dict[str, NodeLinks] = {}
    for template in scenario.templates:
        links = NodeLinks(template.inter_node_gbps, dict(template.level_gbps))
        for i in range(template.count):
            nodes[f"{template.name}-{i}"] = links
    return NetworkBandwidth(
        core_gbps=scenario.core_gbps, nodes=nodes, link_bandwidth=declared.link_bandwidth
    )


class NetworkModel:
    """The scenario's nodes as the network model sees them; prices placements (cached)."""

    def __init__(self, scenario: Scenario, quality: QualityModel) -> None:
        self.quality = quality
        self.levels = scenario.network_levels  # widest first
        self.core_gbps = scenario.core_gbps
        self.reference = scenario.job_time_reference
        self.templates = [t for t in scenario.templates if t.count > 0]
        by_name = {f"{t.name}-{i}": t for t in self.templates for i in range(t.count)}
        self.nodes: dict[str, _Node] = {}
        for obj in scenario.node_objects():
            name = obj["metadata"]["name"]
            template = by_name[name]
            gpus = _gpus(template)
            labels = obj["metadata"]["labels"]
            self.nodes[name] = _Node(
                template,
                gpus,
                template.inter_node_gbps / gpus if gpus else template.inter_node_gbps,
                tuple(labels.get(key) for key in self.levels),
            )
        self.jobs: dict[str, JobTime] = {}  # job (pod key, or pod group name) -> its last run
        self._reference: dict[tuple[int, int, tuple[str, ...]], float | None] = {}
        # the fragmentation figure: per level, each 8-GPU-capable node's domain
        self._gang_nodes = [
            (name, node.domains)
            for name, node in self.nodes.items()
            if node.gpus >= GANG_WORKER_GPUS
        ]

    # ------------------------------------------------------------------ links

    def _level_gbps(self, template: NodeTemplate, key: str) -> float:
        for k, gbps in template.level_gbps:
            if k == key:
                return gbps
        return math.inf

    def crossing_gbps(self, names: Sequence[str]) -> tuple[float, str | None]:
        """The per-GPU bandwidth between these nodes (the slowest link crossed) and the
        narrowest level holding them all (None: none)."""
        nodes = [self.nodes[n] for n in names]
        return crossing_gbps(
            [node.nic_per_gpu for node in nodes],
            [[self._level_gbps(node.template, key) for key in self.levels] for node in nodes],
            [node.domains for node in nodes],
            self.levels,
            self.core_gbps,
        )

    # ------------------------------------------------------------------ placements

    def comm_time(
        self, per_node: Mapping[str, tuple[Topology | None, tuple[int, ...]]]
    ) -> tuple[float | None, str | None]:
        """All-reduce seconds per GB of a job with these GPUs on these nodes, and the
        narrowest level holding its nodes; None when it cannot be priced (a node without a
        GPU topology) or there is nothing to reduce (one GPU)."""
        intra: list[tuple[int, float | None]] = []
        for topology, gpus in per_node.values():
            if topology is None:
                return None, None
            if len(gpus) > 1:
                busbw = self.quality.busbw(topology, tuple(sorted(gpus)))
                if not busbw:
                    return None, None
                intra.append((len(gpus), busbw))
        span = None
        gbps = math.inf
        if len(per_node) > 1:
            gbps, span = self.crossing_gbps(list(per_node))
        fewest = min(len(gpus) for _, gpus in per_node.values())
        total = allreduce_time(intra, len(per_node), fewest, gbps)
        return (total if total > 0 else None), span

    def _template_time(self, template: NodeTemplate, workers: int, gpus: int) -> float | None:
        """The fastest all-reduce of `workers` x `gpus` on empty nodes of one template: every
        node count from the fewest that hold it to one worker a node, workers split evenly, in
        the narrowest level whose domain (nodesPer, at most the template's count) holds them."""
        topology = template.topology
        size = _gpus(template)
        if topology is None or gpus > size or gpus <= 0:
            return None
        per_node = size // gpus
        best: float | None = None
        first = -(-workers // per_node)
        for nodes in range(first, min(workers, template.count) + 1):
            low, extra = divmod(workers, nodes)
            intra = 0.0
            for w in {low, low + (1 if extra else 0)}:
                if w * gpus > 1:
                    busbw = self.quality.best_busbw_on_node(topology, w * gpus)
                    if not busbw:
                        return None
                    intra = max(intra, allreduce_factor(w * gpus) / busbw)
            inter = 0.0
            if nodes > 1:
                gbps = template.inter_node_gbps / size
                held = False
                for key, per in reversed(template.network):  # narrowest first
                    gbps = min(gbps, self._level_gbps(template, key))
                    if nodes <= min(per, template.count):
                        held = True
                        break
                if not held and self.core_gbps is not None:
                    gbps = min(gbps, self.core_gbps)
                inter = allreduce_factor(nodes) / (low * gpus * gbps)
            total = intra + inter
            if best is None or total < best:
                best = total
        return best

    def reference_time(
        self, workers: int, gpus: int, landed: Iterable[NodeTemplate]
    ) -> float | None:
        """The reference placement's seconds per GB for `workers` x `gpus`: the best over the
        cluster's templates, or over those it `landed` on (`node-type`); None when no single
        template holds the job."""
        names = (
            tuple(t.name for t in self.templates)
            if self.reference == "cluster"
            else tuple(sorted({t.name for t in landed}))
        )
        key = (workers, gpus, names)
        if key not in self._reference:
            chosen = [t for t in self.templates if t.name in names]
            times = [x for t in chosen if (x := self._template_time(t, workers, gpus)) is not None]
            self._reference[key] = min(times) if times else None
        return self._reference[key]

    def run_time(self, sim: Simulation, started: list[JobRecord]) -> float:
        """How long a job runs whose workers `started` now: what is left of it (all of it, or
        what a preemption left after its last checkpoint) stretched by its modelled all-reduce
        time against the reference placement's."""
        if not started:  # a worker of a job whose other workers are not all running yet
            return 0.0
        records = list(started)
        job = records[0].job
        if job.group is not None and len(records) < job.workers:  # a worker re-bound alone
            gang = sim.gangs.gangs.get(job.group)
            keys = {id(r) for r in records}
            for key in gang.nodes if gang is not None else ():
                other = sim.records[key]
                if other.state == "running" and id(other) not in keys:
                    records.append(other)
        left = max(r.remaining if r.remaining is not None else r.job.duration for r in started)
        per_node: dict[str, tuple[Topology | None, tuple[int, ...]]] = {}
        for r in records:
            if r.node is None:
                continue
            node = self.nodes[r.node]
            held = per_node.get(r.node, (node.template.topology, ()))[1]
            per_node[r.node] = (node.template.topology, held + tuple(r.gpus))
        total = sum(len(g) for _, g in per_node.values())
        comm = job.comm_share
        t, span = self.comm_time(per_node) if per_node else (None, None)
        ref = None
        if t is not None:
            landed = [self.nodes[n].template for n in per_node]
            ref = self.reference_time(job.workers, job.gpus, landed) or t
        run = left
        if comm > 0 and t is not None and ref is not None:
            run = left * ((1.0 - comm) + comm * t / ref)
        key = job.group if job.group is not None else job.key
        factor = allreduce_factor(total)
        self.jobs[key] = JobTime(
            job.gpus * job.workers,
            job.workers,
            len(per_node),
            span,
            left,
            run,
            factor / t if t else None,
            factor / ref if ref else None,
        )
        return run

    # ------------------------------------------------------------------ fragmentation

    def largest_gangs(self, free: Callable[[str], int]) -> tuple[int, ...]:
        """Per level (widest first), then for the whole cluster: the most nodes with at least
        GANG_WORKER_GPUS free GPUs in one domain (the largest gang of 8-GPU workers that could
        still be placed there)."""
        counts: list[dict[str | None, int]] = [{} for _ in self.levels]
        whole = 0
        for name, domains in self._gang_nodes:
            if free(name) < GANG_WORKER_GPUS:
                continue
            whole += 1
            for at, domain in enumerate(domains):
                if domain is not None:
                    counts[at][domain] = counts[at].get(domain, 0) + 1
        return (*(max(c.values(), default=0) for c in counts), whole)

    @property
    def gang_levels(self) -> tuple[str, ...]:
        """The names of `largest_gangs`' figures, in order."""
        return (*self.levels, CLUSTER)
