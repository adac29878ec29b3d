"""Upstream kube-scheduler noderesources plugin cases, ported as data.

Sources (kube-scheduler, pkg/scheduler/framework/plugins/noderesources): fit_test.go
(TestEnoughRequests, TestNotEnoughRequests, TestStorageRequests, TestFitScore),
least_allocated_test.go, most_allocated_test.go, requested_to_capacity_ratio_test.go and
balanced_allocation_test.go. Quantities are written the way the upstream tests build them:
``cpu: "4000"`` is 4000 cores, a bare memory number is bytes.
"""

from __future__ import annotations

from typing import Any

import pytest
from core_support import cache_of, container, filter_reasons, node, plugin_scores, pod, pod_info

from plugins import balanced_allocation, node_resources_fit
from plugins._args import ResourceSpec
from scheduler.core.config import ConfigError
from scheduler.core.model import PodInfo

EXT_A = "example.com/aaa"
EXT_B = "example.com/bbb"
KUBE_IO_A = "kubernetes.io/something"
KUBE_IO_B = "subdomain.kubernetes.io/something"
HUGE_A = "hugepages-2Mi"


def res(cpu_milli: int = 0, memory: int = 0, **scalars: int) -> dict[str, str]:
    """framework.Resource{MilliCPU, Memory, ScalarResources} as a requests mapping."""
    out = {"cpu": f"{cpu_milli}m", "memory": str(memory)}
    names = {
        "ext_a": EXT_A,
        "ext_b": EXT_B,
        "kio_a": KUBE_IO_A,
        "kio_b": KUBE_IO_B,
        "huge_a": HUGE_A,
        "storage": "ephemeral-storage",
    }
    for key, value in scalars.items():
        out[names[key]] = str(value)
    return out


def resource_pod(
    name: str,
    *usage: dict[str, str],
    init: tuple[dict[str, str], ...] = (),
    overhead: dict[str, str] | None = None,
    node_name: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if overhead:
        spec["overhead"] = overhead
    return pod(
        name,
        containers=[container(f"c{i}", requests=u) for i, u in enumerate(usage)],
        init_containers=[container(f"i{i}", requests=u) for i, u in enumerate(init)],
        node_name=node_name,
        spec=spec,
    )


def fit_node(pods: int = 32) -> dict[str, Any]:
    # makeAllocatableResources(10, 20, 32, 5, 20, 5)
    return node(
        "n",
        cpu="10m",
        memory="20",
        pods=pods,
        extra={EXT_A: "5", "ephemeral-storage": "20", HUGE_A: "5"},
    )


def ins(*names: str) -> list[str]:
    return [f"Insufficient {n}" for n in names]


# (name, pod, existing usage on the node, fit args, expected reasons)
ENOUGH_REQUESTS: list[tuple[str, dict[str, Any], dict[str, str], dict[str, Any], list[str]]] = [
    ("no resources requested always fits", pod("p", containers=[]), res(10, 20), {}, []),
    (
        "too many resources fails",
        resource_pod("p", res(1, 1)),
        res(10, 20),
        {},
        ins("cpu", "memory"),
    ),
    (
        "too many resources fails due to init container cpu",
        resource_pod("p", res(1, 1), init=(res(3, 1),)),
        res(8, 19),
        {},
        ins("cpu"),
    ),
    (
        "too many resources fails due to highest init container cpu",
        resource_pod("p", res(1, 1), init=(res(3, 1), res(2, 1))),
        res(8, 19),
        {},
        ins("cpu"),
    ),
    (
        "too many resources fails due to init container memory",
        resource_pod("p", res(1, 1), init=(res(1, 3),)),
        res(9, 19),
        {},
        ins("memory"),
    ),
    (
        "too many resources fails due to highest init container memory",
        resource_pod("p", res(1, 1), init=(res(1, 3), res(1, 2))),
        res(9, 19),
        {},
        ins("memory"),
    ),
    (
        "init container fits because it's the max, not sum, of containers and init containers",
        resource_pod("p", res(1, 1), init=(res(1, 1),)),
        res(9, 19),
        {},
        [],
    ),
    (
        "multiple init containers fit because it's the max, not sum",
        resource_pod("p", res(1, 1), init=(res(1, 1), res(1, 1))),
        res(9, 19),
        {},
        [],
    ),
    ("both resources fit", resource_pod("p", res(1, 1)), res(5, 5), {}, []),
    ("one resource memory fits", resource_pod("p", res(2, 1)), res(9, 5), {}, ins("cpu")),
    ("one resource cpu fits", resource_pod("p", res(1, 2)), res(5, 19), {}, ins("memory")),
    ("equal edge case", resource_pod("p", res(5, 1)), res(5, 19), {}, []),
    (
        "equal edge case for init container",
        resource_pod("p", res(4, 1), init=(res(5, 1),)),
        res(5, 19),
        {},
        [],
    ),
    ("extended resource fits", resource_pod("p", {EXT_A: "1"}), {}, {}, []),
    (
        "extended resource fits for init container",
        resource_pod("p", {}, init=({EXT_A: "1"},)),
        {},
        {},
        [],
    ),
    (
        "extended resource capacity enforced",
        resource_pod("p", res(1, 1, ext_a=10)),
        res(0, 0, ext_a=0),
        {},
        ins(EXT_A),
    ),
    (
        "extended resource capacity enforced for init container",
        resource_pod("p", {}, init=(res(1, 1, ext_a=10),)),
        res(0, 0, ext_a=0),
        {},
        ins(EXT_A),
    ),
    (
        "extended resource allocatable enforced",
        resource_pod("p", res(1, 1, ext_a=1)),
        res(0, 0, ext_a=5),
        {},
        ins(EXT_A),
    ),
    (
        "extended resource allocatable enforced for init container",
        resource_pod("p", {}, init=(res(1, 1, ext_a=1),)),
        res(0, 0, ext_a=5),
        {},
        ins(EXT_A),
    ),
    (
        "extended resource allocatable enforced for multiple containers",
        resource_pod("p", res(1, 1, ext_a=3), res(1, 1, ext_a=3)),
        res(0, 0, ext_a=2),
        {},
        ins(EXT_A),
    ),
    (
        "extended resource allocatable admits multiple init containers",
        resource_pod("p", {}, init=(res(1, 1, ext_a=3), res(1, 1, ext_a=3))),
        res(0, 0, ext_a=2),
        {},
        [],
    ),
    (
        "extended resource allocatable enforced for multiple init containers",
        resource_pod("p", {}, init=(res(1, 1, ext_a=6), res(1, 1, ext_a=3))),
        res(0, 0, ext_a=2),
        {},
        ins(EXT_A),
    ),
    (
        "extended resource allocatable enforced for unknown resource",
        resource_pod("p", res(1, 1, ext_b=1)),
        res(0, 0),
        {},
        ins(EXT_B),
    ),
    (
        "extended resource allocatable enforced for unknown resource for init container",
        resource_pod("p", {}, init=(res(1, 1, ext_b=1),)),
        res(0, 0),
        {},
        ins(EXT_B),
    ),
    (
        "kubernetes.io resource capacity enforced",
        resource_pod("p", res(1, 1, kio_a=10)),
        res(0, 0),
        {},
        ins(KUBE_IO_A),
    ),
    (
        "kubernetes.io resource capacity enforced for init container",
        resource_pod("p", {}, init=(res(1, 1, kio_b=10),)),
        res(0, 0),
        {},
        ins(KUBE_IO_B),
    ),
    (
        "hugepages resource capacity enforced",
        resource_pod("p", res(1, 1, huge_a=10)),
        res(0, 0, huge_a=0),
        {},
        ins(HUGE_A),
    ),
    (
        "hugepages resource capacity enforced for init container",
        resource_pod("p", {}, init=(res(1, 1, huge_a=10),)),
        res(0, 0, huge_a=0),
        {},
        ins(HUGE_A),
    ),
    (
        "hugepages resource allocatable enforced for multiple containers",
        resource_pod("p", res(1, 1, huge_a=3), res(1, 1, huge_a=3)),
        res(0, 0, huge_a=2),
        {},
        ins(HUGE_A),
    ),
    (
        "skip checking ignored extended resource",
        resource_pod("p", res(1, 1, ext_b=1)),
        res(0, 0),
        {"ignoredResources": ["example.com/bbb"]},
        [],
    ),
    (
        "resources + pod overhead fits",
        resource_pod("p", res(1, 1), overhead={"cpu": "3m", "memory": "13"}),
        res(5, 5),
        {},
        [],
    ),
    (
        "requests + overhead does not fit for memory",
        resource_pod("p", res(1, 1), overhead={"cpu": "1m", "memory": "15"}),
        res(5, 5),
        {},
        ins("memory"),
    ),
    (
        "skip checking ignored extended resource via resource groups",
        resource_pod("p", res(1, 1, ext_b=1, kio_a=1)),
        res(0, 0),
        {"ignoredResourceGroups": ["example.com"]},
        ins(KUBE_IO_A),
    ),
    (
        "skip checking extended resource request with quantity zero via resource groups",
        resource_pod("p", res(1, 1, ext_a=0)),
        res(0, 0, ext_a=6),
        {},
        [],
    ),
    (
        "skip checking resource request with quantity zero",
        resource_pod("p", {EXT_A: "1"}),
        res(20, 30, ext_a=1),
        {},
        [],
    ),
    # TestStorageRequests
    ("empty storage requested, and pod fits", resource_pod("p", res(1, 1)), res(2, 10), {}, []),
    (
        "storage ephemeral local storage request exceeds allocatable",
        resource_pod("p", {"ephemeral-storage": "25"}),
        res(2, 2),
        {},
        ins("ephemeral-storage"),
    ),
    (
        "ephemeral local storage is sufficient",
        resource_pod("p", {"ephemeral-storage": "5"}),
        res(2, 2, storage=10),
        {},
        [],
    ),
    ("pod fits", resource_pod("p", {"ephemeral-storage": "10"}), res(2, 2), {}, []),
]


def _fit(args: dict[str, Any] | None = None) -> node_resources_fit.NodeResourcesFit:
    return node_resources_fit.new(args or {}, "args")


@pytest.mark.parametrize(
    ("pod_obj", "existing", "args", "want"),
    [case[1:] for case in ENOUGH_REQUESTS],
    ids=[case[0] for case in ENOUGH_REQUESTS],
)
def test_fit_filter_enough_requests(
    pod_obj: dict[str, Any], existing: dict[str, str], args: dict[str, Any], want: list[str]
) -> None:
    cache = cache_of([fit_node()], [resource_pod("existing", existing, node_name="n")])
    got = filter_reasons(_fit(args), PodInfo.from_object(pod_obj), cache)
    assert got == {"n": want}


NOT_ENOUGH_PODS = [
    (
        "even without specified resources, predicate fails when there's no space for additional "
        "pod",
        pod("p", containers=[]),
        res(10, 20),
    ),
    (
        "even if both resources fit, predicate fails when there's no space for additional pod",
        resource_pod("p", res(1, 1)),
        res(5, 5),
    ),
    (
        "even for equal edge case, predicate fails when there's no space for additional pod",
        resource_pod("p", res(5, 1)),
        res(5, 19),
    ),
    (
        "even for equal edge case, predicate fails when there's no space for additional pod due "
        "to init container",
        resource_pod("p", res(5, 1), init=(res(5, 1),)),
        res(5, 19),
    ),
]


@pytest.mark.parametrize(
    ("pod_obj", "existing"), [c[1:] for c in NOT_ENOUGH_PODS], ids=[c[0] for c in NOT_ENOUGH_PODS]
)
def test_fit_filter_too_many_pods(pod_obj: dict[str, Any], existing: dict[str, str]) -> None:
    # makeAllocatableResources(10, 20, 1, 0, 0, 0): room for exactly one pod.
    cache = cache_of(
        [node("n", cpu="10m", memory="20", pods=1)],
        [resource_pod("existing", existing, node_name="n")],
    )
    assert filter_reasons(_fit(), PodInfo.from_object(pod_obj), cache) == {"n": ["Too many pods"]}


def test_fit_filter_reports_every_failing_resource_after_too_many_pods() -> None:
    cache = cache_of(
        [node("n", cpu="1", memory="1Gi", pods=1)],
        [pod("existing", {"cpu": "1"}, node_name="n")],
    )
    p = pod_info("p", {"cpu": "1", "memory": "2Gi", "nvidia.com/gpu": "1"})
    assert filter_reasons(_fit(), p, cache) == {
        "n": [
            "Too many pods",
            "Insufficient cpu",
            "Insufficient memory",
            "Insufficient nvidia.com/gpu",
        ]
    }


def test_fit_filter_sidecar_requests_count_for_the_whole_pod() -> None:
    # A restartable init container (sidecar) adds to the regular containers: 2 + 1 > 2.
    cache = cache_of([node("n", cpu="2", memory="1Gi")])
    sidecar = pod(
        "p",
        containers=[container("main", {"cpu": "2"})],
        init_containers=[container("proxy", {"cpu": "1"}, restart_policy="Always")],
    )
    assert filter_reasons(_fit(), PodInfo.from_object(sidecar), cache) == {"n": ins("cpu")}
    plain_init = pod(
        "q",
        containers=[container("main", {"cpu": "2"})],
        init_containers=[container("setup", {"cpu": "1"})],
    )
    assert filter_reasons(_fit(), PodInfo.from_object(plain_init), cache) == {"n": []}


def test_fit_filter_pod_with_restartable_init_container_fits_empty_node() -> None:
    # TestRestartableInitContainers with SidecarContainers enabled (GA in 1.33).
    cache = cache_of([node("n", cpu="0", memory="0", pods=1)])
    p = pod(
        "p",
        containers=[container("regular", None)],
        init_containers=[container("restartable-init", None, restart_policy="Always")],
    )
    assert filter_reasons(_fit(), PodInfo.from_object(p), cache) == {"n": []}


# --------------------------------------------------------------------------- scoring


def _nodes(
    *specs: tuple[str, str, str] | tuple[str, str, str, dict[str, str]],
) -> list[dict[str, Any]]:
    out = []
    for spec in specs:
        extra = spec[3] if len(spec) == 4 else None  # type: ignore[misc]
        out.append(node(spec[0], cpu=spec[1], memory=spec[2], extra=extra))
    return out


def _req_pod(name: str, *reqs: dict[str, str], node_name: str | None = None) -> dict[str, Any]:
    """st.MakePod().Req(a).Req(b): one container per Req call."""
    return pod(
        name, containers=[container(f"c{i}", r) for i, r in enumerate(reqs)], node_name=node_name
    )


def _empty_pod(name: str, node_name: str | None = None) -> dict[str, Any]:
    return pod(name, containers=[], node_name=node_name)


def _container_pod(name: str, node_name: str | None = None) -> dict[str, Any]:
    """st.MakePod().Container("container"): one container without requests."""
    return pod(name, containers=[container("container", None)], node_name=node_name)


EXT = "intel.com/foo"
EXTENDED_SET = [
    {"name": "cpu", "weight": 1},
    {"name": "memory", "weight": 1},
    {"name": EXT, "weight": 1},
]
DEFAULT_SET = [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]
CM = {"cpu": "1000", "memory": "2000"}
CM2 = {"cpu": "2000", "memory": "3000"}

# (name, strategy, resources, pod, nodes, existing pods, expected scores)
SCORING: list[
    tuple[
        str,
        str,
        list[dict[str, Any]],
        dict[str, Any],
        list[dict[str, Any]],
        list[dict[str, Any]],
        dict[str, int],
    ]
] = [
    # least_allocated_test.go
    (
        "least: nothing scheduled, nothing requested",
        "LeastAllocated",
        DEFAULT_SET,
        _empty_pod("p"),
        _nodes(("node1", "4000", "10000"), ("node2", "4000", "10000")),
        [],
        {"node1": 100, "node2": 100},
    ),
    (
        "least: nothing scheduled, resources requested, differently sized nodes",
        "LeastAllocated",
        DEFAULT_SET,
        _req_pod("p", CM, CM2),
        _nodes(("node1", "4000", "10000"), ("node2", "6000", "10000")),
        [],
        {"node1": 37, "node2": 50},
    ),
    (
        "least: no resources requested, pods scheduled",
        "LeastAllocated",
        DEFAULT_SET,
        _empty_pod("p"),
        _nodes(("node1", "4000", "10000"), ("node2", "4000", "10000")),
        [
            _empty_pod("e1", "node1"),
            _empty_pod("e2", "node1"),
            _empty_pod("e3", "node2"),
            _empty_pod("e4", "node2"),
        ],
        {"node1": 100, "node2": 100},
    ),
    (
        "least: no resources requested, pods scheduled with resources",
        "LeastAllocated",
        DEFAULT_SET,
        _empty_pod("p"),
        _nodes(("node1", "10000", "20000"), ("node2", "10000", "20000")),
        [
            _req_pod("e1", {"cpu": "3000", "memory": "0"}, node_name="node1"),
            _req_pod("e2", {"cpu": "3000", "memory": "0"}, node_name="node1"),
            _req_pod("e3", {"cpu": "3000", "memory": "0"}, node_name="node2"),
            _req_pod("e4", {"cpu": "3000", "memory": "5000"}, node_name="node2"),
        ],
        {"node1": 70, "node2": 57},
    ),
    (
        "least: resources requested, pods scheduled with resources",
        "LeastAllocated",
        DEFAULT_SET,
        _req_pod("p", CM, CM2),
        _nodes(("node1", "10000", "20000"), ("node2", "10000", "20000")),
        [
            _req_pod("e1", {"cpu": "3000", "memory": "0"}, node_name="node1"),
            _req_pod("e2", {"cpu": "3000", "memory": "5000"}, node_name="node2"),
        ],
        {"node1": 57, "node2": 45},
    ),
    (
        "least: resources requested, pods scheduled with resources, differently sized nodes",
        "LeastAllocated",
        DEFAULT_SET,
        _req_pod("p", CM, CM2),
        _nodes(("node1", "10000", "20000"), ("node2", "10000", "50000")),
        [
            _req_pod("e1", {"cpu": "3000", "memory": "0"}, node_name="node1"),
            _req_pod("e2", {"cpu": "3000", "memory": "5000"}, node_name="node2"),
        ],
        {"node1": 57, "node2": 60},
    ),
    (
        "least: requested resources exceed node capacity",
        "LeastAllocated",
        DEFAULT_SET,
        _req_pod("p", {"cpu": "3000", "memory": "0"}),
        _nodes(("node1", "4000", "10000"), ("node2", "4000", "10000")),
        [
            _req_pod("e1", {"cpu": "3000", "memory": "0"}, node_name="node1"),
            _req_pod("e2", {"cpu": "3000", "memory": "5000"}, node_name="node2"),
        ],
        {"node1": 50, "node2": 25},
    ),
    (
        "least: zero node resources, pods scheduled with resources",
        "LeastAllocated",
        DEFAULT_SET,
        _empty_pod("p"),
        _nodes(("node1", "0", "0"), ("node2", "0", "0")),
        [
            _req_pod("e1", {"cpu": "3000", "memory": "0"}, node_name="node1"),
            _req_pod("e2", {"cpu": "3000", "memory": "5000"}, node_name="node2"),
        ],
        {"node1": 0, "node2": 0},
    ),
    (
        "least: different weight on CPU and memory, differently sized nodes",
        "LeastAllocated",
        [{"name": "memory", "weight": 2}, {"name": "cpu", "weight": 1}],
        _req_pod("p", CM, CM2),
        _nodes(("node1", "4000", "10000"), ("node2", "6000", "10000")),
        [],
        {"node1": 41, "node2": 50},
    ),
    (
        "least: bypass extended resource if the pod does not request",
        "LeastAllocated",
        EXTENDED_SET,
        _req_pod("p", CM, CM2),
        _nodes(("node1", "6000", "10000"), ("node2", "6000", "10000", {EXT: "4"})),
        [],
        {"node1": 50, "node2": 50},
    ),
    (
        "least: honor extended resource if the pod requests",
        "LeastAllocated",
        EXTENDED_SET,
        _req_pod("p", {"cpu": "3000", "memory": "5000", EXT: "2"}),
        _nodes(("node1", "6000", "10000", {EXT: "4"}), ("node2", "6000", "10000", {EXT: "10"})),
        [],
        {"node1": 50, "node2": 60},
    ),
    (
        "least: if the node doesn't have a resource",
        "LeastAllocated",
        [{"name": EXT, "weight": 2}, {"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}],
        _req_pod("p", {"cpu": "3000", "memory": "4000"}),
        _nodes(("node1", "6000", "10000"), ("node2", "6000", "10000", {EXT: "4"})),
        [],
        {"node1": 55, "node2": 55},
    ),
    # most_allocated_test.go
    (
        "most: nothing scheduled, nothing requested",
        "MostAllocated",
        DEFAULT_SET,
        _empty_pod("p"),
        _nodes(("node1", "4000", "10000"), ("node2", "4000", "10000")),
        [],
        {"node1": 0, "node2": 0},
    ),
    (
        "most: nothing scheduled, resources requested, differently sized nodes",
        "MostAllocated",
        DEFAULT_SET,
        _req_pod("p", CM, CM2),
        _nodes(("node1", "4000", "10000"), ("node2", "6000", "10000")),
        [],
        {"node1": 62, "node2": 50},
    ),
    (
        "most: no resources requested, pods scheduled with resources",
        "MostAllocated",
        DEFAULT_SET,
        _empty_pod("p"),
        _nodes(("node1", "10000", "20000"), ("node2", "10000", "20000")),
        [
            _req_pod("e1", {"cpu": "3000", "memory": "0"}, node_name="node1"),
            _req_pod("e2", {"cpu": "3000", "memory": "0"}, node_name="node1"),
            _req_pod("e3", {"cpu": "3000", "memory": "0"}, node_name="node2"),
            _req_pod("e4", {"cpu": "3000", "memory": "5000"}, node_name="node2"),
        ],
        {"node1": 30, "node2": 42},
    ),
    (
        "most: resources requested, pods scheduled with resources",
        "MostAllocated",
        DEFAULT_SET,
        _req_pod("p", CM, CM2),
        _nodes(("node1", "10000", "20000"), ("node2", "10000", "20000")),
        [
            _req_pod("e1", {"cpu": "3000", "memory": "0"}, node_name="node1"),
            _req_pod("e2", {"cpu": "3000", "memory": "5000"}, node_name="node2"),
        ],
        {"node1": 42, "node2": 55},
    ),
    (
        "most: resources requested equal node capacity",
        "MostAllocated",
        DEFAULT_SET,
        _req_pod("p", {"cpu": "2000", "memory": "4000"}, {"cpu": "3000", "memory": "5000"}),
        _nodes(("node1", "5000", "10000"), ("node2", "10000", "9000")),
        [],
        {"node1": 95, "node2": 75},
    ),
    (
        "most: different weight on CPU and memory",
        "MostAllocated",
        [{"name": "memory", "weight": 2}, {"name": "cpu", "weight": 1}],
        _req_pod("p", CM, CM2),
        _nodes(("node1", "4000", "10000"), ("node2", "6000", "10000")),
        [],
        {"node1": 58, "node2": 50},
    ),
    (
        "most: no resources requested, pods scheduled, nonzero request for resource",
        "MostAllocated",
        DEFAULT_SET,
        _container_pod("p"),
        _nodes(("node1", "250m", "1000Mi"), ("node2", "250m", "1000Mi")),
        [_container_pod("e1", "node1"), _container_pod("e2", "node1")],
        {"node1": 80, "node2": 30},
    ),
    (
        "most: bypass extended resource if the pod does not request",
        "MostAllocated",
        EXTENDED_SET,
        _req_pod("p", CM, CM2),
        _nodes(("node1", "6000", "10000"), ("node2", "6000", "10000", {EXT: "4"})),
        [],
        {"node1": 50, "node2": 50},
    ),
    (
        "most: honor extended resource if the pod request",
        "MostAllocated",
        EXTENDED_SET,
        _req_pod("p", {"cpu": "3000", "memory": "5000", EXT: "2"}),
        _nodes(("node1", "6000", "10000", {EXT: "4"}), ("node2", "6000", "10000", {EXT: "10"})),
        [],
        {"node1": 50, "node2": 40},
    ),
    (
        "most: if the node doesn't have a resource",
        "MostAllocated",
        [{"name": EXT, "weight": 2}, {"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}],
        _req_pod("p", {"cpu": "3000", "memory": "4000"}),
        _nodes(("node1", "6000", "10000"), ("node2", "6000", "10000", {EXT: "4"})),
        [],
        {"node1": 45, "node2": 45},
    ),
    # fit_test.go TestFitScore
    (
        "fit: LeastAllocated",
        "LeastAllocated",
        DEFAULT_SET,
        _req_pod("p", {"cpu": "1000", "memory": "2000"}),
        _nodes(("node1", "4000", "10000"), ("node2", "6000", "10000")),
        [
            _req_pod("e1", {"cpu": "2000", "memory": "4000"}, node_name="node1"),
            _req_pod("e2", {"cpu": "1000", "memory": "2000"}, node_name="node2"),
        ],
        {"node1": 32, "node2": 63},
    ),
    (
        "fit: MostAllocated",
        "MostAllocated",
        DEFAULT_SET,
        _req_pod("p", {"cpu": "1000", "memory": "2000"}),
        _nodes(("node1", "4000", "10000"), ("node2", "6000", "10000")),
        [
            _req_pod("e1", {"cpu": "2000", "memory": "4000"}, node_name="node1"),
            _req_pod("e2", {"cpu": "1000", "memory": "2000"}, node_name="node2"),
        ],
        {"node1": 67, "node2": 36},
    ),
]


@pytest.mark.parametrize(
    ("strategy", "resources", "pod_obj", "nodes", "existing", "want"),
    [c[1:] for c in SCORING],
    ids=[c[0] for c in SCORING],
)
def test_fit_scoring_strategies(
    strategy: str,
    resources: list[dict[str, Any]],
    pod_obj: dict[str, Any],
    nodes: list[dict[str, Any]],
    existing: list[dict[str, Any]],
    want: dict[str, int],
) -> None:
    plugin = _fit({"scoringStrategy": {"type": strategy, "resources": resources}})
    got = plugin_scores(plugin, PodInfo.from_object(pod_obj), cache_of(nodes, existing))
    assert got == want


RTCR_DECREASING = [{"utilization": 0, "score": 10}, {"utilization": 100, "score": 0}]
RTCR_INCREASING = [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]

RTCR: list[
    tuple[
        str,
        list[dict[str, int]],
        list[dict[str, Any]],
        dict[str, Any],
        list[dict[str, Any]],
        list[dict[str, Any]],
        dict[str, int],
    ]
] = [
    (
        "nothing scheduled, nothing requested (least requested nodes have priority)",
        RTCR_DECREASING,
        DEFAULT_SET,
        _empty_pod("p"),
        _nodes(("node1", "4000", "10000"), ("node2", "4000", "10000")),
        [_empty_pod("e1", "node1"), _empty_pod("e2", "node1")],
        {"node1": 100, "node2": 100},
    ),
    (
        "nothing scheduled, resources requested, differently sized nodes",
        RTCR_DECREASING,
        DEFAULT_SET,
        _req_pod("p", CM, CM2),
        _nodes(("node1", "4000", "10000"), ("node2", "6000", "10000")),
        [_empty_pod("e1", "node1"), _empty_pod("e2", "node1")],
        {"node1": 38, "node2": 50},
    ),
    (
        "no resources requested, pods scheduled with resources",
        RTCR_DECREASING,
        DEFAULT_SET,
        _empty_pod("p"),
        _nodes(("node1", "4000", "10000"), ("node2", "6000", "10000")),
        [
            _req_pod("e1", {"cpu": "3000", "memory": "5000"}, node_name="node1"),
            _req_pod("e2", {"cpu": "3000", "memory": "5000"}, node_name="node2"),
        ],
        {"node1": 38, "node2": 50},
    ),
    (
        "TestFitScore RequestedToCapacityRatio case1",
        RTCR_DECREASING,
        DEFAULT_SET,
        _req_pod("p", {"cpu": "3000", "memory": "5000"}),
        _nodes(("node1", "4000", "10000"), ("node2", "6000", "10000")),
        [
            _req_pod("e1", {"cpu": "2000", "memory": "4000"}, node_name="node1"),
            _req_pod("e2", {"cpu": "1000", "memory": "2000"}, node_name="node2"),
        ],
        {"node1": 10, "node2": 32},
    ),
    (
        "TestFitScore RequestedToCapacityRatio case2",
        RTCR_INCREASING,
        DEFAULT_SET,
        _req_pod("p", {"cpu": "3000", "memory": "5000"}),
        _nodes(("node1", "4000", "10000"), ("node2", "6000", "10000")),
        [
            _req_pod("e1", {"cpu": "2000", "memory": "4000"}, node_name="node1"),
            _req_pod("e2", {"cpu": "1000", "memory": "2000"}, node_name="node2"),
        ],
        {"node1": 95, "node2": 68},
    ),
]

_MEM = str(10000 * 1024 * 1024)
SINGLE_EXT = [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 1}]
RTCR += [
    # TestResourceBinPackingSingleExtended
    (
        "single extended: nothing scheduled, nothing requested",
        SINGLE_EXT,
        [{"name": EXT, "weight": 1}],
        _empty_pod("p"),
        _nodes(("node1", "4", _MEM, {EXT: "8"}), ("node2", "4", _MEM, {EXT: "4"})),
        [],
        {"node1": 0, "node2": 0},
    ),
    (
        "single extended: resources requested, pods scheduled with less resources",
        SINGLE_EXT,
        [{"name": EXT, "weight": 1}],
        _req_pod("p", {EXT: "2"}),
        _nodes(("node1", "4", _MEM, {EXT: "8"}), ("node2", "4", _MEM, {EXT: "4"})),
        [],
        {"node1": 2, "node2": 5},
    ),
    (
        "single extended: resources requested, on node with existing pod running",
        SINGLE_EXT,
        [{"name": EXT, "weight": 1}],
        _req_pod("p", {EXT: "2"}),
        _nodes(("node1", "4", _MEM, {EXT: "8"}), ("node2", "4", _MEM, {EXT: "4"})),
        [_req_pod("e", {EXT: "2"}, node_name="node2")],
        {"node1": 2, "node2": 10},
    ),
    (
        "single extended: resources requested, pods scheduled with more resources",
        SINGLE_EXT,
        [{"name": EXT, "weight": 1}],
        _req_pod("p", {EXT: "4"}),
        _nodes(("node1", "4", _MEM, {EXT: "8"}), ("node2", "4", _MEM, {EXT: "4"})),
        [],
        {"node1": 5, "node2": 10},
    ),
    # TestResourceBinPackingMultipleExtended
    (
        "multiple extended: nothing scheduled, nothing requested",
        SINGLE_EXT,
        [{"name": EXT, "weight": 3}, {"name": "intel.com/bar", "weight": 5}],
        _empty_pod("p"),
        _nodes(
            ("node1", "4", _MEM, {EXT: "8", "intel.com/bar": "4"}),
            ("node2", "4", _MEM, {EXT: "4", "intel.com/bar": "8"}),
        ),
        [],
        {"node1": 0, "node2": 0},
    ),
    (
        "multiple extended: resources requested, pods scheduled with less resources",
        SINGLE_EXT,
        [{"name": EXT, "weight": 3}, {"name": "intel.com/bar", "weight": 5}],
        _req_pod("p", {EXT: "2", "intel.com/bar": "2"}),
        _nodes(
            ("node1", "4", _MEM, {EXT: "8", "intel.com/bar": "4"}),
            ("node2", "4", _MEM, {EXT: "4", "intel.com/bar": "8"}),
        ),
        [],
        {"node1": 4, "node2": 3},
    ),
]


@pytest.mark.parametrize(
    ("shape", "resources", "pod_obj", "nodes", "existing", "want"),
    [c[1:] for c in RTCR],
    ids=[c[0] for c in RTCR],
)
def test_requested_to_capacity_ratio(
    shape: list[dict[str, int]],
    resources: list[dict[str, Any]],
    pod_obj: dict[str, Any],
    nodes: list[dict[str, Any]],
    existing: list[dict[str, Any]],
    want: dict[str, int],
) -> None:
    plugin = _fit(
        {
            "scoringStrategy": {
                "type": "RequestedToCapacityRatio",
                "resources": resources,
                "requestedToCapacityRatio": {"shape": shape},
            }
        }
    )
    got = plugin_scores(plugin, PodInfo.from_object(pod_obj), cache_of(nodes, existing))
    assert got == want


@pytest.mark.parametrize(
    ("points", "assertions"),
    [
        (
            [(10, 1), (90, 9)],
            [
                (-10, 1),
                (0, 1),
                (9, 1),
                (10, 1),
                (15, 1),
                (19, 1),
                (20, 2),
                (89, 8),
                (90, 9),
                (99, 9),
                (100, 9),
                (110, 9),
            ],
        ),
        (
            [(0, 2), (40, 10), (100, 0)],
            [(-10, 2), (0, 2), (20, 6), (30, 8), (40, 10), (70, 5), (100, 0), (110, 0)],
        ),
        (
            [(0, 2), (40, 2), (100, 2)],
            [(-10, 2), (0, 2), (20, 2), (30, 2), (40, 2), (70, 2), (100, 2), (110, 2)],
        ),
    ],
)
def test_broken_linear_function(
    points: list[tuple[int, int]], assertions: list[tuple[int, int]]
) -> None:
    import numpy as np

    from plugins.node_resources_fit import ShapePoint, _broken_linear, _broken_linear_one

    shape = [ShapePoint(u, s) for u, s in points]
    ps = np.array([p for p, _ in assertions], np.int64)
    vector = _broken_linear(shape, ps)
    for i, (p, expected) in enumerate(assertions):
        assert _broken_linear_one(shape, p) == expected, p
        assert int(vector[i]) == expected, p


# --------------------------------------------------------------------------- balanced


def _spec_pod(
    name: str, cpus: list[str], mems: list[str], node_name: str | None = None
) -> dict[str, Any]:
    return pod(
        name,
        containers=[
            container(f"c{i}", {"cpu": c, "memory": m})
            for i, (c, m) in enumerate(zip(cpus, mems, strict=True))
        ],
        node_name=node_name,
    )


def cpu_only(node_name: str | None = None, name: str = "cpu-only") -> dict[str, Any]:
    return _spec_pod(name, ["1000m", "2000m"], ["0", "0"], node_name)


def cpu_and_memory(node_name: str | None = None, name: str = "cpu-mem") -> dict[str, Any]:
    return _spec_pod(name, ["1000m", "2000m"], ["2000", "3000"], node_name)


BALANCED: list[
    tuple[str, dict[str, Any], list[dict[str, Any]], list[dict[str, Any]], dict[str, int] | None]
] = [
    (
        "nothing scheduled, nothing requested (BestEffort pod is skipped)",
        _empty_pod("p"),
        _nodes(("node1", "4000m", "10000"), ("node2", "4000m", "10000")),
        [],
        None,
    ),
    (
        "nothing scheduled, resources requested, differently sized nodes",
        cpu_and_memory(),
        _nodes(("node1", "4000m", "10000"), ("node2", "6000m", "10000")),
        [],
        {"node1": 87, "node2": 100},
    ),
    (
        "no resources requested, pods scheduled with resources (skipped)",
        _empty_pod("p"),
        _nodes(("node1", "10000m", "20000"), ("node2", "10000m", "20000")),
        [
            cpu_only("node1", "a"),
            cpu_only("node1", "b"),
            cpu_only("node2", "c"),
            cpu_and_memory("node2", "d"),
        ],
        None,
    ),
    (
        "resources requested, pods scheduled with resources",
        cpu_and_memory(),
        _nodes(("node1", "10000m", "20000"), ("node2", "10000m", "20000")),
        [cpu_only("node1", "a"), cpu_and_memory("node2", "b")],
        {"node1": 82, "node2": 95},
    ),
    (
        "resources requested, pods scheduled with resources, differently sized nodes",
        cpu_and_memory(),
        _nodes(("node1", "10000m", "20000"), ("node2", "10000m", "50000")),
        [cpu_only("node1", "a"), cpu_and_memory("node2", "b")],
        {"node1": 82, "node2": 80},
    ),
    (
        "requested resources at node capacity",
        cpu_only(),
        _nodes(("node1", "4000m", "10000"), ("node2", "4000m", "10000")),
        [cpu_only("node1", "a"), cpu_and_memory("node2", "b")],
        {"node1": 50, "node2": 75},
    ),
    (
        "zero node resources, pods scheduled with resources",
        cpu_and_memory(),
        _nodes(("node1", "0", "0"), ("node2", "0", "0")),
        [cpu_only("node1", "a"), cpu_and_memory("node2", "b")],
        {"node1": 100, "node2": 100},
    ),
]


@pytest.mark.parametrize(
    ("pod_obj", "nodes", "existing", "want"),
    [c[1:] for c in BALANCED],
    ids=[c[0] for c in BALANCED],
)
def test_balanced_allocation(
    pod_obj: dict[str, Any],
    nodes: list[dict[str, Any]],
    existing: list[dict[str, Any]],
    want: dict[str, int] | None,
) -> None:
    plugin = balanced_allocation.new(None, "args")
    got = plugin_scores(plugin, PodInfo.from_object(pod_obj), cache_of(nodes, existing))
    assert got == want


def test_balanced_allocation_with_scalar_resource() -> None:
    # Three resources: std over cpu, memory and nvidia.com/gpu fractions.
    plugin = balanced_allocation.new(
        {
            "resources": [
                {"name": "cpu", "weight": 1},
                {"name": "memory", "weight": 1},
                {"name": "nvidia.com/gpu", "weight": 1},
            ]
        },
        "args",
    )
    nodes = [
        node("node1", cpu="3500m", memory="40000", extra={"nvidia.com/gpu": "4"}),
        node("node2", cpu="4000m", memory="10000"),
    ]
    p = pod_info("p", {"cpu": "3000m", "memory": "5000", "nvidia.com/gpu": "1"})
    got = plugin_scores(plugin, p, cache_of(nodes))
    # node1: fractions 3000/3500, 5000/40000, 1/4 -> std 0.3195 -> 68
    # node2: no nvidia.com/gpu allocatable -> two fractions 0.75, 0.5 -> 87
    assert got == {"node1": 68, "node2": 87}


def test_balanced_allocation_counts_plain_requests_not_defaults() -> None:
    # A pod that requests only cpu is not BestEffort; memory counts as 0, not 200Mi.
    nodes = [node("node1", cpu="4", memory="8Gi")]
    p = pod_info("p", {"cpu": "2"})
    got = plugin_scores(balanced_allocation.new(None, "args"), p, cache_of(nodes))
    assert got == {"node1": 75}


# --------------------------------------------------------------------------- args


@pytest.mark.parametrize(
    ("resources", "field"),
    [
        ([{"name": "memory", "weight": -1}, {"name": "cpu", "weight": 1}], "resources[0].weight"),
        ([{"name": "memory", "weight": 1}, {"name": "cpu", "weight": 101}], "resources[1].weight"),
    ],
)
def test_fit_args_reject_bad_weights(resources: list[dict[str, Any]], field: str) -> None:
    # Upstream's "resource with zero weight" case is left out on purpose: it exercises the
    # internal (undefaulted) args; kube's v1 defaulting turns a weight of 0 into 1.
    for strategy in ("LeastAllocated", "MostAllocated"):
        with pytest.raises(ConfigError) as err:
            _fit({"scoringStrategy": {"type": strategy, "resources": resources}})
        assert str(err.value).startswith(f"args.scoringStrategy.{field}: must be between 1 and 100")


def test_default_resources() -> None:
    assert _fit().args.resources == (ResourceSpec("cpu", 1), ResourceSpec("memory", 1))
