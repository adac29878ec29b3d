"""The scheduling features only a current API server carries, on the 1.37 plane
(`REALKUBE_PLANE=1.37`): scheduling gates, pod-level resources (`PodLevelResources`, Beta and on
by default since 1.34), scheduler-plugins' and the annotation pod groups with KWOK nodes running
the members, preemption that respects `policy/v1` PodDisruptionBudgets (the disruption
controller of kube-controller-manager keeps their status), a WaitForFirstConsumer local volume
bound with kube-controller-manager's PV binder, and DRA: a pod with a ResourceClaim no device
satisfies left waiting, a claim template of 4 GPUs allocated, written and bound, and the same
claims allocated by kube-scheduler 1.37 for comparison.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import pytest

from tests.realkube.api import Api, HTTPFailure, wait_for
from tests.realkube.conftest import GPU_NODES, NAMESPACE, pod

pytestmark = pytest.mark.plane("1.37")

Obj = dict[str, Any]


def _get(api: Api, path: str) -> Obj | None:
    try:
        return api.get(path)
    except HTTPFailure as err:
        if err.status == 404:
            return None
        raise


def _pod(api: Api, ns: str, name: str) -> Obj:
    return api.get(f"/api/v1/namespaces/{ns}/pods/{name}")


def _node_of(api: Api, ns: str, name: str) -> str | None:
    obj = _get(api, f"/api/v1/namespaces/{ns}/pods/{name}")
    return (obj or {}).get("spec", {}).get("nodeName") or None


def _running(api: Api, ns: str, name: str) -> bool:
    obj = _get(api, f"/api/v1/namespaces/{ns}/pods/{name}")
    return bool(obj and obj["status"].get("phase") == "Running")


def _evicted(api: Api, ns: str, name: str) -> bool:
    obj = _get(api, f"/api/v1/namespaces/{ns}/pods/{name}")
    return obj is None or bool(obj["metadata"].get("deletionTimestamp"))


def _scheduled_condition(api: Api, ns: str, name: str) -> Obj | None:
    conds = _pod(api, ns, name)["status"].get("conditions") or []
    return next((c for c in conds if c["type"] == "PodScheduled"), None)


def _unschedulable(api: Api, ns: str, name: str, timeout: float = 45) -> Obj:
    """The PodScheduled=False condition topo-scheduler wrote (reason Unschedulable)."""

    def check() -> Obj | None:
        cond = _scheduled_condition(api, ns, name)
        if cond and cond["status"] == "False" and cond.get("reason") == "Unschedulable":
            return cond
        return None

    found: Obj = wait_for(check, timeout, f"{name} PodScheduled=False/Unschedulable")
    return found


def _create(api: Api, ns: str, obj: Obj) -> Obj:
    return api.post(f"/api/v1/namespaces/{ns}/pods", obj)


# -- scheduling gates ----------------------------------------------------------------------


def test_a_gated_pod_waits_until_its_gate_is_removed(
    cluster: Api, namespace: str, start_scheduler: Any
) -> None:
    sched = start_scheduler()
    wait_for(sched.ready, 60, "topo-scheduler ready")
    gated = pod("gated", namespace, gpus=2)
    gated["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    _create(cluster, namespace, gated)
    _create(cluster, namespace, pod("free", namespace, gpus=2))
    wait_for(lambda: _node_of(cluster, namespace, "free"), 45, "the ungated pod bound")
    time.sleep(3)
    assert _node_of(cluster, namespace, "gated") is None
    cond = _scheduled_condition(cluster, namespace, "gated")
    # the API server's own condition for a gated pod; topo-scheduler wrote none over it
    assert cond and (cond["status"], cond["reason"]) == ("False", "SchedulingGated")
    cluster.merge_patch(
        f"/api/v1/namespaces/{namespace}/pods/gated", {"spec": {"schedulingGates": None}}
    )
    wait_for(lambda: _running(cluster, namespace, "gated"), 45, "gated pod bound once ungated")
    assert sched.stop() == 0


# -- pod-level resources -------------------------------------------------------------------


def _pod_level(name: str, ns: str, cpu: str) -> Obj:
    obj = pod(name, ns, gpus=1)
    obj["spec"]["resources"] = {"requests": {"cpu": cpu, "memory": "2Gi"}}
    return obj


def test_pod_level_resources_are_counted(
    cluster: Api, namespace: str, start_scheduler: Any
) -> None:
    """Each node has 64 CPUs; containers ask for 1, the pods (spec.resources) for 40 or 65."""
    sched = start_scheduler()
    wait_for(sched.ready, 60, "topo-scheduler ready")
    created = _create(cluster, namespace, _pod_level("p0", namespace, "40"))
    assert created["spec"]["resources"]["requests"]["cpu"] == "40"  # served, not dropped
    for name in ("p1", "p2"):
        _create(cluster, namespace, _pod_level(name, namespace, "40"))
    nodes = [
        wait_for(partial(_node_of, cluster, namespace, name), 45, f"{name} bound")
        for name in ("p0", "p1", "p2")
    ]
    assert sorted(nodes) == sorted(GPU_NODES)  # 40 + 40 > 64: one a node
    _create(cluster, namespace, _pod_level("p3", namespace, "40"))
    _create(cluster, namespace, _pod_level("huge", namespace, "65"))
    for name in ("p3", "huge"):
        cond = _unschedulable(cluster, namespace, name)
        assert "Insufficient cpu" in cond["message"], cond
    assert sched.stop() == 0


# -- the three pod group forms -------------------------------------------------------------

SP_GROUP = "scheduling.x-k8s.io"


def _install_podgroup_crd(cluster: Api) -> None:
    """scheduler-plugins' PodGroup CRD as the chart renders it (podGroups.installCRD)."""
    from tests.ship._support import objects

    (crd,) = [
        o
        for o in objects({"podGroups": {"installCRD": True}}, namespace=NAMESPACE)
        if o["kind"] == "CustomResourceDefinition"
    ]
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    if _get(cluster, f"{path}/{crd['metadata']['name']}") is None:
        cluster.post(path, crd)

    def established() -> bool:
        obj = cluster.get(f"{path}/{crd['metadata']['name']}")
        conds = obj.get("status", {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conds) and bool(
            _get(cluster, f"/apis/{SP_GROUP}/v1alpha1")
        )

    wait_for(established, 30, "PodGroup CRD established and served")


def _gang(
    cluster: Api, namespace: str, start_scheduler: Any, member: Any, group_path: str | None
) -> None:
    """minMember 2: the first member waits (nothing bound), both run once the second exists."""
    sched = start_scheduler()
    wait_for(sched.ready, 60, "topo-scheduler ready")
    _create(cluster, namespace, member("w0"))
    cond = _unschedulable(cluster, namespace, "w0")
    assert "waiting for 1 more pod" in cond["message"], cond
    assert _node_of(cluster, namespace, "w0") is None
    _create(cluster, namespace, member("w1"))
    for name in ("w0", "w1"):
        wait_for(partial(_running, cluster, namespace, name), 60, f"{name} Running")
    if group_path:
        status = wait_for(
            lambda: (
                (cluster.get(group_path).get("status") or {}).get("phase") == "Scheduled"
                and cluster.get(group_path)["status"]
            ),
            30,
            "PodGroup status Scheduled",
        )
        assert status["scheduled"] == 2, status
    assert sched.stop() == 0


def test_gang_of_a_scheduler_plugins_podgroup(
    cluster: Api, namespace: str, start_scheduler: Any
) -> None:
    _install_podgroup_crd(cluster)
    path = f"/apis/{SP_GROUP}/v1alpha1/namespaces/{namespace}/podgroups"
    cluster.post(
        path,
        {
            "apiVersion": f"{SP_GROUP}/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "gang"},
            "spec": {"minMember": 2},
        },
    )

    def member(name: str) -> Obj:
        obj = pod(name, namespace, gpus=4)
        obj["metadata"]["labels"] = {f"{SP_GROUP}/pod-group": "gang"}
        return obj

    _gang(cluster, namespace, start_scheduler, member, f"{path}/gang")


def test_gang_of_annotated_pods(cluster: Api, namespace: str, start_scheduler: Any) -> None:
    def member(name: str) -> Obj:
        obj = pod(name, namespace, gpus=4)
        obj["metadata"]["annotations"] = {
            "topo-scheduler.io/pod-group": "gang",
            "topo-scheduler.io/min-member": "2",
        }
        return obj

    _gang(cluster, namespace, start_scheduler, member, None)


# -- preemption with PodDisruptionBudgets --------------------------------------------------


def _priority_class(cluster: Api, name: str, value: int) -> None:
    path = "/apis/scheduling.k8s.io/v1/priorityclasses"
    if _get(cluster, f"{path}/{name}") is None:
        cluster.post(
            path,
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
            },
        )


def test_preemption_spares_the_pods_a_disruption_budget_protects(
    cluster: Api, namespace: str, start_scheduler: Any
) -> None:
    """Every GPU is taken by low-priority 4-GPU pods, two a node; the pair on gpu-0 is
    protected by a PodDisruptionBudget that allows no disruption. An 8-GPU high-priority pod
    preempts a pair on another node."""
    _priority_class(cluster, "realkube-low", 10)
    _priority_class(cluster, "realkube-high", 1000)
    sched = start_scheduler()
    wait_for(sched.ready, 60, "topo-scheduler ready")
    low: dict[str, str] = {}
    for i, node in enumerate(GPU_NODES):
        for j in range(2):
            name = f"low-{i}-{j}"
            obj = pod(name, namespace, gpus=4)
            obj["metadata"]["labels"] = {"app": "protected" if i == 0 else "plain"}
            obj["spec"]["priorityClassName"] = "realkube-low"
            obj["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
            _create(cluster, namespace, obj)
            low[name] = node
    for name in low:
        wait_for(partial(_running, cluster, namespace, name), 60, f"{name} Running")
    pdb_path = f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets"
    cluster.post(
        pdb_path,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "protected"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "protected"}}},
        },
    )
    status = wait_for(
        lambda: (
            (cluster.get(f"{pdb_path}/protected").get("status") or {}).get("currentHealthy") == 2
            and cluster.get(f"{pdb_path}/protected")["status"]
        ),
        45,
        "the disruption controller counts the protected pods",
    )
    assert status["disruptionsAllowed"] == 0
    high = pod("high", namespace, gpus=8)
    high["spec"]["priorityClassName"] = "realkube-high"
    _create(cluster, namespace, high)
    node = wait_for(lambda: _node_of(cluster, namespace, "high"), 90, "high bound")
    assert node in GPU_NODES[1:], node
    victims = {name for name, n in low.items() if n == node}
    for name in victims:
        wait_for(partial(_evicted, cluster, namespace, name), 30, f"{name} evicted")
    for name in ("low-0-0", "low-0-1"):
        obj = _pod(cluster, namespace, name)
        assert not obj["metadata"].get("deletionTimestamp") and obj["status"]["phase"] == "Running"
    survivors = set(low) - victims
    for name in survivors:
        assert not _pod(cluster, namespace, name)["metadata"].get("deletionTimestamp"), name
    wait_for(lambda: _running(cluster, namespace, "high"), 60, "high Running")
    assert sched.stop() == 0


# -- WaitForFirstConsumer with a local PV --------------------------------------------------


def test_wait_for_first_consumer_local_volume_bound_through_the_pv_controller(
    cluster: Api, namespace: str, start_scheduler: Any
) -> None:
    """A local PV on gpu-1 and a claim of a WaitForFirstConsumer class: topo-scheduler
    chooses gpu-1 and the volume in VolumeBinding, kube-controller-manager's PV binder binds
    claim and volume, and the pod is bound after them."""
    sc = f"local-{namespace}"
    pv = f"pv-{namespace}"
    cluster.post(
        "/apis/storage.k8s.io/v1/storageclasses",
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": sc},
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "WaitForFirstConsumer",
        },
    )
    cluster.post(
        "/api/v1/persistentvolumes",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": pv},
            "spec": {
                "capacity": {"storage": "10Gi"},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": sc,
                "local": {"path": "/mnt/disks/vol1"},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "kubernetes.io/hostname",
                                        "operator": "In",
                                        "values": [GPU_NODES[1]],
                                    }
                                ]
                            }
                        ]
                    }
                },
            },
        },
    )
    try:
        cluster.post(
            f"/api/v1/namespaces/{namespace}/persistentvolumeclaims",
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": "data"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": sc,
                    "resources": {"requests": {"storage": "5Gi"}},
                },
            },
        )
        claim_path = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/data"
        # the PV binder leaves a WaitForFirstConsumer claim alone until a node is chosen
        time.sleep(2)
        assert cluster.get(claim_path)["status"].get("phase") == "Pending"
        sched = start_scheduler()
        wait_for(sched.ready, 60, "topo-scheduler ready")
        obj = pod("consumer", namespace, gpus=2)
        obj["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
        obj["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
        _create(cluster, namespace, obj)
        node = wait_for(lambda: _node_of(cluster, namespace, "consumer"), 90, "consumer bound")
        assert node == GPU_NODES[1]
        claim = wait_for(
            lambda: (
                cluster.get(claim_path)["status"].get("phase") == "Bound"
                and cluster.get(claim_path)
            ),
            30,
            "claim Bound",
        )
        assert claim["spec"]["volumeName"] == pv
        # a pre-provisioned volume: topo-scheduler wrote the PV's claimRef (no selected-node,
        # that is for provisioning), the PV controller completed the claim's side
        assert claim["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] == "yes"
        assert "volume.kubernetes.io/selected-node" not in claim["metadata"]["annotations"]
        volume = cluster.get(f"/api/v1/persistentvolumes/{pv}")
        assert volume["status"]["phase"] == "Bound"
        assert volume["spec"]["claimRef"]["name"] == "data"
        assert sched.stop() == 0
    finally:
        cluster.call("DELETE", f"/api/v1/namespaces/{namespace}/pods/consumer", {})
        for path in (
            f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/data",
            f"/api/v1/persistentvolumes/{pv}",
            f"/apis/storage.k8s.io/v1/storageclasses/{sc}",
        ):
            try:
                cluster.delete(path)
            except HTTPFailure as err:
                if err.status != 404:
                    raise


# -- DRA -----------------------------------------------------------------------------------

DRA = "resource.k8s.io/v1"


def _claimed_pod(cluster: Api, namespace: str) -> None:
    if _get(cluster, f"/apis/{DRA}/deviceclasses/realkube.example.com") is None:
        cluster.post(
            f"/apis/{DRA}/deviceclasses",
            {
                "apiVersion": DRA,
                "kind": "DeviceClass",
                "metadata": {"name": "realkube.example.com"},
                "spec": {},
            },
        )
    cluster.post(
        f"/apis/{DRA}/namespaces/{namespace}/resourceclaims",
        {
            "apiVersion": DRA,
            "kind": "ResourceClaim",
            "metadata": {"name": "accel"},
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "one", "exactly": {"deviceClassName": "realkube.example.com"}}
                    ]
                }
            },
        },
    )
    obj = pod("claims", namespace, gpus=0)
    obj["spec"]["resourceClaims"] = [{"name": "accel", "resourceClaimName": "accel"}]
    obj["spec"]["containers"][0]["resources"]["claims"] = [{"name": "accel"}]
    _create(cluster, namespace, obj)


def test_a_pod_with_a_resource_claim_no_device_satisfies_waits(
    cluster: Api, namespace: str, start_scheduler: Any
) -> None:
    _claimed_pod(cluster, namespace)
    sched = start_scheduler()
    cond = _unschedulable(cluster, namespace, "claims")
    # the claim exists (resource.k8s.io/v1); no ResourceSlice offers a device of its class
    assert "cannot allocate all claims" in cond["message"], cond
    assert _node_of(cluster, namespace, "claims") is None
    assert sched.stop() == 0


# A KWOK node per test with a DGX-1 topology annotation and a ResourceSlice of 8 GPU devices
# (NVIDIA's DRA driver's attributes: uuid, PCI bus id) listed in an order whose first four are
# poorly connected (busbw 8 GB/s; the best four of a DGX-1 reach 25 GB/s).
SCRAMBLED = (0, 6, 2, 5, 1, 7, 3, 4)


@pytest.fixture
def dra_nodes(plane: Any, cluster: Api) -> Any:
    from tests.dra.objects import device_class, dgx1, gpu_node, gpu_slice
    from tests.realkube.conftest import NODE_STATUS, _schedulable
    from tests.realkube.plane import KWOK_ANNOTATION

    made: list[str] = []
    if _get(cluster, f"/apis/{DRA}/deviceclasses/gpu.nvidia.com") is None:
        cluster.post(f"/apis/{DRA}/deviceclasses", device_class())

    def make(name: str) -> str:
        node = gpu_node(name, dgx1())
        node["metadata"]["annotations"].update(KWOK_ANNOTATION)
        node["status"] = NODE_STATUS["status"]
        cluster.post("/api/v1/nodes", node)
        made.append(name)
        cluster.post(f"/apis/{DRA}/resourceslices",
                     gpu_slice(name, topology=dgx1(), listed=SCRAMBLED))  # fmt: skip
        wait_for(lambda: _schedulable(cluster, name), 60, f"{name} Ready and untainted")
        return name

    yield make
    for name in made:
        for path in (f"/apis/{DRA}/resourceslices/{name}-gpu.nvidia.com", f"/api/v1/nodes/{name}"):
            try:
                cluster.delete(path)
            except HTTPFailure as err:
                if err.status != 404:
                    raise


def _template_pod(cluster: Api, namespace: str, name: str, node: str, scheduler: str) -> None:
    """A pod with a claim made from a template of 4 GPUs of `gpu.nvidia.com`, on `node`."""
    if _get(cluster, f"/apis/{DRA}/namespaces/{namespace}/resourceclaimtemplates/gpus4") is None:
        cluster.post(
            f"/apis/{DRA}/namespaces/{namespace}/resourceclaimtemplates",
            {
                "apiVersion": DRA,
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": "gpus4"},
                "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                    "deviceClassName": "gpu.nvidia.com", "count": 4}}]}}},
            },
        )  # fmt: skip
    obj = pod(name, namespace, gpus=0, scheduler=scheduler)
    obj["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    obj["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "gpus4"}]
    obj["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    _create(cluster, namespace, obj)


def _allocated_claim(cluster: Api, namespace: str, name: str, log: Any = None) -> Obj:
    """The pod's generated claim once the pod is bound (status written before the binding)."""
    try:
        wait_for(lambda: _node_of(cluster, namespace, name) is not None, 60, f"{name} bound")
    except AssertionError as exc:
        state = _pod(cluster, namespace, name).get("status")
        tail = log()[-4000:] if log is not None else ""
        raise AssertionError(f"{exc}; pod status {state}; scheduler log:\n{tail}") from None
    statuses = _pod(cluster, namespace, name)["status"].get("resourceClaimStatuses") or []
    (entry,) = statuses
    return cluster.get(
        f"/apis/{DRA}/namespaces/{namespace}/resourceclaims/{entry['resourceClaimName']}"
    )


def _gpus(claim: Obj) -> list[int]:
    results = claim["status"]["allocation"]["devices"]["results"]
    assert {r["driver"] for r in results} == {"gpu.nvidia.com"}
    return sorted(int(r["device"].removeprefix("gpu-")) for r in results)


def _busbw(gpus: list[int]) -> float:
    from scheduler.core.topology.bandwidth import bandwidth_matrix, ring_busbw
    from tests.dra.objects import dgx1

    found = ring_busbw(bandwidth_matrix(dgx1()), gpus)
    assert found is not None
    return found


def test_a_claim_template_for_four_gpus_is_allocated_written_and_bound(
    cluster: Api, namespace: str, start_scheduler: Any, dra_nodes: Any
) -> None:
    node = dra_nodes("dra-0")
    _template_pod(cluster, namespace, "trainer", node, "topo-scheduler")
    sched = start_scheduler()
    claim = _allocated_claim(cluster, namespace, "trainer", sched.log)
    uid = _pod(cluster, namespace, "trainer")["metadata"]["uid"]
    assert _node_of(cluster, namespace, "trainer") == node
    # kube-controller-manager made the claim from the template; topo-scheduler allocated it
    # (status.allocation, the finalizer) and reserved it for the pod
    gpus = _gpus(claim)
    assert len(gpus) == 4
    assert {r["pool"] for r in claim["status"]["allocation"]["devices"]["results"]} == {node}
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "trainer", "uid": uid}]
    assert "resource.kubernetes.io/delete-protection" in claim["metadata"]["finalizers"]
    # the NVLink choice: the best-connected four of the DGX-1, not the slice's first four
    assert _busbw(gpus) == 25.0, gpus
    wait_for(lambda: _running(cluster, namespace, "trainer"), 60, "trainer Running (KWOK)")
    assert "DynamicResources: ResourceClaims allocated" in sched.log()
    assert sched.stop() == 0


def test_claims_allocated_as_kube_scheduler_would_with_better_connected_devices(
    plane: Any, cluster: Api, namespace: str, start_scheduler: Any, dra_nodes: Any
) -> None:
    """The same claim template on two identical nodes: kube-scheduler 1.37 allocates on one,
    topo-scheduler on the other; both find an allocation, ours is at least as well connected."""
    ours, theirs = dra_nodes("dra-0"), dra_nodes("dra-1")
    _template_pod(cluster, namespace, "ours", ours, "topo-scheduler")
    _template_pod(cluster, namespace, "theirs", theirs, "default-scheduler")
    sched = start_scheduler()
    plane.start_scheduler()
    try:
        kube = _gpus(_allocated_claim(cluster, namespace, "theirs"))
        mine = _gpus(_allocated_claim(cluster, namespace, "ours", sched.log))
    finally:
        plane.stop_scheduler()
    assert len(kube) == len(mine) == 4
    assert _busbw(mine) >= _busbw(kube), (mine, kube)
    assert _busbw(mine) == 25.0
    assert sched.stop() == 0
