"""What only the 1.37 plane (`REALKUBE_PLANE=1.37`, `hack/kube137/`) can show: the APIs a current
cluster serves, KWOK's nodes running the pods topo-scheduler binds, real node-bound
service-account tokens under the chart's ValidatingAdmissionPolicy, and gang scheduling of a
Kubernetes `scheduling.k8s.io/v1beta1` PodGroup.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from tests.realkube.api import Api, HTTPFailure, wait_for
from tests.realkube.conftest import GPU_NODES, NAMESPACE, pod
from tests.realkube.plane import Plane

pytestmark = pytest.mark.plane("1.37")

AGENT = "topo-scheduler-agent"  # the chart's agent service account (release topo-scheduler)
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"


def _resources(api: Api, group_version: str) -> set[str]:
    prefix = "/api/" if group_version == "v1" else "/apis/"
    return {r["name"] for r in api.get(prefix + group_version)["resources"]}


def test_serves_the_current_apis(cluster: Api) -> None:
    assert cluster.get("/version")["gitVersion"] == "v1.37.2"
    assert {"podgroups", "podgroups/status", "workloads"} <= _resources(
        cluster, "scheduling.k8s.io/v1beta1"
    )
    assert {"resourceclaims", "deviceclasses", "resourceslices"} <= _resources(
        cluster, "resource.k8s.io/v1"
    )
    assert "validatingadmissionpolicies" in _resources(cluster, "admissionregistration.k8s.io/v1")
    assert "poddisruptionbudgets" in _resources(cluster, "policy/v1")
    # KWOK keeps the nodes alive: Ready, with a Lease it renews
    lease = cluster.get(
        f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{GPU_NODES[0]}"
    )
    assert lease["spec"]["holderIdentity"] and lease["spec"]["renewTime"]  # KWOK's identity


def _phase(api: Api, ns: str, name: str) -> str | None:
    try:
        return str(api.get(f"/api/v1/namespaces/{ns}/pods/{name}")["status"].get("phase"))
    except HTTPFailure as err:
        if err.status == 404:
            return None
        raise


def test_bound_pods_run_on_kwok_nodes_and_go_away_gracefully(
    cluster: Api, namespace: str, start_scheduler: Any
) -> None:
    sched = start_scheduler()
    cluster.post(f"/api/v1/namespaces/{namespace}/pods", pod("job", namespace, gpus=2))
    wait_for(lambda: _phase(cluster, namespace, "job") == "Running", 60, "job Running")
    obj = cluster.get(f"/api/v1/namespaces/{namespace}/pods/job")
    assert obj["spec"]["nodeName"] in GPU_NODES
    # the ServiceAccount admission plugin mounted the namespace's default account's token
    assert obj["spec"]["serviceAccountName"] == "default"
    assert any(v["name"].startswith("kube-api-access-") for v in obj["spec"]["volumes"])
    # a graceful delete (30 s grace period): KWOK, as a kubelet, finishes it
    cluster.call("DELETE", f"/api/v1/namespaces/{namespace}/pods/job", {})
    wait_for(lambda: _phase(cluster, namespace, "job") is None, 30, "job deleted")
    assert sched.stop() == 0


def _bound_token(cluster: Api, pod_obj: dict[str, Any]) -> str:
    """A TokenRequest for the agent's service account, bound to `pod_obj`, as the kubelet asks."""
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "expirationSeconds": 600,
            "boundObjectRef": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod_obj["metadata"]["name"],
                "uid": pod_obj["metadata"]["uid"],
            },
        },
    }
    path = f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{AGENT}/token"
    return str(cluster.post(path, request)["status"]["token"])


def _patch_node(api: Api, node: str, metadata: dict[str, Any]) -> HTTPFailure | None:
    try:
        api.merge_patch(f"/api/v1/nodes/{node}", {"metadata": metadata})
    except HTTPFailure as err:
        return err
    return None


def test_chart_policy_confines_the_agents_node_bound_token_to_its_node(
    plane: Plane, cluster: Api
) -> None:
    from tests.ship._support import objects

    kinds = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    policy = [o for o in objects(namespace=NAMESPACE) if o["kind"] in kinds]
    assert len(policy) == 2
    for obj in policy:
        cluster.apply(obj)
    name = f"agent-{uuid.uuid4().hex[:6]}"
    agent_pod = pod(name, NAMESPACE, scheduler="none")
    agent_pod["spec"].update(serviceAccountName=AGENT, nodeName=GPU_NODES[0])
    created = cluster.post(f"/api/v1/namespaces/{NAMESPACE}/pods", agent_pod)
    probe = "topo-scheduler.io/realkube-probe"
    try:
        agent = Api(plane, token=_bound_token(cluster, created))
        review = agent.post(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
        user = review["status"]["userInfo"]
        assert user["username"] == f"system:serviceaccount:{NAMESPACE}:{AGENT}"
        assert user["extra"][NODE_NAME_EXTRA] == [GPU_NODES[0]]

        # the policy is loaded asynchronously: wait for its first denial
        other = GPU_NODES[1]
        denied = wait_for(lambda: _patch_node(agent, other, {"annotations": {probe: "x"}}), 30)
        assert denied.status == 403
        assert "may only change the node its service account token is bound to" in denied.body
        # its own node: topo-scheduler.io/ annotations only
        assert _patch_node(agent, GPU_NODES[0], {"annotations": {probe: "1"}}) is None
        for change, message in (
            ({"annotations": {"example.com/other": "x"}}, "only change annotations under"),
            ({"labels": {"example.com/pool": "x"}}, "may not change a node's spec, labels"),
        ):
            err = _patch_node(agent, GPU_NODES[0], change)
            assert err is not None and err.status == 403 and message in err.body, change
        try:
            agent.merge_patch(f"/api/v1/nodes/{GPU_NODES[0]}/status", {"status": {}})
            raise AssertionError("the agent patched nodes/status")
        except HTTPFailure as err:
            assert err.status == 403
        # the token dies with its pod
        cluster.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")

        def rejected() -> bool:
            try:
                agent.get(f"/api/v1/nodes/{GPU_NODES[0]}")
            except HTTPFailure as err:
                return err.status == 401
            return False

        wait_for(rejected, 30, "the bound token rejected once its pod is gone")
    finally:
        for obj in policy:
            path = (
                "/apis/admissionregistration.k8s.io/v1/"
                + {
                    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
                    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
                }[obj["kind"]]
            )
            cluster.call("DELETE", f"{path}/{obj['metadata']['name']}", {})
        for node in GPU_NODES[:2]:
            cluster.merge_patch(
                f"/api/v1/nodes/{node}", {"metadata": {"annotations": {probe: None}}}
            )
        try:
            cluster.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")
        except HTTPFailure as err:
            if err.status != 404:
                raise


def test_gang_of_a_kubernetes_podgroup(cluster: Api, namespace: str, start_scheduler: Any) -> None:
    """A `scheduling.k8s.io/v1beta1` PodGroup with gang minCount 2: the first member waits, both
    are bound once the second exists."""
    cluster.post(
        f"/apis/scheduling.k8s.io/v1beta1/namespaces/{namespace}/podgroups",
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "gang"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
        },
    )

    def member(name: str) -> dict[str, Any]:
        obj = pod(name, namespace, gpus=4)
        obj["spec"]["schedulingGroup"] = {"podGroupName": "gang"}
        return obj

    sched = start_scheduler()
    wait_for(sched.ready, 30, "topo-scheduler ready")
    cluster.post(f"/api/v1/namespaces/{namespace}/pods", member("w0"))
    created = cluster.get(f"/api/v1/namespaces/{namespace}/pods/w0")
    assert created["spec"].get("schedulingGroup") == {"podGroupName": "gang"}  # kept, not dropped
    time.sleep(5)
    assert not cluster.get(f"/api/v1/namespaces/{namespace}/pods/w0")["spec"].get("nodeName")
    cluster.post(f"/api/v1/namespaces/{namespace}/pods", member("w1"))
    for name in ("w0", "w1"):
        wait_for(
            lambda n=name: _phase(cluster, namespace, n) == "Running", 60, f"{name} bound, Running"
        )
    assert sched.stop() == 0
