"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does.

A candidate tries every `retry_period`; it takes the Lease when it is free or its holder has
not renewed within `lease_duration` (judged by when *we* last saw the record change, so clock
skew between replicas does not matter). The leader renews every `retry_period` and gives up
when no renewal succeeded within `renew_deadline`. Writes carry the Lease's resourceVersion,
so two candidates never both win: the loser gets 409 Conflict.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from scheduler.kube.client import ApiError, KubeClient
from scheduler.kube.events import micro_time
from scheduler.kube.ratelimit import Priority

Obj = dict[str, Any]
log = structlog.get_logger("topo_scheduler.leader")


@dataclass
class LeaseTiming:
    """kube-scheduler's defaults: 15 s lease, 10 s renew deadline, 2 s retry."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


class LeaderElector:
    """Acquire, hold and release one Lease for `identity`."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        name: str,
        identity: str,
        timing: LeaseTiming | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.timing = timing or LeaseTiming()
        self.clock = clock
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        self._observed: tuple[str, str, str] | None = None  # holder, renewTime, transitions
        self._observed_at = 0.0
        self._lease: Obj | None = None
        self.is_leader = False
        self.renewed_at: float | None = None  # clock() after our last successful write

    def _spec(self, acquire: bool, transitions: int) -> Obj:
        now = micro_time()
        spec: Obj = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.timing.lease_duration)),
            "renewTime": now,
            "leaseTransitions": transitions,
        }
        if acquire:
            spec["acquireTime"] = now
        elif self._lease is not None:
            spec["acquireTime"] = (self._lease.get("spec") or {}).get("acquireTime") or now
        return spec

    async def try_acquire_or_renew(self) -> bool:
        """One attempt; True when we hold the Lease afterwards."""
        try:
            lease = await self.client.get(self.path, priority=Priority.LEASE)
        except ApiError as exc:
            if exc.status != 404:
                raise
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(True, 0),
            }
            self._lease = await self.client.post(
                f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases",
                body,
                Priority.LEASE,
            )
            self._observe(self._lease)
            self.renewed_at = self.clock()
            return True
        spec = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        self._observe(lease)
        if holder and holder != self.identity:
            duration = float(spec.get("leaseDurationSeconds") or self.timing.lease_duration)
            if self.clock() < self._observed_at + duration:
                return False  # held by another candidate who renewed recently
        transitions = int(spec.get("leaseTransitions") or 0)
        ours = holder == self.identity
        new = dict(lease)
        self._lease = lease
        new["spec"] = self._spec(not ours, transitions if ours else transitions + 1)
        self._lease = await self.client.put(
            self.path, new, Priority.LEASE
        )  # 409 if someone wrote meanwhile
        self._observe(self._lease)
        self.renewed_at = self.clock()
        return True

    def _observe(self, lease: Obj) -> None:
        spec = lease.get("spec") or {}
        record = (
            str(spec.get("holderIdentity") or ""),
            str(spec.get("renewTime") or ""),
            str(spec.get("leaseTransitions") or 0),
        )
        if record != self._observed:
            self._observed = record
            self._observed_at = self.clock()

    async def acquire(self) -> None:
        """Block until we hold the Lease."""
        while True:
            try:
                if await self.try_acquire_or_renew():
                    self.is_leader = True
                    log.info(
                        "leadership acquired",
                        lease=f"{self.namespace}/{self.name}",
                        identity=self.identity,
                    )
                    return
            except ApiError as exc:
                if exc.status != 409:
                    log.warning("lease not acquired", error=str(exc))
            await asyncio.sleep(self.timing.retry_period)

    async def hold(self) -> None:
        """Renew until a renewal deadline is missed; returns when leadership is lost.

        The deadline runs from the last successful write (the acquisition or a renewal), not
        from when `hold` starts: call it right after `acquire`, concurrently with whatever
        comes next (the informers' first sync), so that the Lease never lapses meanwhile.
        """
        if self.renewed_at is None:  # not acquired through this object: count from now
            self.renewed_at = self.clock()
        while True:
            await asyncio.sleep(self.timing.retry_period)
            last = self.renewed_at
            left = last + self.timing.renew_deadline - self.clock()
            ok = False
            if left > 0:
                try:
                    async with asyncio.timeout(left):
                        ok = await self.try_acquire_or_renew()
                except (ApiError, TimeoutError) as exc:
                    log.warning("lease not renewed", error=str(exc))
            if ok:
                continue
            taken = self._observed is not None and self._observed[0] not in ("", self.identity)
            if taken or self.clock() - self.renewed_at >= self.timing.renew_deadline:
                self.is_leader = False
                log.error(
                    "leadership lost", lease=f"{self.namespace}/{self.name}", identity=self.identity
                )
                return

    async def release(self) -> None:
        """Give the Lease up so a standby takes over at once (client-go ReleaseOnCancel)."""
        if not self.is_leader or self._lease is None:
            return
        self.is_leader = False
        new = dict(self._lease)
        spec = dict(new.get("spec") or {})
        spec.update({"holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": micro_time()})
        new["spec"] = spec
        try:
            await self.client.put(self.path, new, Priority.LEASE)
            log.info("lease released", lease=f"{self.namespace}/{self.name}")
        except ApiError as exc:
            log.warning("lease not released", error=str(exc))
