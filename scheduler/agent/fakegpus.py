"""`--fake-gpus NAME[:fail=I,J]`: an in-process NVML answering for a built-in topology.

For demos and end-to-end tests on machines without GPUs, the agent and the device plugin
can run on this object instead of `pynvml`. It has the same call names, constants and
exception classes as `pynvml` for everything `discovery.discover` and the device plugin's
health monitor use, so the published annotation is what NVML would give on such a machine:

- UUIDs are stable per topology and node name (`GPU-<uuid5(node/topology/index)>`), so a
  restarted agent or plugin publishes the same IDs and two fake nodes never share one;
- PCIe levels, NUMA nodes, models and memory come from the built-in topology; NVSwitch
  links are modelled as one switch that every GPU reaches with its NVSwitch link count;
- `fail=3` makes every call on GPU 3 except its handle and UUID fail with
  `NVMLError_GpuIsLost`, as a GPU that fell off the bus does; tests can fail a GPU or raise
  an XID or ECC event at run time.

No sysfs is read for fake GPUs (their PCI addresses are invented): see `read_file`.
"""

from __future__ import annotations

import queue
import threading
import uuid
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pynvml

from scheduler.core.topology.builtin import BUILTIN_TOPOLOGIES, builtin_topology
from scheduler.core.topology.schema import Topology, TopologyError

_UUID_NAMESPACE = uuid.UUID("5b0a54e6-5c4e-4d4e-9a61-0f4a8f6d2c11")
_SWITCH_BUS = "00000000:C0:00.0"
_LEVEL_TO_NVML = {
    "BOARD": pynvml.NVML_TOPOLOGY_INTERNAL,
    "PIX": pynvml.NVML_TOPOLOGY_SINGLE,
    "PXB": pynvml.NVML_TOPOLOGY_MULTIPLE,
    "PHB": pynvml.NVML_TOPOLOGY_HOSTBRIDGE,
    "NODE": pynvml.NVML_TOPOLOGY_NODE,
    "SYS": pynvml.NVML_TOPOLOGY_SYSTEM,
}


@dataclass(frozen=True)
class FakeGpusSpec:
    """A parsed `--fake-gpus` value: built-in topology name and GPUs whose calls fail."""

    topology: str
    failing: frozenset[int] = frozenset()


def parse_fake_gpus(text: str) -> FakeGpusSpec:
    """Parse `NAME` or `NAME:fail=I[,J...]`; TopologyError names the flag and the bad part."""
    shown = text if len(text) <= 60 else f"{text[:60]}..."
    where = f"--fake-gpus {shown!r}"
    if not text.strip():
        raise TopologyError(
            f"{where}: empty; expected NAME or NAME:fail=I[,J...] "
            f"(NAME one of {', '.join(BUILTIN_TOPOLOGIES)}); omit the flag to use NVML"
        )
    name, sep, options = text.partition(":")
    if name not in BUILTIN_TOPOLOGIES:
        raise TopologyError(
            f"{where}: unknown built-in topology {name[:60]!r} "
            f"(known: {', '.join(BUILTIN_TOPOLOGIES)})"
        )
    failing: set[int] = set()
    if sep:
        key, eq, value = options.partition("=")
        if key != "fail" or not eq:
            raise TopologyError(
                f"{where}: expected NAME or NAME:fail=I[,J...], got {options[:60]!r}"
            )
        size = builtin_topology(name).size
        for part in value.split(","):
            part = part.strip()
            digits = part.isascii() and part.isdigit() and len(part) <= 4
            if not digits or int(part) >= size:
                part = part if len(part) <= 20 else f"{part[:20]}..."
                raise TopologyError(
                    f"{where}: fail: {part!r} is not a GPU index 0..{size - 1} of {name}"
                )
            failing.add(int(part))
    return FakeGpusSpec(name, frozenset(failing))


def fake_gpu_uuid(node: str, topology: str, index: int) -> str:
    """The stable UUID of fake GPU `index` of `topology` on `node`."""
    return f"GPU-{uuid.uuid5(_UUID_NAMESPACE, f'{node}/{topology}/{index}')}"


def _bus_id(index: int) -> str:
    return f"{index // 16:08X}:{0x08 + 0x10 * (index % 16):02X}:00.0"


class _EventSet:
    """Events delivered to one set, and the event mask registered per GPU index."""

    def __init__(self) -> None:
        self.events: queue.Queue[Any] = queue.Queue()
        self.registered: dict[int, int] = {}


class FakeNvml:
    """pynvml look-alike for one node with a built-in topology (thread-safe enough for tests:
    state changes are single assignments and the event queue is a `queue.Queue`)."""

    def __init__(self, spec: FakeGpusSpec, node: str) -> None:
        for name in dir(pynvml):
            if name.startswith(("NVMLError", "NVML_", "nvmlEventType")):
                setattr(self, name, getattr(pynvml, name))
        self.spec = spec
        self.node = node
        self.topology: Topology = builtin_topology(spec.topology)
        self.failing: set[int] = set(spec.failing)
        self.initialised = False
        self._lock = threading.Lock()
        self._event_sets: list[_EventSet] = []
        n = self.topology.size
        self._ends: dict[int, list[tuple[str, int]]] = {i: [] for i in range(n)}
        switch = [0] * n
        for link in self.topology.links:
            direct = link.nvlinks - link.nvswitch_links
            gpu_type = pynvml.NVML_NVLINK_DEVICE_TYPE_GPU
            self._ends[link.a] += [(_bus_id(link.b), gpu_type)] * direct
            self._ends[link.b] += [(_bus_id(link.a), gpu_type)] * direct
            switch[link.a] = max(switch[link.a], link.nvswitch_links)
            switch[link.b] = max(switch[link.b], link.nvswitch_links)
        for i, count in enumerate(switch):
            self._ends[i] += [(_SWITCH_BUS, pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH)] * count
        self.NVML_NVLINK_MAX_LINKS = max((len(e) for e in self._ends.values()), default=0)

    # -- test and demo controls -------------------------------------------------------------

    def fail_gpu(self, index: int) -> None:
        """From now on every call on GPU `index` fails (it fell off the bus)."""
        self.failing.add(index)

    def raise_xid(self, index: int | None, xid: int) -> None:
        """Deliver an XID critical-error event for GPU `index` (None: no device named)."""
        self._deliver(index, pynvml.nvmlEventTypeXidCriticalError, xid)

    def raise_ecc(self, index: int, double_bit: bool = True) -> None:
        """Deliver an ECC error event for GPU `index`."""
        kind = (
            pynvml.nvmlEventTypeDoubleBitEccError
            if double_bit
            else pynvml.nvmlEventTypeSingleBitEccError
        )
        self._deliver(index, kind, 0)

    def _deliver(self, index: int | None, kind: int, data: int) -> None:
        with self._lock:
            sets = list(self._event_sets)
        for event_set in sets:
            if index is None or event_set.registered.get(index, 0) & kind:
                device = None if index is None else SimpleNamespace(index=index)
                event_set.events.put(SimpleNamespace(device=device, eventType=kind, eventData=data))

    @staticmethod
    def read_file(path: str) -> str | None:
        """sysfs reader for discovery: fake GPUs have no sysfs entries."""
        return None

    # -- NVML ------------------------------------------------------------------------------

    def _check(self, handle: Any) -> int:
        index = int(handle.index)
        if index in self.failing:
            raise pynvml.NVMLError_GpuIsLost()
        return index

    def nvmlInit(self) -> None:
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self.initialised = False

    def nvmlDeviceGetCount(self) -> int:
        return self.topology.size

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        if not 0 <= index < self.topology.size:
            raise pynvml.NVMLError_InvalidArgument()
        return SimpleNamespace(index=index)

    def nvmlDeviceGetHandleByUUID(self, gpu_uuid: str | bytes) -> Any:
        text = gpu_uuid.decode() if isinstance(gpu_uuid, bytes) else gpu_uuid
        for index in range(self.topology.size):
            if fake_gpu_uuid(self.node, self.spec.topology, index) == text:
                return self.nvmlDeviceGetHandleByIndex(index)
        raise pynvml.NVMLError_NotFound()

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        # The identity stays readable on a failing GPU (the driver keeps it), so a GPU that
        # fails from the start is still listed, as unhealthy, under its UUID.
        return fake_gpu_uuid(self.node, self.spec.topology, int(handle.index))

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return self.topology.gpus[self._check(handle)].model or "NVIDIA GPU"

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        memory = self.topology.gpus[self._check(handle)].memory_mib or 16384
        return SimpleNamespace(total=memory << 20)

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        return SimpleNamespace(busId=_bus_id(self._check(handle)).encode())

    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        self._check(handle)
        return [0, 0]

    def nvmlDeviceGetMemoryAffinity(self, handle: Any, size: int, scope: int) -> list[int]:
        numa = self.topology.gpus[self._check(handle)].numa_node
        if numa is None:
            raise pynvml.NVMLError_NotSupported()
        words = [0] * size
        words[numa // 64] = 1 << (numa % 64)
        return words

    def nvmlDeviceGetTopologyCommonAncestor(self, h1: Any, h2: Any) -> int:
        level = self.topology.link(self._check(h1), self._check(h2)).pcie
        if level is None:
            raise pynvml.NVMLError_NotSupported()
        return int(_LEVEL_TO_NVML[level])

    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int:
        if link >= len(self._ends[self._check(handle)]):
            raise pynvml.NVMLError_NotSupported()
        return int(pynvml.NVML_FEATURE_ENABLED)

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: Any, link: int) -> Any:
        return SimpleNamespace(busId=self._ends[self._check(handle)][link][0])

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: int) -> int:
        return self._ends[self._check(handle)][link][1]

    def nvmlEventSetCreate(self) -> Any:
        event_set = _EventSet()
        with self._lock:
            self._event_sets.append(event_set)
        return event_set

    def nvmlEventSetFree(self, event_set: Any) -> None:
        with self._lock:
            if event_set in self._event_sets:
                self._event_sets.remove(event_set)

    def nvmlDeviceRegisterEvents(self, handle: Any, mask: int, event_set: Any) -> None:
        index = self._check(handle)
        event_set.registered[index] = event_set.registered.get(index, 0) | int(mask)

    def nvmlEventSetWait_v2(self, event_set: Any, timeout_ms: int) -> Any:
        try:
            return event_set.events.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            raise pynvml.NVMLError_Timeout() from None
