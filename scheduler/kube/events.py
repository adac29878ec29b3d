"""events.k8s.io/v1 Events, sent in the background, deduplicated and rate limited.

Like kube-scheduler's event broadcaster (client-go `tools/events`): Events go through their
own client (its own token bucket and connections, so they never take a binding's turn), and
recording never blocks a scheduling cycle. The same (object, reason, note) within
`dedup_window` is sent once and counted as a repeat (the object is identified by its UID too,
so a recreated object starts afresh), and each object gets at most `burst` events, refilled one
per `refill` seconds (kube's spam filter: 25, one per 5 minutes).

The buffer. client-go's broadcaster queues 1,000 Events in a channel, but its sink drains that
channel at once, one goroutine per Event, and the goroutines wait for the event client's rate
limit: what kube-scheduler holds is bounded only by its memory. Here the Events wait in one
bounded queue of `MAX_QUEUED_EVENTS` (10,000: two 5,000-pod bursts, about 1.3 KB each with
its dedup entry), kept as the few values an Event is built from, and `EVENT_POSTS` (16) posts
are in flight at once, paced by the event client's token bucket. A burst of up to 10,000
Events is never dropped, however slow the API server; beyond that an Event is dropped,
counted (`topo_scheduler_events_dropped_total{reason="queue_full"}`) and logged: one warning
when a burst first overflows, one line with the count once the queue has drained to half.
A failed post is retried a few times (transport errors, 5xx, 429), then dropped and counted.
"""

from __future__ import annotations

import asyncio
import math
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from scheduler.kube.client import ApiError, KubeClient
from scheduler.kube.metrics import Metrics

Obj = dict[str, Any]
log = structlog.get_logger("topo_scheduler.events")

COMPONENT = "topo-scheduler"
MAX_QUEUED_EVENTS = 10_000  # Events waiting to be posted; more are dropped and counted
EVENT_POSTS = 16  # Event posts in flight at once (`Options.event_workers`)
EXPIRE_ABOVE = 50_000  # dedup and rate-limit entries kept before the expired ones are swept


def micro_time(ts: float | None = None) -> str:
    """kube's MicroTime: RFC 3339 with microseconds, UTC (one per Event: kept cheap)."""
    fraction, seconds = math.modf(time.time() if ts is None else ts)
    micros = round(fraction * 1_000_000)  # rounded as datetime.fromtimestamp rounds
    if micros >= 1_000_000:
        seconds, micros = seconds + 1, micros - 1_000_000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{micros:06d}Z"


def rfc3339(ts: float | None = None) -> str:
    """kube's Time: RFC 3339 to the second, UTC (conditions, PodGroup status)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if ts is None else ts))


@dataclass(frozen=True)
class ObjectRef:
    """What an Event is about (`regarding`)."""

    kind: str
    namespace: str
    name: str
    uid: str = ""
    api_version: str = "v1"

    def as_dict(self) -> Obj:
        out: Obj = {
            "kind": self.kind,
            "apiVersion": self.api_version,
            "namespace": self.namespace,
            "name": self.name,
        }
        if self.uid:
            out["uid"] = self.uid
        return out


@dataclass(frozen=True, slots=True)
class _Pending:
    """One queued Event: what its body is built from when it is posted."""

    ref: ObjectRef
    type: str
    reason: str
    action: str
    note: str
    at: float  # time.time() when recorded: the Event's eventTime and name


@dataclass
class _Bucket:
    tokens: float
    last: float


class EventRecorder:
    """Queues Events and posts them from one background task."""

    def __init__(
        self,
        client: KubeClient,
        *,
        instance: str | None = None,
        queue_size: int = MAX_QUEUED_EVENTS,
        dedup_window: float = 600.0,
        burst: int = 25,
        refill: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        metrics: Metrics | None = None,
        tries: int = 3,
        retry_delay: float = 1.0,
    ) -> None:
        self.client = client
        self.metrics = metrics
        self.tries = max(1, tries)
        self.retry_delay = retry_delay
        self.core_v1 = False  # the server lacks events.k8s.io/v1 (< 1.19): core/v1 Events
        self.instance = instance or f"{COMPONENT}-{socket.gethostname()}"
        self.capacity = queue_size
        self.queue: asyncio.Queue[_Pending] = asyncio.Queue(queue_size)
        self.dedup_window = dedup_window
        self.burst = burst
        self.refill = refill
        self.clock = clock
        self._seen: dict[tuple[str, str, str, str, str], float] = {}
        self._buckets: dict[tuple[str, str], _Bucket] = {}
        self._expire_above = EXPIRE_ABOVE
        self.sent = 0
        self.dropped = 0  # lost to a full queue, or still queued at shutdown
        self.suppressed = 0  # deduplicated or rate limited
        self.failed = 0  # given up after `tries` posts
        self.burst_dropped = 0  # dropped since the queue last had room to spare

    def _count_drop(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.events_dropped.labels(reason).inc()

    def _allow(self, ref: ObjectRef, reason: str, note: str) -> bool:
        now = self.clock()
        key = (ref.namespace, ref.name, ref.uid, reason, note)
        last = self._seen.get(key)
        if last is not None and now - last < self.dedup_window:
            return False
        obj = (ref.namespace, ref.name)
        bucket = self._buckets.get(obj)
        if bucket is None:
            bucket = self._buckets[obj] = _Bucket(float(self.burst), now)
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.last) / self.refill)
        bucket.last = now
        if bucket.tokens < 1.0:
            return False
        bucket.tokens -= 1.0
        self._seen[key] = now
        if max(len(self._seen), len(self._buckets)) > self._expire_above:
            self._expire(now)
        return True

    def _expire(self, now: float) -> None:
        self._seen = {k: t for k, t in self._seen.items() if now - t < self.dedup_window}
        self._buckets = {
            k: b for k, b in self._buckets.items() if now - b.last < self.refill * self.burst
        }
        # entries all inside the window stay: the next sweep waits until they double, so a
        # storm costs each Event a constant share of the sweeps, not one sweep each
        self._expire_above = max(EXPIRE_ABOVE, 2 * len(self._seen), 2 * len(self._buckets))

    def forget(self, namespace: str, name: str) -> None:
        """The object is gone: drop its rate-limit bucket.

        Its dedup entries are keyed by UID as well, so an object recreated under the same name
        (a new UID) is not deduplicated against them; they expire with the dedup window.
        """
        self._buckets.pop((namespace, name), None)

    def record(self, ref: ObjectRef, type_: str, reason: str, action: str, note: str) -> bool:
        """Queue one Event; False when deduplicated, rate limited or the queue is full."""
        if not self._allow(ref, reason, note):
            self.suppressed += 1
            if self.metrics is not None:
                self.metrics.events_aggregated.inc()
            return False
        try:
            self.queue.put_nowait(_Pending(ref, type_, reason, action, note, time.time()))
        except asyncio.QueueFull:
            self._queue_full(ref, reason)
            return False
        return True

    def _queue_full(self, ref: ObjectRef, reason: str) -> None:
        self.dropped += 1
        self._count_drop("queue_full")
        self.burst_dropped += 1
        if self.burst_dropped == 1:  # once per burst; the count follows when it has drained
            log.warning(
                "event queue full, events dropped until it drains",
                capacity=self.capacity,
                first_reason=reason,
                first_object=f"{ref.namespace}/{ref.name}",
            )

    def _drained(self) -> None:
        """The queue is back to half its capacity: the burst's drops, in one line."""
        if self.burst_dropped and self.queue.qsize() <= self.capacity // 2:
            log.warning("event queue drained", dropped=self.burst_dropped, capacity=self.capacity)
            self.burst_dropped = 0

    async def run(self) -> None:
        """Post queued Events until cancelled."""
        while True:
            pending = await self.queue.get()
            try:
                self._drained()
                await self._post(self.body(pending))
            finally:
                self.queue.task_done()

    def body(self, pending: _Pending) -> Obj:
        """The events.k8s.io/v1 Event of a queued record."""
        ref = pending.ref
        return {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {
                "name": f"{ref.name}.{int(pending.at * 1e9):x}",
                "namespace": ref.namespace or "default",
            },
            "eventTime": micro_time(pending.at),
            "reportingController": COMPONENT,
            "reportingInstance": self.instance,
            "action": pending.action,
            "reason": pending.reason,
            "type": pending.type,
            "note": pending.note[:1024],
            "regarding": ref.as_dict(),
        }

    async def _post(self, event: Obj) -> None:
        ns = event["metadata"]["namespace"]
        path = f"/apis/events.k8s.io/v1/namespaces/{ns}/events"
        if self.core_v1:
            path, event = f"/api/v1/namespaces/{ns}/events", core_v1_event(event)
        for attempt in range(1, self.tries + 1):
            try:
                await self.client.post(path, event)
                self.sent += 1
                if self.metrics is not None:
                    self.metrics.events_sent.inc()
                return
            except ApiError as exc:
                transient = exc.status == 0 or exc.status >= 500 or exc.status == 429
                if not transient or attempt == self.tries:
                    self.failed += 1
                    self._count_drop("failed")
                    log.warning("event not recorded", reason=event["reason"], error=str(exc))
                    return
            await asyncio.sleep(self.retry_delay * attempt)

    async def flush(self, timeout: float) -> bool:
        """Wait (bounded) until queued Events are posted; True when none is left."""
        if timeout > 0:
            try:
                async with asyncio.timeout(timeout):
                    await self.queue.join()
                return True
            except TimeoutError:
                pass
        pending = self.queue.qsize()
        if self.burst_dropped:
            log.warning("events dropped to a full queue", dropped=self.burst_dropped)
            self.burst_dropped = 0
        if pending:
            log.warning("events not flushed", pending=pending)
            self.dropped += pending
            if self.metrics is not None:
                self.metrics.events_dropped.labels("shutdown").inc(pending)
        return pending == 0


def core_v1_event(event: Obj) -> Obj:
    """The same Event in core/v1's shape (for API servers without events.k8s.io/v1)."""
    when = str(event["eventTime"]).split(".")[0] + "Z"
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": dict(event["metadata"]),
        "involvedObject": event["regarding"],
        "reason": event["reason"],
        "message": event["note"],
        "type": event["type"],
        "source": {"component": event["reportingController"]},
        "firstTimestamp": when,
        "lastTimestamp": when,
        "count": 1,
    }
