"""Bursts of Events against a slow sink: none lost up to the documented bound (the queue of
`MAX_QUEUED_EVENTS`), and beyond it every drop counted and logged once per burst."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import structlog

from scheduler.kube.events import EVENT_POSTS, MAX_QUEUED_EVENTS, EventRecorder, ObjectRef
from scheduler.kube.metrics import Metrics
from scheduler.kube.ratelimit import TokenBucket


class SlowSink:
    """Stands in for the event client: its token bucket, then `latency` per post."""

    def __init__(self, latency: float, qps: float = 5000.0) -> None:
        self.latency = latency
        self.limiter = TokenBucket(qps, int(qps))
        self.posted: list[dict[str, Any]] = []
        self.in_flight = 0
        self.most_in_flight = 0

    async def post(self, path: str, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        await self.limiter.acquire()
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.latency)
        finally:
            self.in_flight -= 1
        self.posted.append(body)
        return body


def _scheduled(rec: EventRecorder, n: int, start: int = 0) -> list[bool]:
    return [
        rec.record(
            ObjectRef("Pod", "default", f"p{i}", f"uid-{i}"),
            "Normal",
            "Scheduled",
            "Binding",
            f"Successfully assigned default/p{i} to n{i % 50}",
        )
        for i in range(start, start + n)
    ]


async def _drain(rec: EventRecorder, timeout: float) -> bool:
    workers = [asyncio.create_task(rec.run()) for _ in range(EVENT_POSTS)]
    try:
        return await rec.flush(timeout)
    finally:
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)


def _dropped(metrics: Metrics) -> float:
    value = metrics.registry.get_sample_value(
        "topo_scheduler_events_dropped_total", {"reason": "queue_full"}
    )
    return value or 0.0


def test_a_burst_up_to_the_bound_is_never_dropped_however_slow_the_sink() -> None:
    """MAX_QUEUED_EVENTS Events recorded at once, before any is posted (a sink of 5 ms per
    post): all accepted, all posted, nothing counted as dropped."""

    async def run() -> tuple[list[bool], SlowSink, EventRecorder, Metrics]:
        metrics = Metrics()
        sink = SlowSink(latency=0.005)
        rec = EventRecorder(sink, metrics=metrics)  # type: ignore[arg-type]
        accepted = _scheduled(rec, MAX_QUEUED_EVENTS)
        assert await _drain(rec, 60)
        return accepted, sink, rec, metrics

    accepted, sink, rec, metrics = asyncio.run(run())
    assert all(accepted)
    assert len(sink.posted) == MAX_QUEUED_EVENTS == rec.sent
    assert len({e["regarding"]["name"] for e in sink.posted}) == MAX_QUEUED_EVENTS
    assert rec.dropped == 0 and _dropped(metrics) == 0
    assert sink.most_in_flight == EVENT_POSTS  # posts overlap: the queue drains in parallel


def test_scheduled_events_of_5000_pods_at_qps_5000_all_written() -> None:
    """The issue's case: 5,000 pods bound at QPS 5,000, each with its Scheduled Event,
    recorded faster than a loaded API server answers (20 ms a post): none is lost."""

    async def run() -> tuple[SlowSink, EventRecorder, float]:
        sink = SlowSink(latency=0.02, qps=5000.0)
        rec = EventRecorder(sink)  # type: ignore[arg-type]
        workers = [asyncio.create_task(rec.run()) for _ in range(EVENT_POSTS)]
        t0 = time.monotonic()
        for start in range(0, 5000, 500):  # 500 bindings at a time, as fast as recorded
            assert all(_scheduled(rec, 500, start))
            await asyncio.sleep(0)
        assert await rec.flush(60)
        elapsed = time.monotonic() - t0
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        return sink, rec, elapsed

    sink, rec, elapsed = asyncio.run(run())
    assert len(sink.posted) == 5000 and rec.dropped == 0
    # 16 posts in flight of 20 ms each: about 800 Events/s, not one worker's 50
    assert elapsed < 5000 / (EVENT_POSTS / 0.02) * 3


def test_beyond_the_bound_drops_are_counted_and_logged_once_per_burst() -> None:
    async def run() -> tuple[list[bool], EventRecorder, Metrics, list[dict[str, Any]]]:
        metrics = Metrics()
        sink = SlowSink(latency=0.0)
        rec = EventRecorder(sink, metrics=metrics, queue_size=100)  # type: ignore[arg-type]
        with structlog.testing.capture_logs() as logs:
            accepted = _scheduled(rec, 130)  # one burst: 30 too many
            assert await _drain(rec, 10)
            accepted += _scheduled(rec, 120, start=1000)  # a second burst: 20 too many
            assert await _drain(rec, 10)
        return accepted, rec, metrics, logs

    accepted, rec, metrics, logs = asyncio.run(run())
    assert accepted.count(False) == 50
    assert rec.sent == 200 and rec.dropped == 50 and _dropped(metrics) == 50
    full = [e for e in logs if e["event"] == "event queue full, events dropped until it drains"]
    drained = [e for e in logs if e["event"] == "event queue drained"]
    assert len(full) == 2 and full[0]["capacity"] == 100  # one warning per burst
    assert [e["dropped"] for e in drained] == [30, 20]  # and the count once it drained


def test_drops_still_counted_at_shutdown_are_logged() -> None:
    async def run() -> tuple[EventRecorder, list[dict[str, Any]]]:
        rec = EventRecorder(SlowSink(latency=0.0), queue_size=10)  # type: ignore[arg-type]
        with structlog.testing.capture_logs() as logs:
            _scheduled(rec, 15)
            await rec.flush(0)  # no worker ran: the 10 queued are lost at shutdown
        return rec, logs

    rec, logs = asyncio.run(run())
    assert rec.dropped == 15
    assert [e.get("dropped") for e in logs if e["event"] == "events dropped to a full queue"] == [5]
    assert [e.get("pending") for e in logs if e["event"] == "events not flushed"] == [10]


def test_a_storm_of_distinct_events_inside_the_dedup_window_sweeps_rarely() -> None:
    """Past EXPIRE_ABOVE entries that are all inside the dedup window, each new Event used to
    sweep every entry again (26 ms each at 50,000): the sweeps are now amortized."""
    from scheduler.kube import events

    now = [0.0]
    rec = EventRecorder(None, queue_size=10**6, clock=lambda: now[0])  # type: ignore[arg-type]
    sweeps = 0
    sweep = rec._expire

    def counted(at: float) -> None:
        nonlocal sweeps
        sweeps += 1
        sweep(at)

    rec._expire = counted  # type: ignore[method-assign]
    total = events.EXPIRE_ABOVE + 20_000
    for n in range(total):
        now[0] += 0.005  # 100 s for 20,000 Events: all inside the 10-minute window
        ref = ObjectRef("Pod", "default", f"p{n}", f"uid{n}")
        assert rec.record(ref, "Normal", "Scheduled", "Binding", f"assigned default/p{n}")
    assert sweeps == 1
    assert len(rec._seen) == total  # nothing inside the window was dropped
