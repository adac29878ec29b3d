"""topo-scheduler against the real kube-scheduler, on the same real control plane.

For each workload, each client limit (default QPS 50/burst 100, kube's default, and
5,000/5,000) and each scheduler, alternating, from a clean plane started fresh
(`REALKUBE_PLANE=1.20`, the default: etcd + kube-apiserver 1.20 from `../shared/realkube/`,
Nodes whose status is written through the status subresource; `REALKUBE_PLANE=1.37`:
`hack/kube137/`, etcd 3.6, kube-apiserver, kube-controller-manager and kube-scheduler 1.37.2,
the Nodes KWOK's, kept Ready with Leases, their pods run): `--nodes` Nodes, the workload's
"init" pods (already bound, in namespace `bench-init`) and its measured pods (namespace
`bench`) are created while no scheduler runs, then the scheduler is launched and timed until
every measured pod is bound (seen on a watch from this process) and until every measured pod's
`Scheduled` Event exists. kube-scheduler runs as `start.sh --scheduler-only` starts it (its
kubeconfig); topo-scheduler as the chart runs it, with in-cluster credentials (see
`launch_topo`).

Workloads (`--workloads`), shaped after kube's scheduler_perf
(test/integration/scheduler_perf/config/performance-config.yaml and its templates, sizes
scaled to `--nodes`; scheduler_perf's init pods are scheduled by the scheduler under test before
the measurement, here they are created bound, the same for both schedulers):

- `plain`: `--pods` pause pods (100m CPU, 64Mi) on plain nodes (SchedulingBasic).
- `anti-affinity`: SchedulingPodAntiAffinity. Every pod labelled `color: green` with a
  required anti-affinity to `color: green` on `kubernetes.io/hostname` over both namespaces;
  nodes/5 init pods, one a node, then min(1,000, 4 x nodes/5) measured pods (500 nodes:
  100 + 400, 5,000 nodes: 1,000 + 1,000, as scheduler_perf's).
- `spread`: SchedulingPodTopologySpreading (TopologySpreading). Nodes labelled
  `topology.kubernetes.io/zone` moon-1..3 round robin; `nodes` default pods bound round robin,
  then min(2,000, 2 x nodes) pods `color: blue` with `maxSkew: 5` over the zone,
  `DoNotSchedule` (500 nodes: 1,000 + 1,000, 5,000 nodes: 5,000 + 2,000).
- `gang`: `--gangs` pod groups of `--gang-workers` 8-GPU workers (annotations
  `topo-scheduler.io/pod-group`, `min-member`, `topology-preferred` leaf) on 8-GPU nodes
  with the GPU topology annotation and leaf (4 nodes) / spine (8 leaves) labels.
  topo-scheduler only: kube-scheduler has no gangs. The figure is the time from launch until
  every member of every group is bound (and per group, the first to last member).

Printed per run: wall time from launch to the last binding, pods/s over the binding span
(first to last binding), time until all Scheduled Events were written, client-side request
timeouts and dropped Events (Scheduled Events missing 120 s after the last binding, and what
the scheduler says it dropped: topo-scheduler's metrics and log, kube-scheduler's log), the
CPU seconds of every plane process, then the medians, ranges and topo/kube ratios per
workload and limit. The 1.20 plane needs root (ensure.sh installs etcd with apt), the 1.37
plane Go (or its cached build); 2 free CPU cores for figures worth comparing.

    [REALKUBE_PLANE=1.37] .venv/bin/python bench/real_apiserver.py [--nodes 100]
        [--pods 1000] [--workloads plain,anti-affinity,spread,gang]
        [--limits 50:100,5000:5000] [--repeat 1] [--only kube|topo]
        [--gangs N] [--gang-workers 64] [--gang-gpus 8] [--profile DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.core.topology import builtin_topology, format_topology
from scheduler.core.topology.schema import ANNOTATION_TOPOLOGY
from scheduler.kube.client import ApiError, ClientOptions, KubeClient
from tests.realkube.plane import KWOK_ANNOTATION, Plane, PlaneUnavailable, ensure, free_port

NAMESPACE = "bench"  # the measured pods
INIT_NAMESPACE = "bench-init"  # pods bound before the scheduler starts
PAUSE = "registry.k8s.io/pause:3.9"
WORKLOADS = ("plain", "anti-affinity", "spread", "gang")
ZONE = "topology.kubernetes.io/zone"
ZONES = ("moon-1", "moon-2", "moon-3")  # scheduler_perf's TopologySpreading
LEAF = "network.topology.nvidia.com/leaf"
SPINE = "network.topology.nvidia.com/spine"
NODES_PER_LEAF = 16
LEAVES_PER_SPINE = 8


@dataclass(frozen=True)
class Workload:
    """What one run creates: `init` pods bound before the scheduler starts, `measure` pods
    it schedules (for `gang`: `gangs` groups of `workers` pods of `gpus` GPUs each)."""

    name: str
    nodes: int
    init: int
    measure: int
    gangs: int = 0
    workers: int = 0
    gpus: int = 8

    @staticmethod
    def sized(
        name: str, nodes: int, pods: int, gangs: int = 0, workers: int = 64, gpus: int = 8
    ) -> Workload:
        """scheduler_perf's sizes, scaled to `nodes` (see the module docstring)."""
        if name == "anti-affinity":
            return Workload(name, nodes, nodes // 5, min(1000, nodes * 4 // 5))
        if name == "spread":
            return Workload(name, nodes, nodes, min(2000, 2 * nodes))
        if name == "gang":
            gangs = gangs or max(1, min(8, nodes // workers))
            return Workload(name, nodes, 0, gangs * workers, gangs, workers, gpus)
        return Workload(name, nodes, 0, pods)


@dataclass
class Run:
    scheduler: str
    qps: float
    burst: int
    workload: str = "plain"
    nodes: int = 0
    wall: float = 0.0  # launch -> last binding
    span: float = 0.0  # first -> last binding
    events_at: float | None = None  # launch -> last Scheduled Event written
    bound: int = 0
    events: int = 0
    timeouts: int = 0
    dropped: int = 0  # what the scheduler counted or logged as not written
    group_spans: list[float] = field(default_factory=list)  # gang: first -> last member
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds, launch -> last binding
    requests: dict[str, int] = field(default_factory=dict)  # the API server's, launch -> end

    @property
    def rate(self) -> float:
        return (self.bound - 1) / self.span if self.span > 0 else float("nan")

    @property
    def missing_events(self) -> int:
        """Pods bound without a Scheduled Event (Events written vs pods scheduled)."""
        return max(0, self.bound - self.events)


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (and its reaped children), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    ticks = sum(int(x) for x in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def plane_pids(plane: Plane) -> dict[str, int]:
    pids = {}
    for name in ("kube-apiserver", "etcd", "kube-scheduler", "kube-controller-manager", "kwok"):
        path = plane.state_dir / f"{name}.pid"
        if path.exists():
            pids[name] = int(path.read_text())
    return pids


REQUEST_SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")


async def request_counts(admin: KubeClient) -> dict[str, int]:
    """kube-apiserver's own request counter, by verb, resource and subresource."""
    data = await admin.get_bytes("/metrics")
    counts: dict[str, int] = {}
    for line in data.decode().splitlines():
        match = REQUEST_SAMPLE.match(line)
        if not match:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group("labels")))
        key = f"{labels.get('verb')} {labels.get('resource')}"
        if labels.get("subresource"):
            key += f"/{labels['subresource']}"
        counts[key] = counts.get(key, 0) + int(float(match.group("value")))
    return counts


def node(name: str, kwok: bool = False, workload: str = "plain", index: int = 0) -> dict[str, Any]:
    """A Node; on the 1.37 plane KWOK's (annotated, its status kept on create), which KWOK
    keeps Ready with a Lease, as a kubelet would. `spread`: a zone label; `gang`: 8 GPUs,
    the GPU topology annotation and leaf/spine labels."""
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
    }
    labels = obj["metadata"]["labels"]
    annotations: dict[str, str] = dict(KWOK_ANNOTATION) if kwok else {}
    if workload == "spread":
        labels[ZONE] = ZONES[index % len(ZONES)]
    if workload == "gang":
        leaf = index // NODES_PER_LEAF
        labels[LEAF] = f"leaf-{leaf:03d}"
        labels[SPINE] = f"spine-{leaf // LEAVES_PER_SPINE:02d}"
        annotations[ANNOTATION_TOPOLOGY] = gpu_topology()
    if annotations:
        obj["metadata"]["annotations"] = annotations
    if kwok:
        obj["status"] = node_status(workload)["status"]
    return obj


@functools.cache
def gpu_topology() -> str:
    return format_topology(builtin_topology("dgx1-v100"))


def node_status(workload: str) -> dict[str, Any]:
    if workload != "gang":
        return NODE_STATUS
    status = {k: dict(v) for k, v in NODE_STATUS["status"].items() if isinstance(v, dict)}
    for key in ("capacity", "allocatable"):
        status[key]["nvidia.com/gpu"] = "8"
    return {"status": {**NODE_STATUS["status"], **status}}


NODE_STATUS = {
    "status": {
        "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"},
        "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
    }
}


def pod(name: str, scheduler: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": "pause"}},
        "spec": {
            "schedulerName": scheduler,
            "containers": [
                {
                    "name": "pause",
                    "image": PAUSE,
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                }
            ],
        },
    }


def perf_pod(
    name: str, namespace: str, scheduler: str, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """scheduler_perf's pod-default.yaml: pause, 100m CPU and 500Mi requested and limited."""
    resources = {"cpu": "100m", "memory": "500Mi"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": {
            "schedulerName": scheduler,
            "containers": [
                {
                    "name": "pause",
                    "image": PAUSE,
                    "ports": [{"containerPort": 80}],
                    "resources": {"requests": resources, "limits": dict(resources)},
                }
            ],
        },
    }


def anti_affinity_pod(name: str, namespace: str, scheduler: str) -> dict[str, Any]:
    """scheduler_perf's pod-with-pod-anti-affinity.yaml (namespaces: the init and the
    measured one)."""
    obj = perf_pod(name, namespace, scheduler, {"color": "green"})
    obj["spec"]["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"color": "green"}},
                    "topologyKey": "kubernetes.io/hostname",
                    "namespaces": [NAMESPACE, INIT_NAMESPACE],
                }
            ]
        }
    }
    return obj


def spread_pod(name: str, scheduler: str) -> dict[str, Any]:
    """scheduler_perf's pod-with-topology-spreading.yaml."""
    obj = perf_pod(name, NAMESPACE, scheduler, {"color": "blue"})
    obj["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 5,
            "topologyKey": ZONE,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"color": "blue"}},
        }
    ]
    return obj


def gang_pod(name: str, scheduler: str, group: str, workers: int, gpus: int) -> dict[str, Any]:
    """A worker of a distributed job: `gpus` GPUs, a pod group of `workers` (annotations),
    preferring one leaf switch."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {"job": group},
            "annotations": {
                "topo-scheduler.io/pod-group": group,
                "topo-scheduler.io/min-member": str(workers),
                "topo-scheduler.io/topology-preferred": LEAF,
            },
        },
        "spec": {
            "schedulerName": scheduler,
            "containers": [
                {
                    "name": "worker",
                    "image": PAUSE,
                    "resources": {
                        "requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": str(gpus)},
                        "limits": {"nvidia.com/gpu": str(gpus)},
                    },
                }
            ],
        },
    }


def workload_pods(w: Workload, scheduler: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(init pods, bound to their nodes; measured pods)."""
    init: list[dict[str, Any]] = []
    measured: list[dict[str, Any]] = []
    if w.name == "anti-affinity":
        for i in range(w.init):
            p = anti_affinity_pod(f"init-{i:05d}", INIT_NAMESPACE, scheduler)
            p["spec"]["nodeName"] = f"node-{i:04d}"
            init.append(p)
        measured = [
            anti_affinity_pod(f"anti-{i:05d}", NAMESPACE, scheduler) for i in range(w.measure)
        ]
    elif w.name == "spread":
        for i in range(w.init):
            p = perf_pod(f"init-{i:05d}", INIT_NAMESPACE, scheduler)
            p["spec"]["nodeName"] = f"node-{i % w.nodes:04d}"
            init.append(p)
        measured = [spread_pod(f"spread-{i:05d}", scheduler) for i in range(w.measure)]
    elif w.name == "gang":
        measured = [
            gang_pod(f"gang-{g:02d}-w{k:03d}", scheduler, f"gang-{g:02d}", w.workers, w.gpus)
            for g in range(w.gangs)
            for k in range(w.workers)
        ]
    else:
        measured = [pod(f"pause-{i:05d}", scheduler) for i in range(w.measure)]
    return init, measured


async def _gather_limited(coros: list[Any], limit: int = 32) -> None:
    sem = asyncio.Semaphore(limit)

    async def one(c: Any) -> None:
        async with sem:
            await c

    await asyncio.gather(*(one(c) for c in coros))


async def _until(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not within {timeout:.0f} s")
        await asyncio.sleep(0.5)


async def populate(admin: KubeClient, w: Workload, scheduler: str, kwok: bool = False) -> None:
    nodes = w.nodes
    init, measured = workload_pods(w, scheduler)
    namespaces = [NAMESPACE, INIT_NAMESPACE] if init else [NAMESPACE]
    for ns in namespaces:
        await admin.post("/api/v1/namespaces", {"metadata": {"name": ns}})
    names = [f"node-{i:04d}" for i in range(nodes)]
    await _gather_limited(
        [admin.post("/api/v1/nodes", node(n, kwok, w.name, i)) for i, n in enumerate(names)]
    )
    if kwok:
        # Ready (KWOK) and untainted: the node lifecycle controller removes the not-ready
        # taint put on at creation once it sees them Ready; pods wait for the namespace's
        # default service account (the ServiceAccount admission plugin)

        async def nodes_ready() -> bool:
            items = (await admin.get("/api/v1/nodes")).get("items") or []
            ready = sum(
                1
                for x in items
                if not x["spec"].get("taints")
                and any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in x["status"].get("conditions") or []
                )
            )
            return ready >= nodes

        async def service_accounts() -> bool:
            try:
                for ns in namespaces:
                    await admin.get(f"/api/v1/namespaces/{ns}/serviceaccounts/default")
            except ApiError:
                return False
            return True

        await _until(nodes_ready, max(300, nodes / 5), f"{nodes} KWOK nodes Ready and untainted")
        await _until(service_accounts, 60, "the bench namespaces' default service accounts")
    else:
        await _gather_limited(
            [admin.patch(f"/api/v1/nodes/{n}/status", node_status(w.name)) for n in names]
        )
    if init:
        await _gather_limited(
            [admin.post(f"/api/v1/namespaces/{INIT_NAMESPACE}/pods", p) for p in init]
        )
        if kwok:
            # KWOK runs them: let it finish before the scheduler starts (its status writes
            # would otherwise load the API server during the measurement)

            async def init_running() -> bool:
                items = (await admin.get(f"/api/v1/namespaces/{INIT_NAMESPACE}/pods")).get(
                    "items"
                ) or []
                running = sum(1 for x in items if (x.get("status") or {}).get("phase") == "Running")
                return running >= len(init)

            await _until(init_running, max(120, len(init) / 10), f"{len(init)} init pods Running")
    await _gather_limited([admin.post(f"/api/v1/namespaces/{NAMESPACE}/pods", p) for p in measured])


async def watch_bindings(
    admin: KubeClient, rv: str, total: int, bound_at: dict[str, float]
) -> None:
    """Record when each pod is first seen with spec.nodeName, until all are."""
    path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    while len(bound_at) < total:
        async for event in admin.watch(path, {"resourceVersion": rv}, 300):
            obj = event.get("object") or {}
            md = obj.get("metadata") or {}
            rv = str(md.get("resourceVersion") or rv)
            if (obj.get("spec") or {}).get("nodeName"):
                bound_at.setdefault(str(md.get("name")), time.monotonic())
            if len(bound_at) >= total:
                return


async def count_scheduled_events(admin: KubeClient) -> int:
    body = await admin.get(f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events")
    return sum(1 for e in body.get("items") or [] if e.get("reason") == "Scheduled")


SERVICE_ACCOUNT_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


@functools.cache
def can_mount_service_account() -> bool:
    """Whether this process may make a private mount namespace (root, `unshare`)."""
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "--mount", "--", "sh", "-c", "mount -t tmpfs tmpfs /run"],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


TOPO_CONFIG = f"""apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: topo-scheduler
  pluginConfig:
  - name: GPUTopology
    args:
      topologyLevels: [{SPINE}, {LEAF}]
"""


def launch_topo(
    plane: Plane,
    qps: float,
    burst: int,
    port: int,
    log: Path,
    config: Path | None = None,
    profile: Path | None = None,
) -> subprocess.Popen[Any]:
    """`topo-scheduler run` as the chart runs it: in-cluster credentials (the admin token and
    the plane's CA where the kubelet mounts a service account, in a private mount namespace,
    plus KUBERNETES_SERVICE_HOST/PORT). Without the rights for that, `--kubeconfig`, which
    also loads the official client's kubeconfig reader (about 0.3 s more start-up)."""
    flags = [
        "--bind-address",
        f"127.0.0.1:{port}",
        "--insecure-plain-http",  # the bench scrapes /metrics locally, without a token
        "--kube-api-qps",
        str(qps),
        "--kube-api-burst",
        str(burst),
        *(["--config", str(config)] if config is not None else []),
    ]
    run = [sys.executable, "-m", "scheduler.cli", "run"]
    if profile is not None:  # cProfile's statistics, written when it exits (SIGTERM)
        run[1:1] = ["-m", "cProfile", "-o", str(profile)]
    if not can_mount_service_account():
        cmd = [*run, "--kubeconfig", str(plane.kubeconfig("admin")), *flags]
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log.open("w"))
    account = plane.service_account_dir("admin")
    script = (
        f"mount -t tmpfs tmpfs /run && mkdir -p {SERVICE_ACCOUNT_MOUNT} && "
        f'mount --bind "$0" {SERVICE_ACCOUNT_MOUNT} && exec "$@"'
    )
    env = {
        **os.environ,
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(plane.ports["APISERVER_PORT"]),
    }
    return subprocess.Popen(
        ["unshare", "--mount", "--", "sh", "-c", script, str(account), *run, *flags],
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
        env=env,
    )


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            with contextlib.suppress(ValueError):
                out[name] = float(value)
    return out


def _sum(metrics: dict[str, float], prefix: str) -> int:
    return int(sum(v for k, v in metrics.items() if k.startswith(prefix)))


TIMEOUT_LINE = re.compile(r"timed out|Timeout:|context deadline exceeded|Client.Timeout")
KUBE_EVENT_LOST = re.compile(r"Unable to write event|Server rejected event|dropped event")


async def wait_events(admin: KubeClient, run: Run, t0: float, quiet: float = 15.0) -> None:
    """Count the measured pods' Scheduled Events until all are written, or until the count
    has not moved for `quiet` seconds (120 s at most)."""
    deadline = time.monotonic() + 120
    last, moved = -1, time.monotonic()
    while time.monotonic() < deadline:
        run.events = await count_scheduled_events(admin)
        if run.events >= run.bound:
            run.events_at = time.monotonic() - t0
            return
        if run.events != last:
            last, moved = run.events, time.monotonic()
        elif time.monotonic() - moved > quiet:
            return
        await asyncio.sleep(0.5)


async def until_bound(
    watcher: asyncio.Task[None], proc: subprocess.Popen[Any] | None, log: Path, timeout: float
) -> None:
    """Wait for every measured pod to be bound; fail at once when topo-scheduler exits."""
    deadline = time.monotonic() + timeout
    while not watcher.done():
        if proc is not None and proc.poll() is not None:
            watcher.cancel()
            tail = "\n".join(log.read_text().splitlines()[-15:])
            raise RuntimeError(
                f"topo-scheduler exited ({proc.returncode}) before binding all:\n{tail}"
            )
        if time.monotonic() > deadline:
            watcher.cancel()
            raise TimeoutError(f"not every pod bound within {timeout:.0f} s")
        await asyncio.wait([watcher], timeout=0.5)
    watcher.result()


async def one_run(
    scheduler: str, qps: float, burst: int, w: Workload, profile: Path | None = None
) -> Run:
    plane = Plane(scheduler_qps=qps, scheduler_burst=burst)
    run = Run(scheduler, qps, burst, w.name, w.nodes)
    proc: subprocess.Popen[Any] | None = None
    try:
        plane.start()
        admin = await KubeClient.connect(
            str(plane.kubeconfig("admin")), ClientOptions(qps=1e6, burst=1_000_000, timeout=60)
        )
        try:
            name = "default-scheduler" if scheduler == "kube" else "topo-scheduler"
            await populate(admin, w, name, plane.kwok)
            pods = w.measure
            listed = await admin.get(f"/api/v1/namespaces/{NAMESPACE}/pods", {"limit": "1"})
            rv = str(listed["metadata"]["resourceVersion"])
            bound_at: dict[str, float] = {}
            watcher = asyncio.create_task(watch_bindings(admin, rv, pods, bound_at))
            port = free_port()
            log = plane.state_dir / "logs" / "topo-scheduler.log"
            config = None
            if w.name == "gang":
                config = plane.state_dir / "topo-scheduler.yaml"
                config.write_text(TOPO_CONFIG)
            requests_before = await request_counts(admin)
            before = {name: cpu_seconds(pid) for name, pid in plane_pids(plane).items()}
            t0 = time.monotonic()
            if scheduler == "kube":
                await asyncio.to_thread(plane.start_scheduler)
            else:
                proc = launch_topo(plane, qps, burst, port, log, config, profile)
            await until_bound(watcher, proc, log, 900)
            pids = plane_pids(plane)
            if proc is not None:
                pids["topo-scheduler"] = proc.pid
            run.cpu = {n: cpu_seconds(pid) - before.get(n, 0.0) for n, pid in pids.items()}
            times = sorted(bound_at.values())
            run.bound = len(times)
            run.wall = times[-1] - t0
            run.span = times[-1] - times[0]
            if w.name == "gang":
                groups: dict[str, list[float]] = {}
                for pod_name, at in bound_at.items():
                    groups.setdefault(pod_name.rpartition("-")[0], []).append(at)
                run.group_spans = sorted(max(v) - min(v) for v in groups.values())
            await wait_events(admin, run, t0)
            after = await request_counts(admin)
            run.requests = {
                k: v - requests_before.get(k, 0)
                for k, v in after.items()
                if v - requests_before.get(k, 0) > 0
            }
            if scheduler == "topo" and proc is not None:
                metrics = scrape(port)
                run.timeouts = _sum(metrics, "topo_scheduler_client_request_timeouts_total")
                run.dropped = _sum(metrics, "topo_scheduler_events_dropped_total")
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=60)
                text = log.read_text()
                run.timeouts = max(run.timeouts, len(TIMEOUT_LINE.findall(text)))
            else:
                text = plane.log("kube-scheduler").read_text()
                run.timeouts = len(TIMEOUT_LINE.findall(text))
                run.dropped = len(KUBE_EVENT_LOST.findall(text))
        finally:
            await admin.close()
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        if scheduler == "kube" and plane.running:
            with contextlib.suppress(PlaneUnavailable):
                plane.stop_scheduler()
        plane.stop(clean=True)
    return run


def report(run: Run, show_requests: bool = False) -> None:
    events = f"{run.events_at:6.1f} s" if run.events_at is not None else "   n/a  "
    print(
        f"{run.workload:>13} {run.nodes:5d} nodes  {run.scheduler:>4}-scheduler  "
        f"QPS {run.qps:>6g}/{run.burst:<6d} bound {run.bound:5d} in {run.wall:6.1f} s "
        f"(first at {run.wall - run.span:4.1f} s) "
        f"({run.rate:6.1f} pods/s over {run.span:5.1f} s)  Scheduled events {run.events:5d} "
        f"(all by {events})  client timeouts {run.timeouts}  events missing "
        f"{run.missing_events} (scheduler-counted drops {run.dropped})",
        flush=True,
    )
    if run.group_spans:
        spans = run.group_spans
        print(
            f"       {len(spans)} groups: all members of all groups bound {run.wall:.1f} s after "
            f"launch; one group's first to last member {min(spans):.2f}-{max(spans):.2f} s "
            f"(median {statistics.median(spans):.2f} s)",
            flush=True,
        )
    if show_requests:
        print(f"       API requests: {dict(sorted(run.requests.items()))}", flush=True)
    print(
        "       CPU s to the last binding: "
        + ", ".join(f"{name} {secs:.2f}" for name, secs in sorted(run.cpu.items())),
        flush=True,
    )


def _spread(values: list[float], fmt: str = ".1f") -> str:
    med = statistics.median(values)
    if len(values) == 1:
        return format(med, fmt)
    return f"{med:{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def summary(
    results: dict[tuple[str, str, float], list[Run]],
    limits: list[tuple[float, int]],
    workloads: list[str],
) -> None:
    """Medians (ranges) per workload and limit, and topo/kube."""
    print()
    for wl in workloads:
        for qps, burst in limits:
            kube = results.get((wl, "kube", qps)) or []
            topo = results.get((wl, "topo", qps)) or []
            parts = []
            for label, runs in (("kube-scheduler", kube), ("topo-scheduler", topo)):
                if runs:
                    parts.append(
                        f"{label} {_spread([r.rate for r in runs])} pods/s, wall "
                        f"{_spread([r.wall for r in runs])} s (first binding "
                        f"{_spread([r.wall - r.span for r in runs])} s), timeouts "
                        f"{sum(r.timeouts for r in runs)}, events missing "
                        f"{sum(r.missing_events for r in runs)} [{len(runs)} runs]"
                    )
            line = f"{wl} QPS {qps:g}/{burst}: " + "; ".join(parts)
            if kube and topo:
                ratio = statistics.median(r.rate for r in topo) / statistics.median(
                    r.rate for r in kube
                )
                wall = statistics.median(r.wall for r in topo) / statistics.median(
                    r.wall for r in kube
                )
                pairs = [t.rate / k.rate for k, t in zip(kube, topo, strict=False)]
                line += (
                    f"; topo/kube pods/s {ratio:.2f} (pairs {min(pairs):.2f}-{max(pairs):.2f}), "
                    f"wall {wall:.2f}"
                )
            print(line, flush=True)


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--pods", type=int, default=1000, help="measured pods of `plain`")
    ap.add_argument(
        "--workloads", default="plain", help=f"comma-separated, of {', '.join(WORKLOADS)}"
    )
    ap.add_argument("--limits", default="50:100,5000:5000", help="QPS:BURST[,QPS:BURST...]")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--only", choices=("kube", "topo"))
    ap.add_argument(
        "--gangs", type=int, default=0, help="gang: groups (default nodes/64, 8 at most)"
    )
    ap.add_argument("--gang-workers", type=int, default=64)
    ap.add_argument("--gang-gpus", type=int, default=8, help="gang: GPUs per worker")
    ap.add_argument(
        "--requests", action="store_true", help="also print the API server's request counts"
    )
    ap.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="run topo-scheduler under cProfile, one .prof per run in DIR",
    )
    args = ap.parse_args()
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    workloads = [x.strip() for x in args.workloads.split(",") if x.strip()]
    unknown = sorted(set(workloads) - set(WORKLOADS))
    if unknown:
        ap.error(f"unknown workloads {unknown}: {', '.join(WORKLOADS)}")
    try:
        await asyncio.to_thread(ensure)
    except PlaneUnavailable as exc:
        print(f"error: real control plane unavailable: {exc}", file=sys.stderr)
        return 1
    limits = [(float(q), int(b)) for q, _, b in (x.partition(":") for x in args.limits.split(","))]
    results: dict[tuple[str, str, float], list[Run]] = {}
    for wl in workloads:
        w = Workload.sized(wl, args.nodes, args.pods, args.gangs, args.gang_workers, args.gang_gpus)
        # kube-scheduler has no gangs
        schedulers = ["topo"] if wl == "gang" else ([args.only] if args.only else ["kube", "topo"])
        print(
            f"# {wl}: {w.nodes} nodes, {w.init} init pods, {w.measure} measured pods"
            + (f" ({w.gangs} groups of {w.workers} x {w.gpus} GPUs)" if w.gangs else ""),
            flush=True,
        )
        for qps, burst in limits:
            for i in range(args.repeat):
                # alternate which scheduler goes first, so drift in the machine's load
                # does not favour one
                for sched in schedulers if i % 2 == 0 else schedulers[::-1]:
                    profile = None
                    if args.profile and sched == "topo":
                        profile = args.profile / f"topo-{wl}-{w.nodes}-qps{qps:g}-{i}.prof"
                    run = await one_run(sched, qps, burst, w, profile)
                    report(run, args.requests)
                    results.setdefault((wl, sched, qps), []).append(run)
    summary(results, limits, workloads)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
