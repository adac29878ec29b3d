"""explain's input: a cluster snapshot file and the Pod manifest, read into the cache and
typed values (every problem one line naming the file and the object)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.core.cache import Cache
from scheduler.core.config import ConfigError, SchedulerConfiguration, default_config, load_config
from scheduler.core.disruption import DisruptionBudget
from scheduler.core.group import (
    GroupError,
    GroupSpec,
    kubernetes_group,
    scheduler_plugins_group,
)
from scheduler.core.model import (
    ModelError,
    NamespaceInfo,
    NodeInfo,
    PodInfo,
    WorkloadInfo,
)
from scheduler.core.priority import PriorityClass, resolve_priority
from scheduler.core.quota import KIND as QUOTA_KIND
from scheduler.core.quota import ElasticQuota
from scheduler.core.safeload import InputError, load_yaml_all, read_input, with_origin
from scheduler.core.storage import STORAGE_KINDS

__all__ = [
    "Cluster",
    "ExplainError",
    "load_cluster",
    "load_config_file",
    "load_pod",
    "load_snapshot",
]


class ExplainError(ValueError):
    """Bad input to explain; the message is printed as one line."""


def _documents(path: str) -> list[Any]:
    try:
        return [d for d in load_yaml_all(read_input(path), path) if d is not None]
    except InputError as exc:
        raise ExplainError(str(exc)) from None


def _flatten(docs: Iterable[Any], path: str) -> list[Mapping[str, Any]]:
    objects: list[Mapping[str, Any]] = []
    for i, doc in enumerate(docs):
        if not isinstance(doc, Mapping):
            raise ExplainError(f"{path}: document {i}: must be a Kubernetes object")
        kind = doc.get("kind")
        if kind == "List" or (isinstance(kind, str) and kind.endswith("List")):
            items = doc.get("items") or []
            if not isinstance(items, list):
                raise ExplainError(f"{path}: document {i}: items: must be a list")
            objects.extend(_flatten(items, path))
        else:
            objects.append(doc)
    return objects


_GROUP_PARSERS = {
    "scheduling.x-k8s.io": scheduler_plugins_group,
    "scheduling.k8s.io": kubernetes_group,
}


@dataclass
class Cluster:
    """What a snapshot file holds beside the cache: PriorityClasses, the pending pods (a
    pod group's members are placed together; nominated pods hold room on their node) and
    PodGroup objects."""

    cache: Cache
    classes: list[PriorityClass] = field(default_factory=list)
    pending: list[PodInfo] = field(default_factory=list)
    groups: list[GroupSpec] = field(default_factory=list)


def load_snapshot(path: str, cache: Cache | None = None) -> Cache:
    """Fill a cache from a snapshot file: nodes, and the pods bound to them."""
    return load_cluster(path, cache).cache


def load_cluster(path: str, cache: Cache | None = None) -> Cluster:
    """Fill a cache from a snapshot file (nodes, bound pods, storage objects,
    PodDisruptionBudgets) and read the rest of the cluster. Pods without `spec.priority` get
    the priority admission would have given them from the snapshot's PriorityClasses."""
    cluster = Cluster(cache or Cache())
    nodes: list[NodeInfo] = []
    pods: list[PodInfo] = []
    storage: list[Any] = []
    quotas: list[ElasticQuota] = []
    seen: dict[str, int] = {}
    try:
        for i, obj in enumerate(_flatten(_documents(path), path)):
            kind = obj.get("kind")
            if not isinstance(kind, str) or not kind:
                raise ExplainError(f"{path}: object {i}: kind: is required (Node, Pod, ...)")
            if kind == "Node":
                nodes.append(NodeInfo.from_object(obj))
                _unique(seen, f"Node {nodes[-1].name}", i, path)
            elif kind == "Pod":
                pods.append(PodInfo.from_object(obj))
                _unique(seen, f"Pod {pods[-1].key}", i, path)
            elif kind == "PodGroup":
                api = str(obj.get("apiVersion") or "").split("/")[0]
                if api in _GROUP_PARSERS:
                    cluster.groups.append(_GROUP_PARSERS[api](obj))
            elif kind in STORAGE_KINDS:
                storage.append(STORAGE_KINDS[kind].from_object(obj))
            elif kind == QUOTA_KIND:  # scheduler-plugins' ElasticQuota (CapacityScheduling)
                quotas.append(ElasticQuota.from_object(obj))
            elif kind == "PriorityClass":
                cluster.classes.append(PriorityClass.from_object(obj))
            elif kind == "PodDisruptionBudget":
                cluster.cache.set_budget(DisruptionBudget.from_object(obj))
            elif kind == "Namespace":
                cluster.cache.add_namespace(NamespaceInfo.from_object(obj))
            elif kind in ("Service", "ReplicationController", "ReplicaSet", "StatefulSet"):
                cluster.cache.add_workload(WorkloadInfo.from_object(obj))
        pods = [resolve_priority(pod, cluster.classes) for pod in pods]
    except (ModelError, GroupError) as exc:
        raise ExplainError(f"{path}: {exc}") from None
    for value in storage:
        cluster.cache.snapshot.storage.add(value)
    for node in nodes:
        cluster.cache.add_node(node)
    for pod in pods:
        cluster.cache.add_pod(pod)
    for quota in quotas:
        cluster.cache.add_quota(quota)
    cluster.pending = [p for p in pods if p.node_name is None and not p.terminal]
    return cluster


def _unique(seen: dict[str, int], name: str, index: int, path: str) -> None:
    """kubectl never lists an object twice: a repeated Node or Pod name is an error."""
    if name in seen:
        raise ExplainError(f"{path}: object {index}: {name} repeats object {seen[name]}")
    seen[name] = index


def load_pod(path: str) -> tuple[PodInfo, str | None]:
    """The Pod manifest to explain, and its `spec.schedulerName` as written (None: unset)."""
    objects = _flatten(_documents(path), path)
    pods = [o for o in objects if o.get("kind", "Pod") == "Pod"]
    if len(pods) != 1:
        raise ExplainError(f"{path}: must hold exactly one Pod, found {len(pods)}")
    raw = pods[0]
    spec = raw.get("spec")
    scheduler_name = spec.get("schedulerName") if isinstance(spec, Mapping) else None
    try:
        pod = PodInfo.from_object(raw)
    except ModelError as exc:
        raise ExplainError(f"{path}: {exc}") from None
    if pod.unreadable:  # a bound pod is read leniently; the one explained must be read whole
        raise ExplainError(f"{path}: {pod.unreadable[0]}")
    return pod, scheduler_name if isinstance(scheduler_name, str) else None


def load_config_file(path: str | None) -> SchedulerConfiguration:
    """The `--config` file (None: the default configuration)."""
    if path is None:
        return default_config()
    try:
        return load_config(read_input(path), origin=path)
    except InputError as exc:
        raise ExplainError(str(exc)) from None
    except ConfigError as exc:
        raise ExplainError(with_origin(path, str(exc))) from None
