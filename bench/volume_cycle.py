"""Volume plugin cost per scheduling cycle: one pod decided on N nodes with storage objects.

Three pods through the default profile: one without volumes, one with an unbound
WaitForFirstConsumer claim a CSI driver provisions, one with a claim matched against local
PVs (one per node, node affinity on the hostname). Prints ms per cycle for each.

    python bench/volume_cycle.py [--nodes 5000] [--repeat 5]
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
from scheduler.core.framework import CycleState
from scheduler.core.model import NodeInfo, PodInfo
from scheduler.core.storage import STORAGE_KINDS

HOSTNAME = "kubernetes.io/hostname"


def _objects(nodes: int) -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = [
        {
            "kind": "StorageClass",
            "metadata": {"name": "local"},
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "WaitForFirstConsumer",
        },
        {
            "kind": "StorageClass",
            "metadata": {"name": "csi"},
            "provisioner": "csi.example",
            "volumeBindingMode": "WaitForFirstConsumer",
        },
    ]
    for name, cls in (("static", "local"), ("dynamic", "csi")):
        objs.append(
            {
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {
                    "storageClassName": cls,
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            }
        )
    for i in range(nodes):
        term = {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": [f"n{i}"]}]}
        objs.append(
            {
                "kind": "PersistentVolume",
                "metadata": {"name": f"pv{i}"},
                "spec": {
                    "storageClassName": "local",
                    "capacity": {"storage": f"{1 + i % 7}Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "nodeAffinity": {"required": {"nodeSelectorTerms": [term]}},
                },
                "status": {"phase": "Available"},
            }
        )
    return objs


def _pod(claim: str | None) -> PodInfo:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}
    if claim:
        spec["volumes"] = [{"name": "v", "persistentVolumeClaim": {"claimName": claim}}]
    return PodInfo.from_object(
        {
            "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"schedulerName": "topo-scheduler", **spec},
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    cache = Cache()
    for i in range(args.nodes):
        cache.add_node(
            NodeInfo.from_object(
                {
                    "metadata": {"name": f"n{i}", "labels": {HOSTNAME: f"n{i}"}},
                    "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}},
                }
            )
        )
    for obj in _objects(args.nodes):
        cache.snapshot.storage.add(STORAGE_KINDS[obj["kind"]].from_object(obj))
    fw = frameworks_for(default_config())["topo-scheduler"]
    for label, claim in (
        ("no volumes", None),
        ("provisioned claim", "dynamic"),
        ("local PVs", "static"),
    ):
        pod = _pod(claim)
        fw.schedule(pod, cache.snapshot, CycleState())
        start = time.perf_counter()
        for _ in range(args.repeat):
            result = fw.schedule(pod, cache.snapshot, CycleState())
        ms = (time.perf_counter() - start) / args.repeat * 1000
        print(f"nodes={args.nodes} {label}: {ms:.1f} ms/cycle (node {result.node})")


if __name__ == "__main__":
    main()
