"""Time pod admissions through the device plugin: the fake kubelet's GetPreferredAllocation +
Allocate per pod over unix-socket gRPC, with the plugin's PodResources List and pod watch
against the API-server emulator.

    .venv/bin/python bench/device_plugin.py [--pods 300] [--seed 1]

Pods of 1, 2, 4 and 8 GPUs with random recorded sets arrive on one DGX A100 node (fake NVML);
jobs finish at random to make room. Prints admissions per second and the per-admission time
(median and 95th percentile). The kubelet admits one pod at a time, so this is the plugin's
share of a node's pod start-up latency.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "deviceplugin")]

from conftest import NODE, Node  # noqa: E402
from fake_kubelet import FakeKubelet  # noqa: E402

from tests.emulator import PODS, Emulator  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    tmp = tempfile.mkdtemp(prefix="dpb", dir="/tmp")
    with Emulator() as emu:
        emu.create_node(NODE, gpus=8)
        kubelet = FakeKubelet(f"{tmp}/device-plugins", f"{tmp}/pr.sock", lambda: [])
        node = Node(emu, kubelet, tmp)
        kubelet.pods = node.node_pods
        kubelet.start()
        running = node.start_plugin()
        kubelet.wait_registered(1)
        inventory = running.plugin.inventory
        live: list[tuple[str, int]] = []
        times = []
        for n in range(args.pods):
            size = rng.choice((1, 2, 4, 8))
            while 8 - sum(s for _, s in live) < size:
                name, _ = live.pop(rng.randrange(len(live)))
                kubelet.release("ml", name)
                emu.delete(PODS, name, "ml")
            used = {inventory.by_uuid[d] for d in kubelet.in_use()}
            recorded = sorted(rng.sample([i for i in range(8) if i not in used], size))
            pod = node.pod(f"p{n:04d}", size, recorded=",".join(map(str, recorded)))
            start = time.perf_counter()
            kubelet.admit(pod)
            times.append(time.perf_counter() - start)
            live.append((f"p{n:04d}", size))
        running.shutdown()
        kubelet.stop()
    shutil.rmtree(tmp, ignore_errors=True)
    times.sort()
    total = sum(times)
    p95 = times[int(0.95 * (len(times) - 1))]
    print(f"{len(times)} admissions on a DGX A100 node: {len(times) / total:.0f} admissions/s")
    print(
        f"per admission: median {statistics.median(times) * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main()
