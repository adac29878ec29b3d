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

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "ALL_NAMESPACES",
    "NOTHING",
    "AffinityTerm",
    "LabelRequirement",
    "LabelSelector",
    "PodAffinity",
    "SpreadConstraint",
    "WeightedTerm",
    "effective_selector",
    "label_key_requirements",
    "namespace_in",
]


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


def label_key_requirements(
    keys: tuple[str, ...], operator: str, labels: Mapping[str, str]
) -> tuple[LabelRequirement, ...]:
    return tuple(
        LabelRequirement(k, operator, frozenset((labels[k],))) for k in keys if k in labels
    )


def effective_selector(c: SpreadConstraint, labels: Mapping[str, str]) -> LabelSelector:
    """The constraint's selector with `matchLabelKeys` merged from the pod's labels (kube's
    mergeLabelSetWithSelector: a selector that selects nothing stays so)."""
    return c.selector.merged(label_key_requirements(c.match_label_keys, "In", labels))
