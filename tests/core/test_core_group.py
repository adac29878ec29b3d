"""The group cycle: all or nothing, waiting for members, one message per member, backoff as a
unit, required and preferred network domains, the least-free domain, mixed member shapes,
members deleted while pending, and a binding failing mid-group."""

from __future__ import annotations

from typing import Any

import pytest
from core_support import node, pod

from plugins import frameworks_for
from scheduler.core.cache import Cache
from scheduler.core.config import default_config
from scheduler.core.cycle import CycleHooks, Scheduler, drive, queue_order
from scheduler.core.framework import BindOutcome, BindResult
from scheduler.core.group import (
    GroupCycle,
    GroupError,
    GroupOutcome,
    kubernetes_group,
    ordinal,
    scheduler_plugins_group,
)
from scheduler.core.model import ModelError, NodeInfo, PodInfo
from scheduler.core.queue import SchedulingQueue, Where

RACK = "network.topology.nvidia.com/leaf"
SPINE = "network.topology.nvidia.com/spine"


def gpu_node(name: str, gpus: int = 8, **labels: str) -> dict[str, Any]:
    return node(name, cpu="64", memory="512Gi", extra={"nvidia.com/gpu": str(gpus)}, labels=labels)


def member(
    name: str,
    group: str = "llama",
    min_member: int | None = 4,
    gpus: int = 8,
    *,
    required: str | None = None,
    preferred: str | None = None,
    namespace: str = "ml",
    cpu: str = "1",
) -> dict[str, Any]:
    annotations = {"topo-scheduler.io/pod-group": group}
    if min_member is not None:
        annotations["topo-scheduler.io/min-member"] = str(min_member)
    if required:
        annotations["topo-scheduler.io/topology-required"] = required
    if preferred:
        annotations["topo-scheduler.io/topology-preferred"] = preferred
    requests = {"cpu": cpu}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    return pod(name, requests, namespace=namespace, annotations=annotations)


class Events(CycleHooks):
    def __init__(self) -> None:
        self.failures: list[tuple[str, str]] = []

    def unschedulable(self, pod: PodInfo, profile: str, message: str, elapsed: float) -> None:
        self.failures.append((pod.key, message))


class Binder:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.fail: set[str] = set()
        self.calls: list[str] = []

    async def bind(self, pod: PodInfo, node: str, gpus: tuple[int, ...]) -> BindResult:
        self.calls.append(pod.key)
        if pod.key in self.fail:
            self.fail.discard(pod.key)
            return BindResult(BindOutcome.ERROR, "injected")
        obj = self.cluster.objects[pod.key]
        obj["spec"]["nodeName"] = node
        self.cluster.cache.add_pod(PodInfo.from_object(obj))
        self.cluster.bound[pod.key] = node
        return BindResult(BindOutcome.BOUND)


class Cluster:
    """A scheduler over an in-memory cluster with the group cycle on."""

    def __init__(self, nodes: list[dict[str, Any]], levels: tuple[str, ...] = ()) -> None:
        self.now = 0.0
        config = default_config()
        frameworks = frameworks_for(config)
        self.cache = Cache()
        for n in nodes:
            self.cache.add_node(NodeInfo.from_object(n))
        self.queue: SchedulingQueue[PodInfo] = SchedulingQueue(
            lambda: self.now, sort_key=queue_order(frameworks)
        )
        self.events = Events()
        self.binder = Binder(self)
        self.sched = Scheduler(self.cache, self.queue, frameworks, self.binder, self.events)
        self.outcomes: list[GroupOutcome] = []
        self.sched.groups = GroupCycle(levels, lambda: self.now, self.outcomes.append)
        self.objects: dict[str, dict[str, Any]] = {}
        self.bound: dict[str, str] = {}

    def add(self, *objs: dict[str, Any]) -> None:
        for obj in objs:
            info = PodInfo.from_object(obj)
            self.objects[info.key] = obj
            self.sched.enqueue(info)

    def run(self) -> None:
        while (qp := self.queue.pop()) is not None:
            for decision in self.sched.schedule(qp):
                if decision.assumed is not None:
                    drive(self.sched.bind(decision.assumed))

    def nodes_of(self, *keys: str) -> set[str]:
        return {self.bound[k] for k in keys if k in self.bound}


def labels_of(cluster: Cluster, key: str, label: str) -> str:
    name = cluster.bound[key]
    info = cluster.cache.snapshot.nodes[cluster.cache.snapshot.index[name]]
    assert info is not None
    return info.labels[label]


def test_three_of_four_fit_nothing_is_bound_and_each_member_gets_one_message() -> None:
    c = Cluster([gpu_node(f"n{i}") for i in range(3)])
    c.add(*(member(f"w{i}") for i in range(4)))
    c.run()
    assert c.bound == {}
    assert c.binder.calls == []
    assert c.cache.pod_count == 0  # no assumption left behind
    keys = sorted(k for k, _ in c.events.failures)
    assert keys == [f"ml/w{i}" for i in range(4)]  # one each
    message = c.events.failures[0][1]
    assert message.startswith("pod group ml/llama: 3/4 pods fit; 0/3 nodes are available for ")
    assert "the 4th: 3 Insufficient nvidia.com/gpu." in message
    assert {m for _, m in c.events.failures} == {message}
    assert all(c.queue.where(f"ml/w{i}") is Where.UNSCHEDULABLE for i in range(4))
    # one attempt count, one backoff for the whole group
    assert len({c.queue.get(f"ml/w{i}").backoff_until for i in range(4)}) == 1  # type: ignore[union-attr]


def test_a_fourth_node_lets_the_whole_group_in() -> None:
    c = Cluster([gpu_node(f"n{i}") for i in range(3)])
    c.add(*(member(f"w{i}") for i in range(4)))
    c.run()
    c.cache.add_node(NodeInfo.from_object(gpu_node("n3")))
    from scheduler.core.queue import ClusterEvent

    c.queue.move_all(ClusterEvent.NODE_ADD)
    c.now += 100
    c.run()
    assert sorted(c.bound) == [f"ml/w{i}" for i in range(4)]
    assert len(set(c.bound.values())) == 4
    assert c.outcomes[-1].scheduled


def test_two_gangs_on_three_nodes_are_never_both_half_placed() -> None:
    c = Cluster([gpu_node(f"n{i}") for i in range(3)])
    c.add(
        *(member(f"a{i}", "a", 2) for i in range(2)), *(member(f"b{i}", "b", 2) for i in range(2))
    )
    c.run()
    a = [k for k in c.bound if "/a" in k]
    b = [k for k in c.bound if "/b" in k]
    assert sorted([len(a), len(b)]) == [0, 2]
    assert c.cache.pod_count == 2


def test_a_group_waits_for_its_members_without_a_cycle() -> None:
    c = Cluster([gpu_node(f"n{i}") for i in range(4)])
    c.add(member("w0"), member("w1"))
    c.run()
    assert c.bound == {}
    assert [m for _, m in c.events.failures] == [
        "waiting for 2 more pods of pod group ml/llama"
    ] * 2
    assert c.outcomes[-1].waiting
    c.add(member("w2"))
    c.run()
    assert c.events.failures[-1][1] == "waiting for 1 more pod of pod group ml/llama"
    c.add(member("w3"))
    c.run()
    assert len(c.bound) == 4


def test_a_member_deleted_while_pending_makes_the_group_wait() -> None:
    c = Cluster([gpu_node(f"n{i}") for i in range(3)])
    c.add(*(member(f"w{i}", min_member=3) for i in range(3)))
    c.queue.delete("ml/w1")  # deleted before its group got a cycle
    c.run()
    assert c.bound == {}
    assert c.events.failures[-1][1] == "waiting for 1 more pod of pod group ml/llama"
    c.add(member("w9", min_member=3))
    c.run()
    assert sorted(c.bound) == ["ml/w0", "ml/w2", "ml/w9"]


def test_members_beyond_min_member_that_do_not_fit_wait_alone() -> None:
    c = Cluster([gpu_node(f"n{i}") for i in range(3)])
    c.add(*(member(f"w{i}", min_member=2) for i in range(4)))
    c.run()
    assert len(c.bound) == 3
    left = [k for k, _ in c.events.failures]
    assert len(left) == 1 and left[0] not in c.bound


def test_mixed_worker_shapes() -> None:
    c = Cluster([gpu_node("big0"), gpu_node("big1"), node("cpu0", cpu="64", memory="512Gi")])
    launcher = member("launcher", min_member=3, gpus=0, cpu="32")
    c.add(launcher, member("w0", min_member=3), member("w1", min_member=3))
    c.run()
    assert len(c.bound) == 3
    assert c.bound["ml/w0"] != c.bound["ml/w1"]
    assert {c.bound["ml/w0"], c.bound["ml/w1"]} == {"big0", "big1"}


def test_binding_failure_mid_group_backs_off_with_the_group_priority() -> None:
    c = Cluster([gpu_node(f"n{i}") for i in range(4)])
    c.binder.fail.add("ml/w2")
    c.add(*(member(f"w{i}") for i in range(4)))
    qp = c.queue.pop()
    assert qp is not None
    decisions = c.sched.schedule(qp)
    assert [d.outcome for d in decisions] == ["assumed"] * 4
    for d in decisions:
        assert d.assumed is not None
        drive(c.sched.bind(d.assumed))
    assert sorted(c.bound) == ["ml/w0", "ml/w1", "ml/w3"]
    # the same backoff as any pod whose binding failed (issue #25: it was retried at once)
    assert c.queue.where("ml/w2") is Where.BACKOFF
    queued = c.queue.get("ml/w2")
    assert queued is not None and queued.backoff_until == c.queue.backoff_duration(1)
    c.run()
    assert "ml/w2" not in c.bound  # not due yet
    c.now += c.queue.backoff_duration(1)
    c.run()
    assert len(c.bound) == 4
    assert c.binder.calls.count("ml/w2") == 2
    assert all(c.binder.calls.count(k) == 1 for k in ("ml/w0", "ml/w1", "ml/w3"))


def racks(per_rack: list[int], spines: int = 2) -> list[dict[str, Any]]:
    nodes = []
    for r, count in enumerate(per_rack):
        for i in range(count):
            nodes.append(gpu_node(f"r{r}n{i}", **{RACK: f"rack{r}", SPINE: f"spine{r % spines}"}))
    return nodes


def test_required_rack_places_in_one_rack_or_nothing() -> None:
    c = Cluster(racks([3, 3, 3]), levels=(SPINE, RACK))
    c.add(*(member(f"w{i}", required=RACK) for i in range(4)))
    c.run()
    assert c.bound == {}
    message = c.events.failures[0][1]
    assert "no network.topology.nvidia.com/leaf domain holds 4 pods of the group" in message
    c2 = Cluster(racks([3, 3, 3]), levels=(SPINE, RACK))
    c2.add(*(member(f"w{i}", min_member=3, required=RACK) for i in range(3)))
    c2.run()
    assert len(c2.bound) == 3
    assert len({labels_of(c2, k, RACK) for k in c2.bound}) == 1


def test_preferred_rack_walks_up_to_the_spine() -> None:
    # racks of 2 nodes: 4 workers fit no rack, but spine0 (rack0 + rack2) holds them
    c = Cluster(racks([2, 3, 2]), levels=(SPINE, RACK))
    c.add(*(member(f"w{i}", preferred=RACK) for i in range(4)))
    c.run()
    assert len(c.bound) == 4
    assert {labels_of(c, k, SPINE) for k in c.bound} == {"spine0"}
    outcome = c.outcomes[-1]
    assert outcome.domain == (SPINE, "spine0")
    assert outcome.domain_note is not None
    assert outcome.domain_note.startswith(f"{SPINE}=spine0, topology-preferred: 4 pods")


def test_preferred_picks_the_narrowest_level_even_below_the_asked_one() -> None:
    c = Cluster(racks([4, 2, 4]), levels=(SPINE, RACK))
    c.add(*(member(f"w{i}", min_member=2, preferred=SPINE) for i in range(2)))
    c.run()
    assert len(c.bound) == 2
    assert c.outcomes[-1].domain == (RACK, "rack1")  # the rack that holds exactly 2


def test_the_least_free_domain_wins() -> None:
    c = Cluster(racks([5, 3, 4], spines=3), levels=(SPINE, RACK))
    c.add(*(member(f"w{i}", min_member=3, required=RACK) for i in range(3)))
    c.run()
    assert {labels_of(c, k, RACK) for k in c.bound} == {"rack1"}
    c.add(*(member(f"x{i}", "x", 3, required=RACK) for i in range(3)))
    c.run()
    assert {labels_of(c, k, RACK) for k in c.bound if "/x" in k} == {"rack2"}


def test_without_a_request_no_domain_is_chosen() -> None:
    c = Cluster(racks([2, 2]), levels=(SPINE, RACK))
    c.add(*(member(f"w{i}") for i in range(4)))
    c.run()
    assert len(c.bound) == 4
    assert c.outcomes[-1].domain is None


def test_required_level_keeps_members_with_those_already_bound() -> None:
    c = Cluster(racks([2, 3], spines=2), levels=(SPINE, RACK))
    c.add(*(member(f"w{i}", min_member=2, required=RACK) for i in range(2)))
    c.run()
    rack = {labels_of(c, k, RACK) for k in c.bound}
    assert rack == {"rack0"}  # 2 nodes: the least free rack that holds 2
    c.add(member("w2", min_member=2, required=RACK))
    c.run()
    assert "ml/w2" not in c.bound  # rack0 is full; rack1 would split the group


def test_group_sources_are_read_with_clear_errors() -> None:
    spec = scheduler_plugins_group(
        {
            "metadata": {"name": "job", "namespace": "ml", "uid": "u1"},
            "spec": {"minMember": 3, "scheduleTimeoutSeconds": 60, "minResources": {"cpu": "2"}},
        }
    )
    assert (spec.min_member, spec.timeout, spec.min_resources) == (3, 60.0, {"cpu": 2000})
    k8s = kubernetes_group(
        {
            "metadata": {"name": "job", "namespace": "ml"},
            "spec": {
                "schedulingPolicy": {"gang": {"minCount": 4}},
                "schedulingConstraints": {"topology": [{"key": RACK}]},
            },
        }
    )
    assert (k8s.min_member, k8s.required) == (4, RACK)
    with pytest.raises(
        GroupError, match=r"^PodGroup ml/bad: spec.minMember: must be >= 0, got -1$"
    ):
        scheduler_plugins_group(
            {"metadata": {"name": "bad", "namespace": "ml"}, "spec": {"minMember": -1}}
        )
    with pytest.raises(GroupError, match=r"spec.schedulingPolicy.gang.minCount: is required"):
        kubernetes_group(
            {
                "metadata": {"name": "b", "namespace": "ml"},
                "spec": {"schedulingPolicy": {"gang": {}}},
            }
        )
    with pytest.raises(
        ModelError,
        match=r"^Pod ml/w0: metadata.annotations.topo-scheduler.io/min-member: "
        r"must be a positive integer, got 'x'$",
    ):
        obj = member("w0")
        obj["metadata"]["annotations"]["topo-scheduler.io/min-member"] = "x"
        PodInfo.from_object(obj)
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101)] == [
        "1st",
        "2nd",
        "3rd",
        "4th",
        "11th",
        "12th",
        "13th",
        "21st",
        "22nd",
        "101st",
    ]


def labelled(name: str) -> dict[str, Any]:
    """A member of scheduler-plugins' PodGroup ml/job (the label form)."""
    obj = pod(name, {"nvidia.com/gpu": "8"}, namespace="ml")
    obj["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "job"}
    return obj


def test_crd_group_waits_until_its_podgroup_exists() -> None:
    c = Cluster([gpu_node(f"n{i}") for i in range(2)])
    assert c.sched.groups is not None
    c.sched.groups.served.add("scheduling.x-k8s.io")
    c.add(*(labelled(f"w{i}") for i in range(2)))
    c.run()
    assert c.bound == {}
    assert (
        c.events.failures[0][1] == "pod group ml/job: PodGroup.scheduling.x-k8s.io ml/job not found"
    )
    c.sched.groups.set_spec(
        scheduler_plugins_group(
            {"metadata": {"name": "job", "namespace": "ml"}, "spec": {"minMember": 2}}
        )
    )
    from scheduler.core.queue import ClusterEvent

    c.queue.move_all(ClusterEvent.CONFIG_CHANGE)
    c.now += 100
    c.run()
    assert len(c.bound) == 2


def test_schedule_timeout_is_reported() -> None:
    c = Cluster([gpu_node("n0")])
    assert c.sched.groups is not None
    c.sched.groups.served.add("scheduling.x-k8s.io")
    c.sched.groups.set_spec(
        scheduler_plugins_group(
            {
                "metadata": {"name": "job", "namespace": "ml"},
                "spec": {"minMember": 2, "scheduleTimeoutSeconds": 30},
            }
        )
    )
    c.add(*(labelled(f"w{i}") for i in range(2)))
    c.run()
    assert not c.outcomes[-1].timed_out
    from scheduler.core.queue import ClusterEvent

    c.now += 31
    c.queue.move_all(ClusterEvent.NODE_UPDATE)
    c.run()
    assert c.outcomes[-1].timed_out
    assert c.events.failures[-1][1].endswith(
        "unscheduled longer than its scheduleTimeoutSeconds (30s)"
    )


def test_min_resources_beyond_the_cluster_fail_before_placing() -> None:
    c = Cluster([gpu_node("n0"), gpu_node("n1")])
    assert c.sched.groups is not None
    c.sched.groups.served.add("scheduling.x-k8s.io")
    c.sched.groups.set_spec(
        scheduler_plugins_group(
            {
                "metadata": {"name": "job", "namespace": "ml"},
                "spec": {"minMember": 1, "minResources": {"nvidia.com/gpu": "24"}},
            }
        )
    )
    c.add(labelled("w0"))
    c.run()
    assert c.bound == {}
    assert c.events.failures == [
        (
            "ml/w0",
            "pod group ml/job: the cluster has too little free nvidia.com/gpu for its minResources",
        )
    ]


def test_a_finished_group_is_forgotten() -> None:
    c = Cluster([gpu_node(f"n{i}") for i in range(2)])
    c.add(*(member(f"w{i}", min_member=2) for i in range(2)))
    c.run()
    groups = c.sched.groups
    assert groups is not None and len(c.bound) == 2
    assert ("annotation", "ml/llama") in groups.members
    for key in list(c.bound):
        pod_info = c.cache.get(key)
        assert pod_info is not None
        c.cache.remove_pod(key)
        groups.forget(pod_info)
    assert groups.members == {} and groups.last == {}


CLIQUE = "nvidia.com/gpu.clique"


def test_walk_levels_goes_narrowest_first_with_the_nvlink_domain_first() -> None:
    from scheduler.core.domains import walk_levels

    assert walk_levels((SPINE, RACK), RACK) == [RACK, SPINE]
    assert walk_levels((SPINE, CLIQUE, RACK), SPINE) == [CLIQUE, RACK, SPINE]
    assert walk_levels((SPINE,), RACK) == [RACK, SPINE]  # an asked key not configured


def test_preferred_goes_to_one_nvlink_domain_when_one_holds_the_group() -> None:
    nodes = []
    for i in range(6):  # two NVL domains of 3 nodes in one rack, one of 2 elsewhere
        clique = "nvl-a" if i < 3 else "nvl-b"
        nodes.append(gpu_node(f"n{i}", **{RACK: "rack0", SPINE: "spine0", CLIQUE: clique}))
    nodes += [
        gpu_node(f"m{i}", **{RACK: "rack1", SPINE: "spine0", CLIQUE: "nvl-c"}) for i in range(2)
    ]
    c = Cluster(nodes, levels=(SPINE, RACK, CLIQUE))
    c.add(*(member(f"w{i}", min_member=3, preferred=SPINE) for i in range(3)))
    c.run()
    assert len(c.bound) == 3
    assert len({labels_of(c, k, CLIQUE) for k in c.bound}) == 1
    outcome = c.outcomes[-1]
    assert outcome.domain is not None and outcome.domain[0] == CLIQUE
    assert outcome.domain_note is not None and "(NVLink domain)" in outcome.domain_note


# ---------------------------------------------------------------------- issue #25: unreadable
# PodGroups, values their CRDs accept, and groups reconciled when their PodGroup changes.

X_META = {"name": "job", "namespace": "ml"}
GANG = "spec.schedulingPolicy.gang.minCount"
TOPO_KEY = "spec.schedulingConstraints.topology[0].key"
REQUIRED_ANNOTATION = "metadata.annotations.topo-scheduler.io/topology-required"

UNREADABLE_X = [
    ({"minMember": -1}, "spec.minMember", "must be >= 0, got -1"),
    ({"minMember": 2**31}, "spec.minMember", "must be <= 2147483647 (int32), got 2147483648"),
    ({"minMember": "3"}, "spec.minMember", "must be an integer, got '3'"),
    ({"minMember": 3.5}, "spec.minMember", "must be an integer, got 3.5"),
    ({"minMember": True}, "spec.minMember", "must be an integer, got True"),
    ({"scheduleTimeoutSeconds": -1}, "spec.scheduleTimeoutSeconds", "must be >= 0, got -1"),
    ({"scheduleTimeoutSeconds": 10**12}, "spec.scheduleTimeoutSeconds", "(int32)"),
    ({"scheduleTimeoutSeconds": "60"}, "spec.scheduleTimeoutSeconds", "must be an integer"),
    ({"minResources": {"cpu": "lots"}}, "spec.minResources.cpu", "quantities must match"),
    ({"minResources": {"nvidia.com/gpu": "-8"}}, "spec.minResources.nvidia.com/gpu", "negative"),
    ({"minResources": {"memory": "1e30"}}, "spec.minResources.memory", "below 2^53"),
    ({"minResources": {"cpu": {"n": 1}}}, "spec.minResources.cpu", "strings or numbers"),
    ({"minResources": ["cpu"]}, "spec.minResources", "must be a mapping"),
]


@pytest.mark.parametrize(("spec", "field", "why"), UNREADABLE_X)
def test_scheduler_plugins_fields_that_cannot_be_read_name_the_field(
    spec: dict[str, Any], field: str, why: str
) -> None:
    with pytest.raises(GroupError) as caught:
        scheduler_plugins_group({"metadata": X_META, "spec": spec})
    assert str(caught.value).startswith(f"PodGroup ml/job: {field}: ")
    assert caught.value.field == field and why in caught.value.detail


UNREADABLE_K8S = [
    ({"schedulingPolicy": {"gang": {"minCount": 0}}}, GANG, "must be >= 1, got 0"),
    ({"schedulingPolicy": {"gang": {"minCount": "2"}}}, GANG, "must be an integer"),
    ({"schedulingPolicy": {"gang": {"minCount": 2**40}}}, GANG, "(int32)"),
    ({"schedulingPolicy": {"gang": {}}}, GANG, "is required"),
    ({"schedulingConstraints": {"topology": [{"key": "rack/"}]}}, TOPO_KEY, "node label key"),
    ({"schedulingConstraints": {"topology": [{"key": "a b"}]}}, TOPO_KEY, "node label key"),
    ({"schedulingConstraints": {"topology": [{}]}}, TOPO_KEY, "node label key"),
    (
        {"schedulingConstraints": {"topology": ["rack"]}},
        "spec.schedulingConstraints.topology[0]",
        "mapping",
    ),
]


@pytest.mark.parametrize(("spec", "field", "why"), UNREADABLE_K8S)
def test_kubernetes_fields_that_cannot_be_read_name_the_field(
    spec: dict[str, Any], field: str, why: str
) -> None:
    with pytest.raises(GroupError) as caught:
        kubernetes_group({"metadata": X_META, "spec": spec})
    assert caught.value.field == field and why in caught.value.detail


@pytest.mark.parametrize("value", ["", "not a key!", "Example.com/rack", "a/b/c", "x" * 64])
def test_topology_annotations_on_podgroups_must_be_label_keys(value: str) -> None:
    meta = {**X_META, "annotations": {"topo-scheduler.io/topology-required": value}}
    for parse in (scheduler_plugins_group, kubernetes_group):
        with pytest.raises(GroupError) as caught:
            parse({"metadata": meta, "spec": {}})
        assert caught.value.field == REQUIRED_ANNOTATION


def test_values_the_crds_accept_are_read_as_scheduler_plugins_reads_them() -> None:
    def x(spec: dict[str, Any]) -> Any:
        return scheduler_plugins_group({"metadata": X_META, "spec": spec})

    # minMember 0 is Go's zero value: the same as no minMember (a group of one)
    assert x({"minMember": 0}).min_member == x({}).min_member == 1
    assert x({"minMember": 2**31 - 1}).min_member == 2**31 - 1
    # scheduleTimeoutSeconds 0: coscheduling's GetWaitTimeDuration gives a zero wait
    assert x({"scheduleTimeoutSeconds": 0}).timeout == 0.0
    assert x({"minResources": {"nvidia.com/gpu": 8, "cpu": "500m"}}).min_resources == {
        "nvidia.com/gpu": 8,
        "cpu": 500,
    }
    k8s = kubernetes_group(
        {
            "metadata": X_META,
            "spec": {"schedulingConstraints": {"topology": [{"key": " example.com/rack "}]}},
        }
    )
    assert (k8s.min_member, k8s.required) == (1, "example.com/rack")


def test_schedule_timeout_zero_is_past_at_the_first_failed_attempt() -> None:
    c = Cluster([gpu_node("n0")])
    assert c.sched.groups is not None
    c.sched.groups.served.add("scheduling.x-k8s.io")
    c.sched.groups.set_spec(
        scheduler_plugins_group(
            {"metadata": X_META, "spec": {"minMember": 2, "scheduleTimeoutSeconds": 0}}
        )
    )
    c.add(*(labelled(f"w{i}") for i in range(2)))
    c.run()
    assert c.outcomes[-1].timed_out
    assert c.events.failures[-1][1].endswith(
        "; unscheduled longer than its scheduleTimeoutSeconds (0s)"
    )


def test_an_unreadable_podgroup_drops_its_spec_and_its_members_wait_with_the_field() -> None:
    c = Cluster([gpu_node(f"n{i}") for i in range(3)])
    groups = c.sched.groups
    assert groups is not None
    groups.served.add("scheduling.x-k8s.io")
    groups.set_spec(scheduler_plugins_group({"metadata": X_META, "spec": {"minMember": 2}}))
    # edited to minMember 3 with a value that cannot be read: the old spec must not be used
    with pytest.raises(GroupError) as caught:
        scheduler_plugins_group(
            {"metadata": X_META, "spec": {"minMember": 3, "minResources": {"cpu": "lots"}}}
        )
    assert groups.set_unreadable("scheduling.x-k8s.io", "ml/job", caught.value.detail)
    assert not groups.set_unreadable("scheduling.x-k8s.io", "ml/job", caught.value.detail)
    c.add(*(labelled(f"w{i}") for i in range(2)))
    c.run()
    assert c.bound == {}  # before the fix: both bound under the stale minMember 2
    assert {m for _, m in c.events.failures} == {
        "pod group ml/job: PodGroup.scheduling.x-k8s.io ml/job cannot be read: "
        "spec.minResources.cpu: quantities must match the regular expression "
        "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$', got 'lots'"
    }
    groups.set_spec(scheduler_plugins_group({"metadata": X_META, "spec": {"minMember": 3}}))
    done = groups.reconcile(c.sched, "scheduling.x-k8s.io", "ml/job")
    assert done.pending == ("ml/w0", "ml/w1") and done.bound == ()
    c.now += 100
    c.run()
    assert c.events.failures[-1][1] == "waiting for 1 more pod of pod group ml/job"
    c.add(labelled("w2"))
    c.run()
    assert len(c.bound) == 3


def test_podgroup_deleted_with_members_bound_the_rest_wait_as_scheduler_plugins_does() -> None:
    c = Cluster([gpu_node(f"n{i}") for i in range(2)])
    groups = c.sched.groups
    assert groups is not None
    groups.served.add("scheduling.x-k8s.io")
    groups.set_spec(scheduler_plugins_group({"metadata": X_META, "spec": {"minMember": 2}}))
    c.add(*(labelled(f"w{i}") for i in range(3)))
    c.run()
    assert len(c.bound) == 2
    left = next(f"ml/w{i}" for i in range(3) if f"ml/w{i}" not in c.bound)
    assert c.queue.where(left) is Where.UNSCHEDULABLE
    groups.remove_spec("scheduling.x-k8s.io", "ml/job")
    done = groups.reconcile(c.sched, "scheduling.x-k8s.io", "ml/job")
    assert done.bound == tuple(sorted(c.bound)) and done.pending == (left,)
    assert done.action == (
        "PodGroup is gone: 2 bound member(s) left bound, 1 pending member(s) wait until it is back"
    )
    c.cache.add_node(NodeInfo.from_object(gpu_node("n2")))  # room, but no PodGroup
    c.now += 100
    c.run()
    assert left not in c.bound
    assert c.events.failures[-1] == (
        left,
        "pod group ml/job: PodGroup.scheduling.x-k8s.io ml/job not found; "
        "2 of its pods are bound, the others wait for it",
    )


def test_a_podgroup_raised_above_its_bound_members_reports_them_waiting() -> None:
    c = Cluster([gpu_node(f"n{i}") for i in range(2)])
    groups = c.sched.groups
    assert groups is not None
    groups.served.add("scheduling.x-k8s.io")
    groups.set_spec(scheduler_plugins_group({"metadata": X_META, "spec": {"minMember": 2}}))
    c.add(*(labelled(f"w{i}") for i in range(2)))
    c.run()
    assert len(c.bound) == 2 and c.outcomes[-1].scheduled
    groups.set_spec(scheduler_plugins_group({"metadata": X_META, "spec": {"minMember": 3}}))
    done = groups.reconcile(c.sched, "scheduling.x-k8s.io", "ml/job")
    assert done.pending == () and len(done.bound) == 2
    last = c.outcomes[-1]
    assert last.waiting and not last.scheduled
    assert last.message == "waiting for 1 more pod of pod group ml/job"


def test_a_required_level_no_node_has_says_so() -> None:
    c = Cluster([gpu_node(f"n{i}") for i in range(2)])
    c.add(*(member(f"w{i}", min_member=2, required="example.com/no-such-level") for i in range(2)))
    c.run()
    assert c.bound == {}
    assert c.events.failures[-1][1].endswith(": no node has the label example.com/no-such-level")


def test_a_member_goes_to_its_nominated_node_when_it_fits_there() -> None:
    # members go through the single pod's placement: the nominated node first, as kube
    c = Cluster([gpu_node(f"n{i}") for i in range(4)])
    w1 = member("w1", min_member=2)
    w1["status"] = {"nominatedNodeName": "n3"}
    c.add(member("w0", min_member=2), w1)
    c.run()
    assert c.bound == {"ml/w0": "n0", "ml/w1": "n3"}


def test_a_higher_priority_nomination_holds_its_room_against_members() -> None:
    c = Cluster([gpu_node(f"n{i}") for i in range(3)])
    other = pod("big", {"cpu": "1", "nvidia.com/gpu": "8"})
    other["spec"]["priority"] = 100
    other["status"] = {"nominatedNodeName": "n0"}
    c.sched.nominator.observe(PodInfo.from_object(other))
    c.add(*(member(f"w{i}", min_member=2) for i in range(2)))
    c.run()
    assert c.bound == {"ml/w0": "n1", "ml/w1": "n2"}
