"""Gang scheduling: a pod group is placed whole, in the narrowest network domain, or not at all.

Three sources name a group, all read into one `GroupSpec`:

- scheduler-plugins' `PodGroup` (`scheduling.x-k8s.io/v1alpha1`: `spec.minMember`,
  `spec.minResources`, `spec.scheduleTimeoutSeconds`); pods join with the label
  `scheduling.x-k8s.io/pod-group: NAME` (what Kubeflow's training-operator and Trainer create);
- Kubernetes' own `PodGroup` (`scheduling.k8s.io/v1beta1`: `spec.schedulingPolicy.gang.minCount`,
  `spec.schedulingConstraints.topology[0].key`, a required level); pods join through
  `spec.schedulingGroup.podGroupName`;
- no object at all: the pods' annotations `topo-scheduler.io/pod-group: NAME` and
  `topo-scheduler.io/min-member: N`.

Either form may ask for a network domain with `topo-scheduler.io/topology-required` or
`topo-scheduler.io/topology-preferred: <node label key>` (on the PodGroup or on its pods). With
topology levels configured, a group asking for neither is placed as if it preferred the
narrowest level; `topo-scheduler.io/topology-anywhere: "true"` opts out (placed across the
cluster, each member on its best node).

The group cycle (`GroupCycle.schedule`), run when any member is popped:

1. Fewer than minMember members exist (pending, assumed or bound): the popped pod waits
   (`waiting for 2 more pods of pod group ml/llama`), no node is looked at.
2. Every pending member is taken from the queue and placed on the one snapshot, each assumed
   with its GPU set before the next is placed (so they never count the same GPUs twice), in
   the chosen domain when the group asks for one.
3. If at least minMember minus the members already placed fit, every placed member runs
   Reserve and Permit and goes to its binding cycle; otherwise every assumption is forgotten
   (nothing was reserved, nothing holds resources while it waits) and every member gets the
   group's message once, e.g. ``pod group ml/llama: 3/4 pods fit; 0/12 nodes are available
   for the 4th: 8 Insufficient nvidia.com/gpu.``. The members back off together (one attempt
   count, one backoff).
4. A binding that fails backs off as any pod's does (the queue's podInitialBackoffSeconds
   doubling to podMaxBackoffSeconds); when others of the group are bound it keeps the group's
   priority.

A PodGroup object that cannot be read (`GroupError`, naming the field) drops the group's spec:
its members wait with the reason, never placed on a stale copy (`GroupCycle.set_unreadable`).
When a PodGroup changes, becomes unreadable or is deleted, `GroupCycle.reconcile` retries its
pending members under what the group now is and reports its bound ones.

A domain: for a required level, the group goes to one domain of it or nowhere; otherwise the
candidates are the domains of every level that hold all pending members by their free room,
and the whole cluster. Candidates are placed in turn (each try assumed, priced, reverted) and
compared in one order:

1. (a required level) the members placed: all pending ones first;
2. the modelled all-reduce time of the whole group on that placement (`scheduler.core.network`:
   each node's GPU set, the network levels crossed), shorter first;
3. the narrower level first (a leaf before a spine before the whole cluster);
4. the least free room in the group's own terms (bin packing);
5. the best total score, then the domain's name.

A candidate whose lower bound on the time (the best GPU set of its nodes' types, the fewest
nodes, the fastest links) cannot beat the best placement found is not tried; at most
MAX_DOMAIN_TRIES domains of one level are. The choice is explained with the modelled bus
bandwidth of the chosen placement and of the runner-up (`GroupOutcome.domain_note`).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cmp_to_key
from typing import Any

import numpy as np

from scheduler.core.cycle import Decision, Placement, PodScheduling
from scheduler.core.decode import FieldError, Fields
from scheduler.core.domains import (
    NVLINK_CLIQUE,
    DomainFilter,
    DomainIndex,
    Room,
    compute_domain,
    domain_index,
    level_name,
    member_room,
    rooms,
    walk_levels,
)
from scheduler.core.framework import NO_NODES_MESSAGE, ScheduleResult
from scheduler.core.model import (
    ANNOTATION_TOPOLOGY_PREFERRED,
    ANNOTATION_TOPOLOGY_REQUIRED,
    MAX_AMOUNT,
    SOURCE_ANNOTATION,
    SOURCE_KUBERNETES,
    SOURCE_SCHEDULER_PLUGINS,
    GroupRef,
    PodInfo,
)
from scheduler.core.network import (
    NetworkBandwidth,
    allreduce_factor,
    allreduce_time,
    bus_bandwidth,
    crossing_gbps,
)
from scheduler.core.quantity import QuantityError, parse_quantity, to_units
from scheduler.core.queue import ClusterEvent, QueuedPod, Where
from scheduler.core.reservation import DEFAULT_TIMEOUT, Reservation, Reservations
from scheduler.core.snapshot import Snapshot
from scheduler.core.topology.schema import ANNOTATION_PLACEMENT
from scheduler.core.topology.select import GpuSelector

__all__ = [
    "ANNOTATION_TOPOLOGY_ANYWHERE",
    "Blocked",
    "DomainFit",
    "GroupCycle",
    "GroupError",
    "GroupOutcome",
    "GroupSpec",
    "Reconciled",
    "RunnerUp",
    "kubernetes_group",
    "ordinal",
    "scheduler_plugins_group",
]

MAX_DOMAIN_TRIES = 4  # domains of one level tried in full, at most
ANNOTATION_TOPOLOGY_ANYWHERE = "topo-scheduler.io/topology-anywhere"
"""`"true"` on a PodGroup or its pods: no domain preference when the group asks for none (each
member on its best node across the cluster), as without topology levels."""
_SAME = 1e-9  # relative difference below which two modelled times are equal
GroupId = tuple[str, str]  # (source, "namespace/name")


class GroupError(FieldError):
    """A PodGroup object that cannot be read; the message names it and the field."""

    @property
    def detail(self) -> str:
        """The message without the object: ``<field path>: <problem>``."""
        head, sep, rest = str(self).partition(": ")
        return rest if sep and head.startswith("PodGroup ") else str(self)

    @property
    def field(self) -> str:
        """The field path that cannot be read."""
        return self.detail.partition(": ")[0]


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """One pod group, whatever named it."""

    source: str
    namespace: str
    name: str
    min_member: int
    timeout: float | None = None  # scheduleTimeoutSeconds (0: no wait)
    required: str | None = None  # node label key: one domain of it or nothing
    preferred: str | None = None  # node label key: the narrowest domain holding the group
    min_resources: Mapping[str, int] = field(default_factory=dict)
    uid: str = ""
    anywhere: bool = False  # topology-anywhere: no domain preference without a request
    compute_domain: str = ""  # the ComputeDomain the members' claims name (required: a clique)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def id(self) -> GroupId:
        return (self.source, self.key)


INT32_MAX = 2**31 - 1  # the PodGroup APIs' integers are int32 (Go's decoder refuses more)

# apimachinery's IsQualifiedName, the syntax of a node label key: [prefix/]name
_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _label_key(where: Fields, value: Any, path: str) -> str:
    """A node label key (a topology level), with apimachinery's syntax."""
    if not isinstance(value, str) or not value.strip():
        raise where.fail(path, f"must be a node label key, got {value!r}")
    key = value.strip()
    prefix, slash, name = key.rpartition("/")
    valid = 0 < len(name) <= 63 and _NAME_PART.fullmatch(name) is not None
    if slash:
        valid = valid and 0 < len(prefix) <= 253
        valid = valid and _DNS1123_SUBDOMAIN.fullmatch(prefix) is not None
    if not valid:
        raise where.fail(path, f"must be a node label key ([prefix/]name), got {value!r}")
    return key


def _int32(where: Fields, value: Any, path: str, minimum: int) -> int | None:
    """An optional int32 of at least `minimum` (None when absent)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise where.fail(path, f"must be an integer, got {value!r}")
    if value < minimum:
        raise where.fail(path, f"must be >= {minimum}, got {value}")
    if value > INT32_MAX:
        raise where.fail(path, f"must be <= {INT32_MAX} (int32), got {value}")
    return value


def _where(obj: Mapping[str, Any]) -> tuple[Fields, Mapping[str, Any], str, str]:
    if not isinstance(obj, Mapping):
        raise GroupError(f"PodGroup: must be a mapping, got {type(obj).__name__}")
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    assert isinstance(meta, Mapping)
    namespace = str(meta.get("namespace") or "default")
    where = Fields(GroupError, f"PodGroup {namespace}/{meta.get('name')}: ")
    name = where.name(meta.get("name"), "metadata.name")
    return where, meta, namespace, name


def _topology_annotations(where: Fields, meta: Mapping[str, Any]) -> tuple[str | None, ...]:
    annotations = where.string_map(meta.get("annotations"), "metadata.annotations")
    keys = []
    for annotation in (ANNOTATION_TOPOLOGY_REQUIRED, ANNOTATION_TOPOLOGY_PREFERRED):
        value = annotations.get(annotation)
        path = f"metadata.annotations.{annotation}"
        keys.append(_label_key(where, value, path) if value is not None else None)
    return tuple(keys)


def _anywhere(where: Fields, meta: Mapping[str, Any]) -> bool:
    """`topo-scheduler.io/topology-anywhere` on a PodGroup: "true" or "false"."""
    annotations = where.string_map(meta.get("annotations"), "metadata.annotations")
    value = annotations.get(ANNOTATION_TOPOLOGY_ANYWHERE)
    if value is None:
        return False
    if value.strip().lower() not in ("true", "false"):
        path = f"metadata.annotations.{ANNOTATION_TOPOLOGY_ANYWHERE}"
        raise where.fail(path, f'must be "true" or "false", got {value!r}')
    return value.strip().lower() == "true"


def _pod_anywhere(pod: PodInfo) -> bool:
    return (pod.annotations.get(ANNOTATION_TOPOLOGY_ANYWHERE) or "").strip().lower() == "true"


def scheduler_plugins_group(obj: Mapping[str, Any]) -> GroupSpec:
    """A scheduler-plugins PodGroup (`scheduling.x-k8s.io/v1alpha1`), read as scheduler-plugins
    reads it where its CRD accepts a value: `minMember: 0` is Go's zero value, the same as no
    minMember (a group of one); `scheduleTimeoutSeconds: 0` is a zero wait (coscheduling's
    GetWaitTimeDuration): the group is past its timeout from its first failed attempt. Negative
    values, numbers beyond int32 and quantities that do not parse are errors naming the field."""
    where, meta, namespace, name = _where(obj)
    spec = where.mapping(obj.get("spec"), "spec")
    min_member = _int32(where, spec.get("minMember"), "spec.minMember", 0) or 1
    path = "spec.scheduleTimeoutSeconds"
    timeout = _int32(where, spec.get("scheduleTimeoutSeconds"), path, 0)
    resources: dict[str, int] = {}
    for resource, raw in where.mapping(spec.get("minResources"), "spec.minResources").items():
        path = f"spec.minResources.{resource}"
        try:
            amount = parse_quantity(raw)
            units = to_units(str(resource), amount)
        except (QuantityError, ValueError) as exc:
            raise where.fail(path, str(exc)) from None
        if amount < 0:
            raise where.fail(path, f"must not be negative, got {raw!r}")
        if units >= MAX_AMOUNT:
            raise where.fail(path, f"must be below 2^53 units, got {raw!r}")
        resources[str(resource)] = units
    required, preferred = _topology_annotations(where, meta)
    return GroupSpec(
        SOURCE_SCHEDULER_PLUGINS,
        namespace,
        name,
        min_member,
        float(timeout) if timeout is not None else None,
        required,
        preferred,
        resources,
        str(meta.get("uid") or ""),
        _anywhere(where, meta),
    )


def kubernetes_group(obj: Mapping[str, Any]) -> GroupSpec:
    """A Kubernetes PodGroup (`scheduling.k8s.io/v1beta1`): gang.minCount (a basic policy is
    a group of one), the first topology constraint's key as a required level."""
    where, meta, namespace, name = _where(obj)
    spec = where.mapping(obj.get("spec"), "spec")
    policy = where.mapping(spec.get("schedulingPolicy"), "spec.schedulingPolicy")
    gang = where.mapping(policy.get("gang"), "spec.schedulingPolicy.gang")
    min_count = 1
    if policy.get("gang") is not None:
        path = "spec.schedulingPolicy.gang.minCount"
        if gang.get("minCount") is None:
            raise where.fail(path, "is required")
        min_count = _int32(where, gang.get("minCount"), path, 1) or 1
    constraints = where.mapping(spec.get("schedulingConstraints"), "spec.schedulingConstraints")
    topology = where.list(constraints.get("topology"), "spec.schedulingConstraints.topology")
    required, preferred = _topology_annotations(where, meta)
    if topology:
        path = "spec.schedulingConstraints.topology[0]"
        first = where.mapping(topology[0], path)
        required = _label_key(where, first.get("key"), f"{path}.key")
    return GroupSpec(
        SOURCE_KUBERNETES,
        namespace,
        name,
        min_count,
        None,
        required,
        preferred,
        {},
        str(meta.get("uid") or ""),
        _anywhere(where, meta),
    )


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 21st."""
    if 10 <= n % 100 <= 20:
        return f"{n}th"
    return f"{n}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th') }"


@dataclass(slots=True)
class _Attempt:
    """One try of placing the pending members (in a domain or anywhere)."""

    placed: list[Placement]  # members assumed on their node (reverted when not kept)
    failed: list[tuple[int, PodInfo, ScheduleResult | None, str]]  # (position, pod, result, why)
    domain: tuple[str, str] | None = None  # (label key, value)
    seconds: float = 0.0  # modelled all-reduce seconds per GB of the whole group
    busbw: float | None = None  # the same as the group's effective bus bandwidth (GB/s)
    where: frozenset[tuple[str, str, tuple[int, ...]]] = frozenset()  # (pod, node, GPUs)


@dataclass(frozen=True, slots=True)
class RunnerUp:
    """The candidate placement that came second in the group cycle's order: its domain (None:
    across the cluster) and the modelled bus bandwidth of the whole group there (GB/s)."""

    domain: tuple[str, str] | None
    busbw: float | None


@dataclass(slots=True)
class _Candidate:
    """A placement to try: one domain of a level (index and room), or the whole cluster."""

    rank: int  # the level's place, narrowest first (the whole cluster last)
    index: DomainIndex | None
    room: Room | None
    bound: float  # lower bound on the modelled seconds per GB
    tried: dict[int, int] | None  # the level's record of domains tried (for explain)

    @property
    def order(self) -> tuple[int, int, int, str]:
        """The bin-packing part of the order: narrower level, least free room, best score."""
        room = self.room
        if room is None:
            return (self.rank, 0, 0, "")
        return (self.rank, room.free, -room.score, room.value)


@dataclass(frozen=True, slots=True)
class DomainFit:
    """One domain of a level the group algorithm looked at, for a group it could not place:
    how many pending members fit there by its free room, and how many were placed when the
    domain was tried (None: not tried)."""

    key: str
    value: str
    fit: int
    placed: int | None = None


@dataclass(frozen=True, slots=True)
class Blocked:
    """The first member that did not fit (in the try the group's message reports): its
    position among the pending members and its decision (every node's verdict)."""

    position: int
    pod: PodInfo
    result: ScheduleResult | None
    why: str


@dataclass(slots=True)
class _Walk:
    """The domains looked at while placing a group: per level its index, rooms, and the
    members placed in each domain tried; read only when the group is not placed."""

    levels: list[tuple[DomainIndex, list[Room], dict[int, int]]] = field(default_factory=list)
    best: _Attempt | None = None  # the try the message reports, when not the final attempt
    runner_up: RunnerUp | None = None  # the placement second in the order, when one was tried

    def fits(self, count: int) -> tuple[DomainFit, ...]:
        out = []
        for index, found, tried in self.levels:
            holds = {r.domain: min(r.holds, count) for r in found}
            for domain, value in enumerate(index.values):
                out.append(DomainFit(index.key, value, holds.get(domain, 0), tried.get(domain)))
        return tuple(out)


@dataclass(frozen=True, slots=True)
class Reconciled:
    """What `GroupCycle.reconcile` did, for the log."""

    bound: tuple[str, ...]  # members bound (or assumed), left as they are
    pending: tuple[str, ...]  # members waiting in the queue, tried again
    action: str


@dataclass(frozen=True, slots=True)
class GroupOutcome:
    """What one group cycle did: for events, PodGroup status, explain and the simulator."""

    spec: GroupSpec
    members: Mapping[str, tuple[str | None, tuple[int, ...]]]  # pod -> (node or None, GPUs)
    scheduled: bool  # enough members placed (and now reserved and binding)
    waiting: bool  # too few members exist yet: no node was looked at
    bound_before: int  # members already assumed or bound before the cycle
    message: str | None  # the group's message when it did not schedule
    domain: tuple[str, str] | None = None  # (label key, value) the members went to
    domain_note: str | None = None  # why that domain
    timed_out: bool = False  # unscheduled for longer than scheduleTimeoutSeconds
    # a group not placed (members did not fit): the domains looked at, the first member
    # that did not fit with its per-node verdicts
    domains: tuple[DomainFit, ...] = ()
    blocked: Blocked | None = None
    # a group placed: the modelled all-reduce bus bandwidth of the whole group (GB/s; None:
    # nothing to reduce), and the candidate placement second in the order
    busbw: float | None = None
    runner_up: RunnerUp | None = None
    # a group not placed: the capacity held for it as it frees (None: nothing held)
    reservation: Reservation | None = None


class GroupCycle:
    """Pod groups known to one scheduler: specs from PodGroup objects, members from the pods
    seen, and the group cycle. The front end feeds it (`observe`, `set_spec`)."""

    def __init__(
        self,
        levels: tuple[str, ...] = (),
        clock: Callable[[], float] | None = None,
        observer: Callable[[GroupOutcome], None] | None = None,
        network: NetworkBandwidth | None = None,
        reservation_timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.levels = levels
        # capacity held for groups that would fit once running pods end (0: none held)
        self.reservations = Reservations(reservation_timeout)
        self._last_now = 0.0
        self.clock = clock
        self.observer = observer
        self.network = network if network is not None else NetworkBandwidth()
        self.selector = GpuSelector(bandwidth=self.network.link_bandwidth)
        # try every candidate that could come second too (explain's runner-up), not only
        # those that could come first
        self.compare_all = False
        self._bounds: dict[tuple[str, int], float] = {}  # (topology, GPUs) -> intra bound
        self.specs: dict[GroupId, GroupSpec] = {}
        self.members: dict[GroupId, dict[str, PodInfo]] = {}
        self.started: dict[GroupId, float] = {}  # first attempt of the current wait
        self.served: set[str] = {SOURCE_ANNOTATION}  # sources whose objects we can see
        self.last: dict[GroupId, GroupOutcome] = {}
        # PodGroup objects that cannot be read: why (`<field>: <problem>`); no spec meanwhile
        self.unreadable: dict[GroupId, str] = {}

    # ------------------------------------------------------------------ the front end's feed

    def observe(self, pod: PodInfo) -> None:
        """A pod was seen (pending or bound): remember its group membership."""
        ref = pod.pod_group
        if ref is not None:
            self.members.setdefault((ref.source, ref.key), {})[pod.key] = pod

    def forget(self, pod: PodInfo) -> None:
        """A pod is gone (deleted, finished): a group left without members is forgotten."""
        ref = pod.pod_group
        if ref is None:
            return
        gid = (ref.source, ref.key)
        members = self.members.get(gid)
        if members is not None:
            members.pop(pod.key, None)
            if not members:
                del self.members[gid]
                self.started.pop(gid, None)
                self.last.pop(gid, None)
                self.reservations.end(gid, self._last_now, "released")
                self.reservations.cooldown.pop(gid, None)

    def set_spec(self, spec: GroupSpec) -> None:
        self.specs[spec.id] = spec
        self.unreadable.pop(spec.id, None)

    def set_unreadable(self, source: str, key: str, problem: str) -> bool:
        """The group's PodGroup object cannot be read (`problem`: the field and why): its
        previous spec is dropped, so no member is placed on a stale copy, and its members
        wait with the problem. True when the problem is new (to be reported)."""
        gid = (source, key)
        self.specs.pop(gid, None)
        new = self.unreadable.get(gid) != problem
        self.unreadable[gid] = problem
        return new

    def remove_spec(self, source: str, key: str) -> None:
        self.specs.pop((source, key), None)
        self.unreadable.pop((source, key), None)
        self.started.pop((source, key), None)
        self.last.pop((source, key), None)

    def reconcile(
        self, sched: PodScheduling, source: str, key: str, *, report: bool = True
    ) -> Reconciled:
        """The group's PodGroup changed, became unreadable or was deleted: its pending
        members that wait are tried again under what the group now is (their backoff
        honoured); when none is pending, its status is reported from the members bound
        (when `report`: not for a PodGroup first seen).

        Without a readable PodGroup, as scheduler-plugins' coscheduling (its Permit rejects a
        pod whose PodGroup is not found): members already bound stay bound, pending ones
        wait as unschedulable with the reason until the PodGroup is back."""
        gid = (source, key)
        members = self.members.get(gid, {})
        bound = tuple(sorted(k for k, p in members.items() if _in_cache(sched, p)))
        pending = tuple(sorted(k for k in members if k not in bound and k in sched.queue))
        sched.queue.move_keys(pending, ClusterEvent.CONFIG_CHANGE)
        spec = self.specs.get(gid)
        if spec is None:
            reason = "cannot be read" if gid in self.unreadable else "is gone"
            action = (
                f"PodGroup {reason}: {len(bound)} bound member(s) left bound, "
                f"{len(pending)} pending member(s) wait until it is back"
            )
            return Reconciled(bound, pending, action)
        missing = spec.min_member - len(bound)
        action = f"{len(bound)} bound, {len(pending)} pending member(s) under minMember "
        action += str(spec.min_member)
        if report and not pending and bound:  # no group cycle will run: report the bound
            placed = [members[k] for k in bound]
            message = None
            if missing > 0:
                pods = "pod" if missing == 1 else "pods"
                message = f"waiting for {missing} more {pods} of pod group {spec.key}"
            self._report(
                GroupOutcome(
                    spec,
                    _member_map([], placed, sched),
                    missing <= 0,
                    missing > 0,
                    len(bound),
                    message,
                )
            )
        return Reconciled(bound, pending, action)

    def spec_for(self, ref: GroupRef, pods: list[PodInfo]) -> GroupSpec | str:
        """The group's spec, or why there is none (its PodGroup object is not there). The
        pods' topology annotations apply when the group object asks for no domain."""
        refs = [p.pod_group for p in pods if p.pod_group is not None]
        required = next((r.required for r in refs if r.required), None)
        preferred = next((r.preferred for r in refs if r.preferred), None)
        anywhere = any(_pod_anywhere(p) for p in pods)
        if ref.source == SOURCE_ANNOTATION:
            mins = [r.min_member for r in refs if r.min_member]
            return GroupSpec(
                SOURCE_ANNOTATION,
                ref.namespace,
                ref.name,
                max(mins) if mins else 1,
                required=required,
                preferred=preferred,
                anywhere=anywhere,
            )
        spec = self.specs.get((ref.source, ref.key))
        if spec is None:
            kind = f"PodGroup.{ref.source}"
            if ref.source not in self.served:
                return f"{kind} is not served by the API server"
            problem = self.unreadable.get((ref.source, ref.key))
            if problem is not None:
                return f"{kind} {ref.key} cannot be read: {problem}"
            return f"{kind} {ref.key} not found"
        if spec.required is None and spec.preferred is None and (required or preferred):
            spec = dataclasses.replace(spec, required=required, preferred=preferred)
        if anywhere and not spec.anywhere:
            spec = dataclasses.replace(spec, anywhere=True)
        return spec

    def retry(self, sched: PodScheduling, pod: PodInfo) -> bool:
        """A member's binding failed: it backs off as every pod does (the queue's backoff:
        podInitialBackoffSeconds doubling up to podMaxBackoffSeconds), with the group's
        priority when others of its group are bound. Whether it was requeued."""
        ref = pod.pod_group
        priority = None
        if ref is not None:
            members = self.members.get((ref.source, ref.key), {})
            if any(k != pod.key and _in_cache(sched, p) for k, p in members.items()):
                priority = max([pod.priority, *(p.priority for p in members.values())])
        return sched.queue.retry(pod.key, priority)

    # ------------------------------------------------------------------ the group cycle

    def _now(self, sched: PodScheduling) -> float:
        return self.clock() if self.clock is not None else sched.now()

    def _split(
        self, sched: PodScheduling, gid: GroupId, popped: QueuedPod[PodInfo]
    ) -> tuple[list[QueuedPod[PodInfo]], list[PodInfo]]:
        """(pending members, queued; members assumed or bound); forgets the gone ones."""
        members = self.members.setdefault(gid, {})
        members[popped.key] = popped.pod
        pending: list[QueuedPod[PodInfo]] = [popped]
        placed: list[PodInfo] = []
        for key, pod in list(members.items()):
            if key == popped.key:
                continue
            if _in_cache(sched, pod):
                placed.append(sched.cache.get(key) or pod)
                continue
            qp = sched.queue.get(key)
            if qp is not None and qp.pod.pod_group is not None and qp.pod.pod_group.key == gid[1]:
                members[key] = qp.pod
                if sched.queue.where(key) is not Where.IN_FLIGHT:
                    pending.append(qp)
                continue
            del members[key]  # deleted, bound elsewhere, or left the group
        return pending, placed

    def schedule(self, sched: PodScheduling, popped: QueuedPod[PodInfo]) -> list[Decision]:
        """The group cycle for a popped member (see the module's docstring)."""
        ref = popped.pod.pod_group
        assert ref is not None
        gid = (ref.source, ref.key)
        start = sched.timer()
        pending, placed = self._split(sched, gid, popped)
        spec = self.spec_for(ref, [q.pod for q in pending] + placed)
        if isinstance(spec, str):
            message = f"pod group {ref.key}: {spec}"
            if placed:
                message += f"; {len(placed)} of its pods are bound, the others wait for it"
            return [self._park(sched, popped, message, start)]
        domain = compute_domain(
            [*(q.pod for q in pending), *placed], sched.cache.snapshot.storage.dra
        )
        if domain is not None:  # one NVLink domain, whatever else the group asked
            spec = dataclasses.replace(
                spec, required=NVLINK_CLIQUE, preferred=None, compute_domain=domain
            )
        now = self._now(sched)
        self._last_now = now
        held = self.reservations.held.get(gid)
        if held is not None and now >= held.expires:
            self._unhold(sched, gid, now, "expired")
        first = self.started.setdefault(gid, now)
        missing = spec.min_member - len(pending) - len(placed)
        if missing > 0:
            pods = "pod" if missing == 1 else "pods"
            message = f"waiting for {missing} more {pods} of pod group {spec.key}"
            decision = self._park(sched, popped, message, start)
            self._report(
                GroupOutcome(
                    spec, _member_map(pending, placed, sched), False, True, len(placed), message
                )
            )
            return [decision]
        for qp in pending[1:]:
            sched.queue.take(qp.key)
        pending.sort(key=lambda q: (-q.pod.priority, q.pod.creation_timestamp, q.pod.key))
        need = max(0, spec.min_member - len(placed))
        short = _short_of(sched, spec) if need else None
        problem: str | None = None
        over_quota: str | None = None
        if short is not None:  # scheduler-plugins' minResources: not even in total
            attempt, note, walk = _Attempt([], []), None, _Walk()
            problem = f"pod group {spec.key}: the cluster has too little free {short}"
            problem += " for its minResources"
        else:
            walk = _Walk()
            if need:
                over_quota = _over_quota(sched, pending)
            if over_quota is not None:  # counted as a whole; reclaim may still free it
                attempt, note = _Attempt([], []), None
            else:
                attempt, note, problem = self._place(sched, spec, pending, placed, need, walk)
        # domains of its required level exist and none has room: eviction may help (a group
        # with members already bound stays in their domain: left to wait)
        no_room = None
        if problem is not None and short is None and spec.required is not None and not placed:
            no_room = problem if domain_index(sched.cache.snapshot, spec.required).values else None
        evictable = short is None and (problem is None or no_room is not None)
        elapsed = sched.timer() - start
        share = elapsed / max(1, len(pending))
        decided: set[str] = set()  # members already told why (a Reserve/Permit rejection)
        if problem is None and len(attempt.placed) >= need and attempt.placed:
            decisions = self._commit(sched, attempt, share)
            if all(d.outcome == "assumed" for d in decisions):
                return self._scheduled(
                    sched, spec, gid, pending, placed, attempt, note, share, decisions, walk
                )
            rejected = decisions[-1]
            decided.add(rejected.pod.key)
            problem = f"pod group {spec.key}: {rejected.pod.key}: {rejected.message}"
        self._revert(sched, attempt)
        message = problem or over_quota or self._message(spec, attempt, len(pending), need)
        if evictable and not decided:  # evict only for all of it
            leader, others = pending[0].pod, [q.pod for q in pending[1:]]
            suffix = sched.preempt_for_group(leader, others, over_quota or no_room, spec.required)
            if suffix:
                message = f"{message} {suffix}"
        reservation = None
        if not decided:  # hold capacity for it as running pods end
            reservation = self._reserve(sched, spec, gid, pending, need, now)
            if reservation is not None:
                message = f"{message.rstrip('.')}; {reservation.describe(now)}."
        timed_out = spec.timeout is not None and now - first >= spec.timeout
        if timed_out:
            message += f"; unscheduled longer than its scheduleTimeoutSeconds ({spec.timeout:g}s)"
        attempts = max(q.attempts for q in pending)
        decisions = []
        for qp in pending:
            qp.attempts = attempts  # one backoff for the whole group
            if qp.key in decided:
                continue
            decision = sched.park(qp.pod, message, share)  # no profile: it leaves the queue
            if decision.outcome != "skipped":
                decisions.append(decision)
        self._report(
            GroupOutcome(
                spec,
                _member_map(pending, placed, sched),
                False,
                False,
                len(placed),
                message,
                timed_out=timed_out,
                domains=walk.fits(len(pending)),
                blocked=_blocked(walk.best or attempt),
                reservation=reservation,
            )
        )
        return decisions

    def _scheduled(
        self,
        sched: PodScheduling,
        spec: GroupSpec,
        gid: GroupId,
        pending: list[QueuedPod[PodInfo]],
        placed: list[PodInfo],
        attempt: _Attempt,
        note: str | None,
        share: float,
        decisions: list[Decision],
        walk: _Walk,
    ) -> list[Decision]:
        """Enough members are reserved: the ones that did not fit wait, the group is
        reported scheduled."""
        self.started.pop(gid, None)
        if gid in self.reservations.held:
            self._unhold(sched, gid, self._now(sched), "fulfilled")
        chosen = {d.pod.key for d in decisions}
        for _, pod, _, why in attempt.failed:
            if pod.key not in chosen and sched.profile_of(pod) is not None:
                decisions.append(sched.park(pod, why, share))
        members = _member_map(pending, placed, sched)
        for d in decisions:
            if d.assumed is not None:
                members[d.pod.key] = (d.assumed.node, d.assumed.gpus)
        self._report(
            GroupOutcome(
                spec,
                members,
                True,
                False,
                len(placed),
                None,
                attempt.domain,
                note,
                busbw=attempt.busbw,
                runner_up=walk.runner_up,
            )
        )
        return decisions

    # ------------------------------------------------------------------ reservations

    def _unhold(self, sched: PodScheduling, gid: GroupId, now: float, how: str) -> None:
        """End the group's reservation and the nominations it made."""
        ended = self.reservations.end(gid, now, how)
        if ended is not None:
            for pod, node in ended.members.values():
                sched.release_hold(pod, node)

    def _reserve(
        self,
        sched: PodScheduling,
        spec: GroupSpec,
        gid: GroupId,
        pending: list[QueuedPod[PodInfo]],
        need: int,
        now: float,
    ) -> Reservation | None:
        """Hold capacity for a group that did not fit (`scheduler.core.reservation`): keep
        its reservation, or make one when its queue has none (or one of lower priority) and
        nodes no other reservation holds would hold the group once their pods end. Returns
        the group's reservation (None: nothing held)."""
        book = self.reservations
        if not book.enabled or need <= 0:
            return None
        snapshot = sched.cache.snapshot
        current = book.held.get(gid)
        if current is not None:
            alive = self.members.get(gid, {})
            if all(
                node in snapshot.index and key in alive
                for key, (_, node) in current.members.items()
            ):
                return self._refresh(sched, spec, current)
            self._unhold(sched, gid, now, "released")  # a node it held or a member is gone
        live = snapshot.live
        for resource, amount in spec.min_resources.items():
            row = snapshot.row.get(resource)
            if row is None or int(snapshot.allocatable[row][live].sum()) < amount:
                return None  # minResources beyond the whole cluster: no freeing helps
        members = [qp.pod for qp in pending[:need]]
        if not book.may_reserve(gid, now):
            return None
        inherited = {pod.key: sched.inherited_nomination(pod) or "" for pod in members}
        if all(n in snapshot.index for n in inherited.values()) and not (
            set(inherited.values()) & book.nodes_held()
        ):  # a former leader's reservation (or preemption) nominated every member: hold
            # those nodes as this scheduler's own reservation, to expire and move as any
            return self._hold(sched, spec, gid, members, inherited, now)
        if any(sched.nominated_node(pod) is not None for pod in members):
            return None  # preemption nominated it: room is being freed for it already
        if snapshot.quotas.active and snapshot.quotas.check_group(members) is not None:
            return None  # over its quota: freed nodes would not admit it
        priority = max(pod.priority for pod in members)
        found = self._hold_nodes(sched, spec, members, book.nodes_held())
        if found is None:  # every node that would do is held: take over a lesser one
            lesser = book.lowest_below(spec.namespace, priority)
            if lesser is None:
                return None
            found = self._hold_nodes(sched, spec, members, book.nodes_held(lesser.group))
            if found is None:
                return None
            self._unhold(sched, lesser.group, now, "released")
        return self._hold(sched, spec, gid, members, found[0], now)

    def _hold(
        self,
        sched: PodScheduling,
        spec: GroupSpec,
        gid: GroupId,
        members: list[PodInfo],
        chosen: dict[str, str],
        now: float,
    ) -> Reservation:
        """Make the group's reservation: each member held on its chosen node."""
        book = self.reservations
        resource = sched.cache.snapshot.gpus.resource
        reservation = Reservation(
            gid,
            spec.key,
            spec.namespace,
            max(pod.priority for pod in members),
            {pod.key: (pod, chosen[pod.key]) for pod in members},
            sum(int(pod.requests.get(resource, 0)) for pod in members),
            now,
            now + book.timeout,
        )
        book.add(reservation)
        for pod, node in reservation.members.values():
            sched.hold(pod, node)
        return reservation

    def _refresh(self, sched: PodScheduling, spec: GroupSpec, current: Reservation) -> Reservation:
        """Keep a group's reservation, moved to the nodes that give more of its members room
        now when other nodes have freed sooner than its own (it moves only to more, never
        back). Nodes of reservations after it (`_order`) that have room for a member now are
        open to it, as kube-scheduler's oldest gang takes each node that frees first: a
        reservation it takes a node from is released (made again on its next cycle), so free
        nodes do not idle split among reservations that each wait for another. A later
        reservation is released only for a node where a member moved there has GPU room now.
        A group moved to nodes where all its members have GPU room now is tried again at
        once (backoff honoured); a released group waits for the next cluster event, as before
        its release (tried at once, released groups cascaded: each remade on the freest
        nodes, taken again by the earlier one, and gangs waited two to three times longer on
        the multi-GPU Philly sample)."""
        book = self.reservations
        snapshot = sched.cache.snapshot
        members = [pod for pod, _ in current.members.values()]
        least = max(1, min(int(p.requests.get(snapshot.gpus.resource, 0)) for p in members))
        closed: set[str] = set()  # nodes it may not take
        later: dict[str, GroupId] = {}  # node -> the later reservation holding it
        for gid, other in book.held.items():
            if gid == current.group:
                continue
            for _, node in other.members.values():
                if _order(other) < _order(current) or _free_gpus(snapshot, node) < least:
                    closed.add(node)
                else:
                    later[node] = gid
        found = None
        feasible: dict[tuple[Any, ...], Any] = {}  # filters evaluated once for the loop
        held_fitting = _fitting_now(snapshot, current.members.values())
        if held_fitting < current.gpus and _freed_elsewhere(snapshot, current, closed, least):
            while (
                found := self._hold_nodes(sched, spec, members, closed, True, feasible)
            ) is not None:
                fits = _fitting_by_node(snapshot, ((p, found[0][p.key]) for p in members))
                idle = {n for n in found[0].values() if n in later and not fits.get(n)}
                if not idle:
                    break
                closed |= idle  # no member fits there now: the later reservation keeps it
        if found is not None:
            chosen = found[0]
            moved = [(pod, chosen[pod.key]) for pod in members]
            fitting = _fitting_now(snapshot, moved)
            if fitting > held_fitting:
                for gid in dict.fromkeys(later[n] for n in chosen.values() if n in later):
                    self._unhold(sched, gid, self._last_now, "released")
                for pod, node in current.members.values():
                    if sched.nominated_node(pod) == node:  # one nomination update, no clear
                        sched.hold(pod, chosen[pod.key])
                current.members = {pod.key: (pod, chosen[pod.key]) for pod in members}
                if fitting >= current.gpus:
                    # every member has GPU room where it is now held: a move request sends
                    # the group (in flight) to backoff rather than wait for a cluster event
                    sched.queue.move_keys((), ClusterEvent.RESERVATION_CHANGE)
        for pod, node in current.members.values():
            if sched.nominated_node(pod) in (None, node):
                sched.hold(pod, node)
        return current

    def _hold_nodes(
        self,
        sched: PodScheduling,
        spec: GroupSpec,
        members: list[PodInfo],
        exclude: set[str],
        roomiest: bool = False,
        feasible: dict[tuple[Any, ...], Any] | None = None,
    ) -> tuple[dict[str, str], int] | None:
        """Nodes that hold the members once their running pods end (pod key -> node), and the
        GPUs free on them now that the members would take: on nodes not in `exclude`, whose
        filters fail the members only for what is in use; in the narrowest domain that holds
        them all (a required level: only its domains), or with `roomiest` the domain of any
        level with the most free now (the narrower on a tie; across the cluster only when no
        domain holds them), the nodes with the most free now first (they free soonest), the
        members asking the most GPUs first. `feasible` keeps the filters' verdicts per member
        shape between calls on one snapshot. None: none would."""
        snapshot = sched.cache.snapshot
        n = snapshot.capacity
        members = sorted(members, key=lambda p: -int(p.requests.get(snapshot.gpus.resource, 0)))
        spare = np.array(snapshot.allocatable[:, :n], dtype=np.int64, copy=True)
        needs: dict[str, list[tuple[int, int]]] = {}
        ok_by_shape = {} if feasible is None else feasible
        pods_row = snapshot.row.get("pods")
        for pod in members:
            asks = [(pods_row, 1)] if pods_row is not None else []
            for resource, amount in pod.requests.items():
                if amount <= 0:
                    continue
                row = snapshot.row.get(resource)
                if row is None:
                    return None
                asks.append((row, int(amount)))
            needs[pod.key] = asks
            shape = _shape(pod)
            if shape in ok_by_shape:
                continue
            result = _evaluate(sched, pod)
            if result is None or result.prefilter_message is not None:
                return None
            ok = np.zeros(n, np.bool_)
            for slot in np.flatnonzero(snapshot.live[:n]):
                node = snapshot.nodes[int(slot)]
                if node is None:
                    continue
                if bool(result.feasible[slot]) or all(
                    _freeing(reason) for reason in result.node_reasons(int(slot))
                ):
                    ok[slot] = True
            ok_by_shape[shape] = ok
        allowed_nodes = np.ones(n, np.bool_)
        for name in exclude:
            excluded = snapshot.index.get(name)
            if excluded is not None and excluded < n:
                allowed_nodes[excluded] = False
        usable = {shape: ok & allowed_nodes for shape, ok in ok_by_shape.items()}
        gpu_row = snapshot.row.get(snapshot.gpus.resource)
        row = gpu_row if gpu_row is not None else snapshot.row.get("cpu", 0)
        free = np.asarray(snapshot.allocatable[row, :n] - snapshot.requested[row, :n], np.int64)
        names = [node.name if node is not None else "" for node in snapshot.nodes[:n]]
        order = sorted(
            (int(s) for s in np.flatnonzero(snapshot.live[:n])), key=lambda s: (-free[s], names[s])
        )

        def assign(allowed: Any) -> tuple[dict[str, str], int] | None:
            left = spare.copy()
            now_free = free.copy()
            out: dict[str, str] = {}
            score = 0
            for pod in members:
                ok = usable[_shape(pod)]
                for slot in order:
                    if not ok[slot] or (allowed is not None and not allowed[slot]):
                        continue
                    if all(left[r, slot] >= a for r, a in needs[pod.key]):
                        for r, a in needs[pod.key]:
                            left[r, slot] -= a
                        gpus = int(pod.requests.get(snapshot.gpus.resource, 0))
                        score += max(0, min(int(now_free[slot]), gpus))
                        now_free[slot] -= gpus
                        out[pod.key] = names[slot]
                        break
                else:
                    return None
            return out, score

        asked = spec.required or spec.preferred
        keys: list[str] = []
        if spec.required is not None:
            keys = [spec.required]
        elif self.levels and not (asked is None and spec.anywhere):
            keys = walk_levels(self.levels, asked or self.levels[-1])
        overall: tuple[int, str, dict[str, str]] | None = None
        for key in keys:
            index = domain_index(snapshot, key)
            best: tuple[int, str, dict[str, str]] | None = None
            for domain, value in enumerate(index.values):
                found = assign(index.mask(domain)[:n])
                if found is not None and (best is None or (-found[1], value) < (-best[0], best[1])):
                    best = (found[1], value, found[0])
            if best is not None and not roomiest:
                return best[2], best[0]
            if best is not None and (overall is None or best[0] > overall[0]):
                overall = best
        if overall is not None:
            return overall[2], overall[0]
        if spec.required is not None:
            return None
        return assign(None)

    def _report(self, outcome: GroupOutcome) -> None:
        self.last[outcome.spec.id] = outcome
        if self.observer is not None:
            self.observer(outcome)

    def _park(
        self, sched: PodScheduling, popped: QueuedPod[PodInfo], message: str, start: float
    ) -> Decision:
        return sched.park(popped.pod, message, sched.timer() - start)

    # ------------------------------------------------------------------ placing

    def _place(
        self,
        sched: PodScheduling,
        spec: GroupSpec,
        pending: list[QueuedPod[PodInfo]],
        placed: list[PodInfo],
        need: int,
        walk: _Walk,
    ) -> tuple[_Attempt, str | None, str | None]:
        """The members' placement: (attempt, why this domain, a message that overrides the
        count message). The attempt's members are assumed in the cache. `walk` records the
        domains looked at (for a group that is not placed)."""
        asked = spec.required or spec.preferred
        if asked is None and (spec.anywhere or not self.levels):
            attempt = self._try(sched, pending, None)
            self._price(sched, placed, attempt)
            return attempt, None, None
        shapes = self._shapes(sched, pending)
        bound = self._bounder(sched, pending, shapes)
        snapshot = sched.cache.snapshot
        if spec.required is not None:
            index = domain_index(snapshot, spec.required)
            own = self._own_domains(sched, index, placed)
            found = rooms(index, shapes)
            tried: dict[int, int] = {}
            walk.levels.append((index, found, tried))
            held = [r for r in found if r.holds >= need]
            if own is not None:
                held = [r for r in held if r.domain in own]
            candidates = [_Candidate(0, index, r, bound(index.mask(r.domain)), tried) for r in held]
            chosen, partial = self._search(sched, pending, placed, candidates, need, walk)
            if chosen is not None:
                how = "topology-required"
                if spec.compute_domain:
                    how = f"ComputeDomain {spec.compute_domain}: {how}"
                return chosen, self._note(chosen, candidates, how, walk), None
            level = level_name(spec.required)
            level = level if level.endswith(" domain") else f"{level} domain"
            why = f"topology-required {spec.required}"
            if spec.compute_domain:
                why = f"ComputeDomain {spec.compute_domain}: {why}"
            message = f"pod group {spec.key}: no {level} holds {need} pods of the group ({why})"
            if not index.values:  # an unknown key (a typo, or nodes not yet labelled)
                message += f": no node has the label {spec.required}"
            if partial is not None:
                message += f"; best try: {self._message(spec, partial, len(pending), need)}"
            walk.best = partial
            return _Attempt([], []), None, message
        keys = walk_levels(self.levels, spec.preferred or self.levels[-1])
        candidates = []
        for rank, key in enumerate(keys):
            index = domain_index(snapshot, key)
            found = rooms(index, shapes)
            walked: dict[int, int] = {}
            walk.levels.append((index, found, walked))
            for room in found:
                if room.holds >= len(pending):
                    mask = index.mask(room.domain)
                    candidates.append(_Candidate(rank, index, room, bound(mask), walked))
        domains = len(candidates)
        how = "topology-preferred" if spec.preferred else "no topology request"
        waits_in = self._held_level(snapshot, keys, spec.id)
        if waits_in is not None:  # it waits for its held nodes rather than go wider
            held_rank, held_value = waits_in
            candidates = [c for c in candidates if c.rank <= held_rank]
            if not any(
                c.rank == held_rank and c.room and c.room.value == held_value for c in candidates
            ):
                # its own members' holds hide the held domain's room from the count
                index = domain_index(snapshot, keys[held_rank])
                domain = index.values.index(held_value)
                room = Room(domain, held_value, 0, len(pending), 0)
                mask = index.mask(domain)
                candidates.append(_Candidate(held_rank, index, room, bound(mask), None))
            chosen, partial = self._search(sched, pending, placed, candidates, len(pending), walk)
            if chosen is None:
                walk.best = partial
                message = (
                    f"pod group {spec.key}: no {level_name(keys[held_rank])} domain holds its "
                    f"{len(pending)} pods now; it waits for the nodes held for it in "
                    f"{keys[held_rank]}={held_value} rather than span wider"
                )
                return _Attempt([], []), None, message
            return chosen, self._note(chosen, candidates, how, walk), None
        candidates.append(_Candidate(len(keys), None, None, bound(None), None))
        chosen, _ = self._search(sched, pending, placed, candidates, len(pending), walk)
        assert chosen is not None  # the whole cluster is always taken
        if chosen.domain is not None:
            return chosen, self._note(chosen, candidates, how, walk), None
        note = f"placed across the cluster ({how}): "
        if domains:
            note += f"{domains} domain(s) hold all {len(pending)} pods, none models faster"
        else:
            walked_keys = ", ".join(keys)
            note += f"no domain of {walked_keys} holds all {len(pending)} pods"
        note += f"; modelled bus bandwidth {_gbps(chosen.busbw)}"
        if walk.runner_up is not None:
            note += f" (runner-up {_domain_name(walk.runner_up.domain)}: "
            note += f"{_gbps(walk.runner_up.busbw)})"
        return chosen, note, None

    def _held_level(
        self, snapshot: Snapshot, keys: list[str], gid: GroupId
    ) -> tuple[int, str] | None:
        """The narrowest level (its rank in `keys`, and the domain) holding every node of the
        group's reservation; None: no reservation, or its nodes share no domain."""
        held = self.reservations.held.get(gid)
        if held is None:
            return None
        slots = [snapshot.index.get(node) for node in held.nodes]
        if any(slot is None for slot in slots):
            return None
        for rank, key in enumerate(keys):
            index = domain_index(snapshot, key)
            ids = {index.of_slot(slot) for slot in slots if slot is not None}
            if len(ids) == 1 and (domain := ids.pop()) >= 0:
                return rank, index.values[domain]
        return None

    def _search(
        self,
        sched: PodScheduling,
        pending: list[QueuedPod[PodInfo]],
        placed: list[PodInfo],
        candidates: list[_Candidate],
        need: int,
        walk: _Walk,
    ) -> tuple[_Attempt | None, _Attempt | None]:
        """Try the candidates in the order of their lower bounds, skipping those that cannot
        come first (with `compare_all`: second); the best placement by the group cycle's
        order is left assumed. A domain's try counts when at least `need` members fit there
        (the whole cluster's always does). Returns (the chosen attempt, the try that placed
        most among those that did not count)."""
        candidates.sort(key=lambda c: (c.bound, c.order))
        results: list[tuple[tuple[int, float, tuple[int, int, int, str]], _Attempt]] = []
        winners: dict[int, _Candidate] = {}
        tries: dict[int, int] = {}
        partial: _Attempt | None = None
        last: _Attempt | None = None  # the latest try, still assumed
        for cand in candidates:
            bar = None
            if results:
                second = _second(results)
                bar = results[0][0] if not self.compare_all else second[0] if second else None
            if bar is not None and bar[0] == 0:
                if cand.bound > bar[1] and not _same(cand.bound, bar[1]):
                    break  # the rest are bounded no lower
                if _same(cand.bound, bar[1]) and cand.order >= bar[2]:
                    continue
            if tries.get(cand.rank, 0) >= MAX_DOMAIN_TRIES:
                continue
            tries[cand.rank] = tries.get(cand.rank, 0) + 1
            if last is not None:
                self._revert(sched, last)
            domain = (cand.index, cand.room) if cand.index is not None and cand.room else None
            attempt = last = self._try(sched, pending, domain)
            if cand.tried is not None and cand.room is not None:
                cand.tried[cand.room.domain] = len(attempt.placed)
            if domain is not None and len(attempt.placed) < need:
                partial = _better(partial, attempt)
                continue
            self._price(sched, placed, attempt)
            key = (len(pending) - len(attempt.placed), attempt.seconds, cand.order)
            results.append((key, attempt))
            winners[id(attempt)] = cand
            results.sort(key=cmp_to_key(_compare))
        if not results:
            if last is not None:
                self._revert(sched, last)
            return None, partial
        chosen = results[0][1]
        runner = _second(results)
        if runner is not None:
            walk.runner_up = RunnerUp(runner[1].domain, runner[1].busbw)
        if chosen is not last:
            assert last is not None
            self._revert(sched, last)
            cand = winners[id(chosen)]
            domain = (cand.index, cand.room) if cand.index is not None and cand.room else None
            again = self._try(sched, pending, domain)
            self._price(sched, placed, again)
            chosen = again
        return chosen, partial

    def _price(self, sched: PodScheduling, placed: list[PodInfo], attempt: _Attempt) -> None:
        """The modelled all-reduce time of the whole group (members bound before and those of
        the attempt) and its bus bandwidth, into the attempt."""
        cache = sched.cache
        per_node: dict[str, list[int]] = {}
        for pod in placed:
            node, held = cache.node_of(pod.key), cache.gpus_held(pod.key) or ()
            if node is not None and held:
                per_node.setdefault(node, []).extend(held)
        where = []
        for placement in attempt.placed:
            assumed = placement.assumed
            if assumed is not None:
                where.append((placement.pod.key, assumed.node, tuple(assumed.gpus)))
            if assumed is not None and assumed.gpus:
                per_node.setdefault(assumed.node, []).extend(assumed.gpus)
        attempt.where = frozenset(where)
        total = sum(len(g) for g in per_node.values())
        if total < 2:
            attempt.seconds, attempt.busbw = 0.0, None
            return
        snapshot = cache.snapshot
        intra: list[tuple[int, float | None]] = []
        nic: list[float] = []
        level_gbps: list[list[float]] = []
        domains: list[list[str | None]] = []
        for name, gpus in per_node.items():
            slot = snapshot.index.get(name)
            info = snapshot.nodes[slot] if slot is not None else None
            topology = snapshot.gpus.topology[slot] if slot is not None else None
            busbw = None
            if topology is not None and len(gpus) > 1:
                busbw = self.selector.busbw(topology, tuple(sorted(set(gpus))))
            intra.append((len(gpus), busbw))
            links = self.network.links(name)
            nic.append(links.nic_gbps / max(1, _node_gpus(snapshot, slot)))
            level_gbps.append([links.level(key) for key in self.levels])
            labels = info.labels if info is not None else {}
            domains.append([labels.get(key) for key in self.levels])
        gbps = math.inf
        if len(per_node) > 1:
            gbps, _ = crossing_gbps(nic, level_gbps, domains, self.levels, self.network.core_gbps)
        fewest = min(len(g) for g in per_node.values())
        attempt.seconds = allreduce_time(intra, len(per_node), fewest, gbps)
        attempt.busbw = bus_bandwidth(total, attempt.seconds)

    def _bounder(
        self,
        sched: PodScheduling,
        pending: list[QueuedPod[PodInfo]],
        shapes: list[tuple[int, Any, Any]],
    ) -> Callable[[Any], float]:
        """A lower bound on the modelled time of the pending members inside a mask of slots
        (None: anywhere): the best set of their size on the slots' GPU types, plus the fewest
        nodes that hold their GPUs over the fastest link a slot has (its NIC share, the
        narrowest level's bandwidth)."""
        snapshot = sched.cache.snapshot
        n = snapshot.capacity
        resource = snapshot.gpus.resource
        counts = [int(qp.pod.requests.get(resource, 0)) for qp in pending]
        largest, total = max(counts, default=0), sum(counts)
        if total < 2:
            return lambda mask: 0.0
        feasible = np.zeros(n, np.bool_)
        for _, room, _ in shapes:
            feasible |= room[:n] > 0
        row = snapshot.row.get(resource)
        slots = np.flatnonzero(feasible)
        size = np.zeros(n, np.int64)
        fastest = np.zeros(n, np.float64)
        for slot in slots:
            info = snapshot.nodes[int(slot)]
            if info is None:
                continue
            gpus = (
                _node_gpus(snapshot, int(slot))
                if row is None
                else int(snapshot.allocatable[row, slot])
            )
            size[slot] = gpus
            links = self.network.links(info.name)
            gbps = links.nic_gbps / max(1, gpus)
            if self.levels:
                gbps = min(gbps, links.level(self.levels[-1]))
            fastest[slot] = gbps
        tids = snapshot.gpus.topology_id[:n]
        topologies = snapshot.gpus.topologies

        def bound(mask: Any) -> float:
            inside = np.flatnonzero(feasible if mask is None else feasible & mask[:n])
            if inside.size == 0:
                return 0.0
            intra = 0.0
            if largest > 1:
                kinds = np.unique(tids[inside])
                if kinds.size and kinds[0] >= 0:
                    intra = min(self._intra_bound(topologies[int(t)], largest) for t in kinds)
            widest = int(size[inside].max())
            inter = 0.0
            if 0 < widest < total:
                nodes = -(-total // widest)
                inter = allreduce_factor(nodes) / (widest * float(fastest[inside].max()))
            return intra + inter

        return bound

    def _intra_bound(self, topology: Any, gpus: int) -> float:
        """The least `c(g) / busbw` over g >= `gpus` GPUs on an empty node of this type."""
        key = (topology.key, gpus)
        found = self._bounds.get(key)
        if found is None:
            best = math.inf
            for g in range(gpus, topology.size + 1):
                chosen = self.selector.best_set(topology, topology.allocatable_mask, g)
                if chosen is not None and chosen.busbw:
                    best = min(best, allreduce_factor(g) / chosen.busbw)
            found = self._bounds[key] = 0.0 if math.isinf(best) else best
        return found

    def _note(self, chosen: _Attempt, candidates: list[_Candidate], how: str, walk: _Walk) -> str:
        assert chosen.domain is not None
        key, value = chosen.domain
        kind = " (NVLink domain)" if key == NVLINK_CLIQUE else ""
        free = next(
            (
                c.room.free
                for c in candidates
                if c.room is not None
                and c.room.value == value
                and c.index is not None
                and c.index.key == key
            ),
            0,
        )
        same = [c for c in candidates if c.index is not None and c.index.key == key]
        text = f"{key}={value}{kind}, {how}: {free} pods of the group fit there"
        others = len(same) - 1
        if others > 0:
            plural = "s" if others != 1 else ""
            text += f" ({others} other {key} domain{plural} hold it)"
        text += f"; modelled bus bandwidth {_gbps(chosen.busbw)}"
        if walk.runner_up is not None:
            text += f" (runner-up {_domain_name(walk.runner_up.domain)}: "
            text += f"{_gbps(walk.runner_up.busbw)})"
        score = next(
            (
                c.room.score
                for c in candidates
                if c.room is not None
                and c.room.value == value
                and c.index is not None
                and c.index.key == key
            ),
            0,
        )
        return f"{text}; group score {score}"

    def _own_domains(
        self, sched: PodScheduling, index: DomainIndex, placed: list[PodInfo]
    ) -> set[int] | None:
        """The domains the group's placed members are in (a required level keeps them)."""
        if not placed:
            return None
        own = set()
        for pod in placed:
            node = sched.cache.node_of(pod.key)
            slot = sched.cache.snapshot.index.get(node or "")
            if slot is not None:
                own.add(index.of_slot(slot))
        return own

    def _shapes(
        self, sched: PodScheduling, pending: list[QueuedPod[PodInfo]]
    ) -> list[tuple[int, Any, Any]]:
        """Per distinct member shape: (members of it, room per slot, node totals)."""
        snapshot = sched.cache.snapshot
        groups: dict[tuple[Any, ...], list[PodInfo]] = {}
        for qp in pending:
            groups.setdefault(_shape(qp.pod), []).append(qp.pod)
        out = []
        for pods in groups.values():
            result = _evaluate(sched, pods[0])
            if result is None:
                continue
            feasible = result.feasible
            totals = (
                result.totals
                if result.totals.size == snapshot.capacity
                else np.zeros(snapshot.capacity, np.int64)
            )
            out.append((len(pods), member_room(snapshot, pods[0], feasible), totals))
        return out

    def _try(
        self,
        sched: PodScheduling,
        pending: list[QueuedPod[PodInfo]],
        domain: tuple[DomainIndex, Room] | None,
    ) -> _Attempt:
        """Place each member in turn through the cycle (assumed before the next), inside
        the domain when one is given (its Filter first)."""
        attempt = _Attempt([], [])
        within: tuple[DomainFilter, ...] = ()
        if domain is not None:
            index, room = domain
            within = (DomainFilter(index, room.domain),)
            attempt.domain = (index.key, room.value)
        for position, qp in enumerate(pending, 1):
            pod = qp.pod
            if sched.profile_of(pod) is None:
                attempt.failed.append((position, pod, None, f"no profile {pod.scheduler_name!r}"))
                continue
            try:
                placement = sched.place(qp, within=within)
            except Exception as exc:  # a plugin bug: this member does not fit
                attempt.failed.append((position, pod, None, str(exc) or type(exc).__name__))
                continue
            result = placement.result
            if placement.assumed is None:
                attempt.failed.append((position, pod, result, result.message or NO_NODES_MESSAGE))
                continue
            why = sched.reserve(placement)  # held before the next member is placed
            if why is not None:
                attempt.failed.append((position, pod, result, why))
                continue
            attempt.placed.append(placement)
        return attempt

    def _revert(self, sched: PodScheduling, attempt: _Attempt) -> None:
        for placement in attempt.placed:
            sched.revert(placement)

    def _commit(self, sched: PodScheduling, attempt: _Attempt, share: float) -> list[Decision]:
        """Reserve and Permit every placed member; stops at the first that is rejected."""
        decisions: list[Decision] = []
        for placement in attempt.placed:
            decision = sched.commit(placement, share)
            decisions.append(decision)
            if decision.outcome != "assumed":
                break
        return decisions

    def _message(self, spec: GroupSpec, attempt: _Attempt, count: int, need: int) -> str:
        fit = len(attempt.placed)
        text = f"pod group {spec.key}: {fit}/{count} pods fit"
        if need != count:
            text += f" ({need} needed)"
        if attempt.failed:
            position, _, _, why = attempt.failed[0]
            nth = f"for the {ordinal(position)}"
            if why.startswith("0/") and " nodes are available" in why:
                why = why.replace(" nodes are available", f" nodes are available {nth}", 1)
            else:
                why = f"{nth}: {why}"
            text += f"; {why}"
        elif not attempt.placed:
            text += "."
        if not text.endswith("."):
            text += "."
        return text


def _second(
    results: list[tuple[tuple[int, float, tuple[int, int, int, str]], _Attempt]],
) -> tuple[tuple[int, float, tuple[int, int, int, str]], _Attempt] | None:
    """The runner-up among sorted results: the first whose members are not placed exactly as
    the best's (a wider domain holding the chosen one may give the same placement)."""
    first = results[0][1].where
    return next((r for r in results[1:] if r[1].where != first), None)


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= _SAME * max(abs(a), abs(b))


def _compare(
    a: tuple[tuple[int, float, tuple[int, int, int, str]], _Attempt],
    b: tuple[tuple[int, float, tuple[int, int, int, str]], _Attempt],
) -> int:
    """The group cycle's order of placements: fewer members left out, shorter modelled time
    (equal within a relative 1e-9), then the bin-packing order (level, free room, score)."""
    (missing_a, time_a, order_a), (missing_b, time_b, order_b) = a[0], b[0]
    if missing_a != missing_b:
        return -1 if missing_a < missing_b else 1
    if not _same(time_a, time_b):
        return -1 if time_a < time_b else 1
    return (order_a > order_b) - (order_a < order_b)


def _gbps(busbw: float | None) -> str:
    return "none (nothing to reduce)" if busbw is None else f"{busbw:.1f} GB/s"


def _domain_name(domain: tuple[str, str] | None) -> str:
    return "across the cluster" if domain is None else f"{domain[0]}={domain[1]}"


def _node_gpus(snapshot: Any, slot: int | None) -> int:
    """The node's GPUs: its allocatable GPU resource, else its topology's GPUs."""
    if slot is None:
        return 0
    row = snapshot.row.get(snapshot.gpus.resource)
    if row is not None and int(snapshot.allocatable[row, slot]) > 0:
        return int(snapshot.allocatable[row, slot])
    topology = snapshot.gpus.topology[slot]
    return topology.size if topology is not None else 0


def _blocked(attempt: _Attempt) -> Blocked | None:
    if not attempt.failed:
        return None
    return Blocked(*attempt.failed[0])


def _better(best: _Attempt | None, attempt: _Attempt) -> _Attempt:
    if best is None or len(attempt.placed) > len(best.placed):
        return _Attempt(list(attempt.placed), list(attempt.failed), attempt.domain)
    return best


def _evaluate(sched: PodScheduling, pod: PodInfo) -> ScheduleResult | None:
    """The decision for a member on the current view; None when no profile schedules it or
    a plugin failed (as in `_try`, a plugin's error means the member fits nowhere)."""
    try:
        return sched.evaluate(pod)
    except Exception:
        return None


def _over_quota(sched: PodScheduling, pending: list[QueuedPod[PodInfo]]) -> str | None:
    """CapacityScheduling's PreFilter for the pending members together (scheduler-plugins'
    wording), None when they fit their namespace's ElasticQuota or it has none."""
    quotas = sched.cache.snapshot.quotas
    return quotas.check_group([q.pod for q in pending]) if quotas.active else None


def _short_of(sched: PodScheduling, spec: GroupSpec) -> str | None:
    """The first resource of the group's minResources that the live nodes do not have free
    in total (None: they have it all)."""
    snapshot = sched.cache.snapshot
    live = snapshot.live
    for resource, amount in sorted(spec.min_resources.items()):
        row = snapshot.row.get(resource)
        free = 0
        if row is not None:
            free = int((snapshot.allocatable[row][live] - snapshot.requested[row][live]).sum())
        if free < amount:
            return resource
    return None


def _order(reservation: Reservation) -> tuple[int, float, str]:
    """Reservations' order for free nodes: higher priority first, then the one made first
    (a reservation made again after a release or expiry goes last among its equals)."""
    return (-reservation.priority, reservation.since, reservation.name)


def _free_gpus(snapshot: Snapshot, node: str) -> int:
    row = snapshot.row.get(snapshot.gpus.resource)
    slot = snapshot.index.get(node)
    if row is None or slot is None:
        return 0
    return int(snapshot.allocatable[row, slot]) - int(snapshot.requested[row, slot])


def _fitting_by_node(snapshot: Snapshot, held: Iterable[tuple[PodInfo, str]]) -> dict[str, int]:
    """Per held node, GPUs of the members held there that have room for all their GPUs now
    (in the order given)."""
    row = snapshot.row.get(snapshot.gpus.resource)
    fitting: dict[str, int] = {}
    if row is None:
        return fitting
    free: dict[str, int] = {}
    for pod, node in held:
        if node not in snapshot.index:
            continue
        left = free.setdefault(node, _free_gpus(snapshot, node))
        gpus = int(pod.requests.get(snapshot.gpus.resource, 0))
        if gpus <= left:
            fitting[node] = fitting.get(node, 0) + gpus
            free[node] = left - gpus
    return fitting


def _fitting_now(snapshot: Snapshot, held: Iterable[tuple[PodInfo, str]]) -> int:
    """GPUs of the members whose held node has room for all their GPUs now."""
    return sum(_fitting_by_node(snapshot, held).values())


def _freed_elsewhere(
    snapshot: Snapshot, reservation: Reservation, others: set[str], least: int
) -> bool:
    """Whether a node open to the reservation (not its own, not in `others`) has room for
    `least` GPUs now, the fewest a member asks (else moving cannot help: a cheap test)."""
    row = snapshot.row.get(snapshot.gpus.resource)
    if row is None:
        return False
    n = snapshot.capacity
    free = np.asarray(snapshot.allocatable[row, :n] - snapshot.requested[row, :n], np.int64)
    skip = {
        snapshot.index[node] for node in others | set(reservation.nodes) if node in snapshot.index
    }
    roomier = np.flatnonzero(snapshot.live[:n] & (free >= least))
    return any(int(slot) not in skip for slot in roomier)


def _freeing(reason: str) -> bool:
    """A filter reason that running pods ending would cure: a resource in use."""
    return (
        reason.startswith("Insufficient ")
        or reason == "Too many pods"
        or reason == "node(s) didn't have enough free GPUs"
    )


def _in_cache(sched: PodScheduling, pod: PodInfo) -> bool:
    cached = sched.cache.get(pod.key)
    return cached is not None and (not pod.uid or cached.uid == pod.uid)


def _member_map(
    pending: list[QueuedPod[PodInfo]], placed: list[PodInfo], sched: PodScheduling
) -> dict[str, tuple[str | None, tuple[int, ...]]]:
    members: dict[str, tuple[str | None, tuple[int, ...]]] = {}
    for pod in placed:
        members[pod.key] = (sched.cache.node_of(pod.key), sched.cache.gpus_held(pod.key) or ())
    for qp in pending:
        members.setdefault(qp.key, (None, ()))
    return dict(sorted(members.items()))


def _shape(pod: PodInfo) -> tuple[Any, ...]:
    """What decides where a member fits: two members alike here fit alike."""
    return (
        pod.scheduler_name,
        tuple(sorted(pod.requests.items())),
        pod.node_selector,
        pod.required_affinity,
        pod.tolerations,
        pod.host_ports,
        pod.annotations.get(ANNOTATION_PLACEMENT),
    )
