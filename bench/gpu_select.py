"""Time GPU best-set selection per pod on 8- and 16-GPU nodes, cold and cached.

    .venv/bin/python bench/gpu_select.py [--masks 200] [--seed 1]

cold: a fresh selector per topology (includes building the per-topology tables once, then
every query new); warm: the same queries again (answer cache hits); device-plugin: the
NVIDIA device plugin emulation, uncached. `tables` includes the ring bus bandwidth of every
subset, also timed alone (`of which busbw`). Sizes cycle through 1, 2, 4, 8 (and 3, 5, 16 on
16-GPU nodes); free masks are random with at least `size` free GPUs.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.core.topology import GpuSelector, Topology, builtin_topology, device_plugin_set
from scheduler.core.topology.bandwidth import bandwidth_matrix, ring_busbw_all
from scheduler.core.topology.schema import GpuInfo, GpuLink


def pcie_16() -> Topology:
    """A 16-GPU PCIe box: 2 sockets x 2 switches x 4 GPUs, NVLink bridges on GPU pairs."""
    gpus = tuple(GpuInfo(i, numa_node=i // 8) for i in range(16))
    links = []
    for a in range(16):
        for b in range(a + 1, 16):
            if a // 8 != b // 8:
                level = "SYS"
            elif a // 4 != b // 4:
                level = "NODE"
            else:
                level = "PIX"
            links.append(GpuLink(a, b, level, 4 if a // 2 == b // 2 else 0))
    return Topology(gpus, tuple(links))


def queries(topology: Topology, sizes: list[int], count: int, seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    out: list[tuple[int, int]] = []
    n = topology.size
    while len(out) < count:
        size = sizes[len(out) % len(sizes)]
        free = rng.getrandbits(n)
        if bin(free).count("1") >= size:
            out.append((free, size))
    return out


def timed(fn: Callable[[int, int], object], items: list[tuple[int, int]]) -> list[float]:
    times = []
    for free, size in items:
        start = time.perf_counter()
        fn(free, size)
        times.append(time.perf_counter() - start)
    return times


def fmt(times: list[float]) -> str:
    ms = sorted(t * 1000 for t in times)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    return f"mean {statistics.fmean(ms):8.3f} ms  p50 {statistics.median(ms):8.3f}  p99 {p99:8.3f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--masks", type=int, default=200, help="queries per topology")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    cases = [
        ("dgx1-v100", builtin_topology("dgx1-v100"), [1, 2, 4, 8]),
        ("dgx-h100", builtin_topology("dgx-h100"), [1, 2, 4, 8]),
        ("pcie-8gpu-2socket", builtin_topology("pcie-8gpu-2socket"), [1, 2, 4, 8]),
        ("dgx2-v100 (16)", builtin_topology("dgx2-v100"), [1, 2, 3, 4, 5, 8, 16]),
        ("pcie-16 (16)", pcie_16(), [1, 2, 3, 4, 5, 8, 16]),
    ]
    for name, topology, sizes in cases:
        items = queries(topology, sizes, args.masks, args.seed)
        selector = GpuSelector()
        start = time.perf_counter()
        selector.compile(topology)
        compile_ms = (time.perf_counter() - start) * 1000
        start = time.perf_counter()
        ring_busbw_all(bandwidth_matrix(topology))
        busbw_ms = (time.perf_counter() - start) * 1000

        def select(free: int, size: int, s: GpuSelector = selector, t: Topology = topology) -> None:
            s.best_set(t, free, size)

        cold = timed(select, items)
        warm = timed(select, items)
        plugin_items = items if topology.size <= 8 else items[: max(10, len(items) // 10)]

        def emulate(free: int, size: int, t: Topology = topology) -> None:
            device_plugin_set(t, free, size)

        plugin = timed(emulate, plugin_items)
        print(
            f"{name:20s} tables {compile_ms:7.1f} ms once per topology, "
            f"of which busbw {busbw_ms:.1f} ms"
        )
        print(f"{'':20s} cold          {fmt(cold)}")
        print(f"{'':20s} cached        {fmt(warm)}")
        print(f"{'':20s} device-plugin {fmt(plugin)}  ({len(plugin_items)} queries)")
        full = (1 << topology.size) - 1
        worst = max(
            timed(select, [(full ^ 1 << (topology.size - 1), k)])[0]
            for k in sizes
            if k < topology.size
        )
        print(f"{'':20s} worst cold query (all but one GPU free): {worst * 1000:.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
