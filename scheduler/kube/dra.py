"""Dynamic Resource Allocation in the cluster: the `resource.k8s.io/v1` watches.

`DraWatches` asks the API server whether it serves `resource.k8s.io/v1` (Kubernetes 1.34+,
discovery, never assumed) and, where it does, lists and watches DeviceClasses,
ResourceClaims and ResourceSlices (what kube-scheduler's DynamicResources plugin reads, and
what its role may read) into `snapshot.storage.dra`, each object parsed once into the
core's typed value (`STORAGE_KINDS[kind].from_object`). On a server without the API the
watches do not start, DynamicResources has no objects (a pod with a ResourceClaim waits with
`resourceclaim ... not found` or `ResourceClaim not created yet`), and one log line says so.

A change of a ResourceClaim, ResourceSlice or DeviceClass moves unschedulable pods back to
the queue (a claim deallocated, a slice published, a class created can make one fit).
ResourceClaimTemplates are not watched: a pod's claim from a template is found through the
pod's `status.resourceClaimStatuses` once kube-controller-manager has made it, and its creation
moves the pod like any claim.

An object that cannot be read is logged once per new problem, with the object and the field
(`ResourceSlice gpu-node-gpus: spec.pool.generation: ...`); the last good version stays in the
cache, until the object is deleted or a readable version arrives.

The status writes of DynamicResources' PreBind go through the binder (`KubeBinder.
write_claim_status`, `claims.py`), not through here.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from scheduler.core.model import ModelError
from scheduler.core.queue import ClusterEvent
from scheduler.core.storage import STORAGE_KINDS, StorageState
from scheduler.kube.client import ApiError
from scheduler.kube.host import AdapterHost
from scheduler.kube.informer import Reflector, object_key, run_tasks

__all__ = ["API", "GROUP_VERSION", "KINDS", "OFF", "DraWatches"]

Obj = dict[str, Any]
log = structlog.get_logger("topo_scheduler")

GROUP_VERSION = "resource.k8s.io/v1"
API = f"/apis/{GROUP_VERSION}"
# (resource, kind, moves unschedulable pods back when it changes)
KINDS: tuple[tuple[str, str, bool], ...] = (
    ("deviceclasses", "DeviceClass", True),
    ("resourceclaims", "ResourceClaim", True),
    ("resourceslices", "ResourceSlice", True),
)
OFF = (
    f"DynamicResources is off: the API server does not serve {GROUP_VERSION} "
    "(Kubernetes 1.34+); pods with ResourceClaims are not scheduled"
)


class _Handler:
    """Watch events of one DRA kind into the storage state; never raises."""

    def __init__(self, owner: DraWatches, kind: str, requeue: bool) -> None:
        self.owner = owner
        self.kind = kind
        self.type = STORAGE_KINDS[kind]
        self.requeue = requeue

    def on_upsert(self, obj: Obj, old: Obj | None) -> None:
        key = object_key(obj)
        try:
            value = self.type.from_object(obj)
        except ModelError as exc:
            self.owner.unreadable(self.kind, key, str(exc))
            return
        self.owner.problems.pop((self.kind, key), None)
        self.owner.storage.add(value)
        self.owner.changed(self.requeue)

    def on_delete(self, obj: Obj) -> None:
        key = object_key(obj)
        self.owner.problems.pop((self.kind, key), None)
        self.owner.storage.remove(self.type, key)
        self.owner.changed(self.requeue)


class DraWatches:
    """The DRA informers of one scheduler: discovery, then one list+watch per kind."""

    def __init__(self, host: AdapterHost, storage: StorageState) -> None:
        self.host = host
        self.storage = storage
        self.reflectors: list[Reflector] = []
        self.served: bool | None = None  # None until discovery has answered
        self.discovered = asyncio.Event()
        self.problems: dict[tuple[str, str], str] = {}  # (kind, key) -> the logged problem

    # -- discovery and watches ------------------------------------------------------------

    async def run(self) -> None:
        """Discover resource.k8s.io/v1, then list and watch each kind (until cancelled)."""
        tasks: list[asyncio.Task[None]] = []
        try:
            listed = await self._served()
            self.served = "resourceclaims" in listed
            if not self.served:
                log.info(OFF)
            else:
                for resource, kind, requeue in KINDS:
                    if resource not in listed:
                        continue  # a server without it has none of them
                    self.reflectors.append(
                        self.host.reflector(
                            f"{API}/{resource}",
                            _Handler(self, kind, requeue),
                            name=resource,
                        )
                    )
                log.info(
                    "DynamicResources: ResourceClaims allocated by this scheduler",
                    api=GROUP_VERSION,
                    watched=[r.name for r in self.reflectors],
                )
            tasks = [
                asyncio.create_task(r.run(), name=f"{r.name}-informer") for r in self.reflectors
            ]
        finally:
            self.discovered.set()
        await run_tasks(tasks)

    async def _served(self) -> set[str]:
        """The resources the server lists under resource.k8s.io/v1 (empty: not served)."""
        if not self.host.apis.serves(GROUP_VERSION):
            return set()  # discovery's group list has it not: no need to ask
        delay = 0.2
        while True:
            try:
                body = await self.host.client.get(API)
            except ApiError as exc:
                if exc.status in (403, 404):
                    return set()
                log.warning("discovery failed", api=API, error=str(exc))
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            return {str(r.get("name")) for r in body.get("resources") or [] if isinstance(r, dict)}

    @property
    def synced(self) -> bool:
        return self.discovered.is_set() and all(r.synced.is_set() for r in self.reflectors)

    async def wait_synced(self) -> None:
        await self.discovered.wait()
        for reflector in self.reflectors:
            await reflector.synced.wait()

    # -- what the handlers report ---------------------------------------------------------

    def changed(self, requeue: bool) -> None:
        if requeue:
            self.host.retry_unschedulable(ClusterEvent.STORAGE_CHANGE)
        else:
            self.host.wake()

    def unreadable(self, kind: str, key: str, problem: str) -> None:
        """Logged once per new problem; the cache keeps the last good version."""
        if self.problems.get((kind, key)) == problem:
            return
        self.problems[(kind, key)] = problem
        log.error(
            "DRA object not understood, its last good version kept",
            kind=kind,
            object=key,
            error=problem,
        )
