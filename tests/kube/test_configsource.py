"""The ConfigMap watch: every bad text goes through the rejection path, the watch survives,
and /readyz fails when the watch itself is not running."""

from __future__ import annotations

import asyncio

from plugins import frameworks_for
from scheduler.core.config import SchedulerConfiguration
from scheduler.core.framework import Framework
from scheduler.kube.client import KubeClient
from scheduler.kube.configsource import ConfigMapSource
from scheduler.kube.events import EventRecorder
from scheduler.kube.informer import Backoff
from scheduler.kube.metrics import Metrics
from tests.emulator import EVENTS, Emulator
from tests.emulator.harness import Replica, fast_settings, wait_for
from tests.kube.test_e2e import _http

GOOD = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
BAD = {
    "nested more than 100 levels deep": "[" * 50_000 + "]" * 50_000,
    "integer of 5,001 characters": GOOD + "percentageOfNodesToScore: " + "1" * 5001 + "\n",
    # a YAML date is a string, as kube reads it
    "not in valid range [0-100], got '2020-02-30'": GOOD
    + "percentageOfNodesToScore: 2020-02-30\n",
}


def _rejections(emulator: Emulator) -> list[str]:
    return [e["note"] for e in emulator.list(EVENTS) if e["reason"] == "InvalidConfiguration"]


def test_every_bad_text_is_rejected_and_later_changes_still_apply(emulator: Emulator) -> None:
    emulator.create_node("n0", gpus=8)
    emulator.put_config_map("kube-system", "topo", {"config.yaml": GOOD})

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator, config_map="kube-system/topo")).start()
        await wait_for(lambda: rep.sched is not None and rep.sched.synced, what="sync")
        assert rep.server is not None
        for n, (detail, text) in enumerate(BAD.items(), 1):
            emulator.put_config_map("kube-system", "topo", {"config.yaml": text})
            await wait_for(lambda n=n: len(_rejections(emulator)) == n, what=detail)  # type: ignore[misc]
            assert detail in _rejections(emulator)[-1]
            assert "configmap kube-system/topo: data.config.yaml" in _rejections(emulator)[-1]
        status, body = await asyncio.to_thread(_http, rep.server.port, "/readyz")
        assert status == 200 and "[+]config ok: last change rejected" in body
        _, metrics = await asyncio.to_thread(_http, rep.server.port, "/metrics")
        assert 'topo_scheduler_config_reloads_total{result="failure"} 3.0' in metrics
        # the watch is alive: a valid change applies
        second = GOOD + "profiles:\n- schedulerName: topo-scheduler\n- schedulerName: gang\n"
        emulator.put_config_map("kube-system", "topo", {"config.yaml": second})
        await wait_for(lambda: "gang" in rep.sched.names, what="valid change applied")  # type: ignore[union-attr]
        status, body = await asyncio.to_thread(_http, rep.server.port, "/readyz")
        assert status == 200 and "last change rejected" not in body
        # /readyz reports the config source once its watch is gone
        task = next(t for t in asyncio.all_tasks() if t.get_name() == "config-informer")
        task.cancel()
        await asyncio.sleep(0.05)
        status, body = await asyncio.to_thread(_http, rep.server.port, "/readyz")
        assert status == 503 and "[-]config failed: configuration watch stopped" in body
        assert await rep.shutdown() == 0

    asyncio.run(scenario())


def test_a_crashed_watch_is_restarted_and_unready_meanwhile(emulator: Emulator) -> None:
    emulator.put_config_map("kube-system", "topo", {"config.yaml": GOOD})
    applied: list[SchedulerConfiguration] = []

    def apply(config: SchedulerConfiguration, frameworks: dict[str, Framework]) -> None:
        applied.append(config)

    async def scenario() -> None:
        client = KubeClient.for_url(emulator.url)
        source = ConfigMapSource(
            client,
            "kube-system",
            "topo",
            frameworks_for,
            apply,
            EventRecorder(client),
            Metrics(),
            backoff=Backoff(initial=0.3, maximum=0.3, jitter=0.0),
        )
        await source.load_initial()
        real_watch = source.reflector.watch_once
        crashes = 0

        async def crashing_watch() -> bool:
            nonlocal crashes
            crashes += 1
            raise RuntimeError("bug in the watch")

        source.reflector.watch_once = crashing_watch  # type: ignore[method-assign]
        source.start()
        await wait_for(lambda: crashes >= 1, what="crash")
        ok, detail = source.health()
        assert not ok and "restarting after: RuntimeError: bug in the watch" in detail
        source.reflector.watch_once = real_watch  # type: ignore[method-assign]
        await wait_for(lambda: source.health()[0], what="watch running again")
        second = GOOD + "profiles:\n- schedulerName: gang\n"
        emulator.put_config_map("kube-system", "topo", {"config.yaml": second})
        await wait_for(lambda: len(applied) == 1, what="change applied after the restart")
        assert applied[0].profiles[0].scheduler_name == "gang"
        assert source.task is not None
        source.task.cancel()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert source.health() == (False, "configuration watch stopped")
        await client.close()

    asyncio.run(scenario())
