"""NVML discovery: a node's GPUs and links -> the `gpu-topology` annotation (version 1).

`discover(nvml, read_file)` is pure apart from the two objects it is given: `nvml` is the
`pynvml` module or a fake with the same function names and exception classes, `read_file`
reads a sysfs path (None when absent). A GPU whose essential NVML queries fail (handle, UUID,
memory, PCI info) is published as unhealthy; one pair query failing leaves that pair unknown.

NUMA node: `/sys/bus/pci/devices/<bus id>/numa_node`, else NVML's memory affinity when it
names exactly one node. (`nvmlDeviceGetNumaNodeId` is not used: it answers the GPU's own
memory node on coherent systems, not the CPU node the GPU hangs off.)

NVLinks: every active link's remote end is read; a link to a GPU counts for that pair, a link
to an NVSwitch counts for every GPU on the same switch: a pair gets, per switch, the smaller
of the two GPUs' link counts to it (DGX A100: 6 switches x 2 links = NV12).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scheduler.core.topology.schema import MAX_NUMA_NODE, SCHEMA_VERSION

ReadFile = Callable[[str], str | None]

_LEVELS = {0: "BOARD", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


def read_sysfs_file(path: str) -> str | None:
    """Read a small text file; None when it does not exist or cannot be read."""
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read(4096)
    except (OSError, ValueError):  # ValueError: not ASCII text
        return None


def normalize_bus_id(raw: Any) -> str:
    """NVML bus id (`00000000:18:00.0`, bytes or str) -> sysfs form `0000:18:00.0`."""
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    text = text.strip().rstrip("\x00").lower()
    domain, sep, rest = text.partition(":")
    if not sep:
        return text
    try:
        return f"{int(domain, 16):04x}:{rest}"
    except ValueError:
        return text


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def _numa_node(nvml: Any, handle: Any, bus_id: str | None, read_file: ReadFile) -> int | None:
    if bus_id is not None:
        text = read_file(f"/sys/bus/pci/devices/{bus_id}/numa_node")
        if text is not None:
            try:
                value = int(text.strip()) if len(text.strip()) <= 8 else -1
            except ValueError:
                value = -1
            return value if 0 <= value <= MAX_NUMA_NODE else None
    try:
        words = nvml.nvmlDeviceGetMemoryAffinity(handle, 4, nvml.NVML_AFFINITY_SCOPE_NODE)
    except (nvml.NVMLError, AttributeError, TypeError):
        return None
    nodes = [64 * w + b for w, word in enumerate(words) for b in range(64) if int(word) >> b & 1]
    return nodes[0] if len(nodes) == 1 else None


class _Gpu:
    """Mutable scratch record while discovering one GPU."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.handle: Any = None
        self.uuid: str | None = None
        self.model: str | None = None
        self.memory_mib: int | None = None
        self.numa: int | None = None
        self.bus_id: str | None = None
        self.healthy = True
        self.mig = False


def _probe(nvml: Any, index: int, read_file: ReadFile) -> _Gpu:
    gpu = _Gpu(index)
    try:
        gpu.handle = nvml.nvmlDeviceGetHandleByIndex(index)
    except nvml.NVMLError:
        gpu.healthy = False
        return gpu
    try:
        gpu.uuid = _text(nvml.nvmlDeviceGetUUID(gpu.handle))
        gpu.memory_mib = int(nvml.nvmlDeviceGetMemoryInfo(gpu.handle).total) // (1 << 20)
        gpu.bus_id = normalize_bus_id(nvml.nvmlDeviceGetPciInfo(gpu.handle).busId)
    except nvml.NVMLError:
        gpu.healthy = False
    try:
        gpu.model = _text(nvml.nvmlDeviceGetName(gpu.handle))
    except nvml.NVMLError:
        gpu.model = None
    try:
        current = nvml.nvmlDeviceGetMigMode(gpu.handle)[0]
        gpu.mig = current == nvml.NVML_DEVICE_MIG_ENABLE
    except nvml.NVMLError:
        gpu.mig = False
    gpu.numa = _numa_node(nvml, gpu.handle, gpu.bus_id, read_file)
    return gpu


def _nvlink_ends(
    nvml: Any, gpu: _Gpu, gpu_buses: dict[str, int]
) -> tuple[dict[int, int], dict[str, int]]:
    """(links to each peer GPU index, links to each switch/other bus id) of one GPU."""
    peers: dict[int, int] = {}
    switches: dict[str, int] = {}
    if gpu.handle is None or not gpu.healthy:
        return peers, switches
    switch_type = getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2)
    gpu_type = getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_GPU", 0)
    for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))):
        try:
            state = nvml.nvmlDeviceGetNvLinkState(gpu.handle, link)
        except nvml.NVMLError:
            continue
        if state != nvml.NVML_FEATURE_ENABLED:
            continue
        try:
            remote = normalize_bus_id(nvml.nvmlDeviceGetNvLinkRemotePciInfo(gpu.handle, link).busId)
        except nvml.NVMLError:
            continue
        try:
            kind: int | None = int(nvml.nvmlDeviceGetNvLinkRemoteDeviceType(gpu.handle, link))
        except (nvml.NVMLError, AttributeError):
            kind = None
        if remote in gpu_buses and kind in (None, gpu_type):
            peer = gpu_buses[remote]
            peers[peer] = peers.get(peer, 0) + 1
        elif kind in (None, switch_type):
            switches[remote] = switches.get(remote, 0) + 1
    return peers, switches


def discover(nvml: Any, read_file: ReadFile = read_sysfs_file) -> dict[str, Any]:
    """Query NVML (already initialised) and return the topology annotation as a mapping."""
    count = int(nvml.nvmlDeviceGetCount())
    gpus = [_probe(nvml, i, read_file) for i in range(count)]
    gpu_buses = {g.bus_id: g.index for g in gpus if g.bus_id is not None}
    ends = [_nvlink_ends(nvml, g, gpu_buses) for g in gpus]
    links = []
    for a in range(count):
        for b in range(a + 1, count):
            pcie: str | None = None
            ga, gb = gpus[a], gpus[b]
            if ga.handle is not None and gb.handle is not None and ga.healthy and gb.healthy:
                try:
                    pcie = _LEVELS.get(
                        int(nvml.nvmlDeviceGetTopologyCommonAncestor(ga.handle, gb.handle))
                    )
                except nvml.NVMLError:
                    pcie = None
            direct = max(ends[a][0].get(b, 0), ends[b][0].get(a, 0))
            switched = sum(
                min(n, ends[b][1][bus]) for bus, n in ends[a][1].items() if bus in ends[b][1]
            )
            entry: dict[str, Any] = {"a": a, "b": b, "pcie": pcie, "nvlinks": direct + switched}
            if switched:
                entry["nvswitchLinks"] = switched
            links.append(entry)
    return {
        "version": SCHEMA_VERSION,
        "gpus": [
            {
                "index": g.index,
                "uuid": g.uuid,
                "model": g.model,
                "memoryMiB": g.memory_mib,
                "numaNode": g.numa,
                "pciBusId": g.bus_id,
                "healthy": g.healthy,
                "migEnabled": g.mig,
            }
            for g in gpus
        ],
        "links": links,
    }
