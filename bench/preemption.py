"""Preemption benchmark: one 4-GPU `nvlink` pod of priority 1000 on a cluster of DGX-1 V100
nodes whose 8 GPUs are all held by 1-GPU pods of priorities 0..49. Every node is a candidate
(no sampling), so each is copied and its victims tried one by one with the filters re-run.

    python bench/preemption.py [--nodes 1000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from plugins import frameworks_for
from scheduler.core.cache import Cache
from scheduler.core.config import default_config
from scheduler.core.cycle import Scheduler
from scheduler.core.model import NodeInfo, PodInfo
from scheduler.core.queue import SchedulingQueue
from scheduler.core.topology import builtin_topology, format_topology
from scheduler.core.topology.schema import ANNOTATION_GPUS, ANNOTATION_TOPOLOGY
from scheduler.explain import DryRunBinder


def node(name: str, topology: str) -> dict[str, Any]:
    return {
        "kind": "Node",
        "metadata": {"name": name, "annotations": {ANNOTATION_TOPOLOGY: topology}},
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}
        },
    }


def pod(name: str, priority: int, gpus: int, node_name: str | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": name, "annotations": {}},
        "spec": {
            "schedulerName": "topo-scheduler",
            "priority": priority,
            "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": "Running" if node_name else "Pending"},
    }
    if node_name:
        obj["spec"]["nodeName"] = node_name
    return obj


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000)
    args = parser.parse_args()
    topology = format_topology(builtin_topology("dgx1-v100"))
    cache = Cache()
    for n in range(args.nodes):
        name = f"n{n:05d}"
        cache.add_node(NodeInfo.from_object(node(name, topology)))
        for i in range(8):
            obj = pod(f"p{n}-{i}", (n * 7 + i) % 50, 1, name)
            obj["metadata"]["annotations"][ANNOTATION_GPUS] = str(i)
            cache.add_pod(PodInfo.from_object(obj))
    queue: SchedulingQueue[PodInfo] = SchedulingQueue(lambda: 0.0)
    cycle = Scheduler(cache, queue, frameworks_for(default_config()), DryRunBinder())
    preemptor = pod("big", 1000, 4)
    preemptor["metadata"]["annotations"]["topo-scheduler.io/gpu-placement"] = "nvlink"
    cycle.enqueue(PodInfo.from_object(preemptor))
    queued = queue.pop()
    assert queued is not None
    start = time.perf_counter()
    cycle.schedule_one(queued)
    elapsed = time.perf_counter() - start
    nomination = cycle.nominator.get("default/big")
    assert nomination is not None
    print(
        f"{args.nodes} nodes: one preemption cycle in {elapsed:.2f} s "
        f"({1000 * elapsed / args.nodes:.2f} ms a node); nominated {nomination.node}, "
        f"GPUs {','.join(map(str, nomination.gpus))}"
    )


if __name__ == "__main__":
    main()
