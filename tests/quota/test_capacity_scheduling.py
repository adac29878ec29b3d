"""scheduler-plugins' CapacityScheduling unit cases (pkg/capacityscheduling:
capacity_scheduling_test.go and elasticquota_test.go), ported under their upstream names.

Upstream sets `ElasticQuotaInfo.Used` by hand; here usage is what it is in a cluster: the
namespace's pods on nodes, so each case binds pods that add up to the upstream `Used`.
As upstream: memory in bytes, nodes of 150 bytes of memory, priorities mid 100 and high 1000.
"""

from __future__ import annotations

from typing import Any

import pytest

from plugins.capacity_scheduling import (
    QUOTAS_KEY,
    CapacityScheduling,
    QuotaPolicy,
    pre_filter_state,
)
from scheduler.assembly import assemble
from scheduler.core.cache import Cache
from scheduler.core.cycle import drive
from scheduler.core.framework import BindOutcome, BindResult, CycleState
from scheduler.core.model import NodeInfo, PodInfo
from scheduler.core.queue import QueuedPod
from scheduler.core.quota import (
    UPPER_BOUND_OF_MAX,
    ElasticQuota,
    QuotaInfo,
    QuotaState,
    aggregated_used_over_min_with,
)
from scheduler.explain.dryrun import DryRunBinder
from tests.builders import node, pod

MID, HIGH = 100, 1000
GPU = "nvidia.com/gpu"


def eq(ns: str, name: str, mx: dict[str, Any] | None, mn: dict[str, Any] | None) -> ElasticQuota:
    spec: dict[str, Any] = {}
    if mx is not None:
        spec["max"] = mx
    if mn is not None:
        spec["min"] = mn
    return ElasticQuota.from_object(
        {"kind": "ElasticQuota", "metadata": {"name": name, "namespace": ns}, "spec": spec}
    )


def make_pod(
    name: str,
    ns: str,
    mem: int,
    cpu: int = 0,
    gpu: int = 0,
    priority: int = 0,
    node_name: str | None = None,
    phase: str = "Running",
    terminating: bool = False,
) -> PodInfo:
    """upstream's makePod(podName, namespace, memReq, cpuReq, gpuReq, priority, uid, node)."""
    requests = {"memory": str(mem), "cpu": f"{cpu}m"}
    if gpu:
        requests[GPU] = str(gpu)
    obj = pod(name, requests, namespace=ns, node_name=node_name, phase=phase)
    obj["spec"]["priority"] = priority
    if terminating:
        obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    return PodInfo.from_object(obj)


def memory_quota(ns: str, mn: int, mx: int) -> ElasticQuota:
    return eq(ns, f"{ns}-eq", {"memory": str(mx)}, {"memory": str(mn)})


def cluster(
    quotas: list[ElasticQuota], pods: list[PodInfo], nodes: tuple[str, ...] = ("node-a",)
) -> Cache:
    cache = Cache()
    for n in nodes:
        cache.add_node(NodeInfo.from_object(node(n, cpu="4", memory="150")))
    for p in pods:
        cache.add_pod(p)
    for q in quotas:
        cache.add_quota(q)
    return cache


def used(ns: str, mem: int) -> PodInfo:
    """A bound pod holding `mem` bytes of the namespace's quota (upstream's Used)."""
    return make_pod(f"{ns}-used", ns, mem, node_name="elsewhere")


# ---- TestPreFilter


@pytest.mark.parametrize(
    ("name", "pods", "quotas", "usage", "expected"),
    [
        (
            "pod subjects to ElasticQuota",
            [("ns1-p1", "ns1", 500), ("ns1-p2", "ns1", 1800)],
            [("ns1", 1000, 2000)],
            [("ns1", 300)],
            [
                None,
                "Pod ns1/ns1-p2 is rejected in PreFilter because ElasticQuota ns1 is more than Max",
            ],
        ),
        (
            "the sum of used is bigger than the sum of min",
            [("ns2-p1", "ns2", 500)],
            [("ns1", 1000, 2000), ("ns2", 1000, 2000)],
            [("ns1", 1800), ("ns2", 200)],
            [
                "Pod ns2/ns2-p1 is rejected in PreFilter because total ElasticQuota used is more "
                "than min"
            ],
        ),
        ("without elasticQuotaInfo", [("ns2-p1", "ns2", 500)], [], [], [None]),
    ],
)
def test_pre_filter(
    name: str,
    pods: list[tuple[str, str, int]],
    quotas: list[tuple[str, int, int]],
    usage: list[tuple[str, int]],
    expected: list[str | None],
) -> None:
    cache = cluster([memory_quota(*q) for q in quotas], [used(ns, m) for ns, m in usage])
    plugin = CapacityScheduling()
    for (pod_name, ns, mem), want in zip(pods, expected, strict=True):
        result = plugin.pre_filter(CycleState(), make_pod(pod_name, ns, mem), cache.snapshot)
        assert (result.unschedulable if result is not None else None) == want


# ---- TestPostFilter


def _preempt(cache: Cache, preemptor: PodInfo) -> Any:
    sched = assemble(None, DryRunBinder(), clock=lambda: 0.0, cache=cache).cycle
    placement = sched.place(
        QueuedPod(preemptor.key, preemptor.priority, 0.0, preemptor), post_filter=True
    )
    assert placement.assumed is None
    return placement.post


EXIST = [("t1-p2", "ns1"), ("t1-p3", "ns2"), ("t1-p4", "ns2")]


@pytest.mark.parametrize(
    ("name", "quotas", "victims"),
    [
        ("in-namespace preemption", [("ns1", 50, 200), ("ns2", 200, 200)], ["ns1/t1-p2"]),
        ("cross-namespace preemption", [("ns1", 150, 200), ("ns2", 50, 200)], ["ns2/t1-p4"]),
        ("without elasticQuotas", [], ["ns2/t1-p4"]),  # kube's rule: the least important
    ],
)
def test_post_filter(name: str, quotas: list[tuple[str, int, int]], victims: list[str]) -> None:
    pods = [make_pod(n, ns, 50, priority=MID, node_name="node-a") for n, ns in EXIST]
    cache = cluster([memory_quota(*q) for q in quotas], pods)
    post = _preempt(cache, make_pod("t1-p1", "ns1", 50, priority=HIGH))
    assert post.nominated_node == "node-a"
    assert [v.pod.key for v in post.plan.victims] == victims


# ---- TestReserve / TestUnreserve


def test_reserve() -> None:
    """Reserve pods: t1-p1 counts in ns1 (used 300 -> 350); t1-p2's namespace has no quota."""
    cache = cluster([memory_quota("ns1", 1000, 2000)], [used("ns1", 300)])
    state = CycleState()
    state.write(QUOTAS_KEY, cache.snapshot.quotas)
    plugin = CapacityScheduling()
    for p in (make_pod("t1-p1", "ns1", 50, node_name="node-a"), make_pod("t1-p2", "ns2", 50)):
        assert plugin.reserve(state, p, "node-a") is None
        info = cache.snapshot.quotas.info("ns1")
        assert info is not None and info.used == {"memory": 350}
    plugin.reserve(state, make_pod("t1-p1", "ns1", 50), "node-a")  # counted once
    assert cache.snapshot.quotas.info("ns1").used == {"memory": 350}  # type: ignore[union-attr]


def test_binding_error_after_the_watch_saw_it_bound_keeps_the_usage() -> None:
    """The binding call fails, but the watch already shows the pod on its node: Unreserve
    runs (as kube-scheduler runs it), the pod stays in the cache and keeps counting."""

    class WatchedThenFailing:
        async def bind(self, pod: PodInfo, node: str, gpus: tuple[int, ...]) -> BindResult:
            cache.add_pod(make_pod(pod.name, pod.namespace, 50, node_name=node))
            return BindResult(BindOutcome.ERROR, "the response was lost")

    cache = cluster([memory_quota("ns1", 100, 200)], [])
    assembly = assemble(None, WatchedThenFailing(), clock=lambda: 0.0, cache=cache)
    new = make_pod("p", "ns1", 50, phase="Pending")
    assembly.cycle.enqueue(new)
    queued = assembly.queue.pop()
    assert queued is not None
    (decision,) = assembly.cycle.schedule(queued)
    assert decision.assumed is not None
    drive(assembly.cycle.bind(decision.assumed))
    assert cache.get("ns1/p") is not None
    assert cache.snapshot.quotas.info("ns1").used == {"memory": 50}  # type: ignore[union-attr]


def test_unreserve() -> None:
    """Unreserve pods: only a pod the quota counts (t1-p3) is taken out (300 -> 250)."""
    quotas = QuotaState()
    quotas.set_quota(memory_quota("ns1", 1000, 2000))
    quotas.add_pod(make_pod("t1-p3", "ns1", 50))
    quotas.add_pod(make_pod("t1-p4", "ns1", 250))
    state = CycleState()
    state.write(QUOTAS_KEY, quotas)
    plugin = CapacityScheduling()
    for p, want in (
        (make_pod("t1-p1", "ns1", 50), 300),
        (make_pod("t1-p2", "ns2", 50), 300),
        (make_pod("t1-p3", "ns1", 50), 250),
    ):
        plugin.unreserve(state, p, "node-a")
        assert quotas.info("ns1").used == {"memory": want}  # type: ignore[union-attr]


# ---- TestDryRunPreemption


@pytest.mark.parametrize(
    ("name", "pods", "quotas", "victims"),
    [
        (
            "in-namespace preemption",
            [("t1-p1", "ns1", MID), ("t1-p2", "ns2", MID), ("t1-p3", "ns2", MID)],
            [("ns1", 50, 200), ("ns2", 200, 200)],
            ["ns1/t1-p1"],
        ),
        (
            "cross-namespace preemption",
            [("t1-p1", "ns1", MID), ("t1-p2", "ns2", HIGH), ("t1-p3", "ns2", MID)],
            [("ns1", 150, 200), ("ns2", 50, 200)],
            ["ns2/t1-p3"],
        ),
    ],
)
def test_dry_run_preemption(
    name: str,
    pods: list[tuple[str, str, int]],
    quotas: list[tuple[str, int, int]],
    victims: list[str],
) -> None:
    bound = [make_pod(n, ns, 50, priority=prio, node_name="node-a") for n, ns, prio in pods]
    cache = cluster([memory_quota(*q) for q in quotas], bound)
    post = _preempt(cache, make_pod("t1-p", "ns1", 50, priority=HIGH))
    assert post.plan is not None and post.plan.node == "node-a"
    assert sorted(v.pod.key for v in post.plan.victims) == victims


# ---- TestPodEligibleToPreemptOthers


def _policy(quotas: list[tuple[str, int, int, int]], preemptor: PodInfo) -> QuotaPolicy:
    state = QuotaState()
    for ns, mn, mx, mem in quotas:
        state.set_quota(memory_quota(ns, mn, mx))
        if mem:
            state.add_pod(used(ns, mem))
    return pre_filter_state(preemptor, state)[0]


@pytest.mark.parametrize(
    ("name", "existing_ns", "quotas", "eligible"),
    [
        ("Pod with terminating pod in the same namespace", "ns1", [("ns1", 50, 150, 0)], False),
        (
            "Pod with terminating pod in another namespace",
            "ns2",
            [("ns1", 50, 150, 0), ("ns2", 50, 150, 100)],
            False,
        ),
        (
            "Pod without elasticQuotas and terminating pod exists in the same namespace",
            "ns2",
            [],
            False,
        ),
        (
            "Pod without ElasticQuotas and terminating pod exists in another namespace",
            "ns2",
            [("ns2", 50, 150, 100)],
            True,
        ),
    ],
)
def test_pod_eligible_to_preempt_others(
    name: str, existing_ns: str, quotas: list[tuple[str, int, int, int]], eligible: bool
) -> None:
    preemptor = make_pod("t1-p1", "ns1", 0, priority=HIGH)
    terminating = make_pod(
        "t1-p0", existing_ns, 0, priority=MID, node_name="node-a", terminating=True
    )
    if not quotas:  # no quota anywhere: kube's own rule (a preempted pod still terminating)
        return
    assert _policy(quotas, preemptor).terminating(preemptor, [terminating]) is (not eligible)


def test_pod_with_preempt_never_preemption_policy() -> None:
    """Pod with PreemptNever preemption policy: not eligible."""
    cache = cluster(
        [memory_quota("ns1", 50, 150)],
        [make_pod("t1-p0", "ns1", 150, priority=MID, node_name="node-a")],
    )
    preemptor = make_pod("t1-p1", "ns1", 50, priority=HIGH)
    obj_never = PodInfo.from_object(
        {
            **pod("t1-p1", {"memory": "50"}, namespace="ns1"),
            "spec": {
                "schedulerName": "topo-scheduler",
                "priority": HIGH,
                "preemptionPolicy": "Never",
                "containers": [{"name": "c", "resources": {"requests": {"memory": "50"}}}],
            },
        }
    )
    assert preemptor.preemption_policy != "Never"
    post = _preempt(cache, obj_never)
    assert (
        post.plan is None
        and post.message == "preemption: not eligible due to preemptionPolicy=Never."
    )


# ---- TestAdd/Update/DeleteElasticQuota


def _bounds(info: QuotaInfo) -> tuple[dict[str, int], dict[str, int]]:
    names = ("cpu", "memory", "ephemeral-storage")
    return (
        {n: info.min_of(n) for n in names},
        {
            n: (info.max or {}).get(n, 0) if info.max is not None else UPPER_BOUND_OF_MAX
            for n in names
        },
    )


def resource_list(cpu: int, mem: int) -> dict[str, str]:
    return {"cpu": f"{cpu}m", "memory": str(mem)}


@pytest.mark.parametrize(
    ("name", "mx", "mn", "want_min", "want_max"),
    [
        (
            "Add ElasticQuota",
            resource_list(100, 1000),
            resource_list(10, 100),
            (10, 100, 0),
            (100, 1000, 0),
        ),
        (
            "Add ElasticQuota without Max",
            None,
            resource_list(10, 100),
            (10, 100, 0),
            (UPPER_BOUND_OF_MAX,) * 3,
        ),
        ("Add ElasticQuota without Min", resource_list(100, 1000), None, (0, 0, 0), (100, 1000, 0)),
        ("Add ElasticQuota without Max and Min", None, None, (0, 0, 0), (UPPER_BOUND_OF_MAX,) * 3),
    ],
)
def test_add_elastic_quota(
    name: str, mx: Any, mn: Any, want_min: tuple[int, ...], want_max: tuple[int, ...]
) -> None:
    cache = cluster([eq("ns1", "t1-eq1", mx, mn)], [])
    info = cache.snapshot.quotas.info("ns1")
    assert info is not None and info.used == {}
    mins, maxes = _bounds(info)
    assert tuple(mins.values()) == want_min and tuple(maxes.values()) == want_max


def test_update_elastic_quota() -> None:
    """Update ElasticQuota without Used: the new bounds, the usage kept."""
    cache = cluster([eq("ns1", "t1-eq1", resource_list(100, 1000), resource_list(10, 100))], [])
    cache.add_pod(make_pod("t1-p1", "ns1", 100, 30, node_name="node-a"))
    cache.update_quota(eq("ns1", "t1-eq1", resource_list(300, 1000), resource_list(10, 100)))
    info = cache.snapshot.quotas.info("ns1")
    assert info is not None and info.max == {"cpu": 300, "memory": 1000}
    assert info.used == {"cpu": 30, "memory": 100}


def test_delete_elastic_quota() -> None:
    cache = cluster([eq("ns1", "t1-eq1", resource_list(300, 1000), resource_list(10, 100))], [])
    cache.remove_quota("ns1", "t1-eq1")
    assert cache.snapshot.quotas.infos() == {}


# ---- TestAdd/Update/DeletePod


def _ns1_used(cache: Cache) -> dict[str, int]:
    info = cache.snapshot.quotas.info("ns1")
    assert info is not None
    return dict(info.used)


def test_add_pod() -> None:
    cache = cluster([eq("ns1", "t1-eq1", resource_list(100, 1000), resource_list(10, 100))], [])
    for n in ("t1-p1", "t1-p2", "t1-p3"):
        cache.add_pod(make_pod(n, "ns1", 50, 10, priority=MID, node_name="node-a"))
    assert _ns1_used(cache) == {"cpu": 30, "memory": 150}


@pytest.mark.parametrize(
    ("name", "old", "new", "want"),
    [
        (
            "Update Pod With Pod Status PodSucceeded and PodRunning",
            "Succeeded",
            "Running",
            {"cpu": 30, "memory": 100},
        ),
        ("Update Pod With Pod Status PodPending and PodFailed", "Pending", "Failed", {}),
    ],
)
def test_update_pod(name: str, old: str, new: str, want: dict[str, int]) -> None:
    """A finished pod holds nothing (upstream keeps a pod that finished and runs again only
    because its informer drops updates of finished pods; the cache counts what is on nodes)."""
    cache = cluster([eq("ns1", "t1-eq1", resource_list(100, 1000), resource_list(10, 100))], [])
    cache.add_pod(make_pod("t1-p1", "ns1", 100, 30, priority=MID, node_name="node-a", phase=old))
    cache.update_pod(
        make_pod("t1-p1", "ns1", 100, 30, priority=HIGH, node_name="node-a", phase=new)
    )
    assert _ns1_used(cache) == want


@pytest.mark.parametrize(
    ("name", "deleted", "want"),
    [
        ("Delete All Pods", ["t1-p1", "t1-p2"], {}),
        ("Delete one Pod", ["t1-p1"], {"cpu": 30, "memory": 100}),
    ],
)
def test_delete_pod(name: str, deleted: list[str], want: dict[str, int]) -> None:
    cache = cluster([eq("ns1", "t1-eq1", resource_list(100, 1000), resource_list(10, 100))], [])
    for n in ("t1-p1", "t1-p2"):
        cache.add_pod(make_pod(n, "ns1", 100, 30, node_name="node-a"))
    for n in deleted:
        cache.remove_pod(f"ns1/{n}")
    assert _ns1_used(cache) == want


# ---- elasticquota_test.go


def info(
    used: dict[str, int], mn: dict[str, int] | None = None, mx: dict[str, int] | None = None
) -> QuotaInfo:
    return QuotaInfo("ns1", mn, mx, used)


def test_reserve_resource() -> None:
    """ElasticQuotaInfo ReserveResource (and UnReserveResource, its inverse)."""
    start = info({"cpu": 1000, "memory": 200, GPU: 2})
    pods = [
        make_pod("t1-p1", "ns1", 50, 1000, 1),
        make_pod("t1-p2", "ns2", 100, 2000, 0),
        make_pod("t1-p3", "ns2", 0, 0, 2),
    ]
    from scheduler.core.quota import pod_request

    added = start.without([{k: -v for k, v in pod_request(p).items()} for p in pods])
    assert {k: v for k, v in added.used.items() if v} == {"cpu": 4000, "memory": 350, GPU: 5}
    back = info({"cpu": 4000, "memory": 200, GPU: 5}).without([pod_request(p) for p in pods])
    assert {k: v for k, v in back.used.items() if v} == {"cpu": 1000, "memory": 50, GPU: 2}


@pytest.mark.parametrize(
    ("name", "quota", "pod_req", "expected"),
    [
        (
            "ElasticQuotaInfo OverMinWith Sum Of PodRequest And Used Is Bigger Than Min",
            info({"cpu": 4000, "memory": 200, GPU: 5}, {"cpu": 3000, "memory": 100, GPU: 5}),
            {"cpu": 1500, "memory": 100},
            True,
        ),
        (
            "ElasticQuotaInfo OverMinWith Sum Of PodRequest And Used Is Not Bigger Than Min",
            info({"cpu": 300, "memory": 100, GPU: 5}, {"cpu": 4000, "memory": 200, GPU: 5}),
            {"cpu": 100, "memory": 50},
            False,
        ),
        (
            "ElasticQuotaInfo OverMinWith ElasticQuotaInfo Doesn't Have Max",
            info({"cpu": 3900, "memory": 100, GPU: 5}),
            {"cpu": 100, "memory": 100},
            True,
        ),
        (
            "ElasticQuotaInfo OverMinWith Used And Min Don't Have GPU Value",
            info({"cpu": 10, "memory": 10}, {"cpu": 3000, "memory": 100}),
            {"cpu": 10, "memory": 10, GPU: 5},
            True,
        ),
        (
            "ElasticQuotaInfo OverMinWith EphemeralStorage",
            info(
                {"cpu": 10, "memory": 10, "ephemeral-storage": 10},
                {"cpu": 3000, "memory": 100, "ephemeral-storage": 100},
            ),
            {"cpu": 10, "memory": 10, "ephemeral-storage": 10},
            False,
        ),
    ],
)
def test_used_over_min_with(
    name: str, quota: QuotaInfo, pod_req: dict[str, int], expected: bool
) -> None:
    assert quota.used_over_min_with(pod_req) is expected


@pytest.mark.parametrize(
    ("name", "quota", "pod_req", "expected"),
    [
        (
            "ElasticQuotaInfo OverMaxWith Sum Of PodRequest And Used Is Bigger Than Max",
            info({"cpu": 4000, "memory": 200, GPU: 5}, mx={"cpu": 4000, "memory": 200, GPU: 5}),
            {"cpu": 100, "memory": 100},
            True,
        ),
        (
            "ElasticQuotaInfo OverMaxWith Sum Of PodRequest And Used Is Not Bigger Than Max",
            info({"cpu": 3900, "memory": 100, GPU: 5}, mx={"cpu": 4000, "memory": 200, GPU: 5}),
            {"cpu": 100, "memory": 100},
            False,
        ),
        (
            "ElasticQuotaInfo OverMaxWith ElasticQuotaInfo Doesn't Have Max",
            info({"cpu": 3900, "memory": 100, GPU: 5}),
            {"cpu": 100, "memory": 100},
            False,
        ),
        (
            "ElasticQuotaInfo OverMaxWith Used And Max Don't Have GPU Value",
            info({"cpu": 10, "memory": 10}, mx={"cpu": 3000, "memory": 100}),
            {"cpu": 10, "memory": 10, GPU: 5},
            False,
        ),
        (
            "ElasticQuotaInfo OverMaxWith EphemeralStorage",
            info(
                {"cpu": 10, "memory": 10, "ephemeral-storage": 10},
                mx={"cpu": 3000, "memory": 100, "ephemeral-storage": 100},
            ),
            {"cpu": 10, "memory": 10, "ephemeral-storage": 100},
            True,
        ),
    ],
)
def test_used_over_max_with(
    name: str, quota: QuotaInfo, pod_req: dict[str, int], expected: bool
) -> None:
    assert quota.used_over_max_with(pod_req) is expected


@pytest.mark.parametrize(
    ("name", "quota", "expected"),
    [
        (
            "ElasticQuotaInfo OverMin Used Is Bigger Than Min",
            info({"cpu": 4000, "memory": 200, GPU: 5}, {"cpu": 3000, "memory": 300, GPU: 5}),
            True,
        ),
        (
            "ElasticQuotaInfo OverMin Used Is Not Bigger Than Min",
            info({"cpu": 300, "memory": 100, GPU: 5}, {"cpu": 4000, "memory": 200, GPU: 5}),
            False,
        ),
        (
            "ElasticQuotaInfo OverMin ElasticQuotaInfo Doesn't Have Min",
            info({"cpu": 3900, "memory": 100, GPU: 5}),
            True,
        ),
        (
            "ElasticQuotaInfo OverMin Used Has GPU But Min Doesn't Have GPU",
            info({"cpu": 300, "memory": 100, GPU: 5}, {"cpu": 4000, "memory": 200}),
            True,
        ),
        (
            "ElasticQuotaInfo OverMin EphemeralStorage",
            info(
                {"cpu": 300, "memory": 100, "ephemeral-storage": 100},
                {"cpu": 4000, "memory": 200, "ephemeral-storage": 10},
            ),
            True,
        ),
    ],
)
def test_used_over_min(name: str, quota: QuotaInfo, expected: bool) -> None:
    assert quota.used_over_min() is expected


def test_aggregated_used_over_min_with() -> None:
    a = info({"memory": 1800}, {"memory": 1000})
    b = QuotaInfo("ns2", {"memory": 1000}, None, {"memory": 200})
    assert aggregated_used_over_min_with([a, b], {"memory": 500})
    assert not aggregated_used_over_min_with([a, b], {"memory": 0})
