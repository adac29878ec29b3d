"""Whole cycles with reused verdicts against the allocator on every node: random clusters of
GPU nodes of two kinds (some with our DGX-1 topology annotation, some without any DRA
devices) and random pods with claims (counts, selectors, constraints, shared claims)
scheduled in turn on two identical clusters give the same outcome, node, message and
allocated devices for every pod."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from plugins.dynamic_resources import DynamicResources
from tests.dra.objects import (
    claim,
    claim_pod,
    device_class,
    dgx1,
    gpu_node,
    gpu_slice,
    request,
)
from tests.dra.plugin_support import Cluster, cluster

SELECTORS = [
    None,
    'device.attributes["gpu.nvidia.com"].productName.startsWith("Tesla")',
    'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0',
]

node_st = st.tuples(st.sampled_from(["plain", "dgx", "none", "small"]), st.booleans())
pod_st = st.tuples(
    st.integers(1, 5),
    st.sampled_from(SELECTORS),
    st.booleans(),  # a pcieRoot-like matchAttribute constraint
    st.integers(0, 3),  # 0: share the previous pod's claim
)


def _build(nodes: list[tuple[str, bool]], pods: list[tuple[int, str | None, bool, int]]) -> tuple[
    list[dict[str, Any]], list[dict[str, Any]]
]:  # fmt: skip
    objects: list[dict[str, Any]] = [device_class()]
    topology = dgx1()
    for i, (kind, cordoned) in enumerate(nodes):
        name = f"n{i:02d}"
        annotated = topology if kind == "dgx" else None
        objects.append(gpu_node(name, annotated, unschedulable=cordoned))
        if kind == "none":
            continue
        published = gpu_slice(name, 4 if kind == "small" else 8, annotated)
        for device in published["spec"]["devices"]:
            index = int(device["name"][4:])
            if annotated is None:
                device["attributes"]["uuid"] = {"string": f"GPU-{i:04x}{index:04x}"}
            device["attributes"]["numa"] = {"int": index // 4}
        objects.append(published)
    pod_objects = []
    for j, (count, selector, constrained, share) in enumerate(pods):
        if share == 0 and j > 0:
            pod_objects.append(claim_pod(f"p{j}", [("gpus", f"c{j - 1}")]))
            continue
        extra: dict[str, Any] = {}
        if selector is not None:
            extra["selectors"] = [{"cel": {"expression": selector}}]
        obj = claim(f"c{j}", request(count=count, **extra))
        if constrained:
            obj["spec"]["devices"]["constraints"] = [{"matchAttribute": "gpu.nvidia.com/numa"}]
        objects.append(obj)
        pod_objects.append(claim_pod(f"p{j}", [("gpus", f"c{j}")]))
    return objects, pod_objects


def _run(c: Cluster, pods: list[dict[str, Any]]) -> list[Any]:
    out = []
    dra = c.cache.snapshot.storage.dra
    for j, pod in enumerate(pods):
        decision = c.schedule(pod)
        node = decision.result.node if decision.result is not None else None
        name = pod["spec"]["resourceClaims"][0]["resourceClaimName"]
        found = dra.claim("default", name)
        devices = None
        if found is not None and found.allocation is not None:
            devices = tuple(str(d.id) for d in found.allocation.devices)
        out.append((j, decision.outcome, node, decision.message, devices))
    return out


def _plugin(c: Cluster) -> DynamicResources:
    for framework in c.assembly.frameworks.values():
        for p in framework.pre_filters:
            if isinstance(p, DynamicResources):
                return p
    raise LookupError("DynamicResources")


@settings(max_examples=40, deadline=None)
@given(
    nodes=st.lists(node_st, min_size=1, max_size=8),
    pods=st.lists(pod_st, min_size=1, max_size=12),
)
def test_reused_verdicts_decide_as_the_allocator_on_every_node(
    nodes: list[tuple[str, bool]], pods: list[tuple[int, str | None, bool, int]]
) -> None:
    objects, pod_objects = _build(nodes, pods)
    fast, plain = cluster(objects), cluster(objects)
    _plugin(plain).reuse_verdicts = False
    assert _run(fast, pod_objects) == _run(plain, pod_objects)


def test_bench_shape_reuses_verdicts() -> None:
    """Nodes of one kind: the allocator runs once per distinct number of GPUs held, not per
    node."""
    objects, pod_objects = _build([("plain", False)] * 50, [(1, None, False, 1)] * 10)
    fast = cluster(objects)
    decided = _run(fast, pod_objects)
    assert all(d[1] == "assumed" for d in decided)
    cache = _plugin(fast).verdict_cache
    assert cache.runs <= 10 + 1
    assert cache.hits == 10 * 50 - cache.runs
