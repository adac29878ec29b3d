"""The reference path: the same decision computed node by node from the pods themselves.

A plugin may carry, beside its vector form, a plain per-node form (`filter_node`,
`score_nodes`, `normalize_reference`) written straight from kube's Go code. Property tests run
both and hold them equal. The reference form is optional: a plugin without one runs in every
profile; only `schedule_reference` needs it, and says which plugin lacks it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from scheduler.core.framework import CycleState, Framework, absent_reason
from scheduler.core.model import PodInfo, WorkloadInfo
from scheduler.core.snapshot import NodeState, Snapshot

__all__ = [
    "Cluster",
    "NoReferenceForm",
    "ReferenceClusterFilter",
    "ReferenceClusterScore",
    "ReferenceFilter",
    "ReferenceResult",
    "ReferenceScore",
    "schedule_reference",
]


@runtime_checkable
class ReferenceFilter(Protocol):
    name: str

    def filter_node(self, pod: PodInfo, node: NodeState) -> list[str]:
        """The reasons this node is rejected (empty when it fits)."""
        ...


@runtime_checkable
class ReferenceScore(Protocol):
    name: str

    def score_nodes(
        self, pod: PodInfo, feasible: Sequence[NodeState], all_nodes: Sequence[NodeState]
    ) -> list[int] | None:
        """Raw scores of the feasible nodes, in order; None skips."""
        ...


@dataclass(frozen=True, slots=True)
class Cluster:
    """Every live node with its pods (in name order) and the namespaces' labels: what the
    reference forms of plugins that look at other pods read (InterPodAffinity,
    PodTopologySpread), as kube's PreFilter/PreScore read the whole snapshot."""

    nodes: Sequence[NodeState]
    namespaces: Mapping[str, Mapping[str, str]]
    workloads: Mapping[tuple[str, str, str], WorkloadInfo] = field(default_factory=dict)


@runtime_checkable
class ReferenceClusterFilter(Protocol):
    name: str

    def filter_cluster(self, pod: PodInfo, cluster: Cluster) -> list[list[str]]:
        """The reasons each node of `cluster.nodes` is rejected, in order."""
        ...


@runtime_checkable
class ReferenceClusterScore(Protocol):
    name: str

    def score_cluster(
        self, pod: PodInfo, feasible: Sequence[NodeState], cluster: Cluster
    ) -> list[int] | None:
        """Normalized scores of the feasible nodes, in order; None skips."""
        ...


@runtime_checkable
class ReferenceNormalizer(Protocol):
    def normalize_reference(self, scores: list[int]) -> list[int]: ...


class NoReferenceForm(TypeError):
    """A plugin of the profile has no per-node form, so no reference decision exists."""


@dataclass(frozen=True)
class ReferenceResult:
    node: str | None
    reasons: dict[str, list[str]]
    scores: dict[str, dict[str, int]]
    totals: dict[str, int]


def schedule_reference(framework: Framework, pod: PodInfo, snapshot: Snapshot) -> ReferenceResult:
    """The profile's decision node by node (for tests); PreFilter runs as in the cycle."""
    slots = sorted(snapshot.live_slots(), key=lambda s: snapshot.names[s] or "")
    states = {slot: snapshot.node_state(slot) for slot in slots}
    reasons: dict[str, list[str]] = {}
    cycle = CycleState()
    prefilter_message, restrictions = framework.run_pre_filter(cycle, pod, snapshot)
    filters = [p for p in framework.filters if p.name not in cycle.skip_filter]
    cluster = Cluster([states[s] for s in slots], snapshot.namespaces, snapshot.workloads)
    cluster_reasons: dict[str, list[list[str]]] = {}
    for plugin in filters:
        if isinstance(plugin, ReferenceClusterFilter):
            cluster_reasons[plugin.name] = plugin.filter_cluster(pod, cluster)
        elif not isinstance(plugin, ReferenceFilter):
            raise NoReferenceForm(f"filter plugin {plugin.name} has no reference form")
    feasible: list[int] = []
    for position, slot in enumerate(slots):
        state = states[slot]
        name = state.info.name
        if prefilter_message is not None:
            reasons[name] = [prefilter_message]
            continue
        failed = [p for p, names in restrictions if name not in names]
        if failed:
            reasons[name] = [absent_reason(failed[0])]
            continue
        for plugin in filters:
            if plugin.name in cluster_reasons:
                node_reasons = cluster_reasons[plugin.name][position]
            else:
                assert isinstance(plugin, ReferenceFilter)
                node_reasons = plugin.filter_node(pod, state)
            if node_reasons:
                reasons[name] = node_reasons
                break
        else:
            feasible.append(slot)
    scores: dict[str, dict[str, int]] = {}
    totals = {states[s].info.name: 0 for s in feasible}
    if feasible:
        feasible_states = [states[s] for s in feasible]
        all_states = list(states.values())
        for scorer, weight in framework.scores:
            raw: list[int] | None
            if isinstance(scorer, ReferenceClusterScore):
                raw = scorer.score_cluster(pod, feasible_states, cluster)
            elif isinstance(scorer, ReferenceScore):
                raw = scorer.score_nodes(pod, feasible_states, all_states)
                if raw is not None and isinstance(scorer, ReferenceNormalizer):
                    raw = scorer.normalize_reference(raw)
            else:
                raise NoReferenceForm(f"score plugin {scorer.name} has no reference form")
            if raw is None:
                continue
            scores[scorer.name] = {}
            for node_state, value in zip(feasible_states, raw, strict=True):
                scores[scorer.name][node_state.info.name] = value
                totals[node_state.info.name] += value * weight
    best = None
    if totals:
        top = max(totals.values())
        best = min(name for name, total in totals.items() if total == top)
    return ReferenceResult(best, reasons, scores, totals)
