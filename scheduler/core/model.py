"""Pods and nodes as the scheduler sees them, parsed once from API objects.

`PodInfo.from_object` and `NodeInfo.from_object` take the JSON/YAML mapping of a Pod or
Node (from a watch, a file or a scenario) and compute everything the plugins need: the
effective requests exactly as kube does, host ports, images, tolerations, affinity. Every
error names the object and the field.

A pod bound to a node always counts with every resource it holds: it is read part by part
(`_Reader`), and a part that cannot be read is reported, listed in `PodInfo.unreadable` and left
at its neutral default instead of failing the whole pod. Pending pods and nodes are strict.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from typing import Any, TypeVar

from scheduler.core.decode import Fields
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
from scheduler.core.quantity import QuantityError, is_extended_resource, parse_quantity, to_units
from scheduler.core.selectors import (
    ModelError,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    parse_label_selector,
    parse_node_selector,
    parse_node_selector_term,
)
from scheduler.core.storage import PodResourceClaim, PodVolume, parse_pod_storage

__all__ = [
    "DEFAULT_MEMORY_REQUEST",
    "DEFAULT_MILLI_CPU_REQUEST",
    "GroupRef",
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
    "parse_label_selector",
    "parse_node_selector",
]

# kube's defaults for containers that omit a request, used for scoring only.
# Resource amounts stay below 2^53 in kube's unit (milli-CPU, bytes): far above any real
# machine, and the bound under which the vectorised scores are exact (and sums fit int64).
MAX_AMOUNT = 2**53
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024

T = TypeVar("T")
Resources = dict[str, int]
# Exact amounts, as kube sums Quantities before it rounds them to integers.
Amounts = dict[str, Fraction]


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
class PreferredTerm:
    weight: int
    preference: NodeSelectorTerm


# ---------------------------------------------------------------------------- helpers


def _object(kind: str, name: str) -> Fields:
    """The decoder for one object: errors read ``Pod default/web: spec.containers[0]...``."""
    return Fields(ModelError, f"{kind} {name}: " if name else f"{kind}: ")


def object_identity(
    obj: Any, kind: str, *, namespaced: bool
) -> tuple[Fields, Mapping[str, Any], str, str]:
    """An API object's decoder (errors read ``<kind> <ns>/<name>: <field>: ...``), its
    metadata, name (required) and namespace ("default" when unset; "" if cluster-scoped)."""
    if not isinstance(obj, Mapping):
        raise ModelError(f"{kind}: must be a mapping, got {type(obj).__name__}")
    meta = obj.get("metadata")
    raw_name = meta.get("name") if isinstance(meta, Mapping) else None
    raw_ns = meta.get("namespace") if isinstance(meta, Mapping) else None
    namespace = (raw_ns if isinstance(raw_ns, str) and raw_ns else "default") if namespaced else ""
    shown = ""
    if isinstance(raw_name, str):
        shown = f"{namespace}/{raw_name}" if namespaced else raw_name
    where = _object(kind, shown)
    meta = where.mapping(meta, "metadata")
    name = where.string(meta.get("name"), "metadata.name", "")
    if not name:
        raise where.fail("metadata.name", "is required")
    return where, meta, name, namespace


def _quantities(value: Any, where: Fields, path: str) -> Amounts:
    result: Amounts = {}
    for name, quantity in where.mapping(value, path).items():
        try:
            amount = parse_quantity(quantity)
        except QuantityError as exc:
            raise where.fail(f"{path}.{name}", str(exc)) from None
        if amount < 0:
            raise where.fail(f"{path}.{name}", "must be greater than or equal to 0")
        if to_units(str(name), amount) >= MAX_AMOUNT:
            raise where.fail(
                f"{path}.{name}", f"{quantity!r} is too large (at most 2^53-1 in kube's unit)"
            )
        if amount.denominator != 1 and is_extended_resource(str(name)):
            raise where.fail(
                f"{path}.{name}", f"must be a whole number (an extended resource), got {quantity!r}"
            )
        result[str(name)] = amount
    return result


def _units(amounts: Mapping[str, Fraction]) -> Resources:
    return {name: to_units(name, amount) for name, amount in amounts.items()}


def _resources(value: Any, where: Fields, path: str) -> Resources:
    return _units(_quantities(value, where, path))


def _timestamp(value: Any, where: Fields, path: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.timestamp()
    if not isinstance(value, str):
        raise where.fail(path, f"must be an RFC 3339 time, got {value!r}")
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise where.fail(path, f"must be an RFC 3339 time, got {value!r}") from None


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


def _affinity_term(
    raw: Any, where: Fields, path: str, namespace: str, labels: Mapping[str, str]
) -> AffinityTerm:
    data = where.mapping(raw, path)
    selector = parse_label_selector(data.get("labelSelector"), where, f"{path}.labelSelector")
    match_keys = where.string_list(data.get("matchLabelKeys"), f"{path}.matchLabelKeys")
    mismatch_keys = where.string_list(data.get("mismatchLabelKeys"), f"{path}.mismatchLabelKeys")
    # The API server's merge: only into a selector that exists (a missing one selects nothing).
    selector = selector.merged(
        label_key_requirements(match_keys, "In", labels)
        + label_key_requirements(mismatch_keys, "NotIn", labels)
    )
    names = where.string_list(data.get("namespaces"), f"{path}.namespaces")
    raw_ns_selector = data.get("namespaceSelector")
    ns_selector = parse_label_selector(raw_ns_selector, where, f"{path}.namespaceSelector")
    if not names and raw_ns_selector is None:
        names = (namespace,)
    topology_key = where.string(data.get("topologyKey"), f"{path}.topologyKey", "")
    if not topology_key:
        raise where.fail(f"{path}.topologyKey", "can not be empty")
    return AffinityTerm(selector, frozenset(names), ns_selector, topology_key)


def _terms(
    raw: Any, where: Fields, path: str, namespace: str, labels: Mapping[str, str]
) -> tuple[AffinityTerm, ...]:
    return tuple(
        _affinity_term(t, where, f"{path}[{i}]", namespace, labels)
        for i, t in enumerate(where.list(raw, path))
    )


def _weighted(
    raw: Any, where: Fields, path: str, namespace: str, labels: Mapping[str, str]
) -> tuple[WeightedTerm, ...]:
    out = []
    for i, item in enumerate(where.list(raw, path)):
        p = f"{path}[{i}]"
        data = where.mapping(item, p)
        weight = where.integer(data.get("weight"), f"{p}.weight", 0)
        if not 1 <= weight <= 100:
            raise where.fail(f"{p}.weight", f"must be in the range 1-100, got {weight}")
        term = _affinity_term(data.get("podAffinityTerm"), where, f"{p}.podAffinityTerm",
                              namespace, labels)  # fmt: skip
        out.append(WeightedTerm(term, weight))
    return tuple(out)


_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def parse_pod_affinity(
    affinity: Mapping[str, Any], where: Fields, namespace: str, labels: Mapping[str, str]
) -> PodAffinity:
    """`spec.affinity.podAffinity` and `podAntiAffinity` of a pod in `namespace`."""
    base = "spec.affinity"
    aff = where.mapping(affinity.get("podAffinity"), f"{base}.podAffinity")
    anti = where.mapping(affinity.get("podAntiAffinity"), f"{base}.podAntiAffinity")
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


def parse_spread_constraint(raw: Any, where: Fields, path: str) -> SpreadConstraint:
    """One topology spread constraint, validated as the API server validates it."""
    data = where.mapping(raw, path)
    max_skew = where.integer(data.get("maxSkew"), f"{path}.maxSkew", 0)
    if max_skew <= 0:
        message = f"Invalid value: {max_skew}: must be greater than zero"
        raise where.fail(f"{path}.maxSkew", message)
    key = where.string(data.get("topologyKey"), f"{path}.topologyKey", "")
    if not key:
        raise where.fail(f"{path}.topologyKey", "Required value: can not be empty")
    action = where.string(data.get("whenUnsatisfiable"), f"{path}.whenUnsatisfiable", "")
    if action not in _ACTIONS:
        raise where.fail(
            f"{path}.whenUnsatisfiable",
            f'Unsupported value: "{action}": supported values: "DoNotSchedule", "ScheduleAnyway"',
        )
    min_domains = where.integer(data.get("minDomains"), f"{path}.minDomains", 1)
    if data.get("minDomains") is not None:
        if min_domains <= 0:
            raise where.fail(f"{path}.minDomains", f"Invalid value: {min_domains}: must be > 0")
        if action != "DoNotSchedule":
            raise where.fail(
                f"{path}.minDomains",
                f"Invalid value: {min_domains}: can only use minDomains if "
                "whenUnsatisfiable=DoNotSchedule",
            )
    policies = []
    for name, default in (("nodeAffinityPolicy", "Honor"), ("nodeTaintsPolicy", "Ignore")):
        value = where.string(data.get(name), f"{path}.{name}", "") or default
        if value not in _POLICIES:
            raise where.fail(
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
        match_label_keys=where.string_list(data.get("matchLabelKeys"), f"{path}.matchLabelKeys"),
        min_domains=min_domains,
        node_affinity_policy=policies[0],
        node_taints_policy=policies[1],
    )


def parse_spread_constraints(raw: Any, where: Fields, path: str) -> tuple[SpreadConstraint, ...]:
    items = where.list(raw, path)
    out = tuple(parse_spread_constraint(c, where, f"{path}[{i}]") for i, c in enumerate(items))
    seen: set[tuple[str, str]] = set()
    for i, c in enumerate(out):
        pair = (c.topology_key, c.when_unsatisfiable)
        if pair in seen:
            raise where.fail(
                f"{path}[{i}]",
                f'Duplicate value: "{{{c.topology_key}, {c.when_unsatisfiable}}}"',
            )
        seen.add(pair)
    return out


# ---------------------------------------------------------------------------- unreadable parts

_log = logging.getLogger("topo_scheduler.core.model")
_REPORTED: dict[str, None] = {}
_REPORTED_MAX = 4096


def _report_once(message: str) -> None:
    """Log an unreadable part of a bound pod once (the last few thousand are remembered):
    pods are parsed again on every watch event."""
    if message in _REPORTED:
        return
    if len(_REPORTED) >= _REPORTED_MAX:
        del _REPORTED[next(iter(_REPORTED))]
    _REPORTED[message] = None
    _log.warning("%s; the bound pod is counted with what can be read (this part left out)", message)


class _Reader:
    """Reads an object part by part, the one place where an unreadable part is handled.

    Strict (a pending pod): the first part that cannot be read raises its `ModelError`, as
    the decoder does. Lenient (a pod bound to a node, which holds what it holds whatever we
    make of the rest): a part that cannot be read is reported once, recorded in `unreadable`
    (the errors, each naming the object and field) and replaced by its neutral default (what
    kube reads when the field is absent); every other part is still read.
    """

    __slots__ = ("lenient", "unreadable", "where")

    def __init__(self, where: Fields, *, lenient: bool) -> None:
        self.where = where
        self.lenient = lenient
        self.unreadable: list[str] = []

    def part(self, read: Callable[[], T], default: T) -> T:
        """`read()`, or (lenient) `default` when it raises a ModelError, reported."""
        if not self.lenient:
            return read()
        try:
            return read()
        except ModelError as exc:
            self.report(str(exc))
            return default

    def report(self, message: str) -> None:
        """Record one unreadable part (and log it once)."""
        if message not in self.unreadable:
            self.unreadable.append(message)
        _report_once(message)

    def string_map(self, value: Any, path: str) -> dict[str, str]:
        """A map of strings (labels, annotations, nodeSelector); leniently, an entry that is
        not a string is left out (reported) and the others kept."""
        where = self.where
        if not self.lenient:
            return where.string_map(value, path)
        data: Mapping[str, Any] = self.part(lambda: where.mapping(value, path), {})
        out: dict[str, str] = {}
        for key, item in data.items():
            if isinstance(item, str):
                out[str(key)] = item
            else:
                what = type(item).__name__
                self.report(str(where.fail(f"{path}.{key}", f"must be a string, got {what}")))
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


def _container(raw: Any, read: _Reader, path: str, init: bool) -> _Container:
    where = read.where
    item = where.mapping(raw, path)
    resources: Mapping[str, Any] = read.part(
        lambda: where.mapping(item.get("resources"), f"{path}.resources"), {}
    )
    limits: Amounts = read.part(
        lambda: _quantities(resources.get("limits"), where, f"{path}.resources.limits"), {}
    )
    requests: Amounts = read.part(
        lambda: _quantities(resources.get("requests"), where, f"{path}.resources.requests"), {}
    )
    # The API server defaults a missing request to its limit.
    requests = {**limits, **requests}
    ports: tuple[HostPort, ...] = read.part(lambda: _host_ports(item, where, path), ())
    restart = read.part(
        lambda: where.string(item.get("restartPolicy"), f"{path}.restartPolicy", ""), ""
    )
    return _Container(
        name=read.part(lambda: where.string(item.get("name"), f"{path}.name", ""), ""),
        requests=requests,
        limits=limits,
        ports=ports,
        image=read.part(lambda: where.string(item.get("image"), f"{path}.image", ""), ""),
        restartable=init and restart == "Always",
    )


def _host_ports(item: Mapping[str, Any], where: Fields, path: str) -> tuple[HostPort, ...]:
    ports: list[HostPort] = []
    for i, raw_port in enumerate(where.list(item.get("ports"), f"{path}.ports")):
        port = where.mapping(raw_port, f"{path}.ports[{i}]")
        host_port = where.integer(port.get("hostPort"), f"{path}.ports[{i}].hostPort", 0)
        if host_port > 0:
            ports.append(
                HostPort(
                    ip=where.string(port.get("hostIP"), f"{path}.ports[{i}].hostIP", ""),
                    protocol=where.string(port.get("protocol"), f"{path}.ports[{i}].protocol", "")
                    or "TCP",
                    port=host_port,
                )
            )
    return tuple(ports)


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
    # kube's IsSupportedPodLevelResource: cpu, memory and hugepages-<size> set at pod level
    # replace what the containers add up to.
    for name, amount in pod_level.items():
        if name in ("cpu", "memory") or name.startswith("hugepages-"):
            total[name] = amount
    _add(total, overhead)
    return total


# Pod groups (gang scheduling, `scheduler.core.group`): how a pod names its group.
SOURCE_SCHEDULER_PLUGINS = "scheduling.x-k8s.io"  # PodGroup v1alpha1, label on the pod
SOURCE_KUBERNETES = "scheduling.k8s.io"  # PodGroup v1beta1, spec.schedulingGroup
SOURCE_ANNOTATION = "annotation"  # no CRD: annotations on the pods
LABEL_POD_GROUP = "scheduling.x-k8s.io/pod-group"
ANNOTATION_POD_GROUP = "topo-scheduler.io/pod-group"
ANNOTATION_MIN_MEMBER = "topo-scheduler.io/min-member"
ANNOTATION_TOPOLOGY_REQUIRED = "topo-scheduler.io/topology-required"
ANNOTATION_TOPOLOGY_PREFERRED = "topo-scheduler.io/topology-preferred"
GROUP_ANNOTATIONS = (
    ANNOTATION_POD_GROUP,
    ANNOTATION_MIN_MEMBER,
    ANNOTATION_TOPOLOGY_REQUIRED,
    ANNOTATION_TOPOLOGY_PREFERRED,
)


@dataclass(frozen=True, slots=True)
class GroupRef:
    """The pod group a pod joins, and what the pod itself says about it (annotations)."""

    source: str  # SOURCE_*
    namespace: str
    name: str
    min_member: int | None = None  # topo-scheduler.io/min-member (the annotation form)
    required: str | None = None  # topo-scheduler.io/topology-required: a node label key
    preferred: str | None = None  # topo-scheduler.io/topology-preferred: a node label key

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _pod_group(
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    spec: Mapping[str, Any],
    where: Fields,
    namespace: str,
) -> GroupRef | None:
    """The pod's group: spec.schedulingGroup.podGroupName (Kubernetes PodGroup), the
    scheduler-plugins label, or the topo-scheduler.io/pod-group annotation, in that order
    (from the labels and annotations as read)."""
    group = where.mapping(spec.get("schedulingGroup"), "spec.schedulingGroup")
    source, name = "", ""
    if group.get("podGroupName") is not None:
        path = "spec.schedulingGroup.podGroupName"
        source, name = SOURCE_KUBERNETES, where.name(group.get("podGroupName"), path)
    elif labels.get(LABEL_POD_GROUP):
        source, name = SOURCE_SCHEDULER_PLUGINS, labels[LABEL_POD_GROUP]
    elif annotations.get(ANNOTATION_POD_GROUP):
        source, name = SOURCE_ANNOTATION, annotations[ANNOTATION_POD_GROUP]
    if not source:
        return None
    path = f"metadata.annotations.{ANNOTATION_MIN_MEMBER}"
    raw = annotations.get(ANNOTATION_MIN_MEMBER)
    min_member: int | None = None
    if raw is not None:
        # ASCII digits only ("²" is a digit to str.isdigit, not to int), in int64 range
        digits = raw.strip().lstrip("0")
        if not (digits.isascii() and digits.isdigit() and len(digits) <= 18):
            shown = raw if len(raw) <= 40 else f"{raw[:40]}... ({len(raw):,} characters)"
            raise where.fail(path, f"must be a positive integer, got {shown!r}")
        min_member = int(digits)
    elif source == SOURCE_ANNOTATION:
        raise where.fail(path, f"is required with {ANNOTATION_POD_GROUP}")
    keys = []
    for annotation in (ANNOTATION_TOPOLOGY_REQUIRED, ANNOTATION_TOPOLOGY_PREFERRED):
        value = annotations.get(annotation)
        if value is not None and not value.strip():
            raise where.fail(f"metadata.annotations.{annotation}", "must be a node label key")
        keys.append(value.strip() if value is not None else None)
    return GroupRef(source, namespace, name, min_member, keys[0], keys[1])


_NO_STORAGE: dict[str, Any] = {"volumes": (), "resource_claims": ()}


def _storage_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    """spec.volumes and spec.resourceClaims, parsed by `scheduler.core.storage`."""
    volumes, claims = parse_pod_storage(obj)
    return {"volumes": volumes, "resource_claims": claims}


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
    pod_group: GroupRef | None = None  # the pod group it belongs to (scheduler.core.group)
    volumes: tuple[PodVolume, ...] = ()
    resource_claims: tuple[PodResourceClaim, ...] = ()
    # priority and preemption (`_preemption_fields`)
    priority_class_name: str = ""
    priority_set: bool = False  # spec.priority was given (the API server always sets it)
    preemption_policy: str = "PreemptLowerPriority"
    nominated_node_name: str | None = None
    start_time: float | None = None  # status.startTime
    preempted: bool = False  # DisruptionTarget condition, reason PreemptionByScheduler
    pod_affinity: PodAffinity = field(default_factory=PodAffinity)
    spread_constraints: tuple[SpreadConstraint, ...] = ()
    # The controlling owner: (API group, kind, name), e.g. ("apps", "ReplicaSet", "web-5d8f").
    controller: tuple[str, str, str] | None = None
    # What could not be read of a bound pod (each error names the object and field): those
    # parts are at their neutral default; the pod still counts with every resource it holds.
    unreadable: tuple[str, ...] = field(default=(), hash=False, compare=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def terminal(self) -> bool:
        """Succeeded and Failed pods hold no resources on their node."""
        return self.phase in ("Succeeded", "Failed")

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> PodInfo:
        """Parse a Pod mapping (API JSON or YAML manifest).

        A pending pod must be readable whole (a ModelError names the first field that is
        not). A pod bound to a node holds what it holds whatever the rest says: beyond its
        identity and node name, every part that cannot be read is reported, recorded in
        `unreadable` and left at its neutral default, and each resource quantity that cannot
        be read is left out of its requests (`_readable_resources`).
        """
        where, namespace, meta = _pod_identity(obj)
        spec = where.mapping(obj.get("spec"), "spec")
        node_name = where.string(spec.get("nodeName"), "spec.nodeName", "") or None
        read = _Reader(where, lenient=node_name is not None)
        memo_key = _resources_key(spec, read.lenient)
        known = _known_resources(memo_key)
        if known is None and node_name is not None:
            spec = _readable_resources(spec, read)
        problems = len(read.unreadable)
        status: Mapping[str, Any] = read.part(
            lambda: where.mapping(obj.get("status"), "status"), {}
        )
        if known is not None:
            resources = known
        else:
            after_status = len(read.unreadable)
            resources = _pod_resources(spec, read)
            if not problems and len(read.unreadable) == after_status:
                _remember_resources(memo_key, resources)
        required, preferred = read.part(lambda: _node_affinity(spec, where), _NO_NODE_AFFINITY)
        labels = read.string_map(meta.get("labels"), "metadata.labels")
        annotations = read.string_map(meta.get("annotations"), "metadata.annotations")
        pod_affinity = read.part(
            lambda: parse_pod_affinity(
                where.mapping(spec.get("affinity"), "spec.affinity"), where, namespace, labels
            ),
            PodAffinity(),
        )
        spread: tuple[SpreadConstraint, ...] = read.part(
            lambda: parse_spread_constraints(
                spec.get("topologySpreadConstraints"), where, "spec.topologySpreadConstraints"
            ),
            (),
        )
        scheduler_name = read.part(
            lambda: where.string(spec.get("schedulerName"), "spec.schedulerName", ""), ""
        )
        return cls(
            namespace=namespace,
            name=where.string(meta.get("name"), "metadata.name"),
            uid=where.string(meta.get("uid"), "metadata.uid", ""),
            scheduler_name=scheduler_name or "default-scheduler",
            node_name=node_name,
            priority=read.part(lambda: where.integer(spec.get("priority"), "spec.priority", 0), 0),
            requests=resources.requests,
            non_zero_cpu=resources.non_zero_cpu,
            non_zero_memory=resources.non_zero_memory,
            host_ports=resources.host_ports,
            images=resources.images,
            tolerations=read.part(lambda: _tolerations(spec, where), ()),
            node_selector=tuple(
                sorted(read.string_map(spec.get("nodeSelector"), "spec.nodeSelector").items())
            ),
            required_affinity=required,
            preferred_affinity=preferred,
            labels=labels,
            annotations=annotations,
            best_effort=resources.best_effort,
            creation_timestamp=read.part(
                lambda: _timestamp(
                    meta.get("creationTimestamp"), where, "metadata.creationTimestamp"
                ),
                None,
            )
            or 0.0,
            deletion_timestamp=read.part(
                lambda: _timestamp(
                    meta.get("deletionTimestamp"), where, "metadata.deletionTimestamp"
                ),
                None,
            ),
            scheduling_gates=read.part(lambda: _scheduling_gates(spec, where), ()),
            resource_version=str(meta.get("resourceVersion") or ""),
            container_count=resources.container_count,
            pod_group=read.part(
                lambda: _pod_group(labels, annotations, spec, where, namespace), None
            ),
            **read.part(lambda: _storage_fields(obj), _NO_STORAGE),
            **_preemption_fields(spec, read),
            **_status_fields(status, read),
            pod_affinity=pod_affinity,
            spread_constraints=spread,
            controller=read.part(lambda: _controller(meta, where), None),
            unreadable=tuple(read.unreadable),
        )

    def updated(self, obj: Mapping[str, Any]) -> PodInfo:
        """This pod after an update that changed at most spec.nodeName, its status and
        annotations other than the pod-group ones (the caller checks that): those are read
        again, as `from_object` reads them, and the rest is kept. A pod that had unreadable
        parts is read again whole (what was left out may have been fixed)."""
        where, _, meta = _pod_identity(obj)
        spec = where.mapping(obj.get("spec"), "spec")
        node_name = where.string(spec.get("nodeName"), "spec.nodeName", "") or None
        if self.unreadable or where.string(meta.get("uid"), "metadata.uid", "") != self.uid:
            return PodInfo.from_object(obj)
        read = _Reader(where, lenient=node_name is not None)
        status: Mapping[str, Any] = read.part(
            lambda: where.mapping(obj.get("status"), "status"), {}
        )
        return dataclasses.replace(
            self,
            node_name=node_name,
            annotations=read.string_map(meta.get("annotations"), "metadata.annotations"),
            resource_version=str(meta.get("resourceVersion") or ""),
            **_status_fields(status, read),
            unreadable=tuple(read.unreadable),
        )


def _controller(meta: Mapping[str, Any], where: Fields) -> tuple[str, str, str] | None:
    """metav1.GetControllerOf: the first owner reference marked `controller: true`."""
    for i, raw in enumerate(where.list(meta.get("ownerReferences"), "metadata.ownerReferences")):
        path = f"metadata.ownerReferences[{i}]"
        ref = where.mapping(raw, path)
        if ref.get("controller") is True:
            api_version = where.string(ref.get("apiVersion"), f"{path}.apiVersion", "")
            group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
            kind = where.string(ref.get("kind"), f"{path}.kind", "")
            return group, kind, where.string(ref.get("name"), f"{path}.name", "")
    return None


def _pod_identity(obj: Any) -> tuple[Fields, str, Mapping[str, Any]]:
    """The pod's decoder (named after it, as far as it can be read), namespace and metadata."""
    if not isinstance(obj, Mapping):
        raise ModelError(f"Pod: must be a mapping, got {type(obj).__name__}")
    kind = obj.get("kind")
    if kind not in (None, "Pod"):
        raise ModelError(f"Pod: kind: must be Pod, got {kind!r}")
    meta = obj.get("metadata")
    raw_name = meta.get("name") if isinstance(meta, Mapping) else None
    raw_ns = meta.get("namespace") if isinstance(meta, Mapping) else None
    namespace = raw_ns if isinstance(raw_ns, str) and raw_ns else "default"
    where = _object("Pod", f"{namespace}/{raw_name}" if isinstance(raw_name, str) else "")
    meta = where.mapping(meta, "metadata")
    if not where.string(meta.get("name"), "metadata.name", ""):
        raise where.fail("metadata.name", "is required")
    return where, namespace, meta


def _readable_resources(spec: Mapping[str, Any], read: _Reader) -> Mapping[str, Any]:
    """A bound pod's spec with every resource quantity that cannot be read left out (and
    reported): the node still counts its cpu, memory, pods and GPUs, not nothing. A
    resource whose amounts add up beyond the bound is left out everywhere."""
    where = read.where
    drop: set[str] = set()
    totals: Amounts = {}

    def readable(value: Any, path: str) -> Any:
        if not isinstance(value, Mapping):
            return value
        kept = {}
        for name, quantity in value.items():
            if name in drop:
                continue
            try:
                amounts = _quantities({name: quantity}, where, path)
            except ModelError as exc:
                read.report(str(exc))
                continue
            _add(totals, amounts)
            kept[name] = quantity
        return kept

    def resources(value: Any, path: str) -> Any:
        if not isinstance(value, Mapping):
            return value
        return {
            **value,
            **{
                key: readable(value[key], f"{path}.{key}")
                for key in ("requests", "limits")
                if key in value
            },
        }

    while True:
        totals.clear()
        out = dict(spec)
        for group in ("containers", "initContainers"):
            items = spec.get(group)
            if isinstance(items, list):
                out[group] = [
                    {**c, "resources": resources(c["resources"], f"spec.{group}[{i}].resources")}
                    if isinstance(c, Mapping) and "resources" in c
                    else c
                    for i, c in enumerate(items)
                ]
        if "resources" in spec:
            out["resources"] = resources(spec["resources"], "spec.resources")
        if "overhead" in spec:
            out["overhead"] = readable(spec["overhead"], "spec.overhead")
        large = {name for name, total in totals.items() if to_units(name, total) >= MAX_AMOUNT}
        if not large:
            return out
        for name in sorted(large):
            read.report(f"{where.prefix}spec: {name} adds up beyond 2^53-1")
        drop |= large


@dataclass(frozen=True, slots=True)
class _PodResources:
    requests: Resources
    non_zero_cpu: int
    non_zero_memory: int
    best_effort: bool
    host_ports: tuple[HostPort, ...]
    images: tuple[str, ...]
    container_count: int


def _containers(spec: Mapping[str, Any], read: _Reader, group: str) -> list[_Container]:
    """spec.containers or spec.initContainers; leniently, a container that is not even a
    mapping is left out (nothing of it can be read)."""
    where = read.where
    items: list[Any] = read.part(lambda: where.list(spec.get(group), f"spec.{group}"), [])
    out = []
    for i, raw in enumerate(items):
        path = f"spec.{group}[{i}]"
        c = read.part(lambda: _container(raw, read, path, init=group == "initContainers"), None)  # noqa: B023
        if c is not None:
            out.append(c)
    return out


# The resource accounting of pods whose resource specs are the same (the pods of one template):
# computed once, for the specs that could be read whole. Bounded; the oldest entry goes first.
_RESOURCES_MEMO: dict[tuple[bool, str], _PodResources] = {}
_RESOURCES_MEMO_MAX = 1024
_RESOURCES_KEY_MAX = 4096  # longer specs (rare, possibly hostile) are not kept
_CONTAINER_FIELDS = ("name", "image", "restartPolicy", "resources", "ports")


def _resources_key(spec: Mapping[str, Any], lenient: bool) -> tuple[bool, str] | None:
    """Everything `_readable_resources` and `_pod_resources` read of a spec, as text, with the
    mode (strict or lenient); None when the spec is not made of the plain types a JSON or YAML
    decoder gives (whose repr is one-to-one: ``1``, ``1.0``, ``True`` and ``'1'`` differ) or
    is too long to keep."""
    if type(spec) is not dict:
        return None
    parts: list[Any] = [spec.get("resources"), spec.get("overhead")]
    for group in ("containers", "initContainers"):
        items = spec.get(group)
        if items is not None and type(items) is not list:
            return None
        parts.append(group)
        for c in items or ():
            if type(c) is not dict:
                return None
            parts.append(tuple(c.get(name) for name in _CONTAINER_FIELDS))
    key = repr(parts)
    return (lenient, key) if len(key) <= _RESOURCES_KEY_MAX else None


def _known_resources(key: tuple[bool, str] | None) -> _PodResources | None:
    """The accounting of a spec read before without a problem (a copy: the requests are the
    pod's own), or None."""
    known = _RESOURCES_MEMO.get(key) if key is not None else None
    return None if known is None else dataclasses.replace(known, requests=dict(known.requests))


def _remember_resources(key: tuple[bool, str] | None, resources: _PodResources) -> None:
    """Keep the accounting of a spec that was read without a problem (only such results are
    kept: one that recorded a problem is computed, and reported, every time)."""
    if key is None:
        return
    if len(_RESOURCES_MEMO) >= _RESOURCES_MEMO_MAX:
        del _RESOURCES_MEMO[next(iter(_RESOURCES_MEMO))]
    _RESOURCES_MEMO[key] = dataclasses.replace(resources, requests=dict(resources.requests))


def _pod_resources(spec: Mapping[str, Any], read: _Reader) -> _PodResources:
    """What the pod's containers ask for, as kube's scheduler counts it."""
    where = read.where
    containers = _containers(spec, read, "containers")
    init_containers = _containers(spec, read, "initContainers")
    pod_resources: Mapping[str, Any] = read.part(
        lambda: where.mapping(spec.get("resources"), "spec.resources"), {}
    )
    pod_level: Amounts = {
        **read.part(
            lambda: _quantities(pod_resources.get("limits"), where, "spec.resources.limits"), {}
        ),
        **read.part(
            lambda: _quantities(pod_resources.get("requests"), where, "spec.resources.requests"),
            {},
        ),
    }
    overhead: Amounts = read.part(
        lambda: _quantities(spec.get("overhead"), where, "spec.overhead"), {}
    )
    # Summed exactly and rounded once per resource, as kube rounds the pod's total.
    requests = _pod_requests(containers, init_containers, pod_level, overhead)
    for resource, total in requests.items():
        if to_units(resource, total) >= MAX_AMOUNT:
            raise where.fail("spec", f"the pod's total {resource} request is too large")
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
    sidecars = (c for c in init_containers if c.restartable)
    return _PodResources(
        requests=_units(requests),
        non_zero_cpu=to_units("cpu", non_zero.get("cpu", Fraction(0))),
        non_zero_memory=to_units("memory", non_zero.get("memory", Fraction(0))),
        best_effort=best_effort,
        host_ports=tuple(p for c in [*sidecars, *containers] for p in c.ports),
        images=tuple(normalized_image_name(c.image) for c in everything if c.image),
        container_count=len(everything),
    )


def _tolerations(spec: Mapping[str, Any], where: Fields) -> tuple[Toleration, ...]:
    tolerations = []
    for i, raw in enumerate(where.list(spec.get("tolerations"), "spec.tolerations")):
        path = f"spec.tolerations[{i}]"
        item = where.mapping(raw, path)
        tolerations.append(
            Toleration(
                key=where.string(item.get("key"), f"{path}.key", ""),
                operator=where.string(item.get("operator"), f"{path}.operator", ""),
                value=where.string(item.get("value"), f"{path}.value", ""),
                effect=where.string(item.get("effect"), f"{path}.effect", ""),
            )
        )
    return tuple(tolerations)


def _node_affinity(
    spec: Mapping[str, Any], where: Fields
) -> tuple[NodeSelector | None, tuple[PreferredTerm, ...]]:
    """Required and preferred node affinity (`spec.affinity.nodeAffinity`)."""
    base = "spec.affinity.nodeAffinity"
    affinity = where.mapping(spec.get("affinity"), "spec.affinity")
    node_affinity = where.mapping(affinity.get("nodeAffinity"), base)
    required_raw = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    required: NodeSelector | None = None
    if required_raw is not None:
        rpath = f"{base}.requiredDuringSchedulingIgnoredDuringExecution"
        required = parse_node_selector(required_raw, where, rpath)
    preferred = []
    ppath = f"{base}.preferredDuringSchedulingIgnoredDuringExecution"
    raw_preferred = node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution")
    for i, raw in enumerate(where.list(raw_preferred, ppath)):
        item = where.mapping(raw, f"{ppath}[{i}]")
        preferred.append(
            PreferredTerm(
                weight=where.integer(item.get("weight"), f"{ppath}[{i}].weight", 0),
                preference=parse_node_selector_term(
                    item.get("preference"), where, f"{ppath}[{i}].preference"
                ),
            )
        )
    return required, tuple(preferred)


_NO_NODE_AFFINITY: tuple[NodeSelector | None, tuple[PreferredTerm, ...]] = (None, ())


def _scheduling_gates(spec: Mapping[str, Any], where: Fields) -> tuple[str, ...]:
    gates = where.list(spec.get("schedulingGates"), "spec.schedulingGates")
    return tuple(
        where.string(
            where.mapping(g, f"spec.schedulingGates[{i}]").get("name"),
            f"spec.schedulingGates[{i}].name",
            "",
        )
        for i, g in enumerate(gates)
    )


PREEMPTION_POLICIES = ("PreemptLowerPriority", "Never")


def _preemption_fields(spec: Mapping[str, Any], read: _Reader) -> dict[str, Any]:
    """What priority and preemption read of a pod's spec: its PriorityClass and policy."""
    where = read.where

    def policy() -> str:
        value = where.string(spec.get("preemptionPolicy"), "spec.preemptionPolicy", "")
        if value and value not in PREEMPTION_POLICIES:
            raise where.fail(
                "spec.preemptionPolicy",
                f'Unsupported value: "{value}": supported values: "Never", "PreemptLowerPriority"',
            )
        return value

    return {
        "priority_class_name": read.part(
            lambda: where.string(spec.get("priorityClassName"), "spec.priorityClassName", ""), ""
        ),
        "priority_set": spec.get("priority") is not None,
        "preemption_policy": read.part(policy, "") or "PreemptLowerPriority",
    }


def _status_fields(status: Mapping[str, Any], read: _Reader) -> dict[str, Any]:
    """What the scheduler reads of a pod's status besides its phase: the nomination, the
    start time and whether the scheduler is preempting it (kube's DisruptionTarget condition
    with reason PreemptionByScheduler)."""
    where = read.where

    def preempted() -> bool:
        found = False
        for i, raw in enumerate(where.list(status.get("conditions"), "status.conditions")):
            cond = where.mapping(raw, f"status.conditions[{i}]")
            if (
                cond.get("type") == "DisruptionTarget"
                and cond.get("status") == "True"
                and cond.get("reason") == "PreemptionByScheduler"
            ):
                found = True
        return found

    nominated = read.part(
        lambda: where.string(status.get("nominatedNodeName"), "status.nominatedNodeName", ""), ""
    )
    return {
        "phase": read.part(lambda: where.string(status.get("phase"), "status.phase", ""), ""),
        "nominated_node_name": nominated or None,
        "start_time": read.part(
            lambda: _timestamp(status.get("startTime"), where, "status.startTime"), None
        ),
        "preempted": read.part(preempted, False),
    }


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
        if not isinstance(obj, Mapping):
            raise ModelError(f"Node: must be a mapping, got {type(obj).__name__}")
        meta = obj.get("metadata")
        raw_name = meta.get("name") if isinstance(meta, Mapping) else None
        where = _object("Node", raw_name if isinstance(raw_name, str) else "")
        meta = where.mapping(meta, "metadata")
        name = where.string(meta.get("name"), "metadata.name", "")
        if not name:
            raise where.fail("metadata.name", "is required")
        spec = where.mapping(obj.get("spec"), "spec")
        status = where.mapping(obj.get("status"), "status")
        allocatable_raw = status.get("allocatable")
        if allocatable_raw is None:
            allocatable_raw = status.get("capacity")
            path = "status.capacity"
        else:
            path = "status.allocatable"
        allocatable = _resources(allocatable_raw, where, path)

        taints = []
        for i, raw in enumerate(where.list(spec.get("taints"), "spec.taints")):
            item = where.mapping(raw, f"spec.taints[{i}]")
            effect = where.string(item.get("effect"), f"spec.taints[{i}].effect", "")
            if effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
                raise where.fail(
                    f"spec.taints[{i}].effect",
                    f'Unsupported value: "{effect}": supported values: '
                    '"NoExecute", "NoSchedule", "PreferNoSchedule"',
                )
            taints.append(
                Taint(
                    key=where.string(item.get("key"), f"spec.taints[{i}].key", ""),
                    value=where.string(item.get("value"), f"spec.taints[{i}].value", ""),
                    effect=effect,
                )
            )

        memory_pressure = False
        for i, raw in enumerate(where.list(status.get("conditions"), "status.conditions")):
            cond = where.mapping(raw, f"status.conditions[{i}]")
            if cond.get("type") == "MemoryPressure":
                memory_pressure = cond.get("status") == "True"

        images: dict[str, int] = {}
        for i, raw in enumerate(where.list(status.get("images"), "status.images")):
            image = where.mapping(raw, f"status.images[{i}]")
            size = where.integer(image.get("sizeBytes"), f"status.images[{i}].sizeBytes", 0)
            for j, image_name in enumerate(
                where.list(image.get("names"), f"status.images[{i}].names")
            ):
                # kube keys a node's images by the names the node reports (only the pod's
                # image names are normalized), and the first size reported for a name wins.
                images.setdefault(
                    where.string(image_name, f"status.images[{i}].names[{j}]", ""), size
                )

        unschedulable = spec.get("unschedulable", False)
        if not isinstance(unschedulable, bool):
            raise where.fail("spec.unschedulable", f"must be a boolean, got {unschedulable!r}")
        return cls(
            name=name,
            labels=where.string_map(meta.get("labels"), "metadata.labels"),
            annotations=where.string_map(meta.get("annotations"), "metadata.annotations"),
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
        where, meta, name, _ = object_identity(obj, "Namespace", namespaced=False)
        return cls(name, where.string_map(meta.get("labels"), "metadata.labels"))


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
        where = _object(kind, f"{namespace}/{raw_name}" if isinstance(raw_name, str) else "")
        meta = where.mapping(meta, "metadata")
        name = where.string(meta.get("name"), "metadata.name", "")
        if not name:
            raise where.fail("metadata.name", "is required")
        spec = where.mapping(obj.get("spec"), "spec")
        raw = spec.get("selector")
        if kind in ("Service", "ReplicationController"):
            labels = None if raw is None else where.string_map(raw, "spec.selector")
            requirements = tuple(
                LabelRequirement(k, "In", frozenset((v,))) for k, v in (labels or {}).items()
            )
            selector = NOTHING if labels is None else LabelSelector(requirements)
            return cls(kind, namespace, name, selector, labels)
        return cls(kind, namespace, name, parse_label_selector(raw, where, "spec.selector"))
