"""ElasticQuotas in the cluster: discovery, the watch, and `status.used`.

scheduler-plugins' `ElasticQuota` (`scheduling.x-k8s.io/v1alpha1`, a CRD) is looked for
through discovery, as the PodGroup CRD is (never assumed): where the server lists
`elasticquotas` the objects are listed and watched into the cache
(`Cache.add_quota` / `remove_quota`), which CapacityScheduling reads; where it does not, one
log line says that quotas are not enforced (CapacityScheduling does nothing without quotas).
A quota added, changed or deleted moves unschedulable pods back to the queue.

An ElasticQuota that cannot be read is logged once per new problem with the object and the
field (`ElasticQuota ml/team: spec.max.cpu: ...`); the cache keeps its last good version in
force (`Cache.set_unreadable_quota`).

`status.used` (what the namespace's pods on nodes request, bound or assumed by this
scheduler) is written by the leader with a merge patch of the status subresource: at most
once per quota every `interval` seconds, and only when it differs from what the object
says. A resource no longer used is removed from the list. A failed write is logged and tried
again at the next interval.

`QuotaWatches` gets the narrow `AdapterHost`, the cache (its quota store) and a question: is
this replica the leader.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import structlog

from scheduler.core.cache import Cache
from scheduler.core.model import ModelError
from scheduler.core.quantity import QuantityError, format_milli, resource_value
from scheduler.core.queue import ClusterEvent
from scheduler.core.quota import ElasticQuota
from scheduler.kube.client import ApiError
from scheduler.kube.host import AdapterHost
from scheduler.kube.informer import Reflector, run_tasks
from scheduler.kube.ratelimit import Priority

__all__ = ["API", "GROUP_VERSION", "OFF", "QuotaWatches", "format_used", "parse_used"]

Obj = dict[str, Any]
log = structlog.get_logger("topo_scheduler")

GROUP_VERSION = "scheduling.x-k8s.io/v1alpha1"
API = f"/apis/{GROUP_VERSION}"
RESOURCE = "elasticquotas"
OFF = (
    f"ElasticQuotas not enforced: the API server does not serve {RESOURCE}.{GROUP_VERSION} "
    "(scheduler-plugins' CRD, which the chart installs with elasticQuotas.installCRD=true)"
)


def format_used(used: dict[str, int]) -> dict[str, str]:
    """Amounts in kube's units (milli-CPU, bytes, counts) as API quantities."""
    return {
        name: format_milli(amount) if name == "cpu" else str(amount)
        for name, amount in sorted(used.items())
    }


def parse_used(obj: Obj) -> dict[str, int] | None:
    """An ElasticQuota's `status.used` in kube's units (None: not readable as quantities)."""
    status = obj.get("status")
    used = status.get("used") if isinstance(status, dict) else None
    if used is None:
        return {}
    if not isinstance(used, dict):
        return None
    try:
        amounts = {str(k): resource_value(str(k), v) for k, v in used.items()}
    except (QuantityError, TypeError, ValueError):
        return None
    return {k: v for k, v in amounts.items() if v}


def _key(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "")


class _Handler:
    def __init__(self, owner: QuotaWatches) -> None:
        self.owner = owner

    def on_upsert(self, obj: Obj, old: Obj | None) -> None:
        self.owner.upsert(obj)

    def on_delete(self, obj: Obj) -> None:
        self.owner.delete(obj)


class QuotaWatches:
    """The ElasticQuota informer of one scheduler and the writer of `status.used`."""

    def __init__(
        self,
        host: AdapterHost,
        cache: Cache,
        leading: Callable[[], bool],
        *,
        interval: float = 1.0,
    ) -> None:
        self.host = host
        self.cache = cache
        self.leading = leading
        self.interval = interval
        self.reflector: Reflector | None = None
        self.served: bool | None = None  # None until discovery has answered
        self.discovered = asyncio.Event()
        self.observed: dict[str, dict[str, int] | None] = {}  # ns/name -> status.used seen
        self.writes = 0  # status writes sent
        self._failing: set[str] = set()

    # -- discovery and the watch ----------------------------------------------------------

    async def run(self) -> None:
        """Discover the CRD, then watch it and keep `status.used` (until cancelled)."""
        tasks: list[asyncio.Task[None]] = []
        try:
            self.served = await self._served()
            if not self.served:
                log.info(OFF)
            else:
                self.reflector = self.host.reflector(
                    f"{API}/{RESOURCE}", _Handler(self), name=f"{RESOURCE}.scheduling.x-k8s.io"
                )
                tasks = [
                    asyncio.create_task(self.reflector.run(), name="elasticquotas-informer"),
                    asyncio.create_task(self._write_loop(), name="elasticquotas-status"),
                ]
                log.info("ElasticQuotas watched", api=GROUP_VERSION)
        finally:
            self.discovered.set()
        await run_tasks(tasks)

    async def _served(self) -> bool:
        if not self.host.apis.serves(GROUP_VERSION):
            return False  # discovery's group list has it not: no need to ask
        delay = 0.2
        while True:
            try:
                body = await self.host.client.get(API)
            except ApiError as exc:
                if exc.status in (403, 404):
                    return False
                log.warning("discovery failed", api=API, error=str(exc))
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            return any(
                isinstance(r, dict) and r.get("name") == RESOURCE
                for r in body.get("resources") or []
            )

    @property
    def synced(self) -> bool:
        return self.discovered.is_set() and (
            self.reflector is None or self.reflector.synced.is_set()
        )

    async def wait_synced(self) -> None:
        await self.discovered.wait()
        if self.reflector is not None:
            await self.reflector.synced.wait()

    # -- watch events ---------------------------------------------------------------------

    def upsert(self, obj: Obj) -> None:
        namespace, name = _key(obj)
        key = f"{namespace}/{name}"
        self.observed[key] = parse_used(obj)
        try:
            quota = ElasticQuota.from_object(obj)
        except ModelError as exc:
            if self.cache.set_unreadable_quota(namespace, name, str(exc)):
                log.error(
                    "ElasticQuota not understood, its last good version kept",
                    quota=key,
                    error=str(exc),
                )
            return
        before = self.cache.snapshot.quotas.objects.get(key)
        self.cache.add_quota(quota)
        if before is None or (before.min, before.max) != (quota.min, quota.max):
            self.host.retry_unschedulable(ClusterEvent.QUOTA_CHANGE)

    def delete(self, obj: Obj) -> None:
        namespace, name = _key(obj)
        self.observed.pop(f"{namespace}/{name}", None)
        self.cache.remove_quota(namespace, name)
        self.host.retry_unschedulable(ClusterEvent.QUOTA_CHANGE)

    # -- status.used ----------------------------------------------------------------------

    def stale(self) -> list[tuple[ElasticQuota, dict[str, int]]]:
        """The quotas in force whose `status.used` differs from their usage."""
        quotas = self.cache.snapshot.quotas
        out = []
        for namespace, quota in quotas.quotas.items():
            info = quotas.info(namespace)
            used = dict(info.used) if info is not None else {}
            if self.observed.get(quota.key, {}) != used:
                out.append((quota, used))
        return out

    async def _write_loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            if not self.leading():
                continue
            for quota, used in self.stale():
                await self._write(quota, used)

    async def _write(self, quota: ElasticQuota, used: dict[str, int]) -> None:
        seen = self.observed.get(quota.key) or {}
        body: dict[str, Any] = dict(format_used(used))
        for gone in set(seen) - set(used):
            body[gone] = None  # merge patch: removed from the list
        path = f"{API}/namespaces/{quota.namespace}/{RESOURCE}/{quota.name}/status"
        self.writes += 1
        try:
            written = await self.host.client.patch(
                path, {"status": {"used": body}}, priority=Priority.STATUS
            )
        except ApiError as exc:
            if exc.status == 404:
                return  # gone: the watch will say so
            if quota.key not in self._failing:
                log.warning("ElasticQuota status not written", quota=quota.key, error=str(exc))
                self._failing.add(quota.key)
            return
        self._failing.discard(quota.key)
        if isinstance(written, dict):
            self.observed[quota.key] = parse_used(written)
