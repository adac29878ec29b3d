"""resource.k8s.io/v1 objects as the DRA allocator sees them, parsed once at the edge.

DeviceClass, ResourceClaim, ResourceClaimTemplate and ResourceSlice become frozen values;
every error names the object and the field (``ResourceClaim ml/gpus:
spec.devices.requests[0].exactly.count: must be an integer, got 'four'``). Reading is lenient
where kube's allocator, not the API, rejects a value: an unknown allocation mode, a selector
without CEL, an empty constraint or a request without a class parse, and `allocate` reports
them with kube's messages. Quantities are exact (`Fraction`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from scheduler.core.decode import Fields
from scheduler.core.quantity import QuantityError, parse_quantity
from scheduler.core.selectors import NodeSelector, parse_node_selector

__all__ = [
    "ALLOCATION_MODE_ALL",
    "ALLOCATION_MODE_EXACT_COUNT",
    "AllocationResult",
    "Attribute",
    "ConsumerRef",
    "CounterConsumption",
    "CounterSet",
    "Device",
    "DeviceClass",
    "DeviceConstraint",
    "DeviceID",
    "DeviceRequest",
    "DeviceResult",
    "DeviceTaint",
    "DeviceToleration",
    "ExactRequest",
    "ResourceClaim",
    "ResourceClaimTemplate",
    "ResourceSlice",
    "Selector",
    "SubRequest",
]

ALLOCATION_MODE_EXACT_COUNT = "ExactCount"
ALLOCATION_MODE_ALL = "All"


def _object_identity(obj: Any, kind: str, *, namespaced: bool) -> Any:
    """model.object_identity, imported when first used (the model imports the storage
    state, which holds these values)."""
    from scheduler.core.model import object_identity

    return object_identity(obj, kind, namespaced=namespaced)


# ---------------------------------------------------------------------------- small values


@dataclass(frozen=True, slots=True)
class DeviceID:
    """A device by driver, pool and name: what `status.allocation` records."""

    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


@dataclass(frozen=True, slots=True)
class Attribute:
    """One device attribute: `kind` is "int", "bool", "string" or "version"."""

    kind: str
    value: int | bool | str


@dataclass(frozen=True, slots=True)
class DeviceTaint:
    key: str
    value: str = ""
    effect: str = ""


@dataclass(frozen=True, slots=True)
class DeviceToleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None

    def tolerates(self, taint: DeviceTaint) -> bool:
        """kube's resourceclaim.ToleratesTaint."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.operator in ("", "Equal") and self.value == taint.value

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {"operator": self.operator}
        if self.key:
            out["key"] = self.key
        if self.value:
            out["value"] = self.value
        if self.effect:
            out["effect"] = self.effect
        if self.toleration_seconds is not None:
            out["tolerationSeconds"] = self.toleration_seconds
        return out


@dataclass(frozen=True, slots=True)
class Selector:
    """A device selector; `expression` is None for a selector kube does not know (no CEL)."""

    expression: str | None


@dataclass(frozen=True, slots=True)
class CounterConsumption:
    counter_set: str
    counters: Mapping[str, Fraction] = field(hash=False)


@dataclass(frozen=True, slots=True)
class CounterSet:
    name: str
    counters: Mapping[str, Fraction] = field(hash=False)


@dataclass(frozen=True, eq=False)
class Device:
    """One device of a ResourceSlice. Attribute and capacity names are as published (a
    name without a domain belongs to the slice's driver)."""

    name: str
    attributes: Mapping[str, Attribute] = field(default_factory=dict)
    capacity: Mapping[str, Fraction] = field(default_factory=dict)
    taints: tuple[DeviceTaint, ...] = ()
    consumes_counters: tuple[CounterConsumption, ...] = ()
    node_name: str | None = None  # per-device node selection
    node_selector: NodeSelector | None = None
    all_nodes: bool = False
    binding_conditions: tuple[str, ...] = ()
    scratch: dict[str, Any] = field(default_factory=dict, repr=False)
    """Per-device cache for the CEL input (built on first use, never compared)."""

    def attribute(self, driver: str, qualified: str) -> Attribute | None:
        """kube's lookupAttribute: a fully qualified name, or the bare name when the domain
        is the device's driver."""
        found = self.attributes.get(qualified)
        if found is not None:
            return found
        domain, sep, name = qualified.partition("/")
        if not sep or domain != driver:
            return None
        return self.attributes.get(name)


@dataclass(frozen=True, eq=False)
class ResourceSlice:
    name: str
    driver: str
    pool: str
    generation: int
    resource_slice_count: int
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool = False
    per_device_node_selection: bool = False
    devices: tuple[Device, ...] = ()
    shared_counters: tuple[CounterSet, ...] = ()

    @classmethod
    def from_object(cls, obj: Any) -> ResourceSlice:
        where, _meta, name, _ns = _object_identity(obj, "ResourceSlice", namespaced=False)
        spec = where.mapping(obj.get("spec"), "spec", required=True)
        pool = where.mapping(spec.get("pool"), "spec.pool", required=True)
        devices = tuple(
            _device(where, d, f"spec.devices[{i}]")
            for i, d in enumerate(where.list(spec.get("devices"), "spec.devices"))
        )
        counters = tuple(
            _counter_set(where, c, f"spec.sharedCounters[{i}]")
            for i, c in enumerate(where.list(spec.get("sharedCounters"), "spec.sharedCounters"))
        )
        node_name = where.optional_string(spec.get("nodeName"), "spec.nodeName")
        selector = spec.get("nodeSelector")
        return cls(
            name=name,
            driver=where.name(spec.get("driver"), "spec.driver"),
            pool=where.name(pool.get("name"), "spec.pool.name"),
            generation=where.integer(pool.get("generation"), "spec.pool.generation", 0),
            resource_slice_count=where.integer(
                pool.get("resourceSliceCount"), "spec.pool.resourceSliceCount", 1, minimum=1
            ),
            node_name=node_name or None,
            node_selector=None
            if selector is None
            else parse_node_selector(selector, where, "spec.nodeSelector"),
            all_nodes=where.boolean(spec.get("allNodes"), "spec.allNodes", False),
            per_device_node_selection=where.boolean(
                spec.get("perDeviceNodeSelection"), "spec.perDeviceNodeSelection", False
            ),
            devices=devices,
            shared_counters=counters,
        )


# ---------------------------------------------------------------------------- claims


@dataclass(frozen=True, slots=True)
class SubRequest:
    """One alternative of `firstAvailable` (also the shape the allocator reads an
    `exactly` request through)."""

    name: str
    device_class_name: str
    selectors: tuple[Selector, ...] = ()
    allocation_mode: str = ALLOCATION_MODE_EXACT_COUNT
    count: int = 1
    tolerations: tuple[DeviceToleration, ...] = ()
    admin_access: bool | None = None  # only an `exactly` request may set it


@dataclass(frozen=True, slots=True)
class ExactRequest:
    device_class_name: str
    selectors: tuple[Selector, ...] = ()
    allocation_mode: str = ALLOCATION_MODE_EXACT_COUNT
    count: int = 1
    admin_access: bool | None = None
    tolerations: tuple[DeviceToleration, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """A request of a claim: `exactly` one request, or `first_available` alternatives."""

    name: str
    exactly: ExactRequest | None = None
    first_available: tuple[SubRequest, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceConstraint:
    """A claim constraint; `match_attribute` None is a constraint kube does not know."""

    requests: tuple[str, ...] = ()
    match_attribute: str | None = None


@dataclass(frozen=True, slots=True)
class DeviceResult:
    """One allocated device of `status.allocation.devices.results`."""

    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool | None = None
    tolerations: tuple[DeviceToleration, ...] = ()

    @property
    def id(self) -> DeviceID:
        return DeviceID(self.driver, self.pool, self.device)

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "request": self.request,
            "driver": self.driver,
            "pool": self.pool,
            "device": self.device,
        }
        if self.admin_access is not None:
            out["adminAccess"] = self.admin_access
        if self.tolerations:
            out["tolerations"] = [t.to_api() for t in self.tolerations]
        return out


@dataclass(frozen=True, slots=True)
class AllocationResult:
    """`status.allocation`: the devices, their configuration (opaque, as the class or claim
    gave it) and the node selector of the allocation (None: every node)."""

    devices: tuple[DeviceResult, ...]
    config: tuple[Mapping[str, Any], ...] = ()
    node_selector: NodeSelector | None = None

    def to_api(self) -> dict[str, Any]:
        devices: dict[str, Any] = {"results": [d.to_api() for d in self.devices]}
        if self.config:
            devices["config"] = [copy.deepcopy(dict(c)) for c in self.config]
        out: dict[str, Any] = {"devices": devices}
        if self.node_selector is not None:
            out["nodeSelector"] = _selector_to_api(self.node_selector)
        return out


@dataclass(frozen=True, slots=True)
class ConsumerRef:
    """An entry of `status.reservedFor`."""

    resource: str
    name: str
    uid: str
    api_group: str = ""


@dataclass(frozen=True, eq=False)
class ResourceClaim:
    namespace: str
    name: str
    uid: str = ""
    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[DeviceConstraint, ...] = ()
    config: tuple[Mapping[str, Any], ...] = ()  # spec.devices.config, opaque
    allocation: AllocationResult | None = None
    reserved_for: tuple[ConsumerRef, ...] = ()
    deleting: bool = False
    resource_version: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def reserved_for_pod(self, uid: str) -> bool:
        return any(
            r.resource == "pods" and r.api_group == "" and r.uid == uid for r in self.reserved_for
        )

    @classmethod
    def from_object(cls, obj: Any) -> ResourceClaim:
        where, meta, name, namespace = _object_identity(obj, "ResourceClaim", namespaced=True)
        spec = where.mapping(obj.get("spec"), "spec")
        requests, constraints, config = _claim_spec(where, spec, "spec")
        status = where.mapping(obj.get("status"), "status")
        allocation = None
        if status.get("allocation") is not None:
            allocation = _allocation(where, status.get("allocation"), "status.allocation")
        reserved = tuple(
            _consumer(where, r, f"status.reservedFor[{i}]")
            for i, r in enumerate(where.list(status.get("reservedFor"), "status.reservedFor"))
        )
        return cls(
            namespace=namespace,
            name=name,
            uid=where.string(meta.get("uid"), "metadata.uid", ""),
            requests=requests,
            constraints=constraints,
            config=config,
            allocation=allocation,
            reserved_for=reserved,
            deleting=meta.get("deletionTimestamp") is not None,
            resource_version=str(meta.get("resourceVersion") or ""),
            raw=obj,
        )


@dataclass(frozen=True, eq=False)
class ResourceClaimTemplate:
    """A template: the spec (and metadata) of the claim made for each pod that names it."""

    namespace: str
    name: str
    claim_labels: Mapping[str, str] = field(default_factory=dict)
    claim_annotations: Mapping[str, str] = field(default_factory=dict)
    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[DeviceConstraint, ...] = ()
    config: tuple[Mapping[str, Any], ...] = ()
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def from_object(cls, obj: Any) -> ResourceClaimTemplate:
        where, _meta, name, namespace = _object_identity(
            obj, "ResourceClaimTemplate", namespaced=True
        )
        spec = where.mapping(obj.get("spec"), "spec", required=True)
        meta = where.mapping(spec.get("metadata"), "spec.metadata")
        requests, constraints, config = _claim_spec(
            where, where.mapping(spec.get("spec"), "spec.spec"), "spec.spec"
        )
        return cls(
            namespace=namespace,
            name=name,
            claim_labels=where.string_map(meta.get("labels"), "spec.metadata.labels"),
            claim_annotations=where.string_map(
                meta.get("annotations"), "spec.metadata.annotations"
            ),
            requests=requests,
            constraints=constraints,
            config=config,
            raw=obj,
        )


@dataclass(frozen=True, eq=False)
class DeviceClass:
    name: str
    selectors: tuple[Selector, ...] = ()
    config: tuple[Mapping[str, Any], ...] = ()  # spec.config, opaque

    @classmethod
    def from_object(cls, obj: Any) -> DeviceClass:
        where, _meta, name, _ns = _object_identity(obj, "DeviceClass", namespaced=False)
        spec = where.mapping(obj.get("spec"), "spec")
        config = tuple(
            where.mapping(c, f"spec.config[{i}]")
            for i, c in enumerate(where.list(spec.get("config"), "spec.config"))
        )
        return cls(
            name=name,
            selectors=_selectors(where, spec.get("selectors"), "spec.selectors"),
            config=config,
        )


# ---------------------------------------------------------------------------- readers


def _quantity(where: Fields, value: Any, path: str) -> Fraction:
    try:
        return parse_quantity(value)
    except QuantityError as exc:
        raise where.fail(path, str(exc)) from None


def _amounts(where: Fields, raw: Any, path: str, key: str | None) -> dict[str, Fraction]:
    """A map name -> quantity; `key` reads `{name: {key: quantity}}` (capacity, counters)."""
    out: dict[str, Fraction] = {}
    for name, item in where.mapping(raw, path).items():
        at = f"{path}.{name}"
        if key is not None:
            item = where.mapping(item, at, required=True).get(key)
            at = f"{at}.{key}"
        if item is None:
            raise where.fail(at, "is required")
        out[str(name)] = _quantity(where, item, at)
    return out


def _attribute(where: Fields, raw: Any, path: str) -> Attribute:
    item = where.mapping(raw, path, required=True)
    found: list[Attribute] = []
    if item.get("int") is not None:
        found.append(Attribute("int", where.integer(item.get("int"), f"{path}.int")))
    if item.get("bool") is not None:
        found.append(Attribute("bool", where.boolean(item.get("bool"), f"{path}.bool")))
    if item.get("string") is not None:
        found.append(Attribute("string", where.string(item.get("string"), f"{path}.string")))
    if item.get("version") is not None:
        found.append(Attribute("version", where.string(item.get("version"), f"{path}.version")))
    if len(found) != 1:
        raise where.fail(path, "exactly one of int, bool, string or version is required")
    return found[0]


def _taint(where: Fields, raw: Any, path: str) -> DeviceTaint:
    item = where.mapping(raw, path, required=True)
    return DeviceTaint(
        key=where.name(item.get("key"), f"{path}.key"),
        value=where.string(item.get("value"), f"{path}.value", ""),
        effect=where.string(item.get("effect"), f"{path}.effect", ""),
    )


def _toleration(where: Fields, raw: Any, path: str) -> DeviceToleration:
    item = where.mapping(raw, path, required=True)
    return DeviceToleration(
        key=where.string(item.get("key"), f"{path}.key", ""),
        operator=where.string(item.get("operator"), f"{path}.operator", "") or "Equal",
        value=where.string(item.get("value"), f"{path}.value", ""),
        effect=where.string(item.get("effect"), f"{path}.effect", ""),
        toleration_seconds=where.optional_integer(
            item.get("tolerationSeconds"), f"{path}.tolerationSeconds"
        ),
    )


def _counter_set(where: Fields, raw: Any, path: str) -> CounterSet:
    item = where.mapping(raw, path, required=True)
    return CounterSet(
        name=where.name(item.get("name"), f"{path}.name"),
        counters=_amounts(where, item.get("counters"), f"{path}.counters", "value"),
    )


def _device(where: Fields, raw: Any, path: str) -> Device:
    item = where.mapping(raw, path, required=True)
    attributes = {
        str(k): _attribute(where, v, f"{path}.attributes.{k}")
        for k, v in where.mapping(item.get("attributes"), f"{path}.attributes").items()
    }
    consumes = []
    for i, c in enumerate(where.list(item.get("consumesCounters"), f"{path}.consumesCounters")):
        at = f"{path}.consumesCounters[{i}]"
        entry = where.mapping(c, at, required=True)
        consumes.append(
            CounterConsumption(
                counter_set=where.name(entry.get("counterSet"), f"{at}.counterSet"),
                counters=_amounts(where, entry.get("counters"), f"{at}.counters", "value"),
            )
        )
    selector = item.get("nodeSelector")
    return Device(
        name=where.name(item.get("name"), f"{path}.name"),
        attributes=attributes,
        capacity=_amounts(where, item.get("capacity"), f"{path}.capacity", "value"),
        taints=tuple(
            _taint(where, t, f"{path}.taints[{i}]")
            for i, t in enumerate(where.list(item.get("taints"), f"{path}.taints"))
        ),
        consumes_counters=tuple(consumes),
        node_name=where.optional_string(item.get("nodeName"), f"{path}.nodeName") or None,
        node_selector=None
        if selector is None
        else parse_node_selector(selector, where, f"{path}.nodeSelector"),
        all_nodes=where.boolean(item.get("allNodes"), f"{path}.allNodes", False),
        binding_conditions=where.string_list(
            item.get("bindingConditions"), f"{path}.bindingConditions"
        ),
    )


def _selectors(where: Fields, raw: Any, path: str) -> tuple[Selector, ...]:
    out = []
    for i, s in enumerate(where.list(raw, path)):
        item = where.mapping(s, f"{path}[{i}]", required=True)
        cel = item.get("cel")
        if cel is None:
            out.append(Selector(None))
            continue
        cel = where.mapping(cel, f"{path}[{i}].cel", required=True)
        out.append(Selector(where.string(cel.get("expression"), f"{path}[{i}].cel.expression")))
    return tuple(out)


def _request_fields(where: Fields, item: Mapping[str, Any], path: str) -> dict[str, Any]:
    mode = where.string(item.get("allocationMode"), f"{path}.allocationMode", "")
    mode = mode or ALLOCATION_MODE_EXACT_COUNT
    count_default = 1 if mode == ALLOCATION_MODE_EXACT_COUNT else 0
    return {
        "device_class_name": where.string(
            item.get("deviceClassName"), f"{path}.deviceClassName", ""
        ),
        "selectors": _selectors(where, item.get("selectors"), f"{path}.selectors"),
        "allocation_mode": mode,
        "count": where.integer(item.get("count"), f"{path}.count", count_default, minimum=0),
        "tolerations": tuple(
            _toleration(where, t, f"{path}.tolerations[{i}]")
            for i, t in enumerate(where.list(item.get("tolerations"), f"{path}.tolerations"))
        ),
    }


def _request(where: Fields, raw: Any, path: str) -> DeviceRequest:
    item = where.mapping(raw, path, required=True)
    name = where.name(item.get("name"), f"{path}.name")
    exactly = None
    if item.get("exactly") is not None:
        at = f"{path}.exactly"
        spec = where.mapping(item.get("exactly"), at, required=True)
        admin = spec.get("adminAccess")
        exactly = ExactRequest(
            **_request_fields(where, spec, at),
            admin_access=None if admin is None else where.boolean(admin, f"{at}.adminAccess"),
        )
    subs = []
    for i, s in enumerate(where.list(item.get("firstAvailable"), f"{path}.firstAvailable")):
        at = f"{path}.firstAvailable[{i}]"
        sub = where.mapping(s, at, required=True)
        subs.append(
            SubRequest(
                name=where.name(sub.get("name"), f"{at}.name"), **_request_fields(where, sub, at)
            )
        )
    if exactly is None and not subs:
        raise where.fail(path, "exactly one of exactly or firstAvailable is required")
    if exactly is not None and subs:
        raise where.fail(path, "exactly and firstAvailable are mutually exclusive")
    return DeviceRequest(name=name, exactly=exactly, first_available=tuple(subs))


def _claim_spec(
    where: Fields, spec: Mapping[str, Any], path: str
) -> tuple[tuple[DeviceRequest, ...], tuple[DeviceConstraint, ...], tuple[Mapping[str, Any], ...]]:
    devices = where.mapping(spec.get("devices"), f"{path}.devices")
    at = f"{path}.devices"
    requests = tuple(
        _request(where, r, f"{at}.requests[{i}]")
        for i, r in enumerate(where.list(devices.get("requests"), f"{at}.requests"))
    )
    constraints = []
    for i, c in enumerate(where.list(devices.get("constraints"), f"{at}.constraints")):
        item = where.mapping(c, f"{at}.constraints[{i}]", required=True)
        constraints.append(
            DeviceConstraint(
                requests=where.string_list(item.get("requests"), f"{at}.constraints[{i}].requests"),
                match_attribute=where.optional_string(
                    item.get("matchAttribute"), f"{at}.constraints[{i}].matchAttribute"
                ),
            )
        )
    config = tuple(
        where.mapping(c, f"{at}.config[{i}]")
        for i, c in enumerate(where.list(devices.get("config"), f"{at}.config"))
    )
    return requests, tuple(constraints), config


def _allocation(where: Fields, raw: Any, path: str) -> AllocationResult:
    item = where.mapping(raw, path, required=True)
    devices = where.mapping(item.get("devices"), f"{path}.devices")
    results = []
    for i, r in enumerate(where.list(devices.get("results"), f"{path}.devices.results")):
        at = f"{path}.devices.results[{i}]"
        entry = where.mapping(r, at, required=True)
        admin = entry.get("adminAccess")
        results.append(
            DeviceResult(
                request=where.string(entry.get("request"), f"{at}.request", ""),
                driver=where.name(entry.get("driver"), f"{at}.driver"),
                pool=where.name(entry.get("pool"), f"{at}.pool"),
                device=where.name(entry.get("device"), f"{at}.device"),
                admin_access=None if admin is None else where.boolean(admin, f"{at}.adminAccess"),
                tolerations=tuple(
                    _toleration(where, t, f"{at}.tolerations[{j}]")
                    for j, t in enumerate(where.list(entry.get("tolerations"), f"{at}.tolerations"))
                ),
            )
        )
    config = tuple(
        where.mapping(c, f"{path}.devices.config[{i}]")
        for i, c in enumerate(where.list(devices.get("config"), f"{path}.devices.config"))
    )
    selector = item.get("nodeSelector")
    return AllocationResult(
        devices=tuple(results),
        config=config,
        node_selector=None
        if selector is None
        else parse_node_selector(selector, where, f"{path}.nodeSelector"),
    )


def _consumer(where: Fields, raw: Any, path: str) -> ConsumerRef:
    item = where.mapping(raw, path, required=True)
    return ConsumerRef(
        resource=where.string(item.get("resource"), f"{path}.resource", ""),
        name=where.string(item.get("name"), f"{path}.name", ""),
        uid=where.string(item.get("uid"), f"{path}.uid", ""),
        api_group=where.string(item.get("apiGroup"), f"{path}.apiGroup", ""),
    )


def _selector_to_api(selector: NodeSelector) -> dict[str, Any]:
    def reqs(items: Any) -> list[dict[str, Any]]:
        out = []
        for r in items:
            entry: dict[str, Any] = {"key": r.key, "operator": r.operator}
            if r.values:
                entry["values"] = list(r.values)
            out.append(entry)
        return out

    terms = []
    for term in selector.terms:
        entry: dict[str, Any] = {}
        if term.match_expressions:
            entry["matchExpressions"] = reqs(term.match_expressions)
        if term.match_fields:
            entry["matchFields"] = reqs(term.match_fields)
        terms.append(entry)
    return {"nodeSelectorTerms": terms}
