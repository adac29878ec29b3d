"""Storage in the cluster: the watches that feed `snapshot.storage`, and VolumeBinding's writer.

`StorageWatches` lists and watches PersistentVolumeClaims, PersistentVolumes, StorageClasses,
CSINodes, CSIDrivers, CSIStorageCapacities and VolumeAttachments (what kube-scheduler's volume
plugins read), parses each object once into the core's typed values, and moves unschedulable
pods back to the queue on every change. An API the server lacks is synced empty and looked
for again every 30 s (see `informer.py`). The `resource.k8s.io/v1` kinds (ResourceClaims and
the rest of DRA) are watched by `dra.DraWatches`.

It is also the `VolumeWriter` of the core: VolumeBinding's PreBind updates a claim (its
`volume.kubernetes.io/selected-node` annotation) or a PV (its claimRef) with one PUT each, and
waits on `changed` for the PV controller's answer to arrive through the watches.

It gets the narrow `AdapterHost` (client, served APIs, informers, a way to send unschedulable
pods back to the queue), the storage state it feeds and the pods watch's objects (PreBind asks
whether a pod still exists); never the scheduler.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

import structlog

from scheduler.core.model import ModelError
from scheduler.core.queue import ClusterEvent
from scheduler.core.storage import (
    CSIDriver,
    CSINode,
    CSIStorageCapacity,
    PersistentVolume,
    PersistentVolumeClaim,
    StorageClass,
    StorageState,
    VolumeAttachment,
)
from scheduler.kube.host import AdapterHost
from scheduler.kube.informer import object_key, run_tasks

Obj = dict[str, Any]
log = structlog.get_logger("topo_scheduler")

# (informer name, list path, kind): what kube-scheduler's volume plugins watch
KINDS: tuple[tuple[str, str, Any], ...] = (
    ("persistentvolumeclaims", "/api/v1/persistentvolumeclaims", PersistentVolumeClaim),
    ("persistentvolumes", "/api/v1/persistentvolumes", PersistentVolume),
    ("storageclasses", "/apis/storage.k8s.io/v1/storageclasses", StorageClass),
    ("csinodes", "/apis/storage.k8s.io/v1/csinodes", CSINode),
    ("csidrivers", "/apis/storage.k8s.io/v1/csidrivers", CSIDriver),
    ("csistoragecapacities", "/apis/storage.k8s.io/v1/csistoragecapacities", CSIStorageCapacity),
    ("volumeattachments", "/apis/storage.k8s.io/v1/volumeattachments", VolumeAttachment),
)

# what is off on a server without the API (an older Kubernetes)
WHEN_UNSERVED = {
    "csistoragecapacities": (
        "VolumeBinding does not check CSI storage capacity (storage.k8s.io/v1: Kubernetes 1.24+)"
    ),
    "csidrivers": "VolumeBinding checks no CSI storage capacity (storage.k8s.io/v1: 1.18+)",
}


class _Handler:
    """Watch events of one storage kind into the storage state; never raises."""

    def __init__(self, owner: StorageWatches, kind: Any) -> None:
        self.owner = owner
        self.kind = kind

    def on_upsert(self, obj: Obj, old: Obj | None) -> None:
        try:
            value = self.kind.from_object(obj)
        except ModelError as exc:
            log.error("storage object not understood", error=str(exc))
            return
        self.owner.storage.add(value)
        self.owner.notify()

    def on_delete(self, obj: Obj) -> None:
        self.owner.storage.remove(self.kind, object_key(obj))
        self.owner.notify()


class StorageWatches:
    """The storage informers of one scheduler, and the VolumeWriter its PreBind uses."""

    def __init__(self, host: AdapterHost, storage: StorageState, pods: Mapping[str, Obj]) -> None:
        self.host = host
        self.client = host.client
        self.storage = storage
        self.pods = pods  # the pods watch's last copy of each pod
        self._changed = asyncio.Event()
        self.reflectors = [
            host.reflector(
                path,
                _Handler(self, kind),
                name=name,
                when_unserved=WHEN_UNSERVED.get(name, ""),
                check_served=True,
            )
            for name, path, kind in KINDS
        ]

    @property
    def synced(self) -> bool:
        return all(r.synced.is_set() for r in self.reflectors)

    async def wait_synced(self) -> None:
        for r in self.reflectors:
            await r.synced.wait()

    async def run(self) -> None:
        """Run every informer until cancelled."""
        tasks = [asyncio.create_task(r.run(), name=f"{r.name}-informer") for r in self.reflectors]
        await run_tasks(tasks)

    def notify(self) -> None:
        """A storage object changed: wake PreBind waiters, retry unschedulable pods."""
        self._changed.set()
        self._changed = asyncio.Event()
        self.host.retry_unschedulable(ClusterEvent.STORAGE_CHANGE)

    # -- VolumeWriter ----------------------------------------------------------------------

    async def write_claim(self, claim: PersistentVolumeClaim) -> PersistentVolumeClaim:
        path = f"/api/v1/namespaces/{claim.namespace}/persistentvolumeclaims/{claim.name}"
        return PersistentVolumeClaim.from_object(await self.client.put(path, claim.to_object()))

    async def write_volume(self, volume: PersistentVolume) -> PersistentVolume:
        path = f"/api/v1/persistentvolumes/{volume.name}"
        return PersistentVolume.from_object(await self.client.put(path, volume.to_object()))

    def pod_exists(self, namespace: str, name: str, uid: str) -> bool:
        obj = self.pods.get(f"{namespace}/{name}")
        return obj is not None and (obj.get("metadata") or {}).get("uid") == uid

    async def changed(self, timeout: float) -> None:
        event = self._changed
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await event.wait()
