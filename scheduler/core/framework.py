"""The scheduling framework: plugin interfaces, the registry type, and the profile runner.

Shaped after kube-scheduler's framework. A profile runs its filter plugins in order; a node's
reasons come from the first filter that rejects it. Score plugins score the feasible nodes,
normalize, and the weighted sum picks the node. Every plugin works on the whole snapshot at
once (numpy columns) and keeps a plain per-node reference form that tests hold equal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from scheduler.core.model import PodInfo
from scheduler.core.snapshot import BoolArray, IntArray, NodeState, Snapshot

__all__ = [
    "MAX_NODE_SCORE",
    "NO_NODES_MESSAGE",
    "Allocation",
    "Allocator",
    "FilterPlugin",
    "Framework",
    "Plugin",
    "PluginFactory",
    "PreFilterPlugin",
    "PreFilterResult",
    "ReasonMasks",
    "Registry",
    "ScheduleResult",
    "ScorePlugin",
    "default_normalize",
    "default_normalize_reference",
    "fit_error_message",
]

MAX_NODE_SCORE = 100
NO_NODES_MESSAGE = "no nodes available to schedule pods"

# A filter's verdict: (reason, mask of slots failing for that reason), in reason order.
ReasonMasks = list[tuple[str, BoolArray]]


class Plugin(Protocol):
    """Every plugin has a name, the one used in profiles and in `explain`."""

    name: str


@runtime_checkable
class FilterPlugin(Protocol):
    name: str

    def filter(self, pod: PodInfo, snapshot: Snapshot, candidates: BoolArray) -> ReasonMasks:
        """Reasons with the slots they reject; only slots in `candidates` need be right."""
        ...

    def filter_node(self, pod: PodInfo, node: NodeState) -> list[str]:
        """Reference form: the reasons this node is rejected (empty when it fits)."""
        ...


@dataclass(frozen=True, slots=True)
class PreFilterResult:
    """Narrows the nodes before filtering (`node_names`) or rejects the pod outright."""

    node_names: frozenset[str] | None = None
    unschedulable: str | None = None


@runtime_checkable
class PreFilterPlugin(Protocol):
    name: str

    def pre_filter(self, pod: PodInfo) -> PreFilterResult | None: ...


@runtime_checkable
class ScorePlugin(Protocol):
    name: str

    def score(self, pod: PodInfo, snapshot: Snapshot, feasible: BoolArray) -> IntArray | None:
        """Raw scores for every slot (only feasible ones matter); None skips the plugin."""
        ...

    def normalize(self, scores: IntArray, feasible: BoolArray) -> IntArray:
        """Scale raw scores to 0..100 over the feasible slots."""
        ...

    def score_nodes(
        self, pod: PodInfo, feasible: Sequence[NodeState], all_nodes: Sequence[NodeState]
    ) -> list[int] | None:
        """Reference form: raw scores of the feasible nodes, in order; None skips."""
        ...

    def normalize_reference(self, scores: list[int]) -> list[int]: ...


@dataclass(frozen=True, slots=True)
class Allocation:
    """Devices chosen for a pod on one node, with how good the set is."""

    gpus: tuple[int, ...]
    score: int | None = None
    links: tuple[str, ...] = ()
    busbw: float | None = None


@runtime_checkable
class Allocator(Protocol):
    """A plugin that picks devices on the chosen node (the GPU set)."""

    name: str

    def allocate(self, pod: PodInfo, snapshot: Snapshot, slot: int) -> Allocation | None: ...


PluginFactory = Callable[[Mapping[str, Any] | None, str], Plugin]
"""Builds a plugin from its pluginConfig args; the str is the args' path for errors."""

Registry = Mapping[str, PluginFactory]


def default_normalize(scores: IntArray, feasible: BoolArray, reverse: bool = False) -> IntArray:
    """kube's DefaultNormalizeScore: scale to 0..100 by the max, optionally reversed."""
    top = int(np.max(scores, where=feasible, initial=0)) if scores.any() else 0
    if top == 0:
        return np.full_like(scores, MAX_NODE_SCORE if reverse else 0) if reverse else scores
    scaled = MAX_NODE_SCORE * scores // top
    return MAX_NODE_SCORE - scaled if reverse else scaled


def default_normalize_reference(scores: list[int], reverse: bool = False) -> list[int]:
    top = max(scores, default=0)
    if top == 0:
        return [MAX_NODE_SCORE] * len(scores) if reverse else list(scores)
    out = []
    for s in scores:
        v = MAX_NODE_SCORE * s // top
        out.append(MAX_NODE_SCORE - v if reverse else v)
    return out


def fit_error_message(total_nodes: int, reason_counts: Mapping[str, int]) -> str:
    """kube's FitError text: ``0/N nodes are available: <count reason>, ... .`` sorted."""
    if total_nodes == 0:
        return NO_NODES_MESSAGE
    entries = sorted(f"{count} {reason}" for reason, count in reason_counts.items() if count)
    message = f"0/{total_nodes} nodes are available:"
    if entries:
        message += f" {', '.join(entries)}."
    return message


def _absent_reason(plugin: str) -> str:
    return f"node(s) didn't satisfy plugin(s) [{plugin}]"


@dataclass
class ScheduleResult:
    """One scheduling decision with everything `explain` shows."""

    pod: PodInfo
    profile: str
    node: str | None
    slot: int | None
    allocation: Allocation | None
    message: str | None
    feasible: BoolArray
    live: BoolArray
    scores: dict[str, IntArray]
    totals: IntArray
    weights: dict[str, int]
    _filter_trace: list[tuple[BoolArray, ReasonMasks]] = field(repr=False)
    _prefilter_message: str | None = field(default=None, repr=False)

    @property
    def gpus(self) -> tuple[int, ...]:
        return self.allocation.gpus if self.allocation else ()

    def reason_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for rejected, masks in self._filter_trace:
            for reason, mask in masks:
                n = int(np.count_nonzero(rejected & mask))
                if n:
                    counts[reason] = counts.get(reason, 0) + n
        return counts

    def node_reasons(self, slot: int) -> list[str]:
        """Why one slot was rejected (its first failing filter's reasons)."""
        if self._prefilter_message is not None:
            return [self._prefilter_message]
        for rejected, masks in self._filter_trace:
            if rejected[slot]:
                return [reason for reason, mask in masks if mask[slot]]
        return []


class Framework:
    """One profile's plugins, ready to schedule pods on a snapshot."""

    def __init__(
        self,
        profile: str,
        filters: Sequence[FilterPlugin],
        scores: Sequence[tuple[ScorePlugin, int]],
        pre_filters: Sequence[PreFilterPlugin] = (),
        allocators: Sequence[Allocator] = (),
    ) -> None:
        self.profile = profile
        self.filters = list(filters)
        self.scores = list(scores)
        self.pre_filters = list(pre_filters)
        self.allocators = list(allocators)
        self.weights = {plugin.name: weight for plugin, weight in scores}

    # ------------------------------------------------------------------ the fast path

    def _pre_filter(self, pod: PodInfo) -> tuple[str | None, list[tuple[str, frozenset[str]]]]:
        restrictions: list[tuple[str, frozenset[str]]] = []
        for plugin in self.pre_filters:
            result = plugin.pre_filter(pod)
            if result is None:
                continue
            if result.unschedulable is not None:
                return result.unschedulable, []
            if result.node_names is not None:
                restrictions.append((plugin.name, result.node_names))
        return None, restrictions

    def schedule(self, pod: PodInfo, snapshot: Snapshot) -> ScheduleResult:
        """Filter every node, score the feasible ones, pick the best, allocate devices."""
        live = snapshot.live.copy()
        total_nodes = snapshot.live_count
        trace: list[tuple[BoolArray, ReasonMasks]] = []
        empty = np.zeros(0, np.int64)
        if total_nodes == 0:
            return ScheduleResult(
                pod,
                self.profile,
                None,
                None,
                None,
                NO_NODES_MESSAGE,
                live.copy(),
                live,
                {},
                empty,
                self.weights,
                trace,
            )
        prefilter_message, restrictions = self._pre_filter(pod)
        if prefilter_message is not None:
            feasible = np.zeros_like(live)
            return ScheduleResult(
                pod,
                self.profile,
                None,
                None,
                None,
                f"0/{total_nodes} nodes are available: {prefilter_message}.",
                feasible,
                live,
                {},
                empty,
                self.weights,
                trace,
                prefilter_message,
            )
        alive = live.copy()
        for plugin_name, names in restrictions:
            allowed = np.zeros_like(alive)
            for name in names:
                slot = snapshot.index.get(name)
                if slot is not None:
                    allowed[slot] = True
            absent = alive & ~allowed
            trace.append((absent, [(_absent_reason(plugin_name), absent)]))
            alive &= allowed
        for plugin in self.filters:
            if not alive.any():
                break
            masks = plugin.filter(pod, snapshot, alive)
            if not masks:
                continue
            failed = np.zeros_like(alive)
            for _, mask in masks:
                failed |= mask
            rejected = alive & failed
            if rejected.any():
                trace.append((rejected, masks))
                alive &= ~failed
        return self._finish(pod, snapshot, live, alive, trace, total_nodes)

    def _finish(
        self,
        pod: PodInfo,
        snapshot: Snapshot,
        live: BoolArray,
        feasible: BoolArray,
        trace: list[tuple[BoolArray, ReasonMasks]],
        total_nodes: int,
    ) -> ScheduleResult:
        scores: dict[str, IntArray] = {}
        totals = np.zeros(snapshot.capacity, np.int64)
        if feasible.any():
            for plugin, weight in self.scores:
                raw = plugin.score(pod, snapshot, feasible)
                if raw is None:
                    continue
                normalized = plugin.normalize(raw, feasible)
                scores[plugin.name] = normalized
                totals += normalized * weight
        result = ScheduleResult(
            pod,
            self.profile,
            None,
            None,
            None,
            None,
            feasible,
            live,
            scores,
            totals,
            self.weights,
            trace,
        )
        slot = pick_node(snapshot, feasible, totals)
        if slot is None:
            result.message = fit_error_message(total_nodes, result.reason_counts())
            return result
        result.slot = slot
        result.node = snapshot.names[slot]
        result.allocation = self.allocate(pod, snapshot, slot)
        return result

    def allocate(self, pod: PodInfo, snapshot: Snapshot, slot: int) -> Allocation | None:
        """Devices the allocator plugins pick for the pod on one slot."""
        for allocator in self.allocators:
            allocation = allocator.allocate(pod, snapshot, slot)
            if allocation is not None:
                return allocation
        return None

    # ------------------------------------------------------------------ the reference path

    def schedule_reference(self, pod: PodInfo, snapshot: Snapshot) -> ReferenceResult:
        """The same decision computed node by node from the pods themselves (for tests)."""
        slots = sorted(snapshot.live_slots(), key=lambda s: snapshot.names[s] or "")
        states = {slot: snapshot.node_state(slot) for slot in slots}
        reasons: dict[str, list[str]] = {}
        prefilter_message, restrictions = self._pre_filter(pod)
        feasible: list[int] = []
        for slot in slots:
            state = states[slot]
            name = state.info.name
            if prefilter_message is not None:
                reasons[name] = [prefilter_message]
                continue
            failed = [p for p, names in restrictions if name not in names]
            if failed:
                reasons[name] = [_absent_reason(failed[0])]
                continue
            for plugin in self.filters:
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
            for scorer, weight in self.scores:
                raw = scorer.score_nodes(pod, feasible_states, all_states)
                if raw is None:
                    continue
                normalized = scorer.normalize_reference(raw)
                scores[scorer.name] = {}
                for state, value in zip(feasible_states, normalized, strict=True):
                    scores[scorer.name][state.info.name] = value
                    totals[state.info.name] += value * weight
        best = None
        if totals:
            top = max(totals.values())
            best = min(name for name, total in totals.items() if total == top)
        return ReferenceResult(best, reasons, scores, totals)


@dataclass(frozen=True)
class ReferenceResult:
    node: str | None
    reasons: dict[str, list[str]]
    scores: dict[str, dict[str, int]]
    totals: dict[str, int]


def pick_node(snapshot: Snapshot, feasible: BoolArray, totals: IntArray) -> int | None:
    """The feasible slot with the highest total; ties go to the first node name in order."""
    if not feasible.any():
        return None
    candidates = np.flatnonzero(feasible)
    best = totals[candidates]
    winners = candidates[best == best.max()]
    if len(winners) == 1:
        return int(winners[0])
    return int(winners[np.argmin(snapshot.name_rank()[winners])])
