"""The scheduler's cache: bound and assumed pods on nodes, kept in one `Snapshot`.

Pods of every scheduler count: anything bound to a node uses its resources. A pod the
scheduler has chosen a node for is *assumed* at once, so the next cycle sees it, and is
confirmed when the watch reports it bound, or forgotten when binding fails. Succeeded and
Failed pods hold nothing. Which GPUs each pod holds is decided by the snapshot's `GpuState`.

What cannot be read is kept with what can be: a bound pod with unreadable parts counts with
every resource it holds (`PodInfo.unreadable` says what was left out), and a node whose object
cannot be read takes no pods until it can (`set_unreadable_node`) while its pods still count.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from scheduler.core.disruption import DisruptionBudget
from scheduler.core.model import NamespaceInfo, NodeInfo, PodInfo, WorkloadInfo
from scheduler.core.nominator import Nomination
from scheduler.core.quota import ElasticQuota
from scheduler.core.snapshot import Snapshot
from scheduler.core.topology.state import GPU_RESOURCE, GpuState

__all__ = ["GPU_RESOURCE", "Cache"]


@dataclass(slots=True)
class _Entry:
    pod: PodInfo
    slot: int
    assumed: bool
    chosen: tuple[int, ...] | None = None  # the GPU set we chose, when we placed it
    guessed: bool = False  # its GPUs are the device-plugin guess (no record of them)


class Cache:
    """Single owner of node usage; `snapshot` is what plugins read."""

    def __init__(self, gpu_resource: str = GPU_RESOURCE) -> None:
        self.snapshot = Snapshot(GpuState(gpu_resource))
        self._pods: dict[str, _Entry] = {}
        self.budgets: dict[str, DisruptionBudget] = {}  # PodDisruptionBudgets, by ns/name
        self.unreadable_nodes: dict[str, str] = {}  # node name -> why it cannot be read

    @property
    def gpus(self) -> GpuState:
        return self.snapshot.gpus

    # ------------------------------------------------------------------ nodes

    def add_node(self, node: NodeInfo) -> None:
        self.unreadable_nodes.pop(node.name, None)
        version = self.gpus.version
        slot = self.snapshot.set_node(node)
        # the pods' GPU sets depend on the node only through its GPU annotations: a status
        # heartbeat (nothing GPU-related changed, version kept) needs no new resolve
        if self.gpus.version != version and (self.gpus.sets[slot] or self._holds_gpus(slot)):
            self._resolve_gpus(slot)

    update_node = add_node

    def remove_node(self, name: str) -> None:
        self.unreadable_nodes.pop(name, None)
        self.snapshot.remove_node(name)

    def set_unreadable_node(self, name: str, problem: str) -> None:
        """A node whose object cannot be read (`problem` names the field): no pod is placed
        on it until it can be. Its declared state is forgotten (its slot is not live, as a
        deleted node's), so no decision rests on a stale copy, while the pods bound to it
        still count there and count again on it once it is read."""
        self.snapshot.remove_node(name)
        self.unreadable_nodes[name] = problem

    def unreadable(self) -> list[str]:
        """What could not be read, one line each (for `explain` and the logs): bound pods
        counted without the parts left out, nodes no pod is placed on."""
        out = [
            f"node {name}: not understood, no pod is placed on it: {problem}"
            for name, problem in sorted(self.unreadable_nodes.items())
        ]
        for key, problem in sorted(self.snapshot.quotas.unreadable.items()):
            known = key in self.snapshot.quotas.objects
            kept = "its last good version is in force" if known else "it is not in force"
            out.append(f"ElasticQuota {key}: not understood, {kept}: {problem}")
        for key, entry in sorted(self._pods.items()):
            if entry.pod.unreadable:
                node = self.snapshot.names[entry.slot]
                left_out = "; ".join(entry.pod.unreadable)
                out.append(f"pod {key} on {node}: counted with what could be read; {left_out}")
        return out

    # ------------------------------------------------------------------ namespaces

    def add_namespace(self, namespace: NamespaceInfo) -> None:
        self.snapshot.set_namespace(namespace.name, namespace.labels)

    update_namespace = add_namespace

    def remove_namespace(self, name: str) -> None:
        self.snapshot.set_namespace(name, None)

    def add_workload(self, workload: WorkloadInfo) -> None:
        """A Service, ReplicationController, ReplicaSet or StatefulSet (its selector)."""
        self.snapshot.set_workload(workload)

    def remove_workload(self, kind: str, namespace: str, name: str) -> None:
        self.snapshot.remove_workload(kind, namespace, name)

    # ------------------------------------------------------------------ quotas

    def add_quota(self, quota: ElasticQuota) -> None:
        """An ElasticQuota from the watch (or a snapshot file): in force for its namespace
        (the first one there), its usage counted from the pods on nodes."""
        self.snapshot.quotas.set_quota(quota, self.snapshot.bound_pods())

    update_quota = add_quota

    def remove_quota(self, namespace: str, name: str) -> None:
        self.snapshot.quotas.remove_quota(namespace, name, self.snapshot.bound_pods())

    def set_unreadable_quota(self, namespace: str, name: str, problem: str) -> bool:
        """An ElasticQuota whose latest version cannot be read (`problem` names the field):
        the last good version stays in force (none: the namespace has no quota). True when
        the problem is new (to be logged once)."""
        return self.snapshot.quotas.set_unreadable(namespace, name, problem)

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

    def gpus_held(self, key: str) -> tuple[int, ...] | None:
        """The GPU set a cached pod holds, as resolved."""
        entry = self._pods.get(key)
        return self.gpus.sets[entry.slot].get(key) if entry else None

    def add_pod(self, pod: PodInfo) -> None:
        """A pod as the API reports it: accounted if bound and not terminal, else dropped.

        An assumed pod the API still shows unbound keeps its assumption (the binding is in
        flight); one reported bound is confirmed, on the node the API says, keeping the GPU
        set we chose for it when it is the node we chose.
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
        held_before = False
        if old is not None:
            held_before = pod.key in self.gpus.sets[old.slot]
            if self.snapshot.names[old.slot] == pod.node_name:
                chosen = old.chosen
        self._remove(pod.key)
        slot = self.snapshot.ensure_slot(pod.node_name)
        self.snapshot.add_pod(slot, pod)
        self._pods[pod.key] = _Entry(pod, slot, assumed=False, chosen=chosen)
        if self.gpus.count(pod) > 0 or held_before:
            self._resolve_gpus(slot)

    update_pod = add_pod

    def remove_pod(self, key: str) -> None:
        self._remove(key)

    def _remove(self, key: str) -> None:
        entry = self._pods.pop(key, None)
        if entry is not None:
            held = key in self.gpus.sets[entry.slot]
            self.snapshot.remove_pod(entry.slot, entry.pod)
            if held and self.snapshot.nodes[entry.slot] is not None:
                self._resolve_gpus(entry.slot)  # a guessed set may now fit elsewhere

    def assume(self, pod: PodInfo, node_name: str, gpus: tuple[int, ...] = ()) -> None:
        """Account a pod on the node just chosen for it, with its GPU set, before the binding
        lands. The set is remembered as ours: it outranks a stale annotation on the pod."""
        self._remove(pod.key)
        slot = self.snapshot.ensure_slot(node_name)
        self.snapshot.add_pod(slot, pod)
        self._pods[pod.key] = _Entry(pod, slot, assumed=True, chosen=gpus or None)
        if gpus:
            self.gpus.set_pod(slot, pod.key, gpus)

    def forget(self, key: str) -> None:
        """Drop an assumption whose binding failed."""
        entry = self._pods.get(key)
        if entry is not None and entry.assumed:
            self._remove(key)

    def recount(self, key: str) -> None:
        """A pod the cache holds on a node counts against its namespace's quota again (an
        Unreserve run after the watch had confirmed its binding took it out)."""
        entry = self._pods.get(key)
        if entry is not None and self.snapshot.quotas.quotas:
            self.snapshot.quotas.add_pod(entry.pod)

    def confirm(self, key: str) -> None:
        """The binding succeeded: the pod stays accounted until the watch reports it."""
        entry = self._pods.get(key)
        if entry is not None:
            entry.assumed = False

    # ------------------------------------------------------------------ GPUs

    def guessed_gpus(self) -> list[tuple[str, str, tuple[int, ...]]]:
        """(pod, node, GPUs) for pods whose GPUs no one recorded: the device-plugin guess."""
        out = []
        for key, e in self._pods.items():
            held = self.gpus.sets[e.slot].get(key)
            if e.guessed and held:
                out.append((key, self.snapshot.names[e.slot] or "", held))
        return sorted(out)

    def _holds_gpus(self, slot: int) -> bool:
        return any(self.gpus.count(p) > 0 for p in self.snapshot.pods[slot].values())

    def _resolve_gpus(self, slot: int) -> None:
        entries = [self._pods[key] for key in self.snapshot.pods[slot]]
        guessed = self.gpus.resolve(slot, ((e.pod, e.chosen) for e in entries))
        for entry in entries:
            entry.guessed = entry.pod.key in guessed

    # ------------------------------------------------------------------ preemption

    def set_budget(self, budget: DisruptionBudget) -> None:
        self.budgets[budget.key] = budget

    def remove_budget(self, key: str) -> None:
        self.budgets.pop(key, None)

    @contextmanager
    def nominated(self, nominations: Iterable[Nomination], priority: int) -> Iterator[None]:
        """For the duration of a decision for a pod of `priority`: the nominated pods of at
        least that priority counted on their nodes (with their GPU sets), as kube's scheduler
        counts them, and every nominated pod handed to the quotas, which count them apart
        (CapacityScheduling: by namespace and quota, whatever their priority). The snapshot is
        as before afterwards. Pods already cached (assumed, bound) are not added twice."""
        added: list[tuple[int, PodInfo]] = []
        waiting: list[PodInfo] = []
        quotas = self.snapshot.quotas
        try:
            for nomination in nominations:
                slot = self.snapshot.index.get(nomination.node)
                pod = nomination.pod
                if slot is None or not self.snapshot.live[slot] or pod.key in self._pods:
                    continue
                waiting.append(pod)
                if pod.priority < priority:
                    continue
                # not quota usage: CapacityScheduling counts nominated pods apart
                self.snapshot.add_pod(slot, pod, quota=False)
                added.append((slot, pod))
                if nomination.gpus:
                    self.gpus.set_pod(slot, pod.key, nomination.gpus)
            quotas.nominated = tuple(waiting)
            yield
        finally:
            quotas.nominated = ()
            for slot, pod in reversed(added):
                self.snapshot.remove_pod(slot, pod, quota=False)
