"""The device plugin through a fake kubelet speaking v1beta1, with pods in the API emulator."""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any

import grpc
import pytest
from conftest import NODE, Node, RunningPlugin, index_of, settle
from prometheus_client import generate_latest

from scheduler.agent.deviceplugin.plugin import DeviceListStrategy
from scheduler.agent.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from scheduler.agent.fakegpus import FakeNvml, parse_fake_gpus
from scheduler.core.topology import (
    ANNOTATION_ASSIGNMENTS,
    GpuSelector,
    format_gpu_indices,
    indices_to_mask,
    parse_assignments,
)
from tests.emulator import NODES, PODS


def _metric(running: RunningPlugin, line_start: str) -> float:
    for line in generate_latest(running.metrics.registry).decode().splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {line_start!r}")


def _start(node: Node, **kw: object) -> RunningPlugin:
    registered = len(node.kubelet.registrations)
    running = node.start_plugin(**kw)  # type: ignore[arg-type]
    running.watch.synced.wait(5)
    node.kubelet.wait_registered(registered + 1)
    return running


def test_registration_and_device_list(node: Node) -> None:
    running = _start(node)
    request = node.kubelet.registrations[0]
    assert request.version == "v1beta1"
    assert request.resource_name == "nvidia.com/gpu"
    assert request.endpoint == "topo-scheduler-gpu.sock"
    assert request.options.get_preferred_allocation_available
    inventory = running.plugin.inventory
    assert sorted(node.kubelet.devices) == sorted(inventory.by_uuid)
    assert set(node.kubelet.devices.values()) == {"Healthy"}
    # DGX A100 in NPS4 mode: GPUs 0,1 on NUMA node 3, 2,3 on 1, 4,5 on 7, 6,7 on 5.
    numa = [node.kubelet.device_numa[inventory.by_index[i]] for i in range(8)]
    assert numa == [[3], [3], [1], [1], [7], [7], [5], [5]]


def test_two_pods_of_equal_size_each_get_their_recorded_set(node: Node) -> None:
    running = _start(node)
    node.pod("a", 2, recorded="5,6")
    node.pod("b", 2, recorded="1,4")
    done = node.kubelet.admit_pending()
    assert done == [("ml", "a"), ("ml", "b")]
    by_uuid = index_of(running)
    got = {k: sorted(by_uuid(d) for d in v["main"]) for k, v in node.kubelet.allocated.items()}
    assert got == {("ml", "a"): [5, 6], ("ml", "b"): [1, 4]}
    assert _metric(running, "topo_scheduler_gpu_set_mismatches_total") == 0
    assert (
        _metric(running, 'topo_scheduler_device_plugin_allocations_total{source="recorded"}') == 2
    )


def test_envvar_and_cdi_device_lists(node: Node) -> None:
    running = _start(node)
    pod = node.pod("a", 2, recorded="2,3")
    uuids = [running.plugin.inventory.by_index[i] for i in (2, 3)]
    admitted = node.kubelet.admit(pod)["main"]
    assert admitted.envs == {"NVIDIA_VISIBLE_DEVICES": ",".join(uuids)}
    assert admitted.cdi_devices == []
    running.shutdown()
    node.strategy = DeviceListStrategy.CDI_CRI
    _start(node)
    admitted = node.kubelet.admit(node.pod("b", 1, recorded="7"))["main"]
    assert admitted.envs == {}
    assert admitted.cdi_devices == [f"nvidia.com/gpu={running.plugin.inventory.by_index[7]}"]


def test_substituted_device_is_reported_as_mismatch(node: Node) -> None:
    running = _start(node)
    inventory = running.plugin.inventory

    def swap_last(chosen: list[str], available: list[str]) -> list[str]:
        spare = next(d for d in available if d not in chosen)
        return [*chosen[:-1], spare]

    node.kubelet.substitute = swap_last
    pod = node.pod("a", 2, recorded="4,5")
    admitted = node.kubelet.admit(pod)["main"]
    actual = tuple(sorted(inventory.by_uuid[d] for d in admitted.devices))
    assert actual != (4, 5)
    settle(running)
    assert _metric(running, "topo_scheduler_gpu_set_mismatches_total") == 1
    events = [e for e in node.emu.events() if e.get("reason") == "GPUSetMismatch"]
    assert len(events) == 1
    event = events[0]
    assert event["type"] == "Warning"
    assert event["involvedObject"]["name"] == "a"
    assert event["involvedObject"]["uid"] == pod["metadata"]["uid"]
    assert f"GPUs {format_gpu_indices(actual)}" in event["message"]
    assert "recorded 4,5" in event["message"]
    annotations = node.emu.get(NODES, NODE)["metadata"]["annotations"]
    assignments = parse_assignments(annotations[ANNOTATION_ASSIGNMENTS])
    assert assignments == {pod["metadata"]["uid"]: actual}


def test_assignment_merges_with_entries_written_by_the_agent(node: Node) -> None:
    node.emu.patch(
        NODES, NODE, {"metadata": {"annotations": {ANNOTATION_ASSIGNMENTS: '{"uid-x":[0]}'}}}
    )
    running = _start(node)
    pod = node.pod("foreign", 1, scheduler="default-scheduler")
    node.kubelet.admit(pod)
    settle(running)
    annotations = node.emu.get(NODES, NODE)["metadata"]["annotations"]
    assignments = parse_assignments(annotations[ANNOTATION_ASSIGNMENTS])
    assert set(assignments) == {"uid-x", pod["metadata"]["uid"]}


def test_pod_of_another_scheduler_gets_our_own_best_set(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    node.fake_gpus = "dgx1-v100"
    running = _start(node)
    node.pod("held", 1, recorded="0")
    node.kubelet.admit_pending()
    caplog.set_level(logging.INFO, logger="topo_scheduler.device_plugin")
    pod = node.pod("foreign", 2, scheduler="default-scheduler")
    admitted = node.kubelet.admit(pod)["main"]
    got = tuple(sorted(running.plugin.inventory.by_uuid[d] for d in admitted.devices))
    topology = running.plugin.inventory.topology()
    best = GpuSelector().best_set(topology, indices_to_mask(range(1, 8)), 2)
    assert best is not None and got == best.gpus
    assert got != (1, 2)  # not simply the lowest free indices
    assert "another scheduler" in caplog.text
    assert (
        _metric(running, 'topo_scheduler_device_plugin_allocations_total{source="no-record"}') == 1
    )
    settle(running)
    annotations = node.emu.get(NODES, NODE)["metadata"]["annotations"]
    assert parse_assignments(annotations[ANNOTATION_ASSIGNMENTS]) == {pod["metadata"]["uid"]: got}


def test_kubelet_restart_re_registers(node: Node) -> None:
    running = _start(node)
    node.kubelet.admit(node.pod("a", 2, recorded="6,7"))
    node.kubelet.restart()
    node.kubelet.wait_registered(2)
    assert running.server.registrations == 2
    pod = node.pod("b", 4, recorded="0,1,2,3")
    admitted = node.kubelet.admit(pod)["main"]
    assert sorted(running.plugin.inventory.by_uuid[d] for d in admitted.devices) == [0, 1, 2, 3]


def test_gpu_turning_unhealthy_updates_the_stream(node: Node) -> None:
    running = _start(node)
    inventory = running.plugin.inventory
    uuid = inventory.by_index
    updates = node.kubelet.updates
    running.nvml.fail_gpu(3)  # falls off the bus: its NVML calls fail
    node.kubelet.wait(lambda: node.kubelet.devices.get(uuid[3]) == "Unhealthy", what="GPU 3")
    assert node.kubelet.updates > updates
    running.nvml.raise_xid(5, 79)
    node.kubelet.wait(lambda: node.kubelet.devices.get(uuid[5]) == "Unhealthy", what="GPU 5")
    running.nvml.raise_xid(6, 13)  # application error: skipped
    running.nvml.raise_ecc(7, double_bit=False)  # corrected: skipped
    running.nvml.raise_ecc(1, double_bit=True)
    node.kubelet.wait(lambda: node.kubelet.devices.get(uuid[1]) == "Unhealthy", what="GPU 1")
    health = {inventory.by_uuid[d]: h for d, h in node.kubelet.devices.items()}
    assert [i for i, h in sorted(health.items()) if h == "Unhealthy"] == [1, 3, 5]
    assert _metric(running, 'topo_scheduler_device_plugin_devices{health="Unhealthy"}') == 3
    # A pod whose recorded set holds an unhealthy GPU gets our own best set of healthy ones.
    admitted = node.kubelet.admit(node.pod("a", 2, recorded="2,3"))["main"]
    got = {inventory.by_uuid[d] for d in admitted.devices}
    assert not got & {1, 3, 5}
    settle(running)
    assert _metric(running, "topo_scheduler_gpu_set_mismatches_total") == 1


def test_gpu_failing_from_the_start_is_unhealthy(node: Node) -> None:
    running = _start(node, nvml=FakeNvml(parse_fake_gpus("dgx-a100:fail=3"), NODE))
    uuid = running.plugin.inventory.by_index[3]
    node.kubelet.wait(lambda: node.kubelet.devices.get(uuid) == "Unhealthy", what="GPU 3")
    assert sum(h == "Healthy" for h in node.kubelet.devices.values()) == 7


def test_plugin_restart_with_pods_pending(node: Node) -> None:
    first = _start(node)
    node.pod("a", 2, recorded="0,1")
    node.pod("b", 2, recorded="2,3")
    node.kubelet.admit_pending()
    node.pod("c", 2, recorded="4,5")
    node.pod("d", 2, recorded="6,7")
    first.shutdown()
    second = _start(node)
    node.kubelet.admit_pending()
    got = {
        k[1]: sorted(second.plugin.inventory.by_uuid[d] for d in v["main"])
        for k, v in node.kubelet.allocated.items()
    }
    assert got == {"a": [0, 1], "b": [2, 3], "c": [4, 5], "d": [6, 7]}


def test_api_server_unreachable_falls_back_and_says_so(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    node.api_url = "http://127.0.0.1:9"  # nothing listens there
    node.fake_gpus = "dgx1-v100"
    running = node.start_plugin()
    node.kubelet.wait_registered(1)
    caplog.set_level(logging.INFO, logger="topo_scheduler.device_plugin")
    pod = node.pod("a", 2, recorded="6,7")
    admitted = node.kubelet.admit(pod)["main"]
    got = tuple(sorted(running.plugin.inventory.by_uuid[d] for d in admitted.devices))
    best = GpuSelector().best_set(running.plugin.inventory.topology(), 0xFF, 2)
    assert best is not None and got == best.gpus
    assert "the API server cannot be reached" in caplog.text
    source = 'topo_scheduler_device_plugin_allocations_total{source="api-unreachable"}'
    assert _metric(running, source) == 1


def test_concurrent_allocate_calls_are_serialized(node: Node) -> None:
    running = _start(node)
    inventory = running.plugin.inventory
    recorded = {f"p{i}": (2 * i, 2 * i + 1) for i in range(4)}
    for name, gpus in recorded.items():
        node.pod(name, 2, recorded=format_gpu_indices(gpus))
    running.watch.synced.wait(5)
    time.sleep(0.3)  # let the watch see the four pods
    plain = running.watch.snapshot

    def slow_snapshot() -> list[dict[str, Any]] | None:
        time.sleep(0.2)  # widen the window in which unserialized calls would overlap
        return plain()

    running.watch.snapshot = slow_snapshot  # type: ignore[method-assign]
    channel = grpc.insecure_channel(f"unix://{running.server.config.socket_path}")
    stub = api_pb2_grpc.DevicePluginStub(channel)
    barrier = threading.Barrier(4)

    def call(gpus: tuple[int, ...]) -> None:
        request = api_pb2.AllocateRequest(
            container_requests=[
                api_pb2.ContainerAllocateRequest(devices_ids=[inventory.by_index[g] for g in gpus])
            ]
        )
        barrier.wait()
        stub.Allocate(request, timeout=10)

    threads = [threading.Thread(target=call, args=(g,)) for g in recorded.values()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    channel.close()
    # Each call was attributed to a different pod: none was taken twice as "being admitted".
    grants = running.plugin._grants
    assert sorted(g.guess.pod.name for g in grants if g.guess) == ["p0", "p1", "p2", "p3"]
    assert all(g.expected == g.indices for g in grants)


def test_hundred_pods_in_sequence_never_share_a_gpu(node: Node) -> None:
    node.fake_gpus = "dgx-h100"
    running = _start(node)
    inventory = running.plugin.inventory
    rng = random.Random(7)
    live: list[tuple[str, tuple[int, ...]]] = []
    for n in range(100):
        size = rng.choice((1, 1, 2, 2, 4, 8))
        in_use = {inventory.by_uuid[d] for d in node.kubelet.in_use()}
        while len(in_use) > 8 - size:  # finish pods until this one fits, as jobs end
            name, gpus = live.pop(rng.randrange(len(live)))
            node.kubelet.release("ml", name)
            node.emu.delete(PODS, name, "ml")  # the job ended and its pod is gone
            in_use -= set(gpus)
        # Any free set the scheduler may have recorded, not only the plugin's own pick.
        recorded = tuple(sorted(rng.sample([i for i in range(8) if i not in in_use], size)))
        name = f"job-{n:03d}"
        pod = node.pod(name, size, recorded=format_gpu_indices(recorded))
        before = node.kubelet.in_use()
        admitted = node.kubelet.admit(pod)["main"]
        assert not set(admitted.devices) & before, f"{name} got a GPU held by another pod"
        got = tuple(sorted(inventory.by_uuid[d] for d in admitted.devices))
        assert got == recorded, f"{name}: got {got}, recorded {recorded}"
        live.append((name, got))
    settle(running)
    assert _metric(running, "topo_scheduler_gpu_set_mismatches_total") == 0
    held = [d for pod in node.kubelet.allocated.values() for ids in pod.values() for d in ids]
    assert len(held) == len(set(held))


def test_pod_resources_unreachable_falls_back_and_says_so(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    running = _start(node)
    assert node.kubelet._pod_resources is not None
    node.kubelet._pod_resources.stop(None)
    caplog.set_level(logging.INFO, logger="topo_scheduler.device_plugin")
    node.kubelet.admit(node.pod("a", 2, recorded="6,7"))
    assert "the kubelet's PodResources cannot be reached" in caplog.text
    source = 'topo_scheduler_device_plugin_allocations_total{source="kubelet-unreachable"}'
    assert _metric(running, source) == 1
