"""The GPU state of the cluster, with one owner.

Per snapshot slot: the node's parsed topology (None when absent or invalid, the problem kept
for `explain` and the logs: such a node is count-only), the kubelet's actual assignments
reported by the agent, the GPU set each pod holds and the bitmask of used GPUs; and the rule
that decides which set a pod holds, from the best source there is:

1. the kubelet's assignment (`topo-scheduler.io/gpu-assignments` on the node), else
2. the set this scheduler chose for a pod it placed, else
3. the set recorded on the pod (`topo-scheduler.io/gpus`), else
4. what NVIDIA's device plugin would have given it from the GPUs still free (a guess, for
   GPU pods of other schedulers before the agent reports them).

The snapshot holds one `GpuState` and grows its columns with its own; the cache is the only
writer of both. The GPU resource name is the profile's GPUTopology `resourceName`.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from scheduler.core.model import NodeInfo, PodInfo
from scheduler.core.topology.schema import (
    ANNOTATION_ASSIGNMENTS,
    ANNOTATION_GPUS,
    ANNOTATION_TOPOLOGY,
    GPU_RESOURCE,
    Topology,
    TopologyError,
    parse_assignments,
    parse_gpu_indices,
    parse_topology,
)
from scheduler.core.topology.select import GpuSelector

__all__ = ["GPU_RESOURCE", "GpuState", "Holder"]

IntArray = npt.NDArray[np.int64]

Holder = tuple[PodInfo, "tuple[int, ...] | None"]
"""A pod on a slot and the GPU set this scheduler chose for it (None when it did not)."""


class GpuState:
    """GPU columns and lists per slot, the annotation parsing, and set resolution."""

    def __init__(self, resource: str = GPU_RESOURCE, selector: GpuSelector | None = None) -> None:
        self.resource = resource
        self.selector = selector or GpuSelector()
        self._used_buffer = np.zeros(0, np.int64)
        self._topology_id_buffer = np.full(0, -1, np.int64)
        self.used: IntArray = self._used_buffer  # bitmask of GPU indices held by pods
        self.topology_id: IntArray = self._topology_id_buffer  # index into `topologies`, -1
        self.topology: list[Topology | None] = []
        self.problem: list[str | None] = []
        self._topology_problem: list[str | None] = []
        self._assignments_problem: list[str | None] = []
        self.assignments: list[dict[str, tuple[int, ...]]] = []  # pod UID -> indices
        self.sets: list[dict[str, tuple[int, ...]]] = []  # pod key -> indices it holds
        self.topologies: list[Topology] = []  # distinct topologies, shared by their nodes
        self._topology_ids: dict[str, int] = {}
        # Bumped on every change (topologies, GPUs held, slots), so a plugin can reuse what it
        # computed from this state while it stays the same.
        self.version = 0

    # ------------------------------------------------------------------ columns

    def grow(self, size: int) -> None:
        """Reallocate the column buffers to `size` slots, keeping their contents."""
        used = np.zeros(size, np.int64)
        topology_id = np.full(size, -1, np.int64)
        n = len(self._used_buffer)
        used[:n] = self._used_buffer
        topology_id[:n] = self._topology_id_buffer
        self._used_buffer, self._topology_id_buffer = used, topology_id

    def view(self, capacity: int) -> None:
        """Columns cover exactly the slots in use (views of the larger buffers)."""
        self.used = self._used_buffer[:capacity]
        self.topology_id = self._topology_id_buffer[:capacity]

    def add_slot(self) -> None:
        self.version += 1
        self.topology.append(None)
        self.problem.append(None)
        self._topology_problem.append(None)
        self._assignments_problem.append(None)
        self.assignments.append({})
        self.sets.append({})

    def release(self, slot: int) -> None:
        self.used[slot] = 0

    # ------------------------------------------------------------------ nodes

    def set_node(self, slot: int, old: NodeInfo | None, info: NodeInfo) -> None:
        """Parse the node's GPU annotations when they changed; an invalid topology leaves
        the node count-only, the problem kept."""
        if old is not None and old.annotations == info.annotations:
            return
        self.version += 1
        text = info.annotations.get(ANNOTATION_TOPOLOGY)
        if old is None or old.annotations.get(ANNOTATION_TOPOLOGY) != text:
            topology: Topology | None = None
            self._topology_problem[slot] = None
            if text is not None:
                try:
                    topology = parse_topology(text, node=info.name)
                except TopologyError as exc:
                    self._topology_problem[slot] = str(exc)
            self.topology[slot] = topology
            self.topology_id[slot] = -1 if topology is None else self._topology_index(topology)
        text = info.annotations.get(ANNOTATION_ASSIGNMENTS)
        if old is None or old.annotations.get(ANNOTATION_ASSIGNMENTS) != text:
            self._assignments_problem[slot] = None
            assignments: dict[str, tuple[int, ...]] = {}
            if text is not None:
                try:
                    assignments = parse_assignments(text, node=info.name)
                except TopologyError as exc:
                    self._assignments_problem[slot] = str(exc)
            self.assignments[slot] = assignments
        problems = [p for p in (self._topology_problem[slot], self._assignments_problem[slot]) if p]
        self.problem[slot] = "; ".join(problems) or None

    def copy_node(self, slot: int, source: GpuState, source_slot: int) -> None:
        """Take a node's parsed GPU state from another GpuState (a copy of one node, for
        trying evictions, without parsing its annotations again)."""
        self.version += 1
        topology = source.topology[source_slot]
        self.topology[slot] = topology
        self.topology_id[slot] = -1 if topology is None else self._topology_index(topology)
        self.problem[slot] = source.problem[source_slot]
        self._topology_problem[slot] = source._topology_problem[source_slot]
        self._assignments_problem[slot] = source._assignments_problem[source_slot]
        self.assignments[slot] = dict(source.assignments[source_slot])

    def clear_node(self, slot: int) -> None:
        self.version += 1
        self.topology[slot] = None
        self.problem[slot] = None
        self._topology_problem[slot] = None
        self._assignments_problem[slot] = None
        self.assignments[slot] = {}
        self.topology_id[slot] = -1

    def _topology_index(self, topology: Topology) -> int:
        index = self._topology_ids.get(topology.key)
        if index is None:
            index = len(self.topologies)
            self.topologies.append(topology)
            self._topology_ids[topology.key] = index
        return index

    # ------------------------------------------------------------------ pods

    def count(self, pod: PodInfo) -> int:
        """GPUs the pod asks for (of this state's resource)."""
        return int(pod.requests.get(self.resource, 0))

    def set_pod(self, slot: int, pod_key: str, gpus: tuple[int, ...] | None) -> None:
        """Record (or clear, with None) the GPU indices a pod holds on a slot."""
        self.version += 1
        sets = self.sets[slot]
        if gpus is None:
            sets.pop(pod_key, None)
        else:
            sets[pod_key] = gpus
        mask = 0
        for held in sets.values():
            for index in held:
                mask |= 1 << index
        self.used[slot] = mask

    def free_mask(self, slot: int) -> int:
        """Allocatable GPUs not held by any pod (0 on a count-only node)."""
        topology = self.topology[slot]
        if topology is None:
            return 0
        return topology.allocatable_mask & ~int(self.used[slot])

    def _recorded(
        self, slot: int, pod: PodInfo, chosen: tuple[int, ...] | None
    ) -> tuple[int, ...] | None:
        """The set a GPU pod holds by the records (sources 1-3), or None."""
        reported = self.assignments[slot].get(pod.uid)
        if reported is not None:
            return reported
        if chosen:  # newer than the pod's annotation, which an earlier attempt may have left
            return chosen
        recorded = pod.annotations.get(ANNOTATION_GPUS)
        if recorded is None:
            return None
        try:
            gpus = parse_gpu_indices(recorded, pod=pod.key)
        except TopologyError:
            return None  # an unreadable record is no record
        # Nor is one that cannot be the pod's: another count of GPUs than it holds, or GPUs
        # the node does not have. The pod is then guessed like an unrecorded one, and its
        # count is held against the node either way.
        topology = self.topology[slot]
        if len(gpus) != self.count(pod) or (
            topology is not None and any(index >= topology.size for index in gpus)
        ):
            return None
        return gpus

    def resolve(self, slot: int, holders: Iterable[Holder]) -> set[str]:
        """Recompute which GPUs each GPU pod on a slot holds (after a pod or node change);
        returns the keys whose set is a device-plugin guess.

        Two passes: first every pod whose set is on record, then the unknown ones guessed over
        what is left, oldest first.
        """
        pods = sorted(
            ((pod, chosen) for pod, chosen in holders if self.count(pod) > 0),
            key=lambda holder: (holder[0].creation_timestamp, holder[0].key),
        )
        for pod, _ in pods:
            self.set_pod(slot, pod.key, None)
        unknown = []
        for pod, chosen in pods:
            gpus = self._recorded(slot, pod, chosen)
            if gpus is None:
                unknown.append(pod)
            else:
                self.set_pod(slot, pod.key, gpus)
        guessed: set[str] = set()
        topology = self.topology[slot]
        for pod in unknown:
            if topology is None:
                continue
            gpus = self.selector.device_plugin_set(topology, self.free_mask(slot), self.count(pod))
            if gpus:
                self.set_pod(slot, pod.key, gpus)
                guessed.add(pod.key)
        return guessed
