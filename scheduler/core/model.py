"""Pods and nodes as the scheduler sees them, parsed once from API objects.

`PodInfo.from_object` and `NodeInfo.from_object` take the JSON/YAML mapping of a Pod or
Node (from a watch, a file or a scenario) and compute everything the plugins need: the
effective requests exactly as kube does, host ports, images, tolerations, affinity. Every
error names the object and the field.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from typing import Any, Protocol

from scheduler.core.podaffinity import (
    NOTHING,
    AffinityTerm,
    LabelRequirement,
    LabelSelector,
    PodAffinity,
    SpreadConstraint,
    WeightedTerm,
    label_key_requirements,
)
from scheduler.core.quantity import QuantityError, parse_quantity, to_units

__all__ = [
    "DEFAULT_MEMORY_REQUEST",
    "DEFAULT_MILLI_CPU_REQUEST",
    "HostPort",
    "ModelError",
    "NamespaceInfo",
    "NodeInfo",
    "NodeSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "PodInfo",
    "PreferredTerm",
    "Taint",
    "Toleration",
    "WorkloadInfo",
    "normalized_image_name",
]

# kube's defaults for containers that omit a request, used for scoring only.
# Resource amounts stay below 2^53 in kube's unit (milli-CPU, bytes): far above any real
# machine, and the bound under which the vectorised scores are exact (and sums fit int64).
MAX_AMOUNT = 2**53
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024

Resources = dict[str, int]
# Exact amounts, as kube sums Quantities before it rounds them to integers.
Amounts = dict[str, Fraction]


class ModelError(ValueError):
    """An API object that cannot be understood; the message names the object and field."""


# ---------------------------------------------------------------------------- value types


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """kube's ToleratesTaint: effect and key must match when set; Exists ignores value."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator in ("", "Equal"):
            return self.value == taint.value
        return self.operator == "Exists"


def tolerates(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    return any(t.tolerates(taint) for t in tolerations)


@dataclass(frozen=True, slots=True)
class HostPort:
    """A host port a container binds; empty IP means all addresses, empty protocol TCP."""

    ip: str
    protocol: str
    port: int


@dataclass(frozen=True, slots=True)
class NodeSelectorRequirement:
    key: str
    operator: str
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeSelector:
    """Required node affinity: terms are ORed, the requirements inside a term ANDed."""

    terms: tuple[NodeSelectorTerm, ...]


@dataclass(frozen=True, slots=True)
class PreferredTerm:
    weight: int
    preference: NodeSelectorTerm


# ---------------------------------------------------------------------------- helpers


class _Where(Protocol):
    """Names the object (or configuration) in errors about one of its fields."""

    def error(self, field_path: str, message: str) -> Exception: ...


class _Path:
    """Names the object and field in errors: ``Pod default/web: spec.containers[0]...``."""

    def __init__(self, kind: str, name: str) -> None:
        self.prefix = f"{kind} {name}" if name else kind

    def error(self, field_path: str, message: str) -> ModelError:
        return ModelError(f"{self.prefix}: {field_path}: {message}")


def _mapping(value: Any, where: _Where, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise where.error(path, f"must be a mapping, got {type(value).__name__}")
    return value


def _list(value: Any, where: _Where, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise where.error(path, f"must be a list, got {type(value).__name__}")
    return value


def _named(obj: Any, kind: str) -> tuple[_Path, Mapping[str, Any], str]:
    """A cluster-scoped object's error prefix, metadata and (required) name."""
    if not isinstance(obj, Mapping):
        raise ModelError(f"{kind}: must be a mapping, got {type(obj).__name__}")
    meta = obj.get("metadata")
    raw_name = meta.get("name") if isinstance(meta, Mapping) else None
    where = _Path(kind, raw_name if isinstance(raw_name, str) else "")
    meta = _mapping(meta, where, "metadata")
    name = _str(meta.get("name"), where, "metadata.name")
    if not name:
        raise where.error("metadata.name", "is required")
    return where, meta, name


def _str(value: Any, where: _Where, path: str, default: str = "") -> str:
    if value is None:
        return default
    if not isinstance(value, str):
        raise where.error(path, f"must be a string, got {type(value).__name__}")
    return value


def _int(value: Any, where: _Where, path: str, default: int = 0) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise where.error(path, f"must be an integer, got {value!r}")
    return value


def _strings(value: Any, where: _Where, path: str) -> tuple[str, ...]:
    return tuple(_str(v, where, f"{path}[{i}]") for i, v in enumerate(_list(value, where, path)))


def _string_map(value: Any, where: _Path, path: str) -> dict[str, str]:
    result: dict[str, str] = {}
    for key, item in _mapping(value, where, path).items():
        if not isinstance(item, str):
            raise where.error(f"{path}.{key}", f"must be a string, got {type(item).__name__}")
        result[str(key)] = item
    return result


def _quantities(value: Any, where: _Path, path: str) -> Amounts:
    result: Amounts = {}
    for name, quantity in _mapping(value, where, path).items():
        try:
            amount = parse_quantity(quantity)
        except QuantityError as exc:
            raise where.error(f"{path}.{name}", str(exc)) from None
        if amount < 0:
            raise where.error(f"{path}.{name}", "must be greater than or equal to 0")
        if to_units(str(name), amount) >= MAX_AMOUNT:
            raise where.error(
                f"{path}.{name}", f"{quantity!r} is too large (at most 2^53-1 in kube's unit)"
            )
        result[str(name)] = amount
    return result


def _units(amounts: Mapping[str, Fraction]) -> Resources:
    return {name: to_units(name, amount) for name, amount in amounts.items()}


def _resources(value: Any, where: _Path, path: str) -> Resources:
    return _units(_quantities(value, where, path))


def _timestamp(value: Any, where: _Path, path: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.timestamp()
    if not isinstance(value, str):
        raise where.error(path, f"must be an RFC 3339 time, got {value!r}")
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise where.error(path, f"must be an RFC 3339 time, got {value!r}") from None


def _add(into: Amounts, other: Mapping[str, Fraction]) -> None:
    for name, amount in other.items():
        into[name] = into.get(name, Fraction(0)) + amount


def _max(into: Amounts, other: Mapping[str, Fraction]) -> None:
    for name, amount in other.items():
        if amount > into.get(name, Fraction(0)):
            into[name] = amount


def normalized_image_name(name: str) -> str:
    """kube's image-name normalization: a name without a tag means ``:latest``."""
    if name.rfind(":") <= name.rfind("/"):
        return name + ":latest"
    return name


def _requirement(raw: Any, where: _Path, path: str) -> NodeSelectorRequirement:
    item = _mapping(raw, where, path)
    values = _list(item.get("values"), where, f"{path}.values")
    return NodeSelectorRequirement(
        key=_str(item.get("key"), where, f"{path}.key"),
        operator=_str(item.get("operator"), where, f"{path}.operator"),
        values=tuple(_str(v, where, f"{path}.values[{i}]") for i, v in enumerate(values)),
    )


def _term(raw: Any, where: _Path, path: str) -> NodeSelectorTerm:
    item = _mapping(raw, where, path)
    exprs = _list(item.get("matchExpressions"), where, f"{path}.matchExpressions")
    fields = _list(item.get("matchFields"), where, f"{path}.matchFields")
    return NodeSelectorTerm(
        match_expressions=tuple(
            _requirement(e, where, f"{path}.matchExpressions[{i}]") for i, e in enumerate(exprs)
        ),
        match_fields=tuple(
            _requirement(f, where, f"{path}.matchFields[{i}]") for i, f in enumerate(fields)
        ),
    )


# ---------------------------------------------------------------------------- pod relations

_SET_OPERATORS = ("In", "NotIn")
_EXISTENCE_OPERATORS = ("Exists", "DoesNotExist")


def parse_label_selector(raw: Any, where: _Where, path: str) -> LabelSelector:
    """metav1.LabelSelectorAsSelector: None selects nothing, `{}` everything."""
    if raw is None:
        return NOTHING
    data = _mapping(raw, where, path)
    requirements: list[LabelRequirement] = []
    match_labels = _mapping(data.get("matchLabels"), where, f"{path}.matchLabels")
    for key, value in match_labels.items():
        value = _str(value, where, f"{path}.matchLabels.{key}")
        requirements.append(LabelRequirement(str(key), "In", frozenset((value,))))
    exprs = _list(data.get("matchExpressions"), where, f"{path}.matchExpressions")
    for i, item in enumerate(exprs):
        p = f"{path}.matchExpressions[{i}]"
        expr = _mapping(item, where, p)
        key = _str(expr.get("key"), where, f"{p}.key")
        if not key:
            raise where.error(f"{p}.key", "is required")
        op = _str(expr.get("operator"), where, f"{p}.operator")
        values = _strings(expr.get("values"), where, f"{p}.values")
        if op in _SET_OPERATORS:
            if not values:
                message = f"must be specified when `operator` is '{op}'"
                raise where.error(f"{p}.values", message)
        elif op in _EXISTENCE_OPERATORS:
            if values:
                message = f"may not be specified when `operator` is '{op}'"
                raise where.error(f"{p}.values", message)
        else:
            raise where.error(
                f"{p}.operator",
                f'Unsupported value: "{op}": supported values: '
                '"DoesNotExist", "Exists", "In", "NotIn"',
            )
        requirements.append(LabelRequirement(key, op, frozenset(values)))
    return LabelSelector(tuple(requirements))


def _affinity_term(
    raw: Any, where: _Where, path: str, namespace: str, labels: Mapping[str, str]
) -> AffinityTerm:
    data = _mapping(raw, where, path)
    selector = parse_label_selector(data.get("labelSelector"), where, f"{path}.labelSelector")
    match_keys = _strings(data.get("matchLabelKeys"), where, f"{path}.matchLabelKeys")
    mismatch_keys = _strings(data.get("mismatchLabelKeys"), where, f"{path}.mismatchLabelKeys")
    # The API server's merge: only into a selector that exists (a missing one selects nothing).
    selector = selector.merged(
        label_key_requirements(match_keys, "In", labels)
        + label_key_requirements(mismatch_keys, "NotIn", labels)
    )
    names = _strings(data.get("namespaces"), where, f"{path}.namespaces")
    raw_ns_selector = data.get("namespaceSelector")
    ns_selector = parse_label_selector(raw_ns_selector, where, f"{path}.namespaceSelector")
    if not names and raw_ns_selector is None:
        names = (namespace,)
    topology_key = _str(data.get("topologyKey"), where, f"{path}.topologyKey")
    if not topology_key:
        raise where.error(f"{path}.topologyKey", "can not be empty")
    return AffinityTerm(selector, frozenset(names), ns_selector, topology_key)


def _terms(
    raw: Any, where: _Where, path: str, namespace: str, labels: Mapping[str, str]
) -> tuple[AffinityTerm, ...]:
    return tuple(
        _affinity_term(t, where, f"{path}[{i}]", namespace, labels)
        for i, t in enumerate(_list(raw, where, path))
    )


def _weighted(
    raw: Any, where: _Where, path: str, namespace: str, labels: Mapping[str, str]
) -> tuple[WeightedTerm, ...]:
    out = []
    for i, item in enumerate(_list(raw, where, path)):
        p = f"{path}[{i}]"
        data = _mapping(item, where, p)
        weight = _int(data.get("weight"), where, f"{p}.weight", 0)
        if not 1 <= weight <= 100:
            raise where.error(f"{p}.weight", f"must be in the range 1-100, got {weight}")
        term = _affinity_term(data.get("podAffinityTerm"), where, f"{p}.podAffinityTerm",
                              namespace, labels)  # fmt: skip
        out.append(WeightedTerm(term, weight))
    return tuple(out)


_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def parse_pod_affinity(
    affinity: Mapping[str, Any], where: _Where, namespace: str, labels: Mapping[str, str]
) -> PodAffinity:
    """`spec.affinity.podAffinity` and `podAntiAffinity` of a pod in `namespace`."""
    base = "spec.affinity"
    aff = _mapping(affinity.get("podAffinity"), where, f"{base}.podAffinity")
    anti = _mapping(affinity.get("podAntiAffinity"), where, f"{base}.podAntiAffinity")
    a, n = f"{base}.podAffinity", f"{base}.podAntiAffinity"
    return PodAffinity(
        required=_terms(aff.get(_REQUIRED), where, f"{a}.{_REQUIRED}", namespace, labels),
        required_anti=_terms(anti.get(_REQUIRED), where, f"{n}.{_REQUIRED}", namespace, labels),
        preferred=_weighted(aff.get(_PREFERRED), where, f"{a}.{_PREFERRED}", namespace, labels),
        preferred_anti=_weighted(
            anti.get(_PREFERRED), where, f"{n}.{_PREFERRED}", namespace, labels
        ),
    )


_ACTIONS = ("DoNotSchedule", "ScheduleAnyway")
_POLICIES = ("Honor", "Ignore")


def parse_spread_constraint(raw: Any, where: _Where, path: str) -> SpreadConstraint:
    """One topology spread constraint, validated as the API server validates it."""
    data = _mapping(raw, where, path)
    max_skew = _int(data.get("maxSkew"), where, f"{path}.maxSkew", 0)
    if max_skew <= 0:
        message = f"Invalid value: {max_skew}: must be greater than zero"
        raise where.error(f"{path}.maxSkew", message)
    key = _str(data.get("topologyKey"), where, f"{path}.topologyKey")
    if not key:
        raise where.error(f"{path}.topologyKey", "Required value: can not be empty")
    action = _str(data.get("whenUnsatisfiable"), where, f"{path}.whenUnsatisfiable")
    if action not in _ACTIONS:
        raise where.error(
            f"{path}.whenUnsatisfiable",
            f'Unsupported value: "{action}": supported values: "DoNotSchedule", "ScheduleAnyway"',
        )
    min_domains = _int(data.get("minDomains"), where, f"{path}.minDomains", 1)
    if data.get("minDomains") is not None:
        if min_domains <= 0:
            raise where.error(f"{path}.minDomains", f"Invalid value: {min_domains}: must be > 0")
        if action != "DoNotSchedule":
            raise where.error(
                f"{path}.minDomains",
                f"Invalid value: {min_domains}: can only use minDomains if "
                "whenUnsatisfiable=DoNotSchedule",
            )
    policies = []
    for name, default in (("nodeAffinityPolicy", "Honor"), ("nodeTaintsPolicy", "Ignore")):
        value = _str(data.get(name), where, f"{path}.{name}") or default
        if value not in _POLICIES:
            raise where.error(
                f"{path}.{name}",
                f'Unsupported value: "{value}": supported values: "Honor", "Ignore"',
            )
        policies.append(value)
    raw_selector = data.get("labelSelector")
    return SpreadConstraint(
        max_skew=max_skew,
        topology_key=key,
        when_unsatisfiable=action,
        selector=parse_label_selector(raw_selector, where, f"{path}.labelSelector"),
        has_selector=raw_selector is not None,
        match_label_keys=_strings(data.get("matchLabelKeys"), where, f"{path}.matchLabelKeys"),
        min_domains=min_domains,
        node_affinity_policy=policies[0],
        node_taints_policy=policies[1],
    )


def parse_spread_constraints(raw: Any, where: _Where, path: str) -> tuple[SpreadConstraint, ...]:
    items = _list(raw, where, path)
    out = tuple(parse_spread_constraint(c, where, f"{path}[{i}]") for i, c in enumerate(items))
    seen: set[tuple[str, str]] = set()
    for i, c in enumerate(out):
        pair = (c.topology_key, c.when_unsatisfiable)
        if pair in seen:
            raise where.error(
                f"{path}[{i}]",
                f'Duplicate value: "{{{c.topology_key}, {c.when_unsatisfiable}}}"',
            )
        seen.add(pair)
    return out


# ---------------------------------------------------------------------------- pods


@dataclass(frozen=True, slots=True)
class _Container:
    name: str
    requests: Amounts
    limits: Amounts
    ports: tuple[HostPort, ...]
    image: str
    restartable: bool


def _container(raw: Any, where: _Path, path: str, init: bool) -> _Container:
    item = _mapping(raw, where, path)
    resources = _mapping(item.get("resources"), where, f"{path}.resources")
    limits = _quantities(resources.get("limits"), where, f"{path}.resources.limits")
    requests = _quantities(resources.get("requests"), where, f"{path}.resources.requests")
    # The API server defaults a missing request to its limit.
    requests = {**limits, **requests}
    ports: list[HostPort] = []
    for i, raw_port in enumerate(_list(item.get("ports"), where, f"{path}.ports")):
        port = _mapping(raw_port, where, f"{path}.ports[{i}]")
        host_port = _int(port.get("hostPort"), where, f"{path}.ports[{i}].hostPort")
        if host_port > 0:
            ports.append(
                HostPort(
                    ip=_str(port.get("hostIP"), where, f"{path}.ports[{i}].hostIP"),
                    protocol=_str(port.get("protocol"), where, f"{path}.ports[{i}].protocol")
                    or "TCP",
                    port=host_port,
                )
            )
    restart = _str(item.get("restartPolicy"), where, f"{path}.restartPolicy")
    return _Container(
        name=_str(item.get("name"), where, f"{path}.name"),
        requests=requests,
        limits=limits,
        ports=tuple(ports),
        image=_str(item.get("image"), where, f"{path}.image"),
        restartable=init and restart == "Always",
    )


def _pod_requests(
    containers: list[_Container],
    init_containers: list[_Container],
    pod_level: Amounts,
    overhead: Amounts,
    missing_defaults: Mapping[str, Fraction] | None = None,
) -> Amounts:
    """kube's resourcehelper.PodRequests: sidecars add up, init containers take the max."""

    def requests_of(c: _Container) -> Amounts:
        if missing_defaults is None:
            return c.requests
        return {**missing_defaults, **c.requests}

    total: Amounts = {}
    for c in containers:
        _add(total, requests_of(c))
    restartable_sum: Amounts = {}
    init_max: Amounts = {}
    for c in init_containers:
        reqs = requests_of(c)
        if c.restartable:
            _add(total, reqs)
            _add(restartable_sum, reqs)
            reqs = dict(restartable_sum)
        else:
            reqs = dict(reqs)
            _add(reqs, restartable_sum)
        _max(init_max, reqs)
    _max(total, init_max)
    for name in ("cpu", "memory"):
        if name in pod_level:
            total[name] = pod_level[name]
    _add(total, overhead)
    return total


@dataclass(frozen=True, slots=True)
class PodInfo:
    """A pod parsed for scheduling. Resource amounts are in kube's units (milli-CPU, bytes)."""

    namespace: str
    name: str
    uid: str
    scheduler_name: str
    node_name: str | None
    phase: str
    priority: int
    requests: Mapping[str, int]
    non_zero_cpu: int
    non_zero_memory: int
    host_ports: tuple[HostPort, ...]
    images: tuple[str, ...]
    tolerations: tuple[Toleration, ...]
    node_selector: tuple[tuple[str, str], ...]
    required_affinity: NodeSelector | None
    preferred_affinity: tuple[PreferredTerm, ...]
    labels: Mapping[str, str] = field(hash=False, compare=False)
    annotations: Mapping[str, str] = field(hash=False, compare=False)
    best_effort: bool = False
    creation_timestamp: float = 0.0
    deletion_timestamp: float | None = None
    scheduling_gates: tuple[str, ...] = ()
    resource_version: str = ""
    container_count: int = 0
    pod_affinity: PodAffinity = field(default_factory=PodAffinity)
    spread_constraints: tuple[SpreadConstraint, ...] = ()
    # The controlling owner: (API group, kind, name), e.g. ("apps", "ReplicaSet", "web-5d8f").
    controller: tuple[str, str, str] | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def terminal(self) -> bool:
        """Succeeded and Failed pods hold no resources on their node."""
        return self.phase in ("Succeeded", "Failed")

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> PodInfo:
        """Parse a Pod mapping (API JSON or YAML manifest)."""
        if not isinstance(obj, Mapping):
            raise ModelError(f"Pod: must be a mapping, got {type(obj).__name__}")
        kind = obj.get("kind")
        if kind not in (None, "Pod"):
            raise ModelError(f"Pod: kind: must be Pod, got {kind!r}")
        meta = obj.get("metadata")
        raw_name = meta.get("name") if isinstance(meta, Mapping) else None
        raw_ns = meta.get("namespace") if isinstance(meta, Mapping) else None
        namespace = raw_ns if isinstance(raw_ns, str) and raw_ns else "default"
        where = _Path("Pod", f"{namespace}/{raw_name}" if isinstance(raw_name, str) else "")
        meta = _mapping(meta, where, "metadata")
        name = _str(meta.get("name"), where, "metadata.name")
        if not name:
            raise where.error("metadata.name", "is required")
        spec = _mapping(obj.get("spec"), where, "spec")
        status = _mapping(obj.get("status"), where, "status")

        containers = [
            _container(c, where, f"spec.containers[{i}]", init=False)
            for i, c in enumerate(_list(spec.get("containers"), where, "spec.containers"))
        ]
        init_containers = [
            _container(c, where, f"spec.initContainers[{i}]", init=True)
            for i, c in enumerate(_list(spec.get("initContainers"), where, "spec.initContainers"))
        ]
        pod_resources = _mapping(spec.get("resources"), where, "spec.resources")
        pod_limits = _quantities(pod_resources.get("limits"), where, "spec.resources.limits")
        pod_level = {
            **pod_limits,
            **_quantities(pod_resources.get("requests"), where, "spec.resources.requests"),
        }
        overhead = _quantities(spec.get("overhead"), where, "spec.overhead")
        # Summed exactly and rounded once per resource, as kube rounds the pod's total.
        requests = _pod_requests(containers, init_containers, pod_level, overhead)
        for resource, total in requests.items():
            if to_units(resource, total) >= MAX_AMOUNT:
                raise where.error("spec", f"the pod's total {resource} request is too large")
        # kube's calculateResource: every container missing a cpu/memory request counts the
        # default; with pod-level requests set, only a resource missing at both levels does.
        defaults = {
            "cpu": Fraction(DEFAULT_MILLI_CPU_REQUEST, 1000),
            "memory": Fraction(DEFAULT_MEMORY_REQUEST),
        }
        if any(name in defaults for name in pod_level):
            defaults = {name: v for name, v in defaults.items() if name not in requests}
        non_zero = _pod_requests(
            containers, init_containers, pod_level, overhead, missing_defaults=defaults
        )
        everything = [*init_containers, *containers]
        # QoS BestEffort (ComputePodQOS): no positive CPU or memory request or limit anywhere;
        # an explicit zero does not count.
        best_effort = not any(
            amount > 0
            for amounts in (
                pod_level,
                *(c.requests for c in everything),
                *(c.limits for c in everything),
            )
            for name, amount in amounts.items()
            if name in ("cpu", "memory")
        )
        host_ports = tuple(
            p
            for c in [*(c for c in init_containers if c.restartable), *containers]
            for p in c.ports
        )

        tolerations = []
        for i, raw in enumerate(_list(spec.get("tolerations"), where, "spec.tolerations")):
            item = _mapping(raw, where, f"spec.tolerations[{i}]")
            tolerations.append(
                Toleration(
                    key=_str(item.get("key"), where, f"spec.tolerations[{i}].key"),
                    operator=_str(item.get("operator"), where, f"spec.tolerations[{i}].operator"),
                    value=_str(item.get("value"), where, f"spec.tolerations[{i}].value"),
                    effect=_str(item.get("effect"), where, f"spec.tolerations[{i}].effect"),
                )
            )

        affinity = _mapping(spec.get("affinity"), where, "spec.affinity")
        node_affinity = _mapping(affinity.get("nodeAffinity"), where, "spec.affinity.nodeAffinity")
        base = "spec.affinity.nodeAffinity"
        required_raw = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        required: NodeSelector | None = None
        if required_raw is not None:
            rpath = f"{base}.requiredDuringSchedulingIgnoredDuringExecution"
            req = _mapping(required_raw, where, rpath)
            terms = _list(req.get("nodeSelectorTerms"), where, f"{rpath}.nodeSelectorTerms")
            required = NodeSelector(
                tuple(
                    _term(t, where, f"{rpath}.nodeSelectorTerms[{i}]") for i, t in enumerate(terms)
                )
            )
        preferred = []
        ppath = f"{base}.preferredDuringSchedulingIgnoredDuringExecution"
        for i, raw in enumerate(
            _list(
                node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution"), where, ppath
            )
        ):
            item = _mapping(raw, where, f"{ppath}[{i}]")
            preferred.append(
                PreferredTerm(
                    weight=_int(item.get("weight"), where, f"{ppath}[{i}].weight"),
                    preference=_term(item.get("preference"), where, f"{ppath}[{i}].preference"),
                )
            )

        gates = tuple(
            _str(
                _mapping(g, where, f"spec.schedulingGates[{i}]").get("name"),
                where,
                f"spec.schedulingGates[{i}].name",
            )
            for i, g in enumerate(_list(spec.get("schedulingGates"), where, "spec.schedulingGates"))
        )
        node_name = _str(spec.get("nodeName"), where, "spec.nodeName") or None
        labels = _string_map(meta.get("labels"), where, "metadata.labels")
        pod_affinity = parse_pod_affinity(affinity, where, namespace, labels)
        spread = parse_spread_constraints(
            spec.get("topologySpreadConstraints"), where, "spec.topologySpreadConstraints"
        )
        return cls(
            namespace=namespace,
            name=name,
            uid=_str(meta.get("uid"), where, "metadata.uid"),
            scheduler_name=_str(spec.get("schedulerName"), where, "spec.schedulerName")
            or "default-scheduler",
            node_name=node_name,
            phase=_str(status.get("phase"), where, "status.phase"),
            priority=_int(spec.get("priority"), where, "spec.priority"),
            requests=_units(requests),
            non_zero_cpu=to_units("cpu", non_zero.get("cpu", Fraction(0))),
            non_zero_memory=to_units("memory", non_zero.get("memory", Fraction(0))),
            host_ports=host_ports,
            images=tuple(normalized_image_name(c.image) for c in everything if c.image),
            tolerations=tuple(tolerations),
            node_selector=tuple(
                sorted(_string_map(spec.get("nodeSelector"), where, "spec.nodeSelector").items())
            ),
            required_affinity=required,
            preferred_affinity=tuple(preferred),
            labels=labels,
            annotations=_string_map(meta.get("annotations"), where, "metadata.annotations"),
            best_effort=best_effort,
            creation_timestamp=_timestamp(
                meta.get("creationTimestamp"), where, "metadata.creationTimestamp"
            )
            or 0.0,
            deletion_timestamp=_timestamp(
                meta.get("deletionTimestamp"), where, "metadata.deletionTimestamp"
            ),
            scheduling_gates=gates,
            resource_version=str(meta.get("resourceVersion") or ""),
            container_count=len(everything),
            pod_affinity=pod_affinity,
            spread_constraints=spread,
            controller=_controller(meta, where),
        )


def _controller(meta: Mapping[str, Any], where: _Path) -> tuple[str, str, str] | None:
    """metav1.GetControllerOf: the first owner reference marked `controller: true`."""
    for i, raw in enumerate(_list(meta.get("ownerReferences"), where, "metadata.ownerReferences")):
        path = f"metadata.ownerReferences[{i}]"
        ref = _mapping(raw, where, path)
        if ref.get("controller") is True:
            api_version = _str(ref.get("apiVersion"), where, f"{path}.apiVersion")
            group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
            kind = _str(ref.get("kind"), where, f"{path}.kind")
            return group, kind, _str(ref.get("name"), where, f"{path}.name")
    return None


# ---------------------------------------------------------------------------- nodes


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A node's declared state: what it offers and its constraints (not its usage)."""

    name: str
    labels: Mapping[str, str] = field(hash=False)
    annotations: Mapping[str, str] = field(hash=False, compare=False)
    allocatable: Mapping[str, int] = field(hash=False)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    memory_pressure: bool = False
    images: Mapping[str, int] = field(default_factory=dict, hash=False)
    resource_version: str = ""

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> NodeInfo:
        """Parse a Node mapping (API JSON or YAML)."""
        where, meta, name = _named(obj, "Node")
        spec = _mapping(obj.get("spec"), where, "spec")
        status = _mapping(obj.get("status"), where, "status")
        allocatable_raw = status.get("allocatable")
        if allocatable_raw is None:
            allocatable_raw = status.get("capacity")
            path = "status.capacity"
        else:
            path = "status.allocatable"
        allocatable = _resources(allocatable_raw, where, path)

        taints = []
        for i, raw in enumerate(_list(spec.get("taints"), where, "spec.taints")):
            item = _mapping(raw, where, f"spec.taints[{i}]")
            effect = _str(item.get("effect"), where, f"spec.taints[{i}].effect")
            if effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
                raise where.error(
                    f"spec.taints[{i}].effect",
                    f'Unsupported value: "{effect}": supported values: '
                    '"NoExecute", "NoSchedule", "PreferNoSchedule"',
                )
            taints.append(
                Taint(
                    key=_str(item.get("key"), where, f"spec.taints[{i}].key"),
                    value=_str(item.get("value"), where, f"spec.taints[{i}].value"),
                    effect=effect,
                )
            )

        memory_pressure = False
        for i, raw in enumerate(_list(status.get("conditions"), where, "status.conditions")):
            cond = _mapping(raw, where, f"status.conditions[{i}]")
            if cond.get("type") == "MemoryPressure":
                memory_pressure = cond.get("status") == "True"

        images: dict[str, int] = {}
        for i, raw in enumerate(_list(status.get("images"), where, "status.images")):
            image = _mapping(raw, where, f"status.images[{i}]")
            size = _int(image.get("sizeBytes"), where, f"status.images[{i}].sizeBytes")
            for j, image_name in enumerate(
                _list(image.get("names"), where, f"status.images[{i}].names")
            ):
                # kube keys a node's images by the names the node reports (only the pod's
                # image names are normalized), and the first size reported for a name wins.
                images.setdefault(_str(image_name, where, f"status.images[{i}].names[{j}]"), size)

        unschedulable = spec.get("unschedulable", False)
        if not isinstance(unschedulable, bool):
            raise where.error("spec.unschedulable", f"must be a boolean, got {unschedulable!r}")
        return cls(
            name=name,
            labels=_string_map(meta.get("labels"), where, "metadata.labels"),
            annotations=_string_map(meta.get("annotations"), where, "metadata.annotations"),
            allocatable=allocatable,
            taints=tuple(taints),
            unschedulable=unschedulable,
            memory_pressure=memory_pressure,
            images=images,
            resource_version=str(meta.get("resourceVersion") or ""),
        )


# ---------------------------------------------------------------------------- namespaces


@dataclass(frozen=True, slots=True)
class NamespaceInfo:
    """A namespace's name and labels (what `namespaceSelector` selects on)."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict, hash=False)

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> NamespaceInfo:
        where, meta, name = _named(obj, "Namespace")
        return cls(name, _string_map(meta.get("labels"), where, "metadata.labels"))


# ---------------------------------------------------------------------------- workloads

_WORKLOAD_KINDS = ("Service", "ReplicationController", "ReplicaSet", "StatefulSet")


@dataclass(frozen=True, slots=True)
class WorkloadInfo:
    """A Service, ReplicationController, ReplicaSet or StatefulSet as PodTopologySpread's
    default constraints read it: its selector. Services and ReplicationControllers select by
    a label map (`labels`, None when unset), ReplicaSets and StatefulSets by a LabelSelector."""

    kind: str
    namespace: str
    name: str
    selector: LabelSelector
    labels: Mapping[str, str] | None = field(default=None, hash=False, compare=False)

    @classmethod
    def from_object(cls, obj: Mapping[str, Any], kind: str | None = None) -> WorkloadInfo:
        """Parse the object; `kind` where the object does not say (items of a list)."""
        if kind is None:
            kind = obj.get("kind") if isinstance(obj, Mapping) else None
        if kind not in _WORKLOAD_KINDS or not isinstance(obj, Mapping):
            raise ModelError(f"workload: kind: must be one of {', '.join(_WORKLOAD_KINDS)}")
        assert isinstance(kind, str)
        meta = obj.get("metadata")
        raw_name = meta.get("name") if isinstance(meta, Mapping) else None
        raw_ns = meta.get("namespace") if isinstance(meta, Mapping) else None
        namespace = raw_ns if isinstance(raw_ns, str) and raw_ns else "default"
        where = _Path(kind, f"{namespace}/{raw_name}" if isinstance(raw_name, str) else "")
        meta = _mapping(meta, where, "metadata")
        name = _str(meta.get("name"), where, "metadata.name")
        if not name:
            raise where.error("metadata.name", "is required")
        spec = _mapping(obj.get("spec"), where, "spec")
        raw = spec.get("selector")
        if kind in ("Service", "ReplicationController"):
            labels = None if raw is None else _string_map(raw, where, "spec.selector")
            requirements = tuple(
                LabelRequirement(k, "In", frozenset((v,))) for k, v in (labels or {}).items()
            )
            selector = NOTHING if labels is None else LabelSelector(requirements)
            return cls(kind, namespace, name, selector, labels)
        return cls(kind, namespace, name, parse_label_selector(raw, where, "spec.selector"))
