"""SchedulingGates (PreEnqueue): a pod with `spec.schedulingGates` stays out of the active
queue until every gate is removed, as in kube-scheduler."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.core.config import strict_mapping
from scheduler.core.model import PodInfo

NAME = "SchedulingGates"


class SchedulingGates:
    name = NAME

    def pre_enqueue(self, pod: PodInfo) -> str | None:
        if not pod.scheduling_gates:
            return None
        return f"waiting for scheduling gates: [{' '.join(pod.scheduling_gates)}]"


def new(args: Mapping[str, Any] | None, path: str) -> SchedulingGates:
    strict_mapping(args, path, set())
    return SchedulingGates()
