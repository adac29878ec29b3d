"""DRA devices as GPUs of a node's topology, and the best-connected choice among them.

NVIDIA's DRA driver (`gpu.nvidia.com`, k8s-dra-driver-gpu) names a whole GPU `gpu-<minor>`
and publishes, in its own domain, `type` ("gpu"; "mig" for a MIG device, "vfio" for a
passed-through GPU), `uuid` (NVML's `GPU-...`), `productName`, `brand`, `architecture`,
`cudaComputeCapability`, `driverVersion`, `cudaDriverVersion` and `pcieBusID`; in the standard
domain `resource.kubernetes.io/pciBusID` (the same PCI address) and, where known,
`resource.kubernetes.io/pcieRoot`. A MIG device also has `parentUUID` and its parent's PCI
address, so MIG devices are never mapped to a whole GPU.

A device maps to the topology's GPU whose uuid equals the device's `uuid` (case-insensitive),
else whose PCI address equals the device's `resource.kubernetes.io/pciBusID`, `pcieBusID` or
`pciBusID` (compared in the canonical `dddd:bb:dd.f` form; nvidia-smi's 8-digit domain is
accepted). A device that maps to no GPU keeps kube's order.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from scheduler.core.dra.types import Device, DeviceID
from scheduler.core.topology.schema import Topology
from scheduler.core.topology.select import GpuSelector, Selection

__all__ = ["PCI_ATTRIBUTES", "UUID_ATTRIBUTE", "canonical_pci", "gpu_of", "prefer_best_set"]

UUID_ATTRIBUTE = "uuid"
PCI_ATTRIBUTES = ("resource.kubernetes.io/pciBusID", "pcieBusID", "pciBusID")
"""Looked up in this order; a bare name is in the device's driver's domain."""

_PCI = re.compile(r"(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])")


def canonical_pci(text: str) -> str | None:
    """`0000:18:00.0` for `00000000:18:00.0`, `18:00.0`, `0000:18:00.0`; None if not one."""
    m = _PCI.fullmatch(text.strip())
    if m is None:
        return None
    domain = int(m.group(1) or "0", 16)
    if domain > 0xFFFF:
        return None
    bus, dev, fn = int(m.group(2), 16), int(m.group(3), 16), int(m.group(4))
    return f"{domain:04x}:{bus:02x}:{dev:02x}.{fn}"


def _string(device: Device, driver: str, name: str) -> str | None:
    qualified = name if "/" in name else f"{driver}/{name}"
    attribute = device.attribute(driver, qualified)
    if attribute is None or attribute.kind != "string":
        return None
    return str(attribute.value)


@dataclass(frozen=True)
class _Index:
    by_uuid: dict[str, int]
    by_pci: dict[str, int]


def _index(topology: Topology) -> _Index:
    by_uuid, by_pci = {}, {}
    for gpu in topology.gpus:
        if gpu.uuid:
            by_uuid[gpu.uuid.lower()] = gpu.index
        pci = canonical_pci(gpu.pci_bus_id) if gpu.pci_bus_id else None
        if pci is not None:
            by_pci[pci] = gpu.index
    return _Index(by_uuid, by_pci)


def gpu_of(device: Device, driver: str, topology: Topology) -> int | None:
    """The topology index of the GPU a DRA device is, or None (not a whole GPU, or unknown)."""
    return _gpu_of(device, driver, _index(topology))


def _gpu_of(device: Device, driver: str, index: _Index) -> int | None:
    kind = _string(device, driver, "type")
    if kind == "mig" or device.attribute(driver, f"{driver}/parentUUID") is not None:
        return None
    uuid = _string(device, driver, UUID_ATTRIBUTE)
    if uuid is not None and uuid.lower() in index.by_uuid:
        return index.by_uuid[uuid.lower()]
    for name in PCI_ATTRIBUTES:
        text = _string(device, driver, name)
        pci = canonical_pci(text) if text is not None else None
        if pci is not None and pci in index.by_pci:
            return index.by_pci[pci]
    return None


@dataclass(frozen=True)
class Preference:
    """The chosen GPU set for one request: device ids first in the search, and the
    selection (busbw, scores) it came from."""

    devices: tuple[DeviceID, ...]
    selection: Selection


class GpuMap:
    """Device -> GPU index for one node's topology, cached per device id for one call."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self._index = _index(topology)
        self._cache: dict[DeviceID, int | None] = {}

    def gpu(self, device_id: DeviceID, device: Device) -> int | None:
        if device_id not in self._cache:
            self._cache[device_id] = _gpu_of(device, device_id.driver, self._index)
        return self._cache[device_id]


def prefer_best_set(
    selector: GpuSelector,
    gpus: GpuMap,
    candidates: Sequence[tuple[DeviceID, Device]],
    count: int,
) -> Preference | None:
    """Among free candidate devices that all are GPUs of the topology, the `count` with the
    best ring bandwidth (`GpuSelector.best_set`); None when some candidate is not a mapped
    GPU, two map to one GPU, or no set of that size exists."""
    if count <= 0 or len(candidates) < count:
        return None
    by_gpu: dict[int, DeviceID] = {}
    for device_id, device in candidates:
        index = gpus.gpu(device_id, device)
        if index is None or index in by_gpu:
            return None
        by_gpu[index] = device_id
    free = sum(1 << i for i in by_gpu)
    selection = selector.best_set(gpus.topology, free, count)
    if selection is None or len(selection.gpus) != count:
        return None
    return Preference(tuple(by_gpu[i] for i in selection.gpus), selection)


def reorder(order: Iterable[DeviceID], first: Sequence[DeviceID]) -> list[DeviceID]:
    """`first`, then the rest of `order` as it was."""
    chosen = set(first)
    return [*first, *(d for d in order if d not in chosen)]
