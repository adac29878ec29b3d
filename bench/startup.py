"""Start-up cost: API objects as the API server lists them -> a filled cache and queue.

Builds the objects of `real_apiserver.py`'s `spread` workload on 5,000 nodes as a kube-apiserver
1.37 returns them (defaulted fields, managedFields, the service-account token volume, KWOK
nodes with their status): 5,000 nodes, 5,000 pods bound to them and 2,000 pending ones, each
list a JSON body. Prints:

- pods parsed/s by `PodInfo.from_object` (a pending pod, a bound pod), each from a fresh copy;
- the time from `KubeScheduler.start()` until every informer is synced (the cache filled, the
  pending pods queued), against a client that answers lists from the prepared JSON (decoding
  included; `--page` pages of that many objects when the scheduler asks for them) and whose
  watches stay quiet: no network, no API server.

    .venv/bin/python bench/startup.py [--nodes 5000] [--bound 5000] [--pending 2000] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import statistics
import sys
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import structlog

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

Obj = dict[str, Any]
ZONE = "topology.kubernetes.io/zone"
PAUSE = "registry.k8s.io/pause:3.9"


def _managed(manager: str, fields: Obj) -> list[Obj]:
    return [
        {
            "manager": manager,
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2025-01-01T00:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": fields,
        }
    ]


def node(i: int) -> Obj:
    name = f"node-{i:05d}"
    resources = {"cpu": "32", "memory": "256Gi", "pods": "110"}
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": f"00000000-0000-0000-0000-{i:012d}",
            "resourceVersion": str(1000 + i),
            "creationTimestamp": "2025-01-01T00:00:00Z",
            "labels": {"kubernetes.io/hostname": name, ZONE: f"moon-{i % 3 + 1}"},
            "annotations": {
                "kwok.x-k8s.io/node": "fake",
                "node.alpha.kubernetes.io/ttl": "0",
            },
            "managedFields": _managed("bench", {"f:metadata": {"f:labels": {}}}),
        },
        "spec": {"podCIDR": f"10.{i // 256}.{i % 256}.0/24"},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "lastHeartbeatTime": "2025-01-01T00:00:00Z",
                    "lastTransitionTime": "2025-01-01T00:00:00Z",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                }
            ],
            "addresses": [{"type": "InternalIP", "address": f"10.0.{i // 256}.{i % 256}"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kernelVersion": "",
                "osImage": "",
                "containerRuntimeVersion": "",
                "kubeletVersion": "fake",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


def pod(i: int, namespace: str, node_name: str | None) -> Obj:
    """scheduler_perf's pod-with-topology-spreading.yaml as the API server returns it."""
    resources = {"cpu": "100m", "memory": "500Mi"}
    name = f"pod-{i:05d}"
    spec: Obj = {
        "volumes": [
            {
                "name": f"kube-api-access-{i % 100000:05d}",
                "projected": {
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {
                            "configMap": {
                                "name": "kube-root-ca.crt",
                                "items": [{"key": "ca.crt", "path": "ca.crt"}],
                            }
                        },
                        {
                            "downwardAPI": {
                                "items": [
                                    {
                                        "path": "namespace",
                                        "fieldRef": {
                                            "apiVersion": "v1",
                                            "fieldPath": "metadata.namespace",
                                        },
                                    }
                                ]
                            }
                        },
                    ],
                    "defaultMode": 420,
                },
            }
        ],
        "containers": [
            {
                "name": "pause",
                "image": PAUSE,
                "ports": [{"containerPort": 80, "protocol": "TCP"}],
                "resources": {"limits": dict(resources), "requests": dict(resources)},
                "volumeMounts": [
                    {
                        "name": f"kube-api-access-{i % 100000:05d}",
                        "readOnly": True,
                        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                    }
                ],
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
            }
        ],
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "serviceAccount": "default",
        "securityContext": {},
        "schedulerName": "topo-scheduler",
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
        ],
        "priority": 0,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "topologySpreadConstraints": [
            {
                "maxSkew": 5,
                "topologyKey": ZONE,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"color": "blue"}},
            }
        ],
    }
    status: Obj = {"phase": "Pending", "qosClass": "Guaranteed"}
    if node_name is not None:
        spec["nodeName"] = node_name
        status = {
            "phase": "Running",
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": "2025-01-01T00:00:00Z"}
                for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "hostIP": "10.0.0.1",
            "podIP": f"10.1.{i // 256 % 256}.{i % 256}",
            "startTime": "2025-01-01T00:00:00Z",
            "qosClass": "Guaranteed",
        }
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"10000000-0000-0000-0000-{i:012d}",
            "resourceVersion": str(100000 + i),
            "creationTimestamp": "2025-01-01T00:00:00Z",
            "labels": {"color": "blue"},
            "managedFields": _managed("bench", {"f:spec": {"f:containers": {}}}),
        },
        "spec": spec,
        "status": status,
    }


def list_body(kind: str, items: list[Obj]) -> bytes:
    return json.dumps(
        {
            "kind": f"{kind}List",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": "999999"},
            "items": items,
        }
    ).encode()


class ListClient:
    """Answers lists from prepared objects, encoded and decoded as on the wire; honours
    `limit` and `continue` when asked; watches stay open and quiet."""

    def __init__(self, objects: Mapping[str, tuple[str, list[Obj]]]) -> None:
        self.objects = objects
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.encoded: dict[tuple[str, int, int], bytes] = {}

    def prepare(self, limit: int) -> None:
        """Encode every page beforehand: the server's side is not what is measured."""
        for path, (kind, items) in self.objects.items():
            step = limit or max(1, len(items))
            for start in range(0, max(1, len(items)), step):
                page = items[start : start + step]
                body = json.loads(list_body(kind, page))
                if start + step < len(items):
                    body["metadata"]["continue"] = f"{start + step}"
                self.encoded[(path, start, limit)] = json.dumps(body).encode()

    async def get(
        self, path: str, query: Mapping[str, str] | None = None, priority: int = 0
    ) -> Obj:
        query = dict(query or {})
        self.requests.append((path, query))
        await asyncio.sleep(0)
        if path not in self.objects:
            return {"items": [], "metadata": {"resourceVersion": "999999"}}
        limit = int(query.get("limit") or 0)
        start = int(query.get("continue") or 0)
        data = self.encoded.get((path, start, limit))
        if data is None:
            data = self.encoded[(path, start, 0)] if start == 0 else b""
        return json.loads(data)  # type: ignore[no-any-return]

    async def watch(self, path: str, query: Mapping[str, str], timeout: int) -> AsyncIterator[Obj]:
        await asyncio.sleep(3600)
        if False:  # pragma: no cover - an async generator that yields nothing
            yield {}


def objects(nodes: int, bound: int, pending: int) -> dict[str, tuple[str, list[Obj]]]:
    node_items = [node(i) for i in range(nodes)]
    pods = [pod(i, "bench-init", f"node-{i % nodes:05d}") for i in range(bound)]
    pods += [pod(bound + i, "bench", None) for i in range(pending)]
    return {"/api/v1/nodes": ("Node", node_items), "/api/v1/pods": ("Pod", pods)}


def parse_rate(sample: Obj, count: int) -> float:
    from scheduler.core.model import PodInfo

    data = json.dumps(sample)
    copies = []
    for i in range(count):
        obj = json.loads(data)
        obj["metadata"]["name"] = f"p-{i}"
        copies.append(obj)
    gc.collect()
    start = time.perf_counter()
    for obj in copies:
        PodInfo.from_object(obj)
    return count / (time.perf_counter() - start)


async def fill(client: ListClient, pause_gc: bool = True) -> tuple[float, int, int]:
    from plugins import frameworks_for
    from scheduler.core.config import default_config
    from scheduler.kube.scheduler import KubeScheduler, collector_paused_until_synced

    config = default_config()
    sched = KubeScheduler(client, config, frameworks_for(config))  # type: ignore[arg-type]
    gc.collect()
    start = time.perf_counter()
    paused = asyncio.create_task(collector_paused_until_synced(sched)) if pause_gc else None
    await sched.start()
    await sched.wait_synced()
    if paused is not None:
        await paused
    elapsed = time.perf_counter() - start
    pending = sum(sched.queue.pending().values())
    cached = sched.cache.pod_count
    await sched.close()
    return elapsed, cached, pending


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--bound", type=int, default=5000)
    ap.add_argument("--pending", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--parse", type=int, default=5000, help="pods per parse-rate sample")
    ap.add_argument(
        "--keep-gc", action="store_true", help="leave the garbage collector on while syncing"
    )
    args = ap.parse_args()

    # the informers' notes about APIs this client does not serve
    logging.disable(logging.INFO)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    t0 = time.perf_counter()
    import scheduler.kube.cli  # noqa: F401  (what the process imports before it lists)

    print(f"imports (scheduler.kube.cli): {time.perf_counter() - t0:.2f} s")
    from scheduler.kube import informer

    page = getattr(informer, "LIST_PAGE_SIZE", 0)

    objs = objects(args.nodes, args.bound, args.pending)
    client = ListClient(objs)
    client.prepare(page)
    size = sum(len(v) for v in client.encoded.values())
    print(
        f"{args.nodes:,} nodes, {args.bound:,} bound + {args.pending:,} pending pods; "
        f"{size / 2**20:.1f} MiB of JSON; list pages of {page or 'everything'}"
    )
    pods = objs["/api/v1/pods"][1]
    for label, sample in (("pending", pods[-1]), ("bound", pods[0])):
        rates = [parse_rate(sample, args.parse) for _ in range(args.runs)]
        print(
            f"PodInfo.from_object, {label} pod: {statistics.median(rates):,.0f} pods/s "
            f"({min(rates):,.0f}-{max(rates):,.0f}), "
            f"{1e6 / statistics.median(rates):.1f} us/pod"
        )
    times = []
    for _ in range(args.runs):
        client.requests.clear()
        elapsed, cached, pending = asyncio.run(fill(client, pause_gc=not args.keep_gc))
        times.append(elapsed)
        pods_lists = sum(1 for p, _ in client.requests if p == "/api/v1/pods")
        print(
            f"  start -> synced: {elapsed:.2f} s ({cached:,} pods cached, {pending:,} queued, "
            f"{pods_lists} pod list requests)"
        )
    total = args.bound + args.pending + args.nodes
    print(
        f"filled cache: {statistics.median(times):.2f} s median ({min(times):.2f}-"
        f"{max(times):.2f}), {total / statistics.median(times):,.0f} objects/s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
