"""GPU topology annotations: schema, parsing with named errors, and formatting.

A node's GPU topology travels as the JSON annotation `topo-scheduler.io/gpu-topology`
(written by the agent or by `topo-scheduler topology from-nvidia-smi`). Everything here is
pure: parse once at the edge, hand frozen values to the core.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from scheduler.core.decode import FieldError, Fields, shown
from scheduler.core.safeload import InputError, load_json

GPU_RESOURCE = "nvidia.com/gpu"
"""The GPU extended resource unless a profile's GPUTopology `resourceName` says otherwise."""
ANNOTATION_TOPOLOGY = "topo-scheduler.io/gpu-topology"
"""Node annotation: the GPU topology JSON (version 1)."""
ANNOTATION_GPUS = "topo-scheduler.io/gpus"
"""Pod annotation: the GPU indices the scheduler chose, e.g. `0,1,2,3`."""
ANNOTATION_ASSIGNMENTS = "topo-scheduler.io/gpu-assignments"
"""Node annotation: JSON object pod UID -> GPU indices actually held (from the kubelet)."""
ANNOTATION_PLACEMENT = "topo-scheduler.io/gpu-placement"
"""Pod annotation: placement policy, `best-effort` (default), `nvlink` or `single-numa`."""

SCHEMA_VERSION = 1
MAX_GPUS = 63
"""GPUs per node: a node's GPU set is a bitmask in one signed 64-bit word."""

MAX_NVLINKS = 64
"""NVLinks between one pair of GPUs (18 on an H100, NVSwitch links included): far above any
machine, and low enough that no pair, set or node score can overflow (docs/gpu-topology.md)."""
MAX_NUMA_NODE = 1023
"""NUMA node ids: Linux's CONFIG_NODES_SHIFT allows at most 1,024 nodes."""

PCIE_LEVELS: tuple[str, ...] = ("SYS", "NODE", "PHB", "PXB", "PIX", "BOARD")
"""Common-ancestor levels as `nvidia-smi topo -m` names them, farthest first."""


class TopologyError(FieldError):
    """A topology-related annotation or file is invalid; the message names object and field."""


class Placement(enum.Enum):
    """Placement policy a pod asks for through `topo-scheduler.io/gpu-placement`."""

    BEST_EFFORT = "best-effort"
    NVLINK = "nvlink"
    SINGLE_NUMA = "single-numa"


@dataclass(frozen=True)
class GpuInfo:
    """One GPU of a node. Optional fields are None when the source could not tell."""

    index: int
    uuid: str | None = None
    model: str | None = None
    memory_mib: int | None = None
    numa_node: int | None = None
    pci_bus_id: str | None = None
    healthy: bool = True
    mig_enabled: bool = False

    @property
    def allocatable(self) -> bool:
        """Whether the GPU can be handed out whole (healthy and not in MIG mode)."""
        return self.healthy and not self.mig_enabled


@dataclass(frozen=True)
class GpuLink:
    """Connection between GPUs `a < b`: PCIe common ancestor and NVLink count.

    `nvswitch_links` is how many of `nvlinks` go through an NVSwitch rather than GPU to GPU.
    """

    a: int
    b: int
    pcie: str | None = None
    nvlinks: int = 0
    nvswitch_links: int = 0


@dataclass(frozen=True)
class Topology:
    """A node's GPUs (sorted by index, indices 0..n-1) and their pairwise links (a < b)."""

    gpus: tuple[GpuInfo, ...]
    links: tuple[GpuLink, ...] = ()
    version: int = SCHEMA_VERSION

    @property
    def size(self) -> int:
        """Number of GPUs."""
        return len(self.gpus)

    @cached_property
    def _link_map(self) -> dict[tuple[int, int], GpuLink]:
        return {(link.a, link.b): link for link in self.links}

    def link(self, a: int, b: int) -> GpuLink:
        """The link between two GPUs (an unknown, NVLink-less link when none is listed)."""
        lo, hi = (a, b) if a < b else (b, a)
        found = self._link_map.get((lo, hi))
        return found if found is not None else GpuLink(lo, hi)

    @cached_property
    def key(self) -> str:
        """Hash of the shape: NUMA node, health and MIG mode per GPU, and the links.

        Identity fields (uuid, model, memory, PCI address) are left out, so nodes whose GPUs
        connect the same way share one key, one precomputed table and one answer cache.
        """
        shape = {
            "gpus": [[g.numa_node, g.healthy, g.mig_enabled] for g in self.gpus],
            "links": [
                [lk.a, lk.b, lk.pcie, lk.nvlinks, lk.nvswitch_links]
                for lk in sorted(self.links, key=lambda lk: (lk.a, lk.b))
                if lk.pcie is not None or lk.nvlinks
            ],
        }
        text = json.dumps(shape, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:20]

    @cached_property
    def allocatable_mask(self) -> int:
        """Bitmask of GPUs that can be handed out whole."""
        mask = 0
        for gpu in self.gpus:
            if gpu.allocatable:
                mask |= 1 << gpu.index
        return mask


# --------------------------------------------------------------------------- parsing helpers


def _where(node: str, path: str) -> str:
    return f"node {node}: annotation {ANNOTATION_TOPOLOGY}: {path}"


_FIELDS = Fields(TopologyError)


def _int(
    value: Any, where: str, *, minimum: int = 0, maximum: int, nullable: bool = False
) -> int | None:
    if nullable and value is None:
        return None
    if nullable and (isinstance(value, bool) or not isinstance(value, int)):
        raise _FIELDS.fail(where, f"must be an integer or null, got {shown(value)}")
    return _FIELDS.integer(value, where, minimum=minimum, maximum=maximum)


def _str(value: Any, where: str) -> str | None:
    return _FIELDS.optional_string(value, where)


def _bool(value: Any, where: str, default: bool) -> bool:
    return _FIELDS.boolean(value, where, default)


def _parse_gpu(raw: Any, i: int, node: str) -> GpuInfo:
    path = f"gpus[{i}]"
    if not isinstance(raw, Mapping):
        raise TopologyError(f"{_where(node, path)}: must be an object")
    index = _int(raw.get("index"), _where(node, f"{path}.index"), maximum=MAX_GPUS - 1)
    assert index is not None
    return GpuInfo(
        index=index,
        uuid=_str(raw.get("uuid"), _where(node, f"{path}.uuid")),
        model=_str(raw.get("model"), _where(node, f"{path}.model")),
        memory_mib=_int(
            raw.get("memoryMiB"), _where(node, f"{path}.memoryMiB"), maximum=2**53, nullable=True
        ),
        numa_node=_int(
            raw.get("numaNode"),
            _where(node, f"{path}.numaNode"),
            maximum=MAX_NUMA_NODE,
            nullable=True,
        ),
        pci_bus_id=_str(raw.get("pciBusId"), _where(node, f"{path}.pciBusId")),
        healthy=_bool(raw.get("healthy"), _where(node, f"{path}.healthy"), True),
        mig_enabled=_bool(raw.get("migEnabled"), _where(node, f"{path}.migEnabled"), False),
    )


def _parse_link(raw: Any, i: int, n: int, node: str) -> GpuLink:
    path = f"links[{i}]"
    if not isinstance(raw, Mapping):
        raise TopologyError(f"{_where(node, path)}: must be an object")
    ends: list[int] = []
    for end in ("a", "b"):
        value = _int(raw.get(end), _where(node, f"{path}.{end}"), maximum=MAX_GPUS - 1)
        assert value is not None
        if value >= n:
            raise TopologyError(
                f"{_where(node, f'{path}.{end}')}: GPU index {value} out of range "
                f"(node has {n} GPUs)"
            )
        ends.append(value)
    a, b = ends
    if a == b:
        raise TopologyError(f"{_where(node, path)}: a and b are both {a}")
    pcie = raw.get("pcie")
    if pcie is not None and pcie not in PCIE_LEVELS:
        raise TopologyError(
            f"{_where(node, f'{path}.pcie')}: must be one of {', '.join(PCIE_LEVELS)} or null, "
            f"got {shown(pcie)}"
        )
    nvlinks = _int(raw.get("nvlinks", 0), _where(node, f"{path}.nvlinks"), maximum=MAX_NVLINKS)
    switched = _int(
        raw.get("nvswitchLinks", 0), _where(node, f"{path}.nvswitchLinks"), maximum=MAX_NVLINKS
    )
    assert nvlinks is not None and switched is not None
    if switched > nvlinks:
        raise TopologyError(
            f"{_where(node, f'{path}.nvswitchLinks')}: {switched} exceeds nvlinks ({nvlinks})"
        )
    lo, hi = (a, b) if a < b else (b, a)
    return GpuLink(lo, hi, pcie, nvlinks, switched)


def topology_from_dict(data: Any, *, node: str = "<unknown>") -> Topology:
    """Validate a decoded annotation; raises TopologyError naming the node and field."""
    if not isinstance(data, Mapping):
        raise TopologyError(f"node {node}: annotation {ANNOTATION_TOPOLOGY}: must be an object")
    version = data.get("version")
    if type(version) is not int or version != SCHEMA_VERSION:
        raise TopologyError(
            f"{_where(node, 'version')}: unsupported version {version!r} "
            f"(this scheduler reads version {SCHEMA_VERSION})"
        )
    raw_gpus = data.get("gpus")
    if not isinstance(raw_gpus, list):
        raise TopologyError(f"{_where(node, 'gpus')}: must be a list")
    if len(raw_gpus) > MAX_GPUS:
        raise TopologyError(
            f"{_where(node, 'gpus')}: {len(raw_gpus)} GPUs; at most {MAX_GPUS} are supported"
        )
    gpus = [_parse_gpu(raw, i, node) for i, raw in enumerate(raw_gpus)]
    seen: dict[int, int] = {}
    for i, gpu in enumerate(gpus):
        if gpu.index in seen:
            raise TopologyError(
                f"{_where(node, f'gpus[{i}].index')}: index {gpu.index} repeats "
                f"gpus[{seen[gpu.index]}]"
            )
        seen[gpu.index] = i
        if gpu.index >= len(gpus):
            raise TopologyError(
                f"{_where(node, f'gpus[{i}].index')}: index {gpu.index} out of range "
                f"(indices must be 0..{len(gpus) - 1})"
            )
    raw_links = data.get("links", [])
    if not isinstance(raw_links, list):
        raise TopologyError(f"{_where(node, 'links')}: must be a list")
    links: dict[tuple[int, int], tuple[int, GpuLink]] = {}
    for i, raw in enumerate(raw_links):
        link = _parse_link(raw, i, len(gpus), node)
        key = (link.a, link.b)
        if key in links and links[key][1] != link:
            raise TopologyError(
                f"{_where(node, f'links[{i}]')}: pair ({link.a}, {link.b}) listed again with "
                f"different values than links[{links[key][0]}]"
            )
        links.setdefault(key, (i, link))
    return Topology(
        gpus=tuple(sorted(gpus, key=lambda g: g.index)),
        links=tuple(link for _, (_, link) in sorted(links.items())),
    )


def parse_topology(value: str | bytes | Mapping[str, Any], *, node: str = "<unknown>") -> Topology:
    """Parse the `topo-scheduler.io/gpu-topology` annotation (JSON text or decoded mapping)."""
    if isinstance(value, str | bytes):
        data = _json(value, f"node {node}: annotation {ANNOTATION_TOPOLOGY}")
    else:
        data = value
    return topology_from_dict(data, node=node)


def _json(value: Any, where: str) -> Any:
    """An annotation's JSON within the loader's limits; TopologyError when unreadable."""
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            raise TopologyError(f"{where}: invalid JSON: not UTF-8") from None
    if not isinstance(value, str):
        raise TopologyError(f"{where}: must be a string")
    try:
        return load_json(value, where)
    except InputError as exc:
        raise TopologyError(str(exc).replace("not valid JSON", "invalid JSON")) from None


def topology_to_dict(topology: Topology) -> dict[str, Any]:
    """The annotation as a JSON-ready mapping (optional fields written as null)."""
    links: list[dict[str, Any]] = []
    for link in topology.links:
        entry: dict[str, Any] = {
            "a": link.a,
            "b": link.b,
            "pcie": link.pcie,
            "nvlinks": link.nvlinks,
        }
        if link.nvswitch_links:
            entry["nvswitchLinks"] = link.nvswitch_links
        links.append(entry)
    return {
        "version": topology.version,
        "gpus": [
            {
                "index": g.index,
                "uuid": g.uuid,
                "model": g.model,
                "memoryMiB": g.memory_mib,
                "numaNode": g.numa_node,
                "pciBusId": g.pci_bus_id,
                "healthy": g.healthy,
                "migEnabled": g.mig_enabled,
            }
            for g in topology.gpus
        ],
        "links": links,
    }


def format_topology(topology: Topology) -> str:
    """Canonical compact JSON of the annotation (equal topologies give equal text)."""
    return json.dumps(topology_to_dict(topology), separators=(",", ":"), sort_keys=True)


# --------------------------------------------------------------------------- pod and node helpers


def parse_gpu_indices(text: str, *, pod: str = "<unknown>") -> tuple[int, ...]:
    """Parse the pod annotation `topo-scheduler.io/gpus` ("0,1,2,3") into sorted indices."""
    where = f"pod {pod}: annotation {ANNOTATION_GPUS}"
    if not isinstance(text, str):
        raise TopologyError(f"{where}: must be a string")
    parts = [p.strip() for p in text.split(",")] if text.strip() else []
    indices: list[int] = []
    for part in parts:
        digits = part.isascii() and part.isdigit() and len(part.lstrip("0")) <= 2
        if not digits or int(part) >= MAX_GPUS:
            raise TopologyError(
                f"{where}: {shown(part, 22)} is not a GPU index 0..{MAX_GPUS - 1} "
                "(expected e.g. '0,1,2,3')"
            )
        indices.append(int(part))
    if len(set(indices)) != len(indices):
        raise TopologyError(f"{where}: GPU index repeated in {shown(text)}")
    return tuple(sorted(indices))


def format_gpu_indices(indices: Iterable[int]) -> str:
    """Format GPU indices for `topo-scheduler.io/gpus`, sorted ascending."""
    return ",".join(str(i) for i in sorted(indices))


def parse_assignments(text: str, *, node: str = "<unknown>") -> dict[str, tuple[int, ...]]:
    """Parse the node annotation `topo-scheduler.io/gpu-assignments` (pod UID -> indices)."""
    where = f"node {node}: annotation {ANNOTATION_ASSIGNMENTS}"
    data = _json(text, where)
    if not isinstance(data, dict):
        raise TopologyError(f"{where}: must be an object of pod UID -> list of GPU indices")
    out: dict[str, tuple[int, ...]] = {}
    for uid, raw in data.items():
        if not isinstance(raw, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < MAX_GPUS for i in raw
        ):
            raise TopologyError(
                f"{where}: {shown(uid)}: must be a list of GPU indices, got {shown(raw)}"
            )
        out[uid] = tuple(sorted(set(raw)))
    return out


def format_assignments(assignments: Mapping[str, Iterable[int]]) -> str:
    """Canonical JSON for `topo-scheduler.io/gpu-assignments`."""
    data = {uid: sorted(indices) for uid, indices in sorted(assignments.items())}
    return json.dumps(data, separators=(",", ":"), sort_keys=True)


def parse_placement(value: str | None, *, pod: str = "<unknown>") -> Placement:
    """Parse `topo-scheduler.io/gpu-placement`; absent means best-effort."""
    if value is None or value == "":
        return Placement.BEST_EFFORT
    for placement in Placement:
        if placement.value == value:
            return placement
    expected = ", ".join(p.value for p in Placement)
    raise TopologyError(
        f"pod {pod}: annotation {ANNOTATION_PLACEMENT}: unknown value {shown(value)} "
        f"(expected one of {expected})"
    )
