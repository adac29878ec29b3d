"""Parse `nvidia-smi topo -m` text into a Topology.

The matrix gives one cell per GPU pair: `NV#` (that many NVLinks; the PCIe level is then not
shown, so it is left unknown) or a PCIe level (SYS, NODE, PHB, PXB, PIX; old drivers print
SOC for SYS). NUMA nodes come from the caller, else the `NUMA Affinity` column, else (old
drivers print no such column) the `CPU Affinity` column: GPUs with the same CPU list share a
NUMA node, numbered in the order of each group's lowest CPU (the node with CPU 0 is node 0).
GPUs found this way carry no uuid, model, memory or PCI bus id (null in the annotation) and
are taken as healthy and not in MIG mode.

NVSwitch links are not visible in the matrix; a GPU whose NVLink counts to its peers add up to
more than MAX_DIRECT_NVLINKS cannot be wired directly, so all its NVLinks are marked as going
through an NVSwitch.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

from scheduler.core.topology.schema import (
    MAX_GPUS,
    MAX_NUMA_NODE,
    MAX_NVLINKS,
    GpuInfo,
    GpuLink,
    Topology,
    TopologyError,
)

MAX_DIRECT_NVLINKS = 18
"""Most NVLinks any GPU has had; more peer links than this imply an NVSwitch."""

_MULTIWORD = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_GPU = re.compile(r"^GPU(\d{1,6})$", re.ASCII)
_NV = re.compile(r"^NV(\d+)$", re.ASCII)
_CPU_RANGE = re.compile(r"^(\d{1,7})(?:-(\d{1,7}))?$", re.ASCII)
_LEVELS = {
    "SYS": "SYS",
    "SOC": "SYS",
    "NODE": "NODE",
    "PHB": "PHB",
    "PXB": "PXB",
    "PIX": "PIX",
    "BOARD": "BOARD",
}


def _header(lines: Sequence[str], source: str) -> tuple[int, list[str]]:
    for number, line in enumerate(lines):
        text = line
        markers = {f"\x00{i}\x00": name for i, name in enumerate(_MULTIWORD)}
        for marker, name in markers.items():
            text = text.replace(name, marker)
        tokens = text.split()
        if not tokens or tokens[0] != "GPU0":
            continue
        second = tokens[1] if len(tokens) > 1 else ""
        # A row reads "GPU0 X NV1 ...", the header "GPU0 GPU1 ..." or "GPU0 CPU Affinity ...".
        if not (second == "X" or second in _LEVELS or _NV.match(second)):
            names = [markers.get(t, t) for t in tokens]
            return number, names
    raise TopologyError(f"{source}: no `nvidia-smi topo -m` header line (GPU0 GPU1 ...) found")


def parse_nvidia_smi(
    text: str, *, numa: Sequence[int | None] | None = None, source: str = "nvidia-smi topo -m"
) -> Topology:
    """Turn `nvidia-smi topo -m` output into a Topology.

    `numa` (one entry per GPU) overrides the NUMA Affinity column; a TopologyError names the
    line or cell at fault, and says so when NUMA nodes are neither in the text nor given.
    """
    lines = text.splitlines()
    start, columns = _header(lines, source)
    gpu_columns = [c for c in columns if _GPU.match(c)]
    if gpu_columns != [f"GPU{i}" for i in range(len(gpu_columns))]:
        raise TopologyError(f"{source}: header GPU columns are not GPU0..GPU{len(gpu_columns) - 1}")
    n = len(gpu_columns)
    if n > MAX_GPUS:
        raise TopologyError(f"{source}: {n} GPUs; at most {MAX_GPUS} are supported per node")
    cells: dict[int, dict[str, str]] = {}
    for number in range(start + 1, len(lines)):
        tokens = lines[number].split()
        if not tokens:
            if cells:
                break
            continue
        match = _GPU.match(tokens[0])
        if not match:
            if cells:
                break
            continue
        index = int(match.group(1))
        values = tokens[1:]
        if len(values) < n:
            raise TopologyError(
                f"{source}: line {number + 1}: GPU{index} row has {len(values)} cells, "
                f"expected at least {n}"
            )
        cells[index] = dict(zip(columns, values, strict=False))
    if sorted(cells) != list(range(n)):
        raise TopologyError(f"{source}: expected rows GPU0..GPU{n - 1}, found {sorted(cells)}")

    if numa is not None:
        if len(numa) != n:
            raise TopologyError(f"{source}: {len(numa)} NUMA nodes given for {n} GPUs")
        numa_nodes = list(numa)
    elif "NUMA Affinity" in columns:
        numa_nodes = []
        for i in range(n):
            affinity = cells[i].get("NUMA Affinity", "N/A")
            number = affinity.isascii() and affinity.isdigit() and len(affinity) <= 4
            if number and int(affinity) <= MAX_NUMA_NODE:
                numa_nodes.append(int(affinity))
            elif affinity == "N/A":
                numa_nodes.append(None)
            else:
                raise TopologyError(
                    f"{source}: GPU{i} NUMA Affinity {affinity[:40]!r} is not a single NUMA node; "
                    "give --numa"
                )
    elif "CPU Affinity" in columns:
        numa_nodes = _numa_from_cpus(
            [cells[i].get("CPU Affinity", "N/A") for i in range(n)], source
        )
    else:
        raise TopologyError(
            f"{source}: no NUMA Affinity or CPU Affinity column; give the NUMA nodes with --numa"
        )

    raw: dict[tuple[int, int], tuple[str | None, int]] = {}
    for i in range(n):
        for j in range(n):
            cell = cells[i][f"GPU{j}"]
            if i == j:
                if cell != "X":
                    raise TopologyError(
                        f"{source}: GPU{i} row, GPU{j} column: expected X, got {cell!r}"
                    )
                continue
            nv = _NV.match(cell)
            if nv:
                digits = nv.group(1).lstrip("0")
                if len(digits) > 4 or int(digits or "0") > MAX_NVLINKS:
                    shown = (
                        cell if len(cell) <= 12 else f"{cell[:12]}... ({len(cell):,} characters)"
                    )
                    raise TopologyError(
                        f"{source}: GPU{i} row, GPU{j} column: {shown!r}: more than "
                        f"{MAX_NVLINKS} NVLinks"
                    )
                value: tuple[str | None, int] = (None, int(digits or "0"))
            elif cell in _LEVELS:
                value = (_LEVELS[cell], 0)
            else:
                raise TopologyError(
                    f"{source}: GPU{i} row, GPU{j} column: unknown link {cell!r} "
                    "(expected NV#, SYS, NODE, PHB, PXB, PIX)"
                )
            key = (min(i, j), max(i, j))
            if key in raw and raw[key] != value:
                raise TopologyError(
                    f"{source}: GPU{i}/GPU{j} is {cell!r} but GPU{j}/GPU{i} differs "
                    "(matrix not symmetric)"
                )
            raw[key] = value

    totals = [0] * n
    for (a, b), (_, links) in raw.items():
        totals[a] += links
        totals[b] += links
    switched = [total > MAX_DIRECT_NVLINKS for total in totals]
    links_out = tuple(
        GpuLink(a, b, pcie, count, count if (switched[a] or switched[b]) else 0)
        for (a, b), (pcie, count) in sorted(raw.items())
    )
    gpus = tuple(GpuInfo(index=i, numa_node=numa_nodes[i]) for i in range(n))
    return Topology(gpus=gpus, links=links_out)


def _cpu_set(text: str) -> tuple[tuple[int, int], ...] | None:
    """`0-19,40-59` -> ((0, 19), (40, 59)); None when it is not such a list."""
    ranges: list[tuple[int, int]] = []
    for part in text.split(","):
        match = _CPU_RANGE.match(part)
        if match is None:
            return None
        low = int(match.group(1))
        high = int(match.group(2) or low)
        if high < low:
            return None
        ranges.append((low, high))
    ranges.sort()
    for (_, end), (start, _) in itertools.pairwise(ranges):
        if start <= end:
            return None
    return tuple(ranges)


def _numa_from_cpus(affinities: Sequence[str], source: str) -> list[int | None]:
    """NUMA nodes from the `CPU Affinity` column: one node per distinct CPU list, numbered by
    its lowest CPU; GPUs whose lists overlap without being equal cannot be placed."""
    sets: list[tuple[tuple[int, int], ...] | None] = []
    for i, text in enumerate(affinities):
        if text == "N/A":
            sets.append(None)
            continue
        cpus = _cpu_set(text)
        if cpus is None:
            shown = text if len(text) <= 40 else f"{text[:40]}..."
            raise TopologyError(
                f"{source}: GPU{i} CPU Affinity {shown!r} is not a CPU list; give --numa"
            )
        sets.append(cpus)
    groups = sorted({cpus for cpus in sets if cpus is not None})
    for k, group in enumerate(groups):
        for other in groups[k + 1 :]:
            if any(a <= d and c <= b for a, b in group for c, d in other):
                raise TopologyError(
                    f"{source}: CPU Affinity groups overlap without being equal "
                    "(not one NUMA node each); give --numa"
                )
    if len(groups) > MAX_NUMA_NODE + 1:
        raise TopologyError(f"{source}: more than {MAX_NUMA_NODE + 1} CPU Affinity groups")
    node = {group: k for k, group in enumerate(groups)}
    return [None if cpus is None else node[cpus] for cpus in sets]


def parse_numa_list(text: str) -> list[int | None]:
    """Parse a `--numa 0,0,1,1` value (`-` or empty entry for unknown)."""
    out: list[int | None] = []
    for part in text.split(","):
        part = part.strip()
        if part in ("", "-"):
            out.append(None)
        elif part.isascii() and part.isdigit() and len(part) <= 4 and int(part) <= MAX_NUMA_NODE:
            out.append(int(part))
        else:
            raise TopologyError(f"--numa: {part[:40]!r} is not a NUMA node number")
    return out


def nvidia_smi_cells(topology: Topology) -> dict[tuple[int, int], str]:
    """What `nvidia-smi topo -m` would print per pair (a < b): NV# when NVLinked, else level."""
    out: dict[tuple[int, int], str] = {}
    for a in range(topology.size):
        for b in range(a + 1, topology.size):
            link = topology.link(a, b)
            out[(a, b)] = f"NV{link.nvlinks}" if link.nvlinks else (link.pcie or "?")
    return out
