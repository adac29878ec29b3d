"""Objects the in-cluster scheduler cannot read whole, end to end through
the API-server emulator.

A bound pod counts with every resource it holds whatever else it carries (before, one
malformed `topo-scheduler.io/` annotation on another scheduler's running 8-GPU pod left it out
of the cache: its GPUs looked free and a second 8-GPU pod was bound onto the node). A pending
pod edited into an unreadable state leaves the queue instead of being scheduled on its last
readable copy, and comes back once readable. A node that cannot be read takes no pods.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from scheduler.core.topology import ANNOTATION_TOPOLOGY, builtin_topology, format_topology
from tests.emulator import NODES, PODS, Emulator, make_pod
from tests.emulator.harness import Replica, all_bound_once, fast_settings, wait_for

Obj = dict[str, Any]
GROUP = "topo-scheduler.io/pod-group"
TOPOLOGY = {ANNOTATION_TOPOLOGY: format_topology(builtin_topology("dgx-h100"))}
MIN = "topo-scheduler.io/min-member"

# One foreign bound 8-GPU pod per 8-GPU node, each with another thing that cannot be read.
BREAKERS: dict[str, Obj] = {
    "group-without-min-member": {"metadata": {"annotations": {GROUP: "g"}}},
    "min-member-abc": {"metadata": {"annotations": {GROUP: "g", MIN: "abc"}}},
    "min-member-unicode-digit": {"metadata": {"annotations": {GROUP: "g", MIN: "²"}}},
    "topology-required-blank": {
        "metadata": {
            "annotations": {GROUP: "g", MIN: "2", "topo-scheduler.io/topology-required": " "}
        }
    },
    "topology-preferred-empty": {
        "metadata": {
            "annotations": {GROUP: "g", MIN: "2", "topo-scheduler.io/topology-preferred": ""}
        }
    },
    "annotation-not-a-string": {"metadata": {"annotations": {GROUP: 7}}},
    # read by the GPU state, not the model: no record, so the device plugin's guess
    "gpu-record-unreadable": {"metadata": {"annotations": {"topo-scheduler.io/gpus": "all"}}},
    "gpu-record-too-short": {"metadata": {"annotations": {"topo-scheduler.io/gpus": "0"}}},
    "gpu-record-not-a-string": {"metadata": {"annotations": {"topo-scheduler.io/gpus": 8}}},
    "label-not-a-string": {"metadata": {"labels": {"tier": 1}}},
    "bad-node-affinity": {"spec": {"affinity": {"nodeAffinity": "anywhere"}}},
    "bad-pod-anti-affinity": {
        "spec": {
            "affinity": {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {}}]
                }
            }
        }
    },
    "bad-toleration": {"spec": {"tolerations": ["junk"]}},
    "bad-spread": {"spec": {"topologySpreadConstraints": [{"maxSkew": 0}]}},
    "bad-start-time": {"status": {"phase": "Running", "startTime": "soon"}},
    "bad-priority": {"spec": {"priority": "high"}},
}


def _merge(into: Obj, patch: Obj) -> Obj:
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value
    return into


def _condition(emulator: Emulator, key: str) -> Obj | None:
    conditions = emulator.pod(key)["status"].get("conditions") or []
    return next((c for c in conditions if c.get("type") == "PodScheduled"), None)


def test_a_foreign_bound_gpu_pod_with_unreadable_parts_keeps_its_gpus(emulator: Emulator) -> None:
    for i, (case, breaker) in enumerate(BREAKERS.items()):
        emulator.create_node(f"n{i}", gpus=8, annotations=TOPOLOGY)
        obj = make_pod(case, scheduler="default-scheduler", gpus=8, node=f"n{i}")
        obj["status"] = {"phase": "Running"}
        emulator.create(PODS, _merge(obj, breaker), "default")
    # one of ours, bound by someone else, unreadable too: counted, and an event says so
    ours = make_pod("ours-unreadable", gpus=8, node="ours")
    emulator.create_node("ours", gpus=8, annotations=TOPOLOGY)
    emulator.create(PODS, _merge(ours, {"metadata": {"annotations": {MIN: "x", GROUP: "g"}}}))
    nodes = len(BREAKERS) + 1
    emulator.create_pod("mine", gpus=8)

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        await wait_for(
            lambda: (
                (_condition(emulator, "default/mine") or {}).get("reason") == "Unschedulable"
                or emulator.binding_posts("default/mine") > 0
            ),
            what="mine decided",
        )
        assert emulator.binding_posts("default/mine") == 0  # (the bug: bound onto a full node)
        assert rep.sched is not None
        for case in BREAKERS:
            cached = rep.sched.cache.get(f"default/{case}")
            assert cached is not None and cached.requests.get("nvidia.com/gpu") == 8, case
            assert cached.unreadable or case.startswith("gpu-record-"), case
            slot = rep.sched.cache.snapshot.index[cached.node_name or ""]
            assert rep.sched.cache.gpus.used[slot] == 0xFF, case  # every GPU held
        # a status update of the bound pods changes nothing (the fast path keeps it counted)
        emulator.patch(PODS, "min-member-abc", {"status": {"podIP": "10.0.0.1"}}, "default")
        emulator.patch(PODS, "mine", {"metadata": {"labels": {"retry": "1"}}}, "default")
        await asyncio.sleep(0.5)
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    assert emulator.binding_posts("default/mine") == 0
    assert emulator.pod("default/mine")["spec"].get("nodeName") is None
    cond = _condition(emulator, "default/mine")
    assert cond is not None
    assert cond["message"].startswith(
        f"0/{nodes} nodes are available: {nodes} Insufficient nvidia.com/gpu."
    ), cond["message"]
    unreadable = [e for e in emulator.events() if e.get("reason") == "Unreadable"]
    assert len(unreadable) == 1, unreadable
    assert unreadable[0]["regarding"]["name"] == "ours-unreadable"
    assert unreadable[0]["note"].startswith("Counted on ours with what can be read, without: ")
    assert f"{MIN}: must be a positive integer, got 'x'" in unreadable[0]["note"]


@pytest.mark.parametrize(
    "edit",
    [
        {GROUP: "g", MIN: "abc"},  # a group annotation: the fast path re-parses
        {"note": 5},  # another annotation, not a string: the fast path must not reuse the parse
    ],
    ids=["group-annotation", "non-string-annotation"],
)
def test_a_pending_pod_edited_into_an_unreadable_state_leaves_the_queue(
    emulator: Emulator, edit: Obj
) -> None:
    emulator.create_node("n0", gpus=8)
    emulator.create_pod("theirs", scheduler="default-scheduler", gpus=8, node="n0")
    mine = make_pod("mine", gpus=8)
    mine["status"] = {"nominatedNodeName": "n0"}
    emulator.create(PODS, mine, "default")

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        await wait_for(
            lambda: (_condition(emulator, "default/mine") or {}).get("reason") == "Unschedulable",
            what="mine unschedulable",
        )
        sched = rep.sched
        assert sched is not None and "default/mine" in sched.queue
        emulator.patch(PODS, "mine", {"metadata": {"annotations": edit}}, "default")
        await wait_for(lambda: "default/mine" not in sched.queue, what="mine out of the queue")
        assert sched.cycle.nominator.get("default/mine") is None
        assert "default/mine" not in sched.handlers.infos
        # room on the node: nothing is scheduled on the stale copy
        emulator.delete(PODS, "theirs", "default")
        await wait_for(lambda: sched.cache.get("default/theirs") is None, what="theirs gone")
        await asyncio.sleep(1.0)  # several backoffs and flushes
        assert emulator.binding_posts("default/mine") == 0
        failed = [
            e
            for e in emulator.events()
            if e.get("reason") == "FailedScheduling"
            and e["regarding"]["name"] == "mine"
            and e["note"].startswith("Pod default/mine: metadata.annotations.")
        ]
        assert failed and "\n" not in failed[0]["note"]
        # readable again: back in the queue, and bound
        fixed = {key: None for key in edit}
        emulator.patch(PODS, "mine", {"metadata": {"annotations": fixed}}, "default")
        await wait_for(lambda: all_bound_once(emulator, ["default/mine"]), what="mine bound")
        assert await rep.shutdown() == 0

    asyncio.run(scenario())


def test_an_unreadable_node_takes_no_pods_until_it_can_be_read(emulator: Emulator) -> None:
    emulator.create_node("n0", gpus=8)
    emulator.create_pod("theirs", scheduler="default-scheduler", gpus=4, node="n0")

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        await wait_for(lambda: rep.sched is not None and rep.sched.synced, what="sync")
        sched = rep.sched
        assert sched is not None
        # a taint the API would refuse (or one from a newer kube): not read, not guessed at
        taint = {"key": "dedicated", "value": "infra", "effect": "NoScheduleSometimes"}
        emulator.patch(NODES, "n0", {"spec": {"taints": [taint]}})
        await wait_for(
            lambda: bool((sched.nodes.known.get("n0") or {}).get("spec", {}).get("taints")),
            what="the taint seen",
        )
        emulator.create_pod("mine", gpus=4)
        await wait_for(
            lambda: (
                (_condition(emulator, "default/mine") or {}).get("reason") == "Unschedulable"
                or emulator.binding_posts("default/mine") > 0
            ),
            what="mine decided",
        )
        assert emulator.binding_posts("default/mine") == 0  # not onto the stale copy
        assert "n0" in sched.cache.unreadable_nodes and sched.cache.node_count == 0
        slot = sched.cache.snapshot.index["n0"]
        row = sched.cache.snapshot.row["nvidia.com/gpu"]
        assert sched.cache.snapshot.requested[row, slot] == 4  # its pods still count
        emulator.patch(NODES, "n0", {"spec": {"taints": None}})
        await wait_for(lambda: all_bound_once(emulator, ["default/mine"]), what="mine bound")
        assert not sched.cache.unreadable_nodes
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
