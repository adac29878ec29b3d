"""Pair scores between GPUs and the topology graph built from them.

The default table follows NVIDIA go-gpuallocator's besteffort scores (SYS 10, NODE 20,
PHB 30, PXB 40, PIX 50, BOARD 60, 100 per NVLink) with two corrections: NVLinks through an
NVSwitch count like direct ones, and NUMA bounds the PCIe part (a pair on one NUMA node never
below NODE, a pair split across NUMA nodes never above SYS). The set score of a GPU set is the
sum of its pair scores.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scheduler.core.topology.schema import GpuInfo, GpuLink, Topology, TopologyError

if TYPE_CHECKING:
    import networkx as nx

PairMatrix = tuple[tuple[int, ...], ...]
MAX_PAIR_SCORE = 10_000
"""Each pair-score argument's ceiling (the defaults are 10..100). With at most MAX_NVLINKS
links per pair and 63 GPUs a set score S stays below 1.3e9, and GPUTopology's node key
(busbw in MB/s x (S_max + 1) + S, times 80) below 6.6e18, inside int64."""


@dataclass(frozen=True)
class PairScoreTable:
    """How a pair of GPUs scores: one value per PCIe level plus a value per NVLink.

    `nvswitch_links_count`: whether NVLinks through an NVSwitch earn NVLink credit.
    `numa_bounds`: apply the NUMA corrections to the PCIe part.
    `nvlink_credit_max`: pairs with more NVLinks than this earn no NVLink credit at all
    (go-gpuallocator only scores 1..12 links); None means no limit.
    """

    sys: int = 10
    node: int = 20
    phb: int = 30
    pxb: int = 40
    pix: int = 50
    board: int = 60
    nvlink: int = 100
    nvswitch_links_count: bool = True
    numa_bounds: bool = True
    nvlink_credit_max: int | None = None

    def level_score(self, level: str | None) -> int | None:
        """Score of a PCIe common-ancestor level; None when the level is unknown."""
        if level is None:
            return None
        return {
            "SYS": self.sys,
            "NODE": self.node,
            "PHB": self.phb,
            "PXB": self.pxb,
            "PIX": self.pix,
            "BOARD": self.board,
        }[level]

    def pair_score(self, a: GpuInfo, b: GpuInfo, link: GpuLink) -> int:
        """Score of one GPU pair."""
        pcie = self.level_score(link.pcie)
        if self.numa_bounds and a.numa_node is not None and b.numa_node is not None:
            if a.numa_node == b.numa_node:
                pcie = self.node if pcie is None else max(pcie, self.node)
            else:
                pcie = self.sys if pcie is None else min(pcie, self.sys)
        links = link.nvlinks if self.nvswitch_links_count else link.nvlinks - link.nvswitch_links
        if self.nvlink_credit_max is not None and links > self.nvlink_credit_max:
            links = 0
        return (pcie or 0) + self.nvlink * links

    @classmethod
    def from_args(
        cls, raw: Mapping[str, Any] | None, *, path: str = "pairScores"
    ) -> PairScoreTable:
        """Build from plugin args, e.g. `{"pix": 50, "nvlink": 100}`; errors name the field."""
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise TopologyError(f"{path}: must be a mapping")
        names = {
            "sys": "sys",
            "node": "node",
            "phb": "phb",
            "pxb": "pxb",
            "pix": "pix",
            "board": "board",
            "nvlink": "nvlink",
        }
        flags = {"nvswitchLinksCount": "nvswitch_links_count", "numaBounds": "numa_bounds"}
        values: dict[str, Any] = {}
        for key, value in raw.items():
            if key in names:
                valid = isinstance(value, int) and not isinstance(value, bool)
                if not valid or not 0 <= value <= MAX_PAIR_SCORE:
                    raise TopologyError(
                        f"{path}.{key}: must be a non-negative integer (at most "
                        f"{MAX_PAIR_SCORE:,}), got {value!r}"
                    )
                values[names[key]] = value
            elif key in flags:
                if not isinstance(value, bool):
                    raise TopologyError(f"{path}.{key}: must be true or false")
                values[flags[key]] = value
            else:
                known = ", ".join([*names, *flags])
                raise TopologyError(f"{path}.{key}: unknown field (known: {known})")
        return cls(**values)


DEFAULT_TABLE = PairScoreTable()
"""The scheduler's default pair scores."""

DEVICE_PLUGIN_TABLE = PairScoreTable(
    nvswitch_links_count=False, numa_bounds=False, nvlink_credit_max=12
)
"""go-gpuallocator's own scores: NVSwitch links earn nothing, no NUMA correction."""


def pair_matrix(topology: Topology, table: PairScoreTable = DEFAULT_TABLE) -> PairMatrix:
    """Symmetric matrix of pair scores (zero diagonal)."""
    n = topology.size
    rows = [[0] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            score = table.pair_score(topology.gpus[i], topology.gpus[j], topology.link(i, j))
            rows[i][j] = rows[j][i] = score
    return tuple(tuple(row) for row in rows)


def set_score(matrix: PairMatrix, gpus: Iterable[int]) -> int:
    """Sum of pair scores within a GPU set."""
    members = sorted(gpus)
    return sum(matrix[a][b] for k, a in enumerate(members) for b in members[k + 1 :])


def mask_to_indices(mask: int) -> tuple[int, ...]:
    """Bitmask -> ascending GPU indices."""
    out: list[int] = []
    i = 0
    while mask:
        if mask & 1:
            out.append(i)
        mask >>= 1
        i += 1
    return tuple(out)


def indices_to_mask(indices: Iterable[int]) -> int:
    """GPU indices -> bitmask."""
    mask = 0
    for i in indices:
        mask |= 1 << i
    return mask


def topology_graph(topology: Topology, table: PairScoreTable = DEFAULT_TABLE) -> nx.Graph:
    """networkx graph: GPUs as nodes (NUMA, health, MIG as attributes), pair scores as weights.

    Every pair gets an edge; `nvlinks` and `pcie` ride along as edge attributes so callers can
    take NVLink subgraphs (`nx.subgraph_view`) or NUMA groups.
    """
    import networkx as nx  # imported on first use: a cluster without GPU topologies never pays it

    graph = nx.Graph()
    for gpu in topology.gpus:
        graph.add_node(
            gpu.index,
            numa=gpu.numa_node,
            healthy=gpu.healthy,
            mig=gpu.mig_enabled,
            uuid=gpu.uuid,
            model=gpu.model,
        )
    matrix = pair_matrix(topology, table)
    for i in range(topology.size):
        for j in range(i + 1, topology.size):
            link = topology.link(i, j)
            graph.add_edge(i, j, weight=matrix[i][j], nvlinks=link.nvlinks, pcie=link.pcie)
    return graph
