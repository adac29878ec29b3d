"""The scheduling queue: active, backoff and unschedulable pods, as kube-scheduler keeps them.

Pure: no I/O, time comes from an injected clock. The queue tracks every pod it was given until
the caller deletes it (pod deleted, bound by anyone); a popped pod stays tracked as in flight
until its cycle ends, so no pod is ever silently dropped.

- active: a heap in the QueueSort plugin's order (PrioritySort: priority descending, then
  the time the pod was last added to the queue, as kube's QueuedPodInfo.Timestamp), then
  arrival.
- backoff: pods that failed, waiting `initial * 2**(attempts-1)` capped at `max` seconds.
- unschedulable: pods no node fits; moved back by a relevant cluster event or after
  `max_unschedulable` seconds (kube's podMaxInUnschedulablePodsDuration, 5 min).
"""

from __future__ import annotations

import enum
import heapq
import itertools
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Where(enum.Enum):
    """The sub-queue a tracked pod is in."""

    ACTIVE = "active"
    BACKOFF = "backoff"
    UNSCHEDULABLE = "unschedulable"
    IN_FLIGHT = "in_flight"


class ClusterEvent(enum.Enum):
    """Cluster changes that can make an unschedulable pod schedulable."""

    NODE_ADD = "NodeAdd"
    NODE_UPDATE = "NodeUpdate"
    NODE_TOPOLOGY = "NodeTopologyChange"
    NODE_DELETE = "NodeDelete"
    POD_ADD = "AssignedPodAdd"
    POD_UPDATE = "AssignedPodUpdate"  # a bound pod's labels changed
    POD_DELETE = "AssignedPodDelete"
    NAMESPACE_UPDATE = "NamespaceUpdate"
    CONFIG_CHANGE = "ConfigChange"
    STORAGE_CHANGE = "StorageChange"  # claims, volumes, classes, CSI objects, ResourceClaims
    QUOTA_CHANGE = "ElasticQuotaChange"  # an ElasticQuota added, changed or deleted
    RESERVATION_CHANGE = "ReservationChange"  # a gang reservation moved where it fits now


@dataclass
class QueuedPod(Generic[T]):
    """A pod in the queue: identity, ordering fields and the caller's payload."""

    key: str
    priority: int
    created: float  # creation time, seconds (only compared)
    pod: T
    attempts: int = 0
    since: float = 0.0  # when it entered its current sub-queue
    backoff_until: float = 0.0
    cycle: int = 0  # move-request counter at the time it was popped
    enqueued: float = 0.0  # when it was last added to the queue (kube's QueuedPodInfo.Timestamp)


def eligible(obj: Mapping[str, Any], scheduler_names: set[str] | frozenset[str]) -> bool:
    """A Pod this scheduler must place: its schedulerName, unbound and alive (scheduling
    gates are the SchedulingGates PreEnqueue plugin's to judge)."""
    spec = obj.get("spec") or {}
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    return (
        spec.get("schedulerName", "default-scheduler") in scheduler_names
        and not spec.get("nodeName")
        and not meta.get("deletionTimestamp")
        and status.get("phase") not in ("Succeeded", "Failed")
    )


def _priority_sort(priority: int, created: float) -> tuple[float, ...]:
    return (-priority, created)


class SchedulingQueue(Generic[T]):
    """kube's PriorityQueue, single-threaded: the caller serialises access."""

    def __init__(
        self,
        clock: Callable[[], float],
        initial_backoff: float = 1.0,
        max_backoff: float = 10.0,
        max_unschedulable: float = 300.0,
        sort_key: Callable[[int, float], tuple[float, ...]] | None = None,
    ) -> None:
        self._clock = clock
        # the QueueSort plugin's order (PrioritySort: priority descending, then enqueue time)
        self.sort_key = sort_key or _priority_sort
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.max_unschedulable = max_unschedulable
        self._pods: dict[str, QueuedPod[T]] = {}
        self._where: dict[str, Where] = {}
        self._active: list[tuple[tuple[float, ...], int, str]] = []
        self._active_seq: dict[str, int] = {}
        self._backoff: list[tuple[float, int, str]] = []
        self._backoff_seq: dict[str, int] = {}
        # oldest first; an OrderedDict so that reading and removing the oldest stays O(1) after
        # many removals (a plain dict's iterator skips every deleted slot before the first)
        self._unschedulable: OrderedDict[str, None] = OrderedDict()
        self._seq = itertools.count()
        self._moves = 0  # move requests so far (kube's moveRequestCycle)
        # fair share (`fair`): active pods in one heap per group (namespace), ranked at pop
        self._group_of: Callable[[T], str] | None = None
        self._rank: Callable[[str], float] | None = None
        self._groups: dict[str, list[tuple[tuple[float, ...], int, str]]] = {}

    def fair(self, group_of: Callable[[T], str], rank: Callable[[str], float]) -> None:
        """Fair share between groups (namespaces): among the active pods of the highest
        priority, the one of the group with the lowest `rank` (its dominant share, read at
        each pop) goes first; within a group, and among groups of equal rank, the QueueSort
        order. With every rank equal the order is exactly the QueueSort order."""
        self._group_of, self._rank = group_of, rank
        entries, self._active = self._active, []
        for entry in entries:
            qp = self._pods.get(entry[2])
            if qp is not None:
                heapq.heappush(self._groups.setdefault(group_of(qp.pod), []), entry)

    # -- inspection -----------------------------------------------------------------------

    def __contains__(self, key: object) -> bool:
        return key in self._where

    def __len__(self) -> int:
        return len(self._where)

    def where(self, key: str) -> Where | None:
        return self._where.get(key)

    def get(self, key: str) -> QueuedPod[T] | None:
        return self._pods.get(key)

    def now(self) -> float:
        """The queue's clock (backoff, timeouts and the time a pod was added read it)."""
        return self._clock()

    def tracked(self) -> list[QueuedPod[T]]:
        """Every pod the queue tracks, wherever it is (e.g. a pod group's pending members)."""
        return list(self._pods.values())

    def pending(self) -> dict[str, int]:
        """Pods per sub-queue (kube's scheduler_pending_pods{queue})."""
        active, backoff = len(self._active_seq), len(self._backoff_seq)
        unschedulable = len(self._unschedulable)
        return {
            Where.ACTIVE.value: active,
            Where.BACKOFF.value: backoff,
            Where.UNSCHEDULABLE.value: unschedulable,
            Where.IN_FLIGHT.value: len(self._where) - active - backoff - unschedulable,
        }

    def backoff_duration(self, attempts: int) -> float:
        if attempts <= 0:
            return 0.0
        # the exponent is capped: 2**62 s is far past any max backoff, and never overflows
        return float(min(self.initial_backoff * 2.0 ** min(attempts - 1, 62), self.max_backoff))

    # -- adding and removing --------------------------------------------------------------

    def add(self, key: str, priority: int, created: float, pod: T) -> None:
        """A pending pod was seen: queue it, or refresh it if already tracked."""
        qp = self._pods.get(key)
        if qp is None:
            qp = QueuedPod(key, priority, created, pod, enqueued=self._clock())
            self._pods[key] = qp
            self._to_active(qp)
            return
        self.update(key, priority, pod)

    def update(self, key: str, priority: int, pod: T, changed: bool = True) -> None:
        """The pod object changed; an unschedulable pod whose spec changed gets another try."""
        qp = self._pods.get(key)
        if qp is None:
            return
        reorder = qp.priority != priority
        qp.pod = pod
        qp.priority = priority
        where = self._where[key]
        if where is Where.UNSCHEDULABLE and changed:
            self._to_active_or_backoff(qp)
        elif where is Where.ACTIVE and reorder:
            self._to_active(qp)

    def delete(self, key: str) -> bool:
        """The pod is gone, bound (by us or anyone) or no longer ours: stop tracking it."""
        if key not in self._where:
            return False
        del self._where[key]
        del self._pods[key]
        self._unschedulable.pop(key, None)
        self._active_seq.pop(key, None)
        self._backoff_seq.pop(key, None)
        return True

    # -- the scheduling cycle -------------------------------------------------------------

    def pop(self) -> QueuedPod[T] | None:
        """The highest-priority active pod (after flushing due backoff), now in flight."""
        self.flush()
        while self._active or self._groups:
            if self._groups:
                heap = self._fairest()
                if heap is None:
                    continue
                _, seq, key = heapq.heappop(heap)
            else:
                _, seq, key = heapq.heappop(self._active)
            if self._active_seq.get(key) != seq:
                continue  # stale heap entry
            del self._active_seq[key]
            qp = self._pods[key]
            qp.attempts += 1
            qp.cycle = self._moves
            qp.since = self._clock()
            self._where[key] = Where.IN_FLIGHT
            return qp
        return None

    def _fairest(self) -> list[tuple[tuple[float, ...], int, str]] | None:
        """The group heap whose top goes next (stale tops and empty heaps dropped first)."""
        assert self._rank is not None
        best: tuple[Any, ...] | None = None
        chosen = None
        for group, heap in list(self._groups.items()):
            while heap and self._active_seq.get(heap[0][2]) != heap[0][1]:
                heapq.heappop(heap)
            if not heap:
                del self._groups[group]
                continue
            sort_key, seq, _ = heap[0]
            rank = (sort_key[0], self._rank(group), sort_key[1:], seq)
            if best is None or rank < best:
                best, chosen = rank, heap
        return chosen

    def unschedulable(self, key: str) -> bool:
        """An in-flight pod fits no node: park it until a cluster event (or a move since)."""
        qp = self._pods.get(key)
        if qp is None or self._where[key] is not Where.IN_FLIGHT:
            return False
        qp.enqueued = self._clock()  # re-added: kube refreshes the timestamp
        if qp.cycle < self._moves:
            # the cluster changed while this pod was being scheduled: retry after backoff
            self._to_backoff(qp)
        else:
            qp.since = self._clock()
            qp.backoff_until = qp.since + self.backoff_duration(qp.attempts)
            self._where[key] = Where.UNSCHEDULABLE
            self._unschedulable[key] = None
        return True

    def retry(self, key: str, priority: int | None = None) -> bool:
        """An in-flight pod hit an error (bind failed, API error): retry after its backoff,
        optionally with another priority (a pod group member's: the group's). Every retry
        goes through here or `unschedulable`: nothing goes back to active without backoff."""
        qp = self._pods.get(key)
        if qp is None or self._where[key] is not Where.IN_FLIGHT:
            return False
        if priority is not None:
            qp.priority = priority
        qp.enqueued = self._clock()
        self._to_backoff(qp)
        return True

    def take(self, key: str) -> QueuedPod[T] | None:
        """Put a waiting pod (active, backoff or unschedulable) in flight with the pod just
        popped: a pod group's members are scheduled together. None if it is not waiting."""
        qp = self._pods.get(key)
        if qp is None or self._where[key] is Where.IN_FLIGHT:
            return None
        self._unschedulable.pop(key, None)
        self._active_seq.pop(key, None)
        self._backoff_seq.pop(key, None)
        qp.attempts += 1
        qp.cycle = self._moves
        qp.since = self._clock()
        self._where[key] = Where.IN_FLIGHT
        return qp

    def move_all(self, event: ClusterEvent, *, except_key: str | None = None) -> int:
        """A cluster event that may help: every unschedulable pod goes back (backoff honoured),
        but `except_key` (the pod whose own failure caused the event)."""
        self._moves += 1
        moved = [key for key in self._unschedulable if key != except_key]
        for key in moved:
            self._to_active_or_backoff(self._pods[key])
        return len(moved)

    def move_if(self, event: ClusterEvent, helps: Callable[[T], bool]) -> int:
        """A cluster event that can help only some pods (kube's queueing hints, coarsely):
        the unschedulable pods for which `helps(pod)` holds go back (backoff honoured)."""
        self._moves += 1
        moved = [key for key in self._unschedulable if helps(self._pods[key].pod)]
        for key in moved:
            self._to_active_or_backoff(self._pods[key])
        return len(moved)

    def move_keys(self, keys: Iterable[str], event: ClusterEvent) -> int:
        """A cluster event that concerns only these pods (their pod group's object changed):
        those that are unschedulable go back (backoff honoured)."""
        self._moves += 1
        moved = [key for key in keys if key in self._unschedulable]
        for key in moved:
            self._to_active_or_backoff(self._pods[key])
        return len(moved)

    def flush(self) -> None:
        """Move due backoff pods to active and stale unschedulable pods back (5 min)."""
        now = self._clock()
        while self._backoff and self._backoff[0][0] <= now:
            _, seq, key = heapq.heappop(self._backoff)
            if self._backoff_seq.get(key) != seq:
                continue
            del self._backoff_seq[key]
            self._to_active(self._pods[key])
        # oldest first, stop at the first not yet due: O(moved) per call, no copy (every pop
        # calls this; with tens of thousands of unschedulable pods a copy dominated the pop)
        while self._unschedulable:
            qp = self._pods[next(iter(self._unschedulable))]
            if qp.since + self.max_unschedulable > now:
                break  # the rest are younger (same due-time test as next_wakeup)
            self._to_active_or_backoff(qp)  # removes it from _unschedulable

    def next_wakeup(self) -> float | None:
        """Seconds until something becomes poppable without an event (0 if now; None: never)."""
        if self._active_seq:
            return 0.0
        now = self._clock()
        times = [self._backoff[0][0] - now] if self._backoff else []
        if self._unschedulable:
            oldest = self._pods[next(iter(self._unschedulable))]
            times.append(oldest.since + self.max_unschedulable - now)
        return max(0.0, min(times)) if times else None

    # -- internals ------------------------------------------------------------------------

    def _to_active(self, qp: QueuedPod[T]) -> None:
        self._unschedulable.pop(qp.key, None)
        self._backoff_seq.pop(qp.key, None)
        seq = next(self._seq)
        self._active_seq[qp.key] = seq
        self._where[qp.key] = Where.ACTIVE
        qp.since = self._clock()
        entry = (self.sort_key(qp.priority, qp.enqueued), seq, qp.key)
        if self._group_of is not None:
            heapq.heappush(self._groups.setdefault(self._group_of(qp.pod), []), entry)
        else:
            heapq.heappush(self._active, entry)

    def _to_backoff(self, qp: QueuedPod[T]) -> None:
        self._unschedulable.pop(qp.key, None)
        self._active_seq.pop(qp.key, None)
        now = self._clock()
        qp.since = now
        qp.backoff_until = now + self.backoff_duration(qp.attempts)
        seq = next(self._seq)
        self._backoff_seq[qp.key] = seq
        self._where[qp.key] = Where.BACKOFF
        heapq.heappush(self._backoff, (qp.backoff_until, seq, qp.key))

    def _to_active_or_backoff(self, qp: QueuedPod[T]) -> None:
        if qp.backoff_until > self._clock():
            self._to_backoff_until(qp, qp.backoff_until)
        else:
            self._to_active(qp)

    def _to_backoff_until(self, qp: QueuedPod[T], until: float) -> None:
        self._unschedulable.pop(qp.key, None)
        self._active_seq.pop(qp.key, None)
        qp.since = self._clock()
        seq = next(self._seq)
        self._backoff_seq[qp.key] = seq
        self._where[qp.key] = Where.BACKOFF
        heapq.heappush(self._backoff, (until, seq, qp.key))
