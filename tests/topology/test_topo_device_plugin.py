"""Device plugin emulation against a literal port of go-gpuallocator's besteffort walk."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import replace

import pytest

from scheduler.core.topology import (
    DEVICE_PLUGIN_TABLE,
    GpuSelector,
    Topology,
    builtin_topology,
    device_plugin_set,
    pair_matrix,
)
from scheduler.core.topology.nvidia_smi import parse_nvidia_smi

Pad = None


def _partitions(devices: list[int | None], size: int) -> Iterator[list[list[int | None]]]:
    """Upstream iterateGPUPartitions: pad, then first device + every (size-1)-set in order."""
    if size == 1:
        for d in devices:
            yield [[d]]
        return
    devices = devices + [Pad] * ((-len(devices)) % size)
    padding = devices.count(Pad)

    def walk(
        rest: list[int | None], acc: list[list[int | None]]
    ) -> Iterator[list[list[int | None]]]:
        if len(rest) == size:
            yield [*acc, rest]
            return
        for combo in itertools.combinations(range(1, len(rest)), size - 1):
            group = [rest[0]] + [rest[i] for i in combo]
            if group.count(Pad) not in (0, padding):
                continue
            remaining = (
                [d for d in rest if d not in group]
                if Pad in group
                else [d for i, d in enumerate(rest) if i != 0 and i not in combo]
            )
            yield from walk(remaining, [*acc, group])

    yield from walk(devices, [])


def upstream(
    topology: Topology, free: int, size: int
) -> tuple[list[int | None], list[list[int | None]]]:
    matrix = pair_matrix(topology, DEVICE_PLUGIN_TABLE)

    def score(group: list[int | None]) -> int:
        real = [g for g in group if g is not None]
        return sum(matrix[a][b] for a, b in itertools.combinations(real, 2))

    available = [g.index for g in topology.gpus if free >> g.index & 1 and g.allocatable]
    best, best_score = None, 0
    for partition in _partitions(list(available), size):
        total = sum(score(g) for g in partition)
        if total > best_score or best is None:
            best, best_score = partition, total
    assert best is not None
    chosen = best[0]
    for group in best[1:]:
        if score(group) > score(chosen):
            chosen = group
    return chosen, best


def _with_pcie(name: str) -> Topology:
    """A builtin with the PCIe level filled in behind NVLink pairs (as the agent reports)."""
    topology = builtin_topology(name)
    links = []
    for link in topology.links:
        if link.pcie is None:
            same = topology.gpus[link.a].numa_node == topology.gpus[link.b].numa_node
            link = replace(
                link, pcie="PXB" if (link.a // 2 == link.b // 2) else ("PHB" if same else "SYS")
            )
        links.append(link)
    return replace(topology, links=tuple(links))


@pytest.mark.parametrize("name", ["dgx1-v100", "pcie-8gpu-2socket", "dgx-a100"])
def test_matches_upstream_walk(name: str) -> None:
    topology = _with_pcie(name)
    matrix = pair_matrix(topology, DEVICE_PLUGIN_TABLE)
    checked = padded = 0
    for free in range(256):
        count = bin(free).count("1")
        for size in range(1, min(count, 5) + 1):
            got = device_plugin_set(topology, free, size)
            chosen, partition = upstream(topology, free, size)
            if None not in chosen:
                assert got == tuple(chosen), (name, bin(free), size)
            else:  # upstream would hand out padding; we take the partition's best full group
                full = [[int(d) for d in g if d is not None] for g in partition if None not in g]
                best = max(
                    full, key=lambda g: sum(matrix[a][b] for a, b in itertools.combinations(g, 2))
                )
                assert got == tuple(best), (name, bin(free), size)
                padded += 1
            checked += 1
    assert checked == 977  # every free mask, sizes 1..5
    print(name, "upstream would return padding in", padded, "cases")


def test_single_gpu_is_lowest_free_index() -> None:
    dgx1 = builtin_topology("dgx1-v100")
    assert device_plugin_set(dgx1, 0b10110100, 1) == (2,)
    assert device_plugin_set(dgx1, 0, 1) == ()
    assert device_plugin_set(dgx1, 0b11, 3) == ()


def test_nvswitch_earns_nothing_so_pcie_decides() -> None:
    # On an NVSwitch node, the device plugin follows the PCIe tree only; our selector sees the
    # NVSwitch credit too but NUMA decides for it.
    a100 = _with_pcie("dgx-a100")
    free = 0b11111010  # GPU 0 and 2 busy: 1 is alone under its switch, 3 too
    assert device_plugin_set(a100, free, 2) == (4, 5)
    assert device_plugin_set(parse_nvidia_smi(open_text("dgx-a100")), 0xFF, 2) == (0, 1)


def open_text(name: str) -> str:
    from topo_fakes import DATA

    return (DATA / f"{name}.txt").read_text()


def test_mig_and_unhealthy_never_handed_out() -> None:
    base = builtin_topology("dgx1-v100")
    gpus = list(base.gpus)
    gpus[0] = replace(gpus[0], mig_enabled=True)
    gpus[3] = replace(gpus[3], healthy=False)
    topology = replace(base, gpus=tuple(gpus))
    for size in range(1, 7):
        assert not {0, 3} & set(device_plugin_set(topology, 0xFF, size))
    assert device_plugin_set(topology, 0xFF, 7) == ()


def test_sixteen_gpus_and_selector_cache() -> None:
    dgx2 = builtin_topology("dgx2-v100")
    selector = GpuSelector()
    first = selector.device_plugin_set(dgx2, 0xFFFF, 5)
    assert len(first) == 5 and selector.device_plugin_set(dgx2, 0xFFFF, 5) == first
    # NVSwitch links earn nothing and nvidia-smi hides the PCIe level: all pairs score 0,
    # so the first group of upstream's first partition wins.
    assert first == (0, 1, 2, 3, 4)


def test_more_than_sixteen_free_gpus_use_greedy() -> None:
    from test_topo_select import random_topology

    topology = random_topology(20, seed=5)
    chosen = device_plugin_set(topology, (1 << 20) - 1, 3)
    matrix = pair_matrix(topology, DEVICE_PLUGIN_TABLE)
    assert len(chosen) == 3 and chosen[0] == 0  # grown from the lowest free GPU
    second = max(range(1, 20), key=lambda g: (matrix[0][g], -g))
    assert second in chosen
