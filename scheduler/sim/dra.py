"""The simulated cluster's Dynamic Resource Allocation objects: what NVIDIA's DRA driver
publishes for a GPU node, what a DRA job's user submits, and what kube's resourceclaim
controller makes and deletes.

- **DeviceClass** `gpu.nvidia.com` (the driver's chart installs it): devices of the driver
  whose `type` is `gpu` (NVIDIA's own selector).
- **ResourceSlice** per DRA node (`gpuDriver: dra`): driver `gpu.nvidia.com`, pool = node,
  published by `nodeName`, one device `gpu-<index>` per GPU of the node's topology in index
  order, with the driver's attributes `type` (`gpu`), `uuid`, `index`, `minor`,
  `productName`, `pcieBusID` and the standard `resource.kubernetes.io/pciBusID`, and the
  capacity `memory`. The node's topology annotation carries the same uuids and PCI addresses
  (what the agent reads from NVML), so the scheduler maps devices to GPUs.
- **ResourceClaimTemplate** `gpu-<n>` per namespace and GPU count: one request `gpus` of
  `count: n` devices of the class (`ExactCount`).
- **ResourceClaim** per DRA pod (`claim_for`): the resourceclaim controller's claim made from
  the template, `<pod>-gpus-<5 characters>`, owned by the pod (controller), and the pod's
  `status.resourceClaimStatuses` naming it. When the pod ends (completes or is preempted) the
  controller removes it from `reservedFor` and, the claim being the pod's own, deletes it:
  the devices are free again.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

from scheduler.core.topology.schema import Topology

__all__ = [
    "CLASS_EXPRESSION",
    "claim_for",
    "claim_template",
    "claim_template_name",
    "device_class",
    "gpu_identity",
    "node_slice",
    "with_identities",
]

DRIVER = "gpu.nvidia.com"
V1 = "resource.k8s.io/v1"
CLAIM = "gpus"
CLASS_EXPRESSION = f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'"
"""NVIDIA's DeviceClass `gpu.nvidia.com` selector (k8s-dra-driver-gpu's chart)."""


def claim_template_name(gpus: int) -> str:
    return f"gpu-{gpus}"


def gpu_identity(node: str, index: int) -> tuple[str, str]:
    """(uuid, PCI address) of GPU `index` of `node`: NVML's `GPU-` form, stable per node."""
    digest = hashlib.sha256(f"{node}/{index}".encode()).hexdigest()
    uuid = f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"
    return uuid, f"0000:{0x18 + index // 32:02x}:{index % 32:02x}.0"


def with_identities(node: str, topology: Topology) -> Topology:
    """The node's topology with each GPU's uuid and PCI address (as the agent reports them)."""
    gpus = []
    for gpu in topology.gpus:
        uuid, pci = gpu_identity(node, gpu.index)
        gpus.append(dataclasses.replace(gpu, uuid=uuid, pci_bus_id=pci))
    return dataclasses.replace(topology, gpus=tuple(gpus))


def device_class() -> dict[str, Any]:
    return {
        "apiVersion": V1,
        "kind": "DeviceClass",
        "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": CLASS_EXPRESSION}}]},
    }


def node_slice(node: str, topology: Topology) -> dict[str, Any]:
    """NVIDIA's driver's ResourceSlice for the node's whole GPUs."""
    devices = []
    for gpu in sorted(topology.gpus, key=lambda g: g.index):
        if not gpu.allocatable:
            continue
        uuid, pci = gpu_identity(node, gpu.index)
        attributes: dict[str, Any] = {
            "type": {"string": "gpu"},
            "uuid": {"string": uuid},
            "index": {"int": gpu.index},
            "minor": {"int": gpu.index},
            "productName": {"string": gpu.model or "NVIDIA GPU"},
            "pcieBusID": {"string": pci},
            "resource.kubernetes.io/pciBusID": {"string": pci},
        }
        device: dict[str, Any] = {"name": f"gpu-{gpu.index}", "attributes": attributes}
        if gpu.memory_mib:
            device["capacity"] = {"memory": {"value": f"{gpu.memory_mib}Mi"}}
        devices.append(device)
    return {
        "apiVersion": V1,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def _claim_spec(gpus: int) -> dict[str, Any]:
    return {
        "devices": {
            "requests": [
                {
                    "name": CLAIM,
                    "exactly": {
                        "deviceClassName": DRIVER,
                        "allocationMode": "ExactCount",
                        "count": gpus,
                    },
                }
            ]
        }
    }


def claim_template(namespace: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": V1,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": claim_template_name(gpus), "namespace": namespace},
        "spec": {"spec": _claim_spec(gpus)},
    }


def claim_for(pod: dict[str, Any], gpus: int) -> dict[str, Any]:
    """The resourceclaim controller's claim for the pod's `gpus` entry (made from its
    template); the pod's `status.resourceClaimStatuses` is set to name it."""
    meta = pod["metadata"]
    suffix = hashlib.sha256(meta["uid"].encode()).hexdigest()[:5]
    name = f"{meta['name']}-{CLAIM}-{suffix}"
    pod.setdefault("status", {})["resourceClaimStatuses"] = [
        {"name": CLAIM, "resourceClaimName": name}
    ]
    return {
        "apiVersion": V1,
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": meta.get("namespace") or "default",
            "uid": f"uid-claim-{name}",
            "resourceVersion": "1",
            "annotations": {"resource.kubernetes.io/pod-claim-name": CLAIM},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": _claim_spec(gpus),
    }
