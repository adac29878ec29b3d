"""What a pod says about other pods: label selectors, pod (anti-)affinity terms and topology
spread constraints, parsed once and matched as kube-scheduler 1.33 matches them.

A `LabelSelector` is apimachinery's `metav1.LabelSelectorAsSelector` result: a missing
selector selects nothing, an empty one (`{}`) everything. An `AffinityTerm` is kube's
`framework.AffinityTerm`: the selector, the namespaces it names (the owning pod's namespace when
it names none and has no namespace selector), the namespace selector and the topology key;
`matchLabelKeys` / `mismatchLabelKeys` are merged into the selector from the owning pod's
labels, as the API server does when it admits the pod.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ALL_NAMESPACES",
    "NOTHING",
    "AffinityTerm",
    "LabelRequirement",
    "LabelSelector",
    "PodAffinity",
    "SpreadConstraint",
    "WeightedTerm",
    "parse_label_selector",
    "parse_pod_affinity",
    "parse_spread_constraints",
]

_SET_OPERATORS = ("In", "NotIn")
_EXISTENCE_OPERATORS = ("Exists", "DoesNotExist")


@dataclass(frozen=True, slots=True)
class LabelRequirement:
    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator == "In":
            return value is not None and value in self.values
        if self.operator == "NotIn":
            return value is None or value not in self.values
        if self.operator == "Exists":
            return value is not None
        return value is None  # DoesNotExist


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """`requirements` None selects nothing; an empty tuple selects everything."""

    requirements: tuple[LabelRequirement, ...] | None

    @property
    def empty(self) -> bool:
        """kube's Selector.Empty(): selects everything (no requirements)."""
        return self.requirements == ()

    @property
    def nothing(self) -> bool:
        return self.requirements is None

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.requirements is None:
            return False
        return all(r.matches(labels) for r in self.requirements)

    def merged(self, extra: tuple[LabelRequirement, ...]) -> LabelSelector:
        """The selector with more requirements ANDed; selecting nothing stays nothing."""
        if self.requirements is None or not extra:
            return self
        return LabelSelector(self.requirements + extra)


NOTHING = LabelSelector(None)
EVERYTHING = LabelSelector(())


class _All:
    """Sentinel for 'every namespace' (an empty namespace selector)."""

    def __repr__(self) -> str:
        return "ALL_NAMESPACES"


ALL_NAMESPACES = _All()
NamespaceSet = frozenset[str] | _All


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    selector: LabelSelector
    namespaces: frozenset[str]
    namespace_selector: LabelSelector
    topology_key: str

    def matches(
        self, namespace: str, labels: Mapping[str, str], ns_labels: Mapping[str, str] | None
    ) -> bool:
        """kube's AffinityTerm.Matches: the pod's namespace is named or selected (by the
        labels of that namespace, `ns_labels`), and its labels match the selector."""
        if namespace in self.namespaces or self.namespace_selector.matches(ns_labels or {}):
            return self.selector.matches(labels)
        return False

    def resolve_namespaces(self, namespaces: Mapping[str, Mapping[str, str]]) -> NamespaceSet:
        """kube's mergeAffinityTermNamespacesIfNotEmpty for the incoming pod's terms: the
        named namespaces plus those the selector selects, or all of them for `{}`."""
        if self.namespace_selector.empty:
            return ALL_NAMESPACES
        if self.namespace_selector.nothing:
            return self.namespaces
        selected = {
            n for n, labels in namespaces.items() if self.namespace_selector.matches(labels)
        }
        return self.namespaces | selected


def namespace_in(namespace: str, allowed: NamespaceSet) -> bool:
    return isinstance(allowed, _All) or namespace in allowed


@dataclass(frozen=True, slots=True)
class WeightedTerm:
    term: AffinityTerm
    weight: int


@dataclass(frozen=True, slots=True)
class PodAffinity:
    """The pod's affinity and anti-affinity terms (required ANDed, preferred weighted)."""

    required: tuple[AffinityTerm, ...] = ()
    required_anti: tuple[AffinityTerm, ...] = ()
    preferred: tuple[WeightedTerm, ...] = ()
    preferred_anti: tuple[WeightedTerm, ...] = ()

    @property
    def any(self) -> bool:
        return bool(self.required or self.required_anti or self.preferred or self.preferred_anti)


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """One `topologySpreadConstraints` entry (or a default constraint), as written; the
    selector is the written one (`matchLabelKeys` are merged per pod by the plugin)."""

    max_skew: int
    topology_key: str
    when_unsatisfiable: str  # DoNotSchedule | ScheduleAnyway
    selector: LabelSelector
    has_selector: bool = True
    match_label_keys: tuple[str, ...] = ()
    min_domains: int = 1
    node_affinity_policy: str = "Honor"
    node_taints_policy: str = "Ignore"


# ---------------------------------------------------------------------------- parsing

Fail = Callable[[str, str], Exception]
"""Builds the error for (field path, message); the caller's names the object."""


def _mapping(value: Any, fail: Fail, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise fail(path, f"must be a mapping, got {type(value).__name__}")
    return value


def _list(value: Any, fail: Fail, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise fail(path, f"must be a list, got {type(value).__name__}")
    return value


def _str(value: Any, fail: Fail, path: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise fail(path, f"must be a string, got {type(value).__name__}")
    return value


def _strings(value: Any, fail: Fail, path: str) -> tuple[str, ...]:
    return tuple(_str(v, fail, f"{path}[{i}]") for i, v in enumerate(_list(value, fail, path)))


def _int(value: Any, fail: Fail, path: str, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail(path, f"must be an integer, got {value!r}")
    return value


def parse_label_selector(raw: Any, fail: Fail, path: str) -> LabelSelector:
    """metav1.LabelSelectorAsSelector: None selects nothing, `{}` everything."""
    if raw is None:
        return NOTHING
    data = _mapping(raw, fail, path)
    requirements: list[LabelRequirement] = []
    match_labels = _mapping(data.get("matchLabels"), fail, f"{path}.matchLabels")
    for key, value in match_labels.items():
        value = _str(value, fail, f"{path}.matchLabels.{key}")
        requirements.append(LabelRequirement(str(key), "In", frozenset((value,))))
    exprs = _list(data.get("matchExpressions"), fail, f"{path}.matchExpressions")
    for i, item in enumerate(exprs):
        p = f"{path}.matchExpressions[{i}]"
        expr = _mapping(item, fail, p)
        key = _str(expr.get("key"), fail, f"{p}.key")
        if not key:
            raise fail(f"{p}.key", "is required")
        op = _str(expr.get("operator"), fail, f"{p}.operator")
        values = _strings(expr.get("values"), fail, f"{p}.values")
        if op in _SET_OPERATORS:
            if not values:
                raise fail(f"{p}.values", f"must be specified when `operator` is '{op}'")
        elif op in _EXISTENCE_OPERATORS:
            if values:
                raise fail(f"{p}.values", f"may not be specified when `operator` is '{op}'")
        else:
            raise fail(
                f"{p}.operator",
                f'Unsupported value: "{op}": supported values: '
                '"DoesNotExist", "Exists", "In", "NotIn"',
            )
        requirements.append(LabelRequirement(key, op, frozenset(values)))
    return LabelSelector(tuple(requirements))


def _label_key_requirements(
    keys: tuple[str, ...], operator: str, labels: Mapping[str, str]
) -> tuple[LabelRequirement, ...]:
    return tuple(
        LabelRequirement(k, operator, frozenset((labels[k],))) for k in keys if k in labels
    )


def _affinity_term(
    raw: Any, fail: Fail, path: str, namespace: str, labels: Mapping[str, str]
) -> AffinityTerm:
    data = _mapping(raw, fail, path)
    selector = parse_label_selector(data.get("labelSelector"), fail, f"{path}.labelSelector")
    match_keys = _strings(data.get("matchLabelKeys"), fail, f"{path}.matchLabelKeys")
    mismatch_keys = _strings(data.get("mismatchLabelKeys"), fail, f"{path}.mismatchLabelKeys")
    # The API server's merge: only into a selector that exists (a missing one selects nothing).
    selector = selector.merged(
        _label_key_requirements(match_keys, "In", labels)
        + _label_key_requirements(mismatch_keys, "NotIn", labels)
    )
    names = _strings(data.get("namespaces"), fail, f"{path}.namespaces")
    raw_ns_selector = data.get("namespaceSelector")
    ns_selector = parse_label_selector(raw_ns_selector, fail, f"{path}.namespaceSelector")
    if not names and raw_ns_selector is None:
        names = (namespace,)
    topology_key = _str(data.get("topologyKey"), fail, f"{path}.topologyKey")
    if not topology_key:
        raise fail(f"{path}.topologyKey", "can not be empty")
    return AffinityTerm(selector, frozenset(names), ns_selector, topology_key)


def _terms(
    raw: Any, fail: Fail, path: str, namespace: str, labels: Mapping[str, str]
) -> tuple[AffinityTerm, ...]:
    return tuple(
        _affinity_term(t, fail, f"{path}[{i}]", namespace, labels)
        for i, t in enumerate(_list(raw, fail, path))
    )


def _weighted(
    raw: Any, fail: Fail, path: str, namespace: str, labels: Mapping[str, str]
) -> tuple[WeightedTerm, ...]:
    out = []
    for i, item in enumerate(_list(raw, fail, path)):
        p = f"{path}[{i}]"
        data = _mapping(item, fail, p)
        weight = _int(data.get("weight"), fail, f"{p}.weight", 0)
        if not 1 <= weight <= 100:
            raise fail(f"{p}.weight", f"must be in the range 1-100, got {weight}")
        term = _affinity_term(data.get("podAffinityTerm"), fail, f"{p}.podAffinityTerm",
                              namespace, labels)  # fmt: skip
        out.append(WeightedTerm(term, weight))
    return tuple(out)


_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def parse_pod_affinity(
    affinity: Mapping[str, Any], fail: Fail, namespace: str, labels: Mapping[str, str]
) -> PodAffinity:
    """`spec.affinity.podAffinity` and `podAntiAffinity` of a pod in `namespace`."""
    base = "spec.affinity"
    aff = _mapping(affinity.get("podAffinity"), fail, f"{base}.podAffinity")
    anti = _mapping(affinity.get("podAntiAffinity"), fail, f"{base}.podAntiAffinity")
    a, n = f"{base}.podAffinity", f"{base}.podAntiAffinity"
    return PodAffinity(
        required=_terms(aff.get(_REQUIRED), fail, f"{a}.{_REQUIRED}", namespace, labels),
        required_anti=_terms(anti.get(_REQUIRED), fail, f"{n}.{_REQUIRED}", namespace, labels),
        preferred=_weighted(aff.get(_PREFERRED), fail, f"{a}.{_PREFERRED}", namespace, labels),
        preferred_anti=_weighted(
            anti.get(_PREFERRED), fail, f"{n}.{_PREFERRED}", namespace, labels
        ),
    )


_ACTIONS = ("DoNotSchedule", "ScheduleAnyway")
_POLICIES = ("Honor", "Ignore")


def parse_spread_constraint(raw: Any, fail: Fail, path: str) -> SpreadConstraint:
    """One topology spread constraint, validated as the API server validates it."""
    data = _mapping(raw, fail, path)
    max_skew = _int(data.get("maxSkew"), fail, f"{path}.maxSkew", 0)
    if max_skew <= 0:
        raise fail(f"{path}.maxSkew", f"Invalid value: {max_skew}: must be greater than zero")
    key = _str(data.get("topologyKey"), fail, f"{path}.topologyKey")
    if not key:
        raise fail(f"{path}.topologyKey", "Required value: can not be empty")
    action = _str(data.get("whenUnsatisfiable"), fail, f"{path}.whenUnsatisfiable")
    if action not in _ACTIONS:
        raise fail(
            f"{path}.whenUnsatisfiable",
            f'Unsupported value: "{action}": supported values: "DoNotSchedule", "ScheduleAnyway"',
        )
    min_domains = _int(data.get("minDomains"), fail, f"{path}.minDomains", 1)
    if data.get("minDomains") is not None:
        if min_domains <= 0:
            raise fail(f"{path}.minDomains", f"Invalid value: {min_domains}: must be > 0")
        if action != "DoNotSchedule":
            raise fail(
                f"{path}.minDomains",
                f"Invalid value: {min_domains}: can only use minDomains if "
                "whenUnsatisfiable=DoNotSchedule",
            )
    policies = []
    for name, default in (("nodeAffinityPolicy", "Honor"), ("nodeTaintsPolicy", "Ignore")):
        value = _str(data.get(name), fail, f"{path}.{name}") or default
        if value not in _POLICIES:
            raise fail(
                f"{path}.{name}",
                f'Unsupported value: "{value}": supported values: "Honor", "Ignore"',
            )
        policies.append(value)
    raw_selector = data.get("labelSelector")
    return SpreadConstraint(
        max_skew=max_skew,
        topology_key=key,
        when_unsatisfiable=action,
        selector=parse_label_selector(raw_selector, fail, f"{path}.labelSelector"),
        has_selector=raw_selector is not None,
        match_label_keys=_strings(data.get("matchLabelKeys"), fail, f"{path}.matchLabelKeys"),
        min_domains=min_domains,
        node_affinity_policy=policies[0],
        node_taints_policy=policies[1],
    )


def parse_spread_constraints(raw: Any, fail: Fail, path: str) -> tuple[SpreadConstraint, ...]:
    items = _list(raw, fail, path)
    out = tuple(parse_spread_constraint(c, fail, f"{path}[{i}]") for i, c in enumerate(items))
    seen: set[tuple[str, str]] = set()
    for i, c in enumerate(out):
        pair = (c.topology_key, c.when_unsatisfiable)
        if pair in seen:
            raise fail(
                f"{path}[{i}]",
                f'Duplicate value: "{{{c.topology_key}, {c.when_unsatisfiable}}}"',
            )
        seen.add(pair)
    return out


def effective_selector(c: SpreadConstraint, labels: Mapping[str, str]) -> LabelSelector:
    """The constraint's selector with `matchLabelKeys` merged from the pod's labels (kube's
    mergeLabelSetWithSelector: a selector that selects nothing stays so)."""
    return c.selector.merged(_label_key_requirements(c.match_label_keys, "In", labels))
