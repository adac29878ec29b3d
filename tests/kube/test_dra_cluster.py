"""Dynamic Resource Allocation in the cluster, over the API-server emulator: `topo-scheduler
run`'s informers read resource.k8s.io/v1, the cycle allocates a claim, PreBind writes its
status through the binder, the pod is bound; without the API the plugin is off."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from scheduler.core.dra.state import FINALIZER
from scheduler.core.topology.schema import ANNOTATION_GPUS
from tests.dra.objects import claim, claim_pod, device_class, dgx1, gpu_node, gpu_slice, request
from tests.emulator import NODES, PODS, Emulator
from tests.emulator.harness import Replica, all_bound_once, fast_settings, wait_for
from tests.emulator.store import DEVICE_CLASSES, DRA_RESOURCES, RESOURCE_CLAIMS_V1, RESOURCE_SLICES

Obj = dict[str, Any]


def _condition(emu: Emulator, key: str) -> Obj:
    conds = emu.pod(key).get("status", {}).get("conditions") or []
    return next((c for c in conds if c.get("type") == "PodScheduled"), {})


def _message(emu: Emulator, key: str) -> str:
    return str(_condition(emu, key).get("message", ""))


def _setup(emu: Emulator, *, slice_now: bool = True) -> Obj:
    emu.serve(*DRA_RESOURCES)
    emu.create(NODES, gpu_node("gpu-node", dgx1()))
    emu.create(DEVICE_CLASSES, device_class())
    if slice_now:
        emu.create(RESOURCE_SLICES, gpu_slice("gpu-node", topology=dgx1()))
    emu.create(RESOURCE_CLAIMS_V1, claim("train", request(count=4)), "default")
    return emu.create(PODS, claim_pod("trainer", [("gpus", "train")]), "default")


def _check_written(emu: Emulator, pod: Obj) -> Obj:
    written = emu.get(RESOURCE_CLAIMS_V1, "train", "default")
    results = written["status"]["allocation"]["devices"]["results"]
    assert len(results) == 4
    assert {r["driver"] for r in results} == {"gpu.nvidia.com"}
    assert {r["pool"] for r in results} == {"gpu-node"}
    assert written["status"]["reservedFor"] == [
        {"resource": "pods", "name": "trainer", "uid": pod["metadata"]["uid"]}
    ]
    assert FINALIZER in written["metadata"]["finalizers"]
    assert emu.pod("default/trainer")["spec"]["nodeName"] == "gpu-node"
    return written


def test_a_four_gpu_claim_is_allocated_written_and_bound(emulator: Emulator) -> None:
    pod = _setup(emulator)

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        await wait_for(lambda: all_bound_once(emulator, ["default/trainer"]), what="bound")
        assert rep.sched is not None
        dra = rep.sched.dra_watches
        assert dra.served is True
        assert {r.name for r in dra.reflectors} == {
            "deviceclasses",
            "resourceclaims",
            "resourceslices",
        }
        # the watch brings the written claim back into the cache: allocated, reserved
        state = rep.sched.cache.snapshot.storage.dra

        def cached() -> bool:
            c = state.claim("default", "train")
            return c is not None and c.allocation is not None and bool(c.reserved_for)

        await wait_for(cached, what="the written claim seen by the watch")
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    _check_written(emulator, pod)
    # the status subresource, and one plain update for the finalizer; nothing else
    assert emulator.request_count("PUT", "/resourceclaims/train/status") == 1
    assert emulator.request_count("PUT", "/resourceclaims/train") == 2  # (and its /status)
    for method in ("POST", "PATCH", "DELETE"):
        assert emulator.request_count(method, "/resourceclaims") == 0
    # a DRA claim is not a GPU set of the device plugin: no annotation
    assert ANNOTATION_GPUS not in (emulator.pod("default/trainer")["metadata"].get("annotations")
                                   or {})  # fmt: skip


def test_a_slice_published_later_moves_the_waiting_pod(emulator: Emulator) -> None:
    pod = _setup(emulator, slice_now=False)

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        await wait_for(
            lambda: "cannot allocate all claims" in _message(emulator, "default/trainer"),
            what="unschedulable without devices",
        )
        emulator.create(RESOURCE_SLICES, gpu_slice("gpu-node", topology=dgx1()))
        await wait_for(lambda: all_bound_once(emulator, ["default/trainer"]), what="bound")
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    _check_written(emulator, pod)


def test_an_unreadable_slice_is_reported_and_its_last_good_version_kept(
    emulator: Emulator, capsys: Any
) -> None:
    _setup(emulator)

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        await wait_for(lambda: all_bound_once(emulator, ["default/trainer"]), what="bound")
        assert rep.sched is not None
        state = rep.sched.cache.snapshot.storage.dra
        name = "gpu-node-gpu.nvidia.com"
        good = state.slices[name]
        bad = {"spec": {"pool": {"generation": "two"}}}
        emulator.patch(RESOURCE_SLICES, name, bad)
        emulator.patch(RESOURCE_SLICES, name, {"metadata": {"labels": {"again": "1"}}})
        watches = rep.sched.dra_watches
        await wait_for(lambda: bool(watches.problems), what="the problem seen")
        assert state.slices[name] == good
        (problem,) = watches.problems.values()
        assert "spec.pool.generation" in problem
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    out = capsys.readouterr().out
    assert out.count("DRA object not understood") == 1  # the same problem twice: once
    assert "spec.pool.generation" in out


def test_without_resource_k8s_io_v1_the_plugin_is_off_and_says_so_once(
    emulator: Emulator, capsys: Any
) -> None:
    emulator.create(NODES, gpu_node("gpu-node"))
    emulator.create(PODS, claim_pod("trainer", [("gpus", "train")]), "default")

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        await wait_for(
            lambda: '"train" not found' in _message(emulator, "default/trainer"),
            what="the pod waits for its claim",
        )
        assert rep.sched is not None
        assert rep.sched.dra_watches.served is False and rep.sched.synced
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    out = capsys.readouterr().out
    assert out.count("DynamicResources is off") == 1
    assert emulator.binding_posts("default/trainer") == 0
    for resource in ("deviceclasses", "resourceclaims", "resourceslices"):
        assert emulator.request_count("GET", f"/apis/resource.k8s.io/v1/{resource}") == 0
    assert any("FailedScheduling" in json.dumps(e) for e in emulator.events())
