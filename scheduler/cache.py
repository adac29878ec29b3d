"""The scheduler's cache: bound and assumed pods on nodes, kept in one `Snapshot`.

Pods of every scheduler count: anything bound to a node uses its resources. A pod the
scheduler has chosen a node for is *assumed* at once, so the next cycle sees it, and is
confirmed when the watch reports it bound, or forgotten when binding fails. Succeeded and
Failed pods hold nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from scheduler.model import NodeInfo, PodInfo
from scheduler.snapshot import Snapshot

__all__ = ["Cache", "GPUResolver"]

GPUResolver = Callable[
    [Snapshot, int, PodInfo, "tuple[int, ...] | None", bool], "tuple[int, ...] | None"
]
"""Which GPU indices a pod holds on a slot: (snapshot, slot, pod, set we chose, may guess).

With may-guess False it answers only from records (kubelet assignments, the pod's
annotation, our own choice); with True it also guesses as the device plugin would."""


@dataclass(slots=True)
class _Entry:
    pod: PodInfo
    slot: int
    assumed: bool
    gpus: tuple[int, ...] | None


class Cache:
    """Single owner of node usage; `snapshot` is what plugins read."""

    def __init__(self, gpu_resolver: GPUResolver | None = None) -> None:
        self.snapshot = Snapshot()
        self._pods: dict[str, _Entry] = {}
        self._gpu_resolver = gpu_resolver

    # ------------------------------------------------------------------ nodes

    def add_node(self, node: NodeInfo) -> None:
        slot = self.snapshot.set_node(node)
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
        """A pod as the API reports it: accounted if bound and not terminal, else dropped."""
        old = self._pods.get(pod.key)
        if pod.node_name is None or pod.terminal:
            if old is not None and not old.assumed:
                self._remove(pod.key)
            return
        gpus = None
        if old is not None:
            if old.pod.uid and pod.uid and old.pod.uid != pod.uid:
                old = None  # a new pod under the same name
            elif self.snapshot.names[old.slot] == pod.node_name:
                gpus = old.gpus
        self._remove(pod.key)
        slot = self.snapshot.ensure_slot(pod.node_name)
        self.snapshot.add_pod(slot, pod)
        entry = _Entry(pod, slot, assumed=False, gpus=gpus)
        self._pods[pod.key] = entry
        self._resolve_gpus(slot)

    update_pod = add_pod

    def remove_pod(self, key: str) -> None:
        self._remove(key)

    def _remove(self, key: str) -> None:
        entry = self._pods.pop(key, None)
        if entry is not None:
            self.snapshot.remove_pod(entry.slot, entry.pod)

    def assume(self, pod: PodInfo, node_name: str, gpus: tuple[int, ...] = ()) -> None:
        """Account a pod on the node just chosen for it, before the binding lands."""
        self._remove(pod.key)
        slot = self.snapshot.ensure_slot(node_name)
        self.snapshot.add_pod(slot, pod)
        self._pods[pod.key] = _Entry(pod, slot, assumed=True, gpus=gpus or None)
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

    def gpus_of(self, key: str) -> tuple[int, ...] | None:
        entry = self._pods.get(key)
        return entry.gpus if entry else None

    def _resolve_gpus(self, slot: int) -> None:
        """Recompute which GPUs each pod on a slot holds (after a pod or node change).

        Two passes: first every pod whose set is known (recorded by the kubelet, by us, or
        assumed), then the unknown ones guessed over what is left, oldest first.
        """
        if self._gpu_resolver is None:
            return
        keys = sorted(
            self.snapshot.pods[slot], key=lambda k: (self._pods[k].pod.creation_timestamp, k)
        )
        for key in keys:
            self.snapshot.set_gpus(slot, key, None)
        unknown = []
        for key in keys:
            entry = self._pods[key]
            gpus = self._gpu_resolver(
                self.snapshot, slot, entry.pod, entry.gpus if entry.assumed else None, False
            )
            if gpus is None:
                unknown.append(entry)
            else:
                entry.gpus = gpus
                self.snapshot.set_gpus(slot, key, gpus)
        for entry in unknown:
            entry.gpus = self._gpu_resolver(self.snapshot, slot, entry.pod, None, True)
            self.snapshot.set_gpus(slot, entry.pod.key, entry.gpus)
