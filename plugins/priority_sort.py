"""PrioritySort (QueueSort): higher `spec.priority` first, then the earlier pod, as
kube-scheduler's queue orders pods."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.core.config import strict_mapping

NAME = "PrioritySort"


class PrioritySort:
    name = NAME

    def sort_key(self, priority: int, created: float) -> tuple[float, ...]:
        return (-priority, created)


def new(args: Mapping[str, Any] | None, path: str) -> PrioritySort:
    strict_mapping(args, path, set())
    return PrioritySort()
