"""The memoised resource accounting of pods (`model._resources_of` path) gives exactly what
the plain path gives: the same requests, defaults, QoS, ports, images, container count, the
same problems recorded for a bound pod and the same error for a pending one, on random pod
specs parsed after other random specs (hits, misses, and specs spelled alike)."""

from __future__ import annotations

import copy
import logging
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core import model
from scheduler.core.model import ModelError, PodInfo

Obj = dict[str, Any]

QUANTITIES = st.sampled_from(
    ["100m", "0.1", "1", "2", "0", "64Mi", "1Gi", "1.5", "1e3", "-1", "abc", "", " 2 ",
     "9223372036854775807", "99999999999999999999Ei", 1, 1.0, 2, 0, True, None, [], "1m", "0.5"]
)  # fmt: skip
NAMES = st.sampled_from(
    ["cpu", "memory", "nvidia.com/gpu", "ephemeral-storage", "hugepages-2Mi", "pods", "x.io/y"]
)  # fmt: skip
AMOUNTS = st.one_of(
    st.none(), st.dictionaries(NAMES, QUANTITIES, max_size=3), st.sampled_from(["x", 3, []])
)
RESOURCES = st.one_of(
    st.none(),
    st.fixed_dictionaries({}, optional={"requests": AMOUNTS, "limits": AMOUNTS}),
    st.just("not a mapping"),
)
PORTS = st.one_of(
    st.none(),
    st.lists(
        st.fixed_dictionaries(
            {"containerPort": st.just(80)},
            optional={
                "hostPort": st.sampled_from([0, 8080, 9090, "x", True]),
                "protocol": st.sampled_from(["TCP", "UDP", 5]),
                "hostIP": st.sampled_from(["", "10.0.0.1"]),
            },
        ),
        max_size=2,
    ),
    st.just("x"),
)


def container(init: bool) -> st.SearchStrategy[Any]:
    fields = {
        "name": st.sampled_from(["a", "b", 7]),
        "image": st.sampled_from(["pause", "registry.k8s.io/pause:3.9", "", 5]),
        "resources": RESOURCES,
        "ports": PORTS,
        # not read: pods of one template differ here, and still share their accounting
        "env": st.lists(st.fixed_dictionaries({"name": st.sampled_from(["A", "B"])}), max_size=1),
    }
    if init:
        fields["restartPolicy"] = st.sampled_from(["Always", "Never", 3])
    return st.one_of(st.fixed_dictionaries({}, optional=fields), st.just("not a container"))


SPECS = st.fixed_dictionaries(
    {"containers": st.lists(container(False), max_size=3)},
    optional={
        "initContainers": st.one_of(st.lists(container(True), max_size=2), st.just("x")),
        "resources": RESOURCES,
        "overhead": AMOUNTS,
    },
)


def _pod(spec: Obj, bound: bool, index: int) -> Obj:
    spec = copy.deepcopy(spec)
    if bound:
        spec["nodeName"] = "n1"
    return {"metadata": {"name": f"p{index}", "namespace": "default", "uid": "u"}, "spec": spec}


def _outcome(obj: Obj) -> tuple[Any, ...]:
    try:
        p = PodInfo.from_object(obj)
    except ModelError as exc:
        return ("error", str(exc))
    requests = p.requests
    return (
        dict(requests),
        list(requests),  # the order too
        p.non_zero_cpu,
        p.non_zero_memory,
        p.best_effort,
        p.host_ports,
        p.images,
        p.container_count,
        p.unreadable,
    )


def _plain(obj: Obj) -> tuple[Any, ...]:
    with mock.patch.object(model, "_resources_key", lambda spec, lenient: None):
        return _outcome(obj)


@pytest.fixture(autouse=True)
def _quiet() -> Any:
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(SPECS, min_size=1, max_size=4), bound=st.lists(st.booleans(), min_size=4))
def test_memoised_accounting_equals_plain(specs: list[Obj], bound: list[bool]) -> None:
    model._RESOURCES_MEMO.clear()
    # every spec twice, in both modes as drawn: the second parse may come from the memo
    for i, spec in enumerate(specs * 2):
        obj = _pod(spec, bound[i % len(bound)], i)
        assert _outcome(copy.deepcopy(obj)) == _plain(copy.deepcopy(obj))


def test_pods_of_one_template_share_one_accounting() -> None:
    model._RESOURCES_MEMO.clear()
    spec = {
        "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "100m"}}}]
    }
    first = PodInfo.from_object(_pod(spec, False, 1))
    assert len(model._RESOURCES_MEMO) == 1
    second = PodInfo.from_object(_pod(spec, False, 2))
    assert second.requests == first.requests == {"cpu": 100}
    assert second.requests is not first.requests  # each pod's own mapping
    assert len(model._RESOURCES_MEMO) == 1


def test_a_result_with_a_problem_is_not_kept() -> None:
    model._RESOURCES_MEMO.clear()
    spec = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "abc"}}}]}
    for i in range(2):
        pod = PodInfo.from_object(_pod(spec, True, i))
        assert pod.unreadable and "cpu" in pod.unreadable[0]
    assert not model._RESOURCES_MEMO
    for i in range(2):
        with pytest.raises(ModelError, match="cpu"):
            PodInfo.from_object(_pod(spec, False, i))
    assert not model._RESOURCES_MEMO


def test_look_alike_values_are_not_confused() -> None:
    """1, 1.0, True and "1" read differently (True is no quantity): never one memo entry."""
    model._RESOURCES_MEMO.clear()
    results = []
    for i, value in enumerate(["1", 1, 1.0, True]):
        spec = {"containers": [{"name": "c", "resources": {"requests": {"cpu": value}}}]}
        results.append(_outcome(_pod(spec, False, i)))
        assert results[-1] == _plain(_pod(spec, False, i))
    assert results[0][0] == results[1][0] == results[2][0] == {"cpu": 1000}
    assert results[3][0] == "error"
