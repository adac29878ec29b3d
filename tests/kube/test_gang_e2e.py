"""Pod groups bound whole over the API-server emulator: the annotation form, scheduler-plugins'
PodGroup CRD and Kubernetes' PodGroup (discovered, not assumed), a binding failing mid-group,
and a scheduler restarted with half a group bound."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.emulator import K8S_PODGROUPS, PODS, X_PODGROUPS, Emulator, make_pod
from tests.emulator.harness import Replica, all_bound_once, fast_settings, wait_for


def annotated(name: str, group: str = "llama", min_member: int = 4, **kw: Any) -> dict[str, Any]:
    return {
        "gpus": 8,
        "namespace": "ml",
        "annotations": {
            "topo-scheduler.io/pod-group": group,
            "topo-scheduler.io/min-member": str(min_member),
        },
        **kw,
    }


def keys(n: int, prefix: str = "w") -> list[str]:
    return [f"ml/{prefix}{i}" for i in range(n)]


def unbound(emu: Emulator, names: list[str]) -> bool:
    pods = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in emu.pods()}
    return all(not pods[k]["spec"].get("nodeName") for k in names)


def group_message(emu: Emulator, key: str) -> str | None:
    for cond in emu.pod(key)["status"].get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return str(cond.get("message"))
    return None


def test_annotation_group_waits_whole_then_binds_whole(emulator: Emulator) -> None:
    for i in range(3):
        emulator.create_node(f"n{i}", gpus=8)
    for i in range(4):
        emulator.create_pod(f"w{i}", **annotated(f"w{i}"))

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        await wait_for(
            lambda: all(group_message(emulator, k) for k in keys(4)), what="a message per member"
        )
        message = group_message(emulator, "ml/w0")
        assert message is not None
        assert message.startswith("pod group ml/llama: 3/4 pods fit; 0/3 nodes are available")
        assert unbound(emulator, keys(4))
        assert all(emulator.binding_posts(k) == 0 for k in keys(4))
        emulator.create_node("n3", gpus=8)
        await wait_for(lambda: all_bound_once(emulator, keys(4)), what="the group bound")
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    nodes = {emulator.pod(k)["spec"]["nodeName"] for k in keys(4)}
    assert nodes == {"n0", "n1", "n2", "n3"}


def test_scheduler_plugins_podgroup_is_bound_whole_with_status(emulator: Emulator) -> None:
    emulator.serve(X_PODGROUPS)
    for i in range(4):
        emulator.create_node(f"n{i}", gpus=8)
    emulator.create(
        X_PODGROUPS,
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "job", "namespace": "ml"},
            "spec": {"minMember": 3, "scheduleTimeoutSeconds": 60},
        },
        "ml",
    )
    labels = {"scheduling.x-k8s.io/pod-group": "job"}
    for i in range(2):
        emulator.create_pod(f"w{i}", namespace="ml", gpus=8, labels=labels)

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        await wait_for(
            lambda: (
                group_message(emulator, "ml/w0") == "waiting for 1 more pod of pod group ml/job"
            ),
            what="the group waiting",
        )
        # the PodGroup's status is patched by its own task, beside the pods' conditions
        await wait_for(
            lambda: (
                emulator.get(X_PODGROUPS, "job", "ml").get("status", {}).get("phase") == "Pending"
            ),
            what="phase Pending",
        )
        emulator.create_pod("w2", namespace="ml", gpus=8, labels=labels)
        await wait_for(lambda: all_bound_once(emulator, keys(3)), what="the group bound")
        await wait_for(
            lambda: (
                emulator.get(X_PODGROUPS, "job", "ml").get("status", {}).get("phase") == "Scheduled"
            ),
            what="phase Scheduled",
        )
        assert emulator.get(X_PODGROUPS, "job", "ml")["status"]["scheduled"] == 3
        assert await rep.shutdown() == 0

    asyncio.run(scenario())


def test_kubernetes_podgroup_is_discovered_and_bound_whole(emulator: Emulator) -> None:
    emulator.serve(K8S_PODGROUPS)
    rack = "network.topology.nvidia.com/leaf"
    for i in range(4):
        emulator.create_node(f"a{i}", gpus=8, labels={rack: "a"})
    for i in range(2):
        emulator.create_node(f"b{i}", gpus=8, labels={rack: "b"})
    emulator.create(
        K8S_PODGROUPS,
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "job", "namespace": "ml"},
            "spec": {
                "schedulingPolicy": {"gang": {"minCount": 2}},
                "schedulingConstraints": {"topology": [{"key": rack}]},
            },
        },
        "ml",
    )
    for i in range(2):
        obj = make_pod(f"w{i}", namespace="ml", gpus=8, scheduler="topo-scheduler")
        obj["spec"]["schedulingGroup"] = {"podGroupName": "job"}
        emulator.create(PODS, obj, "ml")

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        await wait_for(lambda: all_bound_once(emulator, keys(2)), what="the group bound")

        def condition() -> dict[str, Any] | None:
            status = emulator.get(K8S_PODGROUPS, "job", "ml").get("status") or {}
            return next(
                (
                    c
                    for c in status.get("conditions") or []
                    if c["type"] == "PodGroupInitiallyScheduled"
                ),
                None,
            )

        await wait_for(lambda: (condition() or {}).get("status") == "True", what="condition")
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    # required rack, least free room: rack b holds exactly the two members
    assert {emulator.pod(k)["spec"]["nodeName"] for k in keys(2)} == {"b0", "b1"}


def test_kubernetes_podgroup_not_served_is_said(emulator: Emulator) -> None:
    emulator.create_node("n0", gpus=8)
    obj = make_pod("w0", namespace="ml", gpus=8, scheduler="topo-scheduler")
    obj["spec"]["schedulingGroup"] = {"podGroupName": "job"}
    emulator.create(PODS, obj, "ml")

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        await wait_for(lambda: group_message(emulator, "ml/w0") is not None, what="message")
        assert group_message(emulator, "ml/w0") == (
            "pod group ml/job: PodGroup.scheduling.k8s.io is not served by the API server"
        )
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    assert emulator.binding_posts("ml/w0") == 0


def test_binding_failure_mid_group_is_retried_after_its_backoff(emulator: Emulator) -> None:
    for i in range(4):
        emulator.create_node(f"n{i}", gpus=8)
    emulator.fail(500, count=1, method="POST", path_contains="/pods/w2/binding")
    for i in range(4):
        emulator.create_pod(f"w{i}", **annotated(f"w{i}"))

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        await wait_for(
            lambda: all(emulator.pod(k)["spec"].get("nodeName") for k in keys(4)),
            what="the group bound",
        )
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    assert emulator.request_count("POST", "/pods/w2/binding") == 2  # the failed one, again
    assert all(len(emulator.bindings().get(k, [])) == 1 for k in keys(4))
    assert len({emulator.pod(k)["spec"]["nodeName"] for k in keys(4)}) == 4


def test_restart_with_half_a_group_bound(emulator: Emulator) -> None:
    for i in range(4):
        emulator.create_node(f"n{i}", gpus=8)
    # an earlier replica bound two members before it stopped
    for i in range(2):
        emulator.create_pod(f"w{i}", **annotated(f"w{i}", node=f"n{i}"))
    for i in range(2, 4):
        emulator.create_pod(f"w{i}", **annotated(f"w{i}"))

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        await wait_for(
            lambda: all(emulator.pod(k)["spec"].get("nodeName") for k in keys(4)),
            what="the rest of the group bound",
        )
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    assert [emulator.binding_posts(k) for k in keys(4)] == [0, 0, 1, 1]
    assert {emulator.pod(k)["spec"]["nodeName"] for k in keys(4)} == {"n0", "n1", "n2", "n3"}


RESERVING = """apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
  - schedulerName: topo-scheduler
    pluginConfig:
      - name: GPUTopology
        args: {gangReservationSeconds: 3600}
"""


def _two_members_waiting_on_busy_nodes(emulator: Emulator) -> None:
    """Reservations on; three 8-GPU nodes busy (4, 4 and 8 GPUs used) and a group of two
    8-GPU members that fits once the first two nodes free."""
    emulator.put_config_map("kube-system", "topo", {"config.yaml": RESERVING})
    for i in range(3):
        emulator.create_node(f"n{i}", gpus=8)
    for i, gpus in enumerate((4, 4, 8)):
        emulator.create_pod(f"run{i}", gpus=gpus, node=f"n{i}")
    for i in range(2):
        emulator.create_pod(f"w{i}", **annotated(f"w{i}", min_member=2))


def test_a_new_leader_adopts_the_reservation_the_former_one_left(emulator: Emulator) -> None:
    """A replica holds nodes for a group that fits once running pods end (the members'
    nominatedNodeName); it stops, and the next replica holds the same nodes as its own
    reservation (counted, expiring) instead of leaving them nominated with no end."""
    _two_members_waiting_on_busy_nodes(emulator)

    def nominated() -> dict[str, str | None]:
        return {k: emulator.pod(k)["status"].get("nominatedNodeName") for k in keys(2)}

    async def scenario() -> None:
        settings = fast_settings(emulator, config_map="kube-system/topo")
        first = Replica(settings).start()
        await wait_for(lambda: all(nominated().values()), what="the members nominated")
        held = nominated()
        assert set(held.values()) == {"n0", "n1"}
        assert await first.shutdown() == 0
        second = Replica(fast_settings(emulator, config_map="kube-system/topo")).start()

        def adopted() -> bool:
            groups = second.sched.groups if second.sched is not None else None
            return groups is not None and bool(groups.cycle.reservations.held)

        await wait_for(adopted, what="the reservation adopted")
        assert second.sched is not None
        book = second.sched.groups.cycle.reservations
        (reservation,) = book.held.values()
        assert {k: node for k, (_, node) in reservation.members.items()} == held
        assert nominated() == held  # the same nodes, no status write to move them
        assert "capacity held for it" in (group_message(emulator, "ml/w0") or "")
        assert await second.shutdown() == 0

    asyncio.run(scenario())


def test_a_member_deleted_while_its_group_holds_nodes_is_not_held_again(
    emulator: Emulator,
) -> None:
    """A member of a group with a reservation is deleted and replaced: the reservation holds
    the replacement, not the deleted pod, so the group binds once the nodes free (a ghost
    nomination of the deleted member kept the replacement off them until the reservation
    expired)."""
    _two_members_waiting_on_busy_nodes(emulator)

    def nominated(names: list[str]) -> dict[str, str | None]:
        return {k: emulator.pod(k)["status"].get("nominatedNodeName") for k in names}

    async def scenario() -> None:
        replica = Replica(fast_settings(emulator, config_map="kube-system/topo")).start()
        try:
            await wait_for(lambda: all(nominated(keys(2)).values()), what="members nominated")
            sched = replica.sched
            assert sched is not None
            emulator.delete(PODS, "w1", "ml")
            emulator.create_pod("w2", **annotated("w2", min_member=2))

            def held_members() -> set[str]:
                book = sched.groups.cycle.reservations
                return {k for r in book.held.values() for k in r.members}

            await wait_for(lambda: held_members() == {"ml/w0", "ml/w2"}, what="w2 held")
            emulator.delete(PODS, "run0", "default")
            emulator.delete(PODS, "run1", "default")
            await wait_for(
                lambda: all_bound_once(emulator, ["ml/w0", "ml/w2"]),
                timeout=10,
                what="the group bound on the freed nodes",
            )
        finally:
            await replica.shutdown()

    asyncio.run(scenario())
