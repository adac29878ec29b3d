"""The device plugin's decisions: preferred allocation, allocation, and who really got what.

Stateless across restarts by design: who holds which GPU comes from the kubelet's
PodResources List and the pods' annotations at every call, so a restarted plugin with pods
pending carries on where the old one stopped. The process remembers only

- the allocations it made that PodResources has not confirmed yet (*grants*), each with the
  pod the Allocate call was attributed to (a guess: the kubelet names no pod);
- per pod UID, how many of its GPU containers PodResources showed holding devices;
- the preference it gave last (GetPreferredAllocation and Allocate come in pairs).

A grant is confirmed once PodResources lists its device IDs: the pod holding them (by
namespace/name, resolved to its UID through the API server) is the pod that got them,
whatever the guess was. Only then are mismatches and assignments reported, against that pod
and its recorded set, so the scheduler's accounting follows what the kubelet really did.
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
    KubeletPod,
    Pending,
    PodView,
    Preference,
    Source,
    match_allocation,
    pending_containers,
    pod_view,
    prefer,
    preference_order,
    recorded_part,
)
from scheduler.agent.deviceplugin.health import Inventory
from scheduler.agent.deviceplugin.kube import Mismatch
from scheduler.agent.podresources import PodResources, PodResourcesError
from scheduler.core.topology.schema import GPU_RESOURCE
from scheduler.core.topology.select import GpuSelector

log = logging.getLogger("topo_scheduler.device_plugin")

GRANT_TTL = 120.0
"""Seconds an allocation waits to be listed by PodResources before it is given up (the
kubelet lists it right after Allocate returns; it never does when the admission failed)."""


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


@dataclass(frozen=True)
class ContainerAllocation:
    """What one container gets: its GPU UUIDs, as env vars or CDI device names."""

    envs: dict[str, str]
    cdi_devices: tuple[str, ...]


class AllocationError(ValueError):
    """The kubelet asked for devices this plugin does not advertise."""


@dataclass
class _Grant:
    """Devices handed out by one Allocate container request, not yet listed by the kubelet."""

    ids: frozenset[str]
    indices: tuple[int, ...]
    at: float
    guess: Pending | None  # the container the call was attributed to
    expected: tuple[int, ...] | None  # the recorded part the guess should have got
    listed: bool = False  # listed, but the pod holding it could not be told yet
    stale: bool = False  # a later kubelet call found it unlisted: it was never admitted


@dataclass
class _State:
    views: list[PodView] | None  # None: the API server's pods are not known
    kubelet: list[KubeletPod] | None  # None: PodResources did not answer
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
        self._lock = threading.Lock()  # every call below, one at a time
        self._grants: list[_Grant] = []
        self._admitted: dict[str, int] = {}  # pod UID -> GPU containers seen holding devices
        self._last: tuple[tuple[str, int], Preference] | None = None
        self._granted = threading.Event()  # grants wait for confirmation

    # -- state -----------------------------------------------------------------------------

    def _indices(self, ids: Sequence[str]) -> list[int]:
        unknown = [i for i in ids if i not in self.inventory.by_uuid]
        if unknown:
            raise AllocationError(
                f"device IDs {', '.join(unknown)} are not GPUs advertised by this plugin"
            )
        return sorted({self.inventory.by_uuid[i] for i in ids})

    def _views(self, raw: Sequence[dict[str, Any]]) -> list[PodView]:
        return [v for p in raw if (v := pod_view(p, self.resource_name)) is not None]

    def _kubelet_pods(self, listed: Sequence[PodResources]) -> list[KubeletPod]:
        out = []
        for pod in listed:
            held: dict[str, frozenset[str]] = {}
            for container in pod.containers:
                ids = {
                    d.split("::", 1)[0]
                    for devices in container.devices
                    if devices.resource_name == self.resource_name
                    for d in devices.device_ids
                }
                if ids:
                    held[container.name] = held.get(container.name, frozenset()) | ids
            out.append(KubeletPod(pod.namespace, pod.name, held))
        return out

    def _call_state(self) -> _State:
        """_state() for a kubelet call: the kubelet records an allocation before its next
        call, so a grant still unlisted now was never admitted and no longer holds its guess."""
        state = self._state()
        if state.kubelet is not None:
            for grant in self._grants:
                if not grant.listed:
                    grant.stale = True
        return state

    def _state(self) -> _State:
        kubelet: list[KubeletPod] | None = None
        unknown: Source | None = None
        try:
            kubelet = self._kubelet_pods(self._list_pod_resources())
        except PodResourcesError as exc:
            log.warning("%s", exc)
            unknown = Source.KUBELET_UNREACHABLE
        raw = self._pods.snapshot()
        views = None if raw is None else self._views(raw)
        if views is not None:
            live = {v.uid for v in views}
            for uid in [u for u in self._admitted if u not in live]:
                del self._admitted[uid]
        state = _State(views, kubelet, unknown)
        if kubelet is not None and views is not None and self._grants:
            self._confirm(state)
        return state

    def _granted_by_uid(self) -> dict[str, tuple[int, frozenset[int]]]:
        out: dict[str, tuple[int, frozenset[int]]] = {}
        for grant in self._grants:
            if grant.guess is None or grant.listed or grant.stale:
                continue
            count, indices = out.get(grant.guess.pod.uid, (0, frozenset()))
            out[grant.guess.pod.uid] = (count + 1, indices | set(grant.indices))
        return out

    def _pending(self, state: _State, size: int) -> list[Pending] | None:
        """The pending containers; None when it cannot be known (state.unknown says why)."""
        if state.kubelet is None:
            return None  # without PodResources nobody can tell who is pending
        kubelet = state.kubelet
        granted = self._granted_by_uid()

        def compute(views: Sequence[PodView]) -> list[Pending]:
            return pending_containers(
                views, kubelet, self.inventory.by_uuid.get, self._admitted, granted
            )

        pending = compute(state.views or ())
        if not any(p.size == size and p.listed for p in pending):
            # The watch may lag behind the kubelet, which saw the pod first: list afresh.
            fresh = self._pods.list_now()
            if fresh is not None:
                state.views = self._views(fresh)
                pending = compute(state.views)
            elif not any(p.size == size for p in pending):
                state.unknown = Source.API_UNREACHABLE
                return None
        return pending

    # -- who really got what ------------------------------------------------------------------

    def _holder(self, entry: KubeletPod, grant: _Grant, views: Sequence[PodView]) -> PodView | None:
        """The pod (by UID) of a PodResources entry: among the pods of that name not yet
        holding devices in all their GPU containers, the one the grant was attributed to,
        else the only one."""
        candidates = [
            v
            for v in views
            if v.name_key == entry.name_key and self._admitted.get(v.uid, 0) < len(v.containers)
        ]
        if grant.guess is not None:
            for view in candidates:
                if view.uid == grant.guess.pod.uid:
                    return view
        return candidates[0] if len(candidates) == 1 else None

    def _confirm(self, state: _State) -> None:
        """Settle every grant PodResources now lists (see the module docstring)."""
        assert state.kubelet is not None and state.views is not None
        spots: dict[str, tuple[int, str]] = {}
        for number, entry in enumerate(state.kubelet):
            for container, ids in entry.held.items():
                for device in ids:
                    spots[device] = (number, container)
        now = self._clock()
        fresh: list[PodView] | None = None
        live = {v.uid for v in state.views}
        for grant in list(self._grants):
            where = {spots.get(d) for d in grant.ids}
            spot = where.pop() if len(where) == 1 else None
            if spot is None and grant.guess is not None and grant.guess.pod.uid not in live:
                self._grants.remove(grant)  # not listed and its pod is gone: nothing to tell
                continue
            pod: PodView | None = None
            if spot is not None:
                entry = state.kubelet[spot[0]]
                pod = self._holder(entry, grant, state.views)
                if pod is None and fresh is None:
                    listed = self._pods.list_now()  # the watch may not know the pod yet
                    fresh = [] if listed is None else self._views(listed)
                if pod is None:
                    pod = self._holder(entry, grant, fresh or ())
            if pod is None or spot is None:
                grant.listed = spot is not None
                if now - grant.at > GRANT_TTL:
                    self._grants.remove(grant)
                    log.warning(
                        "GPUs %s allocated %.0fs ago: %s",
                        _fmt(grant.indices),
                        now - grant.at,
                        "the pod holding them cannot be found in the API server"
                        if spot is not None
                        else "the kubelet never listed them (the admission failed, or the "
                        "pod ended at once); nothing reported",
                    )
                continue
            self._grants.remove(grant)
            self._settle(grant, pod, state.kubelet[spot[0]], spot[1])

    def _settle(self, grant: _Grant, pod: PodView, entry: KubeletPod, container: str) -> None:
        """Report what `pod` really got: nothing when it is its recorded part; else the
        mismatch (event, metric) and its assignment, keyed by its UID."""
        position = pod.position_of(container)
        by_uuid = self.inventory.by_uuid
        others = {
            by_uuid[d]
            for name, ids in entry.held.items()
            if name != container
            for d in ids
            if d in by_uuid
        }
        later = {
            i
            for g in self._grants
            if g.guess is not None and g.guess.pod.uid == pod.uid
            for i in g.indices
        }
        holds = tuple(sorted(others | later | set(grant.indices)))
        self._admitted[pod.uid] = self._admitted.get(pod.uid, 0) + 1
        guessed = grant.guess is not None and grant.guess.key == (pod.uid, position)
        if not guessed:
            log.info(
                "PodResources: GPUs %s went to pod %s (uid %s), not to %s",
                _fmt(grant.indices),
                pod.display,
                pod.uid,
                grant.guess.pod.display if grant.guess else "an unidentified pod",
            )
        if not pod.has_record:
            # No (readable) record: the assignment is the scheduler's only truth.
            self._reports.assignment(pod.uid, holds)
            return
        expected = grant.expected if guessed and grant.expected is not None else None
        if expected is None:
            expected = recorded_part(pod, position, others, grant.indices) or ()
        if set(expected) == set(grant.indices):
            return
        mismatch = Mismatch(pod.namespace, pod.name, pod.uid, tuple(expected), grant.indices)
        log.warning("pod %s: GPUSetMismatch: %s", pod.display, mismatch.message)
        self._counters.mismatch()
        self._reports.mismatch(mismatch)
        self._reports.assignment(pod.uid, holds)

    def reconcile(self) -> int:
        """Confirm the grants PodResources lists now; the number still waiting."""
        with self._lock:
            if self._grants:
                self._state()
            left = len(self._grants)
            if not left:
                self._granted.clear()
            return left

    def run_reconciler(
        self, stop: threading.Event, *, first: float = 0.05, interval: float = 1.0
    ) -> None:
        """Until `stop`: after each Allocate, confirm it through PodResources (the next call
        would too, but the last admission of a burst has no next call)."""
        delay = first
        while not stop.is_set():
            if not self._granted.wait(0.5):
                continue
            if stop.wait(delay):
                return
            left = self.reconcile()
            delay = first if not left else min(interval, delay * 2)

    # -- the two calls -----------------------------------------------------------------------

    def preferred(self, available: Sequence[str], must: Sequence[str], size: int) -> list[str]:
        """GetPreferredAllocation for one container: the device IDs to prefer."""
        with self._lock:
            return self._preferred(available, must, size)

    def _preferred(self, available: Sequence[str], must: Sequence[str], size: int) -> list[str]:
        by_uuid = self.inventory.by_uuid
        available_idx = sorted({by_uuid[i] for i in available if i in by_uuid})
        must_idx = list(dict.fromkeys(by_uuid[i] for i in must if i in by_uuid))
        self._last = None
        if size <= 0:
            return []
        state = self._call_state()
        pending = self._pending(state, size)
        order = preference_order(pending or (), size, available_idx, must_idx)
        chosen = order[0] if order else None
        choice = prefer(
            self._selector,
            self.inventory.topology(),
            (chosen.pod, chosen.position) if chosen else None,
            chosen.held if chosen else (),
            available_idx,
            must_idx,
            size,
            state.unknown,
        )
        if chosen is not None:
            self._last = (chosen.key, choice)
        if len(order) > 1:
            log.info(
                "%d pods pending on the node ask for %d GPUs (%s): preferring for %s; "
                "Allocate's device IDs and PodResources tell which one the kubelet admits",
                len(order),
                size,
                ", ".join(p.pod.display for p in order[:5]) + (", ..." if len(order) > 5 else ""),
                order[0].pod.display,
            )
        _log_choice("preferred", choice, size)
        answer = list(dict.fromkeys(choice.indices))[:size]
        return [self.inventory.by_index[i] for i in answer]

    def allocate(self, requests: Sequence[Sequence[str]]) -> list[ContainerAllocation]:
        """Allocate: one answer per container request; who got them is confirmed later."""
        with self._lock:
            return [self._allocate(list(ids)) for ids in requests]

    def _allocate(self, ids: list[str]) -> ContainerAllocation:
        ids = list(dict.fromkeys(ids))
        indices = tuple(self._indices(ids))
        last, self._last = self._last, None
        if ids:
            self._grant(ids, indices, last)
        if self.strategy is DeviceListStrategy.CDI_CRI:
            return ContainerAllocation({}, tuple(f"nvidia.com/gpu={i}" for i in ids))
        return ContainerAllocation({"NVIDIA_VISIBLE_DEVICES": ",".join(ids)}, ())

    def _grant(
        self,
        ids: list[str],
        indices: tuple[int, ...],
        last: tuple[tuple[str, int], Preference] | None,
    ) -> None:
        state = self._call_state()
        pending = self._pending(state, len(ids))
        found, exact = match_allocation(pending or (), indices, last[0] if last else None)
        source = state.unknown or Source.NO_POD
        expected: tuple[int, ...] | None = None
        if found is not None:
            if exact:
                source, expected = Source.RECORDED, indices
            elif last is not None and last[0] == found.key:
                source, expected = last[1].source, last[1].expected
            elif found.pod.record_error is not None:
                source = Source.BAD_RECORD
            elif found.pod.recorded is None:
                source = Source.NO_RECORD
            else:
                source = Source.RECORD_UNAVAILABLE
        # The kubelet hands a device to one container at a time: an unconfirmed grant of the
        # same devices was never admitted (or ended) and is superseded.
        self._grants = [g for g in self._grants if not g.ids & set(ids)]
        self._grants.append(_Grant(frozenset(ids), indices, self._clock(), found, expected))
        self._granted.set()
        log.info(
            "allocated GPUs %s to %s (%s)",
            _fmt(indices),
            f"pod {found.pod.display}" if found else "a pod PodResources will name",
            source.value,
        )
        self._counters.allocation(source.value)


def _fmt(indices: Sequence[int]) -> str:
    return ",".join(map(str, indices))


_EXPLAIN = {
    Source.RECORDED: "the set recorded on the pod",
    Source.NO_RECORD: "own best set: the pod carries no recorded set (another scheduler's pod)",
    Source.BAD_RECORD: "own best set: the pod's recorded set is unreadable",
    Source.RECORD_UNAVAILABLE: "own best set: GPUs of the recorded set are not available",
    Source.NO_POD: "own best set: no pod the kubelet is admitting asks for this many GPUs",
    Source.API_UNREACHABLE: "own best set: the API server cannot be reached",
    Source.KUBELET_UNREACHABLE: "own best set: the kubelet's PodResources cannot be reached",
}


def _log_choice(call: str, choice: Preference, size: int) -> None:
    who = choice.pod.display if choice.pod else "unidentified pod"
    log.info(
        "%s GPUs %s for %s (%d asked): %s",
        call,
        _fmt(choice.indices),
        who,
        size,
        _EXPLAIN[choice.source],
    )
