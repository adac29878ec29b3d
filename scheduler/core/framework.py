"""The scheduling framework: plugin interfaces per extension point, CycleState, the profile.

Shaped after kube-scheduler's framework (`pkg/scheduler/framework`). A plugin implements the
extension points it needs, each a small protocol; the configuration enables it at every point
it implements (MultiPoint) or at the points it names. One scheduling cycle
(`scheduler.core.cycle`) runs the points in kube's order:

    PreEnqueue -> QueueSort -> PreFilter -> Filter -> [PostFilter] -> PreScore -> Score ->
    NormalizeScore -> (pick node, allocate devices, assume) -> Reserve -> Permit ->
    PreBind -> Bind -> PostBind          (Unreserve, in reverse, on any failure after Reserve)

Plugins work on the whole snapshot at once (numpy columns). Per-cycle values a plugin computes
at PreFilter or PreScore go in the cycle's `CycleState` for its later points. The per-node
reference forms of the plugins, which tests hold equal to the vector forms, are an optional
protocol in `scheduler.core.reference`.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from scheduler.core.dra.state import ClaimWriteError
from scheduler.core.model import PodInfo
from scheduler.core.snapshot import BoolArray, IntArray, Snapshot

if TYPE_CHECKING:
    from scheduler.core.dra.types import AllocationResult, ResourceClaim
    from scheduler.core.preemption import Plan

__all__ = [
    "ALLOCATION_KEY",
    "BINDER_KEY",
    "MAX_NODE_SCORE",
    "NO_NODES_MESSAGE",
    "POINTS",
    "Allocation",
    "Allocator",
    "BindOutcome",
    "BindPlugin",
    "BindResult",
    "Binder",
    "ClaimStatusEditor",
    "ClaimStatusWriter",
    "ClaimWriteError",
    "CycleState",
    "FilterPlugin",
    "Framework",
    "NotInCycleState",
    "Permit",
    "PermitPlugin",
    "Plugin",
    "PluginFactory",
    "PostBindPlugin",
    "PostFilterPlugin",
    "PostFilterResult",
    "PreBindPlugin",
    "PreEnqueuePlugin",
    "PreFilterPlugin",
    "PreFilterResult",
    "PreScorePlugin",
    "QueueSortPlugin",
    "ReasonMasks",
    "Registry",
    "ReservePlugin",
    "ScheduleResult",
    "ScoreNormalizer",
    "ScorePlugin",
    "default_normalize",
    "default_normalize_reference",
    "fit_error_message",
    "pick_node",
    "slots_named",
]

MAX_NODE_SCORE = 100
NO_NODES_MESSAGE = "no nodes available to schedule pods"
ALLOCATION_KEY = "topo-scheduler/allocation"
"""CycleState key of the devices allocated on the chosen node (an `Allocation` or None):
the one channel of the GPU set from the cycle's assumption to Bind (`Assumed.gpus`,
DefaultBinder)."""
BINDER_KEY = "topo-scheduler/binder"
"""CycleState key of the cycle's `Binder`, written before PreBind: a PreBind plugin that
writes API objects does it through the binder (DynamicResources: `ClaimStatusWriter`)."""
FILTER_PLUGINS_KEY = "topo-scheduler/filter-plugins"
"""CycleState key of the plugin behind each entry of the decision's filter trace, in order
(PostFilter plugins read it: kube's per-node status carries the plugin)."""

# A filter's verdict: (reason, mask of slots failing for that reason), in reason order.
ReasonMasks = list[tuple[str, BoolArray]]


class NotInCycleState(LookupError):
    """A plugin read what no PreFilter wrote (kube's framework.ErrNotFound)."""


class CycleState:
    """What plugins compute during one pod's cycle and read at later points (kube's
    CycleState). Keys are namespaced by the writing plugin's name by convention."""

    __slots__ = ("_data", "skip_filter", "skip_score", "within")

    def __init__(self, within: Sequence[FilterPlugin] = ()) -> None:
        self._data: dict[str, Any] = {}
        self.skip_filter: set[str] = set()  # plugins whose PreFilter said Skip
        self.skip_score: set[str] = set()  # plugins whose PreScore said Skip
        # the placement's own filters, run before the profile's: the nodes a group
        # algorithm's placement allows (a pod group's domain, `scheduler.core.domains`)
        self.within: tuple[FilterPlugin, ...] = tuple(within)

    def write(self, key: str, value: Any) -> None:
        self._data[key] = value

    def read(self, key: str) -> Any:
        """The value written under `key`; NotInCycleState when nothing was (its PreFilter
        did not run: a plugin bug, or a profile that disables a PreFilter and keeps the
        plugin's Filter, which kube-scheduler accepts and fails every pod with)."""
        try:
            return self._data[key]
        except KeyError:
            raise NotInCycleState(f'error reading "{key}" from cycleState: not found') from None

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)


class Plugin(Protocol):
    """Every plugin has a name, the one used in profiles and in `explain`."""

    name: str


# ------------------------------------------------------------------ the extension points


@runtime_checkable
class PreEnqueuePlugin(Protocol):
    name: str

    def pre_enqueue(self, pod: PodInfo) -> str | None:
        """Why the pod may not enter the active queue yet (None: it may)."""
        ...


@runtime_checkable
class QueueSortPlugin(Protocol):
    name: str

    def sort_key(self, priority: int, created: float) -> tuple[float, ...]:
        """The queue's order: smaller keys are popped first (kube's Less as a key)."""
        ...


@dataclass(frozen=True, slots=True)
class PreFilterResult:
    """Narrows the nodes (`node_names`), rejects the pod (`unschedulable`), or says the
    plugin has nothing to check for this pod (`skip`: its Filter is not run)."""

    node_names: frozenset[str] | None = None
    unschedulable: str | None = None
    skip: bool = False


SKIP = PreFilterResult(skip=True)


@runtime_checkable
class PreFilterPlugin(Protocol):
    name: str

    def pre_filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot
    ) -> PreFilterResult | None: ...


@runtime_checkable
class FilterPlugin(Protocol):
    name: str

    def filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: BoolArray
    ) -> ReasonMasks:
        """Reasons with the slots they reject; only slots in `candidates` need be right."""
        ...


@dataclass(frozen=True, slots=True)
class PostFilterResult:
    """A PostFilter's answer: a node nominated for the pod, and/or a message to append to
    the FailedScheduling text. Preemption's plan (victims, nominations) rides with it for the
    cycle to act on; `clear_nomination`: the pod's own nomination no longer helps."""

    nominated_node: str | None = None
    message: str | None = None
    plan: Plan | None = None
    clear_nomination: bool = False


@runtime_checkable
class PostFilterPlugin(Protocol):
    name: str

    def post_filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, result: ScheduleResult
    ) -> PostFilterResult | None:
        """Runs only when no node fits (preemption lives here)."""
        ...


@runtime_checkable
class PreScorePlugin(Protocol):
    name: str

    def pre_score(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, feasible: BoolArray
    ) -> bool:
        """Prepare the plugin's Score; False means Skip (its Score is not run)."""
        ...


@runtime_checkable
class ScorePlugin(Protocol):
    name: str

    def score(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, feasible: BoolArray
    ) -> IntArray | None:
        """Raw scores for every slot (only feasible ones matter); None skips the plugin."""
        ...


@runtime_checkable
class ScoreNormalizer(Protocol):
    """Optional beside Score (kube's ScoreExtensions): without it scores are used as is."""

    def normalize(self, state: CycleState, scores: IntArray, feasible: BoolArray) -> IntArray:
        """Scale raw scores to 0..100 over the feasible slots."""
        ...


@dataclass(frozen=True, slots=True)
class Allocation:
    """Devices chosen for a pod on one node, with how good the set is."""

    gpus: tuple[int, ...]
    score: int | None = None
    links: tuple[str, ...] = ()
    busbw: float | None = None


@runtime_checkable
class Allocator(Protocol):
    """A plugin that picks devices on a node (the GPU set). The cycle asks it for the chosen
    node before assuming the pod, so the cache accounts the devices with the pod."""

    name: str

    def allocate(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, slot: int
    ) -> Allocation | None: ...


@runtime_checkable
class ReservePlugin(Protocol):
    name: str

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> str | None:
        """Reserve what the pod needs on `node`; a message means failure."""
        ...

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        """Undo `reserve` (idempotent: also called when reserve failed or never ran)."""
        ...


class PermitCode(enum.Enum):
    ALLOW = "allow"
    REJECT = "reject"
    WAIT = "wait"


@dataclass(frozen=True, slots=True)
class Permit:
    code: PermitCode = PermitCode.ALLOW
    message: str = ""
    timeout: float = 0.0  # seconds, for WAIT

    @staticmethod
    def allow() -> Permit:
        return Permit()

    @staticmethod
    def reject(message: str) -> Permit:
        return Permit(PermitCode.REJECT, message)

    @staticmethod
    def wait(timeout: float) -> Permit:
        return Permit(PermitCode.WAIT, timeout=timeout)


@runtime_checkable
class PermitPlugin(Protocol):
    name: str

    def permit(self, state: CycleState, pod: PodInfo, node: str) -> Permit: ...


@runtime_checkable
class PreBindPlugin(Protocol):
    name: str

    def pre_bind(self, state: CycleState, pod: PodInfo, node: str) -> Awaitable[str | None]:
        """Work before the binding (e.g. volume binding); a message means failure."""
        ...


class BindOutcome(enum.Enum):
    BOUND = "bound"
    CONFLICT = "conflict"  # already bound (409): not ours to retry
    GONE = "gone"  # the pod was deleted (404)
    ABORTED = "aborted"  # not attempted (no longer assumed, node gone, shutting down)
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class BindResult:
    outcome: BindOutcome
    message: str = ""


class Binder(Protocol):
    """Where a binding goes: the API server (pods/binding), the simulator's in-memory cluster,
    or nowhere (explain's dry run). One interface, three implementations. A binder that can
    also write ResourceClaim status (DynamicResources' PreBind) implements
    `ClaimStatusWriter` beside `bind`."""

    async def bind(self, pod: PodInfo, node: str, gpus: tuple[int, ...]) -> BindResult: ...


@runtime_checkable
class ClaimStatusWriter(Protocol):
    """The binder's ResourceClaim operation: DynamicResources' PreBind (kube's bindClaim)."""

    async def write_claim_status(
        self, claim: ResourceClaim, allocation: AllocationResult | None, pod: PodInfo
    ) -> ResourceClaim | None:
        """Store `allocation` (when given; the claim must still be unallocated) in the
        claim's `status.allocation` and add the pod to `status.reservedFor`, through the
        status subresource, re-reading the claim and retrying on a conflict (the finalizer
        `resource.kubernetes.io/delete-protection` added first when allocating). The claim
        as written, or None when nothing is written anywhere (a dry run); ClaimWriteError
        when the claim is gone, being deleted, allocated elsewhere, or the write fails."""
        ...


@runtime_checkable
class ClaimStatusEditor(Protocol):
    """The binder's other ResourceClaim operations: DynamicResources' PostFilter
    (deallocation) and Unreserve (the pod out of `reservedFor`)."""

    async def deallocate_claim(self, claim: ResourceClaim) -> ResourceClaim | None:
        """Clear `status.allocation` and `status.reservedFor` of `claim` as PreFilter saw it
        (an update of the status subresource: a conflict when it changed since). The claim
        as written, None when nothing is written (a dry run); ClaimWriteError on failure."""
        ...

    async def unreserve_claim(self, claim: ResourceClaim, pod: PodInfo) -> ResourceClaim | None:
        """Remove the pod (by uid) from `status.reservedFor` (kube patches with
        `$patch: delete`, so no version is needed). As `deallocate_claim`."""
        ...


@runtime_checkable
class BindPlugin(Protocol):
    name: str

    def bind(
        self, state: CycleState, pod: PodInfo, node: str, binder: Binder
    ) -> Awaitable[BindResult | None]:
        """Bind the pod, or None to leave it to the next Bind plugin (kube's Skip)."""
        ...


@runtime_checkable
class PostBindPlugin(Protocol):
    name: str

    def post_bind(self, state: CycleState, pod: PodInfo, node: str) -> None: ...


# The extension points of a profile, by their KubeSchedulerConfiguration field name, with
# the protocol a plugin enabled there must implement (kube's "does not extend" check).
POINTS: dict[str, type] = {
    "preEnqueue": PreEnqueuePlugin,
    "queueSort": QueueSortPlugin,
    "preFilter": PreFilterPlugin,
    "filter": FilterPlugin,
    "postFilter": PostFilterPlugin,
    "preScore": PreScorePlugin,
    "score": ScorePlugin,
    "reserve": ReservePlugin,
    "permit": PermitPlugin,
    "preBind": PreBindPlugin,
    "bind": BindPlugin,
    "postBind": PostBindPlugin,
}

PluginFactory = Callable[[Mapping[str, Any] | None, str], Plugin]
"""Builds a plugin from its pluginConfig args; the str is the args' path for errors."""

Registry = Mapping[str, PluginFactory]


# ------------------------------------------------------------------ scores and messages


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


def absent_reason(plugin: str) -> str:
    return f"node(s) didn't satisfy plugin(s) [{plugin}]"


FilterTrace = list[tuple[BoolArray, ReasonMasks]]
"""Per rejecting filter, in order: the slots it rejected first and its reason masks."""


def _reason_counts(trace: FilterTrace) -> dict[str, int]:
    counts: dict[str, int] = {}
    for rejected, masks in trace:
        for reason, mask in masks:
            n = int(np.count_nonzero(rejected & mask))
            if n:
                counts[reason] = counts.get(reason, 0) + n
    return counts


@dataclass(frozen=True, kw_only=True)
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
    filter_trace: FilterTrace = field(repr=False, default_factory=list)
    prefilter_message: str | None = field(default=None, repr=False)

    @property
    def gpus(self) -> tuple[int, ...]:
        return self.allocation.gpus if self.allocation else ()

    def reason_counts(self) -> dict[str, int]:
        return _reason_counts(self.filter_trace)

    def node_reasons(self, slot: int) -> list[str]:
        """Why one slot was rejected (its first failing filter's reasons)."""
        if self.prefilter_message is not None:
            return [self.prefilter_message]
        for rejected, masks in self.filter_trace:
            if rejected[slot]:
                return [reason for reason, mask in masks if mask[slot]]
        return []


def slots_named(snapshot: Snapshot, names: frozenset[str]) -> BoolArray:
    """The slots of the named nodes (a PreFilter plugin's node-name restriction)."""
    allowed = np.zeros(snapshot.capacity, np.bool_)
    for name in names:
        slot = snapshot.index.get(name)
        if slot is not None:
            allowed[slot] = True
    return allowed


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


# ------------------------------------------------------------------ the profile


@dataclass(frozen=True, slots=True)
class PermitDecision:
    """The Permit plugins together: rejected (by whom, why), or waiting on some of them."""

    rejected_by: str | None = None
    message: str = ""
    waits: Mapping[str, float] = field(default_factory=dict)  # plugin -> timeout


class Framework:
    """One profile's plugins at each extension point, in the configured order."""

    def __init__(
        self,
        profile: str,
        *,
        filters: Sequence[FilterPlugin] = (),
        scores: Sequence[tuple[ScorePlugin, int]] = (),
        pre_filters: Sequence[PreFilterPlugin] = (),
        allocators: Sequence[Allocator] = (),
        pre_enqueue: Sequence[PreEnqueuePlugin] = (),
        queue_sort: QueueSortPlugin | None = None,
        post_filters: Sequence[PostFilterPlugin] = (),
        pre_scores: Sequence[PreScorePlugin] = (),
        reserve: Sequence[ReservePlugin] = (),
        permit: Sequence[PermitPlugin] = (),
        pre_bind: Sequence[PreBindPlugin] = (),
        bind: Sequence[BindPlugin] = (),
        post_bind: Sequence[PostBindPlugin] = (),
    ) -> None:
        self.profile = profile
        self.filters = list(filters)
        self.scores = list(scores)
        self.pre_filters = list(pre_filters)
        self.allocators = list(allocators)
        self.pre_enqueue = list(pre_enqueue)
        self.queue_sort = queue_sort
        self.post_filters = list(post_filters)
        self.pre_scores = list(pre_scores)
        self.reserve = list(reserve)
        self.permit = list(permit)
        self.pre_bind = list(pre_bind)
        self.bind = list(bind)
        self.post_bind = list(post_bind)
        self.weights = {plugin.name: weight for plugin, weight in scores}
        # decided once: a protocol isinstance check costs microseconds, per pod per plugin
        self._normalizers: dict[str, ScoreNormalizer] = {
            plugin.name: plugin for plugin, _ in scores if isinstance(plugin, ScoreNormalizer)
        }

    def plugins(self) -> dict[str, list[str]]:
        """Plugin names per extension point (for explain, logs and tests)."""
        return {
            "preEnqueue": [p.name for p in self.pre_enqueue],
            "queueSort": [self.queue_sort.name] if self.queue_sort else [],
            "preFilter": [p.name for p in self.pre_filters],
            "filter": [p.name for p in self.filters],
            "postFilter": [p.name for p in self.post_filters],
            "preScore": [p.name for p in self.pre_scores],
            "score": [p.name for p, _ in self.scores],
            "reserve": [p.name for p in self.reserve],
            "permit": [p.name for p in self.permit],
            "preBind": [p.name for p in self.pre_bind],
            "bind": [p.name for p in self.bind],
            "postBind": [p.name for p in self.post_bind],
        }

    # ------------------------------------------------------------------ queueing

    def run_pre_enqueue(self, pod: PodInfo) -> str | None:
        """The first PreEnqueue plugin's reason to keep the pod out of the active queue."""
        for plugin in self.pre_enqueue:
            reason = plugin.pre_enqueue(pod)
            if reason is not None:
                return reason
        return None

    # ------------------------------------------------------------------ finding a node

    def run_pre_filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot
    ) -> tuple[str | None, list[tuple[str, frozenset[str]]]]:
        """PreFilter plugins in order: a rejection, or the node-name restrictions."""
        restrictions: list[tuple[str, frozenset[str]]] = []
        for plugin in self.pre_filters:
            result = plugin.pre_filter(state, pod, snapshot)
            if result is None:
                continue
            if result.unschedulable is not None:
                return result.unschedulable, []
            if result.skip:
                state.skip_filter.add(plugin.name)
            if result.node_names is not None:
                restrictions.append((plugin.name, result.node_names))
        return None, restrictions

    def schedule(
        self, pod: PodInfo, snapshot: Snapshot, state: CycleState | None = None
    ) -> ScheduleResult:
        """PreFilter, Filter, PreScore, Score, NormalizeScore, pick the node and allocate
        its devices (kube's SchedulePod): the decision, with every node's verdict."""
        state = state if state is not None else CycleState()
        live = snapshot.live.copy()
        total_nodes = snapshot.live_count
        trace: FilterTrace = []
        if total_nodes == 0:
            return self._result(pod, live, live.copy(), message=NO_NODES_MESSAGE)
        prefilter_message, restrictions = self.run_pre_filter(state, pod, snapshot)
        if prefilter_message is not None:
            return self._result(
                pod,
                live,
                np.zeros_like(live),
                message=f"0/{total_nodes} nodes are available: {prefilter_message}.",
                prefilter_message=prefilter_message,
            )
        alive = live.copy()
        rejecting: list[str] = []  # the plugin behind each trace entry
        state.write(FILTER_PLUGINS_KEY, rejecting)
        for plugin_name, names in restrictions:
            allowed = slots_named(snapshot, names)
            absent = alive & ~allowed
            trace.append((absent, [(absent_reason(plugin_name), absent)]))
            rejecting.append(plugin_name)
            alive &= allowed
        alive, rejections = self.run_filters(state, pod, snapshot, alive)
        for plugin_name, rejected, masks in rejections:
            trace.append((rejected, masks))
            rejecting.append(plugin_name)
        return self._score(state, pod, snapshot, live, alive, trace, total_nodes)

    def run_filters(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: BoolArray
    ) -> tuple[BoolArray, list[tuple[str, BoolArray, ReasonMasks]]]:
        """Filter plugins in order over the candidate slots (the placement's, `state.within`,
        before the profile's): the slots that pass, and per rejecting plugin its name, the
        slots it rejected first and its reasons."""
        alive = candidates.copy()
        rejections: list[tuple[str, BoolArray, ReasonMasks]] = []
        within = state.within
        for plugin in (*within, *self.filters) if within else self.filters:
            if not alive.any():
                break
            if plugin.name in state.skip_filter:
                continue
            masks = plugin.filter(state, pod, snapshot, alive)
            if not masks:
                continue
            failed = np.zeros_like(alive)
            for _, mask in masks:
                failed |= mask
            rejected = alive & failed
            if rejected.any():
                rejections.append((plugin.name, rejected, masks))
                alive &= ~failed
        return alive, rejections

    def _score(
        self,
        state: CycleState,
        pod: PodInfo,
        snapshot: Snapshot,
        live: BoolArray,
        feasible: BoolArray,
        trace: FilterTrace,
        total_nodes: int,
    ) -> ScheduleResult:
        scores: dict[str, IntArray] = {}
        totals = np.zeros(snapshot.capacity, np.int64)
        if feasible.any():
            for pre in self.pre_scores:
                if not pre.pre_score(state, pod, snapshot, feasible):
                    state.skip_score.add(pre.name)
            for plugin, weight in self.scores:
                if plugin.name in state.skip_score:
                    continue
                raw = plugin.score(state, pod, snapshot, feasible)
                if raw is None:
                    continue
                normalizer = self._normalizers.get(plugin.name)
                if normalizer is not None:
                    raw = normalizer.normalize(state, raw, feasible)
                scores[plugin.name] = raw
                totals += raw * weight
        slot = pick_node(snapshot, feasible, totals)
        if slot is None:
            message = fit_error_message(total_nodes, _reason_counts(trace))
            return self._result(
                pod, live, feasible, scores=scores, totals=totals, trace=trace, message=message
            )
        return self._result(
            pod,
            live,
            feasible,
            scores=scores,
            totals=totals,
            trace=trace,
            slot=slot,
            node=snapshot.names[slot],
            allocation=self.allocate(state, pod, snapshot, slot),
        )

    def _result(
        self,
        pod: PodInfo,
        live: BoolArray,
        feasible: BoolArray,
        *,
        scores: dict[str, IntArray] | None = None,
        totals: IntArray | None = None,
        trace: FilterTrace | None = None,
        slot: int | None = None,
        node: str | None = None,
        allocation: Allocation | None = None,
        message: str | None = None,
        prefilter_message: str | None = None,
    ) -> ScheduleResult:
        return ScheduleResult(
            pod=pod,
            profile=self.profile,
            node=node,
            slot=slot,
            allocation=allocation,
            message=message,
            feasible=feasible,
            live=live,
            scores=scores or {},
            totals=totals if totals is not None else np.zeros(0, np.int64),
            weights=self.weights,
            filter_trace=trace or [],
            prefilter_message=prefilter_message,
        )

    def allocate(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, slot: int
    ) -> Allocation | None:
        """Devices the allocator plugins pick for the pod on one slot."""
        for allocator in self.allocators:
            allocation = allocator.allocate(state, pod, snapshot, slot)
            if allocation is not None:
                return allocation
        return None

    def run_post_filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, result: ScheduleResult
    ) -> PostFilterResult | None:
        """PostFilter plugins in order until one nominates a node; when none does, the
        last answer with every plugin's message joined by ", " in order (kube's
        RunPostFilterPlugins joins the reasons of the plugins that stayed Unschedulable)."""
        last = None
        messages: list[str] = []
        for plugin in self.post_filters:
            answer = plugin.post_filter(state, pod, snapshot, result)
            if answer is None:
                continue
            if answer.nominated_node is not None:
                return answer
            if answer.message:
                messages.append(answer.message)
            clear = answer.clear_nomination or (last is not None and last.clear_nomination)
            last = dataclasses.replace(answer, clear_nomination=clear)
        if last is not None and len(messages) > 1:
            last = dataclasses.replace(last, message=", ".join(messages))
        return last

    # ------------------------------------------------------------------ reserving a node

    def run_reserve(self, state: CycleState, pod: PodInfo, node: str) -> tuple[str, str] | None:
        """Reserve plugins in order; on the first failure (plugin, message) is returned and
        the caller runs Unreserve on all of them."""
        for plugin in self.reserve:
            message = plugin.reserve(state, pod, node)
            if message is not None:
                return plugin.name, message
        return None

    def run_unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        """Unreserve every Reserve plugin, in reverse order (kube's)."""
        for plugin in reversed(self.reserve):
            plugin.unreserve(state, pod, node)

    def run_permit(self, state: CycleState, pod: PodInfo, node: str) -> PermitDecision:
        waits: dict[str, float] = {}
        for plugin in self.permit:
            answer = plugin.permit(state, pod, node)
            if answer.code is PermitCode.REJECT:
                return PermitDecision(rejected_by=plugin.name, message=answer.message)
            if answer.code is PermitCode.WAIT:
                waits[plugin.name] = answer.timeout
        return PermitDecision(waits=waits)

    # ------------------------------------------------------------------ binding

    async def run_pre_bind(
        self, state: CycleState, pod: PodInfo, node: str
    ) -> tuple[str, str] | None:
        for plugin in self.pre_bind:
            message = await plugin.pre_bind(state, pod, node)
            if message is not None:
                return plugin.name, message
        return None

    async def run_bind(
        self, state: CycleState, pod: PodInfo, node: str, binder: Binder
    ) -> BindResult:
        for plugin in self.bind:
            result = await plugin.bind(state, pod, node, binder)
            if result is not None:
                return result
        return BindResult(BindOutcome.ERROR, "no bind plugin bound the pod")

    def run_post_bind(self, state: CycleState, pod: PodInfo, node: str) -> None:
        for plugin in self.post_bind:
            plugin.post_bind(state, pod, node)
