"""Allocations the kubelet makes for no pending pod of ours (a pod deleted between
GetPreferredAllocation and Allocate, another scheduler's GPU init container) are not pinned on
the next pod of that size: it still gets its recorded set."""

from __future__ import annotations

import time
from typing import Any

import grpc
from conftest import Node, RunningPlugin, start_registered

from scheduler.agent.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from tests.emulator import PODS, make_pod


def _indices(running: RunningPlugin, ids: list[str]) -> list[int]:
    return sorted(running.plugin.inventory.by_uuid[d] for d in ids)


def _prefer_and_allocate(running: RunningPlugin, node: Node, size: int, before: Any) -> list[str]:
    """The kubelet's two calls for one container, `before()` run between them."""
    channel = grpc.insecure_channel(f"unix://{running.server.config.socket_path}")
    try:
        stub = api_pb2_grpc.DevicePluginStub(channel)
        request = api_pb2.ContainerPreferredAllocationRequest(
            available_deviceIDs=sorted(node.kubelet.devices), allocation_size=size
        )
        answer = stub.GetPreferredAllocation(
            api_pb2.PreferredAllocationRequest(container_requests=[request]), timeout=10
        )
        chosen = list(answer.container_responses[0].deviceIDs)
        before()
        allocate = api_pb2.ContainerAllocateRequest(devices_ids=chosen)
        stub.Allocate(api_pb2.AllocateRequest(container_requests=[allocate]), timeout=10)
        return chosen
    finally:
        channel.close()


def test_a_pod_deleted_between_preference_and_allocate_costs_no_other_pod_its_set(
    node: Node, listing: str
) -> None:
    running = start_registered(node)
    a = node.pod("a", 2, recorded="0,1")
    b = node.pod("b", 2, recorded="4,5")
    time.sleep(0.3)
    kubelet = node.kubelet
    with kubelet._lock:
        kubelet.pod_manager[a["metadata"]["uid"]] = a  # the kubelet admits a

    def delete_a() -> None:
        node.emu.delete(PODS, "a", "ml")
        time.sleep(0.3)

    chosen = _prefer_and_allocate(running, node, 2, delete_a)
    assert _indices(running, chosen) == [0, 1]  # a's record, preferred while it lived
    kubelet.release_uid(a["metadata"]["uid"])  # a is killed: it never holds the devices
    time.sleep(0.5)
    assert _indices(running, kubelet.admit(b)["main"].devices) == [4, 5]


def test_another_schedulers_gpu_init_container_gets_no_pods_recorded_set(node: Node) -> None:
    running = start_registered(node)
    b = node.pod("b", 2, recorded="4,5")
    spec = make_pod("c", namespace="ml", node="gpu-1", scheduler="default-scheduler")
    gpus = {"nvidia.com/gpu": "2"}
    spec["spec"]["initContainers"] = [
        {"name": "warmup", "image": "x", "resources": {"limits": gpus, "requests": gpus}}
    ]
    c = node.emu.create(PODS, spec, "ml")
    time.sleep(0.3)
    kubelet = node.kubelet
    with kubelet._lock:
        kubelet.pod_manager[c["metadata"]["uid"]] = c  # the kubelet admits c
    chosen = _prefer_and_allocate(running, node, 2, lambda: None)
    with kubelet._lock:  # an init container keeps its devices
        kubelet.by_uid.setdefault(c["metadata"]["uid"], {})["warmup"] = chosen
    assert _indices(running, chosen) != [4, 5]
    time.sleep(0.5)
    assert _indices(running, kubelet.admit(b)["main"].devices) == [4, 5]
