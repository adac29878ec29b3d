"""Pair scores: the go-gpuallocator table, NVSwitch credit, NUMA bounds, the graph."""

from __future__ import annotations

import pytest

from scheduler.core.topology import (
    DEFAULT_TABLE,
    DEVICE_PLUGIN_TABLE,
    GpuInfo,
    GpuLink,
    PairScoreTable,
    Topology,
    TopologyError,
    builtin_topology,
    pair_matrix,
    set_score,
    topology_graph,
)


def _pair(
    level: str | None, numa: tuple[int | None, int | None], nv: int = 0, sw: int = 0
) -> Topology:
    return Topology(
        (GpuInfo(0, numa_node=numa[0]), GpuInfo(1, numa_node=numa[1])),
        (GpuLink(0, 1, level, nv, sw),),
    )


@pytest.mark.parametrize(
    ("level", "expected"),
    [("SYS", 10), ("NODE", 20), ("PHB", 30), ("PXB", 40), ("PIX", 50), ("BOARD", 60)],
)
def test_levels_without_numa(level: str, expected: int) -> None:
    assert pair_matrix(_pair(level, (None, None)))[0][1] == expected
    assert pair_matrix(_pair(level, (None, None), nv=2))[0][1] == expected + 200


def test_numa_bounds() -> None:
    # Same NUMA node: never below NODE, even when reported SYS or unknown.
    assert pair_matrix(_pair("SYS", (0, 0)))[0][1] == 20
    assert pair_matrix(_pair(None, (0, 0), nv=1))[0][1] == 120
    assert pair_matrix(_pair("PIX", (0, 0)))[0][1] == 50
    # Split across NUMA nodes: never above SYS.
    assert pair_matrix(_pair("PIX", (0, 1)))[0][1] == 10
    assert pair_matrix(_pair(None, (0, 1), nv=2))[0][1] == 210
    # Unknown level and unknown NUMA: no PCIe credit.
    assert pair_matrix(_pair(None, (None, 0), nv=1))[0][1] == 100
    no_bounds = PairScoreTable(numa_bounds=False)
    assert pair_matrix(_pair("SYS", (0, 0)), no_bounds)[0][1] == 10


def test_nvswitch_credit() -> None:
    h100 = builtin_topology("dgx-h100")
    assert pair_matrix(h100)[0][1] == 18 * 100 + 20  # NV18 through NVSwitch + same NUMA
    assert pair_matrix(h100)[0][7] == 18 * 100 + 10
    # The device plugin's own table gives NVSwitch links nothing and knows no NUMA.
    assert pair_matrix(h100, DEVICE_PLUGIN_TABLE)[0][1] == 0
    dgx1 = builtin_topology("dgx1-v100")
    assert pair_matrix(dgx1, DEVICE_PLUGIN_TABLE)[0][3] == 200
    assert pair_matrix(dgx1, DEVICE_PLUGIN_TABLE)[0][5] == 10
    # go-gpuallocator only scores 1..12 direct links.
    assert pair_matrix(_pair("PIX", (0, 0), nv=13), DEVICE_PLUGIN_TABLE)[0][1] == 50


def test_set_score_is_sum_of_pairs() -> None:
    dgx1 = builtin_topology("dgx1-v100")
    matrix = pair_matrix(dgx1)
    assert set_score(matrix, [0, 1, 3]) == matrix[0][1] + matrix[0][3] + matrix[1][3]
    assert set_score(matrix, [4]) == 0


def test_table_from_args() -> None:
    table = PairScoreTable.from_args({"pix": 70, "nvlink": 50, "numaBounds": False})
    assert table == PairScoreTable(pix=70, nvlink=50, numa_bounds=False)
    assert PairScoreTable.from_args(None) == DEFAULT_TABLE
    for raw, field in (
        ({"pix": -1}, "args.pairScores.pix"),
        ({"pix": True}, "args.pairScores.pix"),
        ({"numaBounds": 1}, "args.pairScores.numaBounds"),
        ({"qpi": 1}, "args.pairScores.qpi: unknown field"),
    ):
        with pytest.raises(TopologyError, match=field):
            PairScoreTable.from_args(raw, path="args.pairScores")


def test_graph_model() -> None:
    dgx1 = builtin_topology("dgx1-v100")
    graph = topology_graph(dgx1)
    assert graph.number_of_nodes() == 8 and graph.number_of_edges() == 28
    assert graph.nodes[5]["numa"] == 1
    assert graph.edges[0, 3]["weight"] == pair_matrix(dgx1)[0][3]
    nvlink_edges = [(a, b) for a, b, d in graph.edges(data=True) if d["nvlinks"]]
    assert len(nvlink_edges) == 16  # hybrid cube mesh: 16 NVLink pairs
