"""PodDisruptionBudgets as preemption reads them (`policy/v1`).

kube-scheduler's DefaultPreemption does not refuse to violate a budget: it prefers victims and
nodes that violate fewer. A pod violates a budget of its namespace whose selector matches it
when, counting the victims in order, the budget's `status.disruptionsAllowed` goes below zero;
pods already listed in `status.disruptedPods` are not counted again. A budget with an empty or
missing selector matches nothing (kube's rule for policy/v1).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.core.decode import Fields
from scheduler.core.model import PodInfo, object_identity

__all__ = ["DisruptionBudget", "LabelSelector", "pdb_violations"]

_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """metav1.LabelSelector: matchLabels and matchExpressions, all ANDed."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[tuple[str, str, tuple[str, ...]], ...] = ()

    @property
    def empty(self) -> bool:
        return not self.match_labels and not self.match_expressions

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, value in self.match_labels:
            if labels.get(key) != value:
                return False
        for key, operator, values in self.match_expressions:
            present = key in labels
            if operator == "In" and not (present and labels[key] in values):
                return False
            if operator == "NotIn" and present and labels[key] in values:
                return False
            if operator == "Exists" and not present:
                return False
            if operator == "DoesNotExist" and present:
                return False
        return True

    @classmethod
    def parse(cls, value: Any, where: Fields, path: str) -> LabelSelector:
        raw = where.mapping(value, path)
        labels = where.string_map(raw.get("matchLabels"), f"{path}.matchLabels")
        expressions = []
        raw_expressions = where.list(raw.get("matchExpressions"), f"{path}.matchExpressions")
        for i, item in enumerate(raw_expressions):
            at = f"{path}.matchExpressions[{i}]"
            expr = where.mapping(item, at)
            operator = where.string(expr.get("operator"), f"{at}.operator")
            if operator not in _OPERATORS:
                raise where.fail(f"{at}.operator", f"{operator!r} is not a valid selector operator")
            values = where.string_list(expr.get("values"), f"{at}.values")
            expressions.append((where.string(expr.get("key"), f"{at}.key"), operator, values))
        return cls(tuple(sorted(labels.items())), tuple(expressions))


@dataclass(frozen=True, slots=True)
class DisruptionBudget:
    namespace: str
    name: str
    selector: LabelSelector
    disruptions_allowed: int
    disrupted_pods: frozenset[str]  # pod names in status.disruptedPods

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def covers(self, pod: PodInfo) -> bool:
        return (
            pod.namespace == self.namespace
            and not self.selector.empty
            and self.selector.matches(pod.labels)
        )

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> DisruptionBudget:
        where, _, name, namespace = object_identity(obj, "PodDisruptionBudget", namespaced=True)
        spec = where.mapping(obj.get("spec"), "spec")
        status = where.mapping(obj.get("status"), "status")
        disrupted = where.mapping(status.get("disruptedPods"), "status.disruptedPods")
        return cls(
            namespace=namespace,
            name=name,
            selector=LabelSelector.parse(spec.get("selector"), where, "spec.selector"),
            disruptions_allowed=where.integer(
                status.get("disruptionsAllowed"), "status.disruptionsAllowed", 0
            ),
            disrupted_pods=frozenset(str(k) for k in disrupted),
        )


def pdb_violations(pods: Sequence[PodInfo], budgets: Sequence[DisruptionBudget]) -> list[bool]:
    """kube's filterPodsWithPDBViolation: for each pod, in the given order, whether evicting
    it (after the ones before it) takes some budget below zero."""
    allowed = {b.key: b.disruptions_allowed for b in budgets}
    out = []
    for pod in pods:
        violating = False
        for budget in budgets:
            if not budget.covers(pod) or pod.name in budget.disrupted_pods:
                continue
            allowed[budget.key] -= 1
            if allowed[budget.key] < 0:
                violating = True
        out.append(violating)
    return out
