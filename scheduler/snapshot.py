"""Column store of node state: what the filter and score plugins read in one cycle.

Each node has a slot; per-resource amounts live in numpy arrays indexed by slot so a plugin
evaluates every node with a few vector operations. Sparse facts (taints, host ports, images,
GPU sets) are indexed so a plugin touches only the nodes that have them. The store is
updated incrementally by `scheduler.cache.Cache`, its only writer.

A slot can exist without a live node: pods bound to a node the cache has not seen yet, or
to a node deleted while pods still run there, are accounted on a slot that no pod is
scheduled to (kube's cache does the same).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

from scheduler.model import HostPort, NodeInfo, PodInfo

__all__ = ["BASE_RESOURCES", "BoolArray", "IntArray", "NodeState", "Snapshot"]

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

# Rows that always exist; extended resources get rows as they are first seen.
BASE_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pods")
_INITIAL_CAPACITY = 64


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

    def __init__(self) -> None:
        self.capacity = _INITIAL_CAPACITY
        self.resources: list[str] = list(BASE_RESOURCES)
        self.row: dict[str, int] = {name: i for i, name in enumerate(self.resources)}
        self.allocatable: IntArray = np.zeros((len(self.resources), self.capacity), np.int64)
        self.requested: IntArray = np.zeros_like(self.allocatable)
        self.non_zero_cpu: IntArray = np.zeros(self.capacity, np.int64)
        self.non_zero_memory: IntArray = np.zeros(self.capacity, np.int64)
        self.pod_count: IntArray = np.zeros(self.capacity, np.int64)
        self.live: BoolArray = np.zeros(self.capacity, np.bool_)
        self.unschedulable: BoolArray = np.zeros(self.capacity, np.bool_)
        self.memory_pressure: BoolArray = np.zeros(self.capacity, np.bool_)
        # GPUs: a bitmask of the GPU indices held by pods, per slot.
        self.gpu_used: IntArray = np.zeros(self.capacity, np.int64)
        self.nodes: list[NodeInfo | None] = [None] * self.capacity
        self.names: list[str | None] = [None] * self.capacity
        self.index: dict[str, int] = {}
        self.pods: list[dict[str, PodInfo]] = [{} for _ in range(self.capacity)]
        self.gpu_sets: list[dict[str, tuple[int, ...]]] = [{} for _ in range(self.capacity)]
        self.ports: list[Counter[HostPort]] = [Counter() for _ in range(self.capacity)]
        # (protocol, port) -> slot -> Counter of host IPs using it; only slots that use it.
        self.port_index: dict[tuple[str, int], dict[int, Counter[str]]] = {}
        # normalized image name -> slot -> size in bytes.
        self.image_index: dict[str, dict[int, int]] = {}
        self.tainted: set[int] = set()
        self._free: list[int] = list(range(self.capacity - 1, -1, -1))
        # Bumped when labels/taints/node set change, so plugins can cache per generation.
        self.node_generation = 0
        self.live_count = 0

    # ------------------------------------------------------------------ reading

    def slot(self, name: str) -> int | None:
        return self.index.get(name)

    def live_slots(self) -> Iterator[int]:
        return (int(i) for i in np.flatnonzero(self.live))

    def resource_row(self, name: str) -> int:
        """The row of a resource, created (all zeros) on first use."""
        row = self.row.get(name)
        if row is None:
            row = len(self.resources)
            self.resources.append(name)
            self.row[name] = row
            zeros = np.zeros((1, self.capacity), np.int64)
            self.allocatable = np.vstack([self.allocatable, zeros])
            self.requested = np.vstack([self.requested, zeros])
        return row

    def node_state(self, slot: int) -> NodeState:
        info = self.nodes[slot]
        assert info is not None, f"slot {slot} has no node"
        return NodeState(info, list(self.pods[slot].values()), dict(self.gpu_sets[slot]))

    # ------------------------------------------------------------------ writing (cache only)

    def _grow(self) -> None:
        old = self.capacity
        new = old * 2
        self.capacity = new

        def grow(a: npt.NDArray[np.generic]) -> npt.NDArray[np.generic]:
            shape = (*a.shape[:-1], new)
            out = np.zeros(shape, a.dtype)
            out[..., :old] = a
            return out

        self.allocatable = grow(self.allocatable)  # type: ignore[assignment]
        self.requested = grow(self.requested)  # type: ignore[assignment]
        self.non_zero_cpu = grow(self.non_zero_cpu)  # type: ignore[assignment]
        self.non_zero_memory = grow(self.non_zero_memory)  # type: ignore[assignment]
        self.pod_count = grow(self.pod_count)  # type: ignore[assignment]
        self.live = grow(self.live)  # type: ignore[assignment]
        self.unschedulable = grow(self.unschedulable)  # type: ignore[assignment]
        self.memory_pressure = grow(self.memory_pressure)  # type: ignore[assignment]
        self.gpu_used = grow(self.gpu_used)  # type: ignore[assignment]
        extra = new - old
        self.nodes.extend([None] * extra)
        self.names.extend([None] * extra)
        self.pods.extend({} for _ in range(extra))
        self.gpu_sets.extend({} for _ in range(extra))
        self.ports.extend(Counter() for _ in range(extra))
        self._free = list(range(new - 1, old - 1, -1))

    def ensure_slot(self, name: str) -> int:
        """The slot for a node name, allocated (not live) if the name is new."""
        slot = self.index.get(name)
        if slot is not None:
            return slot
        if not self._free:
            self._grow()
        slot = self._free.pop()
        self.index[name] = slot
        self.names[slot] = name
        return slot

    def set_node(self, info: NodeInfo) -> int:
        """Add or replace a node's declared state; returns its slot."""
        slot = self.ensure_slot(info.name)
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
        return slot

    def _drop_images(self, slot: int, info: NodeInfo) -> None:
        for image in info.images:
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
            self.requested[:, slot] = 0
            self.non_zero_cpu[slot] = 0
            self.non_zero_memory[slot] = 0
            self.pod_count[slot] = 0
            self.gpu_used[slot] = 0
            self._free.append(slot)

    def add_pod(self, slot: int, pod: PodInfo) -> None:
        """Account a pod's requests, ports and count on a slot."""
        self._account(slot, pod, 1)
        self.pods[slot][pod.key] = pod

    def remove_pod(self, slot: int, pod: PodInfo) -> None:
        self.set_gpus(slot, pod.key, None)
        self._account(slot, pod, -1)
        del self.pods[slot][pod.key]
        self._release_if_empty(slot)

    def _account(self, slot: int, pod: PodInfo, sign: int) -> None:
        for name, amount in pod.requests.items():
            self.requested[self.resource_row(name), slot] += sign * amount
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

    def set_gpus(self, slot: int, pod_key: str, gpus: tuple[int, ...] | None) -> None:
        """Record (or clear, with None) the GPU indices a pod holds on a slot."""
        sets = self.gpu_sets[slot]
        if gpus is None:
            sets.pop(pod_key, None)
        else:
            sets[pod_key] = gpus
        mask = 0
        for held in sets.values():
            for index in held:
                mask |= 1 << index
        self.gpu_used[slot] = mask
