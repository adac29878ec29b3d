"""Scheduling-cycle benchmark: 10,000 mixed pods into 5,000 nodes, every node evaluated.

Pods mix CPU/memory requests, GPU requests, host ports and node selectors; each one is
queued, popped and taken through the one scheduling cycle (`scheduler.core.cycle`: the
default profile's filters and scores on the whole cluster, the GPU set, assume, Reserve,
Permit) and its binding cycle with a binder that writes nothing, as `explain` does. Prints
pods/s and peak memory.

    python bench/schedule_cycle.py [--nodes 5000] [--pods 10000] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import resource
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from plugins import frameworks_for
from scheduler.core.cache import Cache
from scheduler.core.config import default_config
from scheduler.core.cycle import Scheduler, drive
from scheduler.core.model import NodeInfo, PodInfo
from scheduler.core.queue import SchedulingQueue
from scheduler.core.topology import builtin_topology, format_topology
from scheduler.core.topology.schema import ANNOTATION_TOPOLOGY
from scheduler.explain import DryRunBinder

ZONES = ("zone-a", "zone-b", "zone-c")
GPU_TOPOLOGIES = ("dgx-h100", "dgx-a100", "pcie-8gpu-2socket", "dgx1-v100")


def make_node(i: int, rng: random.Random) -> dict[str, Any]:
    gpu = i % 5 == 0  # a fifth of the nodes are 8-GPU nodes
    labels = {
        "kubernetes.io/hostname": f"node-{i:05d}",
        "topology.kubernetes.io/zone": ZONES[i % len(ZONES)],
        "node.kubernetes.io/instance-type": "gpu" if gpu else rng.choice(["m5.4xlarge", "c5.9xlarge"]),
    }
    allocatable = {"cpu": "64" if gpu else "32", "memory": "512Gi" if gpu else "128Gi", "pods": "110"}
    annotations = {}
    taints = []
    if gpu:
        allocatable["nvidia.com/gpu"] = "8"
        name = GPU_TOPOLOGIES[(i // 5) % len(GPU_TOPOLOGIES)]
        annotations[ANNOTATION_TOPOLOGY] = format_topology(builtin_topology(name))
        labels["nvidia.com/gpu.present"] = "true"
        taints.append({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"})
    return {
        "kind": "Node",
        "metadata": {"name": f"node-{i:05d}", "labels": labels, "annotations": annotations},
        "spec": {"taints": taints},
        "status": {
            "allocatable": allocatable,
            "images": [{"names": ["registry.local/train:v1"], "sizeBytes": 900 * 2**20}]
            if i % 7 == 0
            else [],
        },
    }


def make_pod(i: int, rng: random.Random) -> dict[str, Any]:
    kind = rng.random()
    requests: dict[str, str] = {
        "cpu": f"{rng.choice([100, 250, 500, 1000, 2000])}m",
        "memory": f"{rng.choice([128, 256, 512, 1024, 4096])}Mi",
    }
    spec: dict[str, Any] = {"schedulerName": "topo-scheduler"}
    container: dict[str, Any] = {"name": "main", "image": "registry.local/app:v1"}
    if kind < 0.2:
        requests["nvidia.com/gpu"] = str(rng.choice([1, 1, 2, 4, 8]))
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
        container["image"] = "registry.local/train:v1"
    elif kind < 0.3:
        container["ports"] = [{"containerPort": 8080, "hostPort": 8000 + rng.randrange(200)}]
    elif kind < 0.45:
        spec["nodeSelector"] = {"topology.kubernetes.io/zone": rng.choice(ZONES)}
    container["resources"] = {"requests": requests}
    spec["containers"] = [container]
    return {"kind": "Pod", "metadata": {"name": f"pod-{i:05d}", "namespace": "bench"}, "spec": spec}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--tracemalloc", action="store_true", help="also trace the Python heap (slows the run)"
    )
    args = parser.parse_args()
    rng = random.Random(args.seed)
    if args.tracemalloc:
        tracemalloc.start()
    frameworks = frameworks_for(default_config())
    cache = Cache()
    for i in range(args.nodes):
        cache.add_node(NodeInfo.from_object(make_node(i, rng)))
    pods = [PodInfo.from_object(make_pod(i, rng)) for i in range(args.pods)]
    queue: SchedulingQueue[PodInfo] = SchedulingQueue(lambda: 0.0)
    cycle = Scheduler(cache, queue, frameworks, DryRunBinder())
    scheduled = unschedulable = 0
    start = time.perf_counter()
    for pod in pods:
        cycle.enqueue(pod)
        queued = queue.pop()
        assert queued is not None
        decision = cycle.schedule_one(queued)
        if decision.assumed is None:
            unschedulable += 1
            queue.delete(pod.key)
            continue
        drive(cycle.bind(decision.assumed))
        scheduled += 1
    elapsed = time.perf_counter() - start
    peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"nodes={args.nodes} pods={args.pods} scheduled={scheduled} unschedulable={unschedulable}")
    print(f"elapsed={elapsed:.2f}s  throughput={args.pods / elapsed:,.0f} pods/s "
          f"({elapsed / args.pods * 1e3:.3f} ms/pod, every node evaluated)")
    if args.tracemalloc:
        _, peak = tracemalloc.get_traced_memory()
        print(f"peak Python heap={peak / 2**20:.1f} MiB (tracemalloc)")
    print(f"peak RSS={peak_rss_mib:.1f} MiB")


if __name__ == "__main__":
    main()
