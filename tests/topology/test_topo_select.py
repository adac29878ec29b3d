"""Best-set search: exhaustive comparison with brute force, policies, single-GPU picks,
MIG and unhealthy GPUs, 16-GPU nodes, caching."""

from __future__ import annotations

import functools
import itertools
import random
from dataclasses import replace

import pytest

from scheduler.core.topology import (
    GpuInfo,
    GpuLink,
    GpuSelector,
    PairScoreTable,
    Placement,
    Topology,
    builtin_topology,
    pair_matrix,
)
from scheduler.core.topology.bandwidth import LinkBandwidth, bandwidth_matrix

EIGHT = ["dgx1-v100", "dgx-a100", "dgx-h100", "pcie-8gpu-2socket"]


def _score(matrix: tuple[tuple[int, ...], ...], gpus: tuple[int, ...]) -> int:
    return sum(matrix[a][b] for a, b in itertools.combinations(gpus, 2))


def _allowed(topology: Topology, gpus: tuple[int, ...], placement: Placement) -> bool:
    if placement is Placement.NVLINK:
        return all(topology.link(a, b).nvlinks > 0 for a, b in itertools.combinations(gpus, 2))
    if placement is Placement.SINGLE_NUMA:
        numas = {topology.gpus[g].numa_node for g in gpus}
        return len(numas) == 1 and None not in numas
    return True


@functools.cache
def _bandwidth(topology: Topology) -> tuple[tuple[float, ...], ...]:
    return bandwidth_matrix(topology)


def _has_ring(bw: tuple[tuple[float, ...], ...], gpus: tuple[int, ...], floor: float) -> bool:
    """Depth-first search for a cycle through every GPU of the set on links >= floor."""
    start = gpus[0]

    def extend(at: int, left: frozenset[int]) -> bool:
        if not left:
            return bw[at][start] >= floor
        return any(bw[at][g] >= floor and extend(g, left - {g}) for g in left)

    return extend(start, frozenset(gpus[1:]))


def brute_ring(topology: Topology, gpus: tuple[int, ...]) -> float:
    """Best single ring over the set: the fastest link floor that still closes a cycle through
    every GPU, found by search (0 for one GPU; a pair's ring is its link)."""
    bw = _bandwidth(topology)
    if len(gpus) < 2:
        return 0.0
    floors = sorted({bw[a][b] for a, b in itertools.combinations(gpus, 2)}, reverse=True)
    return next(t for t in floors if _has_ring(bw, gpus, t))


def brute_force(
    topology: Topology, free_mask: int, size: int, placement: Placement = Placement.BEST_EFFORT
) -> tuple[int, ...] | None:
    """The specification, literally: max ring busbw, then set score, then leftover score, then
    lowest indices."""
    matrix = pair_matrix(topology)
    free = [
        g.index
        for g in topology.gpus
        if free_mask >> g.index & 1 and g.healthy and not g.mig_enabled
    ]
    best: tuple[float, int, int] | None = None
    chosen = None
    for combo in itertools.combinations(free, size):  # lexicographic: first max = lowest
        if not _allowed(topology, combo, placement):
            continue
        rest = tuple(g for g in free if g not in combo)
        key = (brute_ring(topology, combo), _score(matrix, combo), _score(matrix, rest))
        if best is None or key > best:
            best, chosen = key, combo
    return chosen


@pytest.mark.parametrize("name", EIGHT)
def test_exhaustive_best_effort_matches_brute_force(name: str) -> None:
    topology = builtin_topology(name)
    matrix = pair_matrix(topology)
    selector = GpuSelector()
    for free in range(256):
        for size in range(1, 9):
            got = selector.best_set(topology, free, size)
            want = brute_force(topology, free, size)
            assert (got.gpus if got else None) == want, (name, bin(free), size)
            if got is not None:
                assert got.score == _score(matrix, got.gpus)
                assert got.mask == sum(1 << g for g in got.gpus)


@pytest.mark.parametrize("name", ["dgx1-v100", "pcie-8gpu-2socket", "dgx-a100"])
@pytest.mark.parametrize("placement", [Placement.NVLINK, Placement.SINGLE_NUMA])
def test_exhaustive_policies_match_brute_force(name: str, placement: Placement) -> None:
    topology = builtin_topology(name)
    selector = GpuSelector()
    for free in range(256):
        for size in (1, 2, 3, 4, 5):
            got = selector.best_set(topology, free, size, placement)
            assert (got.gpus if got else None) == brute_force(topology, free, size, placement)


def test_policies_on_known_machines() -> None:
    dgx1 = builtin_topology("dgx1-v100")
    selector = GpuSelector()
    # A DGX-1 quad (0-3) is fully NVLinked, a cross quad is not.
    assert selector.best_set(dgx1, 0xFF, 4, Placement.NVLINK).gpus == (0, 1, 2, 3)  # type: ignore[union-attr]
    assert selector.best_set(dgx1, 0b11110000, 4, Placement.NVLINK).gpus == (4, 5, 6, 7)  # type: ignore[union-attr]
    assert selector.best_set(dgx1, 0b00111100, 4, Placement.NVLINK) is None
    assert selector.best_set(dgx1, 0xFF, 5, Placement.NVLINK) is None
    pcie = builtin_topology("pcie-8gpu-2socket")
    assert selector.best_set(pcie, 0xFF, 2, Placement.NVLINK) is None
    assert selector.best_set(pcie, 0b00111100, 2, Placement.SINGLE_NUMA).gpus == (2, 3)  # type: ignore[union-attr]
    assert selector.best_set(pcie, 0b00011100, 3, Placement.SINGLE_NUMA) is None
    h100 = builtin_topology("dgx-h100")
    assert selector.best_set(h100, 0b10011111, 4, Placement.SINGLE_NUMA).gpus == (0, 1, 2, 3)  # type: ignore[union-attr]


def test_unknown_numa_never_single_numa() -> None:
    base = builtin_topology("pcie-4gpu")
    topology = replace(base, gpus=tuple(replace(g, numa_node=None) for g in base.gpus))
    assert GpuSelector().best_set(topology, 0xF, 1, Placement.SINGLE_NUMA) is None
    assert GpuSelector().best_set(topology, 0xF, 2) is not None


@pytest.mark.parametrize(
    ("name", "free", "expected"),
    [
        # PIX pair 0-1 stays whole; the lone GPU 2 goes.
        ("pcie-8gpu-2socket", 0b00000111, 2),
        # DGX-1: 0-3 are an NV2 pair; GPU 5 has no NVLink to either.
        ("dgx1-v100", 0b00101001, 5),
        # DGX-1 quad 0-3 free plus GPU 4: taking 4 breaks no intra-quad link.
        ("dgx1-v100", 0b00011111, 4),
        # PCIe box: 4,5 pair and 6 alone on socket 1, 0 alone on socket 0.
        ("pcie-8gpu-2socket", 0b01110001, 0),
    ],
)
def test_single_gpu_keeps_pairs_intact(name: str, free: int, expected: int) -> None:
    chosen = GpuSelector().best_set(builtin_topology(name), free, 1)
    assert chosen is not None and chosen.gpus == (expected,)


def test_unhealthy_and_mig_gpus_excluded() -> None:
    base = builtin_topology("dgx-a100")
    gpus = list(base.gpus)
    gpus[0] = replace(gpus[0], mig_enabled=True)
    gpus[1] = replace(gpus[1], healthy=False)
    topology = replace(base, gpus=tuple(gpus))
    selector = GpuSelector()
    for size in range(1, 7):
        chosen = selector.best_set(topology, 0xFF, size)
        assert chosen is not None and not {0, 1} & set(chosen.gpus)
    assert selector.best_set(topology, 0xFF, 7) is None


def random_topology(n: int, seed: int) -> Topology:
    rng = random.Random(seed)
    gpus = tuple(GpuInfo(i, numa_node=i * 2 // n) for i in range(n))
    links = []
    for a, b in itertools.combinations(range(n), 2):
        level = rng.choice(["PIX", "PXB", "PHB", "NODE", "SYS"])
        links.append(GpuLink(a, b, level, rng.choice([0, 0, 0, 1, 2, 4])))
    return Topology(gpus, tuple(links))


def test_sixteen_gpus_exact_and_bounded() -> None:
    topology = random_topology(16, seed=7)
    selector = GpuSelector()
    rng = random.Random(3)
    cases = [((1 << 16) - 1, 8), ((1 << 16) - 1, 3), (rng.getrandbits(16) | 0xF0F, 4)]
    cases += [(rng.getrandbits(16), size) for size in (1, 2, 5)]
    for free, size in cases:
        before = selector.stats.candidates
        got = selector.best_set(topology, free, size)
        assert (got.gpus if got else None) == brute_force(topology, free, size)
        # Work is bounded by the subsets of the free GPUs, never more.
        assert selector.stats.candidates - before <= _comb(bin(free).count("1"), size)
    assert selector.stats.compiled == 1


def _comb(n: int, k: int) -> int:
    import math

    return math.comb(n, k) if 0 <= k <= n else 0


def test_cache_and_shared_precompute() -> None:
    selector = GpuSelector()
    first = builtin_topology("dgx1-v100")
    # Another DGX-1: other UUIDs and PCI addresses, same shape.
    second = replace(
        first,
        gpus=tuple(
            replace(g, uuid=f"GPU-{g.index}", pci_bus_id="0000:99:00.0") for g in first.gpus
        ),
    )
    assert first != second and first.key == second.key
    assert (
        replace(first, gpus=(replace(first.gpus[0], numa_node=1), *first.gpus[1:])).key != first.key
    )
    a = selector.best_set(first, 0b10110110, 3)
    work = selector.stats.candidates
    b = selector.best_set(second, 0b10110110, 3)
    assert a == b and selector.stats.candidates == work and selector.stats.cache_hits == 1
    assert selector.stats.compiled == 1
    # Non-allocatable bits in the free mask do not split the cache.
    assert selector.best_set(first, 0b10110110 | 1 << 12, 3) == a
    assert selector.stats.cache_hits == 2


def test_custom_table_changes_choice() -> None:
    topology = builtin_topology("pcie-8gpu-2socket")
    free = 0b00110110  # 1, 2 | 4, 5: pairs 4-5 (PIX) and 1-2 (NODE)
    default = GpuSelector().best_set(topology, free, 2)
    assert default is not None and default.gpus == (4, 5)
    # The pair scores only break ties of bandwidth: 4-5 is still the faster pair.
    flat = GpuSelector(PairScoreTable(pix=20, node=20)).best_set(topology, free, 2)
    assert flat is not None and flat.gpus == (4, 5)
    same_speed = LinkBandwidth(pix=12.0)
    flat = GpuSelector(PairScoreTable(pix=20, node=20), bandwidth=same_speed)
    chosen = flat.best_set(topology, free, 2)
    assert chosen is not None and chosen.gpus == (1, 2)  # now tied: lowest indices
    assert chosen.busbw == 12.0


def test_greedy_fallback_above_sixteen() -> None:
    topology = random_topology(18, seed=1)
    selector = GpuSelector()
    chosen = selector.best_set(topology, (1 << 18) - 1, 4)
    assert chosen is not None and not chosen.exact and len(chosen.gpus) == 4
    nv = selector.best_set(topology, (1 << 18) - 1, 2, Placement.NVLINK)
    assert nv is not None and topology.link(*nv.gpus).nvlinks > 0


def test_invalid_sizes() -> None:
    topology = builtin_topology("pcie-4gpu")
    selector = GpuSelector()
    assert selector.best_set(topology, 0xF, 0) is None
    assert selector.best_set(topology, 0xF, 5) is None
    assert selector.best_set(topology, 0b11, 3) is None
