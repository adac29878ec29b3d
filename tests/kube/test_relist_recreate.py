"""A pod deleted and made again under the same name while the watch was down: the re-list
sees only the new pod, and the old one must leave the cache, the queue and its binding."""

from __future__ import annotations

import asyncio

from tests.emulator import PODS, Emulator
from tests.emulator.harness import Replica, all_bound_once, fast_settings, wait_for


async def _recreate_unwatched(emulator: Emulator, replica: Replica, gpus: int) -> None:
    """Delete default/p and make it again while every pods list fails and the watch is gone,
    then let the re-list (after a 410) see only the new pod."""
    sched = replica.sched
    assert sched is not None
    lists = sched.pods.lists
    rule = emulator.fail(500, 10_000, method="GET", path_contains="/api/v1/pods")
    emulator.drop_watches()
    await asyncio.sleep(0.3)
    emulator.delete(PODS, "p", "default")
    emulator.create_pod("p", gpus=gpus)
    emulator.compact()
    rule.count = 0
    await wait_for(lambda: sched.pods.lists > lists, what="the re-list")


def test_a_pod_made_again_while_unwatched_leaves_no_ghost_in_the_cache(
    emulator: Emulator,
) -> None:
    emulator.create_node("n0", gpus=8)
    emulator.create_pod("p", gpus=8)
    old_uid = emulator.pod("default/p")["metadata"]["uid"]

    async def scenario() -> None:
        replica = Replica(fast_settings(emulator)).start()
        try:
            await wait_for(lambda: all_bound_once(emulator, ["default/p"]), what="p bound")
            await _recreate_unwatched(emulator, replica, gpus=8)
            # the old pod's 8 GPUs are free: the new pod takes them
            def new_bound() -> bool:
                pod = emulator.pod("default/p")
                return pod["metadata"]["uid"] != old_uid and bool(pod["spec"].get("nodeName"))

            await wait_for(new_bound, what="new p bound")
            assert replica.sched is not None
            cached = replica.sched.cache.get("default/p")
            assert cached is not None and cached.uid != old_uid
        finally:
            await replica.shutdown()

    asyncio.run(scenario())


def test_a_pod_made_again_while_its_binding_is_in_flight_is_scheduled(
    emulator: Emulator,
) -> None:
    emulator.create_node("n0", gpus=8)

    async def scenario() -> None:
        replica = Replica(fast_settings(emulator)).start()
        try:
            await wait_for(lambda: replica.sched is not None and replica.sched.synced, what="sync")
            sched = replica.sched
            assert sched is not None
            gate = asyncio.Event()  # the binding's answer comes late
            post = sched.binder._post

            async def slow_post(*args: object) -> object:
                await gate.wait()
                return await post(*args)  # type: ignore[arg-type]

            sched.binder._post = slow_post  # type: ignore[method-assign]
            emulator.create_pod("p", gpus=1)
            await wait_for(lambda: "default/p" in sched.binding, what="a binding in flight")
            await _recreate_unwatched(emulator, replica, gpus=1)
            gate.set()  # the old binding fails (its UID precondition), the new pod binds
            await wait_for(lambda: all_bound_once(emulator, ["default/p"]), what="new p bound")
        finally:
            await replica.shutdown()

    asyncio.run(scenario())
