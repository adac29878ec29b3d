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

from scheduler.core.model import PodInfo, object_identity, parse_label_selector
from scheduler.core.podaffinity import LabelSelector

__all__ = ["DisruptionBudget", "pdb_violations"]


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
            selector=parse_label_selector(spec.get("selector"), where, "spec.selector"),
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
