"""Manifests of the storage kinds for the volume plugin tests (API shapes, as kubectl prints)."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]
HOSTNAME = "kubernetes.io/hostname"


def pvc(
    name: str,
    *,
    namespace: str = "default",
    class_name: str | None = None,
    volume: str = "",
    bound: bool = False,
    modes: tuple[str, ...] = ("ReadWriteOnce",),
    size: str | None = "1Gi",
    annotations: dict[str, str] | None = None,
    owner_uid: str = "",
    uid: str = "",
    phase: str | None = None,
    attributes_class: str | None = None,
    selector: dict[str, str] | None = None,
) -> Obj:
    ann = dict(annotations or {})
    if bound:
        ann["pv.kubernetes.io/bind-completed"] = "yes"
    spec: Obj = {"accessModes": list(modes)}
    if class_name is not None:
        spec["storageClassName"] = class_name
    if volume:
        spec["volumeName"] = volume
    if size is not None:
        spec["resources"] = {"requests": {"storage": size}}
    if attributes_class is not None:
        spec["volumeAttributesClassName"] = attributes_class
    if selector is not None:
        spec["selector"] = {"matchLabels": selector}
    meta: Obj = {
        "name": name,
        "namespace": namespace,
        "annotations": ann,
        "uid": uid or f"uid-{name}",
    }
    if owner_uid:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": "x", "uid": owner_uid, "controller": True}
        ]
    obj: Obj = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}
    if phase is not None:
        obj["status"] = {"phase": phase}
    return obj


def pv(
    name: str,
    *,
    class_name: str = "",
    size: str = "1Gi",
    claim: tuple[str, str] | None = None,
    hosts: tuple[str, ...] = (),
    affinity: list[Obj] | None = None,
    phase: str = "Available",
    labels: dict[str, str] | None = None,
    csi: tuple[str, str] | None = None,
    modes: tuple[str, ...] = ("ReadWriteOnce",),
) -> Obj:
    spec: Obj = {"capacity": {"storage": size}, "accessModes": list(modes)}
    if class_name:
        spec["storageClassName"] = class_name
    if claim is not None:
        spec["claimRef"] = {"namespace": claim[0], "name": claim[1]}
    terms = list(affinity or [])
    if hosts:
        terms.append(
            {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": list(hosts)}]}
        )
    if terms:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": terms}}
    if csi is not None:
        spec["csi"] = {"driver": csi[0], "volumeHandle": csi[1]}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": spec,
        "status": {"phase": phase},
    }


def storage_class(
    name: str,
    *,
    wait: bool | None = True,
    provisioner: str = "kubernetes.io/no-provisioner",
    topologies: list[Obj] | None = None,
) -> Obj:
    """A StorageClass; `wait=None` leaves volumeBindingMode unset."""
    obj: Obj = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
    }
    if wait is not None:
        obj["volumeBindingMode"] = "WaitForFirstConsumer" if wait else "Immediate"
    if topologies is not None:
        obj["allowedTopologies"] = topologies
    return obj


def csi_node(name: str, limits: dict[str, int]) -> Obj:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {"name": name},
        "spec": {
            "drivers": [
                {"name": d, "nodeID": name, "allocatable": {"count": c}} for d, c in limits.items()
            ]
        },
    }


def csi_driver(name: str, capacity: bool = True) -> Obj:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIDriver",
        "metadata": {"name": name},
        "spec": {"storageCapacity": capacity},
    }


def capacity(
    name: str,
    class_name: str,
    size: str | None,
    topology: dict[str, str] | None,
    max_size: str | None = None,
) -> Obj:
    obj: Obj = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIStorageCapacity",
        "metadata": {"name": name, "namespace": "kube-system"},
        "storageClassName": class_name,
    }
    if size is not None:
        obj["capacity"] = size
    if max_size is not None:
        obj["maximumVolumeSize"] = max_size
    if topology is not None:
        obj["nodeTopology"] = {"matchLabels": topology}
    return obj


def resource_claim(
    name: str,
    *,
    allocated: bool,
    reserved_for: str = "",
    node: str | None = None,
    owner: str | None = None,
) -> Obj:
    status: Obj = {}
    if allocated:
        allocation: Obj = {"devices": {"results": []}}
        if node is not None:
            allocation["nodeSelector"] = {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            }
        status["allocation"] = allocation
    if reserved_for:
        status["reservedFor"] = [{"resource": "pods", "name": "p", "uid": reserved_for}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": owner, "controller": True}
            ]
            if owner
            else [],
        },
        "spec": {"devices": {"requests": []}},
        "status": status,
    }


def claim_volume(name: str, claim: str) -> Obj:
    return {"name": name, "persistentVolumeClaim": {"claimName": claim}}


def ephemeral_volume(name: str, class_name: str = "wait") -> Obj:
    """A generic ephemeral volume: its claim is named `<pod>-<name>`."""
    template = {"spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class_name}}
    return {"name": name, "ephemeral": {"volumeClaimTemplate": template}}


def volume_attachment(name: str, node: str, attacher: str, pv_name: str | None) -> Obj:
    source: Obj = {} if pv_name is None else {"persistentVolumeName": pv_name}
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "VolumeAttachment",
        "metadata": {"name": name},
        "spec": {"attacher": attacher, "nodeName": node, "source": source},
    }
