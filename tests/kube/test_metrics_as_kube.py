"""The kube-scheduler series an operator's dashboards read, with kube's names, labels,
buckets and moments: an attempt is `scheduled` once bound and `error` when its binding
fails; gated pods are their own queue; preemption attempts and attempts per pod counted."""

from __future__ import annotations

import asyncio

from tests.emulator import PODS, Emulator, make_pod
from tests.emulator.harness import Replica, all_bound_once, fast_settings, wait_for

PROFILE = "topo-scheduler"


def test_scheduler_series_follow_kube(emulator: Emulator) -> None:
    emulator.create_node("n0", gpus=8)
    emulator.create_pod("ok", gpus=2)
    emulator.create_pod("badbind", gpus=2)
    emulator.create_pod("big", gpus=16)  # fits nowhere: preemption is tried, finds nothing
    gated = make_pod("gated", gpus=1)
    gated["spec"]["schedulingGates"] = [{"name": "example.com/wait"}]
    emulator.create(PODS, gated, "default")
    emulator.fail(500, 10_000, method="POST", path_contains="/pods/badbind/binding")

    async def scenario() -> None:
        replica = Replica(fast_settings(emulator)).start()
        try:
            await wait_for(lambda: all_bound_once(emulator, ["default/ok"]), what="ok bound")
            assert replica.sched is not None
            registry = replica.sched.metrics.registry

            def value(name: str, **labels: str) -> float | None:
                return registry.get_sample_value(name, labels)

            attempts = "scheduler_schedule_attempts_total"
            await wait_for(
                lambda: (value(attempts, result="error", profile=PROFILE) or 0) >= 2,
                what="failed bindings counted as errors",
            )
            await wait_for(
                lambda: value("scheduler_pending_pods", queue="gated") == 1, what="gated"
            )
            # only the bound pod is scheduled, however often badbind was assumed
            assert value(attempts, result="scheduled", profile=PROFILE) == 1
            assert value("scheduler_pod_scheduling_attempts_count") == 1
            assert (value("scheduler_preemption_attempts_total") or 0) >= 1
            assert value("scheduler_scheduler_cache_size", type="nodes") == 1
            assert value("scheduler_pending_pods", queue="in_flight") is None
            sli = "scheduler_pod_scheduling_sli_duration_seconds_bucket"
            assert value(sli, attempts="1", le="5242.88") == 1  # kube's top bucket
        finally:
            await replica.shutdown()

    asyncio.run(scenario())
