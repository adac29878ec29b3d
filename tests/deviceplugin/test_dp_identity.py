"""Pods are identified by UID and by the devices the kubelet allocates, never by name and
creation time: admission orders other than creation order, pods created in the same second,
pods recreated under the same name, Allocate calls matching no recorded set, and
GetPreferredAllocation requests that repeat or overflow `must_include_deviceIDs`.

Most tests run against both kinds of kubelet PodResources listing (see fake_kubelet.py):
`pod-manager` (the real kubelet: the pod being admitted is listed, the ones waiting behind
it are not) and `all-bound` (every bound pod listed: the plugin cannot tell from the list
which pod is admitted). With the first every pod gets its recorded set; with the second a
wrong guess may cost a pod its set, and then the mismatch is reported against that pod:
an event on it, the metric, and its UID's entry in the node's gpu-assignments annotation.
"""

from __future__ import annotations

import collections
import time
from typing import Any

import grpc
import pytest
from conftest import NODE, Node, RunningPlugin, settle, start_registered
from prometheus_client import generate_latest

from scheduler.agent.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from scheduler.core.topology import (
    ANNOTATION_ASSIGNMENTS,
    ANNOTATION_GPUS,
    format_gpu_indices,
    parse_assignments,
    parse_gpu_indices,
)
from tests.emulator import NODES, PODS, make_pod

Obj = dict[str, Any]
MISMATCHES = "topo_scheduler_gpu_set_mismatches_total"


def _metric(running: RunningPlugin, line_start: str) -> float:
    for line in generate_latest(running.metrics.registry).decode().splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {line_start!r}")




def _same_second(node: Node, specs: list[tuple[str, int, str]]) -> list[Obj]:
    """Create the pods within one second of creation time (as a Job's workers are)."""
    for _ in range(5):
        pods = [node.pod(name, gpus, recorded=rec) for name, gpus, rec in specs]
        if len({p["metadata"]["creationTimestamp"] for p in pods}) == 1:
            return pods
        for name, _, _ in specs:  # a second boundary fell in between: again
            node.emu.delete(PODS, name, "ml")
    raise AssertionError("could not create the pods within one second")


def _got(node: Node, running: RunningPlugin, pod: Obj) -> tuple[int, ...]:
    by_uuid = running.plugin.inventory.by_uuid
    held = node.kubelet.by_uid[pod["metadata"]["uid"]]
    return tuple(sorted(by_uuid[d] for ids in held.values() for d in ids))


def _check(node: Node, running: RunningPlugin, pods: list[Obj]) -> int:
    """Each pod got exactly its recorded set, or its mismatch was reported: an event on it
    (by UID; one per container that got other GPUs) naming what it got and what was
    recorded, its UID's gpu-assignments entry holding what it got, and the metric counting
    the events. Returns the number of pods that did not get their recorded set."""
    settle(running)
    events = [e for e in node.emu.events() if e.get("reason") == "GPUSetMismatch"]
    per_uid = collections.Counter(e["involvedObject"]["uid"] for e in events)
    annotations = node.emu.get(NODES, NODE)["metadata"].get("annotations") or {}
    assignments = parse_assignments(annotations.get(ANNOTATION_ASSIGNMENTS, "{}"))
    mismatched = 0
    for pod in pods:
        uid = pod["metadata"]["uid"]
        got = _got(node, running, pod)
        recorded = parse_gpu_indices(pod["metadata"]["annotations"][ANNOTATION_GPUS])
        if got == recorded:
            assert per_uid[uid] == 0, f"{pod['metadata']['name']}: mismatch reported wrongly"
            assert uid not in assignments
            continue
        mismatched += 1
        name = pod["metadata"]["name"]
        containers = len(pod["spec"]["containers"])
        assert 1 <= per_uid[uid] <= containers, f"{name} got {got} instead of {recorded}"
        for event in [e for e in events if e["involvedObject"]["uid"] == uid]:
            assert event["involvedObject"]["name"] == name
            if containers == 1:
                assert f"GPUs {format_gpu_indices(got)} instead of" in event["message"]
                assert f"recorded {format_gpu_indices(recorded)};" in event["message"]
        assert assignments.get(uid) == got, f"{name}: gpu-assignments does not hold {got}"
    assert _metric(running, MISMATCHES) == len(events)
    return mismatched


def test_same_second_pods_admitted_in_reverse_name_order(node: Node, listing: str) -> None:
    running = start_registered(node)
    a, b = _same_second(node, [("a", 2, "5,6"), ("b", 2, "1,4")])
    node.kubelet.admit(b)  # the kubelet's order, not (creation time, name)
    node.kubelet.admit(a)
    mismatched = _check(node, running, [a, b])
    if listing == "pod-manager":
        assert mismatched == 0
        assert _got(node, running, a) == (5, 6) and _got(node, running, b) == (1, 4)


def test_job_workers_created_together_admitted_in_any_order(node: Node, listing: str) -> None:
    running = start_registered(node)
    specs = [(f"worker-{i}", 1, str(g)) for i, g in enumerate((6, 2, 7, 0))]
    pods = _same_second(node, specs)
    for i in (2, 0, 3, 1):
        node.kubelet.admit(pods[i])
    mismatched = _check(node, running, pods)
    if listing == "pod-manager":
        assert mismatched == 0


def test_later_created_pod_admitted_first(node: Node, listing: str) -> None:
    running = start_registered(node)
    early = node.pod("early", 2, recorded="0,3")
    created = early["metadata"]["creationTimestamp"]
    while time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) == created:
        time.sleep(0.05)
    late = node.pod("late", 2, recorded="4,7")
    assert late["metadata"]["creationTimestamp"] > created
    node.kubelet.admit(late)
    node.kubelet.admit(early)
    mismatched = _check(node, running, [early, late])
    if listing == "pod-manager":
        assert mismatched == 0


def test_three_pods_in_reverse_creation_order(node: Node, listing: str) -> None:
    running = start_registered(node)
    pods = [node.pod(f"p{i}", 2, recorded=rec) for i, rec in enumerate(("0,1", "2,3", "4,5"))]
    node.kubelet.admit_pending(order=lambda p: -int(p["metadata"]["name"][1:]))
    assert node.kubelet.admissions == [("ml", "p2"), ("ml", "p1"), ("ml", "p0")]
    mismatched = _check(node, running, pods)
    if listing == "pod-manager":
        assert mismatched == 0


def test_allocate_matching_no_recorded_set_is_reported_on_the_pod_that_got_it(
    node: Node, listing: str
) -> None:
    running = start_registered(node)
    index = running.plugin.inventory.by_index
    a = node.pod("a", 2, recorded="0,1")
    b = node.pod("b", 2, recorded="2,3")
    node.kubelet.substitute = lambda chosen, available: [index[6], index[7]]
    node.kubelet.admit(b)  # the kubelet gives b GPUs 6,7: nobody's recorded set
    node.kubelet.substitute = None
    node.kubelet.admit(a)
    assert _got(node, running, b) == (6, 7)
    assert _check(node, running, [a, b]) == 1  # b's, whoever the plugin guessed at first
    assert _got(node, running, a) == (0, 1)
    annotations = node.emu.get(NODES, NODE)["metadata"]["annotations"]
    assert parse_assignments(annotations[ANNOTATION_ASSIGNMENTS]) == {b["metadata"]["uid"]: (6, 7)}


def test_recreated_pod_gets_its_own_set(node: Node, listing: str) -> None:
    running = start_registered(node)
    old = node.pod("x", 2, recorded="0,1")
    node.kubelet.admit(old)
    settle(running)
    node.kubelet.release_uid(old["metadata"]["uid"])  # the job ended: GPUs 0,1 free again
    node.emu.delete(PODS, "x", "ml")
    new = node.pod("x", 2, recorded="2,3")
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    node.kubelet.admit(new)
    assert _got(node, running, new) == (2, 3)
    assert _check(node, running, [new]) == 0


def test_recreated_pod_while_the_old_one_still_holds_its_gpus(node: Node, listing: str) -> None:
    running = start_registered(node)
    old = node.pod("x", 2, recorded="0,1")
    node.kubelet.admit(old)
    settle(running)
    node.emu.delete(PODS, "x", "ml")  # gone from the API; the kubelet still terminates it
    new = node.pod("x", 2, recorded="4,7")  # not the pair our own pick would give
    node.kubelet.admit(new)  # PodResources lists ml/x twice: with 0,1 and without devices
    assert _got(node, running, new) == (4, 7)
    assert _check(node, running, [new]) == 0


def test_recreated_pod_with_the_watch_still_showing_the_old_one(node: Node, listing: str) -> None:
    running = start_registered(node)
    old = node.pod("x", 2, recorded="0,1")
    node.kubelet.admit(old)
    settle(running)
    stale = running.watch.snapshot()
    assert stale is not None
    running.watch.snapshot = lambda: stale  # type: ignore[method-assign]
    node.kubelet.release_uid(old["metadata"]["uid"])
    node.emu.delete(PODS, "x", "ml")
    new = node.pod("x", 2, recorded="2,3")
    node.kubelet.admit(new)
    assert _got(node, running, new) == (2, 3)  # never the old pod's 0,1
    assert _check(node, running, [new]) == 0


def test_pod_with_two_gpu_containers_admitted_after_a_later_pod(node: Node, listing: str) -> None:
    running = start_registered(node)
    obj = make_pod("pair", namespace="ml", gpus=2, node=NODE)
    obj["metadata"]["annotations"] = {ANNOTATION_GPUS: "0,3,4,7"}
    second = dict(obj["spec"]["containers"][0], name="second")
    obj["spec"]["containers"].append(second)
    pair = node.emu.create(PODS, obj, "ml")
    single = node.pod("single", 2, recorded="1,2")
    node.kubelet.admit(single)
    node.kubelet.admit(pair)
    held = node.kubelet.by_uid[pair["metadata"]["uid"]]
    by_uuid = running.plugin.inventory.by_uuid
    first, other = ({by_uuid[d] for d in held[c]} for c in ("main", "second"))
    assert len(first) == len(other) == 2 and not first & other
    mismatched = _check(node, running, [single, pair])
    if listing == "pod-manager":
        assert mismatched == 0
        assert first | other == {0, 3, 4, 7}


def _prefer(running: RunningPlugin, available: list[str], must: list[str], size: int) -> list[str]:
    with grpc.insecure_channel(f"unix://{running.server.config.socket_path}") as channel:
        stub = api_pb2_grpc.DevicePluginStub(channel)
        answer = stub.GetPreferredAllocation(
            api_pb2.PreferredAllocationRequest(
                container_requests=[
                    api_pb2.ContainerPreferredAllocationRequest(
                        available_deviceIDs=available,
                        must_include_deviceIDs=must,
                        allocation_size=size,
                    )
                ]
            ),
            timeout=10,
        )
    return list(answer.container_responses[0].deviceIDs)


@pytest.mark.parametrize("recorded", [None, "5,6"])
def test_preferred_allocation_never_answers_a_device_twice(
    node: Node, recorded: str | None
) -> None:
    running = start_registered(node)
    if recorded is not None:
        node.pod("a", 2, recorded=recorded)
        time.sleep(0.2)  # the watch sees it
    uuid = running.plugin.inventory.by_index
    everything = [uuid[i] for i in range(8)]
    cases: list[tuple[list[str], list[str], int]] = [
        (everything, [uuid[3], uuid[3]], 2),  # must_include repeated
        (everything + everything, [], 2),  # available repeated
        (everything, [uuid[4], uuid[1], uuid[4], uuid[2]], 2),  # more must than the size
        (everything, ["GPU-not-ours", uuid[0]], 2),  # a device we do not advertise
        (everything, [uuid[7]], 0),  # nothing asked
        ([uuid[0]], [uuid[0], uuid[0]], 3),  # fewer available than asked
        ([], [], 2),  # nothing available
        (everything, [], 2**31 - 1),  # more than the node has
        (everything, [uuid[1]], -1),  # a negative size
    ]
    for available, must, size in cases:
        answer = _prefer(running, available, must, size)
        assert len(answer) == len(set(answer)), f"{must} / {size}: {answer}"
        assert len(answer) <= max(size, 0)
        assert set(answer) <= set(everything)
        known_must = list(dict.fromkeys(m for m in must if m in everything))
        assert set(known_must[:size]) <= set(answer), f"must_include {must} not in {answer}"
