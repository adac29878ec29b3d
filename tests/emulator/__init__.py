"""A Kubernetes API-server emulator for tests: real HTTP on 127.0.0.1, kube's semantics.

`Emulator` starts the server and offers helpers that act on its store directly (create
nodes and pods, read state, count binding POSTs) plus fault injection. Clients under test
talk to `emulator.url` with the real `kubernetes` client.
"""

from __future__ import annotations

import copy
from typing import Any

from .server import EmulatorServer, Fault
from .store import K8S_PODGROUPS, RESOURCES, X_PODGROUPS, ApiError, Obj, Resource

__all__ = [
    "K8S_PODGROUPS",
    "X_PODGROUPS",
    "ApiError",
    "Emulator",
    "Fault",
    "make_node",
    "make_pod",
]

PODS, NODES, CONFIGMAPS, CORE_EVENTS, NAMESPACES, EVENTS, LEASES = RESOURCES[:7]
PVCS, PVS, STORAGE_CLASSES, CSI_NODES, CSI_DRIVERS, CSI_CAPACITIES, RESOURCE_CLAIMS = RESOURCES[
    7:14
]
PDBS = RESOURCES[14]
SERVICES, REPLICATION_CONTROLLERS, REPLICA_SETS, STATEFUL_SETS = RESOURCES[15:19]
VOLUME_ATTACHMENTS = RESOURCES[19]


def make_node(
    name: str,
    *,
    cpu: str = "64",
    memory: str = "512Gi",
    gpus: int = 8,
    pods: int = 110,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    gpu_resource: str = "nvidia.com/gpu",
) -> Obj:
    """A Ready Node manifest with the given capacity."""
    alloc = {"cpu": cpu, "memory": memory, "pods": str(pods)}
    if gpus:
        alloc[gpu_resource] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, **(labels or {})},
            "annotations": dict(annotations or {}),
        },
        "spec": {},
        "status": {
            "capacity": dict(alloc),
            "allocatable": dict(alloc),
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def make_pod(
    name: str,
    *,
    namespace: str = "default",
    scheduler: str = "topo-scheduler",
    cpu: str = "1",
    memory: str = "1Gi",
    gpus: int = 0,
    priority: int | None = None,
    node: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    gpu_resource: str = "nvidia.com/gpu",
) -> Obj:
    """A Pod manifest with one container requesting the given resources."""
    requests = {"cpu": cpu, "memory": memory}
    limits: dict[str, str] = {}
    if gpus:
        requests[gpu_resource] = str(gpus)
        limits[gpu_resource] = str(gpus)
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [
            {
                "name": "main",
                "image": "registry.example/train:1",
                "resources": {"requests": requests, **({"limits": limits} if limits else {})},
            }
        ],
    }
    if priority is not None:
        spec["priority"] = priority
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
    }


class Emulator:
    """A running emulator: URL, state helpers and fault knobs (thread-safe to call)."""

    def __init__(self, history: int = 100_000, bookmark_interval: float = 1.0) -> None:
        self.server = EmulatorServer(history=history)
        self.server.faults.bookmark_interval = bookmark_interval
        self.url = ""

    def start(self) -> Emulator:
        self.url = self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- state ----------------------------------------------------------------------------

    def create(self, res: Resource, obj: Obj, namespace: str | None = None) -> Obj:
        store = self.server.store
        return copy.deepcopy(self.server.call(lambda: store.create(res, namespace, obj)))

    def serve(self, *resources: Resource) -> None:
        """Serve optional resources from now on (a CRD installed, a feature gate on)."""
        store = self.server.store
        self.server.call(lambda: store.served.update(resources))

    def create_node(self, name: str, **kw: Any) -> Obj:
        return self.create(NODES, make_node(name, **kw))

    def create_pod(self, name: str, **kw: Any) -> Obj:
        obj = make_pod(name, **kw)
        return self.create(PODS, obj, obj["metadata"]["namespace"])

    def create_many(self, res: Resource, objs: list[Obj]) -> None:
        """Create many objects in one hop to the server loop (for benchmarks)."""
        store = self.server.store

        def run() -> None:
            for o in objs:
                store.create(res, o["metadata"].get("namespace"), o)

        self.server.call(run)

    def get(self, res: Resource, name: str, namespace: str = "") -> Obj:
        store = self.server.store
        return copy.deepcopy(self.server.call(lambda: store.get(res, namespace, name)))

    def pod(self, key: str) -> Obj:
        ns, name = key.split("/", 1)
        return self.get(PODS, name, ns)

    def list(self, res: Resource, namespace: str | None = None) -> list[Obj]:
        store = self.server.store
        return copy.deepcopy(self.server.call(lambda: store.list(res, namespace, [], [])))

    def pods(self) -> list[Obj]:
        return self.list(PODS)

    def delete(self, res: Resource, name: str, namespace: str = "") -> None:
        store = self.server.store
        self.server.call(lambda: store.delete(res, namespace, name))

    def patch(self, res: Resource, name: str, patch: Obj, namespace: str = "") -> Obj:
        store = self.server.store
        return copy.deepcopy(
            self.server.call(lambda: store.patch(res, namespace, name, patch, False))
        )

    def put_config_map(self, namespace: str, name: str, data: dict[str, str]) -> Obj:
        """Create the ConfigMap or replace its data."""
        store = self.server.store

        def run() -> Obj:
            try:
                store.get(CONFIGMAPS, namespace, name)
            except ApiError:
                return store.create(
                    CONFIGMAPS, namespace, {"metadata": {"name": name}, "data": data}
                )
            return store.patch(CONFIGMAPS, namespace, name, {"data": data}, False)

        return copy.deepcopy(self.server.call(run))

    def binding_posts(self, key: str) -> int:
        """How many POSTs pods/binding received for `ns/name` (successful or not)."""
        return self.server.call(lambda: self.server.store.binding_posts.get(key, 0))

    def bindings(self) -> dict[str, list[str]]:
        """Successful bindings: `ns/name` -> the nodes it was bound to, in order."""
        return copy.deepcopy(self.server.call(lambda: self.server.store.bindings))

    def events(self) -> list[Obj]:
        """events.k8s.io/v1 and core v1 Events, in creation order."""
        return self.list(EVENTS) + self.list(CORE_EVENTS)

    def request_count(self, method: str, path_contains: str = "") -> int:
        reqs = self.server.call(lambda: list(self.server.requests))
        return sum(1 for m, p in reqs if m == method and path_contains in p)

    # -- authentication and authorization -------------------------------------------------

    def add_token(
        self, token: str, username: str, groups: list[str] | None = None, uid: str = ""
    ) -> None:
        """A bearer token that TokenReview authenticates as `username`."""
        user: Obj = {"username": username, "uid": uid, "groups": groups or []}
        self.server.call(lambda: self.server.tokens.__setitem__(token, user))

    def grant_non_resource(self, username: str, verb: str, path: str) -> None:
        """SubjectAccessReview allows `username` to `verb` the non-resource URL `path`."""
        self.server.call(lambda: self.server.non_resource_grants.add((username, verb, path)))

    # -- faults ---------------------------------------------------------------------------

    def fail(
        self,
        status: int,
        count: int,
        *,
        method: str | None = None,
        path_contains: str | None = None,
        retry_after: float | None = None,
    ) -> Fault:
        """Answer the next `count` matching requests with `status` (Status body)."""
        rule = Fault(status, count, method, path_contains, retry_after)
        self.server.call(lambda: self.server.faults.rules.append(rule))
        return rule

    def set_latency(self, seconds: float) -> None:
        self.server.faults.latency = seconds

    def drop_watches(self) -> None:
        """Close every open watch stream now, mid-stream."""
        self.server.call(self.server.drop_watches_now)

    def drop_watches_after(self, events: int | None) -> None:
        self.server.faults.watch_drop_after = events

    def compact(self) -> None:
        """Forget the change history: watches from any earlier RV get `410 Gone`."""
        self.server.call(self.server.store.compact)

    def watch_count(self) -> int:
        return self.server.call(lambda: len(self.server.store.watchers))

    @property
    def resource_version(self) -> int:
        return self.server.call(lambda: self.server.store.rv)
