"""PrioritySort (QueueSort): higher `spec.priority` first, then the pod added to the queue
earlier (kube's QueuedPodInfo.Timestamp: set when the pod enters the queue and refreshed when
it is put back after a failed attempt), as kube-scheduler's queue orders pods.

Args: `fairShare` (default false). When true, among the pending pods of the highest priority
the one whose namespace has the lowest dominant share of its ElasticQuota goes first (the
largest used / min over the resources its quota names, read when the next pod is taken; a
namespace without a quota has share 0, one using a resource with no guarantee an infinite
share); equal shares keep the order above. Without ElasticQuotas the order is unchanged
(`docs/quotas.md`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.core.config import ConfigError, strict_mapping

NAME = "PrioritySort"


class PrioritySort:
    name = NAME

    def __init__(self, fair_share: bool = False) -> None:
        self.fair_share = fair_share

    def sort_key(self, priority: int, enqueued: float) -> tuple[float, ...]:
        return (-priority, enqueued)


def new(args: Mapping[str, Any] | None, path: str) -> PrioritySort:
    data = strict_mapping(args, path, {"fairShare"})
    fair = data.get("fairShare", False)
    if not isinstance(fair, bool):
        raise ConfigError(f"{path}.fairShare: must be a boolean, got {fair!r}")
    return PrioritySort(fair)
