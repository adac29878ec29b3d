"""Pod groups in the cluster: PodGroup discovery and watches, and their status.

The API server is asked which PodGroup kinds it serves (discovery, never assumed):
scheduler-plugins' `scheduling.x-k8s.io/v1alpha1` (installed with its CRD, e.g. by the Helm
chart) and Kubernetes' own `scheduling.k8s.io/v1beta1` (1.37, behind the `GenericWorkload`
feature gate). Each served kind is listed and watched; its objects become the group cycle's
`GroupSpec`s (`scheduler.core.group`). Annotation groups need no object.

Status, written after each group cycle when it changed:

- scheduler-plugins PodGroup: `status.phase` (`Pending` while members are missing,
  `Scheduling` while it does not fit, `Scheduled` once minMember are placed),
  `status.scheduleStartTime` (the first attempt of the current wait) and `status.scheduled`.
  `running`, `succeeded`, `failed` and `occupiedBy` are left to its controller
  (scheduler-plugins' controller, when it runs).
- Kubernetes PodGroup: the `PodGroupInitiallyScheduled` condition (False with the group's
  message while it does not fit, True once it did).

The status is written by `reporter.PodGroupStatus`; a write that fails is retried with the
queue's backoff (podInitialBackoffSeconds doubling to podMaxBackoffSeconds) while it is still
the latest status of a group still there.

A PodGroup that cannot be read is reported as such: an error log naming the field, a Warning
`InvalidPodGroup` event on it, and (Kubernetes PodGroup) the condition False with reason
`InvalidPodGroup`; its old spec is dropped and its members wait with the reason. A PodGroup
that changes, becomes unreadable or is deleted is reconciled with its members
(`GroupCycle.reconcile`), and the log says what was done.

`KubeGroups` gets the narrow `AdapterHost` (client, served APIs, informers, wake-up), the
placement interface the group algorithm reconciles through, the status writer and the Event
recorder; never the scheduler.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from plugins import gang_reservation_seconds, topology_levels
from scheduler.core.config import SchedulerConfiguration
from scheduler.core.cycle import PodScheduling
from scheduler.core.group import (
    GroupCycle,
    GroupError,
    GroupOutcome,
    GroupSpec,
    kubernetes_group,
    scheduler_plugins_group,
)
from scheduler.core.model import SOURCE_KUBERNETES, SOURCE_SCHEDULER_PLUGINS
from scheduler.kube.client import ApiError
from scheduler.kube.events import EventRecorder, ObjectRef
from scheduler.kube.host import AdapterHost
from scheduler.kube.informer import run_tasks
from scheduler.kube.metrics import Metrics
from scheduler.kube.reporter import CONDITION_SCHEDULED, PodGroupStatus

Obj = dict[str, Any]
log = structlog.get_logger("topo_scheduler")

__all__ = ["CONDITION_SCHEDULED", "KINDS", "REASON_INVALID", "GroupKind", "KubeGroups"]

REASON_INVALID = "InvalidPodGroup"  # event and condition reason: the PodGroup cannot be read


@dataclass(frozen=True, slots=True)
class GroupKind:
    """One PodGroup API: where it is served and how its objects are read."""

    source: str
    group: str
    version: str
    parse: Callable[[Obj], GroupSpec]

    @property
    def api(self) -> str:
        return f"/apis/{self.group}/{self.version}"


KINDS = (
    GroupKind(SOURCE_SCHEDULER_PLUGINS, "scheduling.x-k8s.io", "v1alpha1", scheduler_plugins_group),
    GroupKind(SOURCE_KUBERNETES, "scheduling.k8s.io", "v1beta1", kubernetes_group),
)


class _Handler:
    def __init__(self, owner: KubeGroups, kind: GroupKind) -> None:
        self.owner = owner
        self.kind = kind

    def on_upsert(self, obj: Obj, old: Obj | None) -> None:
        self.owner.upsert(self.kind, obj, old)

    def on_delete(self, obj: Obj) -> None:
        self.owner.delete(self.kind, obj)


def _key(obj: Obj) -> tuple[str, str]:
    md = obj.get("metadata") or {}
    return str(md.get("namespace") or "default"), str(md.get("name"))


class KubeGroups:
    """The in-cluster scheduler's pod groups: discovery, watches, status writes."""

    def __init__(
        self,
        host: AdapterHost,
        cycle: GroupCycle,
        scheduling: PodScheduling,
        status: PodGroupStatus,
        recorder: EventRecorder,
        metrics: Metrics | None = None,
    ) -> None:
        self.host = host
        self.cycle = cycle  # the assembled group algorithm; its outcomes are written here
        self.scheduling = scheduling  # what `GroupCycle.reconcile` moves members through
        self.status = status
        self.recorder = recorder
        self.metrics = metrics  # the gang reservation series, synced after each outcome
        cycle.observer = self._outcome
        self.reflectors = status.reflectors  # filled here, read by the status writer
        self.discovered = asyncio.Event()

    def _outcome(self, outcome: GroupOutcome) -> None:
        self.status.outcome(outcome)
        self.sync_metrics()

    def sync_metrics(self) -> None:
        """The gang reservation series in step with the group cycle's reservations."""
        if self.metrics is not None:
            clock = self.cycle.clock or self.scheduling.now  # the group cycle's clock
            self.metrics.sync_reservations(self.cycle.reservations, clock())

    def apply_config(self, config: SchedulerConfiguration) -> None:
        """A new configuration's `topologyLevels` and `gangReservationSeconds` (0: no new
        reservation; one already held keeps its expiry)."""
        self.cycle.levels = topology_levels(config)
        self.cycle.reservations.timeout = gang_reservation_seconds(config)

    # -- discovery and watches ------------------------------------------------------------

    async def run(self) -> None:
        """Discover the served PodGroup kinds, then list and watch each (until cancelled)."""
        tasks = []
        try:
            for kind in KINDS:
                if await self._served(kind):
                    self.cycle.served.add(kind.source)
                    reflector = self.host.reflector(
                        f"{kind.api}/podgroups",
                        _Handler(self, kind),
                        name=f"podgroups.{kind.group}",
                        count_relists=False,
                    )
                    self.reflectors[kind.source] = reflector
                    tasks.append(asyncio.create_task(reflector.run(), name=reflector.name))
                    log.info("pod groups watched", api=f"{kind.group}/{kind.version}")
        finally:
            self.discovered.set()
        await run_tasks(tasks)

    async def _served(self, kind: GroupKind) -> bool:
        if not self.host.apis.serves(f"{kind.group}/{kind.version}"):
            return False  # discovery's group list has it not: no need to ask
        delay = 0.2
        while True:
            try:
                body = await self.host.client.get(kind.api)
            except ApiError as exc:
                if exc.status in (403, 404):
                    return False
                log.warning("discovery failed", api=kind.api, error=str(exc))
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            return any(r.get("name") == "podgroups" for r in body.get("resources") or [])

    @property
    def is_synced(self) -> bool:
        return self.discovered.is_set() and all(r.synced.is_set() for r in self.reflectors.values())

    async def synced(self) -> None:
        await self.discovered.wait()
        for reflector in self.reflectors.values():
            await reflector.synced.wait()

    def upsert(self, kind: GroupKind, obj: Obj, old: Obj | None) -> None:
        try:
            spec = kind.parse(obj)
        except GroupError as exc:
            self._unreadable(kind, obj, exc)
            return
        before = self.cycle.specs.get(spec.id)
        was_unreadable = spec.id in self.cycle.unreadable
        self.cycle.set_spec(spec)
        if before != spec:  # a new or changed group: its members may fit now
            changed = before is not None or was_unreadable
            done = self.cycle.reconcile(self.scheduling, spec.source, spec.key, report=changed)
            if was_unreadable and kind.source == SOURCE_KUBERNETES:
                note = "the PodGroup can be read again"
                body = self.status.condition(spec.id, obj, False, "Unschedulable", note)
                if body is not None:
                    self.status.write(kind.source, spec.namespace, spec.name, spec.id, body)
            if changed:
                log.info(
                    "pod group changed",
                    group=spec.key,
                    api=kind.api.removeprefix("/apis/"),
                    min_member=spec.min_member,
                    bound=len(done.bound),
                    pending=len(done.pending),
                    action=done.action,
                )
            self.host.wake()

    def delete(self, kind: GroupKind, obj: Obj) -> None:
        """A PodGroup is gone: its members are reconciled (see `GroupCycle.reconcile`)."""
        namespace, name = _key(obj)
        key = f"{namespace}/{name}"
        self.cycle.remove_spec(kind.source, key)
        self.status.forget((kind.source, key))
        done = self.cycle.reconcile(self.scheduling, kind.source, key)
        log.info(
            "pod group deleted",
            group=key,
            api=kind.api.removeprefix("/apis/"),
            bound=list(done.bound),
            pending=list(done.pending),
            action=done.action,
        )
        self.host.wake()

    def _unreadable(self, kind: GroupKind, obj: Obj, exc: GroupError) -> None:
        """A PodGroup that cannot be read: its old spec is dropped (its members wait with the
        problem, never placed on a stale copy); reported once per new problem."""
        namespace, name = _key(obj)
        key = f"{namespace}/{name}"
        if not self.cycle.set_unreadable(kind.source, key, exc.detail):
            return
        done = self.cycle.reconcile(self.scheduling, kind.source, key)
        api = kind.api.removeprefix("/apis/")
        log.error(
            "pod group cannot be read",
            group=key,
            api=api,
            field=exc.field,
            error=exc.detail,
            bound=len(done.bound),
            pending=len(done.pending),
        )
        uid = str((obj.get("metadata") or {}).get("uid") or "")
        note = f"{exc.detail}; its pods are not scheduled until it can be read"
        ref = ObjectRef("PodGroup", namespace, name, uid, api_version=api)
        self.recorder.record(ref, "Warning", REASON_INVALID, "Scheduling", note)
        if kind.source == SOURCE_KUBERNETES:
            gid = (kind.source, key)
            body = self.status.condition(gid, obj, False, REASON_INVALID, note)
            if body is not None:
                self.status.write(kind.source, namespace, name, gid, body)
        self.host.wake()
