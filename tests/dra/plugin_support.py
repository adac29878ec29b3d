"""A whole scheduler over an in-memory cluster with DRA objects: the cache fed as the watches
feed it, the default profile, and the in-memory binder (pods bound in the cache, claim
status written to the in-memory API as `ClaimStatusWriter`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.assembly import Assembly, assemble
from scheduler.core.cache import Cache
from scheduler.core.cycle import Decision, drive
from scheduler.core.dra.state import (
    deallocate_claim_in_memory,
    unreserve_claim_in_memory,
    write_claim_in_memory,
)
from scheduler.core.dra.types import AllocationResult, ResourceClaim
from scheduler.core.framework import BindOutcome, BindResult
from scheduler.core.model import NodeInfo, PodInfo
from scheduler.core.storage import STORAGE_KINDS

Obj = dict[str, Any]


@dataclass
class MemoryBinder:
    """Binds into the cache's view of the API and writes claim status in memory."""

    cache: Cache
    bound: dict[str, str] = field(default_factory=dict)  # pod key -> node
    claim_writes: list[str] = field(default_factory=list)
    fail_bind: bool = False

    async def bind(self, pod: PodInfo, node: str, gpus: tuple[int, ...]) -> BindResult:
        if self.fail_bind:
            return BindResult(BindOutcome.ERROR, "binding failed")
        self.bound[pod.key] = node
        return BindResult(BindOutcome.BOUND)

    async def write_claim_status(
        self, claim: ResourceClaim, allocation: AllocationResult | None, pod: PodInfo
    ) -> ResourceClaim | None:
        self.claim_writes.append(claim.key)
        dra = self.cache.snapshot.storage.dra
        return write_claim_in_memory(dra, claim, allocation, pod.name, pod.uid)

    async def deallocate_claim(self, claim: ResourceClaim) -> ResourceClaim | None:
        self.claim_writes.append(f"deallocate {claim.key}")
        return deallocate_claim_in_memory(self.cache.snapshot.storage.dra, claim)

    async def unreserve_claim(self, claim: ResourceClaim, pod: PodInfo) -> ResourceClaim | None:
        self.claim_writes.append(f"unreserve {claim.key}")
        return unreserve_claim_in_memory(self.cache.snapshot.storage.dra, claim, pod.uid)


def add_objects(cache: Cache, objects: Iterable[Obj]) -> None:
    for obj in objects:
        kind = obj["kind"]
        if kind == "Node":
            cache.add_node(NodeInfo.from_object(obj))
        elif kind == "Pod":
            cache.add_pod(PodInfo.from_object(obj))
        else:
            cache.snapshot.storage.add(STORAGE_KINDS[kind].from_object(obj))


@dataclass
class Cluster:
    cache: Cache
    binder: MemoryBinder
    assembly: Assembly

    def schedule(self, pod: Obj) -> Decision:
        info = PodInfo.from_object(pod)
        cycle, queue = self.assembly.cycle, self.assembly.queue
        cycle.enqueue(info)
        queued = queue.pop()
        assert queued is not None
        (decision,) = cycle.schedule(queued)
        if decision.assumed is not None:
            drive(cycle.bind(decision.assumed))
        return decision

    def claim(self, name: str, namespace: str = "default") -> ResourceClaim:
        found = self.cache.snapshot.storage.dra.claim(namespace, name)
        assert found is not None
        return found


def cluster(objects: Sequence[Obj]) -> Cluster:
    cache = Cache()
    add_objects(cache, objects)
    binder = MemoryBinder(cache)
    assembly = assemble(None, binder, clock=lambda: 0.0, cache=cache, groups=False)
    return Cluster(cache, binder, assembly)
