"""Small builders for Node and Pod objects as the API serves them (plain mappings)."""

from __future__ import annotations

from typing import Any

from scheduler.core.cache import Cache
from scheduler.core.model import NodeInfo, PodInfo


def node(
    name: str,
    cpu: str = "4",
    memory: str = "8Gi",
    pods: int = 110,
    *,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
    memory_pressure: bool = False,
    extra: dict[str, str] | None = None,
    images: list[tuple[list[str], int]] | None = None,
    annotations: dict[str, str] | None = None,
    ephemeral_storage: str | None = None,
) -> dict[str, Any]:
    allocatable: dict[str, str] = {"cpu": cpu, "memory": memory, "pods": str(pods)}
    if ephemeral_storage is not None:
        allocatable["ephemeral-storage"] = ephemeral_storage
    allocatable.update(extra or {})
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
        "spec": {"unschedulable": unschedulable, "taints": taints or []},
        "status": {
            "allocatable": allocatable,
            "conditions": [
                {"type": "MemoryPressure", "status": "True" if memory_pressure else "False"}
            ],
            "images": [{"names": names, "sizeBytes": size} for names, size in (images or [])],
        },
    }
    return obj


def container(
    name: str = "c",
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    *,
    image: str = "busybox",
    ports: list[dict[str, Any]] | None = None,
    restart_policy: str | None = None,
) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": image, "resources": {}}
    if requests is not None:
        c["resources"]["requests"] = requests
    if limits is not None:
        c["resources"]["limits"] = limits
    if ports:
        c["ports"] = ports
    if restart_policy:
        c["restartPolicy"] = restart_policy
    return c


def pod(
    name: str,
    requests: dict[str, str] | None = None,
    *,
    namespace: str = "default",
    node_name: str | None = None,
    containers: list[dict[str, Any]] | None = None,
    init_containers: list[dict[str, Any]] | None = None,
    scheduler_name: str = "topo-scheduler",
    phase: str = "Pending",
    annotations: dict[str, str] | None = None,
    spec: dict[str, Any] | None = None,
    uid: str | None = None,
    created: str = "2026-01-01T00:00:00Z",
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{namespace}-{name}",
            "annotations": annotations or {},
            "creationTimestamp": created,
        },
        "spec": {
            "schedulerName": scheduler_name,
            "containers": containers
            if containers is not None
            else [container(requests=requests or {})],
        },
        "status": {"phase": phase},
    }
    if init_containers:
        obj["spec"]["initContainers"] = init_containers
    if node_name:
        obj["spec"]["nodeName"] = node_name
    obj["spec"].update(spec or {})
    return obj


def cache_of(nodes: list[dict[str, Any]], pods: list[dict[str, Any]] = ()) -> Cache:  # type: ignore[assignment]
    cache = Cache()
    for n in nodes:
        cache.add_node(NodeInfo.from_object(n))
    for p in pods:
        cache.add_pod(PodInfo.from_object(p))
    return cache
