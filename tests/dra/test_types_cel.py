"""Parsing resource.k8s.io/v1 objects (errors name the object and field) and the CEL
environment for devices (kube's functions; failures are kube's errors, not crashes)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from scheduler.core.dra import (
    Attribute,
    CelCache,
    CelError,
    Device,
    DeviceClass,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)
from scheduler.core.model import ModelError

DRIVER = "gpu.nvidia.com"


def test_claim_parses_requests_constraints_and_status() -> None:
    c = ResourceClaim.from_object(
        {
            "metadata": {"name": "gpus", "namespace": "ml", "uid": "u1"},
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "a", "exactly": {"deviceClassName": "gpu", "count": 4}},
                        {
                            "name": "b",
                            "firstAvailable": [
                                {"name": "big", "deviceClassName": "gpu", "allocationMode": "All"}
                            ],
                        },
                    ],
                    "constraints": [
                        {"requests": ["a"], "matchAttribute": "gpu.nvidia.com/productName"}
                    ],
                }
            },
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {"request": "a", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}
                        ]
                    },
                    "nodeSelector": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {"key": "metadata.name", "operator": "In", "values": ["n1"]}
                                ]
                            }
                        ]
                    },
                },
                "reservedFor": [{"resource": "pods", "name": "p", "uid": "pod-1"}],
            },
        }
    )
    assert (
        c.key == "ml/gpus"
        and c.requests[0].exactly is not None
        and c.requests[0].exactly.count == 4
    )
    assert c.requests[1].first_available[0].allocation_mode == "All"
    assert c.constraints[0].match_attribute == "gpu.nvidia.com/productName"
    assert c.allocation is not None and c.allocation.devices[0].device == "gpu-0"
    assert c.reserved_for_pod("pod-1") and not c.reserved_for_pod("pod-2")
    assert c.allocation.to_api()["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0][
        "values"
    ] == ["n1"]


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (
            {
                "metadata": {"name": "c", "namespace": "ml"},
                "spec": {
                    "devices": {
                        "requests": [
                            {"name": "a", "exactly": {"deviceClassName": "gpu", "count": "four"}}
                        ]
                    }
                },
            },
            "ResourceClaim ml/c: spec.devices.requests[0].exactly.count: "
            "must be an integer, got 'four'",
        ),
        (
            {
                "metadata": {"name": "c", "namespace": "ml"},
                "spec": {"devices": {"requests": [{"name": "a"}]}},
            },
            "ResourceClaim ml/c: spec.devices.requests[0]: "
            "exactly one of exactly or firstAvailable is required",
        ),
    ],
)
def test_claim_errors_name_the_field(obj: dict[str, object], message: str) -> None:
    with pytest.raises(ModelError) as caught:
        ResourceClaim.from_object(obj)
    assert str(caught.value) == message


def test_slice_template_and_class_parse() -> None:
    s = ResourceSlice.from_object(
        {
            "metadata": {"name": "n1-gpus"},
            "spec": {
                "driver": DRIVER,
                "nodeName": "n1",
                "pool": {"name": "n1", "generation": 3, "resourceSliceCount": 1},
                "devices": [
                    {
                        "name": "gpu-0",
                        "attributes": {
                            "uuid": {"string": "GPU-1"},
                            "driverVersion": {"version": "550.54.15"},
                        },
                        "capacity": {"memory": {"value": "80Gi"}},
                        "taints": [{"key": "k", "effect": "NoSchedule"}],
                    }
                ],
            },
        }
    )
    assert s.generation == 3 and s.devices[0].capacity["memory"] == Fraction(80 * 2**30)
    assert s.devices[0].attributes["driverVersion"] == Attribute("version", "550.54.15")
    with pytest.raises(
        ModelError, match=r"ResourceSlice bad: spec.devices\[0\].capacity.memory.value: quantities"
    ):
        ResourceSlice.from_object(
            {
                "metadata": {"name": "bad"},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": "n",
                    "pool": {"name": "p"},
                    "devices": [{"name": "d", "capacity": {"memory": {"value": "lots"}}}],
                },
            }
        )
    t = ResourceClaimTemplate.from_object(
        {
            "metadata": {"name": "t", "namespace": "ml"},
            "spec": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {
                    "devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu"}}]}
                },
            },
        }
    )
    assert (
        t.claim_labels == {"a": "b"}
        and t.requests[0].exactly is not None
        and t.requests[0].exactly.count == 1
    )
    c = DeviceClass.from_object(
        {"metadata": {"name": "gpu"}, "spec": {"selectors": [{"cel": {"expression": "true"}}]}}
    )
    assert c.selectors[0].expression == "true"


GPU = Device(
    "gpu-0",
    attributes={
        "uuid": Attribute("string", "GPU-1"),
        "index": Attribute("int", 3),
        "driverVersion": Attribute("version", "550.54.15"),
        "resource.kubernetes.io/pciBusID": Attribute("string", "0000:18:00.0"),
    },
    capacity={"memory": Fraction(80 * 2**30)},
)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('device.driver == "gpu.nvidia.com"', True),
        ('device.attributes["gpu.nvidia.com"].index == 3', True),
        ('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0', True),
        ('device.capacity["gpu.nvidia.com"].memory.isLessThan(quantity("40Gi"))', False),
        ('device.capacity["gpu.nvidia.com"].memory == quantity("80Gi")', True),
        ('device.capacity["gpu.nvidia.com"].memory.asInteger() == 85899345920', True),
        ('quantity("1500m").isInteger()', False),
        ('quantity("1500m").add(quantity("500m")).sign() == 1', True),
        (
            'device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan(semver("550.0.0"))',
            True,
        ),
        ('device.attributes["gpu.nvidia.com"].driverVersion.major() == 550', True),
        ('semver("1.0.0-alpha").isLessThan(semver("1.0.0"))', True),
        ('isSemver("1.2") || isQuantity("x")', False),
        ('device.attributes["resource.kubernetes.io"].pciBusID == "0000:18:00.0"', True),
        ('has(device.attributes["other.example.com"].x)', False),
        ('cel.bind(g, device.attributes["gpu.nvidia.com"], g.uuid == "GPU-1")', True),
    ],
)
def test_kube_cel_environment(expression: str, expected: bool) -> None:
    assert CelCache().get(expression).matches(GPU, DRIVER) is expected


_HUNDRED = str(list(range(100)))


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("noSuchVar", "undeclared reference"),
        ('device.attributes["other.example.com"].x', "Key not found"),
        ('device.attributes["gpu.nvidia.com"].index', "could not be converted to bool"),
        ('quantity("1500m").asInteger() == 1', "cannot convert value to integer"),
        # over the runtime's iteration budget: one device's error, not an exception
        (
            f"{_HUNDRED}.all(a, {_HUNDRED}.all(b, a + b >= 0))",
            "Iteration budget exceeded",
        ),
    ],
)
def test_cel_failures_are_errors_not_crashes(expression: str, message: str) -> None:
    with pytest.raises(CelError, match=message):
        CelCache().get(expression).matches(GPU, DRIVER)


def test_each_expression_compiles_once() -> None:
    cache = CelCache()
    for _ in range(3):
        cache.get("true").matches(GPU, DRIVER)
    assert cache.compiles == 1
