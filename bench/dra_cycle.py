"""Claims per second: pods each with one ResourceClaim for GPUs from NVIDIA's device class
(`gpu.nvidia.com`), scheduled by the default profile over 500 nodes with 8 GPUs each
published as ResourceSlices, through the whole cycle (PreFilter, Filter with the allocator on
every node, Reserve, PreBind writing the claim status in memory, Bind).

kube's scheduler_perf floor for DRA (SchedulingWithResourceClaimTemplateStructured and
friends, `performance-config.yaml` thresholds) is 40-56 pods/s.

    python bench/dra_cycle.py [--nodes 500] [--pods 500] [--gpus-per-claim 1]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduler.core.dra.types import ResourceClaim
from tests.dra.objects import (
    claim,
    claim_pod,
    device_class,
    gpu_node,
    gpu_slice,
    request,
)
from tests.dra.plugin_support import cluster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pods", type=int, default=500)
    parser.add_argument("--gpus-per-claim", type=int, default=1)
    args = parser.parse_args()
    objects = [device_class()]
    for i in range(args.nodes):
        objects += [gpu_node(f"n{i:04d}"), gpu_slice(f"n{i:04d}")]
    objects += [claim(f"c{j}", request(count=args.gpus_per_claim)) for j in range(args.pods)]
    c = cluster(objects)
    pods = [claim_pod(f"p{j}", [("gpus", f"c{j}")]) for j in range(args.pods)]
    t0 = time.perf_counter()
    placed = sum(c.schedule(p).outcome == "assumed" for p in pods)
    elapsed = time.perf_counter() - t0
    allocated = sum(
        1
        for claim_ in c.cache.snapshot.storage.dra.all_claims()
        if isinstance(claim_, ResourceClaim) and claim_.allocation is not None
    )
    print(
        f"{args.nodes} nodes x 8 GPUs, {args.pods} pods with one claim "
        f"({args.gpus_per_claim} GPU each): {placed} scheduled, {allocated} claims allocated, "
        f"{elapsed:.2f} s, {placed / elapsed:.1f} claims/s "
        "(kube scheduler_perf DRA floor: 40-56 pods/s)"
    )


if __name__ == "__main__":
    main()
