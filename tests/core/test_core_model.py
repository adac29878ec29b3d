"""Quantities (apimachinery's grammar and rounding) and the model's view of pods and nodes."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from core_support import container, node, pod

from scheduler.core.model import (
    DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
    HostPort,
    ModelError,
    NodeInfo,
    PodInfo,
    Taint,
    Toleration,
)
from scheduler.core.quantity import QuantityError, format_milli, parse_quantity, resource_value

Ki, Mi, Gi = 2**10, 2**20, 2**30

# --------------------------------------------------------------------------- quantities

GOOD = [
    ("100m", Fraction(1, 10)),
    ("1.5", Fraction(3, 2)),
    ("2Gi", 2 * Gi),
    ("1e3", 1000),
    ("1E3", 1000),
    ("1e+3", 1000),
    ("5e-3", Fraction(5, 1000)),
    ("500M", 500 * 10**6),
    ("0.1Ki", Fraction(1024, 10)),
    (".5", Fraction(1, 2)),
    ("1.", 1),
    ("+1", 1),
    ("-1", -1),
    ("0", 0),
    ("00012", 12),
    ("1k", 1000),
    ("1M", 10**6),
    ("1G", 10**9),
    ("1T", 10**12),
    ("1P", 10**15),
    ("1E", 10**18),
    ("1Ki", Ki),
    ("1Mi", Mi),
    ("1Ti", 2**40),
    ("1Pi", 2**50),
    ("1Ei", 2**60),
    ("1u", Fraction(1, 10**6)),
    ("1n", Fraction(1, 10**9)),
    ("1.G", 10**9),  # apimachinery allows an empty fraction before a suffix
    (" 2 ", 2),  # the API server trims white space when decoding
    ("0.1n", Fraction(1, 10**9)),  # non-zero amounts round up to a whole nano
    ("1e-100", Fraction(1, 10**9)),
    ("-1e-100", Fraction(-1, 10**9)),
    ("16Ei", 2**63 - 1),  # magnitudes are capped at the largest int64
    ("1e100", 2**63 - 1),
    (7, 7),
    (0.25, Fraction(1, 4)),
    (1e-05, Fraction(1, 10**5)),
]


@pytest.mark.parametrize(("text", "value"), GOOD, ids=[repr(t) for t, _ in GOOD])
def test_parse_quantity(text: Any, value: Any) -> None:
    assert parse_quantity(text) == value


BAD = [
    "",
    "   ",
    "1K",
    "1KiB",
    "1Ki3",
    "1e",
    "1.2.3",
    "1 Gi",
    "0x10",
    "1_000",
    "٣",
    "１",
    "abc",
    "1i",
    "Gi1",
    "1e3.5",
    "--1",
    "1e99999999999999999999",
    "1E+",
    "nan",
    "inf",
]


@pytest.mark.parametrize("text", BAD, ids=repr)
def test_parse_quantity_rejects(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


@pytest.mark.parametrize("value", [True, None, [1], {"a": 1}, float("nan"), float("inf")])
def test_parse_quantity_rejects_non_quantities(value: Any) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(value)


@pytest.mark.parametrize(
    ("name", "text", "value"),
    [
        ("cpu", "100m", 100),
        ("cpu", "1", 1000),
        ("cpu", "0.5", 500),
        ("cpu", "1.0001", 1001),  # MilliValue rounds up
        ("cpu", "1n", 1),
        ("cpu", "1u", 1),
        ("cpu", "2.5m", 3),
        ("memory", "0.1Ki", 103),  # Value rounds up
        ("memory", "1.5", 2),
        ("memory", "1m", 1),
        ("memory", "128974848", 128974848),
        ("memory", "129e6", 129000000),
        ("memory", "129M", 129000000),
        ("memory", "123Mi", 123 * Mi),
        ("nvidia.com/gpu", "2", 2),
        ("pods", "110", 110),
        ("memory", "-0.1", -1),  # rounding is away from zero
        ("cpu", "-0.5m", -1),
    ],
)
def test_resource_value_rounds_up(name: str, text: str, value: int) -> None:
    assert resource_value(name, text) == value


def test_format_milli() -> None:
    assert [format_milli(m) for m in (0, 500, 1000, 2500)] == ["0", "500m", "1", "2500m"]


# --------------------------------------------------------------------------- pod requests


def _pod(**kw: Any) -> PodInfo:
    return PodInfo.from_object(pod("web", **kw))


def test_requests_sum_containers() -> None:
    p = _pod(
        containers=[
            container("a", {"cpu": "1", "memory": "1Gi"}),
            container("b", {"cpu": "500m", "nvidia.com/gpu": "2"}),
        ]
    )
    assert p.requests == {"cpu": 1500, "memory": Gi, "nvidia.com/gpu": 2}
    assert (p.non_zero_cpu, p.non_zero_memory) == (1500, Gi + DEFAULT_MEMORY_REQUEST)


def test_init_containers_take_the_max() -> None:
    p = _pod(
        containers=[container("a", {"cpu": "1", "memory": "1Gi"})],
        init_containers=[
            container("i1", {"cpu": "3", "memory": "512Mi"}),
            container("i2", {"cpu": "2", "memory": "2Gi"}),
        ],
    )
    assert p.requests == {"cpu": 3000, "memory": 2 * Gi}


def test_sidecars_add_up_and_stay_for_later_init_containers() -> None:
    # kube's PodRequests: sidecars add to the regular containers and to every init container
    # that starts after them.
    p = _pod(
        containers=[container("main", {"cpu": "1", "memory": "1Gi"})],
        init_containers=[
            container("init-before", {"cpu": "4"}),
            container("sidecar", {"cpu": "500m", "memory": "256Mi"}, restart_policy="Always"),
            container("init-after", {"cpu": "3", "memory": "1Gi"}),
        ],
    )
    # max(main + sidecar = 1500m, init-before 4000m, init-after + sidecar = 3500m) = 4000m
    # memory: max(1Gi + 256Mi, 0, 1Gi + 256Mi) = 1280Mi
    assert p.requests == {"cpu": 4000, "memory": 1280 * Mi}


def test_overhead_is_added() -> None:
    p = _pod(
        containers=[container("a", {"cpu": "1"})],
        spec={"overhead": {"cpu": "250m", "memory": "120Mi"}},
    )
    assert p.requests == {"cpu": 1250, "memory": 120 * Mi}
    assert (p.non_zero_cpu, p.non_zero_memory) == (1250, DEFAULT_MEMORY_REQUEST + 120 * Mi)


def test_pod_level_resources_replace_cpu_and_memory() -> None:
    p = _pod(
        containers=[
            container("a", {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}),
            container("b", {"cpu": "1"}),
        ],
        spec={
            "resources": {"requests": {"cpu": "3"}, "limits": {"memory": "4Gi"}},
            "overhead": {"cpu": "100m"},
        },
    )
    assert p.requests == {"cpu": 3100, "memory": 4 * Gi, "nvidia.com/gpu": 1}
    assert (p.non_zero_cpu, p.non_zero_memory) == (3100, 4 * Gi)


def test_pod_level_resources_non_zero_defaults_only_where_missing_everywhere() -> None:
    # Pod-level cpu only; a container sets memory, so no 200Mi default is added anywhere.
    p = _pod(
        containers=[container("a", {"memory": "1Gi"}), container("b", None)],
        spec={"resources": {"requests": {"cpu": "2"}}},
    )
    assert (p.non_zero_cpu, p.non_zero_memory) == (2000, Gi)
    q = _pod(
        containers=[container("a", None), container("b", None)],
        spec={"resources": {"requests": {"cpu": "2"}}},
    )
    assert (q.non_zero_cpu, q.non_zero_memory) == (2000, 2 * DEFAULT_MEMORY_REQUEST)


def test_limits_only_default_the_requests() -> None:
    p = _pod(
        containers=[
            container("a", None, {"cpu": "2", "memory": "1Gi"}),
            container("b", {"cpu": "1"}, {"cpu": "4", "memory": "2Gi"}),
        ]
    )
    assert p.requests == {"cpu": 3000, "memory": 3 * Gi}


def test_non_zero_defaults_only_for_omitted_requests() -> None:
    p = _pod(
        containers=[
            container("a", None),
            container("b", {"cpu": "0", "memory": "0"}),
            container("c", {"cpu": "250m"}),
        ]
    )
    assert p.requests == {"cpu": 250, "memory": 0}
    assert p.non_zero_cpu == DEFAULT_MILLI_CPU_REQUEST + 0 + 250
    assert p.non_zero_memory == DEFAULT_MEMORY_REQUEST + 0 + DEFAULT_MEMORY_REQUEST


def test_non_zero_defaults_apply_to_init_containers_too() -> None:
    p = _pod(
        containers=[container("a", {"cpu": "50m", "memory": "10Mi"})],
        init_containers=[container("i", None)],
    )
    assert (p.non_zero_cpu, p.non_zero_memory) == (
        DEFAULT_MILLI_CPU_REQUEST,
        DEFAULT_MEMORY_REQUEST,
    )
    assert p.requests == {"cpu": 50, "memory": 10 * Mi}


def test_no_containers_requests_nothing() -> None:
    p = _pod(containers=[])
    assert p.requests == {}
    assert (p.non_zero_cpu, p.non_zero_memory) == (0, 0)
    assert p.best_effort


@pytest.mark.parametrize(
    ("containers", "spec", "best_effort"),
    [
        ([container("a", None)], {}, True),
        ([container("a", {"nvidia.com/gpu": "1"})], {}, True),
        ([container("a", {"cpu": "0"})], {}, True),  # explicit zeros do not count for QoS
        ([container("a", {"cpu": "1m"})], {}, False),
        ([container("a", None, {"memory": "1Gi"})], {}, False),
        ([container("a", None)], {"resources": {"requests": {"cpu": "1"}}}, False),
    ],
)
def test_best_effort(
    containers: list[dict[str, Any]], spec: dict[str, Any], best_effort: bool
) -> None:
    assert _pod(containers=containers, spec=spec).best_effort is best_effort


def test_host_ports_images_tolerations_selectors() -> None:
    p = _pod(
        containers=[
            container(
                "a",
                image="nginx",
                ports=[
                    {"containerPort": 80, "hostPort": 8080},
                    {"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "10.0.0.1"},
                    {"containerPort": 9000},
                ],
            )
        ],
        init_containers=[
            container(
                "side",
                image="envoy:1.2",
                restart_policy="Always",
                ports=[{"containerPort": 15000, "hostPort": 15000}],
            ),
            container("setup", image="busybox", ports=[{"containerPort": 1, "hostPort": 1}]),
        ],
        spec={
            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
            "nodeSelector": {"zone": "a", "disk": "ssd"},
        },
    )
    assert set(p.host_ports) == {
        HostPort("", "TCP", 8080),
        HostPort("10.0.0.1", "UDP", 53),
        HostPort("", "TCP", 15000),
    }
    assert sorted(p.images) == ["busybox:latest", "envoy:1.2", "nginx:latest"]
    assert p.container_count == 3
    assert p.tolerations == (Toleration("k", "Exists", "", "NoSchedule"),)
    assert p.node_selector == (("disk", "ssd"), ("zone", "a"))
    assert p.key == "default/web"


def test_defaults() -> None:
    p = PodInfo.from_object({"metadata": {"name": "x"}, "spec": {"containers": []}})
    assert (p.namespace, p.scheduler_name, p.node_name, p.priority) == (
        "default",
        "default-scheduler",
        None,
        0,
    )


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (
            pod("web", {"cpu": "lots"}),
            "Pod default/web: spec.containers[0].resources.requests.cpu: quantities must match",
        ),
        (
            pod("web", containers=[container("a", None, {"memory": "1mi"})]),
            "Pod default/web: spec.containers[0].resources.limits.memory: "
            "unable to parse quantity's suffix",
        ),
        (
            pod("web", init_containers=[container("i", {"cpu": "-1"})]),
            "Pod default/web: spec.initContainers[0].resources.requests.cpu: "
            "must be greater than or equal to 0",
        ),
        (
            pod("web", {"memory": "-0.1"}),
            "Pod default/web: spec.containers[0].resources.requests.memory: "
            "must be greater than or equal to 0",
        ),
        (
            pod("web", namespace="ml", spec={"overhead": {"cpu": "x"}}),
            "Pod ml/web: spec.overhead.cpu: quantities must match",
        ),
        (
            pod("web", spec={"resources": {"requests": {"cpu": []}}}),
            "Pod default/web: spec.resources.requests.cpu: quantities must be strings or numbers",
        ),
        (
            pod("web", spec={"tolerations": {"key": "a"}}),
            "Pod default/web: spec.tolerations: must be a list, got dict",
        ),
        (
            pod("web", spec={"priority": "high"}),
            "Pod default/web: spec.priority: must be an integer",
        ),
        (
            pod("web", spec={"containers": [{"name": "c", "ports": [{"hostPort": "80"}]}]}),
            "Pod default/web: spec.containers[0].ports[0].hostPort: must be an integer",
        ),
        ({"metadata": {"namespace": "x"}}, "Pod: metadata.name: is required"),
        ({"kind": "Node", "metadata": {"name": "n"}}, "Pod: kind: must be Pod, got 'Node'"),
    ],
)
def test_pod_errors_name_object_and_field(obj: dict[str, Any], message: str) -> None:
    with pytest.raises(ModelError) as err:
        PodInfo.from_object(obj)
    assert str(err.value).startswith(message), str(err.value)


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (node("gpu-1", cpu="four"), "Node gpu-1: status.allocatable.cpu: quantities must match"),
        (
            node("gpu-1", taints=[{"key": "a", "effect": "Sometimes"}]),
            'Node gpu-1: spec.taints[0].effect: Unsupported value: "Sometimes"',
        ),
        (
            {"metadata": {"name": "n"}, "spec": {"unschedulable": "yes"}},
            "Node n: spec.unschedulable: must be a boolean",
        ),
        ({"metadata": {}}, "Node: metadata.name: is required"),
    ],
)
def test_node_errors_name_object_and_field(obj: dict[str, Any], message: str) -> None:
    with pytest.raises(ModelError) as err:
        NodeInfo.from_object(obj)
    assert str(err.value).startswith(message), str(err.value)


# --------------------------------------------------------------------------- nodes


def test_node_info() -> None:
    n = NodeInfo.from_object(
        node(
            "gpu-1",
            cpu="64",
            memory="512Gi",
            pods=110,
            labels={"zone": "a"},
            taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
            unschedulable=True,
            memory_pressure=True,
            extra={"nvidia.com/gpu": "8"},
            images=[
                (["nginx:1.25", "nginx@sha256:" + "0" * 64], 100),
                (["busybox"], 5),
                (["nginx:1.25"], 999),
            ],
        )
    )
    assert n.allocatable == {"cpu": 64000, "memory": 512 * Gi, "pods": 110, "nvidia.com/gpu": 8}
    assert n.taints == (Taint("nvidia.com/gpu", "present", "NoSchedule"),)
    assert n.unschedulable and n.memory_pressure
    # Node image names are kept as reported (kube does not normalize them); first size wins.
    assert n.images == {"nginx:1.25": 100, "nginx@sha256:" + "0" * 64: 100, "busybox": 5}


def test_node_capacity_used_when_allocatable_missing() -> None:
    n = NodeInfo.from_object({"metadata": {"name": "n"}, "status": {"capacity": {"cpu": "2"}}})
    assert n.allocatable == {"cpu": 2000}


def test_pod_totals_are_rounded_once_not_per_container() -> None:
    # kube sums the Quantities, then takes MilliValue()/Value() of the total.
    p = _pod(
        containers=[
            container("a", {"cpu": "0.5m", "memory": "0.5"}),
            container("b", {"cpu": "0.5m", "memory": "0.5"}),
        ]
    )
    assert p.requests == {"cpu": 1, "memory": 1}
    assert (p.non_zero_cpu, p.non_zero_memory) == (1, 1)
    q = _pod(containers=[container("a", {"cpu": "0.4m"})], spec={"overhead": {"cpu": "0.4m"}})
    assert q.requests == {"cpu": 1}
