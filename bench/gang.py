"""Gang benchmark: a 64-worker group of 8-GPU pods into 1,000 GPU nodes in 32 racks.

The nodes are DGX H100s (GPU topology annotation) under 4 spines of 8 racks; a share of them
are already partly used, so racks differ in free room. The group asks for a rack
(`topo-scheduler.io/topology-preferred`): no rack holds 64 workers, so the group cycle walks up
to the spine with the least free room that holds them, and places every member there, each
with its GPU set. Scheduler time is the whole group cycle (domain choice, 64 placements,
Reserve and Permit); the binding is the in-memory one. Prints the figures of each run.

    python bench/gang.py [--nodes 1000] [--racks 32] [--spines 4] [--workers 64] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from plugins import frameworks_for
from scheduler.core.cache import Cache
from scheduler.core.config import load_config
from scheduler.core.cycle import Scheduler, drive, queue_order
from scheduler.core.framework import BindOutcome, BindResult
from scheduler.core.group import GroupCycle, GroupOutcome
from scheduler.core.model import NodeInfo, PodInfo
from scheduler.core.queue import SchedulingQueue
from scheduler.core.topology import builtin_topology, format_topology
from scheduler.core.topology.schema import ANNOTATION_TOPOLOGY

SPINE = "network.topology.nvidia.com/spine"
RACK = "network.topology.nvidia.com/leaf"


def make_node(i: int, racks: int, spines: int, topology: str) -> dict[str, Any]:
    rack = i % racks
    return {
        "kind": "Node",
        "metadata": {
            "name": f"node-{i:05d}",
            "labels": {
                "kubernetes.io/hostname": f"node-{i:05d}",
                RACK: f"rack-{rack:02d}",
                SPINE: f"spine-{rack % spines}",
            },
            "annotations": {ANNOTATION_TOPOLOGY: topology},
        },
        "status": {
            "allocatable": {"cpu": "128", "memory": "2Ti", "pods": "110", "nvidia.com/gpu": "8"}
        },
    }


def make_pod(
    name: str, gpus: int, annotations: dict[str, str], node: str | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "topo-scheduler",
        "containers": [
            {
                "name": "main",
                "image": "registry.local/train:v1",
                "resources": {
                    "requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": str(gpus)}
                },
            }
        ],
    }
    if node is not None:
        spec["nodeName"] = node
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": name, "annotations": annotations},
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


class _Binder:
    async def bind(self, pod: PodInfo, node: str, gpus: tuple[int, ...]) -> BindResult:
        return BindResult(BindOutcome.BOUND)


def run_once(args: argparse.Namespace) -> tuple[float, GroupOutcome, int]:
    config = load_config(
        {
            "profiles": [
                {
                    "schedulerName": "topo-scheduler",
                    "pluginConfig": [
                        {"name": "GPUTopology", "args": {"topologyLevels": [SPINE, RACK]}}
                    ],
                }
            ]
        }
    )
    frameworks = frameworks_for(config)
    cache = Cache()
    topology = format_topology(builtin_topology("dgx-h100"))
    for i in range(args.nodes):
        cache.add_node(NodeInfo.from_object(make_node(i, args.racks, args.spines, topology)))
    # background load: every 3rd node runs a 4-GPU pod, so racks and spines differ
    for i in range(0, args.nodes, 3):
        cache.add_pod(PodInfo.from_object(make_pod(f"bg-{i}", 4, {}, f"node-{i:05d}")))
    now = [0.0]
    queue: SchedulingQueue[PodInfo] = SchedulingQueue(
        lambda: now[0], sort_key=queue_order(frameworks)
    )
    sched = Scheduler(cache, queue, frameworks, _Binder())
    outcomes: list[GroupOutcome] = []
    sched.groups = GroupCycle((SPINE, RACK), lambda: now[0], outcomes.append)
    annotations = {
        "topo-scheduler.io/pod-group": "llm",
        "topo-scheduler.io/min-member": str(args.workers),
        "topo-scheduler.io/topology-preferred": RACK,
    }
    for w in range(args.workers):
        sched.enqueue(PodInfo.from_object(make_pod(f"worker-{w:03d}", 8, annotations)))
    popped = queue.pop()
    assert popped is not None
    t0 = time.perf_counter()
    decisions = sched.schedule(popped)
    elapsed = time.perf_counter() - t0
    for d in decisions:
        if d.assumed is not None:
            drive(sched.bind(d.assumed))
    assigned = sum(1 for d in decisions if d.outcome == "assumed")
    return elapsed, outcomes[-1], assigned


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--racks", type=int, default=32)
    parser.add_argument("--spines", type=int, default=4)
    parser.add_argument("--workers", type=int, default=64)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    times = []
    outcome = None
    assigned = 0
    for _ in range(args.runs):
        elapsed, outcome, assigned = run_once(args)
        times.append(elapsed)
    assert outcome is not None
    print(
        f"gang of {args.workers} x 8-GPU pods into {args.nodes} nodes "
        f"({args.racks} racks under {args.spines} spines)"
    )
    print(f"  placed: {assigned}/{args.workers}, scheduled: {outcome.scheduled}")
    print(f"  domain: {outcome.domain}")
    print(f"  why:    {outcome.domain_note}")
    print(
        f"  scheduler time per group cycle: median {statistics.median(times):.3f} s, "
        f"min {min(times):.3f} s, max {max(times):.3f} s over {args.runs} runs"
    )
    print(f"  per member: {statistics.median(times) / args.workers * 1000:.2f} ms")


if __name__ == "__main__":
    main()
