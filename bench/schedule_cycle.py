"""Scheduling-cycle benchmark: 10,000 mixed pods into 5,000 nodes, every node evaluated.

Pods mix CPU/memory requests, GPU requests, host ports and node selectors; each one is
queued, popped and taken through the one scheduling cycle (`scheduler.core.cycle`: the
default profile's filters and scores on the whole cluster, the GPU set, assume, Reserve,
Permit) and its binding cycle with a binder that writes nothing, as `explain` does. Prints
pods/s and peak memory.

The `relations` scenario runs the same mix over nodes in 20 zones, with pods in jobs of 8
(label `app: job-N`) of which 20 % carry pod relations: half a required anti-affinity to their
job on `kubernetes.io/hostname` (one worker per node), half a zone spread constraint
(`maxSkew: 1`, DoNotSchedule) plus a hostname spread preference (ScheduleAnyway). Its pods/s
is printed next to the plain figure.

    python bench/schedule_cycle.py [--nodes 5000] [--pods 10000] [--seed 1]
        [--scenario plain|relations|both]
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
MANY_ZONES = tuple(f"zone-{i:02d}" for i in range(20))
JOB_SIZE = 8
GPU_TOPOLOGIES = ("dgx-h100", "dgx-a100", "pcie-8gpu-2socket", "dgx1-v100")


def make_node(i: int, rng: random.Random, zones: tuple[str, ...] = ZONES) -> dict[str, Any]:
    gpu = i % 5 == 0  # a fifth of the nodes are 8-GPU nodes
    labels = {
        "kubernetes.io/hostname": f"node-{i:05d}",
        "topology.kubernetes.io/zone": zones[i % len(zones)],
        "node.kubernetes.io/instance-type": "gpu"
        if gpu
        else rng.choice(["m5.4xlarge", "c5.9xlarge"]),
    }
    allocatable = {
        "cpu": "64" if gpu else "32",
        "memory": "512Gi" if gpu else "128Gi",
        "pods": "110",
    }
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


def make_pod(i: int, rng: random.Random, zones: tuple[str, ...] = ZONES) -> dict[str, Any]:
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
        spec["nodeSelector"] = {"topology.kubernetes.io/zone": rng.choice(zones)}
    container["resources"] = {"requests": requests}
    spec["containers"] = [container]
    return {"kind": "Pod", "metadata": {"name": f"pod-{i:05d}", "namespace": "bench"}, "spec": spec}


def make_related_pod(i: int, rng: random.Random) -> dict[str, Any]:
    """The plain mix in jobs of 8; 20 % of the pods carry anti-affinity or spread."""
    pod = make_pod(i, rng, MANY_ZONES)
    job = f"job-{i // JOB_SIZE}"
    pod["metadata"]["labels"] = {"app": job}
    selector = {"matchLabels": {"app": job}}
    relation = rng.random()
    spec = pod["spec"]
    if relation < 0.1:
        spec["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": selector, "topologyKey": "kubernetes.io/hostname"}
                ]
            }
        }
    elif relation < 0.2:
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": selector,
            },
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": selector,
            },
        ]
    return pod


def run(
    name: str, nodes: int, pods: int, seed: int, zones: tuple[str, ...], related: bool
) -> float:
    """Schedule `pods` into a fresh cluster; prints the figures, returns pods/s."""
    rng = random.Random(seed)
    frameworks = frameworks_for(default_config())
    cache = Cache()
    for i in range(nodes):
        cache.add_node(NodeInfo.from_object(make_node(i, rng, zones)))
    make = make_related_pod if related else make_pod
    batch = [PodInfo.from_object(make(i, rng)) for i in range(pods)]  # type: ignore[operator]
    carrying = sum(1 for p in batch if p.pod_affinity.any or p.spread_constraints)
    queue: SchedulingQueue[PodInfo] = SchedulingQueue(lambda: 0.0)
    cycle = Scheduler(cache, queue, frameworks, DryRunBinder())
    scheduled = unschedulable = 0
    start = time.perf_counter()
    for pod in batch:
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
    rate = pods / elapsed
    print(
        f"[{name}] nodes={nodes} zones={len(zones)} pods={pods} "
        f"with-relations={carrying} scheduled={scheduled} unschedulable={unschedulable}"
    )
    print(
        f"[{name}] elapsed={elapsed:.2f}s  throughput={rate:,.0f} pods/s "
        f"({elapsed / pods * 1e3:.3f} ms/pod, every node evaluated)"
    )
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--scenario", choices=("plain", "relations", "both"), default="both")
    parser.add_argument(
        "--tracemalloc", action="store_true", help="also trace the Python heap (slows the run)"
    )
    args = parser.parse_args()
    if args.tracemalloc:
        tracemalloc.start()
    rates: dict[str, float] = {}
    if args.scenario in ("plain", "both"):
        rates["plain"] = run("plain", args.nodes, args.pods, args.seed, ZONES, related=False)
    if args.scenario in ("relations", "both"):
        rates["relations"] = run(
            "relations", args.nodes, args.pods, args.seed, MANY_ZONES, related=True
        )
    if len(rates) == 2:
        print(
            f"relations/plain = {rates['relations'] / rates['plain']:.2f} "
            f"({rates['relations']:,.0f} vs {rates['plain']:,.0f} pods/s)"
        )
    if args.tracemalloc:
        _, peak = tracemalloc.get_traced_memory()
        print(f"peak Python heap={peak / 2**20:.1f} MiB (tracemalloc)")
    peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS={peak_rss_mib:.1f} MiB")


if __name__ == "__main__":
    main()
