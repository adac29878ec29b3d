"""Kueue v0.17 as a real peer on the 1.37 plane (`hack/kube137/kueue.sh`: built from its Go
module, its CRDs and webhooks from the module's source, its own certificate management).

A `batch/v1` Job with `schedulerName: topo-scheduler` and the `kueue.x-k8s.io/queue-name`
label is created suspended (Kueue's Job webhook), admitted by Kueue against a ClusterQueue's
`nvidia.com/gpu` quota (unsuspended, the ResourceFlavor's node labels injected as node
selectors), and its pods are placed by topo-scheduler with GPU sets. A Job the quota cannot
hold stays suspended in Kueue: it has no pods, so nothing of it reaches topo-scheduler's queue.

JobSet (`hack/kube137/jobset.sh`, built the same way, started before Kueue so that Kueue's
`jobset.x-k8s.io/jobset` integration finds its CRD): a JobSet of two replicated Jobs is suspended
by Kueue's JobSet webhook, admitted as one Workload of two pod sets, and its pods are placed by
topo-scheduler. Skipped loudly (JOBSET NOT AVAILABLE) when JobSet cannot be built.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from scheduler.core.topology.schema import ANNOTATION_GPUS
from tests.realkube.api import Api, HTTPFailure, wait_for
from tests.realkube.conftest import GPU_NODES
from tests.realkube.plane import ROOT, Plane, free_port

pytestmark = pytest.mark.plane("1.37")

KUEUE = "kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
FLAVOR_LABEL = "topo-scheduler.io/realkube-flavor"
SCRIPT = ROOT / "hack" / "kube137" / "kueue.sh"
JOBSET_SCRIPT = ROOT / "hack" / "kube137" / "jobset.sh"
JOBSET = "jobset.x-k8s.io/v1alpha2"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"


@pytest.fixture(scope="module")
def jobset_controller(plane: Plane, cluster: Api) -> Iterator[str]:
    """JobSet's controller on the tier's plane: "" when running, else why it is not (its build
    failed, or REALKUBE_BUILD=0 and it is not built). A start that fails is reported by the
    JobSet test, not skipped."""
    env = {
        **os.environ,
        **{v: str(free_port()) for v in ("JOBSET_WEBHOOK_PORT", "JOBSET_HEALTH_PORT")},
    }
    offline = ["--offline"] if os.environ.get("REALKUBE_BUILD", "1") == "0" else []
    built = subprocess.run(
        ["bash", str(JOBSET_SCRIPT), "ensure", *offline], capture_output=True, text=True, env=env
    )
    if built.returncode != 0:
        yield f"JOBSET NOT AVAILABLE: jobset.sh ensure: {built.stdout[-800:]}{built.stderr}"
        return
    started = subprocess.run(
        ["bash", str(JOBSET_SCRIPT), "start", "-d", str(plane.state_dir)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    try:
        yield (
            "" if started.returncode == 0 else f"jobset.sh start: {started.stdout}{started.stderr}"
        )
    finally:
        subprocess.run(
            ["bash", str(JOBSET_SCRIPT), "stop", "-d", str(plane.state_dir)],
            capture_output=True,
            env=env,
            timeout=120,
        )


@pytest.fixture(scope="module")
def kueue(plane: Plane, cluster: Api, jobset_controller: str) -> Iterator[Api]:
    """Kueue running against the tier's plane (built when missing, unless REALKUBE_BUILD=0),
    with its JobSet integration when JobSet runs."""
    env = {
        **os.environ,
        **{
            var: str(free_port())
            for var in (
                "KUEUE_WEBHOOK_PORT",
                "KUEUE_HEALTH_PORT",
                "KUEUE_METRICS_PORT",
                "KUEUE_VISIBILITY_PORT",
            )
        },
        "KUEUE_FRAMEWORKS": "batch/job" + ("" if jobset_controller else " jobset.x-k8s.io/jobset"),
    }
    offline = ["--offline"] if os.environ.get("REALKUBE_BUILD", "1") == "0" else []
    built = subprocess.run(
        ["bash", str(SCRIPT), "ensure", *offline], capture_output=True, text=True, env=env
    )
    if built.returncode != 0:
        pytest.skip(f"KUEUE NOT AVAILABLE: kueue.sh ensure: {built.stdout[-800:]}{built.stderr}")
    started = subprocess.run(
        ["bash", str(SCRIPT), "start", "-d", str(plane.state_dir)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert started.returncode == 0, started.stdout + started.stderr
    for node in GPU_NODES:
        cluster.merge_patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": {FLAVOR_LABEL: "a"}}})
    try:
        yield cluster
    finally:
        subprocess.run(
            ["bash", str(SCRIPT), "stop", "-d", str(plane.state_dir)],
            capture_output=True,
            env=env,
            timeout=120,
        )
        for node in GPU_NODES:
            cluster.merge_patch(
                f"/api/v1/nodes/{node}", {"metadata": {"labels": {FLAVOR_LABEL: None}}}
            )


def _queues(api: Api, namespace: str, gpus: int) -> str:
    """A ResourceFlavor, a ClusterQueue with `gpus` nvidia.com/gpu, a LocalQueue in namespace."""
    cq = f"cq-{namespace}"
    api.post(
        f"/apis/{KUEUE}/resourceflavors",
        {
            "apiVersion": KUEUE,
            "kind": "ResourceFlavor",
            "metadata": {"name": f"gpu-{namespace}"},
            "spec": {"nodeLabels": {FLAVOR_LABEL: "a"}},
        },
    )
    api.post(
        f"/apis/{KUEUE}/clusterqueues",
        {
            "apiVersion": KUEUE,
            "kind": "ClusterQueue",
            "metadata": {"name": cq},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": f"gpu-{namespace}",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "100"},
                                    {"name": "memory", "nominalQuota": "1Ti"},
                                    {"name": "nvidia.com/gpu", "nominalQuota": str(gpus)},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
    )
    api.post(
        f"/apis/{KUEUE}/namespaces/{namespace}/localqueues",
        {
            "apiVersion": KUEUE,
            "kind": "LocalQueue",
            "metadata": {"name": "training"},
            "spec": {"clusterQueue": cq},
        },
    )

    def active() -> bool:
        obj = api.get(f"/apis/{KUEUE}/clusterqueues/{cq}")
        conds = obj.get("status", {}).get("conditions") or []
        return any(c["type"] == "Active" and c["status"] == "True" for c in conds)

    wait_for(active, 30, f"ClusterQueue {cq} Active")
    return cq


def _job(name: str, pods: int, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: "training"}},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "template": {
                "spec": {
                    "schedulerName": "topo-scheduler",
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.k8s.io/pause:3.9",
                            "resources": {
                                "requests": {
                                    "cpu": "1",
                                    "memory": "1Gi",
                                    "nvidia.com/gpu": str(gpus),
                                },
                                "limits": {"nvidia.com/gpu": str(gpus)},
                            },
                        }
                    ],
                }
            },
        },
    }


def _pods_of(api: Api, ns: str, job: str) -> list[dict[str, Any]]:
    items = api.get(f"/api/v1/namespaces/{ns}/pods", labelSelector=f"job-name={job}")
    return list(items.get("items") or [])


def _workload(api: Api, ns: str, job: str) -> dict[str, Any] | None:
    items = api.get(f"/apis/{KUEUE}/namespaces/{ns}/workloads").get("items") or []
    for wl in items:
        if any(o["name"] == job for o in wl["metadata"].get("ownerReferences") or []):
            return dict(wl)
    return None


def _condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    conds = (obj or {}).get("status", {}).get("conditions") or []
    return next((c for c in conds if c["type"] == kind), None)


def test_a_job_admitted_by_kueue_is_placed_by_topo_scheduler(
    kueue: Api, namespace: str, start_scheduler: Any
) -> None:
    api = kueue
    _queues(api, namespace, gpus=16)
    sched = start_scheduler()
    wait_for(sched.ready, 60, "topo-scheduler ready")
    jobs = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    created = api.post(jobs, _job("train", pods=2, gpus=4))
    assert created["spec"]["suspend"] is True  # Kueue's Job webhook suspended it

    def admitted() -> dict[str, Any] | None:
        wl = _workload(api, namespace, "train")
        cond = _condition(wl, "Admitted")
        return wl if cond and cond["status"] == "True" else None

    wl = wait_for(admitted, 60, "Kueue admits the Job's Workload")
    (assignment,) = wl["status"]["admission"]["podSetAssignments"]
    assert assignment["flavors"]["nvidia.com/gpu"] == f"gpu-{namespace}"
    assert not api.get(f"{jobs}/train")["spec"]["suspend"]

    def placed() -> list[dict[str, Any]] | None:
        pods = _pods_of(api, namespace, "train")
        return pods if len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods) else None

    pods = wait_for(placed, 60, "both pods of the Job bound")
    for p in pods:
        assert p["spec"]["schedulerName"] == "topo-scheduler"
        assert p["spec"]["nodeName"] in GPU_NODES
        # the flavor's node labels, injected by Kueue at admission
        assert p["spec"]["nodeSelector"][FLAVOR_LABEL] == "a"
        gpus = [int(i) for i in p["metadata"]["annotations"][ANNOTATION_GPUS].split(",")]
        assert len(gpus) == 4 and all(0 <= i < 8 for i in gpus)
    # KWOK runs the pods to completion: the Job succeeds and Kueue marks its Workload finished
    wait_for(
        lambda: (
            (_condition(_workload(api, namespace, "train"), "Finished") or {}).get("status")
            == "True"
        ),
        60,
        "Workload Finished",
    )
    assert sched.stop() == 0


def test_a_job_over_quota_waits_in_kueue_not_in_topo_schedulers_queue(
    kueue: Api, namespace: str, start_scheduler: Any
) -> None:
    api = kueue
    _queues(api, namespace, gpus=16)
    sched = start_scheduler()
    wait_for(sched.ready, 60, "topo-scheduler ready")
    jobs = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    # 3 pods of 8 GPUs: 24 > the ClusterQueue's 16
    api.post(jobs, _job("too-big", pods=3, gpus=8))

    def pending() -> dict[str, Any] | None:
        cond = _condition(_workload(api, namespace, "too-big"), "QuotaReserved")
        return cond if cond and cond["status"] == "False" and cond.get("message") else None

    cond = wait_for(pending, 60, "Kueue keeps the Workload pending")
    assert "nvidia.com/gpu" in cond["message"], cond
    assert api.get(f"{jobs}/too-big")["spec"]["suspend"] is True
    assert _pods_of(api, namespace, "too-big") == []  # nothing for topo-scheduler to queue
    # topo-scheduler saw no pod of it: none pending in its queue
    for queue in ("active", "backoff", "unschedulable", "gated"):
        assert sched.metric("scheduler_pending_pods", queue=queue) == 0, queue
    # a Job that fits is admitted meanwhile and placed
    api.post(jobs, _job("fits", pods=2, gpus=8))
    wait_for(lambda: len(_pods_of(api, namespace, "fits")) == 2, 60, "the fitting Job's pods")
    wait_for(
        lambda: all(p["spec"].get("nodeName") for p in _pods_of(api, namespace, "fits")),
        60,
        "the fitting Job's pods bound",
    )
    assert api.get(f"{jobs}/too-big")["spec"]["suspend"] is True
    assert sched.stop() == 0


def _jobset(name: str, gpus: int) -> dict[str, Any]:
    """Two replicated Jobs of one pod each, `gpus` GPUs a pod."""

    def replicated(rj: str) -> dict[str, Any]:
        job = _job(rj, pods=1, gpus=gpus)
        job["spec"]["backoffLimit"] = 0
        return {"name": rj, "replicas": 1, "template": {"spec": job["spec"]}}

    return {
        "apiVersion": JOBSET,
        "kind": "JobSet",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: "training"}},
        "spec": {"replicatedJobs": [replicated("leader"), replicated("workers")]},
    }


def test_a_jobset_admitted_by_kueue_is_placed_by_topo_scheduler(
    kueue: Api, jobset_controller: str, namespace: str, start_scheduler: Any
) -> None:
    if jobset_controller.startswith("JOBSET NOT AVAILABLE"):
        pytest.skip(jobset_controller)
    assert not jobset_controller, jobset_controller
    api = kueue
    _queues(api, namespace, gpus=16)
    sched = start_scheduler()
    wait_for(sched.ready, 60, "topo-scheduler ready")
    jobsets = f"/apis/{JOBSET}/namespaces/{namespace}/jobsets"
    created = api.post(jobsets, _jobset("trainer", gpus=1))
    assert created["spec"]["suspend"] is True  # Kueue's JobSet webhook suspended it

    def admitted() -> dict[str, Any] | None:
        wl = _workload(api, namespace, "trainer")
        cond = _condition(wl, "Admitted")
        return wl if cond and cond["status"] == "True" else None

    wl = wait_for(admitted, 60, "Kueue admits the JobSet's Workload")
    assignments = wl["status"]["admission"]["podSetAssignments"]
    assert sorted(a["name"] for a in assignments) == ["leader", "workers"]
    assert all(a["flavors"]["nvidia.com/gpu"] == f"gpu-{namespace}" for a in assignments)
    assert not api.get(f"{jobsets}/trainer")["spec"].get("suspend")

    def placed() -> list[dict[str, Any]] | None:
        pods = (
            api.get(
                f"/api/v1/namespaces/{namespace}/pods", labelSelector=f"{JOBSET_NAME_LABEL}=trainer"
            ).get("items")
            or []
        )
        return pods if len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods) else None

    pods = wait_for(placed, 90, "both pods of the JobSet bound")
    for p in pods:
        assert p["spec"]["schedulerName"] == "topo-scheduler"
        assert p["spec"]["nodeName"] in GPU_NODES
        assert p["spec"]["nodeSelector"][FLAVOR_LABEL] == "a"  # injected by Kueue
        gpus = [int(i) for i in p["metadata"]["annotations"][ANNOTATION_GPUS].split(",")]
        assert len(gpus) == 1 and 0 <= gpus[0] < 8
    # KWOK completes the Jobs' pods: the JobSet completes and Kueue finishes its Workload
    wait_for(
        lambda: (
            (_condition(_workload(api, namespace, "trainer"), "Finished") or {}).get("status")
            == "True"
        ),
        90,
        "the JobSet's Workload Finished",
    )
    assert sched.stop() == 0


@pytest.fixture(autouse=True)
def _cleanup(kueue: Api, namespace: str) -> Iterator[None]:
    """JobSets and Jobs, then the queues (their finalizers need Kueue running)."""
    yield
    api = kueue

    def delete(path: str, body: dict[str, str]) -> None:
        # A JobSet's Jobs may go with it between the list and the delete.
        try:
            api.call("DELETE", path, body)
        except HTTPFailure as err:
            if err.status != 404:
                raise

    try:
        jobsets = api.get(f"/apis/{JOBSET}/namespaces/{namespace}/jobsets").get("items") or []
    except HTTPFailure as err:
        if err.status != 404:  # JobSet's CRD not installed
            raise
        jobsets = []
    background = {"propagationPolicy": "Background"}
    for js in jobsets:
        name = js["metadata"]["name"]
        delete(f"/apis/{JOBSET}/namespaces/{namespace}/jobsets/{name}", background)
    for job in api.get(f"/apis/batch/v1/namespaces/{namespace}/jobs").get("items") or []:
        delete(f"/apis/batch/v1/namespaces/{namespace}/jobs/{job['metadata']['name']}", background)
    for path in (
        f"/apis/{KUEUE}/namespaces/{namespace}/localqueues/training",
        f"/apis/{KUEUE}/clusterqueues/cq-{namespace}",
        f"/apis/{KUEUE}/resourceflavors/gpu-{namespace}",
    ):
        delete(path, {})
