"""Reused verdicts against the plain allocator: on random clusters (nodes of a few shapes,
devices free or held, taints, binding conditions, selectors that fail on some devices,
incomplete and invalid pools, slices for all nodes or by label, per-device node selection,
shared counters, GPU topologies) and random claims (counts, All, firstAvailable, admin
access, tolerations, matchAttribute), `NodeVerdicts.decide` gives every node, in order, the
plain allocator's verdict, fails with the same error on the same node, and the allocation
on a node whose verdict was reused is the plain allocator's. The verdict cache is shared
by every example, so keys of different claim shapes must never meet."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.dra import (
    CANNOT_ALLOCATE,
    AllocationError,
    Allocator,
    CelCache,
    DeviceID,
    Features,
)
from scheduler.core.dra.allocator import NodeViews
from scheduler.core.dra.verdicts import FEASIBLE, NodeVerdicts, VerdictCache
from scheduler.core.topology import GpuSelector, Topology
from tests.dra.builders import (
    ALL_NODES,
    PER_DEVICE,
    Node,
    Version,
    all_request,
    cel,
    claim,
    device,
    device_class,
    first_available,
    label_selector,
    match_attribute,
    request,
    resource_slice,
    sub,
)
from tests.dra.objects import dgx1

A, B = "driver-a", "driver-b"
CEL = CelCache()
CACHE = VerdictCache()
SELECTOR = GpuSelector()
TOPOLOGY: Topology = dgx1()
CLASSES = {
    c.name: c
    for c in (
        device_class("class-a", A),
        device_class("class-b", B),
        device_class("class-any", A, expr="true"),
    )
}
SELECTORS = [
    'device.attributes["driver-a"].numa == 0',
    'device.capacity["driver-a"].memory.compareTo(quantity("2Gi")) >= 0',
    'device.attributes["driver-a"].model.startsWith("h")',
    'device.attributes["driver-a"].extra == 1',  # a CEL error where `extra` is missing
]
TAINT = {"key": "broken", "value": "yes", "effect": "NoSchedule"}
TOLERATION = {"key": "broken", "operator": "Exists"}

device_st = st.fixed_dictionaries(
    {
        "numa": st.integers(0, 1),
        "mem": st.integers(1, 3),
        "model": st.sampled_from(["h100", "a100"]),
        "tainted": st.integers(0, 7).map(lambda n: n == 0),
        "extra": st.integers(0, 6).map(lambda n: n if n < 2 else None),
        "bound": st.integers(0, 14).map(lambda n: n == 0),
        "bad_version": st.integers(0, 39).map(lambda n: n == 0),
    }
)
shape_st = st.fixed_dictionaries(
    {
        "devices": st.lists(device_st, min_size=0, max_size=6),
        "driver": st.sampled_from([A, A, B]),
        "incomplete": st.integers(0, 9).map(lambda n: n == 0),
        "duplicate": st.integers(0, 14).map(lambda n: n == 0),
        "counters": st.integers(0, 9).map(lambda n: n == 0),
    }
)
selectors_st = st.lists(
    st.sampled_from([*SELECTORS[:3], *SELECTORS[:3], SELECTORS[3]]), max_size=2, unique=True
)
tolerations_st = st.integers(0, 2).map(lambda n: [TOLERATION] if n == 0 else [])
exact_st = st.tuples(
    st.sampled_from(["exact", "exact", "exact", "all", "first", "admin"]),
    st.integers(1, 2),
    selectors_st,
    tolerations_st,
    st.sampled_from(["class-a", "class-a", "class-b", "class-any"]),
)
claim_st = st.tuples(
    st.lists(exact_st, min_size=1, max_size=2),
    st.sampled_from([None, None, "driver-a/numa", "driver-a/model"]),
)


def _device(name: str, d: dict[str, Any], uuid: str | None) -> dict[str, Any]:
    attributes: dict[str, Any] = {"numa": d["numa"], "model": d["model"]}
    if d["extra"] is not None:
        attributes["extra"] = d["extra"]
    if uuid is not None:
        attributes["uuid"] = uuid
    if d["bad_version"]:
        attributes["fw"] = Version("not-a-version")
    return device(
        name,
        attributes=attributes,
        capacity={"memory": f"{d['mem']}Gi"},
        taints=[TAINT] if d["tainted"] else [],
        binding_conditions=["ready"] if d["bound"] else [],
    )


def _build_claim(index: int, spec: tuple[list[Any], str | None]) -> Any:
    requests = []
    for j, (kind, count, selectors, tolerations, class_name) in enumerate(spec[0]):
        name = f"r{j}"
        exprs = [cel(s) for s in selectors]
        if kind == "all":
            requests.append(all_request(name, class_name, *exprs, tolerations=tolerations))
        elif kind == "first":
            requests.append(
                first_available(
                    name,
                    sub("big", class_name, count + 1, *exprs, tolerations=tolerations),
                    sub("small", class_name, count, tolerations=tolerations),
                )
            )
        else:
            requests.append(
                request(
                    name,
                    class_name,
                    count,
                    *exprs,
                    admin=True if kind == "admin" else None,
                    tolerations=tolerations,
                )
            )
    constraints = [match_attribute(spec[1])] if spec[1] else []
    return claim(f"claim-{index}", *requests, constraints=constraints)


def _outcome(run: Any) -> tuple[str, Any]:
    try:
        return "ok", run()
    except AllocationError as exc:
        return ("on-node" if exc.on_node else "error"), str(exc)


@settings(max_examples=400, deadline=None)
@given(
    shapes=st.lists(shape_st, min_size=1, max_size=3),
    layout=st.lists(st.tuples(st.integers(0, 2), st.booleans()), min_size=1, max_size=7),
    shared=st.sampled_from([None, None, "all", "label", "per-device"]),
    claims=st.lists(claim_st, min_size=1, max_size=2),
    held=st.lists(st.integers(0, 40), max_size=8),
    topology=st.booleans(),
)
def test_reused_verdicts_equal_the_allocator(
    shapes: list[dict[str, Any]],
    layout: list[tuple[int, bool]],
    shared: str | None,
    claims: list[tuple[list[Any], str | None]],
    held: list[int],
    topology: bool,
) -> None:
    nodes, slices, ids = [], [], []
    for n, (shape_index, region) in enumerate(layout):
        name = f"node-{n}"
        nodes.append(Node(name, {"region": "r1" if region else "r0"}))
        shape = shapes[shape_index % len(shapes)]
        names = [f"dev-{i}" for i in range(len(shape["devices"]))]
        if shape["duplicate"] and names:
            names[-1] = names[0]
        driver = shape["driver"]
        devices = []
        for i, d in enumerate(shape["devices"]):
            uuid = f"GPU-{i:08x}-aaaa" if topology and i < 8 else f"GPU-{n:04x}-{i:04x}"
            spec = _device(names[i], d, uuid)
            if shape["counters"]:
                spec["consumesCounters"] = [
                    {"counterSet": "set", "counters": {"mem": {"value": f"{d['mem']}Gi"}}}
                ]
            devices.append(spec)
        counters = {"set": {"mem": "4Gi"}} if shape["counters"] else None
        count = 2 if shape["incomplete"] else 1
        slices.append(resource_slice(f"{name}-a", name, name, driver, *devices, count=count))
        if counters:
            slices.append(
                resource_slice(f"{name}-c", name, name, driver, count=2, counters=counters)
            )
        ids += [DeviceID(driver, name, d) for d in names]
    if shared is not None:
        where: Any = {
            "all": ALL_NODES,
            "label": label_selector("region", "r1"),
            "per-device": PER_DEVICE,
        }[shared]
        extra = []
        for i in range(3):
            spec = _device(f"net-{i}", {"numa": i % 2, "mem": 2, "model": "h100",
                                        "tainted": False, "extra": 1, "bound": False,
                                        "bad_version": False}, None)  # fmt: skip
            if shared == "per-device":
                spec["nodeName" if i else "allNodes"] = f"node-{i}" if i else True
            extra.append(spec)
        slices.append(resource_slice("shared", where, "shared", A, *extra))
        ids += [DeviceID(A, "shared", f"net-{i}") for i in range(3)]
    allocated = frozenset(ids[i] for i in held if i < len(ids))
    the_claims = [_build_claim(i, c) for i, c in enumerate(claims)]
    gpu_topology = TOPOLOGY if topology else None

    plain = Allocator(
        CLASSES, slices, allocated, features=Features(), cel=CEL, gpu_selector=SELECTOR
    )
    fast = Allocator(
        CLASSES,
        slices,
        allocated,
        features=Features(),
        cel=CEL,
        gpu_selector=SELECTOR,
        views=NodeViews(),
    )
    verdicts = NodeVerdicts(fast, the_claims, CACHE)
    for node in nodes:
        expected = _outcome(lambda n=node: plain.allocate(n, the_claims, topology=gpu_topology))
        got = _outcome(lambda n=node: verdicts.decide(n, gpu_topology))
        if expected[0] == "error":
            assert got == expected
            return
        if expected[0] == "on-node":
            assert got == ("ok", (expected[1], None))
            continue
        results = expected[1]
        assert got[0] == "ok"
        verdict, found = got[1]
        assert verdict == (FEASIBLE if results is not None else CANNOT_ALLOCATE)
        if results is not None:
            if found is None:  # reused: the allocation is computed on demand
                found = fast.allocate(node, the_claims, topology=gpu_topology)
            assert found == results
