# ruff: noqa: E501  (the matrices are kept exactly as nvidia-smi prints them)
"""Built-in named topologies, as `nvidia-smi topo -m` prints them on those machines.

Usable by tests, the simulator and people (`builtin_topology("dgx-h100")`). The texts are the
published matrices of these systems; the 16-GPU DGX-2 matrix is generated (NV6 everywhere).
"""

from __future__ import annotations

from scheduler.core.topology.nvidia_smi import parse_nvidia_smi
from scheduler.core.topology.schema import Topology, TopologyError

_DGX1_V100 = """\
        GPU0    GPU1    GPU2    GPU3    GPU4    GPU5    GPU6    GPU7    mlx5_0  mlx5_2  mlx5_1  mlx5_3  CPU Affinity    NUMA Affinity
GPU0     X      NV1     NV1     NV2     NV2     SYS     SYS     SYS     PIX     SYS     PHB     SYS     0-19,40-59      0
GPU1    NV1      X      NV2     NV1     SYS     NV2     SYS     SYS     PIX     SYS     PHB     SYS     0-19,40-59      0
GPU2    NV1     NV2      X      NV2     SYS     SYS     NV1     SYS     PHB     SYS     PIX     SYS     0-19,40-59      0
GPU3    NV2     NV1     NV2      X      SYS     SYS     SYS     NV1     PHB     SYS     PIX     SYS     0-19,40-59      0
GPU4    NV2     SYS     SYS     SYS      X      NV1     NV1     NV2     SYS     PIX     SYS     PHB     20-39,60-79     1
GPU5    SYS     NV2     SYS     SYS     NV1      X      NV2     NV1     SYS     PIX     SYS     PHB     20-39,60-79     1
GPU6    SYS     SYS     NV1     SYS     NV1     NV2      X      NV2     SYS     PHB     SYS     PIX     20-39,60-79     1
GPU7    SYS     SYS     SYS     NV1     NV2     NV1     NV2      X      SYS     PHB     SYS     PIX     20-39,60-79     1
"""

_DGX_A100 = """\
        GPU0    GPU1    GPU2    GPU3    GPU4    GPU5    GPU6    GPU7    mlx5_0  mlx5_1  mlx5_2  mlx5_3  mlx5_6  mlx5_7  mlx5_8  mlx5_9  CPU Affinity    NUMA Affinity
GPU0     X      NV12    NV12    NV12    NV12    NV12    NV12    NV12    PXB     PXB     SYS     SYS     SYS     SYS     SYS     SYS     48-63,176-191   3
GPU1    NV12     X      NV12    NV12    NV12    NV12    NV12    NV12    PXB     PXB     SYS     SYS     SYS     SYS     SYS     SYS     48-63,176-191   3
GPU2    NV12    NV12     X      NV12    NV12    NV12    NV12    NV12    SYS     SYS     PXB     PXB     SYS     SYS     SYS     SYS     16-31,144-159   1
GPU3    NV12    NV12    NV12     X      NV12    NV12    NV12    NV12    SYS     SYS     PXB     PXB     SYS     SYS     SYS     SYS     16-31,144-159   1
GPU4    NV12    NV12    NV12    NV12     X      NV12    NV12    NV12    SYS     SYS     SYS     SYS     PXB     PXB     SYS     SYS     112-127,240-255 7
GPU5    NV12    NV12    NV12    NV12    NV12     X      NV12    NV12    SYS     SYS     SYS     SYS     PXB     PXB     SYS     SYS     112-127,240-255 7
GPU6    NV12    NV12    NV12    NV12    NV12    NV12     X      NV12    SYS     SYS     SYS     SYS     SYS     SYS     PXB     PXB     80-95,208-223   5
GPU7    NV12    NV12    NV12    NV12    NV12    NV12    NV12     X      SYS     SYS     SYS     SYS     SYS     SYS     PXB     PXB     80-95,208-223   5
"""

_DGX_H100 = """\
        GPU0    GPU1    GPU2    GPU3    GPU4    GPU5    GPU6    GPU7    NIC0    NIC1    NIC2    NIC3    CPU Affinity    NUMA Affinity   GPU NUMA ID
GPU0     X      NV18    NV18    NV18    NV18    NV18    NV18    NV18    PIX     NODE    SYS     SYS     0-55,112-167    0               N/A
GPU1    NV18     X      NV18    NV18    NV18    NV18    NV18    NV18    NODE    PIX     SYS     SYS     0-55,112-167    0               N/A
GPU2    NV18    NV18     X      NV18    NV18    NV18    NV18    NV18    NODE    NODE    SYS     SYS     0-55,112-167    0               N/A
GPU3    NV18    NV18    NV18     X      NV18    NV18    NV18    NV18    NODE    NODE    SYS     SYS     0-55,112-167    0               N/A
GPU4    NV18    NV18    NV18    NV18     X      NV18    NV18    NV18    SYS     SYS     PIX     NODE    56-111,168-223  1               N/A
GPU5    NV18    NV18    NV18    NV18    NV18     X      NV18    NV18    SYS     SYS     NODE    PIX     56-111,168-223  1               N/A
GPU6    NV18    NV18    NV18    NV18    NV18    NV18     X      NV18    SYS     SYS     NODE    NODE    56-111,168-223  1               N/A
GPU7    NV18    NV18    NV18    NV18    NV18    NV18    NV18     X      SYS     SYS     NODE    NODE    56-111,168-223  1               N/A
"""

_PCIE_8GPU_2SOCKET = """\
        GPU0    GPU1    GPU2    GPU3    GPU4    GPU5    GPU6    GPU7    CPU Affinity    NUMA Affinity
GPU0     X      PIX     NODE    NODE    SYS     SYS     SYS     SYS     0-23,48-71      0
GPU1    PIX      X      NODE    NODE    SYS     SYS     SYS     SYS     0-23,48-71      0
GPU2    NODE    NODE     X      PIX     SYS     SYS     SYS     SYS     0-23,48-71      0
GPU3    NODE    NODE    PIX      X      SYS     SYS     SYS     SYS     0-23,48-71      0
GPU4    SYS     SYS     SYS     SYS      X      PIX     NODE    NODE    24-47,72-95     1
GPU5    SYS     SYS     SYS     SYS     PIX      X      NODE    NODE    24-47,72-95     1
GPU6    SYS     SYS     SYS     SYS     NODE    NODE     X      PIX     24-47,72-95     1
GPU7    SYS     SYS     SYS     SYS     NODE    NODE    PIX      X      24-47,72-95     1
"""

_PCIE_4GPU = """\
        GPU0    GPU1    GPU2    GPU3    CPU Affinity    NUMA Affinity
GPU0     X      PIX     PHB     PHB     0-31            0
GPU1    PIX      X      PHB     PHB     0-31            0
GPU2    PHB     PHB      X      PIX     0-31            0
GPU3    PHB     PHB     PIX      X      0-31            0
"""

_ALL_SYS_2NUMA = """\
        GPU0    GPU1    GPU2    GPU3    CPU Affinity    NUMA Affinity
GPU0     X      SYS     SYS     SYS     0-15            0
GPU1    SYS      X      SYS     SYS     0-15            0
GPU2    SYS     SYS      X      SYS     16-31           1
GPU3    SYS     SYS     SYS      X      16-31           1
"""


def _dgx2_v100() -> str:
    n = 16
    header = "        " + "".join(f"GPU{i:<5d}" for i in range(n)) + "CPU Affinity    NUMA Affinity"
    rows = [header]
    for i in range(n):
        cells = "".join(f"{' X' if i == j else 'NV6':<8s}" for j in range(n))
        cpus, numa = ("0-23,48-71", 0) if i < 8 else ("24-47,72-95", 1)
        rows.append(f"GPU{i:<5d}{cells}{cpus:<16s}{numa}")
    return "\n".join(rows) + "\n"


BUILTIN_TOPOLOGY_TEXTS: dict[str, str] = {
    "dgx1-v100": _DGX1_V100,
    "dgx-a100": _DGX_A100,
    "dgx-h100": _DGX_H100,
    "pcie-8gpu-2socket": _PCIE_8GPU_2SOCKET,
    "pcie-4gpu": _PCIE_4GPU,
    "all-sys-2numa": _ALL_SYS_2NUMA,
}

BUILTIN_TOPOLOGIES: tuple[str, ...] = (*BUILTIN_TOPOLOGY_TEXTS, "dgx2-v100")
"""Names accepted by builtin_topology."""

_MODELS = {
    "dgx1-v100": ("Tesla V100-SXM2-32GB", 32768),
    "dgx-a100": ("NVIDIA A100-SXM4-80GB", 81920),
    "dgx-h100": ("NVIDIA H100 80GB HBM3", 81559),
    "dgx2-v100": ("Tesla V100-SXM3-32GB", 32768),
}


def builtin_topology_text(name: str) -> str:
    """The `nvidia-smi topo -m` text of a built-in topology."""
    if name == "dgx2-v100":
        return _dgx2_v100()
    try:
        return BUILTIN_TOPOLOGY_TEXTS[name]
    except KeyError:
        raise TopologyError(
            f"unknown built-in topology {name!r} (known: {', '.join(BUILTIN_TOPOLOGIES)})"
        ) from None


def builtin_topology(name: str) -> Topology:
    """A built-in topology by name; models and memory filled in for the DGX systems."""
    topology = parse_nvidia_smi(builtin_topology_text(name), source=f"built-in {name}")
    if name not in _MODELS:
        return topology
    from dataclasses import replace

    model, memory = _MODELS[name]
    gpus = tuple(replace(g, model=model, memory_mib=memory) for g in topology.gpus)
    return replace(topology, gpus=gpus)
