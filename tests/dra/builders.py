"""resource.k8s.io/v1 objects for the DRA tests, shaped like kube's allocator test helpers
(`allocatortesting`): every object goes through the parser, as it would from the API."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.core.dra import DeviceClass, ResourceClaim, ResourceSlice

REGION_KEY, PLANET_KEY, EARTH = "region", "planet", "earth"
ALL_NODES, PER_DEVICE = "<all>", "<per-device>"


@dataclass(frozen=True)
class Node:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)


def node(name: str, region: str) -> Node:
    return Node(name, {REGION_KEY: region, PLANET_KEY: EARTH})


def cel(expression: str) -> dict[str, Any]:
    return {"cel": {"expression": expression}}


def opaque(driver: str, attribute: str) -> dict[str, Any]:
    return {"opaque": {"driver": driver, "parameters": {attribute: attribute + "Value"}}}


def device_class(
    name: str, driver: str, *, config: str | None = None, expr: str | None = None
) -> DeviceClass:
    spec: dict[str, Any] = {"selectors": [cel(expr or f'device.driver == "{driver}"')]}
    if config is not None:
        spec["config"] = [opaque(driver, config)]
    return DeviceClass.from_object({"metadata": {"name": name}, "spec": spec})


def device(
    name: str,
    *,
    capacity: Mapping[str, str] | None = None,
    attributes: Mapping[str, Any] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    consumes: Mapping[str, Mapping[str, str]] | None = None,
    from_counters: bool = False,
    node_selection: Any = None,
    binding_conditions: Sequence[str] = (),
) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name}
    if capacity:
        out["capacity"] = {k: {"value": v} for k, v in capacity.items()}
    if attributes:
        out["attributes"] = {k: _attribute(v) for k, v in attributes.items()}
    if taints:
        out["taints"] = list(taints)
    if consumes:
        out["consumesCounters"] = [
            {"counterSet": s, "counters": {k: {"value": v} for k, v in c.items()}}
            for s, c in consumes.items()
        ]
        if from_counters:
            out["capacity"] = {k: {"value": v} for c in consumes.values() for k, v in c.items()}
    if node_selection is not None:
        _select_nodes(out, node_selection)
    if binding_conditions:
        out["bindingConditions"] = list(binding_conditions)
    return out


class Version(str):
    """A version attribute value."""


def _attribute(value: Any) -> dict[str, Any]:
    if isinstance(value, Version):
        return {"version": str(value)}
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    return {"string": value}


def _select_nodes(target: dict[str, Any], selection: Any) -> None:
    if selection == ALL_NODES:
        target["allNodes"] = True
    elif selection == PER_DEVICE:
        target["perDeviceNodeSelection"] = True
    elif isinstance(selection, dict):
        target["nodeSelector"] = selection
    else:
        target["nodeName"] = selection


def label_selector(key: str, *values: str) -> dict[str, Any]:
    return {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}
        ]
    }


def local_selector(node_name: str) -> dict[str, Any]:
    return {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
        ]
    }


def resource_slice(
    name: str,
    nodes: Any,
    pool: str,
    driver: str,
    *devices: dict[str, Any],
    count: int = 1,
    generation: int = 1,
    counters: Mapping[str, Mapping[str, str]] | None = None,
) -> ResourceSlice:
    spec: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
    }
    _select_nodes(spec, nodes)
    if devices:
        spec["devices"] = list(devices)
    if counters:
        spec["sharedCounters"] = [
            {"name": s, "counters": {k: {"value": v} for k, v in c.items()}}
            for s, c in counters.items()
        ]
    return ResourceSlice.from_object({"metadata": {"name": name}, "spec": spec})


def request(
    name: str,
    class_name: str,
    count: int | None = 1,
    *selectors: dict[str, Any],
    mode: str | None = None,
    admin: bool | None = None,
    tolerations: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": class_name}
    if count is not None:
        exactly["count"] = count
    if mode is not None:
        exactly["allocationMode"] = mode
    if selectors:
        exactly["selectors"] = list(selectors)
    if admin is not None:
        exactly["adminAccess"] = admin
    if tolerations:
        exactly["tolerations"] = list(tolerations)
    return {"name": name, "exactly": exactly}


def all_request(
    name: str, class_name: str, *selectors: dict[str, Any], **kw: Any
) -> dict[str, Any]:
    return request(name, class_name, None, *selectors, mode="All", **kw)


def sub(
    name: str,
    class_name: str,
    count: int | None = 1,
    *selectors: dict[str, Any],
    mode: str | None = None,
    tolerations: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "deviceClassName": class_name}
    if count is not None:
        out["count"] = count
    if mode is not None:
        out["allocationMode"] = mode
    if selectors:
        out["selectors"] = list(selectors)
    if tolerations:
        out["tolerations"] = list(tolerations)
    return out


def first_available(name: str, *subs: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "firstAvailable": list(subs)}


def claim(
    name: str,
    *requests: dict[str, Any],
    constraints: Sequence[Mapping[str, Any]] = (),
    config: Sequence[Mapping[str, Any]] = (),
) -> ResourceClaim:
    devices: dict[str, Any] = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = list(constraints)
    if config:
        devices["config"] = list(config)
    return ResourceClaim.from_object(
        {"metadata": {"name": name, "namespace": "default"}, "spec": {"devices": devices}}
    )


def match_attribute(attribute: str, *requests: str) -> dict[str, Any]:
    out: dict[str, Any] = {"matchAttribute": attribute}
    if requests:
        out["requests"] = list(requests)
    return out
