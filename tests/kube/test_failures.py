"""Failures made visible and never losing a pod: one KubeScheduler driven step by step.

The scheduler is not started: watch events are fed to its reflectors by hand, cycles are run
with `schedule_one`, and its requests go to the emulator, so each interleaving is exact.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from plugins import frameworks_for
from scheduler.core.config import default_config, load_config
from scheduler.core.model import PodInfo
from scheduler.core.queue import Where
from scheduler.kube.client import KubeClient
from scheduler.kube.events import EventRecorder, ObjectRef
from scheduler.kube.scheduler import KubeScheduler, Options
from tests.emulator import EVENTS, PODS, Emulator, make_pod

Obj = dict[str, Any]
KEY = "default/p"


def _scheduler(emulator: Emulator) -> KubeScheduler:
    config = default_config()
    client = KubeClient.for_url(emulator.url)
    options = Options(initial_backoff=0.01, max_backoff=0.05)
    return KubeScheduler(client, config, frameworks_for(config), options=options)


def _cycle(sched: KubeScheduler) -> None:
    qp = sched.queue.pop()
    assert qp is not None and qp.key == KEY
    sched.schedule_one(qp)


async def _settle(sched: KubeScheduler) -> None:
    """Let bindings, condition patches and Events finish."""
    while sched.binding or sched._tasks:
        await asyncio.gather(*sched.binding.values(), *sched._tasks, return_exceptions=True)
    worker = asyncio.create_task(sched.recorder.run())
    await sched.recorder.flush(5)
    worker.cancel()


def _condition(emulator: Emulator) -> Obj:
    conds = emulator.pod(KEY)["status"].get("conditions") or []
    return next(c for c in conds if c["type"] == "PodScheduled")


def _failed_notes(emulator: Emulator) -> list[str]:
    return [e["note"] for e in emulator.list(EVENTS) if e["reason"] == "FailedScheduling"]


class _Exploding:
    profile = "topo-scheduler"

    def schedule(self, pod: PodInfo, snapshot: object, state: object) -> None:
        raise RuntimeError("plugin exploded")


def test_scheduler_error_is_an_event_and_a_condition_and_retried(emulator: Emulator) -> None:
    async def run() -> None:
        sched = _scheduler(emulator)
        sched.nodes._apply("ADDED", emulator.create_node("n0", gpus=8))
        sched.pods._apply("ADDED", emulator.create_pod("p", gpus=1))
        frameworks = sched.frameworks
        sched.cycle.frameworks = {"topo-scheduler": _Exploding()}  # type: ignore[dict-item]
        _cycle(sched)
        assert sched.queue.where(KEY) is Where.BACKOFF  # retried after its backoff
        await _settle(sched)
        cond = _condition(emulator)
        assert cond["status"] == "False" and cond["reason"] == "SchedulerError"
        assert cond["message"] == "plugin exploded"
        assert _failed_notes(emulator) == ["plugin exploded"]
        sched.cycle.frameworks = frameworks
        await asyncio.sleep(0.02)
        _cycle(sched)
        await _settle(sched)
        assert emulator.bindings() == {KEY: ["n0"]}
        await sched.client.close()

    asyncio.run(run())


def test_binding_error_is_an_event_and_a_condition_and_retried(emulator: Emulator) -> None:
    async def run() -> None:
        sched = _scheduler(emulator)
        sched.nodes._apply("ADDED", emulator.create_node("n0", gpus=8))
        sched.pods._apply("ADDED", emulator.create_pod("p", gpus=1))
        emulator.fail(500, 1, method="POST", path_contains="/binding")
        _cycle(sched)
        await _settle(sched)
        cond = _condition(emulator)
        assert cond["status"] == "False" and cond["reason"] == "SchedulerError"
        assert cond["message"].startswith("Binding rejected: ")
        assert _failed_notes(emulator) == [cond["message"]]
        assert sched.queue.where(KEY) is Where.BACKOFF
        await asyncio.sleep(0.02)
        _cycle(sched)
        await _settle(sched)
        assert emulator.bindings() == {KEY: ["n0"]}
        await sched.client.close()

    asyncio.run(run())


def test_last_transition_time_kept_while_the_condition_stays_false(emulator: Emulator) -> None:
    since = "2020-01-01T00:00:00Z"
    pod = make_pod("p", gpus=4)
    pod["status"] = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "old message",
                "lastTransitionTime": since,
            }
        ],
    }

    async def run() -> None:
        sched = _scheduler(emulator)
        sched.pods._apply("ADDED", emulator.create(PODS, pod))
        _cycle(sched)  # no nodes at all
        await _settle(sched)
        first = _condition(emulator)
        assert first["message"] != "old message" and first["lastTransitionTime"] == since
        sched.nodes._apply("ADDED", emulator.create_node("small", gpus=2))
        await asyncio.sleep(0.02)
        _cycle(sched)  # another message, still False
        await _settle(sched)
        second = _condition(emulator)
        assert second["message"] != first["message"] and "nvidia.com/gpu" in second["message"]
        assert second["lastTransitionTime"] == since
        await sched.client.close()

    asyncio.run(run())


def test_recreated_pod_gets_its_scheduled_event_again(emulator: Emulator) -> None:
    async def run() -> None:
        client = KubeClient.for_url(emulator.url)
        rec = EventRecorder(client, clock=lambda: 0.0)
        note = "Successfully assigned default/p to n0"
        assert rec.record(
            ObjectRef("Pod", "default", "p", "uid-1"), "Normal", "Scheduled", "B", note
        )
        rec.forget("default", "p")  # deleted, then created again with the same name
        assert rec.record(
            ObjectRef("Pod", "default", "p", "uid-2"), "Normal", "Scheduled", "B", note
        )
        # the same object is still deduplicated
        assert not rec.record(
            ObjectRef("Pod", "default", "p", "uid-2"), "Normal", "Scheduled", "B", note
        )
        await client.close()

    asyncio.run(run())


def test_pod_requeued_when_its_binding_fails_after_config_flapped(emulator: Emulator) -> None:
    """Not ours (left the queue), ours again (skipped: still assumed), then binding fails."""
    others = load_config(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        "profiles:\n- schedulerName: gang\n"
    )

    async def run() -> None:
        sched = _scheduler(emulator)
        ours = sched.config
        sched.nodes._apply("ADDED", emulator.create_node("n0", gpus=8))
        sched.pods._apply("ADDED", emulator.create_pod("p", gpus=1))
        _cycle(sched)  # assumed, binding task created but not yet run
        sched.apply_config(others, frameworks_for(others))
        assert KEY not in sched.queue
        sched.apply_config(ours, frameworks_for(ours))
        assert KEY not in sched.queue  # still assumed: not re-added here
        emulator.fail(500, 1, method="POST", path_contains="/binding")
        await _settle(sched)
        assert KEY in sched.queue  # before the fix: dropped for good
        await asyncio.sleep(0.02)
        _cycle(sched)
        await _settle(sched)
        assert emulator.bindings() == {KEY: ["n0"]}
        await sched.client.close()

    asyncio.run(run())


def test_sli_recorded_when_the_watch_shows_the_binding_first(emulator: Emulator) -> None:
    async def run() -> None:
        sched = _scheduler(emulator)
        sched.nodes._apply("ADDED", emulator.create_node("n0", gpus=8))
        pending = emulator.create_pod("p", gpus=1)
        sched.pods._apply("ADDED", pending)
        emulator.set_latency(0.3)
        _cycle(sched)
        while emulator.request_count("POST", "/pods/p/binding") < 1:
            await asyncio.sleep(0.01)
        # the watch reports the pod bound before our POST has returned
        bound = copy.deepcopy(pending)
        bound["spec"]["nodeName"] = "n0"
        bound["metadata"]["resourceVersion"] = "999999"
        sched.pods._apply("MODIFIED", bound)
        await _settle(sched)
        emulator.set_latency(0)
        assert emulator.bindings() == {KEY: ["n0"]}
        count = sched.metrics.registry.get_sample_value(
            "scheduler_pod_scheduling_sli_duration_seconds_count", {"attempts": "1"}
        )
        assert count == 1.0
        assert KEY not in sched.handlers.queued_at
        await sched.client.close()

    asyncio.run(run())
