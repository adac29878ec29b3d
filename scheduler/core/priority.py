"""PriorityClass objects and how a pod's priority is resolved from them.

The API server's Priority admission plugin sets `spec.priority` (and `spec.preemptionPolicy`
when the pod leaves it out) from the pod's `priorityClassName`, or from the class marked
`globalDefault` (the lowest-valued one when several are), or 0. Pods read from the API already
carry the result; pods read from files (`explain`) may not, so `resolve_priority` does what
admission would, with the classes found in the snapshot and kube's two built-in classes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.core.model import PREEMPTION_POLICIES, ModelError, PodInfo, object_identity

__all__ = ["BUILTIN_CLASSES", "PriorityClass", "resolve_priority"]

# int32: kube's priority range; user classes may go up to one billion.
HIGHEST_USER_PRIORITY = 1_000_000_000


@dataclass(frozen=True, slots=True)
class PriorityClass:
    name: str
    value: int
    global_default: bool = False
    preemption_policy: str = "PreemptLowerPriority"

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> PriorityClass:
        """Parse a `scheduling.k8s.io/v1` PriorityClass; errors name the object and field."""
        where, _, name, _ = object_identity(obj, "PriorityClass", namespaced=False)
        if obj.get("value") is None:
            raise where.fail("value", "is required")
        value = where.integer(obj.get("value"), "value")
        if not -(2**31) <= value <= HIGHEST_USER_PRIORITY and name not in BUILTIN_CLASSES:
            raise where.fail("value", f"must be no greater than {HIGHEST_USER_PRIORITY}")
        default = obj.get("globalDefault", False)
        if not isinstance(default, bool):
            raise where.fail("globalDefault", f"must be a boolean, got {default!r}")
        policy = where.string(obj.get("preemptionPolicy"), "preemptionPolicy", "")
        if policy and policy not in PREEMPTION_POLICIES:
            raise where.fail(
                "preemptionPolicy",
                f'Unsupported value: "{policy}": supported values: "Never", "PreemptLowerPriority"',
            )
        return cls(name, value, default, policy or "PreemptLowerPriority")


BUILTIN_CLASSES: dict[str, PriorityClass] = {
    "system-cluster-critical": PriorityClass("system-cluster-critical", 2_000_000_000),
    "system-node-critical": PriorityClass("system-node-critical", 2_000_001_000),
}


def resolve_priority(pod: PodInfo, classes: Iterable[PriorityClass]) -> PodInfo:
    """The pod as admission would have left it: `spec.priority` kept when set, else the
    value of its PriorityClass (an unknown class is an error, as admission rejects the pod),
    else the global default class's, else 0; the class's preemption policy when the pod's
    own is the default."""
    if pod.priority_set:
        return pod
    known = {**BUILTIN_CLASSES, **{c.name: c for c in classes}}
    chosen: PriorityClass | None
    if pod.priority_class_name:
        chosen = known.get(pod.priority_class_name)
        if chosen is None:
            raise ModelError(
                f"Pod {pod.key}: spec.priorityClassName: no PriorityClass with name "
                f"{pod.priority_class_name} was found"
            )
    else:
        defaults = [c for c in known.values() if c.global_default]
        chosen = min(defaults, key=lambda c: (c.value, c.name)) if defaults else None
    if chosen is None:
        return dataclasses.replace(pod, priority_set=True)
    return dataclasses.replace(
        pod,
        priority=chosen.value,
        priority_set=True,
        priority_class_name=chosen.name,
        preemption_policy=(
            chosen.preemption_policy
            if pod.preemption_policy == "PreemptLowerPriority"
            else pod.preemption_policy
        ),
    )
