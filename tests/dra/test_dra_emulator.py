"""A pod with a claim for 4 GPUs from NVIDIA's device class over the API-server emulator:
the objects listed from the API into the cache, the cycle allocates the claim, PreBind
writes its status through the status subresource (a conflict re-reads and retries) and the
pod is bound."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from scheduler.assembly import assemble
from scheduler.core.cache import Cache
from scheduler.core.dra.state import FINALIZER, ClaimWriteError
from scheduler.core.dra.types import AllocationResult, ResourceClaim
from scheduler.core.framework import BindOutcome, BindResult, ClaimStatusEditor, ClaimStatusWriter
from scheduler.core.model import NodeInfo, PodInfo
from scheduler.core.storage import STORAGE_KINDS
from scheduler.kube.binder import KubeBinder
from scheduler.kube.claims import deallocate_claim, unreserve_claim, write_claim_status
from scheduler.kube.client import KubeClient
from tests.dra.objects import claim, claim_pod, device_class, gpu_node, gpu_slice, request
from tests.emulator import NODES, PODS, Emulator
from tests.emulator.fixture import emulator
from tests.emulator.store import (
    DEVICE_CLASSES,
    DRA_RESOURCES,
    RESOURCE_CLAIMS_V1,
    RESOURCE_SLICES,
)

__all__ = ["emulator"]

LISTS = (
    ("/api/v1/nodes", NODES),
    ("/apis/resource.k8s.io/v1/deviceclasses", DEVICE_CLASSES),
    ("/apis/resource.k8s.io/v1/resourceslices", RESOURCE_SLICES),
    ("/apis/resource.k8s.io/v1/resourceclaims", RESOURCE_CLAIMS_V1),
)


class ApiBinder:
    """Binds with pods/binding and writes claim status through the Kubernetes-side call."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client

    async def bind(self, pod: PodInfo, node: str, gpus: tuple[int, ...]) -> BindResult:
        await self.client.post(
            f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/binding",
            {"apiVersion": "v1", "kind": "Binding",
             "metadata": {"name": pod.name, "namespace": pod.namespace},
             "target": {"apiVersion": "v1", "kind": "Node", "name": node}},
        )  # fmt: skip
        return BindResult(BindOutcome.BOUND)

    async def write_claim_status(
        self, claim: ResourceClaim, allocation: AllocationResult | None, pod: PodInfo
    ) -> ResourceClaim | None:
        return await write_claim_status(self.client, claim, allocation, pod)


async def _schedule(emulator: Emulator, pod_key: str, before_bind: Any = None) -> str:
    client = KubeClient.for_url(emulator.url)
    try:
        cache = Cache()
        for path, _res in LISTS:
            for item in (await client.get(path))["items"]:
                kind = _res.kind
                if kind == "Node":
                    cache.add_node(NodeInfo.from_object(item))
                else:
                    cache.snapshot.storage.add(STORAGE_KINDS[kind].from_object(item))
        ns, name = pod_key.split("/")
        pod = PodInfo.from_object(await client.get(f"/api/v1/namespaces/{ns}/pods/{name}"))
        assembly = assemble(None, ApiBinder(client), clock=lambda: 0.0, cache=cache, groups=False)
        assembly.cycle.enqueue(pod)
        queued = assembly.queue.pop()
        assert queued is not None
        (decision,) = assembly.cycle.schedule(queued)
        assert decision.assumed is not None, decision.message
        if before_bind is not None:
            before_bind()
        result = await assembly.cycle.bind(decision.assumed)
        return result.outcome.value
    finally:
        await client.close()


def _setup(emulator: Emulator) -> dict[str, Any]:
    emulator.serve(*DRA_RESOURCES)
    emulator.create(NODES, gpu_node("gpu-node"))
    emulator.create(DEVICE_CLASSES, device_class())
    emulator.create(RESOURCE_SLICES, gpu_slice("gpu-node"))
    made = emulator.create(RESOURCE_CLAIMS_V1, claim("train", request(count=4)), "default")
    pod = claim_pod("trainer", [("gpus", "train")])
    return {"claim": made, "pod": emulator.create(PODS, pod, "default")}


def _check(emulator: Emulator, pod: dict[str, Any]) -> dict[str, Any]:
    written = emulator.get(RESOURCE_CLAIMS_V1, "train", "default")
    results = written["status"]["allocation"]["devices"]["results"]
    assert len(results) == 4
    assert {r["driver"] for r in results} == {"gpu.nvidia.com"}
    assert written["status"]["reservedFor"] == [
        {"resource": "pods", "name": "trainer", "uid": pod["metadata"]["uid"]}
    ]
    assert FINALIZER in written["metadata"]["finalizers"]
    assert emulator.pod("default/trainer")["spec"]["nodeName"] == "gpu-node"
    return written


def test_four_gpu_claim_allocated_bound_and_status_written(emulator: Emulator) -> None:
    made = _setup(emulator)
    assert asyncio.run(_schedule(emulator, "default/trainer")) == "bound"
    _check(emulator, made["pod"])


def test_claim_status_write_retries_after_a_conflict(emulator: Emulator) -> None:
    made = _setup(emulator)

    def someone_else_writes() -> None:  # the cache's copy of the claim is now stale
        emulator.patch(RESOURCE_CLAIMS_V1, "train", {"metadata": {"labels": {"x": "y"}}},
                       "default")  # fmt: skip

    assert asyncio.run(_schedule(emulator, "default/trainer", someone_else_writes)) == "bound"
    written = _check(emulator, made["pod"])
    assert written["metadata"]["labels"] == {"x": "y"}


async def _with_client(emulator: Emulator, call: Any) -> Any:
    client = KubeClient.for_url(emulator.url)
    try:
        return await call(client)
    finally:
        await client.close()


def test_the_kubernetes_binder_edits_claims() -> None:
    assert issubclass(KubeBinder, ClaimStatusWriter)
    assert issubclass(KubeBinder, ClaimStatusEditor)


def test_unreserve_removes_only_the_pod_from_the_latest_claim(emulator: Emulator) -> None:
    made = _setup(emulator)
    assert asyncio.run(_schedule(emulator, "default/trainer")) == "bound"
    seen = ResourceClaim.from_object(emulator.get(RESOURCE_CLAIMS_V1, "train", "default"))
    emulator.patch(RESOURCE_CLAIMS_V1, "train", {"metadata": {"labels": {"x": "y"}}}, "default")
    pod = PodInfo.from_object(made["pod"])

    out = asyncio.run(_with_client(emulator, lambda c: unreserve_claim(c, seen, pod)))

    stored = emulator.get(RESOURCE_CLAIMS_V1, "train", "default")
    assert "reservedFor" not in stored["status"] and out.reserved_for == ()
    assert stored["status"]["allocation"] == seen.raw["status"]["allocation"]  # kept, as kube
    assert stored["metadata"]["labels"] == {"x": "y"}  # the write after a conflict kept it


def test_deallocate_writes_the_version_postfilter_saw_or_fails(emulator: Emulator) -> None:
    _setup(emulator)
    assert asyncio.run(_schedule(emulator, "default/trainer")) == "bound"
    seen = ResourceClaim.from_object(emulator.get(RESOURCE_CLAIMS_V1, "train", "default"))
    emulator.patch(RESOURCE_CLAIMS_V1, "train", {"metadata": {"labels": {"x": "y"}}}, "default")

    with pytest.raises(ClaimWriteError, match="deallocate claim default/train"):
        asyncio.run(_with_client(emulator, lambda c: deallocate_claim(c, seen)))
    assert "allocation" in emulator.get(RESOURCE_CLAIMS_V1, "train", "default")["status"]

    fresh = ResourceClaim.from_object(emulator.get(RESOURCE_CLAIMS_V1, "train", "default"))
    out = asyncio.run(_with_client(emulator, lambda c: deallocate_claim(c, fresh)))
    stored = emulator.get(RESOURCE_CLAIMS_V1, "train", "default")
    assert "allocation" not in stored["status"] and "reservedFor" not in stored["status"]
    assert out.allocation is None
