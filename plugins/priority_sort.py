"""PrioritySort (QueueSort): higher `spec.priority` first, then the pod added to the queue
earlier (kube's QueuedPodInfo.Timestamp: set when the pod enters the queue and refreshed when
it is put back after a failed attempt), as kube-scheduler's queue orders pods."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.core.config import strict_mapping

NAME = "PrioritySort"


class PrioritySort:
    name = NAME

    def sort_key(self, priority: int, enqueued: float) -> tuple[float, ...]:
        return (-priority, enqueued)


def new(args: Mapping[str, Any] | None, path: str) -> PrioritySort:
    strict_mapping(args, path, set())
    return PrioritySort()
