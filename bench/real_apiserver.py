"""topo-scheduler against the real kube-scheduler, on the same real control plane.

For each client limit (default QPS 50/burst 100, kube's default, and 5,000/5,000) and each
scheduler, alternating, from a clean plane started fresh (`REALKUBE_PLANE=1.20`, the default:
etcd + kube-apiserver 1.20 from `../shared/realkube/`, Nodes whose status is written through
the status subresource; `REALKUBE_PLANE=1.37`: `hack/kube137/`, etcd 3.6, kube-apiserver,
kube-controller-manager and kube-scheduler 1.37.2, the Nodes KWOK's, kept Ready with Leases,
their pods run): `--nodes` Nodes and `--pods` pause pods are created while no scheduler runs,
then the scheduler is launched and timed until every pod is bound (seen on a watch from this
process) and until every pod's `Scheduled` Event exists. kube-scheduler runs as
`start.sh --scheduler-only` starts it (its kubeconfig); topo-scheduler as the chart runs it,
with in-cluster credentials (see `launch_topo`).

Printed per run: wall time from launch to the last binding, pods/s over the binding span
(first to last binding), time until all Scheduled Events were written, client-side request
timeouts and dropped Events (topo-scheduler: its metrics and log; kube-scheduler: its log),
the CPU seconds of every plane process, then the topo/kube ratio per limit. The 1.20 plane
needs root (ensure.sh installs etcd with apt), the 1.37 plane Go (or its cached build);
2 free CPU cores for figures worth comparing.

    [REALKUBE_PLANE=1.37] .venv/bin/python bench/real_apiserver.py [--nodes 100]
        [--pods 1000] [--limits 50:100,5000:5000] [--repeat 1] [--only kube|topo]
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

from scheduler.kube.client import ApiError, ClientOptions, KubeClient
from tests.realkube.plane import KWOK_ANNOTATION, Plane, PlaneUnavailable, ensure, free_port

NAMESPACE = "bench"
PAUSE = "registry.k8s.io/pause:3.9"


@dataclass
class Run:
    scheduler: str
    qps: float
    burst: int
    wall: float = 0.0  # launch -> last binding
    span: float = 0.0  # first -> last binding
    events_at: float | None = None  # launch -> last Scheduled Event written
    bound: int = 0
    events: int = 0
    timeouts: int = 0
    dropped: int = 0
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds, launch -> last binding
    requests: dict[str, int] = field(default_factory=dict)  # the API server's, launch -> end

    @property
    def rate(self) -> float:
        return (self.bound - 1) / self.span if self.span > 0 else float("nan")


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


def node(name: str, kwok: bool = False) -> dict[str, Any]:
    """A Node; on the 1.37 plane KWOK's (annotated, its status kept on create), which KWOK
    keeps Ready with a Lease, as a kubelet would."""
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
    }
    if kwok:
        obj["metadata"]["annotations"] = dict(KWOK_ANNOTATION)
        obj["status"] = NODE_STATUS["status"]
    return obj


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


async def populate(
    admin: KubeClient, nodes: int, pods: int, scheduler: str, kwok: bool = False
) -> None:
    await admin.post("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    names = [f"node-{i:04d}" for i in range(nodes)]
    await _gather_limited([admin.post("/api/v1/nodes", node(n, kwok)) for n in names])
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

        async def service_account() -> bool:
            try:
                await admin.get(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default")
            except ApiError:
                return False
            return True

        await _until(nodes_ready, max(300, nodes / 5), f"{nodes} KWOK nodes Ready and untainted")
        await _until(service_account, 60, "the bench namespace's default service account")
    else:
        await _gather_limited(
            [admin.patch(f"/api/v1/nodes/{n}/status", NODE_STATUS) for n in names]
        )
    await _gather_limited(
        [
            admin.post(f"/api/v1/namespaces/{NAMESPACE}/pods", pod(f"pause-{i:05d}", scheduler))
            for i in range(pods)
        ]
    )


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


def launch_topo(
    plane: Plane, qps: float, burst: int, port: int, log: Path
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
    ]
    run = [sys.executable, "-m", "scheduler.cli", "run"]
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


async def one_run(scheduler: str, qps: float, burst: int, nodes: int, pods: int) -> Run:
    plane = Plane(scheduler_qps=qps, scheduler_burst=burst)
    run = Run(scheduler, qps, burst)
    proc: subprocess.Popen[Any] | None = None
    try:
        plane.start()
        admin = await KubeClient.connect(
            str(plane.kubeconfig("admin")), ClientOptions(qps=1e6, burst=1_000_000, timeout=60)
        )
        try:
            name = "default-scheduler" if scheduler == "kube" else "topo-scheduler"
            await populate(admin, nodes, pods, name, plane.kwok)
            listed = await admin.get(f"/api/v1/namespaces/{NAMESPACE}/pods", {"limit": "1"})
            rv = str(listed["metadata"]["resourceVersion"])
            bound_at: dict[str, float] = {}
            watcher = asyncio.create_task(watch_bindings(admin, rv, pods, bound_at))
            port = free_port()
            log = plane.state_dir / "logs" / "topo-scheduler.log"
            requests_before = await request_counts(admin)
            before = {name: cpu_seconds(pid) for name, pid in plane_pids(plane).items()}
            t0 = time.monotonic()
            if scheduler == "kube":
                await asyncio.to_thread(plane.start_scheduler)
            else:
                proc = launch_topo(plane, qps, burst, port, log)
            await asyncio.wait_for(watcher, timeout=600)
            pids = plane_pids(plane)
            if proc is not None:
                pids["topo-scheduler"] = proc.pid
            run.cpu = {n: cpu_seconds(pid) - before.get(n, 0.0) for n, pid in pids.items()}
            times = sorted(bound_at.values())
            run.bound = len(times)
            run.wall = times[-1] - t0
            run.span = times[-1] - times[0]
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                run.events = await count_scheduled_events(admin)
                if run.events >= pods:
                    run.events_at = time.monotonic() - t0
                    break
                await asyncio.sleep(0.5)
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
        f"{run.scheduler:>5}-scheduler  QPS {run.qps:>6g}/{run.burst:<6d} "
        f"bound {run.bound:5d} in {run.wall:6.1f} s ({run.rate:6.1f} pods/s over "
        f"{run.span:5.1f} s)  Scheduled events {run.events:5d} (all by {events})  "
        f"client timeouts {run.timeouts}  dropped events {run.dropped}",
        flush=True,
    )
    if show_requests:
        print(f"       API requests: {dict(sorted(run.requests.items()))}", flush=True)
    print(
        "       CPU s to the last binding: "
        + ", ".join(f"{name} {secs:.2f}" for name, secs in sorted(run.cpu.items())),
        flush=True,
    )


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--limits", default="50:100,5000:5000", help="QPS:BURST[,QPS:BURST...]")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--only", choices=("kube", "topo"))
    ap.add_argument(
        "--requests", action="store_true", help="also print the API server's request counts"
    )
    args = ap.parse_args()
    try:
        await asyncio.to_thread(ensure)
    except PlaneUnavailable as exc:
        print(f"error: real control plane unavailable: {exc}", file=sys.stderr)
        return 1
    limits = [(float(q), int(b)) for q, _, b in (x.partition(":") for x in args.limits.split(","))]
    schedulers = [args.only] if args.only else ["kube", "topo"]
    results: dict[tuple[str, float], list[Run]] = {}
    for qps, burst in limits:
        for _ in range(args.repeat):
            for sched in schedulers:
                run = await one_run(sched, qps, burst, args.nodes, args.pods)
                report(run, args.requests)
                results.setdefault((sched, qps), []).append(run)
    if len(schedulers) == 2:
        print()
        for qps, burst in limits:
            kube = statistics.median(r.wall for r in results[("kube", qps)])
            topo = statistics.median(r.wall for r in results[("topo", qps)])
            kube_rate = statistics.median(r.rate for r in results[("kube", qps)])
            topo_rate = statistics.median(r.rate for r in results[("topo", qps)])
            print(
                f"QPS {qps:g}/{burst}: wall (median) kube-scheduler {kube:.1f} s, "
                f"topo-scheduler {topo:.1f} s, topo/kube {topo / kube:.2f}; binding rate "
                f"(median) {kube_rate:.1f} and {topo_rate:.1f} pods/s, "
                f"topo/kube {topo_rate / kube_rate:.2f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
