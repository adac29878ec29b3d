"""DynamicResources end to end over the in-memory path: the default profile, the cache fed
with DRA objects as the watches feed it, the in-memory binder writing claim status."""

from __future__ import annotations

from scheduler.core.dra import DeviceID
from scheduler.core.dra.state import FINALIZER
from scheduler.core.topology import GpuSelector
from tests.dra.objects import (
    DRIVER,
    claim,
    claim_pod,
    device_class,
    dgx1,
    gpu_node,
    gpu_slice,
    request,
)
from tests.dra.plugin_support import cluster


def _gpus(results: object) -> list[int]:
    return sorted(int(d.device.removeprefix("gpu-")) for d in results)  # type: ignore[attr-defined]


def test_a_claim_for_four_gpus_is_allocated_bound_and_written() -> None:
    c = cluster([gpu_node("n0"), gpu_slice("n0"), device_class(), claim("train", request(count=4))])
    pod = claim_pod("p", [("gpus", "train")])
    decision = c.schedule(pod)
    assert decision.outcome == "assumed", decision.message
    assert c.binder.bound == {"default/p": "n0"}
    written = c.claim("train")
    assert written.allocation is not None
    assert len(written.allocation.devices) == 4
    assert {d.driver for d in written.allocation.devices} == {DRIVER}
    assert written.reserved_for_pod(pod["metadata"]["uid"])
    assert FINALIZER in written.raw["metadata"]["finalizers"]
    assert not c.cache.snapshot.storage.dra.has_pending(written.uid)


def test_dgx1_with_gpus_held_gets_the_best_bandwidth_free_set() -> None:
    topology = dgx1()
    held = (0, 1, 4)  # another claim holds these
    other = claim("other", request(count=3), status={
        "allocation": {"devices": {"results": [
            {"request": "gpus", "driver": DRIVER, "pool": "dgx-0", "device": f"gpu-{i}"}
            for i in held
        ]}},
        "reservedFor": [{"resource": "pods", "name": "x", "uid": "uid-x"}],
    })  # fmt: skip
    c = cluster([
        gpu_node("dgx-0", topology),
        gpu_slice("dgx-0", topology=topology, listed=(3, 0, 5, 1, 6, 2, 7, 4)),
        device_class(), other, claim("train", request(count=4)),
    ])  # fmt: skip
    decision = c.schedule(claim_pod("p", [("gpus", "train")]))
    assert decision.outcome == "assumed", decision.message
    allocation = c.claim("train").allocation
    assert allocation is not None
    chosen = _gpus(allocation.devices)
    free = sum(1 << i for i in range(8) if i not in held)
    best = GpuSelector().best_set(topology, free, 4)
    assert best is not None
    assert chosen == sorted(best.gpus)
    assert not set(chosen) & set(held)
    held_ids = {DeviceID(DRIVER, "dgx-0", f"gpu-{i}") for i in held}
    assert held_ids <= c.cache.snapshot.storage.dra.allocated_devices()


def test_a_shared_claim_is_allocated_once_and_reserved_for_both_pods() -> None:
    c = cluster([gpu_node("n0"), gpu_node("n1"), gpu_slice("n0"), gpu_slice("n1"),
                 device_class(), claim("shared", request(count=2))])  # fmt: skip
    first = claim_pod("a", [("gpus", "shared")])
    second = claim_pod("b", [("gpus", "shared")])
    assert c.schedule(first).outcome == "assumed"
    allocation = c.claim("shared").allocation
    assert c.schedule(second).outcome == "assumed"
    written = c.claim("shared")
    assert written.allocation == allocation or written.allocation is not None
    assert [d.id for d in written.allocation.devices] == [d.id for d in allocation.devices]  # type: ignore[union-attr]
    assert c.binder.bound["default/a"] == c.binder.bound["default/b"]
    assert {r.uid for r in written.reserved_for} == {"uid-default-a", "uid-default-b"}


def test_devices_in_flight_are_not_given_to_the_next_pod() -> None:
    c = cluster([gpu_node("n0"), gpu_slice("n0", gpus=4), device_class(),
                 claim("one", request(count=3)), claim("two", request(count=3))])  # fmt: skip
    cycle, queue = c.assembly.cycle, c.assembly.queue
    from scheduler.core.model import PodInfo

    cycle.enqueue(PodInfo.from_object(claim_pod("a", [("gpus", "one")])))
    first = cycle.schedule(queue.pop())  # type: ignore[arg-type]
    assert first[0].outcome == "assumed"  # reserved, not bound yet: in flight
    decision = c.schedule(claim_pod("b", [("gpus", "two")]))
    assert decision.outcome == "unschedulable"
    assert "cannot allocate all claims" in decision.message


def test_pods_without_claims_are_unchanged() -> None:
    c = cluster([gpu_node("n0"), gpu_slice("n0"), device_class()])
    from tests.builders import pod

    decision = c.schedule(pod("plain", {"cpu": "1"}))
    assert decision.outcome == "assumed"
    assert c.binder.claim_writes == []
