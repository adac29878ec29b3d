"""Cluster events that move unschedulable pods back to the queue at once (as kube's queueing
hints do), rather than at the flush of podMaxInUnschedulablePodsDuration."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from tests.emulator import NODES, PODS, Emulator, make_pod
from tests.emulator.harness import Replica, fast_settings, wait_for

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def _settings(emulator: Emulator) -> Any:
    settings = fast_settings(emulator)
    # the flush of unschedulable pods far away: only the event can move the pod in time
    settings.options = dataclasses.replace(settings.options, max_unschedulable=300.0)
    return settings


def _unschedulable(emulator: Emulator, key: str) -> bool:
    conditions = emulator.pod(key).get("status", {}).get("conditions") or []
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False" for c in conditions)


def _bound(emulator: Emulator, key: str) -> bool:
    return bool(emulator.pod(key)["spec"].get("nodeName"))


def _run(emulator: Emulator, key: str, change: Any) -> None:
    async def scenario() -> None:
        replica = Replica(_settings(emulator)).start()
        try:
            await wait_for(lambda: _unschedulable(emulator, key), what=f"{key} unschedulable")
            await asyncio.sleep(0.3)  # parked among the unschedulable pods
            change()
            await wait_for(lambda: _bound(emulator, key), timeout=10, what=f"{key} bound")
        finally:
            await replica.shutdown()

    asyncio.run(scenario())


def test_a_bound_pods_new_labels_move_a_pod_waiting_on_its_affinity(emulator: Emulator) -> None:
    emulator.create_node("n1")
    emulator.create_pod("db", node="n1", labels={"app": "db"})
    client = make_pod("client")
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": HOSTNAME}
    client["spec"]["affinity"] = {
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    }
    emulator.create(PODS, client, "default")
    _run(
        emulator,
        "default/client",
        lambda: emulator.patch(PODS, "db", {"metadata": {"labels": {"app": "web"}}}, "default"),
    )


def test_a_deleted_node_moves_a_pod_waiting_on_its_spread(emulator: Emulator) -> None:
    emulator.create_node("a1", labels={ZONE: "a"})
    emulator.create_node("b1", cpu="500m", labels={ZONE: "b"})  # zone b: no room, no pods
    emulator.create_pod("x0", node="a1", labels={"app": "x"})
    spread = make_pod("x1", labels={"app": "x"})
    spread["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": ZONE,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "x"}},
        }
    ]
    emulator.create(PODS, spread, "default")
    _run(emulator, "default/x1", lambda: emulator.delete(NODES, "b1"))
