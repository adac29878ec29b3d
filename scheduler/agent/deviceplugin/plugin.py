"""The device plugin's decisions: preferred allocation, allocation, mismatch reports.

Stateless across restarts by design: who holds which GPU comes from the kubelet's
PodResources List and the pods' annotations at every call, so a restarted plugin with pods
pending carries on where the old one stopped. The only memory is what this process
allocated and the kubelet has not listed yet, and the preference it gave for a container
(so Allocate can compare against it); both are pruned as the kubelet catches up.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from scheduler.agent.deviceplugin.admission import (
    PodKey,
    PodView,
    Preference,
    Source,
    admitted_container,
    pod_view,
    prefer,
)
from scheduler.agent.deviceplugin.health import Inventory
from scheduler.agent.deviceplugin.kube import Mismatch
from scheduler.agent.podresources import PodResources, PodResourcesError
from scheduler.core.topology.schema import GPU_RESOURCE
from scheduler.core.topology.select import GpuSelector

log = logging.getLogger("topo_scheduler.device_plugin")

RECENT_TTL = 600.0
"""Seconds an allocation of ours is remembered while the kubelet does not list it."""


class DeviceListStrategy(enum.Enum):
    """How the container is told its GPUs (as NVIDIA's plugin's `deviceListStrategy`)."""

    ENVVAR = "envvar"  # NVIDIA_VISIBLE_DEVICES=<uuid,...>, read by the NVIDIA container toolkit
    CDI_CRI = "cdi-cri"  # CDI device names nvidia.com/gpu=<uuid> in the CRI request


class PodSource(Protocol):
    """The pods bound to the node (PodWatch in production)."""

    def snapshot(self) -> list[dict[str, Any]] | None: ...

    def list_now(self) -> list[dict[str, Any]] | None: ...


class Reports(Protocol):
    """Where mismatches and assignments go (Reporter in production)."""

    def mismatch(self, mismatch: Mismatch) -> None: ...

    def assignment(self, uid: str, indices: tuple[int, ...]) -> None: ...


class Counters(Protocol):
    """Metrics hooks (PluginMetrics in production)."""

    def mismatch(self) -> None: ...

    def allocation(self, source: str) -> None: ...


@dataclass
class _Recent:
    containers: int
    indices: set[int]
    at: float


@dataclass(frozen=True)
class ContainerAllocation:
    """What one container gets: its GPU UUIDs, as env vars or CDI device names."""

    envs: dict[str, str]
    cdi_devices: tuple[str, ...]


class AllocationError(ValueError):
    """The kubelet asked for devices this plugin does not advertise."""


@dataclass
class _State:
    pods: list[PodView] | None
    held: dict[PodKey, int]
    held_indices: dict[PodKey, set[int]]
    unknown: Source | None = None


class DevicePlugin:
    """Answers GetPreferredAllocation and Allocate for one node's GPUs."""

    def __init__(
        self,
        inventory: Inventory,
        pods: PodSource,
        list_pod_resources: Callable[[], Sequence[PodResources]],
        reports: Reports,
        counters: Counters,
        *,
        resource_name: str = GPU_RESOURCE,
        strategy: DeviceListStrategy = DeviceListStrategy.ENVVAR,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inventory = inventory
        self._pods = pods
        self._list_pod_resources = list_pod_resources
        self._reports = reports
        self._counters = counters
        self.resource_name = resource_name
        self.strategy = strategy
        self._clock = clock
        self._selector = GpuSelector()
        self._lock = threading.Lock()  # Allocate and GetPreferredAllocation, one at a time
        self._recent: dict[PodKey, _Recent] = {}
        self._preferences: dict[tuple[PodKey, int], Preference] = {}

    # -- state -----------------------------------------------------------------------------

    def _indices(self, ids: Sequence[str]) -> list[int]:
        unknown = [i for i in ids if i not in self.inventory.by_uuid]
        if unknown:
            raise AllocationError(
                f"device IDs {', '.join(unknown)} are not GPUs advertised by this plugin"
            )
        return sorted(self.inventory.by_uuid[i] for i in ids)

    def _state(self) -> _State:
        held: dict[PodKey, int] = {}
        held_indices: dict[PodKey, set[int]] = {}
        unknown: Source | None = None
        try:
            listed = self._list_pod_resources()
        except PodResourcesError as exc:
            log.warning("%s", exc)
            listed = ()
            unknown = Source.KUBELET_UNREACHABLE
        for pod in listed:
            key = (pod.namespace, pod.name)
            for container in pod.containers:
                ids = {
                    d.split("::", 1)[0]
                    for devices in container.devices
                    if devices.resource_name == self.resource_name
                    for d in devices.device_ids
                }
                if ids:
                    held[key] = held.get(key, 0) + 1
                    held_indices.setdefault(key, set()).update(
                        self.inventory.by_uuid[i] for i in ids if i in self.inventory.by_uuid
                    )
        now = self._clock()
        for key, recent in list(self._recent.items()):
            if held.get(key, 0) >= recent.containers or now - recent.at > RECENT_TTL:
                del self._recent[key]  # the kubelet lists it now
                continue
            held[key] = recent.containers
            held_indices.setdefault(key, set()).update(recent.indices)
        raw = self._pods.snapshot()
        pods: list[PodView] | None = None
        if raw is not None:
            pods = [v for p in raw if (v := pod_view(p, self.resource_name)) is not None]
        return _State(pods, held, held_indices, unknown)

    def _admitted(self, state: _State, size: int) -> tuple[PodView, int] | None:
        if state.unknown is not None:
            return None  # without PodResources nobody can tell who is pending
        found = admitted_container(state.pods or (), state.held, size)
        if found is None:
            # The watch may lag behind the kubelet, which saw the pod first: list afresh.
            fresh = self._pods.list_now()
            if fresh is None:
                state.unknown = Source.API_UNREACHABLE
                return None
            views = [v for p in fresh if (v := pod_view(p, self.resource_name)) is not None]
            found = admitted_container(views, state.held, size)
        return found

    # -- the two calls -----------------------------------------------------------------------

    def preferred(self, available: Sequence[str], must: Sequence[str], size: int) -> list[str]:
        """GetPreferredAllocation for one container: the device IDs to prefer."""
        with self._lock:
            return self._preferred(available, must, size)

    def _preferred(self, available: Sequence[str], must: Sequence[str], size: int) -> list[str]:
        known = [i for i in available if i in self.inventory.by_uuid]
        available_idx = self._indices(known)
        must_idx = self._indices([i for i in must if i in self.inventory.by_uuid])
        state = self._state()
        admitted = self._admitted(state, size)
        held_by_pod = sorted(state.held_indices.get(admitted[0].key, ())) if admitted else []
        choice = prefer(
            self._selector,
            self.inventory.topology(),
            admitted,
            held_by_pod,
            available_idx,
            must_idx,
            size,
            state.unknown,
        )
        if admitted is not None:
            self._preferences[(admitted[0].key, admitted[1])] = choice
        _log_choice("preferred", choice, size)
        return [self.inventory.by_index[i] for i in choice.indices]

    def allocate(self, requests: Sequence[Sequence[str]]) -> list[ContainerAllocation]:
        """Allocate: one answer per container request, mismatches reported."""
        with self._lock:
            return [self._allocate(list(ids)) for ids in requests]

    def _allocate(self, ids: list[str]) -> ContainerAllocation:
        indices = tuple(self._indices(ids))
        state = self._state()
        admitted = self._admitted(state, len(ids))
        source = state.unknown or Source.NO_POD
        if admitted is not None:
            pod, position = admitted
            before = sorted(state.held_indices.get(pod.key, ()))
            choice = self._preferences.pop((pod.key, position), None)
            if choice is None:  # no GetPreferredAllocation (e.g. Topology Manager aligned)
                free = [
                    g.index for g in self.inventory.devices() if g.healthy and g.index not in before
                ]
                choice = prefer(
                    self._selector,
                    self.inventory.topology(),
                    admitted,
                    before,
                    free,
                    [],
                    len(ids),
                )
            source = choice.source
            recent = self._recent.setdefault(pod.key, _Recent(0, set(), self._clock()))
            recent.containers = position + 1
            recent.indices.update(indices)
            recent.at = self._clock()
            holds = tuple(sorted({*before, *indices}))
            if choice.expected is not None and set(choice.expected) != set(indices):
                mismatch = Mismatch(pod.namespace, pod.name, pod.uid, choice.expected, indices)
                log.warning("pod %s: GPUSetMismatch: %s", pod.display, mismatch.message)
                self._counters.mismatch()
                self._reports.mismatch(mismatch)
                self._reports.assignment(pod.uid, holds)
            elif choice.expected is None:
                # No record on the pod: the assignment is the scheduler's only truth.
                self._reports.assignment(pod.uid, holds)
            log.info(
                "allocated GPUs %s to pod %s (%s)",
                ",".join(map(str, indices)),
                pod.display,
                source.value,
            )
        else:
            log.info(
                "allocated GPUs %s to an unidentified pod (%s)",
                ",".join(map(str, indices)),
                source.value,
            )
        self._counters.allocation(source.value)
        if self.strategy is DeviceListStrategy.CDI_CRI:
            return ContainerAllocation({}, tuple(f"nvidia.com/gpu={i}" for i in ids))
        return ContainerAllocation({"NVIDIA_VISIBLE_DEVICES": ",".join(ids)}, ())


_EXPLAIN = {
    Source.RECORDED: "the set recorded on the pod",
    Source.NO_RECORD: "own best set: the pod carries no recorded set (another scheduler's pod)",
    Source.BAD_RECORD: "own best set: the pod's recorded set is unreadable",
    Source.RECORD_UNAVAILABLE: "own best set: GPUs of the recorded set are not available",
    Source.NO_POD: "own best set: no pending pod on the node asks for this many GPUs",
    Source.API_UNREACHABLE: "own best set: the API server cannot be reached",
    Source.KUBELET_UNREACHABLE: "own best set: the kubelet's PodResources cannot be reached",
}


def _log_choice(call: str, choice: Preference, size: int) -> None:
    who = choice.pod.display if choice.pod else "unidentified pod"
    log.info(
        "%s GPUs %s for %s (%d asked): %s",
        call,
        ",".join(map(str, choice.indices)),
        who,
        size,
        _EXPLAIN[choice.source],
    )
