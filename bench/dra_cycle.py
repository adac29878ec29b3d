"""Claims per second: pods each with one ResourceClaim for GPUs from NVIDIA's device class
(`gpu.nvidia.com`), scheduled by the default profile over 500 nodes with 8 GPUs each
published as ResourceSlices (every GPU its own uuid), through the whole cycle (PreFilter,
Filter deciding every node, Reserve, PreBind writing the claim status in memory, Bind).

Two runs on the same cluster: `reused verdicts` is the plugin as shipped (the allocator runs
once per distinct node key, see docs/dra.md); `allocator on every node` is the plain form
(`DynamicResources(reuse_verdicts=False)`), kube's Filter. The bench checks that both make
the same decisions (node, devices, message) for every pod.

kube's scheduler_perf floor for DRA (SchedulingWithResourceClaimTemplateStructured and
friends, `performance-config.yaml` thresholds) is 40-56 pods/s.

    python bench/dra_cycle.py [--nodes 500] [--pods 500] [--gpus-per-claim 1] [--no-plain]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from plugins.dynamic_resources import DynamicResources
from scheduler.core.dra.types import ResourceClaim
from tests.dra.objects import (
    claim,
    claim_pod,
    device_class,
    gpu_node,
    gpu_slice,
    request,
)
from tests.dra.plugin_support import Cluster, cluster

FLOOR = "kube scheduler_perf DRA floor: 40-56 pods/s"


def build(nodes: int, pods: int, gpus_per_claim: int) -> Cluster:
    objects: list[dict[str, Any]] = [device_class()]
    for i in range(nodes):
        published = gpu_slice(f"n{i:04d}")
        for device in published["spec"]["devices"]:
            device["attributes"]["uuid"] = {"string": f"GPU-{i:04x}{device['name'][4:]:>04}"}
        objects += [gpu_node(f"n{i:04d}"), published]
    objects += [claim(f"c{j}", request(count=gpus_per_claim)) for j in range(pods)]
    return cluster(objects)


def plugin(c: Cluster) -> DynamicResources:
    for framework in c.assembly.frameworks.values():
        for p in framework.pre_filters:
            if isinstance(p, DynamicResources):
                return p
    raise LookupError("DynamicResources is not in the profile")


def run(c: Cluster, pods: int) -> tuple[float, list[tuple[Any, ...]]]:
    objects = [claim_pod(f"p{j}", [("gpus", f"c{j}")]) for j in range(pods)]
    decisions = []
    t0 = time.perf_counter()
    for pod in objects:
        decision = c.schedule(pod)
        result = decision.result
        node = result.node if result is not None else None
        decisions.append((decision.outcome, node, decision.message))
    elapsed = time.perf_counter() - t0
    dra = c.cache.snapshot.storage.dra
    for j, (outcome, node, message) in enumerate(decisions):
        found = dra.claim("default", f"c{j}")
        devices = None
        if isinstance(found, ResourceClaim) and found.allocation is not None:
            devices = tuple(str(d.id) for d in found.allocation.devices)
        decisions[j] = (outcome, node, message, devices)
    return elapsed, decisions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pods", type=int, default=500)
    parser.add_argument("--gpus-per-claim", type=int, default=1)
    parser.add_argument(
        "--no-plain", action="store_true", help="skip the run with the allocator on every node"
    )
    args = parser.parse_args()
    shown = (
        f"{args.nodes} nodes x 8 GPUs, {args.pods} pods with one claim "
        f"({args.gpus_per_claim} GPU each)"
    )
    fast = build(args.nodes, args.pods, args.gpus_per_claim)
    elapsed, decided = run(fast, args.pods)
    placed = sum(d[0] == "assumed" for d in decided)
    allocated = sum(d[3] is not None for d in decided)
    cache = plugin(fast).verdict_cache
    print(
        f"{shown}: reused verdicts: {placed} scheduled, {allocated} claims allocated, "
        f"{elapsed:.2f} s, {placed / elapsed:.1f} claims/s (allocator runs in Filter: "
        f"{cache.runs}, verdicts reused: {cache.hits}) ({FLOOR})"
    )
    if args.no_plain:
        return
    plain = build(args.nodes, args.pods, args.gpus_per_claim)
    plugin(plain).reuse_verdicts = False
    elapsed, reference = run(plain, args.pods)
    placed = sum(d[0] == "assumed" for d in reference)
    print(
        f"{shown}: allocator on every node: {placed} scheduled, {elapsed:.2f} s, "
        f"{placed / elapsed:.1f} claims/s"
    )
    same = decided == reference
    print(f"same decisions (node, devices, message) for every pod: {'yes' if same else 'NO'}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
