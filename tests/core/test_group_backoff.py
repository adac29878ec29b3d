"""Every retry of a pod group's member backs off on the queue's one schedule: a
binding that keeps failing, members waiting for the rest of their group under a stream of
cluster events, and a Permit timeout. The clock is simulated, so the attempts are counted
exactly against the backoff schedule (podInitialBackoffSeconds doubling up to
podMaxBackoffSeconds); a retry without backoff shows as pops without time passing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from core_support import pod
from test_core_cycle import ALL_A, Recorder, _setup
from test_core_group import Cluster, gpu_node, member

from scheduler.core.cycle import drive
from scheduler.core.framework import BindOutcome, BindResult, Permit
from scheduler.core.model import PodInfo
from scheduler.core.queue import ClusterEvent, SchedulingQueue, Where

MAX_POPS_AT_ONE_INSTANT = 50  # far above any group's size: more is a hot loop


def schedule(queue: SchedulingQueue[Any], window: float, first_attempt: int = 1) -> list[float]:
    """When a pod first tried at 0 is tried again within `window`, failing every time."""
    times, now, attempts = [0.0], 0.0, first_attempt
    while True:
        now += queue.backoff_duration(attempts)
        if now >= window:
            return times
        times.append(now)
        attempts += 1


class AlwaysFailing:
    """A binder: the API server answers 500 for `failing`, binds the rest."""

    def __init__(self, cluster: Cluster, failing: str) -> None:
        self.cluster = cluster
        self.failing = failing
        self.calls: list[tuple[str, float]] = []

    async def bind(self, pod: PodInfo, node: str, gpus: tuple[int, ...]) -> BindResult:
        self.calls.append((pod.key, self.cluster.now))
        if pod.key == self.failing:
            return BindResult(BindOutcome.ERROR, "500 InternalError: injected")
        obj = self.cluster.objects[pod.key]
        obj["spec"]["nodeName"] = node
        self.cluster.cache.add_pod(PodInfo.from_object(obj))
        self.cluster.bound[pod.key] = node
        return BindResult(BindOutcome.BOUND)


def run_for(c: Cluster, window: float, events_every: float | None = None) -> int:
    """Pop and schedule until `window` simulated seconds have passed, the clock jumping to
    the queue's next wakeup (or the next cluster event); the number of pops."""
    pops, at_instant, last = 0, 0, c.now
    next_event = events_every
    while True:
        qp = c.queue.pop()
        if qp is None:
            wake = c.queue.next_wakeup()
            step = [w for w in (wake, next_event and next_event - c.now) if w is not None]
            if not step or c.now + min(step) >= window:
                return pops
            c.now += max(min(step), 0.0)
            if next_event is not None and c.now >= next_event:
                c.queue.move_all(ClusterEvent.NODE_UPDATE)
                assert events_every is not None
                next_event += events_every
            continue
        pops += 1
        at_instant = at_instant + 1 if c.now == last else 1
        last = c.now
        assert at_instant <= MAX_POPS_AT_ONE_INSTANT, f"hot loop: {at_instant} pops at t={c.now}"
        for decision in c.sched.schedule(qp):
            if decision.assumed is not None:
                drive(c.sched.bind(decision.assumed))


@pytest.mark.parametrize(("initial", "maximum"), [(1.0, 10.0), (0.5, 2.0)])
def test_a_member_whose_binding_keeps_failing_retries_on_the_backoff_schedule(
    initial: float, maximum: float
) -> None:
    c = Cluster([gpu_node(f"n{i}") for i in range(4)])
    c.queue.initial_backoff, c.queue.max_backoff = initial, maximum
    binder = AlwaysFailing(c, "ml/w2")
    c.sched.binder = binder
    c.add(*(member(f"w{i}") for i in range(4)))
    window = 60.0
    run_for(c, window)
    assert sorted(c.bound) == ["ml/w0", "ml/w1", "ml/w3"]  # each bound once
    assert [k for k, _ in binder.calls].count("ml/w0") == 1
    tries = [t for k, t in binder.calls if k == "ml/w2"]
    # before issue #25's fix: thousands at t=0 (the hot loop), here the backoff schedule
    assert tries == schedule(c.queue, window)
    assert len(tries) <= 2 + window / maximum + 5  # doubling to the cap, then one per cap
    assert c.queue.where("ml/w2") is Where.BACKOFF


def test_the_member_retried_keeps_its_group_priority() -> None:
    c = Cluster([gpu_node(f"n{i}") for i in range(4)])
    c.sched.binder = AlwaysFailing(c, "ml/w2")
    objs = [member(f"w{i}") for i in range(4)]
    objs[0]["spec"]["priority"] = 100
    c.add(*objs)
    qp = c.queue.pop()
    assert qp is not None
    for decision in c.sched.schedule(qp):
        assert decision.assumed is not None
        drive(c.sched.bind(decision.assumed))
    queued = c.queue.get("ml/w2")
    assert queued is not None and queued.priority == 100
    assert c.queue.where("ml/w2") is Where.BACKOFF


def test_members_waiting_for_their_group_are_retried_on_the_backoff_schedule() -> None:
    """A cluster event every 10 ms for a minute: each waiting member is tried no more often
    than its backoff allows (kube: an unschedulable pod moved back still serves its
    backoff)."""
    c = Cluster([gpu_node(f"n{i}") for i in range(4)])
    c.add(member("w0"), member("w1"))  # 2 of 4
    window = 60.0
    run_for(c, window, events_every=0.01)
    waits = [k for k, m in c.events.failures if m.startswith("waiting for 2 more pods")]
    assert c.bound == {}
    for key in ("ml/w0", "ml/w1"):
        assert waits.count(key) == len(schedule(c.queue, window))


def test_a_group_whose_podgroup_is_unreadable_is_retried_on_the_backoff_schedule() -> None:
    c = Cluster([gpu_node(f"n{i}") for i in range(2)])
    groups = c.sched.groups
    assert groups is not None
    groups.served.add("scheduling.x-k8s.io")
    groups.set_unreadable("scheduling.x-k8s.io", "ml/job", "spec.minMember: must be >= 0")
    obj = pod("w0", {"nvidia.com/gpu": "8"}, namespace="ml")
    obj["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "job"}
    c.add(obj)
    window = 60.0
    run_for(c, window, events_every=0.01)
    assert c.bound == {}
    assert len(c.events.failures) == len(schedule(c.queue, window))
    assert c.events.failures[0][1] == (
        "pod group ml/job: PodGroup.scheduling.x-k8s.io ml/job cannot be read: "
        "spec.minMember: must be >= 0"
    )


def test_a_permit_timeout_waits_out_its_backoff_before_another_try() -> None:
    waiting = Recorder("A", [])
    waiting.permit_answer = Permit.wait(0.0)
    cycle, queue, _ = _setup({"A": waiting}, ALL_A)
    now = [0.0]
    queue._clock = lambda: now[0]

    async def attempt() -> BindResult:
        queued = queue.pop()
        assert queued is not None
        decision = cycle.schedule_one(queued)
        assert decision.assumed is not None
        return await cycle.bind(decision.assumed)

    cycle.enqueue(PodInfo.from_object(pod("p", {"cpu": "1"})))
    for attempts in range(1, 6):
        result = asyncio.run(attempt())
        assert result.outcome is BindOutcome.ABORTED
        assert queue.where("default/p") is Where.UNSCHEDULABLE
        queue.move_all(ClusterEvent.NODE_ADD)  # an event at once: the backoff still holds
        assert queue.pop() is None
        now[0] += queue.backoff_duration(attempts)
        assert queue.where("default/p") is Where.BACKOFF
