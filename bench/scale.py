"""Scale benchmark: scheduling throughput and peak memory against cluster size.

For each (nodes, pods) size, a fresh process builds a cluster (a fifth of the nodes 8-GPU
nodes with built-in topologies -- DGX-1 V100, DGX A100, DGX H100, 2-socket PCIe -- the rest
CPU nodes) and schedules the pods one by one through the default profile (GPUTopology on),
every node evaluated, each decision assumed in the cache as the scheduler does. Pods are
small (10-200m CPU, 16-256Mi) so most fit even on 100 nodes (nodes allow 1,000 pods); 10%
ask for 1, 2, 4 or 8 GPUs, which run out early on small clusters (those decisions are counted
as unschedulable: still a full filter pass over every node).

    python bench/scale.py                                  # 100,500,1000,5000 x 10000,50000
    python bench/scale.py --nodes 100,1000 --pods 10000    # a part
    python bench/scale.py --png bench/scale.png --json bench/scale.json

Prints a table (time per pod, pods/s, peak RSS of the child process) and writes a PNG of time
per pod against node count, one line per pod count.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TOPOLOGIES = ("dgx-h100", "dgx-a100", "pcie-8gpu-2socket", "dgx1-v100")
ZONES = ("zone-a", "zone-b", "zone-c")


def make_node(i: int, annotations: dict[str, str]) -> dict[str, Any]:
    gpu = i % 5 == 0
    name = f"node-{i:05d}"
    labels = {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": ZONES[i % 3]}
    allocatable = {"cpu": "128", "memory": "1Ti", "pods": "1000"}
    taints = []
    notes: dict[str, str] = {}
    if gpu:
        topology = TOPOLOGIES[(i // 5) % len(TOPOLOGIES)]
        allocatable["nvidia.com/gpu"] = "8"
        notes = {"topo-scheduler.io/gpu-topology": annotations[topology]}
        labels["nvidia.com/gpu.present"] = "true"
        taints.append({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"})
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": notes},
        "spec": {"taints": taints},
        "status": {"allocatable": allocatable},
    }


def make_pod(i: int, rng: random.Random) -> dict[str, Any]:
    requests: dict[str, str] = {
        "cpu": f"{rng.choice([10, 50, 100, 200])}m",
        "memory": f"{rng.choice([16, 64, 128, 256])}Mi",
    }
    spec: dict[str, Any] = {"schedulerName": "topo-scheduler"}
    if rng.random() < 0.1:
        requests["nvidia.com/gpu"] = str(rng.choice([1, 1, 2, 4, 8]))
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    elif rng.random() < 0.15:
        spec["nodeSelector"] = {"topology.kubernetes.io/zone": rng.choice(ZONES)}
    spec["containers"] = [
        {"name": "main", "image": "registry.local/app:v1", "resources": {"requests": requests}}
    ]
    return {"kind": "Pod", "metadata": {"name": f"pod-{i:06d}", "namespace": "bench"}, "spec": spec}


def run_one(nodes: int, pods: int, seed: int) -> dict[str, Any]:
    """One size in this process: build, schedule every pod, measure."""
    from plugins import frameworks_for
    from scheduler.core.cache import Cache
    from scheduler.core.config import default_config
    from scheduler.core.model import NodeInfo, PodInfo
    from scheduler.core.topology import builtin_topology, format_topology

    rng = random.Random(seed)
    annotations = {name: format_topology(builtin_topology(name)) for name in TOPOLOGIES}
    framework = frameworks_for(default_config())["topo-scheduler"]
    cache = Cache()
    for i in range(nodes):
        cache.add_node(NodeInfo.from_object(make_node(i, annotations)))
    queue = [PodInfo.from_object(make_pod(i, rng)) for i in range(pods)]
    scheduled = 0
    start = time.perf_counter()
    for pod in queue:
        result = framework.schedule(pod, cache.snapshot)
        if result.node is not None:
            cache.assume(pod, result.node, result.gpus)
            scheduled += 1
    elapsed = time.perf_counter() - start
    return {
        "nodes": nodes,
        "pods": pods,
        "scheduled": scheduled,
        "unschedulable": pods - scheduled,
        "seconds": round(elapsed, 3),
        "ms_per_pod": round(elapsed / pods * 1e3, 4),
        "pods_per_second": round(pods / elapsed, 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def _sizes(text: str) -> list[int]:
    try:
        values = [int(v.replace("_", "")) for v in text.split(",") if v]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def plot(rows: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for pods in sorted({r["pods"] for r in rows}):
        points = sorted((r["nodes"], r["ms_per_pod"]) for r in rows if r["pods"] == pods)
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=f"{pods:,} pods")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("nodes (every node evaluated)")
    ax.set_ylabel("time per pod (ms)")
    ax.set_title("topo-scheduler: default profile + GPUTopology")
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=_sizes, default=[100, 500, 1000, 5000])
    parser.add_argument("--pods", type=_sizes, default=[10000, 50000])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--png", default="scale.png", help="plot file (default scale.png)")
    parser.add_argument("--json", help="also write the rows as JSON")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:  # child: exactly one size
        print(json.dumps(run_one(args.nodes[0], args.pods[0], args.seed)))
        return 0
    rows: list[dict[str, Any]] = []
    columns: list[tuple[str, int]] = [("nodes", 6), ("pods", 7), ("sched", 7), ("seconds", 9)]
    columns += [("ms/pod", 8), ("pods/s", 8), ("RSS MiB", 8)]
    print(" ".join(f"{name:>{width}}" for name, width in columns), flush=True)
    for pods in args.pods:
        for nodes in args.nodes:
            cmd = [sys.executable, __file__, "--one", "--nodes", str(nodes), "--pods", str(pods),
                   "--seed", str(args.seed)]  # fmt: skip
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            row = json.loads(out.strip().splitlines()[-1])
            rows.append(row)
            print(
                f"{nodes:>6} {pods:>7} {row['scheduled']:>7} {row['seconds']:>9.2f} "
                f"{row['ms_per_pod']:>8.3f} {row['pods_per_second']:>8.0f} "
                f"{row['peak_rss_mib']:>8.1f}",
                flush=True,
            )
    for pods in args.pods:
        line = sorted((r["nodes"], r["ms_per_pod"]) for r in rows if r["pods"] == pods)
        if len(line) >= 2:
            (n0, t0), (n1, t1) = line[0], line[-1]
            print(f"{pods} pods: {n0} -> {n1} nodes ({n1 / n0:.0f}x) costs {t1 / t0:.1f}x per pod")
    plot(rows, args.png)
    print(f"wrote {args.png}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
