"""NVLink-aware choice: with the node's GPU topology, a claim's devices are the free GPU set
with the best ring bandwidth (the topology's own `GpuSelector.best_set`), on DGX-1 with GPUs
held; without a topology, kube's order."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.dra import Allocator, CelCache, DeviceID, canonical_pci, gpu_of
from scheduler.core.topology import GpuSelector, Topology, builtin_topology
from tests.dra.builders import claim, device, device_class, node, request, resource_slice

DRIVER = "gpu.nvidia.com"
NODE = node("dgx-0", "region-1")
CEL = CelCache()
SELECTOR = GpuSelector()
# The order NVIDIA's driver might list them in: not the best order for any claim.
LISTED = (3, 0, 5, 1, 6, 2, 7, 4)


def dgx1() -> Topology:
    base = builtin_topology("dgx1-v100")
    gpus = tuple(
        dataclasses.replace(
            g, uuid=f"GPU-{g.index:08x}-aaaa", pci_bus_id=f"00000000:{0x18 + g.index:02X}:00.0"
        )
        for g in base.gpus
    )
    return dataclasses.replace(base, gpus=gpus)


TOPOLOGY = dgx1()


def gpu_slice(by: str = "uuid") -> object:
    devices = []
    for i in LISTED:
        gpu = TOPOLOGY.gpus[i]
        attributes: dict[str, object] = {"type": "gpu", "productName": "Tesla V100-SXM2-32GB"}
        if by == "uuid":
            attributes["uuid"] = (gpu.uuid or "").upper().replace("GPU-", "GPU-")
        else:
            attributes["resource.kubernetes.io/pciBusID"] = f"0000:{0x18 + i:02x}:00.0"
        devices.append(device(f"gpu-{i}", attributes=attributes, capacity={"memory": "32Gi"}))
    return resource_slice("dgx-0-gpus", "dgx-0", "dgx-0", DRIVER, *devices)


GPU_CLASS = device_class("gpu.nvidia.com", DRIVER)


def allocate(
    count: int, held: set[int], *, topology: Topology | None, by: str = "uuid"
) -> list[int]:
    allocator = Allocator(
        {GPU_CLASS.name: GPU_CLASS},
        [gpu_slice(by)],  # type: ignore[list-item]
        frozenset(DeviceID(DRIVER, "dgx-0", f"gpu-{i}") for i in held),
        cel=CEL,
        gpu_selector=SELECTOR,
    )
    results = allocator.allocate(
        NODE, [claim("train", request("gpus", GPU_CLASS.name, count))], topology=topology
    )
    assert results is not None
    return sorted(int(d.device.removeprefix("gpu-")) for d in results[0].devices)


def best(count: int, held: set[int]) -> list[int]:
    free = sum(1 << i for i in range(8) if i not in held)
    selection = SELECTOR.best_set(TOPOLOGY, free, count)
    assert selection is not None
    return list(selection.gpus)


def test_four_gpus_on_an_empty_dgx1_are_an_nvlink_quad() -> None:
    chosen = allocate(4, set(), topology=TOPOLOGY)
    assert chosen == best(4, set())
    assert SELECTOR.busbw(TOPOLOGY, tuple(chosen)) == SELECTOR.busbw(TOPOLOGY, (0, 1, 2, 3))


def test_without_a_topology_the_order_is_kubes() -> None:
    assert allocate(4, set(), topology=None) == sorted(LISTED[:4])


def test_pci_bus_id_maps_devices_when_there_is_no_uuid() -> None:
    assert allocate(4, {0, 5}, topology=TOPOLOGY, by="pci") == best(4, {0, 5})


@settings(max_examples=60, deadline=None)
@given(
    held=st.sets(st.integers(0, 7), max_size=5),
    count=st.integers(1, 8),
)
def test_choice_is_the_best_bandwidth_free_set(held: set[int], count: int) -> None:
    if count > 8 - len(held):
        return
    chosen = allocate(count, held, topology=TOPOLOGY)
    assert not set(chosen) & held
    assert chosen == best(count, held)


def test_device_to_gpu_mapping() -> None:
    sl = gpu_slice()
    dev = sl.devices[0]  # type: ignore[attr-defined]
    assert gpu_of(dev, DRIVER, TOPOLOGY) == LISTED[0]
    assert canonical_pci("00000000:18:00.0") == "0000:18:00.0"
    assert canonical_pci("18:00.0") == "0000:18:00.0"
    assert canonical_pci("not-a-bus-id") is None
    mig = device(
        "gpu-0-mig-1g",
        attributes={"type": "mig", "uuid": "MIG-1", "parentUUID": TOPOLOGY.gpus[0].uuid},
    )
    mig_slice = resource_slice("s", "dgx-0", "p", DRIVER, mig)
    assert gpu_of(mig_slice.devices[0], DRIVER, TOPOLOGY) is None
