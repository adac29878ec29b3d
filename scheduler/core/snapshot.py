"""Column store of node state: what the filter and score plugins read in one cycle.

Each node has a slot; per-resource amounts live in numpy arrays indexed by slot so a plugin
evaluates every node with a few vector operations. Sparse facts (taints, host ports, images,
GPU sets) are indexed so a plugin touches only the nodes that have them. The store is
updated incrementally by `scheduler.core.cache.Cache`, its only writer.

A slot can exist without a live node: pods bound to a node the cache has not seen yet, or
to a node deleted while pods still run there, are accounted on a slot that no pod is
scheduled to (kube's cache does the same).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from scheduler.core.model import HostPort, NodeInfo, PodInfo, WorkloadInfo
from scheduler.core.podindex import LabelSetIndex, TermIndex
from scheduler.core.quota import QuotaState
from scheduler.core.storage import StorageState
from scheduler.core.topology.state import GpuState

__all__ = ["BASE_RESOURCES", "BoolArray", "IntArray", "NodeState", "Snapshot"]

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

# Rows that always exist; extended resources get rows as they are first seen.
BASE_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pods")
_INITIAL_CAPACITY = 64
_DERIVED_LIMIT = 1024
T = TypeVar("T")


class NodeState:
    """One node with the pods on it: the input of the per-node reference plugins."""

    __slots__ = ("gpu_sets", "info", "pods")

    def __init__(
        self, info: NodeInfo, pods: list[PodInfo], gpu_sets: dict[str, tuple[int, ...]]
    ) -> None:
        self.info = info
        self.pods = pods
        self.gpu_sets = gpu_sets


class Snapshot:
    """Node state in columns. Read by plugins; written only by the cache."""

    def __init__(self, gpus: GpuState | None = None) -> None:
        # GPU columns and lists, owned by `GpuState`, grow with the snapshot's.
        self.gpus = gpus if gpus is not None else GpuState()
        # Columns are views of the first `capacity` slots of larger buffers, so plugins
        # compute over exactly the slots in use while growth stays amortized.
        self.capacity = 0
        self.resources: list[str] = list(BASE_RESOURCES)
        self.row: dict[str, int] = {name: i for i, name in enumerate(self.resources)}
        self._buffers: dict[str, npt.NDArray[np.generic]] = {}
        self._allocate_buffers(_INITIAL_CAPACITY)
        # Per-slot Python objects: declared node, name, pods and host ports.
        self.nodes: list[NodeInfo | None] = []
        self.names: list[str | None] = []
        self.index: dict[str, int] = {}
        self.pods: list[dict[str, PodInfo]] = []
        self.ports: list[Counter[HostPort]] = []
        # (protocol, port) -> slot -> Counter of host IPs using it; only slots that use it.
        self.port_index: dict[tuple[str, int], dict[int, Counter[str]]] = {}
        # normalized image name -> slot -> size in bytes.
        self.image_index: dict[str, dict[int, int]] = {}
        self._image_arrays: dict[str, tuple[IntArray, IntArray]] = {}
        self.tainted: set[int] = set()
        # Pods by namespace and labels, and the affinity terms bound pods carry (podindex).
        self.label_sets = LabelSetIndex()
        self.pod_terms = TermIndex()
        # Namespace name -> labels, for namespaceSelector; bumped generation on change.
        self.namespaces: dict[str, Mapping[str, str]] = {}
        self.namespace_generation = 0
        # Services, ReplicationControllers, ReplicaSets, StatefulSets by (kind, ns, name):
        # the selectors PodTopologySpread's default constraints use.
        self.workloads: dict[tuple[str, str, str], WorkloadInfo] = {}
        self.services: dict[str, dict[str, WorkloadInfo]] = {}  # namespace -> name -> Service
        self._free: list[int] = []
        # Bumped when labels/taints/node set change, so plugins can cache per generation.
        self.node_generation = 0
        self.live_count = 0
        self._name_rank: IntArray | None = None
        self._missing: dict[int, bool] = {}  # row -> some live node lacks the resource
        self._derived: dict[Hashable, Any] = {}
        self._derived_at = (0, 0)
        # Claims, volumes and CSI objects for the volume plugins (written by the adapters).
        self.storage = StorageState()
        # ElasticQuotas and their namespaces' usage (CapacityScheduling; written by the cache)
        self.quotas = QuotaState()

    def _allocate_buffers(self, size: int) -> None:
        rows = len(self.resources)
        old = self._buffers
        fresh: dict[str, npt.NDArray[np.generic]] = {
            "allocatable": np.zeros((rows, size), np.int64),
            "requested": np.zeros((rows, size), np.int64),
            "non_zero_cpu": np.zeros(size, np.int64),
            "non_zero_memory": np.zeros(size, np.int64),
            "pod_count": np.zeros(size, np.int64),
            "live": np.zeros(size, np.bool_),
            "unschedulable": np.zeros(size, np.bool_),
            "memory_pressure": np.zeros(size, np.bool_),
        }
        for key, buffer in old.items():
            target = fresh[key]
            if buffer.ndim == 2:
                target[: buffer.shape[0], : buffer.shape[1]] = buffer
            else:
                target[: buffer.shape[0]] = buffer
        self._buffers = fresh
        if size != len(old.get("live", ())):
            self.gpus.grow(size)
        self._refresh_views()

    def _refresh_views(self) -> None:
        n = self.capacity
        b = self._buffers
        self.allocatable: IntArray = b["allocatable"][:, :n]  # type: ignore[assignment]
        self.requested: IntArray = b["requested"][:, :n]  # type: ignore[assignment]
        self.non_zero_cpu: IntArray = b["non_zero_cpu"][:n]  # type: ignore[assignment]
        self.non_zero_memory: IntArray = b["non_zero_memory"][:n]  # type: ignore[assignment]
        self.pod_count: IntArray = b["pod_count"][:n]  # type: ignore[assignment]
        self.live: BoolArray = b["live"][:n]  # type: ignore[assignment]
        self.unschedulable: BoolArray = b["unschedulable"][:n]  # type: ignore[assignment]
        self.memory_pressure: BoolArray = b["memory_pressure"][:n]  # type: ignore[assignment]
        self.gpus.view(n)

    # ------------------------------------------------------------------ reading

    def slot(self, name: str) -> int | None:
        return self.index.get(name)

    def live_slots(self) -> Iterator[int]:
        return (int(i) for i in np.flatnonzero(self.live))

    def name_rank(self) -> IntArray:
        """Each slot's position in node-name order (for deterministic tie-breaks)."""
        if self._name_rank is None:
            rank = np.full(self.capacity, np.iinfo(np.int64).max, np.int64)
            named = sorted((n, i) for i, n in enumerate(self.names) if n is not None)
            for position, (_, slot) in enumerate(named):
                rank[slot] = position
            self._name_rank = rank
        return self._name_rank

    def derived(self, key: Hashable, compute: Callable[[], T]) -> T:
        """A value derived from declared node state (labels, taints, the node set), computed
        once and kept until that state changes; e.g. a selector's mask over the slots."""
        if self._derived_at != (self.node_generation, self.capacity):
            self._derived.clear()
            self._derived_at = (self.node_generation, self.capacity)
        if key in self._derived:
            value: T = self._derived[key]
            return value
        if len(self._derived) >= _DERIVED_LIMIT:
            self._derived.clear()
        value = compute()
        self._derived[key] = value
        return value

    def missing_anywhere(self, row: int) -> bool:
        """Whether some live node has zero allocatable of a resource (cached per row)."""
        missing = self._missing.get(row)
        if missing is None:
            missing = bool(np.any(self.live & (self.allocatable[row] == 0)))
            self._missing[row] = missing
        return missing

    def image_holders(self, image: str) -> tuple[IntArray, IntArray] | None:
        """Slots holding an image and its size on each, as arrays (cached per image)."""
        arrays = self._image_arrays.get(image)
        if arrays is None:
            holders = self.image_index.get(image)
            if not holders:
                return None
            arrays = (
                np.fromiter(holders.keys(), np.int64, len(holders)),
                np.fromiter(holders.values(), np.int64, len(holders)),
            )
            self._image_arrays[image] = arrays
        return arrays

    def resource_row(self, name: str) -> int:
        """The row of a resource, created (all zeros) on first use."""
        row = self.row.get(name)
        if row is None:
            row = len(self.resources)
            self.resources.append(name)
            self.row[name] = row
            self._allocate_buffers(self._buffers["live"].shape[0])
            self._missing.clear()
        return row

    def node_state(self, slot: int) -> NodeState:
        info = self.nodes[slot]
        assert info is not None, f"slot {slot} has no node"
        return NodeState(info, list(self.pods[slot].values()), dict(self.gpus.sets[slot]))

    # ------------------------------------------------------------------ writing (cache only)

    def _new_slot(self) -> int:
        slot = self.capacity
        if slot == self._buffers["live"].shape[0]:
            self.capacity = slot  # views keep their length while buffers double
            self._allocate_buffers(2 * slot)
        self.capacity = slot + 1
        self._refresh_views()
        self.gpus.add_slot()
        self.nodes.append(None)
        self.names.append(None)
        self.pods.append({})
        self.ports.append(Counter())
        return slot

    def ensure_slot(self, name: str) -> int:
        """The slot for a node name, allocated (not live) if the name is new."""
        slot = self.index.get(name)
        if slot is not None:
            return slot
        slot = self._free.pop() if self._free else self._new_slot()
        self.index[name] = slot
        self.names[slot] = name
        self._name_rank = None
        return slot

    def set_node(self, info: NodeInfo) -> int:
        """Add or replace a node's declared state; returns its slot."""
        slot = self.ensure_slot(info.name)
        self._missing.clear()
        old = self.nodes[slot]
        for name in info.allocatable:
            self.resource_row(name)
        self.allocatable[:, slot] = 0
        for name, amount in info.allocatable.items():
            self.allocatable[self.row[name], slot] = amount
        self.unschedulable[slot] = info.unschedulable
        self.memory_pressure[slot] = info.memory_pressure
        if info.taints:
            self.tainted.add(slot)
        else:
            self.tainted.discard(slot)
        if old is None or old.images != info.images:
            if old is not None:
                self._drop_images(slot, old)
            for image, size in info.images.items():
                self.image_index.setdefault(image, {})[slot] = size
                self._image_arrays.pop(image, None)
        if (
            old is None
            or old.labels != info.labels
            or old.taints != info.taints
            or old.unschedulable != info.unschedulable
        ):
            self.node_generation += 1
        if not self.live[slot]:
            self.live[slot] = True
            self.live_count += 1
        self.nodes[slot] = info
        self.gpus.set_node(slot, old, info)
        return slot

    def _drop_images(self, slot: int, info: NodeInfo) -> None:
        for image in info.images:
            self._image_arrays.pop(image, None)
            holders = self.image_index.get(image)
            if holders is not None:
                holders.pop(slot, None)
                if not holders:
                    del self.image_index[image]

    def remove_node(self, name: str) -> None:
        """Forget a node's declared state; its slot lives on while pods are accounted there."""
        slot = self.index.get(name)
        if slot is None:
            return
        info = self.nodes[slot]
        if info is not None:
            self._drop_images(slot, info)
        self._missing.clear()
        self.gpus.clear_node(slot)
        self.nodes[slot] = None
        self.allocatable[:, slot] = 0
        self.unschedulable[slot] = False
        self.memory_pressure[slot] = False
        self.tainted.discard(slot)
        if self.live[slot]:
            self.live[slot] = False
            self.live_count -= 1
        self.node_generation += 1
        self._release_if_empty(slot)

    def _release_if_empty(self, slot: int) -> None:
        if self.nodes[slot] is None and not self.pods[slot]:
            name = self.names[slot]
            assert name is not None
            del self.index[name]
            self.names[slot] = None
            self._name_rank = None
            self.requested[:, slot] = 0
            self.non_zero_cpu[slot] = 0
            self.non_zero_memory[slot] = 0
            self.pod_count[slot] = 0
            self.gpus.release(slot)
            self._free.append(slot)

    def add_pod(self, slot: int, pod: PodInfo, quota: bool = True) -> None:
        """Account a pod's requests, ports and count on a slot (and against its namespace's
        quota, unless `quota` is False: a nominated pod)."""
        self._account(slot, pod, 1)
        if quota and self.quotas.quotas:
            self.quotas.add_pod(pod)
        self.pods[slot][pod.key] = pod
        self.storage.count_pod(pod.namespace, pod.volumes, 1)
        self.label_sets.add(slot, pod, 1)
        self.pod_terms.add(slot, pod, 1)

    def set_workload(self, workload: WorkloadInfo) -> None:
        self.workloads[(workload.kind, workload.namespace, workload.name)] = workload
        if workload.kind == "Service":
            self.services.setdefault(workload.namespace, {})[workload.name] = workload

    def remove_workload(self, kind: str, namespace: str, name: str) -> None:
        self.workloads.pop((kind, namespace, name), None)
        services = self.services.get(namespace)
        if kind == "Service" and services is not None:
            services.pop(name, None)
            if not services:
                del self.services[namespace]

    def bound_pods(self) -> Iterator[PodInfo]:
        """Every pod on a slot (bound or assumed), live node or not."""
        for pods in self.pods:
            yield from pods.values()

    def set_namespace(self, name: str, labels: Mapping[str, str] | None) -> None:
        """Add, relabel (labels) or forget (None) a namespace."""
        if labels is None:
            if self.namespaces.pop(name, None) is not None:
                self.namespace_generation += 1
        elif self.namespaces.get(name) != labels:
            self.namespaces[name] = dict(labels)
            self.namespace_generation += 1

    def remove_pod(self, slot: int, pod: PodInfo, quota: bool = True) -> None:
        if quota and self.quotas.quotas:
            self.quotas.remove_pod(pod)
        if pod.key in self.gpus.sets[slot]:
            self.gpus.set_pod(slot, pod.key, None)
        self._account(slot, pod, -1)
        del self.pods[slot][pod.key]
        self.storage.count_pod(pod.namespace, pod.volumes, -1)
        self.label_sets.add(slot, pod, -1)
        self.pod_terms.add(slot, pod, -1)
        self._release_if_empty(slot)

    def _account(self, slot: int, pod: PodInfo, sign: int) -> None:
        # Rows first (creating one may grow the buffers), then the amounts.
        rows = [(self.resource_row(name), amount) for name, amount in pod.requests.items()]
        for row, amount in rows:
            self.requested[row, slot] += sign * amount
        self.non_zero_cpu[slot] += sign * pod.non_zero_cpu
        self.non_zero_memory[slot] += sign * pod.non_zero_memory
        self.pod_count[slot] += sign
        used = self.ports[slot]
        for port in pod.host_ports:
            key = (port.protocol, port.port)
            ip = port.ip or "0.0.0.0"
            by_slot = self.port_index.setdefault(key, {})
            ips = by_slot.setdefault(slot, Counter())
            ips[ip] += sign
            used[port] += sign
            if ips[ip] <= 0:
                del ips[ip]
            if used[port] <= 0:
                del used[port]
            if not ips:
                del by_slot[slot]
            if not by_slot:
                del self.port_index[key]
