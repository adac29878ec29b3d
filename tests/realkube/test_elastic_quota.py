"""ElasticQuotas against a real kube-apiserver (1.20, or 1.37 with REALKUBE_PLANE=1.37): the
chart's copy of scheduler-plugins' CRD installed as rendered, `topo-scheduler run` with the
chart's RBAC (restricted token) discovering it, and what tests/kube/test_quota_cluster.py shows
over the emulator: a pod over its quota's `max` stays Pending with scheduler-plugins' message,
a pod of a namespace within its `min` reclaims from a borrower (the victim deleted by the
scheduler, the preemptor bound), and `status.used` written through the CRD's status
subresource.

On 1.20 no kubelet finishes a graceful delete, so the borrower carries
`terminationGracePeriodSeconds: 0` (the scheduler deletes victims with their own grace period);
on 1.37 it keeps the default 30 s and KWOK, as a kubelet, finishes the delete.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.realkube.api import Api, HTTPFailure, wait_for
from tests.realkube.conftest import GPU_NODES, pod
from tests.realkube.plane import Plane

Obj = dict[str, Any]
GROUP_VERSION = "scheduling.x-k8s.io/v1alpha1"
CRD = "elasticquotas.scheduling.x-k8s.io"
CRD_PATH = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD}"
PRIORITY_CLASS = "realkube-quota-borrower"
FULL = {"cpu": "64", "memory": "512Gi"}


def _gone(api: Api, path: str) -> bool:
    try:
        api.get(path)
    except HTTPFailure as err:
        if err.status == 404:
            return True
        raise
    return False


def _served(api: Api) -> bool:
    try:
        resources = api.get(f"/apis/{GROUP_VERSION}")["resources"]
    except HTTPFailure as err:
        if err.status == 404:
            return False
        raise
    return any(r["name"] == "elasticquotas" for r in resources)


@pytest.fixture(scope="module")
def elastic_quotas(cluster: Api) -> Iterator[Api]:
    """The chart's ElasticQuota CRD (`elasticQuotas.installCRD=true`), Established and served;
    removed afterwards (with any quota left) so the tier's other tests see a plane without it,
    unless it was there before."""
    from tests.ship._support import objects

    (crd,) = [
        o
        for o in objects({"elasticQuotas": {"installCRD": True}})
        if o["kind"] == "CustomResourceDefinition" and o["metadata"]["name"] == CRD
    ]
    try:
        cluster.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        installed = True
    except HTTPFailure as err:
        if err.status != 409:
            raise
        installed = False

    def established() -> bool:
        conds = cluster.get(CRD_PATH).get("status", {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conds)

    wait_for(established, 30, f"{CRD} Established")
    wait_for(lambda: _served(cluster), 30, f"elasticquotas in /apis/{GROUP_VERSION}")
    try:
        yield cluster
    finally:
        if installed:
            cluster.call("DELETE", CRD_PATH, {})
            wait_for(lambda: _gone(cluster, CRD_PATH), 60, f"{CRD} deleted")


def _make_namespace(plane: Plane, api: Api) -> str:
    """As conftest's `namespace` fixture: a fresh namespace (on 1.37, once its `default`
    service account exists)."""
    ns = f"t-{uuid.uuid4().hex[:8]}"
    api.post("/api/v1/namespaces", {"metadata": {"name": ns}})
    if plane.kwok:
        path = f"/api/v1/namespaces/{ns}/serviceaccounts/default"
        wait_for(lambda: not _gone(api, path), 30, f"service account {ns}/default")
    return ns


@pytest.fixture
def namespaces(plane: Plane, elastic_quotas: Api) -> Iterator[Callable[[], str]]:
    """Fresh namespaces on request; their quotas and pods deleted afterwards (quotas first:
    a quota left behind would change the sum of mins the next test's quotas are held to)."""
    made: list[str] = []

    def make() -> str:
        made.append(_make_namespace(plane, elastic_quotas))
        return made[-1]

    yield make
    for ns in made:
        for kind in (
            f"/apis/{GROUP_VERSION}/namespaces/{ns}/elasticquotas",
            f"/api/v1/namespaces/{ns}/pods",
        ):
            for obj in elastic_quotas.get(kind).get("items") or []:
                try:
                    elastic_quotas.delete(f"{kind}/{obj['metadata']['name']}")
                except HTTPFailure as err:
                    if err.status != 404:
                        raise


def _quota(api: Api, namespace: str, min_: Obj, max_: Obj) -> Obj:
    return api.post(
        f"/apis/{GROUP_VERSION}/namespaces/{namespace}/elasticquotas",
        {
            "apiVersion": GROUP_VERSION,
            "kind": "ElasticQuota",
            "metadata": {"name": "quota", "namespace": namespace},
            "spec": {"min": min_, "max": max_},
        },
    )


def _quota_obj(api: Api, namespace: str) -> Obj:
    return api.get(f"/apis/{GROUP_VERSION}/namespaces/{namespace}/elasticquotas/quota")


def _used(api: Api, namespace: str) -> Obj:
    return dict((_quota_obj(api, namespace).get("status") or {}).get("used") or {})


def _pod(api: Api, ns: str, name: str) -> Obj | None:
    try:
        return api.get(f"/api/v1/namespaces/{ns}/pods/{name}")
    except HTTPFailure as err:
        if err.status == 404:
            return None
        raise


def _bound(api: Api, ns: str, name: str) -> Obj | None:
    obj = _pod(api, ns, name)
    return obj if obj and obj["spec"].get("nodeName") else None


def _scheduled_condition(api: Api, ns: str, name: str) -> Obj | None:
    obj = _pod(api, ns, name) or {}
    conds = obj.get("status", {}).get("conditions") or []
    return next((c for c in conds if c["type"] == "PodScheduled"), None)


def _events(api: Api, ns: str, name: str, reason: str) -> list[Obj]:
    items = api.get(f"/apis/events.k8s.io/v1/namespaces/{ns}/events").get("items") or []
    return [e for e in items if e["regarding"]["name"] == name and e["reason"] == reason]


def _node_names(api: Api) -> list[str]:
    return sorted(n["metadata"]["name"] for n in api.get("/api/v1/nodes")["items"])


def _create(api: Api, obj: Obj) -> Obj:
    ns = obj["metadata"]["namespace"]
    return api.post(f"/api/v1/namespaces/{ns}/pods", obj)


def test_a_pod_over_its_quota_max_stays_pending_and_status_used_is_written(
    elastic_quotas: Api, namespaces: Callable[[], str], start_scheduler: Any
) -> None:
    api = elastic_quotas
    ns = namespaces()
    bound = {**FULL, "nvidia.com/gpu": "4"}
    _quota(api, ns, bound, bound)
    small = pod("small", ns, gpus=4)
    small["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"
    _create(api, small)
    sched = start_scheduler()
    wait_for(lambda: _bound(api, ns, "small"), 60, "small bound")
    _create(api, pod("big", ns, gpus=1))

    def refused() -> Obj | None:
        cond = _scheduled_condition(api, ns, "big")
        return cond if cond and cond["status"] == "False" else None

    condition = wait_for(refused, 30, "PodScheduled=False on big")
    assert condition["reason"] == "Unschedulable"
    # scheduler-plugins' wording: PreFilter's rejection, then preemption's answer per node
    # (none of the namespace's pods is of a lower priority)
    nodes = _node_names(api)
    assert condition["message"] == (
        f"0/{len(nodes)} nodes are available: Pod {ns}/big is rejected in PreFilter because "
        f"ElasticQuota {ns} is more than Max. preemption: 0/{len(nodes)} nodes are available: "
        + ", ".join(f"1 No victims found on node {n} for preemptor pod big" for n in nodes)
        + "."
    )
    (failed,) = wait_for(lambda: _events(api, ns, "big", "FailedScheduling"), 30, "an event")
    assert failed["type"] == "Warning" and failed["note"] == condition["message"]
    assert not _bound(api, ns, "big")

    # status.used: the namespace's bound pod, in quantities, through the status subresource
    wait_for(lambda: _used(api, ns).get("nvidia.com/gpu") == "4", 30, "status.used written")
    assert _used(api, ns) == {"cpu": "2", "memory": str(2**30), "nvidia.com/gpu": "4"}
    quota = _quota_obj(api, ns)
    assert quota["metadata"]["generation"] == 1  # a status write leaves spec's generation
    assert quota["spec"] == {"min": bound, "max": bound}

    # usage falls when the pod goes; then big fits its quota
    api.delete(f"/api/v1/namespaces/{ns}/pods/small")
    wait_for(lambda: _bound(api, ns, "big"), 60, "big bound once small is gone")
    wait_for(lambda: _used(api, ns).get("nvidia.com/gpu") == "1", 30, "status.used lower")
    assert _used(api, ns) == {"cpu": "1", "memory": str(2**30), "nvidia.com/gpu": "1"}
    assert "ElasticQuota status not written" not in sched.log()
    assert sched.stop() == 0


@pytest.fixture
def borrower_priority(cluster: Api) -> Iterator[str]:
    """A PriorityClass (value 1000): the Priority admission plugin rejects a bare
    `spec.priority`."""
    path = "/apis/scheduling.k8s.io/v1/priorityclasses"
    cluster.post(
        path,
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": PRIORITY_CLASS},
            "value": 1000,
        },
    )
    try:
        yield PRIORITY_CLASS
    finally:
        cluster.call("DELETE", f"{path}/{PRIORITY_CLASS}", {})


def test_a_pod_within_its_min_reclaims_from_a_borrower(
    plane: Plane,
    elastic_quotas: Api,
    namespaces: Callable[[], str],
    start_scheduler: Any,
    borrower_priority: str,
) -> None:
    api = elastic_quotas
    team_a, team_b = namespaces(), namespaces()
    bounds = ({**FULL, "nvidia.com/gpu": "4"}, {**FULL, "nvidia.com/gpu": "8"})
    for ns in (team_a, team_b):
        _quota(api, ns, *bounds)
    # team-b borrows team-a's idle guarantee: 8 GPUs against a min of 4, at priority 1000
    borrower = pod("borrower", team_b, gpus=8)
    borrower["spec"]["priorityClassName"] = borrower_priority
    if not plane.kwok:
        borrower["spec"]["terminationGracePeriodSeconds"] = 0
    created = _create(api, borrower)
    assert created["spec"]["priority"] == 1000
    sched = start_scheduler()
    borrowed = wait_for(lambda: _bound(api, team_b, "borrower"), 60, "borrower bound")
    node = borrowed["spec"]["nodeName"]
    assert node in GPU_NODES
    wait_for(lambda: _used(api, team_b).get("nvidia.com/gpu") == "8", 30, "team-b used")

    # team-a comes back for its min, at a lower priority (0) than the borrower's
    uid = _create(api, pod("owner", team_a, gpus=4))["metadata"]["uid"]
    # the first attempt: PreFilter's rejection (team-b's use is over the sum of mins), then
    # the preemption that nominates the owner (no preemption text: it found victims)
    refusal = (
        f"0/{len(_node_names(api))} nodes are available: Pod {team_a}/owner is rejected in "
        "PreFilter because total ElasticQuota used is more than min."
    )
    wait_for(
        lambda: any(
            e["note"] == refusal for e in _events(api, team_a, "owner", "FailedScheduling")
        ),
        30,
        f"a FailedScheduling event {refusal!r}",
    )
    wait_for(lambda: _pod(api, team_b, "borrower") is None, 60, "borrower preempted")
    (preempted,) = wait_for(lambda: _events(api, team_b, "borrower", "Preempted"), 30, "event")
    assert preempted["reportingController"] == "topo-scheduler"
    assert preempted["note"] == f"Preempted by pod {uid} on node {node}"
    owner = wait_for(lambda: _bound(api, team_a, "owner"), 60, "owner bound")
    assert owner["spec"]["nodeName"] == node  # the node it was nominated to
    assert owner["spec"].get("priority", 0) == 0

    # status.used follows: team-a holds its min, team-b's list emptied
    wait_for(lambda: _used(api, team_a).get("nvidia.com/gpu") == "4", 30, "team-a used")
    assert _used(api, team_a) == {"cpu": "1", "memory": str(2**30), "nvidia.com/gpu": "4"}
    wait_for(lambda: _used(api, team_b) == {}, 30, "team-b used emptied")
    assert _quota_obj(api, team_b)["status"] == {"used": {}}  # the merge patch's nulls
    assert "ElasticQuota status not written" not in sched.log()
    assert sched.stop() == 0
