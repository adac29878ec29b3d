"""Kubelet PodResources v1 List through a fake gRPC kubelet on a unix socket."""

from __future__ import annotations

from pathlib import Path

import pytest
from topo_fakes import FakeKubelet, FakeNodeApi, FakeNvml, dgx_a100, fake_sysfs

from scheduler.agent.loop import Agent, AgentConfig
from scheduler.agent.podresources import (
    ContainerDevices,
    ContainerResources,
    PodResources,
    PodResourcesError,
    decode_list_response,
    encode_list_response,
    gpu_assignments,
    list_pod_resources,
)
from scheduler.core.topology import ANNOTATION_ASSIGNMENTS, parse_assignments


def _uuid(i: int) -> str:
    return f"GPU-{i:08x}-1111-2222-3333-444455556666"


PODS = [
    PodResources(
        "trainer-0",
        "ml",
        (
            ContainerResources(
                "main",
                (
                    ContainerDevices("nvidia.com/gpu", (_uuid(0), _uuid(1))),
                    ContainerDevices("rdma/hca", ("mlx5_0",)),
                ),
            ),
            ContainerResources("sidecar", (ContainerDevices("nvidia.com/gpu", (_uuid(3),)),)),
        ),
    ),
    PodResources(
        "shared",
        "ml",
        (ContainerResources("c", (ContainerDevices("nvidia.com/gpu", (f"{_uuid(5)}::2",)),)),),
    ),
    PodResources(
        "mig-user",
        "ml",
        (ContainerResources("c", (ContainerDevices("nvidia.com/gpu", ("MIG-abc",)),)),),
    ),
    PodResources("cpu-only", "default", (ContainerResources("c", ()),)),
]


def test_wire_round_trip_and_unknown_fields_skipped() -> None:
    data = encode_list_response(PODS)
    assert decode_list_response(data) == tuple(PODS)
    # An unknown varint field (cpu_ids = 3 in ContainerResources) and a fixed64 are skipped.
    extra = bytes([0x18, 0x05]) + bytes([0x21]) + bytes(8)
    assert decode_list_response(data + extra) == tuple(PODS)
    with pytest.raises(PodResourcesError):
        decode_list_response(data[:-3])


def test_list_over_unix_socket(tmp_path: Path) -> None:
    socket = str(tmp_path / "kubelet.sock")
    with FakeKubelet(socket, PODS) as kubelet:
        pods = list_pod_resources(socket, timeout=5)
    assert kubelet.requests == 1
    assert pods == tuple(PODS)


def test_unreachable_socket_raises_named_error(tmp_path: Path) -> None:
    with pytest.raises(PodResourcesError, match="kubelet pod-resources"):
        list_pod_resources(str(tmp_path / "absent.sock"), timeout=1)


def test_assignments_map_uuids_to_indices() -> None:
    uids = {("ml", "trainer-0"): "uid-t", ("ml", "shared"): "uid-s", ("ml", "mig-user"): "uid-m"}
    out = gpu_assignments(PODS, {_uuid(i): i for i in range(8)}, uids)
    assert out == {"uid-s": (5,), "uid-t": (0, 1, 3)}


def test_agent_publishes_assignments(tmp_path: Path) -> None:
    socket = str(tmp_path / "kubelet.sock")
    machine = dgx_a100()
    api = FakeNodeApi(uids={("ml", "trainer-0"): "uid-t", ("ml", "shared"): "uid-s"})
    config = AgentConfig(node_name="gpu-1", pod_resources_socket=socket)
    agent = Agent(config, FakeNvml(machine), api, read_file=fake_sysfs(machine).get)
    with FakeKubelet(socket, PODS):
        agent.sync_once()
        published = parse_assignments(api.annotations[ANNOTATION_ASSIGNMENTS], node="gpu-1")
        assert published == {"uid-t": (0, 1, 3), "uid-s": (5,)}
        assert agent.sync_once().patched == ()


def test_kubelet_failure_still_publishes_topology() -> None:
    machine = dgx_a100()
    api = FakeNodeApi(annotations={ANNOTATION_ASSIGNMENTS: '{"uid-old":[1]}'})

    def broken(socket: str) -> tuple[PodResources, ...]:
        raise PodResourcesError(f"kubelet pod-resources {socket}: unavailable")

    config = AgentConfig(node_name="gpu-1", pod_resources_socket="/run/kubelet.sock")
    agent = Agent(
        config,
        FakeNvml(machine),
        api,
        read_file=fake_sysfs(machine).get,
        list_pods=broken,
        socket_exists=lambda path: True,
    )
    assert agent.sync_once().patched == ("topo-scheduler.io/gpu-topology",)
    assert api.annotations[ANNOTATION_ASSIGNMENTS] == '{"uid-old":[1]}'  # left as it was
