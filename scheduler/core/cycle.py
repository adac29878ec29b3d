"""One scheduling cycle, as kube-scheduler's `schedule_one.go`, for every front end.

`run` (the in-cluster scheduler), `simulate` and `explain` pop pods from the same queue and
decide them here, on the same cache; they differ only in the `Binder` (pods/binding on the API
server, the simulator's in-memory cluster, explain's dry run) and in what they observe through
`CycleHooks` (events and metrics, job records, the per-node report).

The scheduling cycle (`schedule_one`, synchronous, one pod at a time):
PreFilter, Filter, (PostFilter when no node fits), PreScore, Score, NormalizeScore, pick the
node, allocate its devices, assume the pod in the cache, Reserve, Permit.
The binding cycle (`bind`, a coroutine, may overlap later cycles):
wait for Permit, PreBind, Bind, PostBind. Any failure after Reserve runs Unreserve in reverse
order, forgets the assumption and puts the pod back in the queue; the pod is never lost and
never bound twice (one binding cycle per assumed pod).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from scheduler.core.cache import Cache
from scheduler.core.framework import (
    ALLOCATION_KEY,
    BINDER_KEY,
    NO_NODES_MESSAGE,
    Allocation,
    Binder,
    BindOutcome,
    BindResult,
    CycleState,
    FilterPlugin,
    Framework,
    PostFilterResult,
    ScheduleResult,
)
from scheduler.core.model import PodInfo
from scheduler.core.nominator import Nominator
from scheduler.core.preemption import (
    CONTEXT_KEY,
    PLUGIN_NAME,
    Plan,
    PreemptionContext,
    group_key,
)
from scheduler.core.queue import ClusterEvent, QueuedPod, SchedulingQueue

if TYPE_CHECKING:
    from scheduler.core.group import GroupCycle

__all__ = [
    "Assumed",
    "CycleHooks",
    "Decision",
    "Placement",
    "PodScheduling",
    "Scheduler",
    "drive",
    "queue_order",
]

T = TypeVar("T")


def drive(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends (the in-memory and dry-run binders) to its end,
    without an event loop; one that would wait is an error."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coroutine.close()
    raise RuntimeError("the binding cycle waited; run it on an event loop")


def _post_filtering(fw: Framework, pod: PodInfo) -> bool:
    """Whether a PostFilter plugin of the profile has something to do for the pod (a plugin
    may say it has not: `post_filter_applies(pod)`, DynamicResources for pods without
    claims)."""
    for plugin in fw.post_filters:
        applies = getattr(plugin, "post_filter_applies", None)
        if applies is None or applies(pod):
            return True
    return False


def _preempts(fw: Framework) -> bool:
    return any(plugin.name == PLUGIN_NAME for plugin in fw.post_filters)


def queue_order(
    frameworks: Mapping[str, Framework],
) -> Callable[[int, float], tuple[float, ...]] | None:
    """The queue's order: the QueueSort plugin the profiles share (kube allows one)."""
    for fw in frameworks.values():
        if fw.queue_sort is not None:
            return fw.queue_sort.sort_key
    return None


@dataclass(frozen=True, slots=True)
class Decision:
    """What one scheduling cycle did with a pod."""

    pod: PodInfo
    outcome: str  # "assumed" | "unschedulable" | "error" | "skipped"
    result: ScheduleResult | None = None
    message: str | None = None
    assumed: Assumed | None = None
    elapsed: float = 0.0  # seconds in the scheduling algorithm


@dataclass(slots=True)
class Assumed:
    """A pod assumed on a node, waiting for its binding cycle."""

    pod: PodInfo
    node: str
    framework: Framework
    state: CycleState
    attempts: int
    started: float  # perf_counter at the start of its scheduling cycle
    waits: Mapping[str, float] = field(default_factory=dict)  # Permit plugin -> timeout
    permit: asyncio.Future[str | None] | None = None  # set while waiting on Permit

    @property
    def gpus(self) -> tuple[int, ...]:
        """The GPU set allocated for the pod: the cycle state's allocation, which Bind
        (DefaultBinder) hands to the binder (one channel from allocation to Bind)."""
        allocation: Allocation | None = self.state.get(ALLOCATION_KEY)
        return allocation.gpus if allocation is not None else ()


@dataclass(slots=True)
class Placement:
    """One pod placed on the current view (`Scheduler.place`): the decision and, when a
    node fits, the pod assumed there with its GPU set until `commit` or `revert`."""

    queued: QueuedPod[PodInfo]
    framework: Framework
    state: CycleState
    result: ScheduleResult
    started: float
    elapsed: float  # seconds of the decision
    assumed: Assumed | None = None  # None: no node fits (or reverted)
    reserved: bool = False  # Reserve passed ahead of commit (`reserve`: a group member)
    committed: bool = False  # Reserve and Permit passed
    post: PostFilterResult | None = None  # PostFilter's answer when no node fits

    @property
    def pod(self) -> PodInfo:
        return self.queued.pod


class CycleHooks:
    """What a front end observes of the cycle; every method is optional (no-op here)."""

    def decided(self, pod: PodInfo, result: ScheduleResult, state: CycleState) -> None:
        """After the node choice, before anything is assumed (the state it was decided on)."""

    def unschedulable(self, pod: PodInfo, profile: str, message: str, elapsed: float) -> None:
        """No node fits, or Reserve/Permit rejected the pod: it waits in the queue."""

    def failed(
        self,
        pod: PodInfo,
        profile: str,
        message: str,
        elapsed: float,
        error: Exception | None = None,
    ) -> None:
        """A plugin failed with an error (`error`, when it raised): the pod backs off and
        retries."""

    def assumed(self, pod: PodInfo, result: ScheduleResult, attempts: int, elapsed: float) -> None:
        """The pod is assumed on its node; its binding cycle starts."""

    def bound(self, assumed: Assumed, bind_seconds: float) -> None:
        """The binding succeeded."""

    def unbound(self, assumed: Assumed, result: BindResult, requeued: bool) -> None:
        """The binding did not happen; `requeued` tells whether the pod went back to the
        queue (False: it is gone, bound by someone else, or no longer in the queue)."""

    def preempt(self, plan: Plan) -> None:
        """Preemption chose `plan.node` for `plan.preemptor`: evict `plan.victims` (kube marks
        each with the DisruptionTarget condition, deletes it with its grace period and posts
        a `Preempted` event). Victims waiting on Permit were already rejected."""

    def nominated(self, pod: PodInfo, node: str | None) -> None:
        """The pod's nominated node changed (`status.nominatedNodeName`; None: cleared)."""

    def preemption_attempted(self, pod: PodInfo) -> None:
        """DefaultPreemption's PostFilter ran for the pod (a group's leader, for a group)."""


class PodScheduling(Protocol):
    """The narrow interface a group algorithm places pods through (kube's pod-group
    algorithm drives the same one): place one pod on the current view (assumed, with a
    revert), run its Reserve ahead (a group member, before the next is placed), commit it
    (Reserve unless run, Permit), or park it (unschedulable); the cache and the queue it
    reads; the clocks. Every member goes the single pod's way through it."""

    cache: Cache
    queue: SchedulingQueue[PodInfo]
    timer: Callable[[], float]

    def profile_of(self, pod: PodInfo) -> Framework | None: ...

    def now(self) -> float: ...

    def evaluate(self, pod: PodInfo) -> ScheduleResult | None: ...

    def place(
        self,
        queued: QueuedPod[PodInfo],
        *,
        within: Sequence[FilterPlugin] = (),
        post_filter: bool = False,
    ) -> Placement: ...

    def reserve(self, placement: Placement) -> str | None: ...

    def commit(self, placement: Placement, elapsed: float) -> Decision: ...

    def revert(self, placement: Placement) -> None: ...

    def park(self, pod: PodInfo, message: str, elapsed: float) -> Decision: ...

    def preempt_for_group(
        self,
        leader: PodInfo,
        members: Sequence[PodInfo],
        group_problem: str | None = None,
        required_level: str | None = None,
    ) -> str | None: ...

    def hold(self, pod: PodInfo, node: str) -> None: ...

    def release_hold(self, pod: PodInfo, node: str) -> None: ...

    def nominated_node(self, pod: PodInfo) -> str | None: ...

    def inherited_nomination(self, pod: PodInfo) -> str | None: ...


class Scheduler:
    """The cycle over a cache and a queue, with a profile per schedulerName and a binder."""

    def __init__(
        self,
        cache: Cache,
        queue: SchedulingQueue[PodInfo],
        frameworks: Mapping[str, Framework],
        binder: Binder,
        hooks: CycleHooks | None = None,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.cache = cache
        self.queue = queue
        self.frameworks = dict(frameworks)
        self.binder = binder
        self.hooks = hooks or CycleHooks()
        self.timer = timer
        self.waiting: dict[str, Assumed] = {}  # pods waiting on Permit, by key
        # pod groups are placed whole by the group cycle (scheduler.core.group) when set
        self.groups: GroupCycle | None = None
        self.nominator = Nominator()  # pods that preempted, counted on their node
        # the pending members of a pod's group (a gang preemptor must place them all)
        self.pending_members: Callable[[PodInfo], Sequence[PodInfo]] = self._queued_members
        if any(getattr(fw.queue_sort, "fair_share", False) for fw in self.frameworks.values()):
            # PrioritySort's fairShare: namespaces ranked by their quota's dominant share
            queue.fair(
                lambda pod: pod.namespace, lambda ns: cache.snapshot.quotas.dominant_share(ns)
            )

    # ------------------------------------------------------------------ queueing

    def enqueue(self, pod: PodInfo) -> str | None:
        """Add or refresh a pending pod, unless a PreEnqueue plugin holds it back (the
        reason is returned; a gated pod is not in the queue)."""
        if self.groups is not None:
            self.groups.observe(pod)
        fw = self.frameworks.get(pod.scheduler_name)
        gate = fw.run_pre_enqueue(pod) if fw is not None else None
        if gate is not None:
            self.queue.delete(pod.key)
            return gate
        self.nominator.observe(pod)
        self.queue.add(pod.key, pod.priority, pod.creation_timestamp, pod)
        return None

    def forget_nomination(self, key: str) -> None:
        """The pod is gone or bound: it no longer holds room anywhere."""
        self.nominator.remove(key)

    # ------------------------------------------------------------------ the scheduling cycle

    def schedule(self, queued: QueuedPod[PodInfo]) -> list[Decision]:
        """The cycle for a popped pod: the group algorithm (`scheduler.core.group`) for a
        member of a pod group, else the single-pod algorithm (`schedule_one`)."""
        if self.groups is not None and queued.pod.pod_group is not None:
            return self.groups.schedule(self, queued)
        return [self.schedule_one(queued)]

    def schedule_one(self, queued: QueuedPod[PodInfo]) -> Decision:
        """The single-pod algorithm: place, and commit or park (PostFilter when no node
        fits)."""
        pod = queued.pod
        fw = self.profile_of(pod)
        if fw is None:  # the configuration changed: no longer ours
            return self.park(pod, "", 0.0)
        start = self.timer()
        try:
            placement = self.place(queued, post_filter=True)
        except Exception as exc:  # a plugin bug must not stop the loop
            return self._error(pod, fw, exc, start)
        if placement.assumed is None:
            post = placement.post
            message = placement.result.message or NO_NODES_MESSAGE
            if post is not None and post.message:
                message = f"{message} {post.message}"
            self._act_on_preemption(pod, post)
            return self._unschedulable(pod, fw, message, placement.elapsed, placement.result)
        return self.commit(placement, placement.elapsed)

    # ------------------------------------------------------------------ placement interface

    def profile_of(self, pod: PodInfo) -> Framework | None:
        """The profile that schedules the pod (None: no longer ours)."""
        return self.frameworks.get(pod.scheduler_name)

    def now(self) -> float:
        """The queue's clock (backoff and timeouts are measured on it)."""
        return self.queue.now()

    def evaluate(self, pod: PodInfo, state: CycleState | None = None) -> ScheduleResult | None:
        """The decision for a pod on the current view (nominated pods counted), nothing
        assumed: every node's verdict and score (`state`: the cycle state it was decided
        in). None when no profile schedules it."""
        fw = self.profile_of(pod)
        if fw is None:
            return None
        with self.cache.nominated(self.nominator.others(pod), pod.priority):
            return self._decide(fw, pod, state if state is not None else CycleState())

    def place(
        self,
        queued: QueuedPod[PodInfo],
        *,
        within: Sequence[FilterPlugin] = (),
        post_filter: bool = False,
    ) -> Placement:
        """Place one pod on the current view: PreFilter, Filter (`within` first: the nodes
        a placement allows), Score, its nominated node preferred, allocate; when a node fits
        the pod is assumed there with its GPU set (undone by `revert`, kept by `commit`).
        Nominated pods of priority >= its own hold their room (kube's nominator). With
        `post_filter`, PostFilter runs when no node fits (its answer in `Placement.post`).
        Raises what a plugin raises; the pod needs a profile (`profile_of`)."""
        pod = queued.pod
        fw = self.frameworks[pod.scheduler_name]
        start = self.timer()
        state = CycleState(within)
        state.write(BINDER_KEY, self.binder)  # PostFilter and Unreserve write through it
        post: PostFilterResult | None = None
        with self.cache.nominated(self.nominator.others(pod), pod.priority):
            result = self._prefer_nominated(fw, state, pod, self._decide(fw, pod, state))
            elapsed = self.timer() - start
            self.hooks.decided(pod, result, state)
            if result.node is None and post_filter and _post_filtering(fw, pod):
                state.write(CONTEXT_KEY, self._preemption_context(fw, self.pending_members))
                if _preempts(fw):  # counted as it starts, as kube's deferred counter
                    self.hooks.preemption_attempted(pod)
                post = fw.run_post_filter(state, pod, self.cache.snapshot, result)
        placement = Placement(queued, fw, state, result, start, elapsed, post=post)
        if result.node is not None:
            state.write(ALLOCATION_KEY, result.allocation)
            self.cache.assume(pod, result.node, result.gpus)
            placement.assumed = Assumed(pod, result.node, fw, state, queued.attempts, start)
        return placement

    def reserve(self, placement: Placement) -> str | None:
        """Run Reserve for a placed pod now, before the next pod of its group is placed, so
        what Reserve plugins hold (ResourceClaims in flight, quota usage) is seen by the
        next, as kube runs each member's Reserve before the next member's cycle. None, or
        why it failed (the placement is then undone); `commit` runs Permit alone after it."""
        assumed = placement.assumed
        assert assumed is not None and not placement.reserved
        try:
            failure = assumed.framework.run_reserve(assumed.state, assumed.pod, assumed.node)
        except Exception as exc:  # a plugin bug: the member does not fit
            failure = ("", str(exc) or type(exc).__name__)
        if failure is not None:
            self._undo(assumed)
            placement.assumed = None
            return failure[1]
        placement.reserved = True
        return None

    def commit(self, placement: Placement, elapsed: float) -> Decision:
        """Keep a placed pod: its nomination ends, Reserve (unless `reserve` ran) and Permit
        run; a rejection or an error undoes the assumption (the pod waits, or backs off)."""
        assumed = placement.assumed
        assert assumed is not None
        self.forget_nomination(assumed.pod.key)
        decision = self.reserve_and_permit(
            assumed, placement.result, elapsed, reserved=placement.reserved
        )
        placement.committed = decision.outcome == "assumed"
        placement.reserved = placement.committed  # a rejection has already been undone
        return decision

    def revert(self, placement: Placement) -> None:
        """Undo a placement: Unreserve when Reserve ran, forget the assumption."""
        assumed = placement.assumed
        if assumed is None:
            return
        if placement.committed or placement.reserved:
            self._undo(assumed)
        elif self.still_assumed(assumed.pod):
            self.cache.forget(assumed.pod.key)
        placement.assumed = None
        placement.committed = False
        placement.reserved = False

    def park(self, pod: PodInfo, message: str, elapsed: float) -> Decision:
        """The pod waits as unschedulable with `message` (a pod no profile schedules leaves
        the queue: skipped)."""
        fw = self.profile_of(pod)
        if fw is None:
            self.queue.delete(pod.key)
            return Decision(pod, "skipped", message=f"no profile {pod.scheduler_name!r}")
        return self._unschedulable(pod, fw, message, elapsed, None)

    def _decide(self, fw: Framework, pod: PodInfo, state: CycleState) -> ScheduleResult:
        """The framework's decision on the current snapshot: the one call of it in the core."""
        return fw.schedule(pod, self.cache.snapshot, state)

    def reserve_and_permit(
        self, assumed: Assumed, result: ScheduleResult, elapsed: float, *, reserved: bool = False
    ) -> Decision:
        """Reserve (unless it already ran) and Permit for a pod assumed on its node; on a
        rejection or an error the assumption is undone and the pod waits (unschedulable) or
        backs off (error)."""
        pod, node, fw, state, start = (
            assumed.pod,
            assumed.node,
            assumed.framework,
            assumed.state,
            assumed.started,
        )
        key = pod.key
        try:
            failure = None if reserved else fw.run_reserve(state, pod, node)
        except Exception as exc:
            self._undo(assumed)
            return self._error(pod, fw, exc, start)
        if failure is not None:
            self._undo(assumed)
            return self._unschedulable(pod, fw, failure[1], elapsed, result)
        try:
            permit = fw.run_permit(state, pod, node)
        except Exception as exc:
            self._undo(assumed)
            return self._error(pod, fw, exc, start)
        if permit.rejected_by is not None:
            self._undo(assumed)
            message = permit.message or f"rejected by permit plugin {permit.rejected_by}"
            return self._unschedulable(pod, fw, message, elapsed, result)
        if permit.waits:
            assumed.waits = permit.waits
            assumed.permit = asyncio.get_running_loop().create_future()
            self.waiting[key] = assumed
        self.hooks.assumed(pod, result, assumed.attempts, elapsed)
        return Decision(pod, "assumed", result, assumed=assumed, elapsed=elapsed)

    def _prefer_nominated(
        self, fw: Framework, state: CycleState, pod: PodInfo, result: ScheduleResult
    ) -> ScheduleResult:
        """kube evaluates a pod's nominated node first and takes it when it fits."""
        nomination = self.nominator.get(pod.key)
        if nomination is None or result.node is None or result.node == nomination.node:
            return result
        slot = self.cache.snapshot.index.get(nomination.node)
        if slot is None or not result.feasible[slot]:
            return result
        allocation = fw.allocate(state, pod, self.cache.snapshot, slot)
        return dataclasses.replace(result, node=nomination.node, slot=slot, allocation=allocation)

    def _preemption_context(
        self,
        fw: Framework,
        pending_members: Callable[[PodInfo], Sequence[PodInfo]],
        required_level: str | None = None,
    ) -> PreemptionContext:
        """What PostFilter's preemption reads of this scheduler (CycleState, CONTEXT_KEY)."""
        return PreemptionContext(
            fw,
            self.nominator,
            tuple(self.cache.budgets.values()),
            pending_members,
            required_level,
        )

    def preempt_for_group(
        self,
        leader: PodInfo,
        members: Sequence[PodInfo],
        group_problem: str | None = None,
        required_level: str | None = None,
    ) -> str | None:
        """A pod group that does not fit: when its leading member fits nowhere, or the group
        as a whole does not (`group_problem`: over its quota, or no domain of its required
        level has room for it), PostFilter
        (DefaultPreemption) runs for it with the other pending members placed together, so
        victims are evicted only if the whole gang then fits, in one domain of
        `required_level` when the group requires one. The FailedScheduling suffix."""
        fw = self.profile_of(leader)
        if fw is None or not _post_filtering(fw, leader):
            return None
        state = CycleState()
        state.write(BINDER_KEY, self.binder)
        try:
            result = self._decide(fw, leader, state)
            if result.node is not None:
                if group_problem is None:  # it fits alone: eviction is no help to the group
                    return None
                result = dataclasses.replace(
                    result, node=None, slot=None, allocation=None, prefilter_message=group_problem
                )
            context = self._preemption_context(fw, lambda _: members, required_level)
            state.write(CONTEXT_KEY, context)
            if _preempts(fw):
                self.hooks.preemption_attempted(leader)
            post = fw.run_post_filter(state, leader, self.cache.snapshot, result)
        except Exception as exc:  # a plugin bug: no eviction, the group waits
            return f"preemption: {exc or type(exc).__name__}"
        self._act_on_preemption(leader, post)
        return post.message if post is not None else None

    def hold(self, pod: PodInfo, node: str) -> None:
        """Nominate a pending pod to a node to hold room for it there (a pod group's
        reservation): pods of equal or lower priority count it on that node."""
        current = self.nominator.get(pod.key)
        if current is not None and current.node == node:
            if current.inherited:  # ours from now on; the API already says it
                self.nominator.add(pod, node, current.gpus)
            return
        self.nominator.add(pod, node)
        self.hooks.nominated(pod, node)

    def release_hold(self, pod: PodInfo, node: str) -> None:
        """End a hold made by `hold` (a nomination to another node, e.g. by preemption since,
        is left as it is)."""
        current = self.nominator.get(pod.key)
        if current is not None and current.node == node:
            self.nominator.remove(pod.key)
            self.hooks.nominated(pod, None)

    def nominated_node(self, pod: PodInfo) -> str | None:
        current = self.nominator.get(pod.key)
        return current.node if current is not None else None

    def inherited_nomination(self, pod: PodInfo) -> str | None:
        """The node of the pod's nomination when this scheduler did not make it (read from
        `status.nominatedNodeName`: a former leader's reservation or preemption)."""
        current = self.nominator.get(pod.key)
        return current.node if current is not None and current.inherited else None

    def _act_on_preemption(self, pod: PodInfo, post: PostFilterResult | None) -> None:
        """Carry out what DefaultPreemption decided: victims waiting on Permit are rejected,
        the front end evicts the others; lower-priority nominations on the node are cleared
        and the pod is nominated there (kube's prepareCandidate, then the nomination)."""
        if post is None:
            return
        plan = post.plan
        if plan is None:
            if post.clear_nomination and self.nominator.remove(pod.key) is not None:
                self.hooks.nominated(pod, None)
            return
        waiting = {
            v.pod.key for v in plan.victims if self.reject(v.pod.key, PLUGIN_NAME, "preempted")
        }
        self.hooks.preempt(
            dataclasses.replace(
                plan, victims=tuple(v for v in plan.victims if v.pod.key not in waiting)
            )
        )
        for other in plan.cleared:
            self.nominator.remove(other.key)
            self.hooks.nominated(other, None)
        for member, node, gpus in plan.members or ((pod, plan.node, plan.gpus),):
            self.nominator.add(member, node, gpus)
            self.hooks.nominated(member, node)

    def _queued_members(self, pod: PodInfo) -> list[PodInfo]:
        """The other members of the pod's group waiting in the queue."""
        key = group_key(pod)
        if key is None:
            return []
        return [
            qp.pod for qp in self.queue.tracked() if qp.key != pod.key and group_key(qp.pod) == key
        ]

    def _error(self, pod: PodInfo, fw: Framework, error: Exception, start: float) -> Decision:
        elapsed = self.timer() - start
        message = str(error) or type(error).__name__
        self.queue.retry(pod.key)  # back off, then try again
        self.hooks.failed(pod, fw.profile, message, elapsed, error)
        return Decision(pod, "error", message=message, elapsed=elapsed)

    def _unschedulable(
        self,
        pod: PodInfo,
        fw: Framework,
        message: str,
        elapsed: float,
        result: ScheduleResult | None,
    ) -> Decision:
        self.queue.unschedulable(pod.key)
        self.hooks.unschedulable(pod, fw.profile, message, elapsed)
        return Decision(pod, "unschedulable", result, message=message, elapsed=elapsed)

    def _undo(self, assumed: Assumed) -> bool:
        """Unreserve in reverse order and forget the assumption; whether it was forgotten."""
        self.waiting.pop(assumed.pod.key, None)
        try:
            assumed.framework.run_unreserve(assumed.state, assumed.pod, assumed.node)
        finally:
            forgotten = self.still_assumed(assumed.pod)
            if forgotten:
                self.cache.forget(assumed.pod.key)
            else:  # the watch has it on its node: it still uses its quota
                self.cache.recount(assumed.pod.key)
        return forgotten

    def still_assumed(self, pod: PodInfo) -> bool:
        cached = self.cache.get(pod.key)
        return cached is not None and cached.uid == pod.uid and self.cache.is_assumed(pod.key)

    # ------------------------------------------------------------------ Permit

    def allow(self, key: str, plugin: str) -> bool:
        """A Permit plugin lets a waiting pod go (kube's WaitingPod.Allow)."""
        assumed = self.waiting.get(key)
        if assumed is None or assumed.permit is None or plugin not in assumed.waits:
            return False
        assumed.waits = {p: t for p, t in assumed.waits.items() if p != plugin}
        if not assumed.waits and not assumed.permit.done():
            assumed.permit.set_result(None)
        return True

    def reject(self, key: str, plugin: str, message: str) -> bool:
        """A Permit plugin rejects a waiting pod (kube's WaitingPod.Reject)."""
        assumed = self.waiting.get(key)
        if assumed is None or assumed.permit is None or assumed.permit.done():
            return False
        assumed.permit.set_result(message or f"rejected by permit plugin {plugin}")
        return True

    async def _wait_on_permit(self, assumed: Assumed) -> str | None:
        """None once every waiting Permit plugin allowed; else the rejection message."""
        if assumed.permit is None:
            return None
        timeout = min(assumed.waits.values())
        plugin = min(assumed.waits, key=lambda p: assumed.waits[p])
        try:
            async with asyncio.timeout(timeout):
                return await asyncio.shield(assumed.permit)
        except TimeoutError:
            return f"rejected due to timeout after waiting {timeout:g}s at plugin {plugin}"
        finally:
            self.waiting.pop(assumed.pod.key, None)

    # ------------------------------------------------------------------ the binding cycle

    async def bind(self, assumed: Assumed) -> BindResult:
        """Permit wait, PreBind, Bind, PostBind for an assumed pod; on failure Unreserve,
        forget and requeue. Never raises: a crash is a failed binding."""
        pod, node, fw, state = assumed.pod, assumed.node, assumed.framework, assumed.state
        bind_seconds = 0.0
        state.write(BINDER_KEY, self.binder)
        try:
            rejection = await self._wait_on_permit(assumed)
            if rejection is not None:
                # kube's handleBindingCycleError for a rejection: the pod waits as
                # unschedulable; the resources it held are an event for the others
                forgotten = self._undo(assumed)
                self.queue.unschedulable(pod.key)
                if forgotten:
                    self.queue.move_all(ClusterEvent.POD_DELETE, except_key=pod.key)
                self.hooks.unschedulable(pod, fw.profile, rejection, 0.0)
                result = BindResult(BindOutcome.ABORTED, rejection)
                self.hooks.unbound(assumed, result, pod.key in self.queue)
                return result
            failure = await fw.run_pre_bind(state, pod, node)
            if failure is not None:
                result = BindResult(BindOutcome.ERROR, f"{failure[0]}: {failure[1]}")
            else:
                t0 = self.timer()
                result = await fw.run_bind(state, pod, node, self.binder)
                bind_seconds = self.timer() - t0
        except Exception as exc:  # never lose the pod on an unexpected failure
            result = BindResult(BindOutcome.ERROR, str(exc) or type(exc).__name__)
        if result.outcome is BindOutcome.BOUND:
            self.cache.confirm(pod.key)
            self._forget_queued(pod)
            fw.run_post_bind(state, pod, node)
            self.hooks.bound(assumed, bind_seconds)
            return result
        if self._undo(assumed):  # its resources are free again: an event for the others
            self.queue.move_all(ClusterEvent.POD_DELETE)
        requeued = False
        queued = self.queue.get(pod.key)
        same_pod = queued is not None and queued.pod.uid == pod.uid
        if result.outcome is BindOutcome.GONE:  # the pod was deleted
            if same_pod:
                self.queue.delete(pod.key)
        elif same_pod and self.groups is not None and pod.pod_group is not None:
            requeued = self.groups.retry(self, pod)  # backoff, with its group's priority
        elif same_pod:
            # as kube-scheduler, every other failure (a 409 too) is retried after backoff;
            # the watch drops the pod from the queue if someone else really bound it
            requeued = self.queue.retry(pod.key)
        self.hooks.unbound(assumed, result, requeued)
        return result

    def _forget_queued(self, pod: PodInfo) -> None:
        queued = self.queue.get(pod.key)
        if queued is not None and queued.pod.uid == pod.uid:
            self.queue.delete(pod.key)
