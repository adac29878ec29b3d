"""`topo-scheduler run` against a real kube-apiserver (1.20, or 1.37 with REALKUBE_PLANE=1.37)
with the chart's RBAC.

What the emulator cannot vouch for: the real binding subresource (annotations copied onto the
pod), real events.k8s.io/v1 and pods/status validation, RBAC with the restricted token,
Lease conflicts, an API server restart and the watch cache's 410 after an etcd compaction, and
a gang reservation's nominations carried from one leader to the next through pods/status.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from typing import Any

import pytest
import yaml

from scheduler.core.topology.schema import ANNOTATION_GPUS
from scheduler.kube.client import ApiError, KubeClient
from scheduler.kube.credentials import Endpoint
from tests.realkube.api import Api, HTTPFailure, wait_for
from tests.realkube.conftest import CONFIG_MAP, GPU_NODES, NAMESPACE, pod
from tests.realkube.plane import Plane

LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/topo-scheduler"


def _pod(api: Api, ns: str, name: str) -> dict[str, Any]:
    return api.get(f"/api/v1/namespaces/{ns}/pods/{name}")


def _bound(api: Api, ns: str, name: str) -> dict[str, Any] | None:
    obj = _pod(api, ns, name)
    return obj if obj["spec"].get("nodeName") else None


def _events(api: Api, ns: str, name: str, reason: str) -> list[dict[str, Any]]:
    items = api.get(f"/apis/events.k8s.io/v1/namespaces/{ns}/events").get("items") or []
    return [e for e in items if e["regarding"]["name"] == name and e["reason"] == reason]


def _holder(api: Api) -> str | None:
    try:
        return api.get(LEASE)["spec"].get("holderIdentity") or None
    except HTTPFailure as err:
        if err.status == 404:
            return None
        raise


def test_binds_gpu_sets_writes_events_and_condition_leaves_others_alone(
    cluster: Api, namespace: str, start_scheduler: Any
) -> None:
    sched = start_scheduler()
    for name, gpus in (("four", 4), ("two", 2), ("huge", 16)):
        cluster.post(f"/api/v1/namespaces/{namespace}/pods", pod(name, namespace, gpus=gpus))
    cluster.post(
        f"/api/v1/namespaces/{namespace}/pods",
        pod("foreign", namespace, gpus=1, scheduler="other-scheduler"),
    )
    for name, gpus in (("four", 4), ("two", 2)):
        obj = wait_for(lambda n=name: _bound(cluster, namespace, n), 60, f"{name} bound")
        assert obj["spec"]["nodeName"] in GPU_NODES
        # the GPU set travelled on the Binding; the API server copied it onto the pod
        chosen = [int(i) for i in obj["metadata"]["annotations"][ANNOTATION_GPUS].split(",")]
        assert len(chosen) == gpus and all(0 <= i < 8 for i in chosen)
        conditions = {c["type"]: c for c in obj["status"].get("conditions") or []}
        assert conditions["PodScheduled"]["status"] == "True"  # set by the binding itself
        (event,) = wait_for(lambda n=name: _events(cluster, namespace, n, "Scheduled"), 30)
        assert event["type"] == "Normal" and event["reportingController"] == "topo-scheduler"
        assert event["note"].startswith(
            f"Successfully assigned {namespace}/{name} to {obj['spec']['nodeName']}"
        )

    def unschedulable() -> dict[str, Any] | None:
        conds = _pod(cluster, namespace, "huge")["status"].get("conditions") or []
        return next((c for c in conds if c["type"] == "PodScheduled"), None)

    condition = wait_for(unschedulable, 30, "PodScheduled=False on huge")
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
    assert "Insufficient nvidia.com/gpu" in condition["message"]
    (failed,) = wait_for(lambda: _events(cluster, namespace, "huge", "FailedScheduling"), 30)
    assert failed["type"] == "Warning" and failed["note"] == condition["message"]
    assert failed["note"].startswith("0/3 nodes are available")

    foreign = _pod(cluster, namespace, "foreign")
    assert not foreign["spec"].get("nodeName") and not foreign["status"].get("conditions")
    assert not _events(cluster, namespace, "foreign", "FailedScheduling")
    assert sched.metric("topo_scheduler_other_scheduler_pending_pods") >= 1
    assert sched.metric("topo_scheduler_client_request_timeouts_total", client="scheduling") == 0
    assert sched.stop() == 0


def test_config_map_reload_takes_a_new_profile(
    cluster: Api, namespace: str, start_scheduler: Any
) -> None:
    path = f"/api/v1/namespaces/{NAMESPACE}/configmaps/{CONFIG_MAP}"
    original = cluster.get(path)["data"]["config.yaml"]
    sched = start_scheduler()
    cluster.post(f"/api/v1/namespaces/{namespace}/pods", pod("first", namespace))
    cluster.post(
        f"/api/v1/namespaces/{namespace}/pods", pod("gang", namespace, scheduler="topo-gang")
    )
    wait_for(lambda: _bound(cluster, namespace, "first"), 60, "first bound")
    assert not _bound(cluster, namespace, "gang")  # not ours yet
    try:
        cluster.merge_patch(
            path, {"data": {"config.yaml": original + "- schedulerName: topo-gang\n"}}
        )
        wait_for(lambda: _bound(cluster, namespace, "gang"), 30, "gang bound after the reload")
        assert sched.metric("topo_scheduler_config_reloads_total", result="success") >= 1
    finally:
        cluster.merge_patch(path, {"data": {"config.yaml": original}})
    assert sched.stop() == 0


def test_fails_over_between_two_replicas_through_the_lease(
    cluster: Api, namespace: str, start_scheduler: Any
) -> None:
    first = start_scheduler()
    leader = wait_for(lambda: _holder(cluster), 30, "a Lease holder")
    second = start_scheduler()
    wait_for(second.ready, 30, "the standby ready (informers synced)")
    assert _holder(cluster) == leader
    assert second.metric("leader_election_master_status", name="topo-scheduler") == 0
    cluster.post(f"/api/v1/namespaces/{namespace}/pods", pod("before", namespace, gpus=1))
    wait_for(lambda: _bound(cluster, namespace, "before"), 60, "bound by the first leader")
    assert first.stop() == 0  # SIGTERM releases the Lease
    new = wait_for(lambda: (_holder(cluster) or leader) != leader and _holder(cluster), 30)
    assert new != leader
    cluster.post(f"/api/v1/namespaces/{namespace}/pods", pod("after", namespace, gpus=1))
    wait_for(lambda: _bound(cluster, namespace, "after"), 60, "bound by the new leader")
    assert second.metric("leader_election_master_status", name="topo-scheduler") == 1
    assert second.stop() == 0


def test_a_new_leader_adopts_the_gang_reservation_the_former_one_left(
    cluster: Api, namespace: str, start_scheduler: Any
) -> None:
    """With gangReservationSeconds set, a group that fits once running pods end gets nodes
    held (its members' nominatedNodeName); the leader stops, and the next one holds the same
    nodes as its own reservation (its metrics count it) rather than leave them nominated."""
    path = f"/api/v1/namespaces/{NAMESPACE}/configmaps/{CONFIG_MAP}"
    original = cluster.get(path)["data"]["config.yaml"]
    config = yaml.safe_load(original)
    config["profiles"][0].setdefault("pluginConfig", []).append(
        {"name": "GPUTopology", "args": {"gangReservationSeconds": 3600}}
    )
    for node, gpus in zip(GPU_NODES, (4, 4, 8), strict=True):  # running pods, not ours
        busy = pod(f"busy-{node}", namespace, gpus=gpus, scheduler="default-scheduler")
        busy["spec"]["nodeName"] = node
        cluster.post(f"/api/v1/namespaces/{namespace}/pods", busy)
    members = []
    for name in ("w0", "w1"):
        member = pod(name, namespace, gpus=8)
        member["metadata"]["annotations"] = {
            "topo-scheduler.io/pod-group": "llama",
            "topo-scheduler.io/min-member": "2",
        }
        members.append(member)

    def nominated() -> dict[str, str | None]:
        return {
            name: cluster.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
            .get("status", {})
            .get("nominatedNodeName")
            for name in ("w0", "w1")
        }

    cluster.merge_patch(path, {"data": {"config.yaml": yaml.safe_dump(config)}})
    try:
        first = start_scheduler()
        wait_for(first.ready, 30, "the first leader ready")
        for member in members:
            cluster.post(f"/api/v1/namespaces/{namespace}/pods", member)
        wait_for(lambda: all(nominated().values()), 60, "the members' nodes held")
        held = nominated()
        assert set(held.values()) == set(GPU_NODES[:2])
        assert first.metric("topo_scheduler_gang_reservations_held") == 1
        assert first.stop() == 0
        second = start_scheduler()
        wait_for(
            lambda: second.ready() and second.metric("topo_scheduler_gang_reservations_held") == 1,
            60,
            "the reservation adopted by the next leader",
        )
        assert second.metric("topo_scheduler_gang_reservations_total", result="made") == 1
        assert nominated() == held
        assert not any(_bound(cluster, namespace, name) for name in ("w0", "w1"))
        assert second.stop() == 0
    finally:
        cluster.merge_patch(path, {"data": {"config.yaml": original}})


def _etcdctl(plane: Plane, *args: str) -> str:
    out = subprocess.run(
        [plane.etcdctl(), f"--endpoints={plane.etcd_url}", *args],
        capture_output=True,
        text=True,
        check=True,
        env={"ETCDCTL_API": "3", "PATH": "/usr/bin:/bin:/usr/local/bin"},
    )
    return out.stdout


def test_survives_an_apiserver_restart_and_relists_after_410(
    plane: Plane, cluster: Api, namespace: str, start_scheduler: Any
) -> None:
    sched = start_scheduler(leader_elect=False)
    cluster.post(f"/api/v1/namespaces/{namespace}/pods", pod("before", namespace))
    wait_for(lambda: _bound(cluster, namespace, "before"), 60, "before bound")
    relists_before = sched.metric("topo_scheduler_informer_relists_total", informer="pods")
    plane.stop_apiserver()
    # move etcd on and compact: the restarted watch cache starts past our resourceVersion,
    # so resuming the watch answers 410 Gone and the informers must list again
    for i in range(3):
        _etcdctl(plane, "put", f"/realkube-test/bump-{i}", "x")
    status = json.loads(_etcdctl(plane, "endpoint", "status", "-w", "json"))
    _etcdctl(plane, "compact", str(status[0]["Status"]["header"]["revision"]))
    plane.start_apiserver()
    cluster.post(f"/api/v1/namespaces/{namespace}/pods", pod("after", namespace))
    wait_for(lambda: _bound(cluster, namespace, "after"), 90, "after bound, past the restart")
    assert sched.alive()
    wait_for(
        lambda: (
            sched.metric("topo_scheduler_informer_relists_total", informer="pods") > relists_before
        ),
        30,
        "a re-list of pods after 410",
    )
    assert sched.stop() == 0


def test_in_cluster_credentials_authenticate_as_the_service_account(
    cluster: Api, plane: Plane
) -> None:
    """The way the chart runs the scheduler: KUBERNETES_SERVICE_HOST/PORT, the service
    account's CA and token (here the restricted token the chart's RBAC is bound to)."""
    account = plane.service_account_dir("restricted")
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1"}
    env["KUBERNETES_SERVICE_PORT"] = str(plane.ports["APISERVER_PORT"])

    async def scenario() -> None:
        client = KubeClient(Endpoint.in_cluster(env, account))
        try:
            nodes = await client.get("/api/v1/nodes")  # the chart grants list on nodes
            assert {n["metadata"]["name"] for n in nodes["items"]} >= set(GPU_NODES)
            with pytest.raises(ApiError) as err:  # ...and nothing outside its role
                await client.post("/api/v1/namespaces", {"metadata": {"name": "not-ours"}})
            assert err.value.status == 403
            assert "system:serviceaccount:topo-scheduler:topo-scheduler-scheduler" in str(err.value)
        finally:
            await client.close()
        # a CA that did not sign the server's certificate: refused before any request
        (account / "ca.crt").write_bytes((plane.state_dir / "pki" / "apiserver.crt").read_bytes())
        stranger = KubeClient(Endpoint.in_cluster(env, account))
        try:
            with pytest.raises(ApiError, match="Transport") as err:
                await stranger.get("/api/v1/nodes")
            assert err.value.status == 0
        finally:
            await stranger.close()

    asyncio.run(scenario())
