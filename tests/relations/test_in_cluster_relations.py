"""In cluster, over the API-server emulator: workers with mutual anti-affinity (the term selects
namespaces by label, so the scheduler must watch Namespaces) land on different nodes, and the
one that fits nowhere waits with kube's message."""

from __future__ import annotations

import asyncio

from tests.emulator import NAMESPACES, PODS, REPLICA_SETS, Emulator, make_pod
from tests.emulator.fixture import emulator
from tests.emulator.harness import Replica, all_bound_once, fast_settings, wait_for

__all__ = ["emulator"]


def worker(name: str) -> dict[str, object]:
    obj = make_pod(name, namespace="training", labels={"app": "worker"}, gpus=1)
    obj["spec"]["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"app": "worker"}},
                    "namespaceSelector": {"matchLabels": {"team": "ml"}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }
    return obj


def test_mutual_anti_affinity_spreads_workers_and_the_third_waits(emulator: Emulator) -> None:
    namespace = {"name": "training", "labels": {"team": "ml"}}
    emulator.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": namespace})
    emulator.create_node("n0", gpus=8)
    emulator.create_node("n1", gpus=8)
    for name in ("w0", "w1"):
        emulator.create(PODS, worker(name), "training")

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        keys = ["training/w0", "training/w1"]
        await wait_for(lambda: all_bound_once(emulator, keys), what="two workers bound")
        emulator.create(PODS, worker("w2"), "training")

        def waiting() -> bool:
            conditions = emulator.pod("training/w2")["status"].get("conditions") or []
            return any(c.get("reason") == "Unschedulable" for c in conditions)

        await wait_for(waiting, what="PodScheduled=False on the third worker")
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    nodes = {emulator.pod(f"training/{n}")["spec"]["nodeName"] for n in ("w0", "w1")}
    assert nodes == {"n0", "n1"}
    third = emulator.pod("training/w2")
    assert third["spec"].get("nodeName") is None
    assert emulator.binding_posts("training/w2") == 0
    cond = next(c for c in third["status"]["conditions"] if c["type"] == "PodScheduled")
    assert cond["status"] == "False"
    assert cond["message"] == (
        "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules. "
        "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
    )


def test_a_pod_waiting_for_its_affinity_target_is_retried_when_the_target_lands(
    emulator: Emulator,
) -> None:
    """kube requeues on AssignedPodAdd: the waiting pod is placed as soon as a pod it has
    affinity to is bound (by another scheduler here), well before the periodic flush."""
    emulator.create_node("n0", gpus=0, labels={"zone": "A"})
    emulator.create_node("n1", gpus=0, labels={"zone": "B"})
    follower = make_pod("follower", labels={"app": "cache"})
    follower["spec"]["affinity"] = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone"}
            ]
        }
    }
    emulator.create(PODS, follower, "default")

    async def scenario() -> None:
        settings = fast_settings(emulator)
        settings.options.max_unschedulable = 600.0  # no periodic flush within the test
        rep = Replica(settings).start()

        def waiting() -> bool:
            conditions = emulator.pod("default/follower")["status"].get("conditions") or []
            return any(c.get("reason") == "Unschedulable" for c in conditions)

        await wait_for(waiting, what="the follower waits for its target")
        emulator.create_pod("db", scheduler="default-scheduler", node="n1", labels={"app": "db"})
        await wait_for(
            lambda: all_bound_once(emulator, ["default/follower"]), what="follower bound"
        )
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    assert emulator.pod("default/follower")["spec"]["nodeName"] == "n1"


def test_replicas_of_a_replicaset_spread_by_the_system_defaults(emulator: Emulator) -> None:
    """The scheduler watches ReplicaSets: its replicas get kube's default spread (hostname
    maxSkew 3, ScheduleAnyway), so they do not all go to the roomier node that the resource
    scores prefer."""
    emulator.create(
        REPLICA_SETS,
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web-1"},
         "spec": {"selector": {"matchLabels": {"app": "web"}}}},
        "default",
    )  # fmt: skip
    emulator.create_node("n0", gpus=0)
    emulator.create_node("n1", gpus=0, cpu="8", memory="32Gi")
    owner = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "controller": True}]
    keys = []
    for i in range(4):
        obj = make_pod(f"web-{i}", labels={"app": "web"}, cpu="100m", memory="64Mi")
        obj["metadata"]["ownerReferences"] = owner
        emulator.create(PODS, obj, "default")
        keys.append(f"default/web-{i}")

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        await wait_for(lambda: all_bound_once(emulator, keys), what="replicas bound")
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    placed = [emulator.pod(k)["spec"]["nodeName"] for k in keys]
    assert set(placed) == {"n0", "n1"}, placed
