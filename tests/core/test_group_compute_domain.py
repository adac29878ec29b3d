"""Pod groups and what their members hold: members whose ResourceClaims name one ComputeDomain
(NVIDIA's DRA driver) go to one NVLink domain (every member on a node with the same
`nvidia.com/gpu.clique`); each member's claims and quota are held before the next member is
placed; a group is checked against its ElasticQuota as a whole."""

from __future__ import annotations

from typing import Any

from test_core_group import Binder, Cluster, gpu_node, member

from scheduler.core.domains import NVLINK_CLIQUE, compute_domain
from scheduler.core.dra.state import DRA_KINDS, write_claim_in_memory
from scheduler.core.dra.types import AllocationResult, ResourceClaim
from scheduler.core.model import NodeInfo, PodInfo
from scheduler.core.quota import ElasticQuota
from tests.dra import objects as dra_objects

V1 = "resource.k8s.io/v1"
CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"
DRIVER = "compute-domain.nvidia.com"


class ClaimBinder(Binder):
    async def write_claim_status(
        self, claim: ResourceClaim, allocation: AllocationResult | None, pod: PodInfo
    ) -> ResourceClaim | None:
        dra = self.cluster.cache.snapshot.storage.dra
        return write_claim_in_memory(dra, claim, allocation, pod.name, pod.uid)


def channel_slice(node: str) -> dict[str, Any]:
    """The ComputeDomain kubelet plugin's channel device on a node."""
    return {
        "apiVersion": V1,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "channel-0", "attributes": {"type": {"string": "channel"}}}],
        },
    }


def channel_claim(name: str, domain: str | None) -> dict[str, Any]:
    """What the controller's ResourceClaimTemplate for a ComputeDomain makes (or, without a
    domain, a plain channel claim)."""
    devices: dict[str, Any] = {
        "requests": [{"name": "channel", "exactly": {"deviceClassName": CHANNEL_CLASS}}]
    }
    if domain is not None:
        devices["config"] = [
            {
                "requests": ["channel"],
                "opaque": {
                    "driver": DRIVER,
                    "parameters": {
                        "apiVersion": "resource.nvidia.com/v1beta1",
                        "kind": "ComputeDomainChannelConfig",
                        "domainID": domain,
                    },
                },
            }
        ]
    return {
        "apiVersion": V1,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "resourceVersion": "1"},
        "spec": {"devices": devices},
    }


def cluster(cliques: dict[str, list[str]], *, labelled: bool = True) -> Cluster:
    nodes = []
    for clique, names in cliques.items():
        for name in names:
            obj = gpu_node(name)
            if labelled:
                obj["metadata"].setdefault("labels", {})[NVLINK_CLIQUE] = clique
            nodes.append(obj)
    c = Cluster(nodes)
    c.binder = ClaimBinder(c)
    c.sched.binder = c.binder
    storage = c.cache.snapshot.storage
    storage.add(
        DRA_KINDS["DeviceClass"].from_object(
            {
                "apiVersion": V1,
                "kind": "DeviceClass",
                "metadata": {"name": CHANNEL_CLASS},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
            }
        )
    )
    for _, names in cliques.items():
        for name in names:
            storage.add(DRA_KINDS["ResourceSlice"].from_object(channel_slice(name)))
    return c


def cd_member(c: Cluster, name: str, min_member: int, domain: str | None) -> dict[str, Any]:
    obj = member(name, min_member=min_member)
    obj["spec"]["resourceClaims"] = [{"name": "channel", "resourceClaimName": f"{name}-channel"}]
    claim = channel_claim(f"{name}-channel", domain)
    c.cache.snapshot.storage.add(ResourceClaim.from_object(claim))
    return obj


CLIQUES = {"nvl72-a": ["a0", "a1"], "nvl72-b": ["b0", "b1", "b2"]}


def clique_of(c: Cluster, node: str) -> str:
    info = c.cache.snapshot.nodes[c.cache.snapshot.index[node]]
    assert info is not None
    return info.labels[NVLINK_CLIQUE]


def test_members_naming_one_compute_domain_share_a_clique() -> None:
    c = cluster(CLIQUES)
    c.add(*(cd_member(c, f"w{i}", 3, "cd-uid-1") for i in range(3)))
    c.run()
    assert len(c.bound) == 3
    assert {clique_of(c, n) for n in c.bound.values()} == {"nvl72-b"}
    outcome = c.outcomes[-1]
    assert outcome.scheduled
    assert outcome.domain == (NVLINK_CLIQUE, "nvl72-b")
    assert outcome.spec.compute_domain == "cd-uid-1"
    assert outcome.domain_note is not None
    assert "ComputeDomain cd-uid-1: topology-required" in outcome.domain_note
    claims = c.cache.snapshot.storage.dra
    assert all(claims.claim("ml", f"w{i}-channel").allocation is not None for i in range(3))


def test_no_clique_holds_the_group() -> None:
    c = cluster(CLIQUES)
    c.add(*(cd_member(c, f"w{i}", 4, "cd-uid-1") for i in range(4)))
    c.run()
    assert not c.bound
    message = c.events.failures[-1][1]
    assert message.startswith(
        "pod group ml/llama: no NVLink domain holds 4 pods of the group "
        "(ComputeDomain cd-uid-1: topology-required nvidia.com/gpu.clique)"
    )


def test_nodes_without_the_clique_label() -> None:
    c = cluster(CLIQUES, labelled=False)
    c.add(*(cd_member(c, f"w{i}", 2, "cd-uid-1") for i in range(2)))
    c.run()
    assert not c.bound
    assert c.events.failures[-1][1].startswith(
        "pod group ml/llama: no NVLink domain holds 2 pods of the group "
        "(ComputeDomain cd-uid-1: topology-required nvidia.com/gpu.clique): "
        "no node has the label nvidia.com/gpu.clique"
    )


def test_claims_without_a_compute_domain_leave_the_group_free() -> None:
    c = cluster(CLIQUES)
    c.add(*(cd_member(c, f"w{i}", 4, None) for i in range(4)))
    c.run()
    assert len(c.bound) == 4  # across both cliques: nothing asked for one NVLink domain
    assert {clique_of(c, n) for n in c.bound.values()} == {"nvl72-a", "nvl72-b"}
    assert c.outcomes[-1].spec.compute_domain == ""


def test_a_pod_outside_a_group_is_not_constrained() -> None:
    c = cluster(CLIQUES, labelled=False)
    obj = cd_member(c, "solo", 1, "cd-uid-1")
    del obj["metadata"]["annotations"]["topo-scheduler.io/pod-group"]
    del obj["metadata"]["annotations"]["topo-scheduler.io/min-member"]
    c.add(obj)
    c.run()
    assert "ml/solo" in c.bound


def test_compute_domain_reads_the_claims_configuration() -> None:
    c = cluster(CLIQUES)
    pods = [PodInfo.from_object(cd_member(c, "x", 2, None))]
    dra = c.cache.snapshot.storage.dra
    assert compute_domain(pods, dra) is None
    pods.append(PodInfo.from_object(cd_member(c, "y", 2, "cd-uid-7")))
    assert compute_domain(pods, dra) == "cd-uid-7"
    missing = member("z", min_member=2)
    missing["spec"]["resourceClaims"] = [{"name": "c", "resourceClaimName": "nope"}]
    assert compute_domain([PodInfo.from_object(missing)], dra) is None


def gpu_claim_cluster() -> Cluster:
    """One node whose 8 GPUs are published only as DRA devices."""
    c = cluster({"nvl72-a": []})
    c.cache.add_node(NodeInfo.from_object(dra_objects.gpu_node("g0")))
    storage = c.cache.snapshot.storage
    storage.add(DRA_KINDS["DeviceClass"].from_object(dra_objects.device_class()))
    storage.add(DRA_KINDS["ResourceSlice"].from_object(dra_objects.gpu_slice("g0")))
    return c


def gpu_member(c: Cluster, name: str, min_member: int) -> dict[str, Any]:
    obj = member(name, min_member=min_member, gpus=0, cpu="100m")
    obj["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": f"{name}-gpus"}]
    made = dra_objects.claim(f"{name}-gpus", dra_objects.request(count=4), namespace="ml")
    c.cache.snapshot.storage.add(ResourceClaim.from_object(made))
    return obj


def devices_of(c: Cluster, name: str) -> set[str]:
    allocation = c.cache.snapshot.storage.dra.claim("ml", f"{name}-gpus").allocation
    assert allocation is not None
    return {r.device for r in allocation.devices}


def test_members_claiming_gpus_on_one_node_get_disjoint_devices() -> None:
    c = gpu_claim_cluster()
    c.add(gpu_member(c, "w0", 2), gpu_member(c, "w1", 2))
    c.run()
    assert c.bound == {"ml/w0": "g0", "ml/w1": "g0"}
    assert len(devices_of(c, "w0")) == len(devices_of(c, "w1")) == 4
    assert not devices_of(c, "w0") & devices_of(c, "w1")


def test_a_group_that_does_not_fit_leaves_no_device_held() -> None:
    c = gpu_claim_cluster()
    c.add(*(gpu_member(c, f"w{i}", 3) for i in range(3)))  # 12 GPUs asked of 8
    c.run()
    assert not c.bound
    dra = c.cache.snapshot.storage.dra
    assert all(dra.claim("ml", f"w{i}-gpus").allocation is None for i in range(3))
    solo = gpu_member(c, "solo", 1)
    del solo["metadata"]["annotations"]["topo-scheduler.io/pod-group"]
    del solo["metadata"]["annotations"]["topo-scheduler.io/min-member"]
    solo["spec"]["resourceClaims"][0]["resourceClaimName"] = "solo-gpus"
    c.add(solo)
    c.run()
    assert c.bound.get("ml/solo") == "g0"  # the group's trial allocations were released


def test_a_group_over_its_quota_is_refused_as_a_whole() -> None:
    c = Cluster([gpu_node("n0"), gpu_node("n1")])
    c.cache.add_quota(
        ElasticQuota.from_object(
            {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "ElasticQuota",
                "metadata": {"name": "team", "namespace": "ml"},
                "spec": {"max": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "1Ti"}},
            }
        )
    )
    c.add(*(member(f"w{i}", min_member=2) for i in range(2)))  # 16 GPUs, max 8
    c.run()
    assert not c.bound
    message = c.events.failures[-1][1]
    assert message.startswith(
        "PodGroup ml/llama (2 pending pods) is rejected in PreFilter because ElasticQuota ml "
        "is more than Max preemption: "  # reclaim was tried for the whole group
    )
    assert c.cache.snapshot.quotas.info("ml").used.get("nvidia.com/gpu", 0) == 0  # type: ignore[union-attr]
