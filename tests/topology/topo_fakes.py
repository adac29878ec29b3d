"""Test doubles for the topology agent: a fake NVML backend describing real machines, a fake
sysfs, a fake node API, and a fake kubelet pod-resources gRPC server."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pynvml

from scheduler.agent.podresources import SERVICE_NAME, PodResources, encode_list_response

DATA = Path(__file__).parent / "data"


@dataclass(frozen=True)
class FakeGpu:
    """One GPU: PCI address (NVML form), NUMA node, PCIe path from the root, identity."""

    bus_id: str
    numa: int
    pcie_path: tuple[str, ...]
    name: str = "NVIDIA A100-SXM4-80GB"
    memory_mib: int = 81920
    mig: bool | None = False  # None: MIG not supported by this GPU
    failing: str | None = None  # "calls": every query fails; "handle": no handle at all


@dataclass(frozen=True)
class Machine:
    """GPUs, direct NVLinks (a, b, count) and NVSwitch links (gpu, switch bus id, count)."""

    gpus: tuple[FakeGpu, ...]
    direct: tuple[tuple[int, int, int], ...] = ()
    switch_links: tuple[tuple[int, str, int], ...] = ()
    remote_type_supported: bool = True
    sysfs_numa: bool = True


def _bus(i: int) -> str:
    return f"00000000:{0x07 + 0x10 * i:02X}:00.0"


def _gpus(
    paths: list[tuple[str, ...]], numas: list[int], name: str, memory: int, mig: bool | None
) -> tuple[FakeGpu, ...]:
    return tuple(FakeGpu(_bus(i), numas[i], paths[i], name, memory, mig) for i in range(len(paths)))


def dgx1_v100() -> Machine:
    """DGX-1 V100: hybrid cube mesh, 6 NVLinks per GPU, two PLX switches per socket."""
    paths = [("cpu0", "hb0", "plx0")] * 2 + [("cpu0", "hb0", "plx1")] * 2
    paths += [("cpu1", "hb1", "plx2")] * 2 + [("cpu1", "hb1", "plx3")] * 2
    # Two quads (0-3, 4-7) each a ring with doubled diagonals, joined GPU i <-> i+4.
    direct = (
        (0, 1, 1), (0, 2, 1), (0, 3, 2), (1, 2, 2), (1, 3, 1), (2, 3, 2),
        (4, 5, 1), (4, 6, 1), (4, 7, 2), (5, 6, 2), (5, 7, 1), (6, 7, 2),
        (0, 4, 2), (1, 5, 2), (2, 6, 1), (3, 7, 1),
    )  # fmt: skip
    gpus = _gpus(paths, [0] * 4 + [1] * 4, "Tesla V100-SXM2-32GB", 32768, None)
    return Machine(gpus, direct=direct, remote_type_supported=False, sysfs_numa=False)


def dgx_a100() -> Machine:
    """DGX A100: 6 NVSwitches, 2 links from every GPU to each; NPS4 NUMA nodes 3,1,7,5."""
    paths = [("s0", f"hb{k}", f"sw{k}", f"sw{k}{i % 2}") for k in (0, 1) for i in range(2)]
    paths += [("s1", f"hb{k}", f"sw{k}", f"sw{k}{i % 2}") for k in (2, 3) for i in range(2)]
    links = tuple((g, f"00000000:{0xC0 + s:02X}:00.0", 2) for g in range(8) for s in range(6))
    gpus = _gpus(paths, [3, 3, 1, 1, 7, 7, 5, 5], "NVIDIA A100-SXM4-80GB", 81920, False)
    return Machine(gpus, switch_links=links)


def dgx_h100() -> Machine:
    """DGX H100: 4 NVSwitch chips, 5+4+4+5 links from every GPU."""
    paths = [("s0", f"hb{i}", f"sw{i}") for i in range(4)]
    paths += [("s1", f"hb{i}", f"sw{i}") for i in range(4, 8)]
    per_switch = (5, 4, 4, 5)
    links = tuple(
        (g, f"00000000:{0xA0 + s:02X}:00.0", n) for g in range(8) for s, n in enumerate(per_switch)
    )
    gpus = _gpus(paths, [0] * 4 + [1] * 4, "NVIDIA H100 80GB HBM3", 81559, False)
    return Machine(gpus, switch_links=links)


def pcie_8gpu_2socket(mig_gpu: int | None = None, failing: dict[int, str] | None = None) -> Machine:
    """Two sockets, two PCIe switches per socket, two GPUs per switch; no NVLink."""
    paths = [(f"s{i // 4}", f"hb{i // 2}", f"sw{i // 2}") for i in range(8)]
    gpus = list(_gpus(paths, [0] * 4 + [1] * 4, "NVIDIA A100 80GB PCIe", 81920, False))
    if mig_gpu is not None:
        g = gpus[mig_gpu]
        gpus[mig_gpu] = FakeGpu(g.bus_id, g.numa, g.pcie_path, g.name, g.memory_mib, True)
    for index, mode in (failing or {}).items():
        g = gpus[index]
        gpus[index] = FakeGpu(g.bus_id, g.numa, g.pcie_path, g.name, g.memory_mib, False, mode)
    return Machine(tuple(gpus))


def all_sys_2numa() -> Machine:
    """A VM whose hypervisor hides the PCIe tree: every pair SYS, GPUs on NUMA 0,0,1,1."""
    paths = [(f"root{i}",) for i in range(4)]
    return Machine(_gpus(paths, [0, 0, 1, 1], "Tesla T4", 15360, None))


def _level(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    common = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        common += 1
    if common == 0:
        return pynvml.NVML_TOPOLOGY_SYSTEM
    if common == 1:
        return pynvml.NVML_TOPOLOGY_NODE
    if common == 2:
        return pynvml.NVML_TOPOLOGY_HOSTBRIDGE
    if common == len(a) == len(b):
        return pynvml.NVML_TOPOLOGY_SINGLE
    return pynvml.NVML_TOPOLOGY_MULTIPLE


@dataclass
class FakeNvml:
    """Same call names, constants and exception classes as pynvml, answering for a Machine."""

    machine: Machine
    init_error: type[Exception] | None = None
    count_error: bool = False
    calls: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        for name in dir(pynvml):
            if name.startswith(("NVMLError", "NVML_")):
                setattr(self, name, getattr(pynvml, name))
        self.NVML_NVLINK_MAX_LINKS = 18
        ends: dict[int, list[tuple[str, int]]] = {i: [] for i in range(len(self.machine.gpus))}
        for a, b, n in self.machine.direct:
            ends[a] += [(self.machine.gpus[b].bus_id, pynvml.NVML_NVLINK_DEVICE_TYPE_GPU)] * n
            ends[b] += [(self.machine.gpus[a].bus_id, pynvml.NVML_NVLINK_DEVICE_TYPE_GPU)] * n
        for g, switch, n in self.machine.switch_links:
            ends[g] += [(switch, pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH)] * n
        self._ends = ends

    def _gpu(self, handle: Any) -> FakeGpu:
        gpu = self.machine.gpus[handle.index]
        if gpu.failing:
            raise pynvml.NVMLError_GpuIsLost()
        return gpu

    def nvmlInit(self) -> None:
        self.calls.append("init")
        if self.init_error is not None:
            raise self.init_error()

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self) -> int:
        if self.count_error:
            raise pynvml.NVMLError_Unknown()
        return len(self.machine.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        if index >= len(self.machine.gpus):
            raise pynvml.NVMLError_InvalidArgument()
        if self.machine.gpus[index].failing == "handle":
            raise pynvml.NVMLError_Unknown()
        return SimpleNamespace(index=index)

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        self._gpu(handle)
        return f"GPU-{handle.index:08x}-1111-2222-3333-444455556666"

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return self._gpu(handle).name

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        return SimpleNamespace(total=self._gpu(handle).memory_mib << 20)

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        return SimpleNamespace(busId=self._gpu(handle).bus_id.encode())

    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        mig = self._gpu(handle).mig
        if mig is None:
            raise pynvml.NVMLError_NotSupported()
        return [int(mig), int(mig)]

    def nvmlDeviceGetMemoryAffinity(self, handle: Any, size: int, scope: int) -> list[int]:
        return [1 << self._gpu(handle).numa] + [0] * (size - 1)

    def nvmlDeviceGetTopologyCommonAncestor(self, h1: Any, h2: Any) -> int:
        return _level(self._gpu(h1).pcie_path, self._gpu(h2).pcie_path)

    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int:
        self._gpu(handle)
        if link >= len(self._ends[handle.index]):
            raise pynvml.NVMLError_NotSupported()
        return pynvml.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: Any, link: int) -> Any:
        self._gpu(handle)
        return SimpleNamespace(busId=self._ends[handle.index][link][0])

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: int) -> int:
        if not self.machine.remote_type_supported:
            raise pynvml.NVMLError_FunctionNotFound()
        return self._ends[handle.index][link][1]


def fake_sysfs(machine: Machine) -> dict[str, str]:
    """sysfs numa_node files of the machine's GPUs (empty when the machine hides them)."""
    if not machine.sysfs_numa:
        return {}
    out = {}
    for gpu in machine.gpus:
        domain, rest = gpu.bus_id.split(":", 1)
        path = f"/sys/bus/pci/devices/{int(domain, 16):04x}:{rest.lower()}/numa_node"
        out[path] = f"{gpu.numa}\n"
    return out


@dataclass
class FakeNodeApi:
    """NodeApi in memory; `fail_next` makes the next calls raise."""

    annotations: dict[str, str] = field(default_factory=dict)
    uids: dict[tuple[str, str], str] = field(default_factory=dict)
    patches: list[dict[str, str | None]] = field(default_factory=list)
    fail_next: int = 0

    def _maybe_fail(self) -> None:
        if self.fail_next:
            self.fail_next -= 1
            raise ConnectionError("API server unreachable")

    def node_annotations(self, node: str) -> dict[str, str]:
        self._maybe_fail()
        return dict(self.annotations)

    def patch_node_annotations(self, node: str, annotations: Mapping[str, str | None]) -> None:
        self._maybe_fail()
        self.patches.append(dict(annotations))
        for key, value in annotations.items():
            if value is None:
                self.annotations.pop(key, None)
            else:
                self.annotations[key] = value

    def pod_uids(self, node: str) -> dict[tuple[str, str], str]:
        return dict(self.uids)


class FakeKubelet:
    """A PodResources v1 gRPC server on a unix socket, serving real wire bytes."""

    def __init__(self, socket_path: str, pods: list[PodResources]) -> None:
        self.pods = pods
        self.requests = 0
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        handler = grpc.method_handlers_generic_handler(
            SERVICE_NAME, {"List": grpc.unary_unary_rpc_method_handler(self._list)}
        )
        self.server.add_generic_rpc_handlers((handler,))
        self.server.add_insecure_port(f"unix://{socket_path}")

    def _list(self, request: bytes, context: Any) -> bytes:
        self.requests += 1
        return encode_list_response(self.pods)

    def __enter__(self) -> FakeKubelet:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop(None)


def all_pairs(n: int) -> list[tuple[int, int]]:
    return list(itertools.combinations(range(n), 2))
