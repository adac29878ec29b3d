"""kube's structured allocator cases (dynamic-resource-allocation/structured/internal/
allocatortesting), ported one by one under their upstream names.

Each case runs with the features kube's case enables (none unless it says), against a node,
the classes, the slices and the devices already allocated; it expects per claim the devices
(request, driver, pool, device, adminAccess) in any order and the allocation's node selector,
or no allocation, or an error containing kube's message. kube's claims have no namespace;
here they are in "default", so messages read "claim default/claim-0" where kube's read
"claim claim-0".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from scheduler.core.dra import (
    AllocationError,
    AllocationResult,
    Allocator,
    CelCache,
    DeviceClass,
    DeviceID,
    Features,
    ResourceClaim,
    ResourceSlice,
)
from scheduler.core.dra.types import _selector_to_api
from tests.dra.builders import (
    ALL_NODES,
    EARTH,
    PER_DEVICE,
    PLANET_KEY,
    REGION_KEY,
    Node,
    Version,
    all_request,
    cel,
    claim,
    device,
    device_class,
    first_available,
    label_selector,
    local_selector,
    match_attribute,
    node,
    opaque,
    request,
    resource_slice,
    sub,
)

A, B = "driver-a", "driver-b"
CA, CB = "class-a", "class-b"
P1, P2, P3, P4 = "pool-1", "pool-2", "pool-3", "pool-4"
N1 = node("node-1", "region-1")
N2 = node("node-2", "region-2")
D0, D1, D2, D3 = "device-0", "device-1", "device-2", "device-3"
ALL = Features(True, True, True, True)
NONE = Features(False, False, False, False)
ADMIN = Features(
    admin_access=True, prioritized_list=False, partitionable_devices=False, device_taints=False
)
PRIO = Features(
    admin_access=False, prioritized_list=True, partitionable_devices=False, device_taints=False
)
PART = Features(
    admin_access=False, prioritized_list=False, partitionable_devices=True, device_taints=False
)
PART_PRIO = Features(
    admin_access=False, prioritized_list=True, partitionable_devices=True, device_taints=False
)
TAINTS = Features(
    admin_access=False, prioritized_list=False, partitionable_devices=False, device_taints=True
)
TAINTS_PRIO = Features(
    admin_access=False, prioritized_list=True, partitionable_devices=False, device_taints=True
)
TAINTS_ADMIN = Features(
    admin_access=True, prioritized_list=False, partitionable_devices=False, device_taints=True
)

MEM = 'device.capacity["driver-a"].memory.compareTo(quantity("{}")) >= 0'
INT_ATTR, VERSION_ATTR = "driver-a/numa", "driver-a/driverVersion"
STRING_ATTR, BOOL_ATTR = "driver-a/stringAttribute", "driver-a/boolAttribute"

TAINT_NONE = {"key": "taint-key", "value": "taint-value", "effect": "None"}
TAINT_NO_SCHEDULE = {"key": "taint-key", "value": "taint-value", "effect": "NoSchedule"}
TAINT_NO_EXECUTE = {"key": "taint-key", "value": "taint-value-2", "effect": "NoExecute"}
TOLERATE_NO_SCHEDULE = {"operator": "Exists", "key": "taint-key", "effect": "NoSchedule"}
TOLERATE_NO_EXECUTE = {
    "operator": "Equal", "key": "taint-key", "value": "taint-value-2", "effect": "NoExecute",
}  # fmt: skip


def mem(quantity: str) -> dict[str, Any]:
    return cel(MEM.format(quantity))


def r(req: str, driver: str, pool: str, dev: str, admin: bool = False) -> tuple[Any, ...]:
    return (req, driver, pool, dev, True if admin else None)


@dataclass
class Expect:
    """One claim's allocation: devices (any order), node selector (API form)."""

    devices: Sequence[tuple[Any, ...]]
    selector: Mapping[str, Any] | None = field(default_factory=lambda: local_selector("node-1"))
    config: Sequence[Mapping[str, Any]] | None = None
    tolerations: Sequence[Sequence[Mapping[str, Any]]] | None = None


@dataclass
class Case:
    claims: Sequence[ResourceClaim] = ()
    classes: Sequence[DeviceClass] = ()
    slices: Sequence[ResourceSlice] = ()
    node: Node = N1
    allocated: Sequence[tuple[str, str, str]] = ()
    features: Features = NONE
    expect: Sequence[Expect] | None = None
    error: str | None = None


def one(*devices: tuple[Any, ...], selector: Any = "local") -> list[Expect]:
    return [Expect(devices) if selector == "local" else Expect(devices, selector)]


def slice1(nodes: Any = "node-1", pool: str = P1, driver: str = A) -> ResourceSlice:
    return resource_slice("slice-1", nodes, pool, driver, device(D1))


def devices_slice(
    name: str, pool: str, driver: str, *devs: dict[str, Any], **kw: Any
) -> ResourceSlice:
    return resource_slice(name, "node-1", pool, driver, *devs, **kw)


def many(name: str, pool: str, driver: str, n: int) -> ResourceSlice:
    return devices_slice(name, pool, driver, *(device(f"device-{i}") for i in range(n)))


CLASS_A, CLASS_B = device_class(CA, A), device_class(CB, B)


def attrs(**values: Any) -> dict[str, Any]:
    return values


def counters_slice(
    name: str,
    pool: str,
    driver: str,
    nodes: Any = "node-1",
    count: int = 2,
    **sets: Mapping[str, str],
) -> ResourceSlice:
    return resource_slice(name, nodes, pool, driver, count=count, counters=sets)


def part(name: str, consumes: Mapping[str, Mapping[str, str]], **kw: Any) -> dict[str, Any]:
    return device(name, consumes=consumes, from_counters=True, **kw)


CASES: dict[str, Case] = {
    "empty": Case(expect=[]),
    "simple": Case(
        claims=[claim("claim-0", request("req-0", CA))],
        classes=[CLASS_A],
        slices=[slice1()],
        expect=one(r("req-0", A, P1, D1)),
    ),
    "other-node": Case(
        claims=[claim("claim-0", request("req-0", CA))],
        classes=[CLASS_A],
        slices=[slice1("node-1", P1, B), resource_slice("slice-2", "node-2", P2, A, device(D1))],
        node=N2,
        expect=[Expect([r("req-0", A, P2, D1)], local_selector("node-2"))],
    ),
    "small-and-large": Case(
        claims=[
            claim(
                "claim-0", request("req-0", CA, 1, mem("1Gi")), request("req-1", CA, 1, mem("2Gi"))
            )
        ],
        classes=[CLASS_A],
        slices=[
            devices_slice(
                "slice-1",
                P1,
                A,
                device(D1, capacity={"memory": "1Gi"}),
                device(D2, capacity={"memory": "2Gi"}),
            )
        ],
        expect=one(r("req-0", A, P1, D1), r("req-1", A, P1, D2)),
    ),
    "small-and-large-backtrack-requests": Case(
        claims=[
            claim(
                "claim-0", request("req-0", CA, 1, mem("1Gi")), request("req-1", CA, 1, mem("2Gi"))
            )
        ],
        classes=[CLASS_A],
        slices=[
            devices_slice(
                "slice-1",
                P1,
                A,
                device(D2, capacity={"memory": "2Gi"}),
                device(D1, capacity={"memory": "1Gi"}),
            )
        ],
        expect=one(r("req-0", A, P1, D1), r("req-1", A, P1, D2)),
    ),
    "small-and-large-backtrack-claims": Case(
        claims=[
            claim("claim-0", request("req-0", CA, 1, mem("1Gi"))),
            claim("claim-1", request("req-1", CA, 1, mem("2Gi"))),
        ],
        classes=[CLASS_A],
        slices=[
            devices_slice(
                "slice-1",
                P1,
                A,
                device(D2, capacity={"memory": "2Gi"}),
                device(D1, capacity={"memory": "1Gi"}),
            )
        ],
        expect=[Expect([r("req-0", A, P1, D1)]), Expect([r("req-1", A, P1, D2)])],
    ),
    "devices-split-across-different-slices": Case(
        claims=[claim("claim-0", request("req-0", CA, 2))],
        classes=[CLASS_A],
        slices=[slice1(), resource_slice("slice-2", "node-1", P2, A, device(D1))],
        expect=one(r("req-0", A, P1, D1), r("req-0", A, P2, D1)),
    ),
    "obsolete-slice": Case(
        claims=[claim("claim-0", request("req-0", CA))],
        classes=[CLASS_A],
        slices=[
            resource_slice("slice-1-obsolete", "node-1", P1, A, device(D1), count=2),
            resource_slice("slice-1-obsolete", "node-1", P1, A, device(D2), count=2, generation=2),
        ],
        expect=None,
    ),
    "duplicate-slice": Case(
        claims=[claim("claim-0", request("req-0", CA))],
        classes=[CLASS_A],
        slices=[
            resource_slice("slice-1", "node-1", P1, A, device(D1), count=2),
            resource_slice("slice-1-2", "node-1", P1, A, device(D1), count=2),
        ],
        error="invalid resource pools were encountered",
    ),
    "no-slices": Case(claims=[claim("claim-0", request("req-0", CA))], classes=[CLASS_A]),
    "not-enough-suitable-devices": Case(
        claims=[claim("claim-0", request("req-0", CA)), claim("claim-0", request("req-1", CA))],
        classes=[CLASS_A],
        slices=[slice1()],
    ),
    "no-classes": Case(
        claims=[claim("claim-0", request("req-0", CA))],
        slices=[slice1()],
        error="could not retrieve device class class-a",
    ),
    "unknown-class": Case(
        claims=[claim("claim-0", request("req-0", "unknown-class"))],
        classes=[CLASS_A],
        slices=[slice1()],
        error="could not retrieve device class unknown-class",
    ),
    "empty-class": Case(
        claims=[claim("claim-0", request("req-0", ""))],
        classes=[CLASS_A],
        slices=[slice1()],
        error=(
            "claim default/claim-0, request req-0: missing device class "
            "name (unsupported request type?)"
        ),
    ),
    "no-claims-to-allocate": Case(classes=[CLASS_A], slices=[slice1()], expect=[]),
    "all-devices-single": Case(
        claims=[claim("claim-0", all_request("req-0", CA))],
        classes=[CLASS_A],
        slices=[slice1()],
        expect=one(r("req-0", A, P1, D1)),
    ),
    "all-devices-many": Case(
        claims=[claim("claim-0", all_request("req-0", CA))],
        classes=[CLASS_A],
        slices=[slice1(), slice1("node-1", P2)],
        expect=one(r("req-0", A, P1, D1), r("req-0", A, P2, D1)),
    ),
    "all-devices-of-the-incomplete-pool": Case(
        claims=[claim("claim-0", request("req-0", CA, 1, mode="All"))],
        classes=[CLASS_A],
        slices=[resource_slice("slice-1", "node-1", P1, A, device(D1), count=2)],
        error=(
            "claim default/claim-0, request req-0: asks for all devices, "
            "but resource pool driver-a/pool-1 is currently being updated"
        ),
    ),
    "all-devices-plus-another": Case(
        claims=[claim("claim-0", all_request("req-0", CA)), claim("claim-1", request("req-0", CB))],
        classes=[CLASS_A, CLASS_B],
        slices=[slice1(), slice1("node-1", P1, B)],
        expect=[Expect([r("req-0", A, P1, D1)]), Expect([r("req-0", B, P1, D1)])],
    ),
    "all-devices-plus-another-reversed": Case(
        claims=[claim("claim-1", request("req-0", CB)), claim("claim-0", all_request("req-0", CA))],
        classes=[CLASS_A, CLASS_B],
        slices=[slice1(), slice1("node-1", P1, B)],
        expect=[Expect([r("req-0", B, P1, D1)]), Expect([r("req-0", A, P1, D1)])],
    ),
    "all-devices-many-plus-another": Case(
        claims=[claim("claim-0", all_request("req-0", CA)), claim("claim-1", request("req-0", CB))],
        classes=[CLASS_A, CLASS_B],
        slices=[devices_slice("slice-1", P1, A, device(D1), device(D2)), slice1("node-1", P1, B)],
        expect=[
            Expect([r("req-0", A, P1, D1), r("req-0", A, P1, D2)]),
            Expect([r("req-0", B, P1, D1)]),
        ],
    ),
    "all-devices-many-plus-another-reversed": Case(
        claims=[claim("claim-1", request("req-0", CB)), claim("claim-0", all_request("req-0", CA))],
        classes=[CLASS_A, CLASS_B],
        slices=[devices_slice("slice-1", P1, A, device(D1), device(D2)), slice1("node-1", P1, B)],
        expect=[
            Expect([r("req-0", B, P1, D1)]),
            Expect([r("req-0", A, P1, D1), r("req-0", A, P1, D2)]),
        ],
    ),
    "all-devices-no-solution": Case(
        claims=[claim("claim-1", request("req-0", CA)), claim("claim-0", all_request("req-0", CA))],
        classes=[CLASS_A],
        slices=[slice1()],
    ),
    "all-devices-no-solution-reversed": Case(
        claims=[claim("claim-0", all_request("req-0", CA)), claim("claim-1", request("req-0", CA))],
        classes=[CLASS_A],
        slices=[slice1()],
    ),
    "all-devices-slice-without-devices": Case(
        claims=[claim("claim-0", all_request("req-0", CA))],
        classes=[CLASS_A],
        slices=[resource_slice("slice-1", "node-1", P1, A)],
    ),
    "all-devices-no-slices": Case(
        claims=[claim("claim-0", all_request("req-0", CA))], classes=[CLASS_A]
    ),
    "all-devices-some-allocated": Case(
        claims=[claim("claim-0", all_request("req-0", CA))],
        classes=[CLASS_A],
        slices=[devices_slice("slice-1", P1, A, device(D1), device(D2))],
        allocated=[(A, P1, D1)],
    ),
    "all-devices-some-allocated-admin-access": Case(
        features=ADMIN,
        claims=[claim("claim-0", all_request("req-0", CA, admin=True))],
        classes=[CLASS_A],
        slices=[devices_slice("slice-1", P1, A, device(D1), device(D2))],
        allocated=[(A, P1, D1)],
        expect=one(r("req-0", A, P1, D1, True), r("req-0", A, P1, D2, True)),
    ),
    "all-devices-some-allocating-admin-access": Case(
        features=ADMIN,
        claims=[
            claim("claim-0", request("req-0", CA, admin=True), all_request("req-1", CA, admin=True))
        ],
        classes=[CLASS_A],
        slices=[devices_slice("slice-1", P1, A, device(D1), device(D2))],
    ),
    "count-devices-some-allocated-admin-access": Case(
        features=ADMIN,
        claims=[claim("claim-0", request("req-0", CA, 2, admin=True))],
        classes=[CLASS_A],
        slices=[devices_slice("slice-1", P1, A, device(D1), device(D2))],
        allocated=[(A, P1, D1)],
        expect=one(r("req-0", A, P1, D1, True), r("req-0", A, P1, D2, True)),
    ),
    "separate-claims-share-device-admin-access": Case(
        features=ADMIN,
        claims=[
            claim("claim-0", request("req-0", CA, admin=True)),
            claim("claim-1", request("req-0", CA, admin=True)),
        ],
        classes=[CLASS_A],
        slices=[devices_slice("slice-1", P1, A, device(D1), device(D2))],
        expect=[Expect([r("req-0", A, P1, D1, True)]), Expect([r("req-0", A, P1, D1, True)])],
    ),
    "admin-access-claims-device-allocating-for-non-admin-access": Case(
        features=ADMIN,
        claims=[
            claim("claim-0", request("req-0", CA)),
            claim("claim-1", request("req-0", CA, admin=True)),
        ],
        classes=[CLASS_A],
        slices=[devices_slice("slice-1", P1, A, device(D1), device(D2))],
        expect=[Expect([r("req-0", A, P1, D1)]), Expect([r("req-0", A, P1, D1, True)])],
    ),
    "all-devices-slice-without-devices-prioritized-list": Case(
        features=PRIO,
        claims=[
            claim(
                "claim-0",
                first_available("req-0", sub("subReq-0", CA, 0, mode="All"), sub("subReq-1", CB)),
            )
        ],
        classes=[CLASS_A, CLASS_B],
        slices=[
            resource_slice("slice-1", "node-1", P1, A),
            resource_slice("slice-2", "node-1", P2, B, device(D1)),
        ],
        expect=one(r("req-0/subReq-1", B, P2, D1)),
    ),
    "all-devices-no-slices-prioritized-list": Case(
        features=PRIO,
        claims=[
            claim(
                "claim-0",
                first_available("req-0", sub("subReq-0", CA, 0, mode="All"), sub("subReq-1", CB)),
            )
        ],
        classes=[CLASS_A, CLASS_B],
        slices=[resource_slice("slice-2", "node-1", P2, B, device(D1))],
        expect=one(r("req-0/subReq-1", B, P2, D1)),
    ),
    "all-devices-some-allocated-prioritized-list": Case(
        features=PRIO,
        claims=[
            claim(
                "claim-0",
                first_available("req-0", sub("subReq-0", CA, 0, mode="All"), sub("subReq-1", CB)),
            )
        ],
        classes=[CLASS_A, CLASS_B],
        allocated=[(A, P1, D1)],
        slices=[
            devices_slice("slice-1", P1, A, device(D1), device(D2)),
            resource_slice("slice-2", "node-1", P2, B, device(D1)),
        ],
        expect=one(r("req-0/subReq-1", B, P2, D1)),
    ),
    "network-attached-device": Case(
        claims=[claim("claim-0", request("req-0", CA))],
        classes=[CLASS_A],
        slices=[slice1(label_selector(REGION_KEY, "region-1"))],
        expect=one(r("req-0", A, P1, D1), selector=label_selector(REGION_KEY, "region-1")),
    ),
    "unsuccessful-allocation-network-attached-device": Case(
        claims=[claim("claim-0", request("req-0", CA))],
        classes=[CLASS_A],
        slices=[slice1(label_selector(REGION_KEY, "region-1"))],
        node=N2,
    ),
    "many-network-attached-devices": Case(
        claims=[claim("claim-0", request("req-0", CA, 4))],
        classes=[CLASS_A],
        slices=[
            slice1(label_selector(REGION_KEY, "region-1"), P1),
            slice1(ALL_NODES, P2),
            slice1(label_selector(PLANET_KEY, EARTH), P3),
            slice1(local_selector("node-1"), P4),
        ],
        expect=one(
            r("req-0", A, P1, D1),
            r("req-0", A, P2, D1),
            r("req-0", A, P3, D1),
            r("req-0", A, P4, D1),
            selector={
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": REGION_KEY, "operator": "In", "values": ["region-1"]},
                            {"key": PLANET_KEY, "operator": "In", "values": [EARTH]},
                        ],
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": ["node-1"]}
                        ],
                    }
                ]
            },
        ),
    ),
    "local-and-network-attached-devices": Case(
        claims=[claim("claim-0", request("req-0", CA, 2))],
        classes=[CLASS_A],
        slices=[slice1(label_selector(REGION_KEY, "region-1"), P1), slice1("node-1", P2)],
        expect=one(r("req-0", A, P1, D1), r("req-0", A, P2, D1)),
    ),
    "several-different-drivers": Case(
        claims=[claim("claim-0", request("req-0", CA)), claim("claim-0", request("req-0", CB))],
        classes=[CLASS_A, CLASS_B],
        slices=[devices_slice("slice-1", P1, A, device(D1), device(D2)), slice1("node-1", P1, B)],
        expect=[Expect([r("req-0", A, P1, D1)]), Expect([r("req-0", B, P1, D1)])],
    ),
    "already-allocated-devices": Case(
        claims=[claim("claim-0", request("req-0", CA))],
        classes=[CLASS_A],
        slices=[slice1()],
        allocated=[(A, P1, D1), (A, P1, D2)],
    ),
    "admin-access-disabled": Case(
        claims=[claim("claim-0", request("req-0", CA, admin=True))],
        classes=[CLASS_A],
        slices=[slice1()],
        error=(
            "claim default/claim-0, request req-0: admin access is "
            "requested, but the feature is disabled"
        ),
    ),
    "admin-access-enabled": Case(
        features=ADMIN,
        claims=[claim("claim-0", request("req-0", CA, admin=True))],
        classes=[CLASS_A],
        slices=[slice1()],
        allocated=[(A, P1, D1), (A, P1, D2)],
        expect=one(r("req-0", A, P1, D1, True)),
    ),
    "with-constraint": Case(
        claims=[
            claim(
                "claim-0",
                request("req-0", CA),
                request("req-1", CA),
                constraints=[
                    match_attribute(a) for a in (INT_ATTR, VERSION_ATTR, STRING_ATTR, BOOL_ATTR)
                ],
            )
        ],
        classes=[CLASS_A],
        slices=[
            devices_slice(
                "slice-1",
                P1,
                A,
                *(
                    device(
                        d,
                        attributes=attrs(
                            driverVersion=Version("1.0.0"),
                            numa=1,
                            stringAttribute="stringAttributeValue",
                            boolAttribute=True,
                        ),
                    )
                    for d in (D1, D2)
                ),
            )
        ],
        expect=one(r("req-0", A, P1, D1), r("req-1", A, P1, D2)),
    ),
    "with-constraint-non-existent-attribute": Case(
        claims=[
            claim(
                "claim-0",
                request("req-0", CA),
                constraints=[match_attribute("driver-a/NonExistentAttribute")],
            )
        ],
        classes=[CLASS_A],
        slices=[slice1()],
    ),
    "with-constraint-not-matching-int-attribute": Case(
        claims=[claim("claim-0", request("req-0", CA, 2), constraints=[match_attribute(INT_ATTR)])],
        classes=[CLASS_A, CLASS_B],
        slices=[
            devices_slice(
                "slice-1",
                P1,
                A,
                device(D1, attributes={"numa": 1}),
                device(D2, attributes={"numa": 2}),
            )
        ],
    ),
    "with-constraint-not-matching-int-attribute-all-devices": Case(
        claims=[
            claim(
                "claim-0",
                request("req-0", CA, 0, mode="All"),
                constraints=[match_attribute(INT_ATTR)],
            )
        ],
        classes=[CLASS_A, CLASS_B],
        slices=[
            devices_slice(
                "slice-1",
                P1,
                A,
                device(D1, attributes={"numa": 1}),
                device(D2, attributes={"numa": 2}),
            )
        ],
        error=(
            "claim default/claim-0, request req-0: cannot add device "
            "driver-a/pool-1/device-2 because a claim constraint would not be satisfied"
        ),
    ),
    "with-constraint-not-matching-string-attribute": Case(
        claims=[
            claim("claim-0", request("req-0", CA, 2), constraints=[match_attribute(STRING_ATTR)])
        ],
        classes=[CLASS_A, CLASS_B],
        slices=[
            devices_slice(
                "slice-1",
                P1,
                A,
                device(D1, attributes={"stringAttribute": "stringAttributeValue"}),
                device(D2, attributes={"stringAttribute": "stringAttributeValue2"}),
            )
        ],
    ),
    "with-constraint-not-matching-bool-attribute": Case(
        claims=[
            claim("claim-0", request("req-0", CA, 2), constraints=[match_attribute(BOOL_ATTR)])
        ],
        classes=[CLASS_A, CLASS_B],
        slices=[
            devices_slice(
                "slice-1",
                P1,
                A,
                device(D1, attributes={"boolAttribute": True}),
                device(D2, attributes={"boolAttribute": False}),
            )
        ],
    ),
    "with-constraint-not-matching-version-attribute": Case(
        claims=[
            claim("claim-0", request("req-0", CA, 2), constraints=[match_attribute(VERSION_ATTR)])
        ],
        classes=[CLASS_A, CLASS_B],
        slices=[
            devices_slice(
                "slice-1",
                P1,
                A,
                device(D1, attributes={"driverVersion": Version("1.0.0")}),
                device(D2, attributes={"driverVersion": Version("2.0.0")}),
            )
        ],
    ),
    "with-constraint-for-request": Case(
        claims=[
            claim(
                "claim-0",
                request("req-0", CA),
                request("req-1", CA),
                constraints=[match_attribute(VERSION_ATTR, "req-0")],
            )
        ],
        classes=[CLASS_A, CLASS_B],
        slices=[
            devices_slice(
                "slice-1",
                P1,
                A,
                device(D1, attributes={"driverVersion": Version("1.0.0")}),
                device(D2, attributes={"driverVersion": Version("2.0.0")}),
            )
        ],
        expect=one(r("req-0", A, P1, D1), r("req-1", A, P1, D2)),
    ),
    "with-constraint-for-request-retry": Case(
        claims=[
            claim(
                "claim-0",
                request("req-0", CA),
                request("req-1", CA),
                constraints=[match_attribute(VERSION_ATTR, "req-0"), match_attribute(STRING_ATTR)],
            )
        ],
        classes=[CLASS_A, CLASS_B],
        slices=[
            devices_slice(
                "slice-1",
                P1,
                A,
                device(D1, attributes=attrs(driverVersion=Version("1.0.0"), stringAttribute="a")),
                device(D2, attributes=attrs(driverVersion=Version("2.0.0"), stringAttribute="b")),
                device(D3, attributes=attrs(driverVersion=Version("3.0.0"), stringAttribute="b")),
            )
        ],
        expect=one(r("req-0", A, P1, D2), r("req-1", A, P1, D3)),
    ),
    "with-class-device-config": Case(
        claims=[claim("claim-0", request("req-0", CA))],
        classes=[device_class(CA, A, config="classAttribute")],
        slices=[slice1()],
        expect=[
            Expect(
                [r("req-0", A, P1, D1)],
                config=[{"source": "FromClass", **opaque(A, "classAttribute")}],
            )
        ],
    ),
    "with-class-device-config-with-multiple-request-and-configs": Case(
        claims=[claim("claim-0", request("req-0", CA), request("req-1", CA), request("req-2", CB))],
        classes=[
            device_class(CA, A, config="classAttribute-A"),
            device_class(CB, B, config="classAttribute-B"),
        ],
        slices=[many("slice-1", P1, A, 2), resource_slice("slice-2", "node-1", P1, B, device(D1))],
        expect=[
            Expect(
                [r("req-0", A, P1, D0), r("req-1", A, P1, D1), r("req-2", B, P1, D1)],
                config=[
                    {
                        "source": "FromClass",
                        "requests": ["req-0", "req-1"],
                        **opaque(A, "classAttribute-A"),
                    },
                    {"source": "FromClass", "requests": ["req-2"], **opaque(B, "classAttribute-B")},
                ],
            )
        ],
    ),
    "claim-with-device-config": Case(
        claims=[claim("claim-0", request("req-0", CA), config=[opaque(A, "deviceAttribute")])],
        classes=[CLASS_A],
        slices=[slice1()],
        expect=[
            Expect(
                [r("req-0", A, P1, D1)],
                config=[{"source": "FromClaim", **opaque(A, "deviceAttribute")}],
            )
        ],
    ),
    "unknown-selector": Case(
        claims=[claim("claim-0", request("req-0", CA, 1, {}))],
        classes=[CLASS_A],
        slices=[slice1()],
        error="CEL expression empty (unsupported selector type?)",
    ),
    "unknown-allocation-mode": Case(
        claims=[claim("claim-0", request("req-0", CA, mode="future-mode"))],
        classes=[CLASS_A],
        slices=[slice1()],
        error="unsupported count mode future-mode",
    ),
    "unknown-constraint": Case(
        claims=[claim("claim-0", request("req-0", CA), constraints=[{}])],
        classes=[CLASS_A],
        slices=[slice1()],
        error="empty constraint (unsupported constraint type?)",
    ),
    "invalid-CEL-one-device": Case(
        claims=[claim("claim-0", request("req-0", CA, 1, cel("noSuchVar")))],
        classes=[CLASS_A],
        slices=[slice1()],
        error="undeclared reference",
    ),
    "invalid-CEL-one-device-class": Case(
        claims=[claim("claim-0", request("req-0", CA))],
        classes=[device_class(CA, A, expr="noSuchVar")],
        slices=[slice1()],
        error="undeclared reference",
    ),
    "invalid-CEL-all-devices": Case(
        claims=[claim("claim-0", all_request("req-0", CA, cel("noSuchVar")))],
        classes=[CLASS_A],
        slices=[slice1()],
        error="undeclared reference",
    ),
    "too-many-devices-single-request": Case(
        claims=[claim("claim-0", request("req-0", CA, 500))],
        classes=[CLASS_A],
        error="exceeds the claim limit",
    ),
    "many-devices-okay": Case(
        claims=[claim("claim-0", request("req-0", CA, 32))], classes=[CLASS_A]
    ),
    "too-many-devices-total": Case(
        claims=[claim("claim-0", request("req-0", CA, 32), request("req-1", CA, 1))],
        classes=[CLASS_A],
        slices=[many("slice-1", P1, A, 33)],
        error="exceeds the claim limit",
    ),
    "all-devices-invalid-CEL": Case(
        claims=[claim("claim-0", request("req-0", CA, 500))],
        classes=[CLASS_A],
        error="exceeds the claim limit",
    ),
    "prioritized-list-first-unavailable": Case(
        features=PRIO,
        claims=[
            claim("claim-0", first_available("req-0", sub("subReq-0", CB), sub("subReq-1", CA)))
        ],
        classes=[CLASS_A, CLASS_B],
        slices=[slice1()],
        expect=one(r("req-0/subReq-1", A, P1, D1)),
    ),
    "prioritized-list-non-available": Case(
        features=PRIO,
        claims=[
            claim(
                "claim-0", first_available("req-0", sub("subReq-0", CB, 2), sub("subReq-1", CA, 2))
            )
        ],
        classes=[CLASS_A, CLASS_B],
        slices=[slice1(), resource_slice("slice-2", "node-1", P2, B, device(D1))],
    ),
    "prioritized-list-device-config": Case(
        features=PRIO,
        claims=[
            claim(
                "claim-0",
                first_available("req-0", sub("subReq-0", CA), sub("subReq-1", CB, 2)),
                config=[
                    {"requests": ["req-0/subReq-0"], **opaque(A, "foo")},
                    {"requests": ["req-0/subReq-1"], **opaque(B, "bar")},
                ],
            )
        ],
        classes=[CLASS_A, CLASS_B],
        slices=[devices_slice("slice-1", P1, B, device(D1), device(D2))],
        expect=[
            Expect(
                [r("req-0/subReq-1", B, P1, D1), r("req-0/subReq-1", B, P1, D2)],
                config=[{"source": "FromClaim", **opaque(B, "bar")}],
            )
        ],
    ),
    "prioritized-list-class-config": Case(
        features=PRIO,
        claims=[
            claim(
                "claim-0", first_available("req-0", sub("subReq-0", CA, 2), sub("subReq-1", CB, 2))
            )
        ],
        classes=[device_class(CA, A, config="foo"), device_class(CB, B, config="bar")],
        slices=[
            devices_slice("slice-1", P1, B, device(D1), device(D2)),
            devices_slice("slice-2", P2, A, device(D3)),
        ],
        expect=[
            Expect(
                [r("req-0/subReq-1", B, P1, D1), r("req-0/subReq-1", B, P1, D2)],
                config=[{"source": "FromClass", **opaque(B, "bar")}],
            )
        ],
    ),
    "prioritized-list-subrequests-with-expressions": Case(
        features=PRIO,
        claims=[
            claim(
                "claim-0",
                request("req-0", CA, 1, mem("1Gi")),
                first_available(
                    "req-1", sub("subReq-0", CA, 1, mem("4Gi")), sub("subReq-1", CA, 2, mem("2Gi"))
                ),
            )
        ],
        classes=[CLASS_A],
        slices=[
            devices_slice(
                "slice-1",
                P1,
                A,
                device(D1, capacity={"memory": "2Gi"}),
                device(D2, capacity={"memory": "2Gi"}),
                device(D3, capacity={"memory": "1Gi"}),
            )
        ],
        expect=one(
            r("req-0", A, P1, D3), r("req-1/subReq-1", A, P1, D1), r("req-1/subReq-1", A, P1, D2)
        ),
    ),
    "prioritized-list-subrequests-with-constraints-ref-parent-request": Case(
        features=PRIO,
        claims=[
            claim(
                "claim-0",
                request("req-0", CA, 1, mem("8Gi")),
                first_available(
                    "req-1", sub("subReq-0", CA, 1, mem("2Gi")), sub("subReq-1", CA, 1, mem("1Gi"))
                ),
                constraints=[match_attribute(VERSION_ATTR, "req-0", "req-1")],
            )
        ],
        classes=[CLASS_A],
        slices=[
            devices_slice(
                "slice-1",
                P1,
                A,
                device(
                    D1, capacity={"memory": "8Gi"}, attributes={"driverVersion": Version("1.0.0")}
                ),
            ),
            devices_slice(
                "slice-2",
                P2,
                A,
                device(
                    D2, capacity={"memory": "2Gi"}, attributes={"driverVersion": Version("2.0.0")}
                ),
                device(
                    D3, capacity={"memory": "1Gi"}, attributes={"driverVersion": Version("1.0.0")}
                ),
            ),
        ],
        expect=one(r("req-0", A, P1, D1), r("req-1/subReq-1", A, P2, D3)),
    ),
    "prioritized-list-subrequests-with-constraints-ref-sub-request": Case(
        features=PRIO,
        claims=[
            claim(
                "claim-0",
                request("req-0", CA, 1, mem("8Gi")),
                first_available(
                    "req-1", sub("subReq-0", CA, 1, mem("2Gi")), sub("subReq-1", CA, 1, mem("1Gi"))
                ),
                constraints=[match_attribute(VERSION_ATTR, "req-0", "req-1/subReq-0")],
            )
        ],
        classes=[CLASS_A],
        slices=[
            devices_slice(
                "slice-1",
                P1,
                A,
                device(
                    D1, capacity={"memory": "8Gi"}, attributes={"driverVersion": Version("1.0.0")}
                ),
            ),
            devices_slice(
                "slice-2",
                P2,
                A,
                device(
                    D2, capacity={"memory": "2Gi"}, attributes={"driverVersion": Version("2.0.0")}
                ),
            ),
        ],
        expect=one(r("req-0", A, P1, D1), r("req-1/subReq-1", A, P2, D2)),
    ),
    "prioritized-list-subrequests-with-allocation-mode-all": Case(
        features=PRIO,
        claims=[
            claim(
                "claim-0",
                first_available("req-0", sub("subReq-0", CA, 0, mode="All"), sub("subReq-1", CA)),
            )
        ],
        classes=[CLASS_A],
        slices=[devices_slice("slice-1", P1, A, device(D1), device(D2))],
        allocated=[(A, P1, D1)],
        expect=one(r("req-0/subReq-1", A, P1, D2)),
    ),
    "prioritized-list-allocation-mode-all-multiple-requests": Case(
        features=PRIO,
        claims=[
            claim(
                "claim-0",
                request("req-0", CA),
                first_available("req-1", sub("subReq-0", CA, 0, mode="All"), sub("subReq-1", CA)),
            )
        ],
        classes=[CLASS_A],
        slices=[devices_slice("slice-1", P1, A, device(D1), device(D2))],
        expect=one(r("req-0", A, P1, D1), r("req-1/subReq-1", A, P1, D2)),
    ),
    "prioritized-list-disabled": Case(
        claims=[claim("claim-0", first_available("req-0", sub("subReq-0", CA)))],
        classes=[CLASS_A],
        slices=[slice1()],
        error=(
            "claim default/claim-0, request req-0: has subrequests, but "
            "the DRAPrioritizedList feature is disabled"
        ),
    ),
    "prioritized-list-multi-request": Case(
        features=PRIO,
        claims=[
            claim(
                "claim-0",
                request("req-1", CA, 1, mem("8Gi")),
                first_available(
                    "req-0", sub("subReq-0", CA, 1, mem("8Gi")), sub("subReq-1", CA, 1, mem("4Gi"))
                ),
            )
        ],
        classes=[CLASS_A],
        slices=[
            devices_slice("slice-1", P1, A, device(D1, capacity={"memory": "8Gi"})),
            devices_slice("slice-2", P2, A, device(D2, capacity={"memory": "4Gi"})),
        ],
        expect=one(r("req-1", A, P1, D1), r("req-0/subReq-1", A, P2, D2)),
    ),
    "prioritized-list-with-backtracking": Case(
        features=PRIO,
        claims=[
            claim(
                "claim-0",
                first_available(
                    "req-0", sub("subReq-0", CA, 1, mem("8Gi")), sub("subReq-1", CA, 1, mem("4Gi"))
                ),
                request("req-1", CA, 1, mem("8Gi")),
            )
        ],
        classes=[CLASS_A],
        slices=[
            devices_slice("slice-1", P1, A, device(D1, capacity={"memory": "8Gi"})),
            devices_slice("slice-2", P2, A, device(D2, capacity={"memory": "4Gi"})),
        ],
        expect=one(r("req-0/subReq-1", A, P2, D2), r("req-1", A, P1, D1)),
    ),
    "prioritized-list-too-many-in-first-subrequest": Case(
        features=PRIO,
        claims=[
            claim(
                "claim-0", first_available("req-0", sub("subReq-0", CB, 500), sub("subReq-1", CA))
            )
        ],
        classes=[CLASS_A, CLASS_B],
        slices=[slice1()],
        expect=one(r("req-0/subReq-1", A, P1, D1)),
    ),
    "partitionable-devices-single-device": Case(
        features=PART,
        claims=[claim("claim-0", request("req-0", CA))],
        classes=[CLASS_A],
        slices=[
            devices_slice(
                "slice-1", P1, A, device(D1, consumes={"counter-set-1": {"memory": "4Gi"}}), count=2
            ),
            counters_slice("slice-2", P1, A, **{"counter-set-1": {"memory": "8Gi"}}),
        ],
        expect=one(r("req-0", A, P1, D1)),
    ),
    "partitionable-devices-prioritized-list": Case(
        features=PART_PRIO,
        claims=[
            claim(
                "claim-0",
                request("req-0", CA),
                first_available(
                    "req-1", sub("subReq-0", CA, 1, mem("6Gi")), sub("subReq-1", CA, 1, mem("4Gi"))
                ),
            )
        ],
        classes=[CLASS_A],
        slices=[
            devices_slice(
                "slice-1",
                P1,
                A,
                part(D1, {"counter-set-1": {"memory": "4Gi"}}),
                part(D2, {"counter-set-1": {"memory": "6Gi"}}),
                part(D3, {"counter-set-1": {"memory": "4Gi"}}),
                count=2,
            ),
            counters_slice("slice-2", P1, A, **{"counter-set-1": {"memory": "8Gi"}}),
        ],
        expect=one(r("req-0", A, P1, D1), r("req-1/subReq-1", A, P1, D3)),
    ),
    "partitionable-devices-multiple-devices": Case(
        features=PART,
        claims=[claim("claim-0", request("req-0", CA), request("req-1", CA))],
        classes=[CLASS_A],
        slices=[
            devices_slice(
                "slice-1",
                P1,
                A,
                part(D1, {"counter-set-1": {"memory": "4Gi"}}),
                part(D2, {"counter-set-1": {"memory": "6Gi"}}),
                part(D3, {"counter-set-1": {"memory": "4Gi"}}),
                count=2,
            ),
            counters_slice("slice-2", P1, A, **{"counter-set-1": {"memory": "8Gi"}}),
        ],
        expect=one(r("req-0", A, P1, D1), r("req-1", A, P1, D3)),
    ),
    "partitionable-devices-multiple-capacity-pools": Case(
        features=PART_PRIO,
        claims=[
            claim(
                "claim-0",
                request("req-0", CA),
                first_available(
                    "req-1", sub("subReq-0", CA, 1, mem("6Gi")), sub("subReq-1", CA, 1, mem("4Gi"))
                ),
            )
        ],
        classes=[CLASS_A],
        slices=[
            devices_slice(
                "slice-1",
                P1,
                A,
                part(D1, {"counter-set-1": {"memory": "4Gi"}, "counter-set-2": {"cpus": "4"}}),
                part(D2, {"counter-set-1": {"memory": "6Gi"}, "counter-set-2": {"cpus": "6"}}),
                part(D3, {"counter-set-1": {"memory": "4Gi"}, "counter-set-2": {"cpus": "4"}}),
                count=2,
            ),
            counters_slice(
                "slice-2",
                P1,
                A,
                **{"counter-set-1": {"memory": "18Gi"}, "counter-set-2": {"cpus": "8"}},
            ),
        ],
        expect=one(r("req-0", A, P1, D1), r("req-1/subReq-1", A, P1, D3)),
    ),
    "partitionable-devices-multiple-counters": Case(
        features=PART,
        claims=[claim("claim-0", request("req-0", CA), request("req-1", CA))],
        classes=[CLASS_A],
        slices=[
            devices_slice(
                "slice-1",
                P1,
                A,
                part(
                    D1,
                    {
                        "counter-set-1": {"memory": "4Gi", "cpus": "6"},
                        "counter-set-2": {"cpus": "4", "memory": "2Gi"},
                    },
                ),
                part(
                    D2,
                    {
                        "counter-set-1": {"memory": "6Gi", "cpus": "4"},
                        "counter-set-2": {"cpus": "6", "memory": "6Gi"},
                    },
                ),
                part(
                    D3,
                    {
                        "counter-set-1": {"memory": "4Gi", "cpus": "4"},
                        "counter-set-2": {"cpus": "4", "memory": "4Gi"},
                    },
                ),
                count=2,
            ),
            counters_slice(
                "slice-2",
                P1,
                A,
                **{
                    "counter-set-1": {"cpus": "8", "memory": "18Gi"},
                    "counter-set-2": {"cpus": "12", "memory": "18Gi"},
                },
            ),
        ],
        expect=one(r("req-0", A, P1, D2), r("req-1", A, P1, D3)),
    ),
    "partitionable-devices-multiple-pools": Case(
        features=PART,
        claims=[claim("claim-0", request("req-0", CA), request("req-1", CA))],
        classes=[CLASS_A],
        slices=[
            devices_slice(
                "slice-1",
                P1,
                A,
                part(D1, {"counter-set-1": {"cpus": "6", "memory": "4Gi"}}),
                part(D2, {"counter-set-1": {"cpus": "4", "memory": "6Gi"}}),
                part(D3, {"counter-set-1": {"cpus": "4", "memory": "4Gi"}}),
                count=2,
            ),
            counters_slice("slice-2", P1, A, **{"counter-set-1": {"cpus": "8", "memory": "18Gi"}}),
            devices_slice(
                "slice-3",
                P2,
                A,
                part(D1, {"counter-set-1": {"cpus": "6", "memory": "4Gi"}}),
                part(D2, {"counter-set-1": {"cpus": "1", "memory": "7Gi"}}),
                part(D3, {"counter-set-1": {"cpus": "1", "memory": "7Gi"}}),
                count=2,
            ),
            counters_slice("slice-4", P2, A, **{"counter-set-1": {"cpus": "8", "memory": "18Gi"}}),
        ],
        allocated=[(A, P1, D2), (A, P1, D3), (A, P2, D1)],
        expect=one(r("req-0", A, P2, D2), r("req-1", A, P2, D3)),
    ),
    "partitionable-devices-unused-counters-in-counter-set": Case(
        features=PART,
        claims=[claim("claim-0", request("req-0", CA, 2))],
        classes=[CLASS_A],
        slices=[
            devices_slice(
                "slice-1",
                P1,
                A,
                device(D1, consumes={"counter-set-1": {"memory": "5Gi"}}),
                device(D2, consumes={"counter-set-1": {"memory": "4Gi"}}),
                device(D3, consumes={"counter-set-1": {"memory": "4Gi"}}),
                count=2,
            ),
            counters_slice(
                "slice-2", P1, A, **{"counter-set-1": {"memory": "8Gi", "unused": "1Gi"}}
            ),
        ],
        expect=one(r("req-0", A, P1, D2), r("req-0", A, P1, D3)),
    ),
    "partitionable-devices-no-capacity-available": Case(
        features=PART,
        claims=[claim("claim-0", request("req-0", CA))],
        classes=[CLASS_A],
        slices=[
            devices_slice(
                "slice-1",
                P1,
                A,
                part(D1, {"counter-set-1": {"memory": "4Gi"}}),
                part(D2, {"counter-set-1": {"memory": "16Gi"}}),
            ),
            counters_slice("slice-2", P1, A, count=1, **{"counter-set-1": {"memory": "18Gi"}}),
        ],
        allocated=[(A, P1, D2)],
    ),
    "partitionable-devices-overallocated-capacity-pool": Case(
        features=PART,
        claims=[claim("claim-0", request("req-0", CA))],
        classes=[CLASS_A],
        slices=[
            devices_slice(
                "slice-1",
                P1,
                A,
                part(D1, {"counter-set-1": {"memory": "4Gi"}}),
                part(D2, {"counter-set-1": {"memory": "20Gi"}}),
            ),
            counters_slice("slice-2", P1, A, count=1, **{"counter-set-1": {"memory": "18Gi"}}),
        ],
        allocated=[(A, P1, D2)],
    ),
    "partitionable-devices-disabled-device-consumes-counters": Case(
        claims=[claim("claim-0", request("req-0", CA))],
        classes=[CLASS_A],
        slices=[
            devices_slice(
                "slice-1", P1, A, device(D1, consumes={"counter-set-1": {"memory": "4Gi"}})
            ),
            counters_slice("slice-2", P1, A, count=1, **{"counter-set-1": {"memory": "18Gi"}}),
        ],
    ),
    "partitionable-devices-disabled-other-device-do-not-consume-counters": Case(
        claims=[claim("claim-0", request("req-0", CA))],
        classes=[CLASS_A],
        slices=[
            devices_slice(
                "slice-1",
                P1,
                A,
                device(D1, consumes={"counter-set-1": {"memory": "4Gi"}}),
                device(D2),
                count=2,
            ),
            counters_slice("slice-2", P1, A, **{"counter-set-1": {"memory": "18Gi"}}),
        ],
        expect=one(r("req-0", A, P1, D2)),
    ),
    "partitionable-devices-disabled-per-device-node-selection": Case(
        claims=[claim("claim-0", request("req-0", CA))],
        classes=[CLASS_A],
        slices=[resource_slice("slice-1", PER_DEVICE, P1, A, device(D2, node_selection="node-1"))],
    ),
    "partitionable-devices-per-device-node-selection-nodename": Case(
        features=PART_PRIO,
        claims=[
            claim(
                "claim-0",
                first_available(
                    "req-0", sub("subReq-0", CA, 1, mem("6Gi")), sub("subReq-1", CA, 1, mem("4Gi"))
                ),
            )
        ],
        classes=[CLASS_A],
        slices=[
            resource_slice(
                "slice-1",
                PER_DEVICE,
                P1,
                A,
                part(D1, {"counter-set-1": {"memory": "4Gi"}}, node_selection="node-1"),
                part(D2, {"counter-set-1": {"memory": "6Gi"}}, node_selection="node-2"),
                count=2,
            ),
            counters_slice("slice-2", P1, A, PER_DEVICE, **{"counter-set-1": {"memory": "18Gi"}}),
        ],
        expect=one(r("req-0/subReq-1", A, P1, D1)),
    ),
    "partitionable-devices-per-device-node-selection-node-selector": Case(
        features=PART_PRIO,
        claims=[claim("claim-0", request("req-0", CA))],
        classes=[CLASS_A],
        slices=[
            resource_slice(
                "slice-1",
                PER_DEVICE,
                P1,
                A,
                part(
                    D1,
                    {"counter-set-1": {"memory": "4Gi"}},
                    node_selection=label_selector(REGION_KEY, "region-1"),
                ),
                count=2,
            ),
            counters_slice("slice-2", P1, A, PER_DEVICE, **{"counter-set-1": {"memory": "18Gi"}}),
        ],
        expect=one(r("req-0", A, P1, D1), selector=label_selector(REGION_KEY, "region-1")),
    ),
    "partitionable-devices-per-device-node-selection-node-selector-multiple-devices": Case(
        features=PART_PRIO,
        claims=[claim("claim-0", request("req-0", CA, 3), request("req-1", CB, 3))],
        classes=[CLASS_A, CLASS_B],
        slices=[
            resource_slice(
                "slice-1",
                PER_DEVICE,
                P1,
                A,
                part(
                    D1,
                    {"counter-set-1": {"memory": "4Gi"}},
                    node_selection=label_selector(REGION_KEY, "region-1"),
                ),
                part(D2, {"counter-set-1": {"memory": "4Gi"}}, node_selection="node-1"),
                part(D3, {"counter-set-1": {"memory": "4Gi"}}, node_selection=ALL_NODES),
                count=2,
            ),
            counters_slice("slice-2", P1, A, PER_DEVICE, **{"counter-set-1": {"memory": "18Gi"}}),
            devices_slice(
                "slice-3",
                P2,
                B,
                *(part(d, {"counter-set-2": {"memory": "4Gi"}}) for d in (D1, D2, D3)),
                count=2,
            ),
            counters_slice("slice-4", P2, B, **{"counter-set-2": {"memory": "12Gi"}}),
        ],
        expect=one(
            r("req-0", A, P1, D1),
            r("req-0", A, P1, D2),
            r("req-0", A, P1, D3),
            r("req-1", B, P2, D1),
            r("req-1", B, P2, D2),
            r("req-1", B, P2, D3),
        ),
    ),
    "tainted-two-devices": Case(
        features=TAINTS,
        claims=[claim("claim-0", request("req-0", CA))],
        classes=[CLASS_A],
        slices=[
            devices_slice(
                "slice-1",
                P1,
                A,
                device(D1, taints=[TAINT_NO_SCHEDULE]),
                device(D2, taints=[TAINT_NO_EXECUTE]),
            )
        ],
    ),
    "tainted-one-device-two-taints": Case(
        features=TAINTS,
        claims=[claim("claim-0", request("req-0", CA))],
        classes=[CLASS_A],
        slices=[
            devices_slice(
                "slice-1", P1, A, device(D1, taints=[TAINT_NO_SCHEDULE, TAINT_NO_EXECUTE])
            )
        ],
    ),
    "tainted-two-devices-tolerated": Case(
        features=TAINTS,
        claims=[claim("claim-0", request("req-0", CA, tolerations=[TOLERATE_NO_EXECUTE]))],
        classes=[CLASS_A],
        slices=[
            devices_slice(
                "slice-1",
                P1,
                A,
                device(D1, taints=[TAINT_NO_SCHEDULE]),
                device(D2, taints=[TAINT_NO_EXECUTE]),
            )
        ],
        expect=[Expect([r("req-0", A, P1, D2)], tolerations=[[TOLERATE_NO_EXECUTE]])],
    ),
    "tainted-two-devices-prioritized-list-tolerated": Case(
        features=TAINTS_PRIO,
        claims=[
            claim(
                "claim-0",
                first_available(
                    "req-0",
                    sub("subReq-0", CA),
                    sub("subReq-1", CA, tolerations=[TOLERATE_NO_EXECUTE]),
                ),
            )
        ],
        classes=[CLASS_A],
        slices=[
            devices_slice(
                "slice-1",
                P1,
                A,
                device(D1, taints=[TAINT_NO_SCHEDULE]),
                device(D2, taints=[TAINT_NO_EXECUTE]),
            )
        ],
        expect=[Expect([r("req-0/subReq-1", A, P1, D2)], tolerations=[[TOLERATE_NO_EXECUTE]])],
    ),
    "tainted-no-effect": Case(
        features=TAINTS,
        claims=[claim("claim-0", request("req-0", CA))],
        classes=[CLASS_A],
        slices=[devices_slice("slice-1", P1, A, device(D1, taints=[TAINT_NONE]))],
        expect=one(r("req-0", A, P1, D1)),
    ),
    "tainted-one-device-two-taints-both-tolerated": Case(
        features=TAINTS,
        claims=[
            claim(
                "claim-0",
                request("req-0", CA, tolerations=[TOLERATE_NO_SCHEDULE, TOLERATE_NO_EXECUTE]),
            )
        ],
        classes=[CLASS_A],
        slices=[
            devices_slice(
                "slice-1", P1, A, device(D1, taints=[TAINT_NO_SCHEDULE, TAINT_NO_EXECUTE])
            )
        ],
        expect=[
            Expect(
                [r("req-0", A, P1, D1)], tolerations=[[TOLERATE_NO_SCHEDULE, TOLERATE_NO_EXECUTE]]
            )
        ],
    ),
    "tainted-disabled": Case(
        claims=[claim("claim-0", request("req-0", CA))],
        classes=[CLASS_A],
        slices=[
            devices_slice(
                "slice-1", P1, A, device(D1, taints=[TAINT_NO_SCHEDULE, TAINT_NO_EXECUTE])
            )
        ],
        expect=one(r("req-0", A, P1, D1)),
    ),
    "tainted-prioritized-list": Case(
        features=TAINTS_PRIO,
        claims=[
            claim("claim-0", first_available("req-0", sub("subReq-0", CB), sub("subReq-1", CA)))
        ],
        classes=[CLASS_A, CLASS_B],
        slices=[devices_slice("slice-1", P1, A, device(D1, taints=[TAINT_NO_SCHEDULE]))],
    ),
    "tainted-prioritized-list-disabled": Case(
        features=PRIO,
        claims=[
            claim("claim-0", first_available("req-0", sub("subReq-0", CB), sub("subReq-1", CA)))
        ],
        classes=[CLASS_A, CLASS_B],
        slices=[devices_slice("slice-1", P1, A, device(D1, taints=[TAINT_NO_SCHEDULE]))],
        expect=one(r("req-0/subReq-1", A, P1, D1)),
    ),
    "tainted-admin-access": Case(
        features=TAINTS_ADMIN,
        claims=[claim("claim-0", request("req-0", CA, admin=True))],
        classes=[CLASS_A],
        allocated=[(A, P1, D1), (A, P1, D2)],
        slices=[devices_slice("slice-1", P1, A, device(D1, taints=[TAINT_NO_SCHEDULE]))],
    ),
    "tainted-admin-access-disabled": Case(
        features=ADMIN,
        claims=[claim("claim-0", request("req-0", CA, admin=True))],
        classes=[CLASS_A],
        allocated=[(A, P1, D1), (A, P1, D2)],
        slices=[devices_slice("slice-1", P1, A, device(D1, taints=[TAINT_NO_SCHEDULE]))],
        expect=one(r("req-0", A, P1, D1, True)),
    ),
    "tainted-all-devices-single": Case(
        features=TAINTS,
        claims=[claim("claim-0", all_request("req-0", CA))],
        classes=[CLASS_A],
        slices=[devices_slice("slice-1", P1, A, device(D1, taints=[TAINT_NO_SCHEDULE]))],
    ),
    "tainted-all-devices-single-disabled": Case(
        claims=[claim("claim-0", all_request("req-0", CA))],
        classes=[CLASS_A],
        slices=[devices_slice("slice-1", P1, A, device(D1, taints=[TAINT_NO_SCHEDULE]))],
        expect=one(r("req-0", A, P1, D1)),
    ),
    "prioritized-list-allocation-mode-all": Case(
        features=PRIO,
        claims=[
            claim(
                "claim-0",
                first_available("req-0", sub("subReq-0", CA, 0, mode="All"), sub("subReq-1", CA)),
            )
        ],
        classes=[CLASS_A],
        slices=[devices_slice("slice-1", P1, A, device(D1), device(D2))],
        allocated=[(A, P1, D2)],
        expect=one(r("req-0/subReq-1", A, P1, D1)),
    ),
    "prioritized-list-allocation-mode-all-with-selectors": Case(
        features=PRIO,
        claims=[
            claim(
                "claim-0",
                first_available(
                    "req-0",
                    sub(
                        "subReq-0",
                        CA,
                        0,
                        cel('device.attributes["driver-a"].generation == "v6"'),
                        mode="All",
                    ),
                    sub(
                        "subReq-1",
                        CA,
                        0,
                        cel('device.attributes["driver-a"].generation == "v5"'),
                        mode="All",
                    ),
                ),
            )
        ],
        classes=[CLASS_A],
        slices=[devices_slice("slice-1", P1, A, device(D1, attributes={"generation": "v5"}))],
        expect=one(r("req-0/subReq-1", A, P1, D1)),
    ),
    "prioritized-list-allocation-mode-all-with-selectors-multiple-pools": Case(
        features=PRIO,
        claims=[
            claim(
                "claim-0",
                first_available(
                    "req-0",
                    sub(
                        "subReq-0",
                        CA,
                        0,
                        cel('device.attributes["driver-a"].generation == "v6"'),
                        mode="All",
                    ),
                    sub(
                        "subReq-1",
                        CA,
                        0,
                        cel('device.attributes["driver-a"].generation == "v5"'),
                        mode="All",
                    ),
                ),
            )
        ],
        classes=[CLASS_A],
        slices=[
            devices_slice("slice-1", P1, A, device(D1, attributes={"generation": "v5"})),
            devices_slice("slice-2", P2, A, device(D1, attributes={"generation": "v5"})),
        ],
        expect=one(r("req-0/subReq-1", A, P1, D1), r("req-0/subReq-1", A, P2, D1)),
    ),
    "prioritized-list-allocation-mode-all-with-selectors-multiple-pools-across-nodes": Case(
        features=PRIO,
        claims=[
            claim(
                "claim-0",
                first_available(
                    "req-0",
                    sub(
                        "subReq-0",
                        CA,
                        0,
                        cel('device.attributes["driver-a"].generation == "v6"'),
                        mode="All",
                    ),
                    sub(
                        "subReq-1",
                        CA,
                        0,
                        cel('device.attributes["driver-a"].generation == "v5"'),
                        mode="All",
                    ),
                ),
            )
        ],
        classes=[CLASS_A],
        slices=[
            devices_slice("slice-1", P1, A, device(D1, attributes={"generation": "v5"})),
            resource_slice(
                "slice-2",
                "node-2",
                P2,
                A,
                device(D1, attributes={"generation": "v5"}),
                device(D2, attributes={"generation": "v6"}),
            ),
        ],
        expect=one(r("req-0/subReq-1", A, P1, D1)),
    ),
    "prioritized-list-allocation-mode-all-with-selectors-deviceclass-subset": Case(
        features=PRIO,
        claims=[
            claim(
                "claim-0",
                first_available(
                    "req-0",
                    sub(
                        "subReq-0",
                        CA,
                        0,
                        cel('device.attributes["driver-a"].generation == "v6"'),
                        mode="All",
                    ),
                    sub(
                        "subReq-1",
                        CA,
                        0,
                        cel('device.attributes["driver-a"].generation == "v5"'),
                        mode="All",
                    ),
                ),
            )
        ],
        classes=[
            device_class(
                CA, A, expr='device.driver == "driver-a" && device.attributes["driver-a"].selected'
            )
        ],
        slices=[
            devices_slice(
                "slice-1",
                P1,
                A,
                device(D1, attributes=attrs(generation="v6", selected=False)),
                device(D2, attributes=attrs(generation="v5", selected=False)),
                device(D3, attributes=attrs(generation="v5", selected=True)),
            )
        ],
        expect=one(r("req-0/subReq-1", A, P1, D3)),
    ),
    "max-number-devices": Case(
        claims=[claim("claim-0", request("req-0", CA, 32))],
        classes=[CLASS_A],
        slices=[many("slice-1", P1, A, 32)],
        expect=one(*(r("req-0", A, P1, f"device-{i}") for i in range(32))),
    ),
    "partitionable-devices-with-attribute-selector": Case(
        features=PART,
        claims=[
            claim(
                "claim-0",
                request("req-0", CA, 2),
                request("req-1", CA, 1, cel('device.attributes["driver-a"].special')),
            )
        ],
        classes=[CLASS_A],
        slices=[
            devices_slice(
                "slice-1",
                P1,
                A,
                device(
                    D1,
                    attributes={"special": True},
                    consumes={"counter-set-1": {"cpu1": "1"}, "counter-set-2": {"mem": "10Gi"}},
                ),
                device(
                    D2,
                    attributes={"special": False},
                    consumes={"counter-set-1": {"cpu2": "1"}, "counter-set-2": {"mem": "10Gi"}},
                ),
                device(
                    D3,
                    attributes={"special": False},
                    consumes={"counter-set-1": {"cpu3": "1"}, "counter-set-2": {"mem": "10Gi"}},
                ),
                count=2,
            ),
            counters_slice(
                "slice-2",
                P1,
                A,
                **{
                    "counter-set-1": {"cpu1": "1", "cpu2": "1", "cpu3": "1"},
                    "counter-set-2": {"mem": "30Gi"},
                },
            ),
        ],
        expect=one(r("req-0", A, P1, D2), r("req-0", A, P1, D3), r("req-1", A, P1, D1)),
    ),
    "prioritized-list-max-allocation-limit-request": Case(
        features=PRIO,
        claims=[
            claim(
                "claim-0",
                first_available("req-0", sub("subReq-0", CA, 32), sub("subReq-1", CA, 16)),
                first_available("req-1", sub("subReq-0", CA, 32), sub("subReq-1", CA, 16)),
            )
        ],
        classes=[CLASS_A],
        slices=[many("slice-1", P1, A, 64)],
        expect=one(
            *(r("req-0/subReq-1", A, P1, f"device-{i}") for i in range(16)),
            *(r("req-1/subReq-1", A, P1, f"device-{i}") for i in range(16, 32)),
        ),
    ),
}

SHARED_CEL = CelCache()


def _canonical_selector(selector: Mapping[str, Any] | None) -> Any:
    if selector is None:
        return None

    def reqs(items: Any) -> frozenset[Any]:
        return frozenset(
            (i["key"], i["operator"], frozenset(i.get("values", ()))) for i in items or ()
        )

    return frozenset(
        (reqs(t.get("matchExpressions")), reqs(t.get("matchFields")))
        for t in selector["nodeSelectorTerms"]
    )


def _check(result: AllocationResult, expect: Expect) -> None:
    got = sorted((d.request, d.driver, d.pool, d.device, d.admin_access) for d in result.devices)
    assert got == sorted(expect.devices)
    api = None if result.node_selector is None else _selector_to_api(result.node_selector)
    assert _canonical_selector(api) == _canonical_selector(expect.selector)
    assert result.to_api()["devices"].get("config") == (
        list(expect.config) if expect.config else None
    )
    if expect.tolerations is not None:
        for d, want in zip(result.devices, expect.tolerations, strict=True):
            assert [t.to_api() for t in d.tolerations] == [dict(t) for t in want]


@pytest.mark.parametrize("name", sorted(CASES))
def test_kube_allocator_case(name: str) -> None:
    case = CASES[name]
    allocator = Allocator(
        {c.name: c for c in case.classes},
        case.slices,
        frozenset(DeviceID(*d) for d in case.allocated),
        features=case.features,
        cel=SHARED_CEL,
    )
    if case.error is not None:
        with pytest.raises(AllocationError) as caught:
            allocator.allocate(case.node, case.claims)
        assert case.error in str(caught.value)
        return
    results = allocator.allocate(case.node, case.claims)
    if case.expect is None:
        assert results is None
        return
    assert results is not None
    assert len(results) == len(case.expect)
    for result, expect in zip(results, case.expect, strict=True):
        _check(result, expect)


def test_ported_case_count() -> None:
    """The upstream cases ported here (see the module doc for those left out)."""
    assert len(CASES) >= 100
