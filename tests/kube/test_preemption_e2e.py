"""Preemption in the cluster, through the API-server emulator: a high-priority pod preempts,
the victims get the DisruptionTarget condition and are deleted, the preemptor is nominated and
binds once they are gone, and nothing is bound twice."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.emulator import PDBS, Emulator
from tests.emulator.harness import Replica, all_bound_once, fast_settings, wait_for
from tests.emulator.store import Change


def test_high_priority_pod_preempts_and_binds_after_the_victims_go(emulator: Emulator) -> None:
    emulator.create_node("n0", gpus=8)
    low = [f"default/low{i}" for i in range(4)]
    for i in range(4):
        emulator.create_pod(f"low{i}", gpus=2, priority=0, labels={"app": "sweep"})
    emulator.create(
        PDBS,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "sweep", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "other"}}},
            "status": {"disruptionsAllowed": 0},
        },
        "default",
    )
    history: list[tuple[str, str, dict[str, Any]]] = []

    def record(change: Change) -> None:
        if change.res.plural == "pods":
            md = change.obj["metadata"]
            history.append((change.type, f"{md['namespace']}/{md['name']}", change.obj))

    store = emulator.server.store
    emulator.server.call(lambda: store.hooks.append(record))

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        await wait_for(lambda: all_bound_once(emulator, low), what="low-priority pods bound")
        emulator.create_pod("urgent", gpus=8, priority=1000)
        await wait_for(
            lambda: all_bound_once(emulator, ["default/urgent"]), what="the preemptor bound"
        )
        assert rep.sched is not None
        victims = rep.sched.metrics.preemption_victims.collect()[0].samples
        assert ("scheduler_preemption_victims_sum", 4.0) in [(s.name, s.value) for s in victims]
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    names = {p["metadata"]["name"] for p in emulator.pods()}
    assert names == {"urgent"}
    for key in low:
        # the condition was set before the deletion, and the deletion came before the binding
        marked = [
            i
            for i, (kind, k, obj) in enumerate(history)
            if k == key
            and kind == "MODIFIED"
            and any(
                c.get("type") == "DisruptionTarget"
                and c.get("reason") == "PreemptionByScheduler"
                and c.get("status") == "True"
                for c in obj["status"].get("conditions") or []
            )
        ]
        deleted = [i for i, (kind, k, _) in enumerate(history) if k == key and kind == "DELETED"]
        assert marked and deleted and marked[0] < deleted[0], key
    nominated = [
        i
        for i, (kind, k, obj) in enumerate(history)
        if k == "default/urgent" and obj["status"].get("nominatedNodeName") == "n0"
    ]
    bound = [
        i
        for i, (kind, k, obj) in enumerate(history)
        if k == "default/urgent" and obj["spec"].get("nodeName")
    ]
    last_deleted = max(i for i, (kind, k, _) in enumerate(history) if kind == "DELETED")
    assert nominated and bound and bound[0] > last_deleted
    assert emulator.bindings() == {**{k: ["n0"] for k in low}, "default/urgent": ["n0"]}
    preempted = [e for e in emulator.events() if e.get("reason") == "Preempted"]
    assert sorted(e["regarding"]["name"] for e in preempted) == [f"low{i}" for i in range(4)]
    urgent_uid = emulator.pod("default/urgent")["metadata"]["uid"]
    assert all(e["note"] == f"Preempted by pod {urgent_uid} on node n0" for e in preempted)
