"""The real-control-plane tier: etcd + kube-apiserver 1.20 from `shared/realkube/`, or with
`REALKUBE_PLANE=1.37` the 1.37 plane of `hack/kube137/` (kube-controller-manager and KWOK's
fake nodes as well).

One plane for the whole tier, with the chart's RBAC applied (topo-scheduler runs with the
restricted token, the chart's service account) and three 8-GPU nodes. When the plane cannot be
built or started the tier is skipped with the reason, and the run's summary says so in capitals.
Tests marked `plane("1.37")` run on that plane only.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scheduler.core.topology.builtin import builtin_topology
from scheduler.core.topology.schema import ANNOTATION_TOPOLOGY, topology_to_dict
from tests.realkube.api import Api, HTTPFailure, wait_for
from tests.realkube.plane import (
    KWOK_ANNOTATION,
    Plane,
    PlaneUnavailable,
    ensure,
    free_port,
    plane_version,
)

NAMESPACE = "topo-scheduler"  # the chart's release namespace (and the restricted token's SA)
CONFIG_MAP = "topo-scheduler-config"
GPU_NODES = ("gpu-0", "gpu-1", "gpu-2")

_unavailable: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "plane(*versions): run only on these real planes (REALKUBE_PLANE)"
    )


def _version() -> str:
    try:
        return plane_version()
    except PlaneUnavailable:
        return "?"  # the plane fixture says why


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    version = _version()
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.realkube)
            wanted = item.get_closest_marker("plane")
            if wanted and version not in wanted.args:
                item.add_marker(
                    pytest.mark.skip(
                        reason=f"needs the {'/'.join(wanted.args)} plane; this run is on "
                        f"REALKUBE_PLANE={version}"
                    )
                )


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _unavailable:
        terminalreporter.write_sep(
            "!", f"REAL CONTROL PLANE TIER ({_version()}) SKIPPED", red=True, bold=True
        )
        terminalreporter.write_line(_unavailable[0], red=True)


@pytest.fixture(scope="session")
def plane() -> Iterator[Plane]:
    if _unavailable:
        pytest.skip(_unavailable[0])
    try:
        ensure()
        started = Plane()
        started.start()
    except PlaneUnavailable as exc:
        _unavailable.append(
            f"real control plane {_version()} unavailable, tests/realkube not run: {exc}"
        )
        pytest.skip(_unavailable[0])
    try:
        yield started
    finally:
        started.stop(clean=True)


@pytest.fixture(scope="session")
def admin(plane: Plane) -> Api:
    return Api(plane)


def _node(name: str, kwok: bool = False) -> dict[str, Any]:
    topo = json.dumps(topology_to_dict(builtin_topology("dgx1-v100")))
    annotations = {ANNOTATION_TOPOLOGY: topo, **(KWOK_ANNOTATION if kwok else {})}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name},
            "annotations": annotations,
        },
        # kept on create; the 1.20 plane also gets it through the status subresource below
        **({"status": NODE_STATUS["status"]} if kwok else {}),
    }


NODE_STATUS = {
    "status": {
        "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"},
        "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
    }
}


def _schedulable(admin: Api, name: str) -> bool:
    """Ready and without taints (the node lifecycle controller removes the not-ready taint
    that admission puts on a new Node once KWOK reports it Ready)."""
    node = admin.get(f"/api/v1/nodes/{name}")
    ready = any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in node["status"].get("conditions") or []
    )
    return ready and not node["spec"].get("taints")


@pytest.fixture(scope="session")
def cluster(plane: Plane, admin: Api) -> Api:
    """The chart's RBAC, service account and ConfigMap, and the GPU nodes."""
    from tests.ship._support import objects

    admin.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    wanted = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    for obj in objects(namespace=NAMESPACE):
        if obj["kind"] in wanted or (
            obj["kind"] == "ConfigMap" and obj["metadata"]["name"] == CONFIG_MAP
        ):
            admin.apply(obj)
    for name in GPU_NODES:
        admin.apply(_node(name, kwok=plane.kwok))
        if not plane.kwok:
            admin.merge_patch(f"/api/v1/nodes/{name}/status", NODE_STATUS)
    if plane.kwok:
        for name in GPU_NODES:
            wait_for(lambda n=name: _schedulable(admin, n), 60, f"{name} Ready and untainted")
    return admin


def _has(api: Api, path: str) -> bool:
    try:
        api.get(path)
    except HTTPFailure as err:
        if err.status == 404:
            return False
        raise
    return True


@pytest.fixture
def namespace(plane: Plane, cluster: Api) -> Iterator[str]:
    """A namespace of the test's own; its pods are deleted afterwards (on 1.20 no controller
    runs; on 1.37 pods are admitted once the namespace's `default` service account exists)."""
    ns = f"t-{uuid.uuid4().hex[:8]}"
    cluster.post("/api/v1/namespaces", {"metadata": {"name": ns}})
    if plane.kwok:
        path = f"/api/v1/namespaces/{ns}/serviceaccounts/default"
        wait_for(lambda: _has(cluster, path), 30, f"service account {ns}/default")
    yield ns
    for pod in cluster.get(f"/api/v1/namespaces/{ns}/pods").get("items") or []:
        try:
            cluster.delete(f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}")
        except HTTPFailure as err:
            if err.status != 404:
                raise


@functools.cache
def _plain_http_flags() -> tuple[str, ...]:
    """`--insecure-plain-http` where `run` serves HTTPS by default (the tests read /metrics
    and /readyz over plain HTTP); nothing where plain HTTP is all it serves."""
    out = subprocess.run(
        [sys.executable, "-m", "scheduler.cli", "run", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    return ("--insecure-plain-http",) if "--insecure-plain-http" in out.stdout else ()


class SchedulerProcess:
    """`topo-scheduler run` with the chart's arguments and the restricted token."""

    def __init__(self, plane: Plane, log: Path, *extra: str, leader_elect: bool = True) -> None:
        self.port = free_port()
        election = (
            [
                "--leader-elect",
                f"--leader-elect-namespace={NAMESPACE}",
                "--leader-elect-name=topo-scheduler",
            ]
            if leader_elect
            else []
        )
        self.log_path = log
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "scheduler.cli",
                "run",
                "--kubeconfig",
                str(plane.kubeconfig("restricted")),
                f"--config-map={NAMESPACE}/{CONFIG_MAP}",
                *election,
                f"--bind-address=127.0.0.1:{self.port}",
                *_plain_http_flags(),
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=log.open("w"),
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def log(self) -> str:
        return self.log_path.read_text()

    def metric(self, metric_name: str, **labels: str) -> float:
        """One sample from /metrics (0 when absent)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        want = metric_name + (
            "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else ""
        )
        for line in text.splitlines():
            if line.startswith(want + " "):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 40) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return int(self.proc.returncode)


@pytest.fixture
def start_scheduler(plane: Plane, cluster: Api, tmp_path: Path) -> Iterator[Any]:
    procs: list[SchedulerProcess] = []

    def start(*extra: str, leader_elect: bool = True) -> SchedulerProcess:
        log = tmp_path / f"scheduler-{len(procs)}.log"
        proc = SchedulerProcess(plane, log, *extra, leader_elect=leader_elect)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.stop()
    # a replica killed mid-term leaves its Lease behind; the next test must not wait it out
    try:
        cluster.delete(f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/topo-scheduler")
    except HTTPFailure as err:
        if err.status != 404:
            raise


def pod(
    name: str, namespace: str, *, gpus: int = 0, scheduler: str = "topo-scheduler"
) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": "1", "memory": "1Gi"}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedulerName": scheduler,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.9",
                    "resources": {
                        "requests": requests,
                        "limits": {k: v for k, v in requests.items() if k == "nvidia.com/gpu"},
                    },
                }
            ],
        },
    }


__all__ = ["CONFIG_MAP", "GPU_NODES", "NAMESPACE", "pod", "wait_for"]
