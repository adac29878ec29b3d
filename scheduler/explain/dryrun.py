"""explain's one dry run: the pod (or its whole pod group) through the same cycle `run` and
`simulate` use, assembled by `scheduler.assembly`, binding nothing and evicting nothing; with
every node's verdict for the pod (or, for a group that cannot be placed, for the first member
that did not fit)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from scheduler.assembly import assemble
from scheduler.core.cache import Cache
from scheduler.core.cycle import CycleHooks, Decision, drive
from scheduler.core.dra.state import NODE_CHOICES_KEY, NodeChoice
from scheduler.core.dra.types import AllocationResult, ResourceClaim
from scheduler.core.framework import (
    Allocation,
    BindOutcome,
    BindResult,
    CycleState,
    Framework,
    ScheduleResult,
)
from scheduler.core.group import GroupOutcome, GroupSpec
from scheduler.core.model import SOURCE_KUBERNETES, SOURCE_SCHEDULER_PLUGINS, PodInfo
from scheduler.core.network import NetworkBandwidth
from scheduler.core.preemption import Plan

__all__ = ["DryRun", "DryRunBinder", "dry_run", "node_verdicts"]


class DryRunBinder:
    """explain's Binder: the binding is taken as done, nothing is written anywhere."""

    async def bind(self, pod: PodInfo, node: str, gpus: tuple[int, ...]) -> BindResult:
        return BindResult(BindOutcome.BOUND)

    async def write_claim_status(
        self, claim: ResourceClaim, allocation: AllocationResult | None, pod: PodInfo
    ) -> ResourceClaim | None:
        return None  # nothing is written: the claim stays as the snapshot has it


def claim_choices(choice: NodeChoice) -> dict[str, Any]:
    """A node's allocation of the pod's ResourceClaims as explain shows it: per claim its
    devices and, where they are GPUs of the node's topology chosen by NVLink bandwidth, the
    GPU indices and the set's ring bandwidth."""
    out: dict[str, Any] = {}
    for key, result in zip(choice.claims, choice.results, strict=True):
        ids = [d.id for d in result.devices]
        entry: dict[str, Any] = {"devices": [str(i) for i in ids]}
        for preference in choice.preferences:
            if set(preference.devices) <= set(ids):
                entry["gpus"] = sorted(preference.selection.gpus)
                entry["busbw"] = preference.selection.busbw
                break
        out[key] = entry
    return out


def node_verdicts(
    cache: Cache,
    result: ScheduleResult,
    allocate: Callable[[int], Allocation | None] | None = None,
    state: CycleState | None = None,
) -> dict[str, Any]:
    """Every live node's verdict for one decision: feasible with its scores (and the GPU set
    the pod would get there, when `allocate` is given; the devices of its ResourceClaims,
    from the decision's `state`), or the reasons it was rejected."""
    choices: dict[str, NodeChoice] = state.get(NODE_CHOICES_KEY, {}) if state else {}
    snapshot = cache.snapshot
    nodes: dict[str, Any] = {}
    for slot in sorted(snapshot.live_slots(), key=lambda s: snapshot.names[s] or ""):
        name = snapshot.names[slot]
        assert name is not None
        if result.feasible[slot]:
            entry: dict[str, Any] = {
                "feasible": True,
                "reasons": [],
                "scores": {p: int(s[slot]) for p, s in result.scores.items()},
                "total": int(result.totals[slot]),
            }
            allocation = allocate(slot) if allocate is not None else None
            if allocation is not None:
                entry["gpus"] = list(allocation.gpus)
                entry["busbw"] = allocation.busbw
                if allocation.score is not None:
                    entry["gpuSetScore"] = allocation.score
                entry["gpuLinks"] = _link_summary(allocation.links)
            if name in choices:
                entry["claims"] = claim_choices(choices[name])
        else:
            entry = {
                "feasible": False,
                "reasons": result.node_reasons(slot),
                "scores": {},
                "total": None,
            }
        problem = cache.gpus.problem[slot]
        if problem:
            entry["gpuTopologyProblem"] = problem
        nodes[name] = entry
    return nodes


class _NodeReport(CycleHooks):
    """Builds the per-node part of the report from the explained pod's decision, before it
    is assumed (each feasible node's GPU set is what the pod would get there)."""

    def __init__(self, cache: Cache, framework: Framework, target: str) -> None:
        self.cache = cache
        self.framework = framework
        self.target = target
        self.result: ScheduleResult | None = None
        self.nodes: dict[str, Any] = {}
        self.plan: Plan | None = None

    def preempt(self, plan: Plan) -> None:
        self.plan = plan  # a dry run: reported, nothing is evicted

    def decided(self, pod: PodInfo, result: ScheduleResult, state: CycleState) -> None:
        if pod.key != self.target:  # another member of the pod's group
            return
        self.result = result
        snapshot = self.cache.snapshot
        self.nodes = node_verdicts(
            self.cache,
            result,
            lambda slot: self.framework.allocate(state, pod, snapshot, slot),
            state,
        )


@dataclass
class DryRun:
    """What the dry run found for the explained pod."""

    pod: PodInfo
    decision: Decision
    result: ScheduleResult | None  # its last decision (None: no node was looked at)
    nodes: dict[str, Any]  # every node's verdict (see `dry_run`)
    plan: Plan | None  # preemption's plan, not carried out
    notes: list[str] = field(default_factory=list)
    outcome: GroupOutcome | None = None  # a pod group's: the group algorithm's outcome


def dry_run(
    cache: Cache,
    pod: PodInfo,
    framework: Framework,
    *,
    pending: Iterable[PodInfo] = (),
    groups: Iterable[GroupSpec] = (),
    levels: tuple[str, ...] = (),
    network: NetworkBandwidth | None = None,
    reservation_timeout: float = 0.0,
) -> DryRun:
    """The scheduling cycle for the pod on the snapshot, binding nothing and evicting nothing.
    `pending`: the snapshot's pending pods (nominated ones hold room on their node; members of
    the pod's group are placed with it by the group algorithm, `groups` its PodGroup objects,
    `levels` the topologyLevels, `network` the networkBandwidth its placements are priced with;
    the runner-up placement is tried too; with `reservation_timeout`, the gangReservationSeconds,
    a group that does not fit shows the capacity a reservation would hold for it). The cache
    is left as it was."""
    ref = pod.pod_group
    cache.remove_pod(pod.key)  # a bound pod is explained as if it were not there yet
    notes = [
        f"pod {key} on {node} holds GPUs {','.join(map(str, gpus))} as the device plugin "
        "would have assigned them (no record of its GPUs)"
        for key, node, gpus in cache.guessed_gpus()
    ]
    notes += cache.unreadable()  # bound pods counted without the parts that cannot be read
    report = _NodeReport(cache, framework, pod.key)
    outcomes: list[GroupOutcome] = []
    assembly = assemble(
        None,
        DryRunBinder(),
        clock=lambda: 0.0,
        frameworks={pod.scheduler_name: framework},
        hooks=report,
        cache=cache,
        groups=ref is not None,
        levels=levels,
        network=network,
        reservation_timeout=reservation_timeout,
        observer=outcomes.append,
    )
    if assembly.groups is not None:
        assembly.groups.compare_all = True  # the runner-up's bus bandwidth, for the report
    cycle, queue = assembly.cycle, assembly.queue
    waiting = [other for other in pending if other.key != pod.key]
    for other in waiting:
        cycle.nominator.observe(other)
    cycle.nominator.observe(pod)
    members: list[PodInfo] = []
    if assembly.groups is not None and ref is not None:
        assembly.groups.served |= {SOURCE_SCHEDULER_PLUGINS, SOURCE_KUBERNETES}
        for spec in groups:
            assembly.groups.set_spec(spec)
        for bound in cache.snapshot.pods:  # members already bound count for the group
            for other in bound.values():
                assembly.groups.observe(other)
        members = [
            p
            for p in waiting
            if p.pod_group is not None
            and (p.pod_group.source, p.pod_group.key) == (ref.source, ref.key)
            and p.scheduler_name == pod.scheduler_name
        ]
    queue.add(pod.key, pod.priority, pod.creation_timestamp, pod)
    queued = queue.pop()
    assert queued is not None
    for member in members:
        cycle.enqueue(member)
    decisions = cycle.schedule(queued)
    for decision in decisions:
        if decision.assumed is not None:
            drive(cycle.bind(decision.assumed))
    for placed in (pod, *members):  # a dry run: the cache is left as it was
        cache.remove_pod(placed.key)
    mine = next(d for d in decisions if d.pod.key == pod.key)
    outcome = outcomes[-1] if outcomes else None
    nodes = report.nodes
    if outcome is not None and not outcome.scheduled and not outcome.waiting:
        # a group that cannot be placed: every node's verdict for the first member that did
        # not fit; when no domain was tried (none has the room), the pod's own verdicts
        blocked = outcome.blocked
        if blocked is not None and blocked.result is not None:
            nodes = node_verdicts(cache, blocked.result)
        elif report.result is None:
            state = CycleState()
            try:
                result = cycle.evaluate(pod, state)
            except Exception:  # a plugin failed: the group's message says why
                result = None
            if result is not None:
                snapshot = cache.snapshot
                nodes = node_verdicts(
                    cache,
                    result,
                    lambda slot: framework.allocate(state, pod, snapshot, slot),
                    state,
                )
    notes += [
        f"node {name}: GPU topology ignored (count-only): {entry['gpuTopologyProblem']}"
        for name, entry in nodes.items()
        if "gpuTopologyProblem" in entry
    ]
    return DryRun(pod, mine, report.result, nodes, report.plan, notes, outcome)


def _link_summary(links: Iterable[str]) -> str:
    """`0-1 NV18`, `0-2 NV18`, ... -> `NV18 x2`: the link types inside a GPU set."""
    counts: dict[str, int] = {}
    for link in links:
        kind = link.split(" ", 1)[-1]
        counts[kind] = counts.get(kind, 0) + 1
    return ", ".join(f"{kind} x{n}" for kind, n in sorted(counts.items()))
