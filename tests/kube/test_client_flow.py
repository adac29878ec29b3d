"""The client under its rate limit: token order by priority, deadlines from sending, the
separate event client, event retries and the shutdown flush."""

from __future__ import annotations

import argparse
import asyncio
import time

import pytest

from scheduler.kube.cli import Settings, event_client_for, event_client_options
from scheduler.kube.client import ApiError, ClientOptions, KubeClient
from scheduler.kube.events import EventRecorder, ObjectRef
from scheduler.kube.metrics import Metrics
from scheduler.kube.ratelimit import Priority, TokenBucket
from tests.emulator import EVENTS, Emulator


def test_token_bucket_burst_then_qps() -> None:
    async def run() -> list[float]:
        bucket = TokenBucket(qps=20, burst=3)
        t0 = time.monotonic()
        done: list[float] = []

        async def one() -> None:
            await bucket.acquire()
            done.append(time.monotonic() - t0)

        await asyncio.gather(*(one() for _ in range(5)))
        return done

    done = asyncio.run(run())
    assert all(t < 0.03 for t in done[:3])  # the burst at once
    assert done[3] == pytest.approx(0.05, abs=0.03) and done[4] == pytest.approx(0.10, abs=0.03)


def test_waiters_are_served_by_priority_then_arrival() -> None:
    async def run() -> list[str]:
        bucket = TokenBucket(qps=50, burst=1)
        await bucket.acquire()  # the bucket is empty from here
        order: list[str] = []

        async def one(name: str, priority: Priority) -> None:
            await bucket.acquire(priority)
            order.append(name)

        tasks = [
            asyncio.create_task(one("status", Priority.STATUS)),
            asyncio.create_task(one("list-1", Priority.DEFAULT)),
            asyncio.create_task(one("bind-1", Priority.BIND)),
            asyncio.create_task(one("list-2", Priority.DEFAULT)),
            asyncio.create_task(one("bind-2", Priority.BIND)),
            asyncio.create_task(one("lease", Priority.LEASE)),
        ]
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(run()) == ["lease", "bind-1", "bind-2", "list-1", "list-2", "status"]


def test_cancelled_waiter_does_not_take_a_token() -> None:
    async def run() -> tuple[float, int]:
        bucket = TokenBucket(qps=10, burst=1)
        await bucket.acquire()
        gone = asyncio.create_task(bucket.acquire(Priority.BIND))
        await asyncio.sleep(0.01)
        gone.cancel()
        t0 = time.monotonic()
        await bucket.acquire(Priority.STATUS)  # the next token is ours, not the cancelled one's
        return time.monotonic() - t0, bucket.waiting

    waited, waiting = asyncio.run(run())
    assert waited < 0.15 and waiting == 0


def test_watches_take_no_rate_limit_token(emulator: Emulator) -> None:
    """client-go does not rate-limit watches: with the bucket empty a watch opens at once,
    and opening it leaves the bucket as it was."""
    emulator.create_node("n0")

    async def run() -> None:
        client = KubeClient.for_url(emulator.url, ClientOptions(qps=0.01, burst=1))
        try:
            assert client.limiter.try_acquire() and not client.limiter.try_acquire()
            async with asyncio.timeout(5):  # a token would take 100 s
                async for event in client.watch("/api/v1/nodes", {"resourceVersion": "0"}, 1):
                    assert event["type"] == "ADDED"
                    break
            with pytest.raises(TimeoutError):  # a list still waits for its token
                async with asyncio.timeout(0.3):
                    await client.get("/api/v1/nodes")
        finally:
            await client.close()

    asyncio.run(run())


def test_queued_request_does_not_time_out_before_it_is_sent(emulator: Emulator) -> None:
    """client-go: the timeout covers the request, not its wait for a rate-limit token."""
    emulator.create_node("n0")

    async def run() -> None:
        # one token per 0.25 s; the last of 4 calls waits ~0.75 s, three times its timeout
        client = KubeClient.for_url(emulator.url, ClientOptions(qps=4, burst=1, timeout=0.25))
        try:
            t0 = time.monotonic()
            nodes = await asyncio.gather(*(client.get("/api/v1/nodes/n0") for _ in range(4)))
            assert time.monotonic() - t0 >= 0.7
            assert [n["metadata"]["name"] for n in nodes] == ["n0"] * 4
            assert client.timeouts == 0
            emulator.set_latency(0.5)  # a request that is sent and not answered still expires
            with pytest.raises(ApiError) as err:
                await client.get("/api/v1/nodes/n0")
            assert err.value.reason == "Timeout" and client.timeouts == 1
        finally:
            emulator.set_latency(0)
            await client.close()

    asyncio.run(run())


def test_event_client_has_its_own_budget() -> None:
    args = argparse.Namespace(kube_api_qps=50.0, kube_api_burst=100, events_qps=None)
    args.events_burst = None
    assert event_client_options(args) is None
    args.events_qps, args.events_burst = 20.0, None
    assert event_client_options(args) == ClientOptions(qps=20.0, burst=100)

    async def run() -> None:
        client = KubeClient.for_url("http://127.0.0.1:1", ClientOptions(qps=50, burst=100))
        events = event_client_for(Settings(client=client.options), client)
        try:
            assert events.limiter is not client.limiter
            assert (events.limiter.qps, events.limiter.burst) == (50, 100)
            assert events.endpoint is client.endpoint  # same credentials...
            assert events._session() is not client._session()  # ...own connection pool
            assert events.options.user_agent == "topo-scheduler-events"
            for _ in range(100):  # the scheduling client's burst spent...
                assert client.limiter.try_acquire()
            assert not client.limiter.try_acquire()
            assert events.limiter.try_acquire()  # ...leaves the event client's untouched
        finally:
            await events.close()
            await client.close()

    asyncio.run(run())


def test_event_retried_on_transient_errors_then_dropped_and_counted(emulator: Emulator) -> None:
    async def run() -> Metrics:
        metrics = Metrics()
        client = KubeClient.for_url(emulator.url)
        rec = EventRecorder(client, metrics=metrics, tries=3, retry_delay=0.01)
        worker = asyncio.create_task(rec.run())
        try:
            emulator.fail(500, 2, method="POST", path_contains="/events")
            assert rec.record(ObjectRef("Pod", "default", "a", "u1"), "Normal", "X", "A", "one")
            assert await rec.flush(5)
            emulator.fail(403, 1, method="POST", path_contains="/events")  # not retried
            assert rec.record(ObjectRef("Pod", "default", "b", "u2"), "Normal", "X", "A", "two")
            assert await rec.flush(5)
        finally:
            worker.cancel()
            await client.close()
        assert rec.sent == 1 and rec.failed == 1
        return metrics

    metrics = asyncio.run(run())
    assert [e["note"] for e in emulator.list(EVENTS)] == ["one"]
    assert emulator.request_count("POST", "/events") == 4
    sample = metrics.registry.get_sample_value
    assert sample("topo_scheduler_events_dropped_total", {"reason": "failed"}) == 1
    assert sample("topo_scheduler_events_sent_total") == 1


def test_flush_counts_what_is_left_at_shutdown(emulator: Emulator) -> None:
    async def run() -> tuple[bool, Metrics, int]:
        metrics = Metrics()
        client = KubeClient.for_url(emulator.url)
        rec = EventRecorder(client, metrics=metrics)
        for i in range(3):  # no worker runs: nothing is posted
            rec.record(ObjectRef("Pod", "default", f"p{i}", "u"), "Normal", "Scheduled", "B", "x")
        flushed = await rec.flush(0.05)
        await client.close()
        return flushed, metrics, rec.dropped

    flushed, metrics, dropped = asyncio.run(run())
    assert not flushed and dropped == 3
    sample = metrics.registry.get_sample_value
    assert sample("topo_scheduler_events_dropped_total", {"reason": "shutdown"}) == 3


def test_bindings_do_not_wait_for_events_and_sigterm_flushes_them(emulator: Emulator) -> None:
    """Events on a slow budget of their own: every pod is bound at the scheduling client's
    pace, and on SIGTERM the queued Scheduled Events are all written within the grace period
    (longer than the 2 s the flush once had)."""
    from tests.emulator import PODS
    from tests.emulator.harness import Replica, all_bound_once, fast_settings, wait_for

    emulator.create_node("n0", gpus=0, pods=110)
    keys = [f"default/p{i}" for i in range(60)]
    for i in range(60):
        emulator.create_pod(f"p{i}")

    async def run() -> tuple[float, int, int]:
        settings = fast_settings(emulator, event_client=ClientOptions(qps=20, burst=1))
        settings.options.shutdown_grace = 10.0
        replica = Replica(settings).start()
        await wait_for(lambda: all_bound_once(emulator, keys), 20, "all pods bound")
        assert replica.sched is not None
        queued = replica.sched.recorder.queue.qsize()
        t0 = time.monotonic()
        code = await replica.shutdown(timeout=15)
        return time.monotonic() - t0, queued, code

    flushed_in, queued, code = asyncio.run(run())
    assert code == 0
    # 60 Events at 20/s: many were still queued when the pods were bound, and the flush
    # waited for them (the event budget, not the bindings, set its length)
    assert queued >= 10
    assert flushed_in >= (queued - 4) / 20 * 0.8
    scheduled = [e for e in emulator.list(EVENTS) if e["reason"] == "Scheduled"]
    assert len(scheduled) == 60
    assert len(emulator.list(PODS)) == 60
