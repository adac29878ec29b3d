"""Preemption as kube-scheduler 1.33's DefaultPreemption decides it, on GPU nodes.

When no node fits a pod, the PostFilter plugin (`plugins/default_preemption.py`) asks this
module whether evicting lower-priority pods would make room, and where:

1. Eligibility: `preemptionPolicy: Never` never preempts; a pod nominated to a node where a
   lower-priority pod is still terminating because of preemption waits for it.
2. Candidates: every node whose failure eviction could cure (not UnschedulableAndUnresolvable:
   node affinity, taints, unschedulable, a request larger than the node, a GPU topology that
   cannot hold the pod even empty, ...; a filter plugin says which of its reasons are, see
   `UnresolvableCheck`). Every such node is tried (kube samples; we do not).
3. On a copy of each candidate node, every lower-priority pod is removed; if the pod still does
   not fit, the node is dropped. Then victims are reprieved one by one, PodDisruptionBudget
   violators first, each group by importance (priority, then earlier start): a pod whose
   return still lets the pod fit stays. The filters are re-run on each try, so GPUTopology and
   the placement policy decide whether the freed GPUs form a valid set.
4. The node: fewest PDB violations, then the lowest highest-victim priority, the lowest sum of
   priorities, the fewest victims, the latest start of the highest-priority victims, then the
   first node name.

Pod groups (gangs): a victim that belongs to a pod group takes its whole group with it, every
member on every node (a gang below its minimum is useless: kube's `disruptionMode: all`).
A group is reprieved or evicted as one unit; a group with any member of priority at or above
the preemptor's is not a victim at all; its members on other nodes count in the node choice.
Group membership is the pod's group key (a Kubernetes PodGroup, the
`scheduling.x-k8s.io/pod-group` label or the `topo-scheduler.io/pod-group` annotation, as
`scheduler.core.model` reads them), members read from the snapshot (`snapshot_group`).

Nothing here evicts: the result is a `Plan`, returned in the PostFilter result, that the cycle
hands to the front end (`CycleHooks.preempt`), which deletes the victims (in-cluster), removes
them (simulator) or only reports them (`explain`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from scheduler.core.disruption import DisruptionBudget, pdb_violations
from scheduler.core.domains import domain_index
from scheduler.core.framework import (
    FILTER_PLUGINS_KEY,
    CycleState,
    Framework,
    ScheduleResult,
    absent_reason,
    fit_error_message,
    slots_named,
)
from scheduler.core.model import PodInfo
from scheduler.core.nominator import Nomination, Nominator
from scheduler.core.snapshot import BoolArray, Snapshot
from scheduler.core.topology.schema import ANNOTATION_ASSIGNMENTS, ANNOTATION_TOPOLOGY
from scheduler.core.topology.state import GpuState

__all__ = [
    "CONTEXT_KEY",
    "NOT_HELPFUL",
    "NO_VICTIMS",
    "VICTIM_POLICY_KEY",
    "Outcome",
    "Plan",
    "PodGroup",
    "PreemptionContext",
    "UnresolvableCheck",
    "Victim",
    "VictimPolicy",
    "group_key",
    "preempt",
    "snapshot_group",
]

PLUGIN_NAME = "DefaultPreemption"
CONTEXT_KEY = "topo-scheduler/preemption-context"
"""CycleState key under which the cycle hands preemption what a plugin cannot see."""

NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"
NEVER = "not eligible due to preemptionPolicy=Never."
TERMINATING = "not eligible due to a terminating pod on the nominated node."
_INT32_OFFSET = 2**31


# ------------------------------------------------------------------ pod groups


@dataclass(frozen=True, slots=True)
class PodGroup:
    """A pod group and its members that hold a node (pod, node name)."""

    key: str
    members: tuple[tuple[PodInfo, str], ...]


def group_key(pod: PodInfo) -> str | None:
    """`namespace/name` of the pod's group (any of the three forms `scheduler.core.model`
    reads: Kubernetes' PodGroup, the scheduler-plugins label, the annotation), or None."""
    return pod.pod_group.key if pod.pod_group is not None else None


def snapshot_group(pod: PodInfo, snapshot: Snapshot) -> PodGroup | None:
    """The pod's group with its members on nodes (found by the group's key on every slot), or
    None for a pod in no group."""
    key = group_key(pod)
    if key is None:
        return None
    members = tuple(
        (member, name)
        for slot, pods in enumerate(snapshot.pods)
        if (name := snapshot.names[slot]) is not None
        for member in pods.values()
        if group_key(member) == key
    )
    return PodGroup(key, members)


# ------------------------------------------------------------------ what goes in and out


VICTIM_POLICY_KEY = "topo-scheduler/victim-policy"
"""CycleState key of a `VictimPolicy` (written at PreFilter by a plugin that has one:
CapacityScheduling, when the cluster has ElasticQuotas)."""


@runtime_checkable
class VictimPolicy(Protocol):
    """Who may be evicted for a pod, in place of "every pod of lower priority" (kube's rule),
    and what else must hold once they are gone (a quota). Read from the cycle state."""

    rejected: bool  # the policy's PreFilter rejected the pod: eviction on any node may cure it

    def potential(
        self,
        preemptor: PodInfo,
        pods: Sequence[PodInfo],
        together: Callable[[PodInfo], Sequence[PodInfo]],
    ) -> set[str]:
        """Of the pods on one node (least important first), the keys of those that may be
        evicted, taken in that order (the policy may track what the earlier ones free: each
        pod with `together(pod)`, the pods evicted with it, its whole group)."""
        ...

    def may_evict(self, preemptor: PodInfo, pod: PodInfo) -> bool:
        """Whether one pod may be evicted at all (a group member elsewhere)."""
        ...

    def admits(self, preemptor: PodInfo, removed: Sequence[PodInfo], nominated: bool) -> bool:
        """Whether the preemptor is within its limits once `removed` are gone (`nominated`:
        counting the nominated pods that hold room against it)."""
        ...

    def terminating(self, preemptor: PodInfo, pods: Sequence[PodInfo]) -> bool:
        """Whether a terminating pod on its nominated node will free room for it already."""
        ...

    def for_member(
        self, member: PodInfo, placed: Sequence[PodInfo], evicted: Sequence[PodInfo]
    ) -> VictimPolicy:
        """The policy for the next member of a gang preemptor, with the members placed
        before it counted and the victims chosen for them gone (a group is judged whole)."""
        ...

    def no_victims(self, node: str, preemptor: PodInfo) -> str: ...

    def not_admitted(self) -> str: ...


UnresolvableCheck = Callable[[PodInfo, Snapshot, str, BoolArray], BoolArray]
"""For one filter reason and the slots it rejected: those no eviction can cure."""


@runtime_checkable
class ResolvableFilter(Protocol):
    """Optional beside Filter: which rejections are UnschedulableAndUnresolvable."""

    def unresolvable(
        self, pod: PodInfo, snapshot: Snapshot, reason: str, rejected: BoolArray
    ) -> BoolArray: ...


@dataclass(frozen=True, slots=True)
class PreemptionContext:
    """What the cycle hands preemption: the profile (its filters are re-run), the nominated
    pods, the PodDisruptionBudgets and how pod groups are found."""

    framework: Framework
    nominator: Nominator = field(default_factory=Nominator)
    budgets: Sequence[DisruptionBudget] = ()
    # the other pending members of the pod's group (a gang preemptor places them all)
    pending_members: Callable[[PodInfo], Sequence[PodInfo]] = lambda pod: ()
    # the level (node label key) one domain of which a gang preemptor must stay in
    required_level: str | None = None


@dataclass(frozen=True, slots=True)
class Victim:
    pod: PodInfo
    node: str


@dataclass(frozen=True, slots=True)
class Plan:
    """Where the preemptor goes and whom it evicts (most important first)."""

    preemptor: PodInfo
    node: str
    victims: tuple[Victim, ...]
    pdb_violations: int = 0
    gpus: tuple[int, ...] = ()  # the set the preemptor would get once the victims are gone
    cleared: tuple[PodInfo, ...] = ()  # lower-priority pods nominated to the node(s)
    # a gang preemptor: every pending member with its node and GPU set (the preemptor first)
    members: tuple[tuple[PodInfo, str, tuple[int, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class Outcome:
    plan: Plan | None
    message: str | None = None  # after "preemption: ", when there is no plan
    clear_nomination: bool = False  # the pod's own nomination no longer helps


# ------------------------------------------------------------------ running the filters


def _importance(pod: PodInfo) -> tuple[int, float, str]:
    """kube's MoreImportantPod as a sort key: higher priority, then earlier start (a pod not
    started yet counts as starting now, i.e. last)."""
    start = pod.start_time if pod.start_time is not None else math.inf
    return (-pod.priority, start, pod.key)


class _NodeCopy:
    """One node and its pods in a snapshot of their own, for trying evictions."""

    def __init__(self, snapshot: Snapshot, slot: int, extra: Sequence[Nomination]) -> None:
        info = snapshot.nodes[slot]
        assert info is not None
        self.name = info.name
        self.snapshot = Snapshot(GpuState(snapshot.gpus.resource, snapshot.gpus.selector))
        # what the filters read of the rest of the cluster: storage objects, namespaces and
        # workloads (shared, read only); the node's own pods are counted again as added below
        self.snapshot.storage = snapshot.storage.shared()
        self.snapshot.namespaces = snapshot.namespaces
        self.snapshot.namespace_generation = snapshot.namespace_generation
        self.snapshot.workloads = snapshot.workloads
        self.snapshot.services = snapshot.services
        for pod in snapshot.pods[slot].values():
            self.snapshot.storage.count_pod(pod.namespace, pod.volumes, -1)
        # the node without its GPU annotations, whose parsed state is taken as it is
        bare = dataclasses.replace(
            info,
            annotations={
                k: v
                for k, v in info.annotations.items()
                if k not in (ANNOTATION_TOPOLOGY, ANNOTATION_ASSIGNMENTS)
            },
        )
        self.slot = self.snapshot.set_node(bare)
        self.snapshot.gpus.copy_node(self.slot, snapshot.gpus, slot)
        held = snapshot.gpus.sets[slot]
        for key, pod in snapshot.pods[slot].items():
            self.add(pod, held.get(key, ()))
        for nomination in extra:
            if nomination.pod.key not in self.snapshot.pods[self.slot]:
                self.add(nomination.pod, nomination.gpus)

    def add(self, pod: PodInfo, gpus: tuple[int, ...]) -> None:
        self.snapshot.add_pod(self.slot, pod)
        if gpus:
            self.snapshot.gpus.set_pod(self.slot, pod.key, gpus)

    def remove(self, pod: PodInfo) -> tuple[int, ...]:
        gpus = self.snapshot.gpus.sets[self.slot].get(pod.key, ())
        self.snapshot.remove_pod(self.slot, pod)
        return gpus

    def fits(self, framework: Framework, pod: PodInfo) -> tuple[bool, list[str], CycleState]:
        """PreFilter and Filter on this node alone: whether the pod fits, else why."""
        state = CycleState()
        rejection, restrictions = framework.run_pre_filter(state, pod, self.snapshot)
        if rejection is not None:
            return False, [rejection], state
        for plugin, names in restrictions:
            if self.name not in names:
                return False, [absent_reason(plugin)], state
        alive, trace = framework.run_filters(state, pod, self.snapshot, self.snapshot.live)
        if alive[self.slot]:
            return True, [], state
        for _, rejected, masks in trace:
            if rejected[self.slot]:
                return False, [r for r, m in masks if m[self.slot]], state
        return False, [], state


@dataclass(slots=True)
class _Unit:
    """Pods reprieved or evicted together: one pod, or a pod group (members here and all)."""

    here: list[PodInfo]
    everywhere: list[tuple[PodInfo, str]]
    violating: bool = False


@dataclass(frozen=True, slots=True)
class _Candidate:
    node: str
    victims: tuple[Victim, ...]
    violations: int
    copy: _NodeCopy


# ------------------------------------------------------------------ the evaluation


class _Evaluation:
    def __init__(
        self,
        context: PreemptionContext,
        pod: PodInfo,
        snapshot: Snapshot,
        checks: Mapping[str, UnresolvableCheck],
    ) -> None:
        self.context = context
        self.framework = context.framework
        self.pod = pod
        self.snapshot = snapshot
        self.checks = checks
        self._groups: dict[str, PodGroup | None] = {}
        self.policy: VictimPolicy | None = None

    def group(self, member: PodInfo) -> PodGroup | None:
        key = group_key(member)
        if key is None:
            return None
        if key not in self._groups:
            self._groups[key] = snapshot_group(member, self.snapshot)
        return self._groups[key]

    def together(self, pod: PodInfo) -> list[PodInfo]:
        """The pods evicted with a pod: itself, and the rest of its group."""
        group = self.group(pod)
        members = [m for m, _ in group.members] if group is not None else []
        return [pod, *(m for m in members if m.key != pod.key)]

    # -- which nodes eviction could help -------------------------------------------------

    def classify(self, state: CycleState, result: ScheduleResult) -> list[int]:
        """The failing slots whose failure eviction could cure, in node-name order: a node is
        judged by its first failing filter, as kube keeps one status per node."""
        snapshot, pod = self.snapshot, self.pod
        live = snapshot.live.copy()
        rank = snapshot.name_rank()
        if result.prefilter_message is not None:
            if self.policy is not None and self.policy.rejected:  # a quota: eviction may cure it
                return sorted(np.flatnonzero(live).tolist(), key=lambda s: rank[s])
            return []  # PreFilter rejected the pod itself: no node helps
        plugins: list[str] | None = state.get(FILTER_PLUGINS_KEY)
        if plugins is None or len(plugins) != len(result.filter_trace):
            return []  # not decided by `Framework.schedule`: nothing to judge by
        filters = {p.name: p for p in self.framework.filters}
        unresolvable = np.zeros_like(live)
        for plugin_name, (rejected, masks) in zip(plugins, result.filter_trace, strict=True):
            plugin = filters.get(plugin_name)
            if plugin is None:  # a PreFilter plugin's node-name restriction
                unresolvable |= rejected
                continue
            check = (
                plugin.unresolvable
                if isinstance(plugin, ResolvableFilter)
                else self.checks.get(plugin_name)
            )
            if check is None:
                continue
            for reason, mask in masks:
                unresolvable |= rejected & check(pod, snapshot, reason, rejected & mask)
        potential = live & ~result.feasible & ~unresolvable
        return sorted(np.flatnonzero(potential).tolist(), key=lambda s: rank[s])

    def eligible(self, potential: Sequence[int]) -> str | None:
        """Why the pod may not preempt now (kube's PodEligibleToPreemptOthers), or None."""
        pod = self.pod
        own = self.context.nominator.get(pod.key)
        nominated = own.node if own is not None else pod.nominated_node_name
        if nominated is None:
            return None
        slot = self.snapshot.index.get(nominated)
        if slot is None or slot not in potential:
            return None  # unresolvable there (or gone): free to preempt elsewhere
        if self.policy is not None:
            on_node = list(self.snapshot.pods[slot].values())
            return TERMINATING if self.policy.terminating(pod, on_node) else None
        for other in self.snapshot.pods[slot].values():
            if other.priority < pod.priority and other.preempted and other.deletion_timestamp:
                return TERMINATING
        return None

    # -- one node ------------------------------------------------------------------------

    def units(self, pods: Iterable[PodInfo], node: str, preemptor: PodInfo) -> list[_Unit]:
        """The pods on a node of lower priority than the preemptor, as eviction units: one pod,
        or a whole group (none of a group with a member at or above the preemptor's)."""
        units: list[_Unit] = []
        grouped: dict[str, _Unit | None] = {}
        policy = self.policy
        chosen: set[str] = set()
        if policy is not None:
            pods = sorted(pods, key=_importance, reverse=True)  # least important first
            chosen = policy.potential(preemptor, pods, self.together)

        def evictable(other: PodInfo) -> bool:
            if policy is None:
                return other.priority < preemptor.priority
            return other.key in chosen or policy.may_evict(preemptor, other)

        for other in pods:
            if policy is None and other.priority >= preemptor.priority:
                continue
            if policy is not None and other.key not in chosen:
                continue
            group = self.group(other)
            if group is None:
                units.append(_Unit([other], [(other, node)]))
                continue
            if group.key not in grouped:
                members = list(group.members)
                if all(m.key != other.key for m, _ in members):
                    members.append((other, node))
                whole = all(evictable(m) for m, _ in members)
                grouped[group.key] = _Unit([], members) if whole else None
                if whole:
                    units.append(grouped[group.key])  # type: ignore[arg-type]
            unit = grouped[group.key]
            if unit is not None:
                unit.here.append(other)
        for unit in units:
            unit.here.sort(key=_importance)
            unit.everywhere.sort(key=lambda m: _importance(m[0]))
        units.sort(key=lambda u: _importance(u.here[0]))
        return units

    def select_victims(
        self, base: Snapshot, slot: int, preemptor: PodInfo
    ) -> _Candidate | list[str]:
        """kube's SelectVictimsOnNode on a copy of one node of `base` (the snapshot, or a gang
        plan's working copy): the candidate, or why not."""
        name = base.names[slot]
        assert name is not None
        units = self.units(base.pods[slot].values(), name, preemptor)
        policy = self.policy
        if not units:
            return [policy.no_victims(name, preemptor) if policy is not None else NO_VICTIMS]
        copy = _NodeCopy(base, slot, ())
        held: dict[str, tuple[int, ...]] = {}
        for unit in units:
            for member in unit.here:
                held[member.key] = copy.remove(member)
        fits, reasons, _ = copy.fits(self.framework, preemptor)
        if not fits:
            return reasons
        # what the evicted units free everywhere (a quota counts every member of a group)
        removed: dict[str, PodInfo] = {m.key: m for u in units for m, _ in u.everywhere}
        if policy is not None and not policy.admits(preemptor, list(removed.values()), False):
            return [policy.not_admitted()]
        ordered = [m for unit in units for m, _ in unit.everywhere]
        violating = dict(
            zip(
                (m.key for m in ordered),
                pdb_violations(ordered, self.context.budgets),
                strict=True,
            )
        )
        for unit in units:
            unit.violating = any(violating[m.key] for m, _ in unit.everywhere)
        evicted: list[_Unit] = []
        for unit in [u for u in units if u.violating] + [u for u in units if not u.violating]:
            for member in unit.here:
                copy.add(member, held[member.key])
            for member, _ in unit.everywhere:
                removed.pop(member.key, None)
            back = copy.fits(self.framework, preemptor)[0]
            if back and policy is not None:
                back = policy.admits(preemptor, list(removed.values()), True)
            if not back:
                for member in unit.here:
                    copy.remove(member)
                for member, _ in unit.everywhere:
                    removed[member.key] = member
                evicted.append(unit)
        victims = sorted(
            {m.key: Victim(m, node) for u in evicted for m, node in u.everywhere}.values(),
            key=lambda v: _importance(v.pod),
        )
        if not victims:
            return [f"expected at least one victim pod on node {copy.name}"]
        violations = sum(1 for v in victims if violating.get(v.pod.key, False))
        return _Candidate(copy.name, tuple(victims), violations, copy)

    # -- the node choice -----------------------------------------------------------------

    @staticmethod
    def pick(candidates: Sequence[_Candidate]) -> _Candidate:
        """kube's pickOneNodeForPreemption over candidates in node-name order."""

        def earliest_top_start(c: _Candidate) -> float:
            top = c.victims[0].pod.priority
            starts = [
                v.pod.start_time if v.pod.start_time is not None else math.inf
                for v in c.victims
                if v.pod.priority == top
            ]
            return min(starts)

        keys: list[Callable[[_Candidate], float]] = [
            lambda c: -c.violations,
            lambda c: -c.victims[0].pod.priority,
            lambda c: -sum(v.pod.priority + _INT32_OFFSET for v in c.victims),
            lambda c: -len(c.victims),
            earliest_top_start,
        ]
        remaining = list(candidates)
        for key in keys:
            best = max(key(c) for c in remaining)
            remaining = [c for c in remaining if key(c) == best]
            if len(remaining) == 1:
                break
        return remaining[0]

    def allocation(self, copy: _NodeCopy, pod: PodInfo) -> tuple[int, ...] | None:
        """The GPU set the pod gets on the copy as it stands (None: it does not fit)."""
        fits, _, state = copy.fits(self.framework, pod)
        if not fits:
            return None
        allocation = self.framework.allocate(state, pod, copy.snapshot, copy.slot)
        return allocation.gpus if allocation is not None else ()

    def cleared(self, nodes: Iterable[str], skip: set[str]) -> tuple[PodInfo, ...]:
        """Lower-priority pods nominated to the nodes: their nominations are cleared."""
        return tuple(
            n.pod
            for node in sorted(set(nodes))
            for n in self.context.nominator.on_node(node)
            if n.pod.priority < self.pod.priority and n.pod.key not in skip
        )

    def plan(self, chosen: _Candidate) -> Plan:
        gpus = self.allocation(chosen.copy, self.pod) or ()
        cleared = self.cleared([chosen.node], {self.pod.key})
        return Plan(self.pod, chosen.node, chosen.victims, chosen.violations, gpus, cleared)

    # -- a gang preemptor ----------------------------------------------------------------

    def gang(self, members: Sequence[PodInfo], required: str | None = None) -> Plan | str:
        """Place every pending member of the preemptor's group in turn on working copies of
        the nodes, each where it fits or else where preemption makes room for it (the
        victims of earlier members gone, the members placed so far counted). The plan holds
        only if all fit; otherwise nothing is evicted (the reason is returned). A group that
        requires one domain of a level (`required`, a node label key) is planned in each of
        its domains in turn, by label value; the first that holds it is the plan."""
        snapshot = self.snapshot
        rank = snapshot.name_rank()
        live = sorted(np.flatnonzero(snapshot.live).tolist(), key=lambda s: rank[s])
        leader_policy = self.policy
        try:
            if required is None:
                return self._place_gang(members, live, leader_policy)
            index = domain_index(snapshot, required)  # the group cycle's domains
            for domain, _ in sorted(enumerate(index.values), key=lambda d: d[1]):
                within = [slot for slot in live if index.of_slot(slot) == domain]
                plan = self._place_gang(members, within, leader_policy)
                if isinstance(plan, Plan):
                    return plan
        finally:
            self.policy = leader_policy  # members' policies were set in turn
        return (
            f"pod group {group_key(self.pod)}: no {required} domain has room for all "
            f"{len(members)} members, even with preemption."
        )

    def _place_gang(
        self, members: Sequence[PodInfo], live: Sequence[int], leader_policy: VictimPolicy | None
    ) -> Plan | str:
        """`gang` on the nodes of `live` (slots in name order)."""
        snapshot = self.snapshot
        work: dict[str, _NodeCopy] = {}

        def copy_of(node: str) -> _NodeCopy | None:
            if node not in work:
                slot = snapshot.index.get(node)
                if slot is None or not snapshot.live[slot]:
                    return None
                work[node] = _NodeCopy(snapshot, slot, ())
            return work[node]

        evicted: dict[str, Victim] = {}
        violations = 0
        placed: list[tuple[PodInfo, str, tuple[int, ...]]] = []
        for member in members:
            spot = None
            if leader_policy is not None:  # the quota counts the group whole
                self.policy = leader_policy.for_member(
                    member, [m for m, _, _ in placed], [v.pod for v in evicted.values()]
                )
            if self.policy is None or self.policy.admits(member, [], False):
                spot = self._fits_somewhere(member, live, work)
            if spot is None:
                candidates: list[_Candidate] = []
                for slot in live:
                    name = snapshot.names[slot]
                    assert name is not None
                    mine = work.get(name)
                    base, at = (mine.snapshot, mine.slot) if mine else (snapshot, slot)
                    outcome = self.select_victims(base, at, member)
                    if isinstance(outcome, _Candidate):
                        candidates.append(outcome)
                if not candidates:
                    return (
                        f"pod group {group_key(self.pod)}: {member.key} fits on no node even "
                        f"with preemption ({len(placed)} of {len(members)} members placed)."
                    )
                chosen = self.pick(candidates)
                work[chosen.node] = chosen.copy
                for victim in chosen.victims:
                    if victim.pod.key in evicted:
                        continue
                    evicted[victim.pod.key] = victim
                    elsewhere = copy_of(victim.node) if victim.node != chosen.node else None
                    if (
                        elsewhere is not None
                        and victim.pod.key in elsewhere.snapshot.pods[elsewhere.slot]
                    ):
                        elsewhere.remove(victim.pod)
                violations += chosen.violations
                spot = chosen.node
            copy = copy_of(spot)
            assert copy is not None
            gpus = self.allocation(copy, member)
            if gpus is None:  # the filters disagree with themselves: do not act on it
                return f"pod group {group_key(self.pod)}: {member.key} does not fit on {spot}."
            copy.add(member, gpus)
            placed.append((member, spot, gpus))
        victims = tuple(sorted(evicted.values(), key=lambda v: _importance(v.pod)))
        if not victims:
            return f"pod group {group_key(self.pod)}: expected at least one victim pod."
        keys = {m.key for m in members}
        return Plan(
            self.pod,
            placed[0][1],
            victims,
            violations,
            placed[0][2],
            self.cleared((node for _, node, _ in placed), keys),
            tuple(placed),
        )

    def _fits_somewhere(
        self, member: PodInfo, live: Sequence[int], work: Mapping[str, _NodeCopy]
    ) -> str | None:
        """The first node, in name order, where the member fits as things stand."""
        snapshot = self.snapshot
        state = CycleState()
        rejection, restrictions = self.framework.run_pre_filter(state, member, snapshot)
        if rejection is not None:
            return None
        untouched = snapshot.live.copy()
        for name in work:
            slot = snapshot.index.get(name)
            if slot is not None:
                untouched[slot] = False
        for _, names in restrictions:
            untouched &= slots_named(snapshot, names)
        feasible, _ = self.framework.run_filters(state, member, snapshot, untouched)
        for slot in live:
            node = snapshot.names[slot]
            assert node is not None
            copy = work.get(node)
            if copy is not None:
                if copy.fits(self.framework, member)[0]:
                    return node
            elif feasible[slot]:
                return node
        return None


def preempt(
    context: PreemptionContext,
    state: CycleState,
    pod: PodInfo,
    snapshot: Snapshot,
    result: ScheduleResult,
    checks: Mapping[str, UnresolvableCheck] | None = None,
) -> Outcome:
    """kube's Evaluator.Preempt without side effects: the plan, or why there is none."""
    evaluation = _Evaluation(context, pod, snapshot, checks or {})
    policy = state.get(VICTIM_POLICY_KEY)
    evaluation.policy = policy if isinstance(policy, VictimPolicy) else None
    if pod.preemption_policy == "Never":
        return Outcome(None, NEVER)
    potential = evaluation.classify(state, result)
    reason = evaluation.eligible(potential)
    if reason is not None:
        return Outcome(None, reason)
    total = snapshot.live_count
    counts: dict[str, int] = {}
    others = [m for m in context.pending_members(pod) if m.key != pod.key]
    if others and group_key(pod) is not None:
        members = [pod, *sorted(others, key=lambda m: m.key)]
        gang = evaluation.gang(members, context.required_level)
        if isinstance(gang, Plan):
            return Outcome(gang)
        return Outcome(None, gang)
    if not potential:
        return Outcome(None, fit_error_message(total, {NOT_HELPFUL: total}), True)
    candidates: list[_Candidate] = []
    for slot in potential:
        outcome = evaluation.select_victims(snapshot, slot, pod)
        if isinstance(outcome, _Candidate):
            candidates.append(outcome)
            continue
        for why in outcome:
            counts[why] = counts.get(why, 0) + 1
    if not candidates:
        counts[NOT_HELPFUL] = total - len(potential)
        return Outcome(None, fit_error_message(total, counts), True)
    return Outcome(evaluation.plan(evaluation.pick(candidates)))
