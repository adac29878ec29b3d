"""Parse `nvidia-smi topo -m` text into a Topology.

The matrix gives one cell per GPU pair: `NV#` (that many NVLinks; the PCIe level is then not
shown, so it is left unknown) or a PCIe level (SYS, NODE, PHB, PXB, PIX; old drivers print
SOC for SYS). NUMA nodes come from the `NUMA Affinity` column when present, else from the
caller. GPUs found this way carry no uuid, model, memory or PCI bus id (null in the
annotation) and are taken as healthy and not in MIG mode.

NVSwitch links are not visible in the matrix; a GPU whose NVLink counts to its peers add up to
more than MAX_DIRECT_NVLINKS cannot be wired directly, so all its NVLinks are marked as going
through an NVSwitch.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from scheduler.core.topology.schema import GpuInfo, GpuLink, Topology, TopologyError

MAX_DIRECT_NVLINKS = 18
"""Most NVLinks any GPU has had; more peer links than this imply an NVSwitch."""

_MULTIWORD = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_GPU = re.compile(r"^GPU(\d+)$")
_NV = re.compile(r"^NV(\d+)$")
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
        for i, name in enumerate(_MULTIWORD):
            text = text.replace(name, f"\x00{i}")
        tokens = text.split()
        if not tokens or tokens[0] != "GPU0":
            continue
        second = tokens[1] if len(tokens) > 1 else ""
        # A row reads "GPU0 X NV1 ...", the header "GPU0 GPU1 ..." or "GPU0 CPU Affinity ...".
        if not (second == "X" or second in _LEVELS or _NV.match(second)):
            names = [_MULTIWORD[int(t[1:])] if t.startswith("\x00") else t for t in tokens]
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
            if affinity.isdigit():
                numa_nodes.append(int(affinity))
            elif affinity == "N/A":
                numa_nodes.append(None)
            else:
                raise TopologyError(
                    f"{source}: GPU{i} NUMA Affinity {affinity!r} is not a single NUMA node; "
                    "give --numa"
                )
    else:
        raise TopologyError(f"{source}: no NUMA Affinity column; give the NUMA nodes with --numa")

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
                value: tuple[str | None, int] = (None, int(nv.group(1)))
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


def parse_numa_list(text: str) -> list[int | None]:
    """Parse a `--numa 0,0,1,1` value (`-` or empty entry for unknown)."""
    out: list[int | None] = []
    for part in text.split(","):
        part = part.strip()
        if part in ("", "-"):
            out.append(None)
        elif part.isdigit():
            out.append(int(part))
        else:
            raise TopologyError(f"--numa: {part!r} is not a NUMA node number")
    return out


def nvidia_smi_cells(topology: Topology) -> dict[tuple[int, int], str]:
    """What `nvidia-smi topo -m` would print per pair (a < b): NV# when NVLinked, else level."""
    out: dict[tuple[int, int], str] = {}
    for a in range(topology.size):
        for b in range(a + 1, topology.size):
            link = topology.link(a, b)
            out[(a, b)] = f"NV{link.nvlinks}" if link.nvlinks else (link.pcie or "?")
    return out
