"""Binding faults: a refused binding of a pod still unbound is retried, and a node deleted
while its binding request waits for the client's rate limit never receives it.

The scheduler is driven step by step as in test_failures.py (watch events fed by hand,
`schedule_one` per cycle, requests to the emulator).
"""

from __future__ import annotations

import asyncio

from plugins import frameworks_for
from scheduler.core.config import default_config
from scheduler.core.queue import Where
from scheduler.kube.client import ClientOptions, KubeClient
from scheduler.kube.scheduler import KubeScheduler, Options
from tests.emulator import EVENTS, NODES, Emulator
from tests.kube.test_failures import KEY, _cycle, _settle


def _scheduler(emulator: Emulator, client: ClientOptions | None = None) -> KubeScheduler:
    config = default_config()
    options = Options(initial_backoff=0.01, max_backoff=0.05)
    return KubeScheduler(
        KubeClient.for_url(emulator.url, client),
        config,
        frameworks_for(config),
        options=options,
    )


def test_conflict_on_a_pod_still_unbound_requeues_it(emulator: Emulator) -> None:
    async def run() -> None:
        sched = _scheduler(emulator)
        try:
            sched.nodes._apply("ADDED", emulator.create_node("n0", gpus=8))
            sched.pods._apply("ADDED", emulator.create_pod("p", gpus=1))
            # e.g. "the object has been modified; please apply your changes to the latest version"
            emulator.fail(409, 1, method="POST", path_contains="/binding")
            _cycle(sched)
            await _settle(sched)
            assert not emulator.pod(KEY)["spec"].get("nodeName")  # nobody bound it
            assert sched.queue.where(KEY) is Where.BACKOFF
            notes = [e["note"] for e in emulator.list(EVENTS) if e["reason"] == "FailedScheduling"]
            assert len(notes) == 1 and notes[0].startswith("Binding rejected: ")
            await asyncio.sleep(0.06)
            _cycle(sched)
            await _settle(sched)
            assert emulator.bindings() == {KEY: ["n0"]}
        finally:
            await sched.client.close()

    asyncio.run(run())


def test_conflict_on_a_pod_bound_by_someone_else_drops_it_once_the_watch_shows_it(
    emulator: Emulator,
) -> None:
    """Whatever the 409 handling, a pod that is really bound leaves the queue for good."""

    async def run() -> None:
        sched = _scheduler(emulator)
        try:
            sched.nodes._apply("ADDED", emulator.create_node("n0", gpus=8))
            sched.nodes._apply("ADDED", emulator.create_node("n1", gpus=8))
            sched.pods._apply("ADDED", emulator.create_pod("p", gpus=1))
            emulator.server.call(
                lambda: emulator.server.store.bind(
                    "default", "p", {"target": {"kind": "Node", "name": "n1"}}
                )
            )
            _cycle(sched)  # our binding gets the API server's 409: already assigned
            await _settle(sched)
            sched.pods._apply("MODIFIED", emulator.pod(KEY))  # the watch shows the binding
            assert KEY not in sched.queue
            assert emulator.pod(KEY)["spec"]["nodeName"] == "n1"
            assert emulator.bindings() == {KEY: ["n1"]}
            assert sched.cache.get(KEY) is not None and not sched.cache.is_assumed(KEY)
        finally:
            await sched.client.close()

    asyncio.run(run())


def test_node_deleted_while_the_binding_waits_for_the_rate_limit(emulator: Emulator) -> None:
    async def run() -> None:
        sched = _scheduler(emulator, ClientOptions(qps=4.0, burst=1))
        try:
            node = emulator.create_node("n0", gpus=8)
            sched.nodes._apply("ADDED", node)
            sched.pods._apply("ADDED", emulator.create_pod("p", gpus=1))
            await sched.client.limiter.acquire()  # the bucket is empty: the next request waits
            _cycle(sched)
            await asyncio.sleep(0.05)  # the binding is waiting for its token
            assert sched.binding and emulator.binding_posts(KEY) == 0
            emulator.delete(NODES, "n0")
            sched.nodes._apply("DELETED", node)
            await _settle(sched)
            assert emulator.binding_posts(KEY) == 0  # before the fix: bound to the deleted node
            assert not emulator.pod(KEY)["spec"].get("nodeName")
            assert not sched.cache.is_assumed(KEY)
            assert KEY in sched.queue
        finally:
            await sched.client.close()

    asyncio.run(run())
