"""The scheduler's cache: bound and assumed pods on nodes, kept in one `Snapshot`.

Pods of every scheduler count: anything bound to a node uses its resources. A pod the
scheduler has chosen a node for is *assumed* at once, so the next cycle sees it, and is
confirmed when the watch reports it bound, or forgotten when binding fails. Succeeded and
Failed pods hold nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from scheduler.core.model import NodeInfo, PodInfo
from scheduler.core.snapshot import Snapshot
from scheduler.core.topology.schema import ANNOTATION_GPUS, TopologyError, parse_gpu_indices
from scheduler.core.topology.select import GpuSelector

__all__ = ["GPU_RESOURCE", "Cache", "GPUAccounting", "GPUResolver"]

GPU_RESOURCE = "nvidia.com/gpu"

GPUResolver = Callable[
    [Snapshot, int, PodInfo, "tuple[int, ...] | None", bool], "tuple[int, ...] | None"
]
"""Which GPU indices a pod holds on a slot: (snapshot, slot, pod, set we chose, may guess).

With may-guess False it answers only from records (kubelet assignments, the pod's
annotation, our own choice); with True it also guesses as the device plugin would."""


class GPUAccounting:
    """Which GPUs a bound pod holds, from the best source there is.

    The kubelet's actual assignment (published by the agent on the node) wins; then the set
    we chose for a pod we placed; then the set recorded on the pod's annotation. A GPU
    pod known to none of them (another scheduler's, before the agent reported) is taken to
    hold what NVIDIA's device plugin would have given it from the GPUs still free.
    """

    def __init__(self, resource: str = GPU_RESOURCE, selector: GpuSelector | None = None) -> None:
        self.resource = resource
        self.selector = selector or GpuSelector()

    def __call__(
        self,
        snapshot: Snapshot,
        slot: int,
        pod: PodInfo,
        chosen: tuple[int, ...] | None,
        may_guess: bool,
    ) -> tuple[int, ...] | None:
        count = pod.requests.get(self.resource, 0)
        if count <= 0:
            return None
        reported = snapshot.gpu_assignments[slot].get(pod.uid)
        if reported is not None:
            return reported
        if chosen:  # newer than the pod's annotation, which an earlier attempt may have left
            return chosen
        recorded = pod.annotations.get(ANNOTATION_GPUS)
        if recorded is not None:
            try:
                return parse_gpu_indices(recorded, pod=pod.key)
            except TopologyError:
                pass  # an unreadable record is no record: fall through
        topology = snapshot.gpu_topology[slot]
        if not may_guess or topology is None:
            return None
        free = topology.allocatable_mask & ~int(snapshot.gpu_used[slot])
        return self.selector.device_plugin_set(topology, free, count) or None


@dataclass(slots=True)
class _Entry:
    pod: PodInfo
    slot: int
    assumed: bool
    chosen: tuple[int, ...] | None = None  # the GPU set we chose, when we placed it
    gpus: tuple[int, ...] | None = None  # the GPU set it holds, as resolved
    guessed: bool = False  # resolved as the device plugin would have assigned it


class Cache:
    """Single owner of node usage; `snapshot` is what plugins read."""

    def __init__(self, gpu_resolver: GPUResolver | None = None) -> None:
        self.snapshot = Snapshot()
        self._pods: dict[str, _Entry] = {}
        self._gpu_resolver = gpu_resolver if gpu_resolver is not None else GPUAccounting()

    # ------------------------------------------------------------------ nodes

    def add_node(self, node: NodeInfo) -> None:
        slot = self.snapshot.set_node(node)
        if self.snapshot.gpu_sets[slot] or self._holds_gpus(slot):
            self._resolve_gpus(slot)

    update_node = add_node

    def remove_node(self, name: str) -> None:
        self.snapshot.remove_node(name)

    @property
    def node_count(self) -> int:
        return self.snapshot.live_count

    # ------------------------------------------------------------------ pods

    @property
    def pod_count(self) -> int:
        return len(self._pods)

    def get(self, key: str) -> PodInfo | None:
        entry = self._pods.get(key)
        return entry.pod if entry else None

    def is_assumed(self, key: str) -> bool:
        entry = self._pods.get(key)
        return entry is not None and entry.assumed

    def node_of(self, key: str) -> str | None:
        entry = self._pods.get(key)
        return self.snapshot.names[entry.slot] if entry else None

    def add_pod(self, pod: PodInfo) -> None:
        """A pod as the API reports it: accounted if bound and not terminal, else dropped.

        An assumed pod the API still shows unbound keeps its assumption (the binding is in
        flight); one reported bound is confirmed, on the node the API says.
        """
        old = self._pods.get(pod.key)
        if old is not None and old.pod.uid and pod.uid and old.pod.uid != pod.uid:
            self._remove(pod.key)  # a new pod under the same name
            old = None
        if pod.node_name is None or pod.terminal:
            if old is not None and not (old.assumed and pod.node_name is None):
                self._remove(pod.key)
            return
        chosen = None
        if old is not None and self.snapshot.names[old.slot] == pod.node_name:
            chosen = old.chosen
        self._remove(pod.key)
        slot = self.snapshot.ensure_slot(pod.node_name)
        self.snapshot.add_pod(slot, pod)
        self._pods[pod.key] = _Entry(pod, slot, assumed=False, chosen=chosen)
        if self._requests_gpus(pod) or (old is not None and old.gpus):
            self._resolve_gpus(slot)

    update_pod = add_pod

    def remove_pod(self, key: str) -> None:
        self._remove(key)

    def _remove(self, key: str) -> None:
        entry = self._pods.pop(key, None)
        if entry is not None:
            self.snapshot.remove_pod(entry.slot, entry.pod)
            if entry.gpus and self.snapshot.nodes[entry.slot] is not None:
                self._resolve_gpus(entry.slot)  # a guessed set may now fit elsewhere

    def assume(self, pod: PodInfo, node_name: str, gpus: tuple[int, ...] = ()) -> None:
        """Account a pod on the node just chosen for it, before the binding lands."""
        self._remove(pod.key)
        slot = self.snapshot.ensure_slot(node_name)
        self.snapshot.add_pod(slot, pod)
        entry = _Entry(pod, slot, assumed=True, chosen=gpus or None, gpus=gpus or None)
        self._pods[pod.key] = entry
        if gpus:
            self.snapshot.set_gpus(slot, pod.key, gpus)

    def forget(self, key: str) -> None:
        """Drop an assumption whose binding failed."""
        entry = self._pods.get(key)
        if entry is not None and entry.assumed:
            self._remove(key)

    def confirm(self, key: str) -> None:
        """The binding succeeded: the pod stays accounted until the watch reports it."""
        entry = self._pods.get(key)
        if entry is not None:
            entry.assumed = False

    # ------------------------------------------------------------------ GPUs

    def guessed_gpus(self) -> list[tuple[str, str, tuple[int, ...]]]:
        """(pod, node, GPUs) for pods whose GPUs no one recorded: the device-plugin guess."""
        return sorted(
            (key, self.snapshot.names[e.slot] or "", e.gpus)
            for key, e in self._pods.items()
            if e.guessed and e.gpus
        )

    def _requests_gpus(self, pod: PodInfo) -> bool:
        resource = getattr(self._gpu_resolver, "resource", GPU_RESOURCE)
        return pod.requests.get(resource, 0) > 0

    def _holds_gpus(self, slot: int) -> bool:
        return any(self._requests_gpus(p) for p in self.snapshot.pods[slot].values())

    def _resolve_gpus(self, slot: int) -> None:
        """Recompute which GPUs each pod on a slot holds (after a pod or node change).

        Two passes: first every pod whose set is on record, then the unknown ones guessed
        over what is left, oldest first.
        """
        pods = self.snapshot.pods[slot]
        keys = sorted(pods, key=lambda k: (pods[k].creation_timestamp, k))
        for key in keys:
            self.snapshot.set_gpus(slot, key, None)
        unknown = []
        for key in keys:
            entry = self._pods[key]
            gpus = self._gpu_resolver(self.snapshot, slot, entry.pod, entry.chosen, False)
            if gpus is None:
                unknown.append(entry)
            else:
                entry.gpus = gpus
                entry.guessed = False
                self.snapshot.set_gpus(slot, key, gpus)
        for entry in unknown:
            entry.gpus = self._gpu_resolver(self.snapshot, slot, entry.pod, None, True)
            entry.guessed = entry.gpus is not None
            self.snapshot.set_gpus(slot, entry.pod.key, entry.gpus)
