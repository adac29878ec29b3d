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
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from plugins import topology_levels
from scheduler.core.config import SchedulerConfiguration
from scheduler.core.group import (
    GroupCycle,
    GroupError,
    GroupOutcome,
    GroupSpec,
    kubernetes_group,
    scheduler_plugins_group,
)
from scheduler.core.model import SOURCE_KUBERNETES, SOURCE_SCHEDULER_PLUGINS
from scheduler.core.queue import ClusterEvent
from scheduler.kube.client import MERGE_PATCH, ApiError
from scheduler.kube.events import rfc3339
from scheduler.kube.informer import Reflector

if TYPE_CHECKING:
    from scheduler.kube.scheduler import KubeScheduler

Obj = dict[str, Any]
log = structlog.get_logger("topo_scheduler")

CONDITION_SCHEDULED = "PodGroupInitiallyScheduled"


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
        md = obj.get("metadata") or {}
        self.owner.cycle.remove_spec(self.kind.source, f"{md.get('namespace')}/{md.get('name')}")


class KubeGroups:
    """The in-cluster scheduler's pod groups: discovery, watches, status writes."""

    def __init__(self, owner: KubeScheduler) -> None:
        self.owner = owner
        self.cycle = GroupCycle(
            topology_levels(owner.config), owner.options.clock, observer=self.outcome
        )
        owner.cycle.groups = self.cycle
        self.reflectors: dict[str, Reflector] = {}
        self.written: dict[tuple[str, str], tuple[Any, ...]] = {}
        self.discovered = asyncio.Event()

    def apply_config(self, config: SchedulerConfiguration) -> None:
        self.cycle.levels = topology_levels(config)

    # -- discovery and watches ------------------------------------------------------------

    async def run(self) -> None:
        """Discover the served PodGroup kinds, then list and watch each (until cancelled)."""
        tasks = []
        try:
            for kind in KINDS:
                if await self._served(kind):
                    self.cycle.served.add(kind.source)
                    reflector = Reflector(
                        self.owner.client,
                        f"{kind.api}/podgroups",
                        _Handler(self, kind),
                        name=f"podgroups.{kind.group}",
                        watch_timeout=self.owner.options.watch_timeout,
                        backoff=self.owner.options.reflector_backoff,
                    )
                    self.reflectors[kind.source] = reflector
                    tasks.append(asyncio.create_task(reflector.run(), name=reflector.name))
                    log.info("pod groups watched", api=f"{kind.group}/{kind.version}")
        finally:
            self.discovered.set()
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _served(self, kind: GroupKind) -> bool:
        if not self.owner.apis.serves(f"{kind.group}/{kind.version}"):
            return False  # discovery's group list has it not: no need to ask
        delay = 0.2
        while True:
            try:
                body = await self.owner.client.get(kind.api)
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
            log.error("pod group not understood", error=str(exc))
            return
        before = self.cycle.specs.get(spec.id)
        self.cycle.set_spec(spec)
        if before != spec:  # a new or changed group: its members may fit now
            self.owner.queue.move_all(ClusterEvent.CONFIG_CHANGE)
            self.owner._wakeup.set()

    # -- status ---------------------------------------------------------------------------

    def outcome(self, outcome: GroupOutcome) -> None:
        """After a group cycle: write the PodGroup's status when it changed."""
        spec = outcome.spec
        if outcome.timed_out:
            log.warning(
                "pod group past its scheduleTimeoutSeconds",
                group=spec.key,
                timeout=spec.timeout,
                message=outcome.message,
            )
        reflector = self.reflectors.get(spec.source)
        if reflector is None:
            return
        obj = reflector.known.get(spec.key)
        if obj is None:
            return
        if spec.source == SOURCE_SCHEDULER_PLUGINS:
            body = self._scheduler_plugins_status(outcome, obj)
        else:
            body = self._kubernetes_status(outcome, obj)
        if body is None:
            return
        api = reflector.path.removesuffix("/podgroups")  # the kind's /apis/GROUP/VERSION
        path = f"{api}/namespaces/{spec.namespace}/podgroups/{spec.name}/status"
        self.owner._spawn(self._patch(path, body, spec))

    def _changed(self, spec: GroupSpec, state: tuple[Any, ...]) -> bool:
        if self.written.get(spec.id) == state:
            return False
        self.written[spec.id] = state
        return True

    def _scheduler_plugins_status(self, outcome: GroupOutcome, obj: Obj) -> Obj | None:
        status = obj.get("status") or {}
        placed = sum(1 for node, _ in outcome.members.values() if node)
        if outcome.scheduled:
            phase = "Scheduled"
        elif outcome.waiting:
            phase = "Pending"
        else:
            phase = "Scheduling"
        if not self._changed(outcome.spec, (phase, placed)):
            return None
        body: Obj = {"phase": phase, "scheduled": placed}
        if phase == "Scheduling" and not status.get("scheduleStartTime"):
            body["scheduleStartTime"] = rfc3339()
        return {"status": body}

    def _kubernetes_status(self, outcome: GroupOutcome, obj: Obj) -> Obj | None:
        if outcome.waiting:
            return None
        conditions = [
            c
            for c in (obj.get("status") or {}).get("conditions") or []
            if isinstance(c, dict) and c.get("type") != CONDITION_SCHEDULED
        ]
        previous = next(
            (
                c
                for c in (obj.get("status") or {}).get("conditions") or []
                if isinstance(c, dict) and c.get("type") == CONDITION_SCHEDULED
            ),
            None,
        )
        if previous is not None and previous.get("status") == "True":
            return None  # initially scheduled stays so
        status = "True" if outcome.scheduled else "False"
        reason = "Scheduled" if outcome.scheduled else "Unschedulable"
        message = outcome.message or f"{len(outcome.members)} pods placed"
        if not self._changed(outcome.spec, (status, message)):
            return None
        since = rfc3339()
        if previous is not None and previous.get("status") == status:
            since = previous.get("lastTransitionTime") or since
        condition = {
            "type": CONDITION_SCHEDULED,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": since,
        }
        return {"status": {"conditions": [*conditions, condition]}}

    async def _patch(self, path: str, body: Obj, spec: GroupSpec) -> None:
        try:
            await self.owner.client.patch(path, body, MERGE_PATCH)
        except ApiError as exc:
            self.written.pop(spec.id, None)
            if exc.status != 404:
                log.warning("pod group status not updated", group=spec.key, error=str(exc))
