"""resource.k8s.io/v1 objects as the API serves them (plain mappings), for the plugin and
end-to-end tests."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from scheduler.core.topology import Topology, builtin_topology, format_topology
from scheduler.core.topology.schema import ANNOTATION_TOPOLOGY
from tests.builders import node, pod

Obj = dict[str, Any]
DRIVER = "gpu.nvidia.com"
GPU_CLASS = "gpu.nvidia.com"
V1 = "resource.k8s.io/v1"


def device_class(name: str = GPU_CLASS, expression: str | None = None) -> Obj:
    expression = expression or f'device.driver == "{DRIVER}"'
    return {
        "apiVersion": V1,
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def gpu_device(index: int, topology: Topology | None = None) -> Obj:
    uuid = f"GPU-{index:08x}-aaaa"
    if topology is not None and topology.gpus[index].uuid:
        uuid = topology.gpus[index].uuid or uuid
    return {
        "name": f"gpu-{index}",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": uuid},
            "productName": {"string": "Tesla V100-SXM2-32GB"},
            "resource.kubernetes.io/pciBusID": {"string": f"0000:{0x18 + index:02x}:00.0"},
        },
        "capacity": {"memory": {"value": "32Gi"}},
    }


def gpu_slice(node_name: str, gpus: int = 8, topology: Topology | None = None,
              listed: Sequence[int] | None = None, driver: str = DRIVER) -> Obj:  # fmt: skip
    order = list(listed) if listed is not None else list(range(gpus))
    return {
        "apiVersion": V1,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-{driver}"},
        "spec": {
            "driver": driver,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": [gpu_device(i, topology) for i in order],
        },
    }


def request(name: str = "gpus", count: int = 1, class_name: str = GPU_CLASS,
            **extra: Any) -> Obj:  # fmt: skip
    return {"name": name, "exactly": {"deviceClassName": class_name, "count": count, **extra}}


def claim(name: str, *requests: Obj, namespace: str = "default", owner: Obj | None = None,
          status: Obj | None = None, uid: str | None = None) -> Obj:  # fmt: skip
    meta: Obj = {"name": name, "namespace": namespace, "uid": uid or f"uid-claim-{name}",
                 "resourceVersion": "1"}  # fmt: skip
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
            }
        ]
    obj: Obj = {
        "apiVersion": V1,
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": {"devices": {"requests": list(requests or [request()])}},
    }
    if status:
        obj["status"] = status
    return obj


def claim_pod(name: str, claims: Sequence[tuple[str, str]], *, template: bool = False,
              generated: Sequence[tuple[str, str]] = (), uid: str | None = None) -> Obj:  # fmt: skip
    """A pod with spec.resourceClaims (entry name, claim or template name)."""
    key = "resourceClaimTemplateName" if template else "resourceClaimName"
    obj = pod(name, {"cpu": "100m"}, uid=uid,
              spec={"resourceClaims": [{"name": n, key: c} for n, c in claims]})  # fmt: skip
    if generated:
        obj["status"]["resourceClaimStatuses"] = [
            {"name": n, "resourceClaimName": c} for n, c in generated
        ]
    return obj


def dgx1() -> Topology:
    base = builtin_topology("dgx1-v100")
    gpus = tuple(
        dataclasses.replace(
            g, uuid=f"GPU-{g.index:08x}-aaaa", pci_bus_id=f"00000000:{0x18 + g.index:02X}:00.0"
        )
        for g in base.gpus
    )
    return dataclasses.replace(base, gpus=gpus)


def gpu_node(name: str, topology: Topology | None = None, **kw: Any) -> Obj:
    annotations = {ANNOTATION_TOPOLOGY: format_topology(topology)} if topology else {}
    return node(name, "64", "512Gi", labels={"kubernetes.io/hostname": name},
                annotations=annotations, **kw)  # fmt: skip
