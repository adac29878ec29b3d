"""Which pod the kubelet is admitting, and which GPUs to prefer for it (pure).

The kubelet names no pod in GetPreferredAllocation or Allocate: it admits the pods bound to
its node one at a time and calls the plugin once per container that requests the resource.
Pods are identified by UID, never by name and creation time:

- a *pending container* is the next GPU-requesting app container of a pod bound to the node
  (by UID) that does not hold devices yet. Who holds devices comes from the kubelet's
  PodResources List (by namespace/name, so a pod recreated under the same name is told apart
  by its entries: the one without devices is the new pod), from what this plugin allocated
  and the kubelet has not listed yet, and from the UIDs this plugin saw admitted;
- pods the kubelet lists are preferred: the kubelet adds a pod to its pod manager, which
  PodResources lists, just before admitting it, so the pod being admitted is listed and the
  ones waiting behind it are not (kubelets that list every bound pod make this a tie);
- GetPreferredAllocation carries only a size: among the pending containers of that size it
  prefers for the one whose recorded set is available (then the oldest, as a tie-break and
  nothing more: admission order is the kubelet's, not the pods' creation order);
- Allocate carries the device IDs: when they equal the recorded part of exactly one pending
  container, that is the pod; otherwise the pod the preference was for, or the only listed
  pending container of that size, is a guess that PodResources confirms or corrects
  afterwards. A guess the kubelet has not listed by its next call was never admitted (it
  records devices right after Allocate) and no longer counts for the pod it named.

Only app containers (`spec.containers`) are matched: PodResources does not list regular init
containers, so a GPU-requesting init container gets our own best set.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.core.topology.schema import (
    ANNOTATION_GPUS,
    ANNOTATION_PLACEMENT,
    Placement,
    Topology,
    TopologyError,
    parse_gpu_indices,
    parse_placement,
)
from scheduler.core.topology.scoring import indices_to_mask
from scheduler.core.topology.select import GpuSelector

NameKey = tuple[str, str]
"""(namespace, name): how PodResources names a pod (its v1 API carries no UID)."""


class Source(enum.Enum):
    """Why a set was preferred; logged with every answer and counted in the metrics."""

    RECORDED = "recorded"  # the set topo-scheduler recorded on the pod
    NO_RECORD = "no-record"  # the pod carries no set: another scheduler's pod
    BAD_RECORD = "bad-record"  # the pod's record is unreadable
    RECORD_UNAVAILABLE = "record-unavailable"  # a recorded GPU is not among the available
    NO_POD = "no-pod"  # no pod the kubelet lists as pending asks for this many GPUs
    API_UNREACHABLE = "api-unreachable"  # the pods on the node are not known
    KUBELET_UNREACHABLE = "kubelet-unreachable"  # the kubelet's PodResources did not answer


@dataclass(frozen=True)
class PodView:
    """What the plugin needs of a pod bound to its node."""

    namespace: str
    name: str
    uid: str
    created: str
    containers: tuple[tuple[str, int], ...]  # GPU-requesting app containers, in spec order
    recorded: tuple[int, ...] | None
    record_error: str | None
    placement: Placement

    @property
    def key(self) -> str:
        """The pod's identity: its UID."""
        return self.uid

    @property
    def name_key(self) -> NameKey:
        return (self.namespace, self.name)

    @property
    def display(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def has_record(self) -> bool:
        return self.recorded is not None and self.record_error is None

    def position_of(self, container: str) -> int | None:
        """Position of an app container among the pod's GPU containers (None: not one)."""
        for position, (name, _) in enumerate(self.containers):
            if name == container:
                return position
        return None


def _count(container: Mapping[str, Any], resource: str) -> int:
    resources = container.get("resources") or {}
    for field_name in ("limits", "requests"):  # extended resources: requests equal limits
        value = (resources.get(field_name) or {}).get(resource)
        if value is not None:
            try:
                return int(str(value))
            except ValueError:
                return 0
    return 0


def pod_view(obj: Mapping[str, Any], resource: str) -> PodView | None:
    """The view of a pod object; None when it requests no GPU, has finished or is going."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    phase = (obj.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed") or meta.get("deletionTimestamp"):
        return None
    containers = tuple(
        (str(c.get("name", "")), n)
        for c in spec.get("containers") or ()
        if (n := _count(c, resource)) > 0
    )
    if not containers:
        return None
    namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    annotations = meta.get("annotations") or {}
    recorded: tuple[int, ...] | None = None
    error: str | None = None
    placement = Placement.BEST_EFFORT
    # An unreadable policy was already reported by the scheduler; prefer best effort.
    with contextlib.suppress(TopologyError):
        placement = parse_placement(
            annotations.get(ANNOTATION_PLACEMENT), pod=f"{namespace}/{name}"
        )
    if ANNOTATION_GPUS in annotations:
        try:
            recorded = parse_gpu_indices(annotations[ANNOTATION_GPUS], pod=f"{namespace}/{name}")
        except TopologyError as exc:
            error = str(exc)
    return PodView(
        namespace,
        name,
        str(meta.get("uid", "")),
        str(meta.get("creationTimestamp", "")),
        containers,
        recorded,
        error,
        placement,
    )


@dataclass(frozen=True)
class KubeletPod:
    """One entry of the kubelet's PodResources List: the app containers holding devices of
    the plugin's resource (base device IDs). A pod recreated under the same name while the
    old one still terminates is listed twice, once per pod object."""

    namespace: str
    name: str
    held: Mapping[str, frozenset[str]] = field(default_factory=dict)

    @property
    def name_key(self) -> NameKey:
        return (self.namespace, self.name)


@dataclass(frozen=True)
class Pending:
    """A pod's next GPU container that holds no devices yet."""

    pod: PodView
    position: int  # among the pod's GPU containers
    held: tuple[int, ...]  # GPU indices the pod's earlier containers hold
    listed: bool  # the kubelet's PodResources lists the pod

    @property
    def size(self) -> int:
        return self.pod.containers[self.position][1]

    @property
    def key(self) -> tuple[str, int]:
        return (self.pod.uid, self.position)

    @property
    def last(self) -> bool:
        return self.position == len(self.pod.containers) - 1

    def remaining(self) -> tuple[int, ...]:
        """The recorded GPUs the pod's earlier containers did not take."""
        if self.pod.recorded is None:
            return ()
        return tuple(i for i in self.pod.recorded if i not in self.held)

    def matches(self, indices: Iterable[int]) -> bool:
        """The devices are this container's part of the recorded set."""
        if not self.pod.has_record:
            return False
        got, remaining = set(indices), set(self.remaining())
        if len(got) != self.size:
            return False
        return got == remaining if self.last else got <= remaining

    def record_fits(self, available: Iterable[int], must: Iterable[int]) -> bool:
        """The container's recorded part can be preferred: available and holding `must`."""
        if not self.pod.has_record:
            return False
        remaining = set(self.remaining())
        pool = remaining & set(available)
        if self.last and (len(remaining) != self.size or pool != remaining):
            return False
        return len(pool) >= self.size and set(must) <= remaining


def pending_containers(
    views: Iterable[PodView],
    kubelet: Sequence[KubeletPod],
    index_of: Callable[[str], int | None],
    admitted: Mapping[str, int] | None = None,
    granted: Mapping[str, tuple[int, frozenset[int]]] | None = None,
) -> list[Pending]:
    """Each pod's next GPU container without devices, by UID.

    `kubelet` is the PodResources List; `admitted` counts, per UID, the GPU containers this
    plugin saw holding devices (so a stale pod object under a reused name is never taken
    for the new pod); `granted` is, per UID, what this plugin allocated and the kubelet has
    not listed yet (containers, indices). The kubelet admits a pod's containers in spec
    order, so the containers holding devices are the first ones.
    """
    admitted = admitted or {}
    granted = granted or {}
    by_name: dict[NameKey, list[KubeletPod]] = {}
    for entry in kubelet:
        by_name.setdefault(entry.name_key, []).append(entry)
    out = []
    for view in views:
        names = [name for name, _ in view.containers]
        entries = by_name.get(view.name_key, [])
        count, indices = 0, set[int]()
        if entries:
            # Under a reused name the old pod's entry holds devices; the pod being admitted
            # is the entry holding the fewest.
            per_entry = [
                (
                    sum(name in entry.held for name in names),
                    {
                        i
                        for name in names
                        for d in entry.held.get(name, ())
                        if (i := index_of(d)) is not None
                    },
                )
                for entry in entries
            ]
            count, indices = min(per_entry, key=lambda t: t[0])
        extra, extra_indices = granted.get(view.uid, (0, frozenset()))
        count = max(count, admitted.get(view.uid, 0)) + extra
        if count >= len(view.containers):
            continue
        out.append(Pending(view, count, tuple(sorted(indices | extra_indices)), bool(entries)))
    return out


def _by_age(p: Pending) -> tuple[str, str, str, str]:
    return (p.pod.created, p.pod.namespace, p.pod.name, p.pod.uid)


def preference_order(
    pending: Iterable[Pending], size: int, available: Iterable[int], must: Iterable[int]
) -> list[Pending]:
    """The pending containers of `size` the kubelet may be admitting, most likely first.

    Only listed pods: the kubelet lists the pod it admits, so a call while no pending pod of
    that size is listed is for none of them (a pod deleted meanwhile, a GPU init container)
    and gets our own best set. Among them, containers whose recorded part is available
    (preferring for them gives the pod its record, and a wrong guess is caught by Allocate and
    PodResources), then pods without a record; the pods' age only breaks ties.
    """
    fits = [p for p in pending if p.size == size]
    listed = [p for p in fits if p.listed]
    free, wanted = set(available), set(must)

    def rank(p: Pending) -> tuple[int, tuple[str, str, str, str]]:
        if p.record_fits(free, wanted):
            return (0, _by_age(p))
        return (1 if not p.pod.has_record else 2, _by_age(p))

    return sorted(listed, key=rank)


def match_allocation(
    pending: Iterable[Pending], indices: Sequence[int], preferred_for: tuple[str, int] | None
) -> tuple[Pending | None, bool]:
    """The pending container an Allocate of `indices` is for, and whether the devices are
    exactly its recorded part. (None, False) when neither the devices nor anything else
    tells: PodResources will."""
    fits = [p for p in pending if p.size == len(indices)]
    exact = [p for p in fits if p.matches(indices)]
    if exact:
        for p in exact:
            if p.key == preferred_for:
                return p, True
        return sorted([p for p in exact if p.listed] or exact, key=_by_age)[0], True
    for p in fits:
        if p.key == preferred_for:
            return p, False  # the kubelet allocated others than the ones we preferred
    listed = [p for p in fits if p.listed]
    if len(listed) == 1:
        return listed[0], False
    return None, False


def recorded_part(
    pod: PodView, position: int | None, others: Iterable[int], got: Iterable[int]
) -> tuple[int, ...] | None:
    """What a container of `pod` that got `got` should have had, judged afterwards: None
    when the pod carries no readable record; `got` itself when it is part of the record
    (several GPU containers share it); else the recorded GPUs its other containers left."""
    if not pod.has_record or pod.recorded is None:
        return None
    held = set(others)
    remaining = tuple(i for i in pod.recorded if i not in held)
    last = position is None or position == len(pod.containers) - 1
    got_set = set(got)
    if not last and got_set <= set(remaining):
        return tuple(sorted(got_set))
    return remaining


@dataclass(frozen=True)
class Preference:
    """The GPU indices to prefer, why, and the pod they are for (None when unknown)."""

    indices: tuple[int, ...]
    source: Source
    pod: PodView | None
    expected: tuple[int, ...] | None  # the recorded part Allocate should see, when recorded


def _pick(
    selector: GpuSelector,
    topology: Topology,
    pool: Sequence[int],
    must: Sequence[int],
    size: int,
    placement: Placement,
) -> tuple[int, ...]:
    """Best `size` distinct GPUs of `pool` containing `must` (as much of it as fits), by the
    scheduler's selection code. Never a GPU twice, never more than `size`."""
    if size <= 0:
        return ()
    must = list(dict.fromkeys(must))
    if len(must) >= size:
        return tuple(sorted(must[:size]))
    rest = [i for i in dict.fromkeys(pool) if i not in must]
    need = size - len(must)
    for policy in dict.fromkeys((placement, Placement.BEST_EFFORT)):
        found = selector.best_set(topology, indices_to_mask(rest), need, policy)
        if found is not None:
            return tuple(sorted({*must, *found.gpus}))
    # Fewer allocatable GPUs than asked (e.g. unhealthy ones offered): the kubelet decides.
    return tuple(sorted({*must, *rest[:need]}))


def own_best_set(
    selector: GpuSelector,
    topology: Topology,
    available: Sequence[int],
    must: Sequence[int],
    size: int,
    placement: Placement = Placement.BEST_EFFORT,
) -> tuple[int, ...]:
    """Our own best set among the available GPUs (never simply the lowest indices)."""
    return _pick(selector, topology, available, must, size, placement)


def prefer(
    selector: GpuSelector,
    topology: Topology,
    admitted: tuple[PodView, int] | None,
    held_by_pod: Sequence[int],
    available: Sequence[int],
    must: Sequence[int],
    size: int,
    unknown: Source | None = None,
) -> Preference:
    """The set to prefer for the admitted container (see the module docstring).

    `held_by_pod` are the indices the pod's earlier containers hold; `unknown` is the reason
    to give when `admitted` is None (no pod matched, or the pods could not be known).
    """
    must = list(dict.fromkeys(must))
    if admitted is None:
        indices = own_best_set(selector, topology, available, must, size)
        return Preference(indices, unknown or Source.NO_POD, None, None)
    pod, position = admitted
    if pod.recorded is None or pod.record_error is not None:
        source = Source.NO_RECORD if pod.record_error is None else Source.BAD_RECORD
        indices = own_best_set(selector, topology, available, must, size, pod.placement)
        return Preference(indices, source, pod, None)
    remaining = [i for i in pod.recorded if i not in held_by_pod]
    if len(pod.containers) > 1:
        # Several GPU containers share the recorded set: this one takes the best-connected
        # part of what its earlier containers left.
        if not set(must) <= set(remaining):
            remaining = []
        part = _pick(selector, topology, remaining, must, size, pod.placement) if remaining else ()
        if position == len(pod.containers) - 1:
            part = tuple(remaining)
    else:
        part = tuple(remaining)
    if len(part) != size or not set(part) <= set(available) or not set(must) <= set(part):
        indices = own_best_set(selector, topology, available, must, size, pod.placement)
        return Preference(indices, Source.RECORD_UNAVAILABLE, pod, tuple(sorted(part)))
    return Preference(tuple(sorted(part)), Source.RECORDED, pod, tuple(sorted(part)))
