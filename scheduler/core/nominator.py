"""The nominator: pods that preempted others and wait for their victims to go.

kube-scheduler keeps, for each node, the pods nominated to it (`status.nominatedNodeName`) and
counts them on that node while it schedules any pod of lower or equal priority, so the room
freed by preemption is not taken by a smaller pod meanwhile. The nominated pod itself, and
pods of higher priority, do not see them. A nomination ends when the pod is assumed, deleted,
or its nomination is cleared (a higher-priority pod preempted on the same node).
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.core.model import PodInfo

__all__ = ["Nomination", "Nominator"]


@dataclass(frozen=True, slots=True)
class Nomination:
    pod: PodInfo
    node: str
    gpus: tuple[int, ...] = ()  # the GPU set preemption freed for it, when known
    inherited: bool = False  # read from the API, not made by this scheduler (a former leader's)


class Nominator:
    """Nominations by pod key (one per pod)."""

    def __init__(self) -> None:
        self._by_pod: dict[str, Nomination] = {}

    def add(self, pod: PodInfo, node: str, gpus: tuple[int, ...] = ()) -> None:
        self._by_pod[pod.key] = Nomination(pod, node, gpus)

    def observe(self, pod: PodInfo) -> None:
        """A pending pod as the API reports it: its `status.nominatedNodeName` nominates it
        (the GPU set and whether it is inherited are kept when the node is the one already
        known: the API reporting this scheduler's own nomination back)."""
        node = pod.nominated_node_name
        if node is None:
            return
        old = self._by_pod.get(pod.key)
        if old is not None and old.node == node:
            self._by_pod[pod.key] = Nomination(pod, node, old.gpus, old.inherited)
        else:
            self._by_pod[pod.key] = Nomination(pod, node, inherited=True)

    def remove(self, key: str) -> Nomination | None:
        return self._by_pod.pop(key, None)

    def get(self, key: str) -> Nomination | None:
        return self._by_pod.get(key)

    def on_node(self, node: str) -> list[Nomination]:
        return sorted((n for n in self._by_pod.values() if n.node == node), key=lambda n: n.pod.key)

    def others(self, pod: PodInfo) -> list[Nomination]:
        """Every nomination but the pod's own: those of priority >= its own hold room against
        it on their nodes, and all count against quotas (`Cache.nominated`)."""
        return sorted((n for key, n in self._by_pod.items() if key != pod.key), key=_by_key)


def _by_key(nomination: Nomination) -> str:
    return nomination.pod.key
