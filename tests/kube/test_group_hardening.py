"""Over the API-server emulator: a gang member whose binding keeps failing backs off
(binding POSTs counted against the backoff schedule), a PodGroup deleted while members are
bound, PodGroups that cannot be read (reported naming the field, never scheduled on a stale
copy), `scheduleTimeoutSeconds: 0`, and a PodGroup status write retried with backoff."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
import structlog

from scheduler.kube.groups import CONDITION_SCHEDULED
from tests.emulator import K8S_PODGROUPS, PODS, X_PODGROUPS, Emulator, make_pod
from tests.emulator.harness import Replica, all_bound_once, fast_settings, wait_for
from tests.emulator.store import Resource
from tests.kube.test_gang_e2e import annotated, group_message, keys

INITIAL, MAXIMUM = 0.05, 0.2  # fast_settings' podInitialBackoffSeconds / podMaxBackoffSeconds


def backoff_schedule(window: float) -> int:
    """Tries of a pod failing every time within `window` seconds of its first: at 0, then
    after INITIAL, 2 INITIAL, ... capped at MAXIMUM (the queue's backoff)."""
    tries, now, attempts = 1, 0.0, 1
    while True:
        now += min(INITIAL * 2 ** (attempts - 1), MAXIMUM)
        if now >= window:
            return tries
        tries += 1
        attempts += 1


def podgroup(api: Resource, spec: dict[str, Any], **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{api.group}/{api.version}",
        "kind": "PodGroup",
        "metadata": {"name": "job", "namespace": "ml", "annotations": annotations},
        "spec": spec,
    }


def member(name: str, api: Resource) -> dict[str, Any]:
    obj = make_pod(name, namespace="ml", gpus=8)
    if api is X_PODGROUPS:
        obj["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "job"}
    else:
        obj["spec"]["schedulingGroup"] = {"podGroupName": "job"}
    return obj


def invalid_events(emu: Emulator) -> list[dict[str, Any]]:
    return [
        e
        for e in emu.events()
        if e.get("reason") == "InvalidPodGroup" and e["regarding"]["kind"] == "PodGroup"
    ]


def test_a_member_whose_binding_keeps_failing_is_not_retried_in_a_hot_loop(
    emulator: Emulator,
) -> None:
    """Before the fix: 2,434 POSTs of ml/w2's binding in 3 s (a retry at once, each)."""
    for i in range(4):
        emulator.create_node(f"n{i}", gpus=8)
    emulator.fail(500, count=10**9, method="POST", path_contains="/pods/w2/binding")
    for i in range(4):
        emulator.create_pod(f"w{i}", **annotated(f"w{i}"))
    window = 2.0
    counted: list[int] = []

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        posts = lambda: emulator.request_count("POST", "/pods/w2/binding")  # noqa: E731
        await wait_for(lambda: posts() > 0, what="the first binding of ml/w2")
        start = time.monotonic()
        await asyncio.sleep(window)
        counted.append(posts())
        elapsed = time.monotonic() - start
        assert elapsed < window + 1.0  # the bound below is for this window
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    assert all_bound_once(emulator, ["ml/w0", "ml/w1", "ml/w3"])
    # every try after the first waited its backoff: at most the schedule's tries in the window
    # (+1: the first was seen up to one poll late)
    assert 3 <= counted[0] <= backoff_schedule(window + 0.1) + 1


def test_podgroup_deleted_with_members_bound_leaves_the_rest_waiting_and_says_so(
    emulator: Emulator,
) -> None:
    emulator.serve(X_PODGROUPS)
    for i in range(2):
        emulator.create_node(f"n{i}", gpus=8)
    emulator.create(X_PODGROUPS, podgroup(X_PODGROUPS, {"minMember": 2}), "ml")
    for i in range(3):
        emulator.create(PODS, member(f"w{i}", X_PODGROUPS), "ml")

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        await wait_for(
            lambda: sum(1 for k in keys(3) if emulator.pod(k)["spec"].get("nodeName")) == 2,
            what="minMember bound",
        )
        left = next(k for k in keys(3) if not emulator.pod(k)["spec"].get("nodeName"))
        await wait_for(lambda: group_message(emulator, left) is not None, what="the third waits")
        with structlog.testing.capture_logs() as logs:
            emulator.delete(X_PODGROUPS, "job", "ml")
            expected = (
                "pod group ml/job: PodGroup.scheduling.x-k8s.io ml/job not found; "
                "2 of its pods are bound, the others wait for it"
            )
            await wait_for(lambda: group_message(emulator, left) == expected, what="message")
        deleted = [e for e in logs if e["event"] == "pod group deleted"]
        assert len(deleted) == 1
        assert len(deleted[0]["bound"]) == 2 and deleted[0]["pending"] == [left]
        assert "wait until it is back" in deleted[0]["action"]
        # as scheduler-plugins' coscheduling: no PodGroup, no placement, even with room
        emulator.create_node("n2", gpus=8)
        await asyncio.sleep(0.5)
        assert emulator.binding_posts(left) == 0
        emulator.create(X_PODGROUPS, podgroup(X_PODGROUPS, {"minMember": 2}), "ml")
        await wait_for(lambda: all_bound_once(emulator, keys(3)), what="the third bound")
        assert await rep.shutdown() == 0

    asyncio.run(scenario())


UNREADABLE = [
    (
        X_PODGROUPS,
        {"minMember": 2, "scheduleTimeoutSeconds": -1},
        {},
        "spec.scheduleTimeoutSeconds",
    ),
    (X_PODGROUPS, {"minMember": "2"}, {}, "spec.minMember"),
    (X_PODGROUPS, {"minMember": 2, "minResources": {"cpu": "lots"}}, {}, "spec.minResources.cpu"),
    (
        X_PODGROUPS,
        {"minMember": 2},
        {"topo-scheduler.io/topology-required": "not a key!"},
        "metadata.annotations.topo-scheduler.io/topology-required",
    ),
    (
        K8S_PODGROUPS,
        {"schedulingPolicy": {"gang": {"minCount": 0}}},
        {},
        "spec.schedulingPolicy.gang.minCount",
    ),
    (
        K8S_PODGROUPS,
        {
            "schedulingPolicy": {"gang": {"minCount": 2}},
            "schedulingConstraints": {"topology": [{"key": "rack/"}]},
        },
        {},
        "spec.schedulingConstraints.topology[0].key",
    ),
]


@pytest.mark.parametrize(("api", "spec", "annotations", "field"), UNREADABLE)
def test_an_unreadable_podgroup_is_reported_naming_the_field_and_not_scheduled(
    emulator: Emulator, api: Resource, spec: dict[str, Any], annotations: dict[str, str], field: str
) -> None:
    emulator.serve(api)
    for i in range(2):
        emulator.create_node(f"n{i}", gpus=8)
    emulator.create(api, podgroup(api, spec, **annotations), "ml")
    for i in range(2):
        emulator.create(PODS, member(f"w{i}", api), "ml")
    prefix = f"pod group ml/job: PodGroup.{api.group} ml/job cannot be read: {field}: "

    async def scenario() -> None:
        with structlog.testing.capture_logs() as logs:
            rep = Replica(fast_settings(emulator)).start()
            await wait_for(
                lambda: all((group_message(emulator, k) or "").startswith(prefix) for k in keys(2)),
                what="the members told why",
            )
            await wait_for(lambda: bool(invalid_events(emulator)), what="an event on the PodGroup")
            if api is K8S_PODGROUPS:

                def condition() -> dict[str, Any]:
                    status = emulator.get(api, "job", "ml").get("status") or {}
                    return next(
                        (
                            c
                            for c in status.get("conditions") or []
                            if c["type"] == CONDITION_SCHEDULED
                        ),
                        {},
                    )

                await wait_for(lambda: condition().get("reason") == "InvalidPodGroup", what="cond")
                assert condition()["status"] == "False"
                assert condition()["message"].startswith(f"{field}: ")
            assert await rep.shutdown() == 0
        errors = [e for e in logs if e["event"] == "pod group cannot be read"]
        assert len(errors) == 1 and errors[0]["field"] == field

    asyncio.run(scenario())
    event = invalid_events(emulator)[0]
    assert event["type"] == "Warning" and event["note"].startswith(f"{field}: ")
    assert event["regarding"]["apiVersion"] == f"{api.group}/{api.version}"
    assert all(emulator.request_count("POST", f"/pods/w{i}/binding") == 0 for i in range(2))


def test_an_edit_into_an_unreadable_spec_is_not_scheduled_on_the_old_one(
    emulator: Emulator,
) -> None:
    """The issue's case: minMember 2 edited to 3 with a value the scheduler cannot read; the
    old spec (minMember 2) bound two members. Then `scheduleTimeoutSeconds: 0` (read as
    scheduler-plugins does: no wait) makes it readable, and the third member completes it."""
    emulator.serve(X_PODGROUPS)
    emulator.create_node("small", gpus=0)
    emulator.create(X_PODGROUPS, podgroup(X_PODGROUPS, {"minMember": 2}), "ml")
    for i in range(2):
        emulator.create(PODS, member(f"w{i}", X_PODGROUPS), "ml")

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        await wait_for(
            lambda: (group_message(emulator, "ml/w0") or "").startswith(
                "pod group ml/job: 0/2 pods fit"
            ),
            what="the group tried on its spec",
        )
        emulator.patch(
            X_PODGROUPS, "job", {"spec": {"minMember": 3, "scheduleTimeoutSeconds": -5}}, "ml"
        )
        prefix = "pod group ml/job: PodGroup.scheduling.x-k8s.io ml/job cannot be read: "
        prefix += "spec.scheduleTimeoutSeconds: must be >= 0, got -5"
        await wait_for(
            lambda: all(group_message(emulator, k) == prefix for k in keys(2)), what="unreadable"
        )
        for i in range(3):
            emulator.create_node(f"n{i}", gpus=8)
        await asyncio.sleep(0.5)
        assert all(emulator.binding_posts(k) == 0 for k in keys(2))  # not on the stale copy
        emulator.patch(X_PODGROUPS, "job", {"spec": {"scheduleTimeoutSeconds": 0}}, "ml")
        waiting = "waiting for 1 more pod of pod group ml/job"
        await wait_for(
            lambda: all(group_message(emulator, k) == waiting for k in keys(2)), what="read again"
        )
        emulator.create(PODS, member("w2", X_PODGROUPS), "ml")
        await wait_for(lambda: all_bound_once(emulator, keys(3)), what="the group bound")
        assert await rep.shutdown() == 0

    asyncio.run(scenario())


def test_a_failed_podgroup_status_write_is_retried_with_backoff(emulator: Emulator) -> None:
    """Before the fix a failed write waited for the next group cycle: a group bound at its
    first cycle never got its status."""
    emulator.serve(X_PODGROUPS)
    for i in range(2):
        emulator.create_node(f"n{i}", gpus=8)
    emulator.create(X_PODGROUPS, podgroup(X_PODGROUPS, {"minMember": 2}), "ml")
    emulator.fail(500, count=3, method="PATCH", path_contains="/podgroups/job/status")
    for i in range(2):
        emulator.create(PODS, member(f"w{i}", X_PODGROUPS), "ml")

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        await wait_for(lambda: all_bound_once(emulator, keys(2)), what="the group bound")
        await wait_for(
            lambda: (
                (emulator.get(X_PODGROUPS, "job", "ml").get("status") or {}).get("phase")
                == "Scheduled"
            ),
            what="phase Scheduled",
        )
        await asyncio.sleep(0.3)
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    assert emulator.request_count("PATCH", "/podgroups/job/status") == 4  # 3 refused, 1 written


def test_a_profile_missing_a_prefilter_fails_the_group_and_the_scheduler_runs_on(
    emulator: Emulator, tmp_path: Path
) -> None:
    """A profile may disable a PreFilter and keep the plugin's Filter (kube-scheduler accepts
    it): every pod then fails with kube's error, a gang included; the scheduler stays up."""
    config = tmp_path / "config.yaml"
    config.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        "profiles:\n- schedulerName: topo-scheduler\n  plugins:\n    preFilter:\n"
        "      disabled: [{name: VolumeRestrictions}]\n"
    )
    for i in range(3):
        emulator.create_node(f"n{i}", gpus=8)
    for i in range(2):
        emulator.create_pod(f"w{i}", **annotated(f"w{i}", min_member=2))
    missing = 'error reading "VolumeRestrictions/rwop-conflicts" from cycleState: not found'

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator, config_file=str(config))).start()
        await wait_for(
            lambda: missing in (group_message(emulator, "ml/w0") or ""), what="the failure"
        )
        await asyncio.sleep(0.3)  # more cycles over the failing group
        assert not rep.task.done()
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    assert emulator.bindings() == {}
