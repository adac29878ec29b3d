"""Which pod the kubelet is admitting, and which GPUs to prefer for it (pure).

The kubelet names no pod in GetPreferredAllocation or Allocate. It admits the pods bound to
its node one at a time, oldest first, and calls the plugin once per container that requests
the resource. So the container being admitted is, among the GPU-requesting pods bound to the
node that are not finished, the oldest pod (creation time, then name, then namespace) whose
first GPU-requesting container without devices asks for the requested number of GPUs.
"Without devices" comes from the kubelet's PodResources List (pods not yet admitted are
listed with no devices) plus what this plugin allocated and the kubelet has not listed yet.

Only app containers (`spec.containers`) are matched: PodResources does not list regular init
containers, so a GPU-requesting init container gets our own best set.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
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

PodKey = tuple[str, str]
"""(namespace, name)."""


class Source(enum.Enum):
    """Why a set was preferred; logged with every answer and counted in the metrics."""

    RECORDED = "recorded"  # the set topo-scheduler recorded on the pod
    NO_RECORD = "no-record"  # the pod carries no set: another scheduler's pod
    BAD_RECORD = "bad-record"  # the pod's record is unreadable
    RECORD_UNAVAILABLE = "record-unavailable"  # a recorded GPU is not among the available
    NO_POD = "no-pod"  # no pending pod of the node asks for this many GPUs
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
    def key(self) -> PodKey:
        return (self.namespace, self.name)

    @property
    def display(self) -> str:
        return f"{self.namespace}/{self.name}"


def _count(container: Mapping[str, Any], resource: str) -> int:
    resources = container.get("resources") or {}
    for field in ("limits", "requests"):  # extended resources: requests equal limits
        value = (resources.get(field) or {}).get(resource)
        if value is not None:
            try:
                return int(str(value))
            except ValueError:
                return 0
    return 0


def pod_view(obj: Mapping[str, Any], resource: str) -> PodView | None:
    """The view of a pod object; None when it requests no GPU or has finished."""
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


def admitted_container(
    pods: Iterable[PodView], held: Mapping[PodKey, int], size: int
) -> tuple[PodView, int] | None:
    """The pod being admitted and the position of its container among its GPU containers.

    `held` counts, per pod, the GPU containers that already hold devices (the first ones, in
    spec order: the kubelet admits containers in that order).
    """
    for pod in sorted(pods, key=lambda p: (p.created, p.name, p.namespace)):
        position = held.get(pod.key, 0)
        if position < len(pod.containers) and pod.containers[position][1] == size:
            return pod, position
    return None


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
    """Best `size` GPUs of `pool` containing `must`, by the scheduler's selection code."""
    rest = [i for i in pool if i not in must]
    need = size - len(must)
    if need <= 0:
        return tuple(sorted(must))[:size]
    for policy in dict.fromkeys((placement, Placement.BEST_EFFORT)):
        found = selector.best_set(topology, indices_to_mask(rest), need, policy)
        if found is not None:
            return tuple(sorted((*must, *found.gpus)))
    # Fewer allocatable GPUs than asked (e.g. unhealthy ones offered): the kubelet decides.
    return tuple(sorted((*must, *rest[:need])))


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
        return Preference(indices, Source.RECORD_UNAVAILABLE, pod, tuple(part))
    return Preference(tuple(sorted(part)), Source.RECORDED, pod, tuple(sorted(part)))
