"""Ring bus bandwidth of GPU sets, and the selection order built on it."""

from __future__ import annotations

import itertools
import random

import pytest

from scheduler.core.topology import (
    BUILTIN_TOPOLOGIES,
    GpuSelector,
    Topology,
    TopologyError,
    builtin_topology,
    pair_matrix,
)
from scheduler.core.topology.bandwidth import (
    LinkBandwidth,
    bandwidth_matrix,
    ring_busbw,
    ring_busbw_all,
)
from scheduler.core.topology.scoring import mask_to_indices
from tests.topology.test_topo_select import random_topology

SMALL = [n for n in BUILTIN_TOPOLOGIES if builtin_topology(n).size <= 8]


def permutation_ring(bw: tuple[tuple[float, ...], ...], gpus: tuple[int, ...]) -> float | None:
    """Every cycle through the set tried: the best cycle's slowest hop."""
    if len(gpus) < 2:
        return None
    best = 0.0
    for order in itertools.permutations(gpus[1:]):
        hops = (gpus[0], *order, gpus[0])
        best = max(best, min(bw[hops[i]][hops[i + 1]] for i in range(len(hops) - 1)))
    return best


@pytest.mark.parametrize("name", SMALL)
def test_busbw_of_every_set_matches_brute_force(name: str) -> None:
    topology = builtin_topology(name)
    bw = bandwidth_matrix(topology)
    table = ring_busbw_all(bw)
    compiled = GpuSelector().compile(topology)
    for mask in range(1, 1 << topology.size):
        gpus = mask_to_indices(mask)
        want = permutation_ring(bw, gpus)
        assert compiled.busbw_of(mask) == want, (name, gpus)
        assert (table[mask] if len(gpus) > 1 else None) == want


def test_link_bandwidths_of_known_machines() -> None:
    dgx1 = bandwidth_matrix(builtin_topology("dgx1-v100"))
    assert dgx1[0][1] == 25.0 and dgx1[0][3] == 50.0  # NV1, NV2
    assert dgx1[0][5] == 8.0  # no NVLink, across sockets: SYS
    assert bandwidth_matrix(builtin_topology("dgx-a100"))[0][5] == 300.0  # NV12 via NVSwitch
    pcie = bandwidth_matrix(builtin_topology("pcie-8gpu-2socket"))
    assert (pcie[0][1], pcie[0][2], pcie[0][4]) == (22.0, 12.0, 8.0)  # PIX, NODE, SYS
    assert ring_busbw(dgx1, range(8)) == 50.0  # an all-NV2 ring exists
    assert ring_busbw(pcie, (0, 1, 2, 3)) == 12.0
    assert ring_busbw(pcie, (0,)) is None
    assert ring_busbw(bandwidth_matrix(builtin_topology("dgx-h100")), range(8)) == 450.0


def test_dgx1_pair_sum_best_is_not_the_fastest_ring() -> None:
    """Free GPUs 0,1,2,4,5 of a DGX-1, 4 asked: the pair-sum best 0,1,2,4 must cross a SYS hop."""
    dgx1 = builtin_topology("dgx1-v100")
    matrix = pair_matrix(dgx1)
    bw = bandwidth_matrix(dgx1)

    def score(gpus: tuple[int, ...]) -> int:
        return sum(matrix[a][b] for a, b in itertools.combinations(gpus, 2))

    assert score((0, 1, 2, 4)) == 690 and ring_busbw(bw, (0, 1, 2, 4)) == 8.0
    chosen = GpuSelector().best_set(dgx1, 0b110111, 4)
    assert chosen is not None
    assert (chosen.gpus, chosen.score, chosen.busbw) == ((0, 1, 4, 5), 680, 25.0)


@pytest.mark.parametrize("name", SMALL)
def test_selection_has_the_fastest_ring_then_the_best_pair_score(name: str) -> None:
    topology = builtin_topology(name)
    bw = bandwidth_matrix(topology)
    matrix = pair_matrix(topology)
    selector = GpuSelector()
    n = topology.size
    for free in range(1, 1 << n):
        members = mask_to_indices(free)
        for size in range(2, len(members) + 1):
            chosen = selector.best_set(topology, free, size)
            assert chosen is not None
            sets = list(itertools.combinations(members, size))
            rings = {s: permutation_ring(bw, s) for s in sets}
            fastest = max(rings.values())  # type: ignore[type-var]
            assert chosen.busbw == fastest, (name, members, size)
            top = max(sum(matrix[a][b] for a, b in itertools.combinations(s, 2))
                      for s in sets if rings[s] == fastest)  # fmt: skip
            assert chosen.score == top, (name, members, size)


def test_one_gpu_has_no_ring() -> None:
    chosen = GpuSelector().best_set(builtin_topology("dgx-h100"), 0xFF, 1)
    assert chosen is not None and chosen.busbw is None


def _sample_sets(rng: random.Random, n: int, size: int, count: int) -> list[tuple[int, ...]]:
    return [tuple(sorted(rng.sample(range(n), size))) for _ in range(count)]


@pytest.mark.parametrize("topology", [builtin_topology("dgx2-v100"), random_topology(16, 11)])
def test_sixteen_gpu_nodes_sets_up_to_eight(topology: Topology) -> None:
    bw = bandwidth_matrix(topology)
    compiled = GpuSelector().compile(topology)
    rng = random.Random(5)
    for size in range(2, 9):
        for gpus in _sample_sets(rng, 16, size, 25 if size < 8 else 6):
            mask = sum(1 << g for g in gpus)
            assert compiled.busbw_of(mask) == permutation_ring(bw, gpus), gpus
    # The selection reads the same table: the chosen 8-GPU set is as fast as any 8-GPU set.
    chosen = GpuSelector().best_set(topology, 0xFFFF, 8)
    assert chosen is not None and chosen.busbw == max(
        float(compiled.busbw[m]) for m in compiled.by_size[8]
    )


def test_link_bandwidth_args() -> None:
    RANGE = "must be a number from 0.001 to 1,000 (GB/s)"
    table = LinkBandwidth.from_args({"nvlink": 50, "sys": 4.5})
    assert table.nvlink == 50.0 and table.sys == 4.5 and table.pix == 22.0
    dgx1 = builtin_topology("dgx1-v100")
    assert bandwidth_matrix(dgx1, table)[0][3] == 100.0
    for raw, message in [
        ({"nvlink": 0}, f"linkBandwidth.nvlink: {RANGE}, got 0"),
        ({"sys": 1e-320}, f"linkBandwidth.sys: {RANGE}, got 1e-320"),
        ({"pix": "fast"}, f"linkBandwidth.pix: {RANGE}, got 'fast'"),
        ({"pcie": 1}, "linkBandwidth.pcie: unknown field"),
        ([1], "linkBandwidth: must be a mapping"),
    ]:
        with pytest.raises(TopologyError, match=message.replace("(", r"\(").replace(")", r"\)")):
            LinkBandwidth.from_args(raw)  # type: ignore[arg-type]


def test_explain_shows_busbw_next_to_gpus(capsys: pytest.CaptureFixture[str]) -> None:
    import json
    from pathlib import Path

    from scheduler.cli import main

    root = Path(__file__).resolve().parents[2]
    args = ["explain", "--snapshot", str(root / "examples/snapshot.yaml"),
            "--pod", str(root / "examples/explain-pod.yaml")]  # fmt: skip
    assert main([*args, "--output", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    chosen = doc["nodes"][doc["node"]]
    assert doc["busbw"] == chosen["busbw"] == 300.0 and doc["gpus"] == chosen["gpus"]
    for entry in doc["nodes"].values():
        if entry["feasible"] and entry.get("gpus"):
            assert isinstance(entry["busbw"], float) and entry["gpuSetScore"] > 0
    assert main(args) == 0
    assert "busbw 300 GB/s set score" in capsys.readouterr().out


def test_plugin_link_bandwidth_args() -> None:
    from plugins.gpu_topology import parse_args
    from scheduler.core.config import ConfigError

    args = parse_args({"linkBandwidth": {"nvlink": 50}}, "args")
    assert args.link_bandwidth.nvlink == 50.0
    with pytest.raises(ConfigError, match=r"^args.linkBandwidth.sys: must be a number from 0.001"):
        parse_args({"linkBandwidth": {"sys": -1}}, "args")
