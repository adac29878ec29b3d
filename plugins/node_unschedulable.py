"""NodeUnschedulable: nodes cordoned with `spec.unschedulable` take no new pods.

A pod that tolerates the `node.kubernetes.io/unschedulable:NoSchedule` taint may go there
anyway, as in kube-scheduler.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.core.config import strict_mapping
from scheduler.core.framework import CycleState, ReasonMasks
from scheduler.core.model import PodInfo, Taint, tolerates
from scheduler.core.snapshot import BoolArray, NodeState, Snapshot

NAME = "NodeUnschedulable"
REASON = "node(s) were unschedulable"
_UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")


class NodeUnschedulable:
    name = NAME

    def filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: BoolArray
    ) -> ReasonMasks:
        if tolerates(pod.tolerations, _UNSCHEDULABLE_TAINT):
            return []
        return [(REASON, snapshot.unschedulable)]

    def filter_node(self, pod: PodInfo, node: NodeState) -> list[str]:
        if node.info.unschedulable and not tolerates(pod.tolerations, _UNSCHEDULABLE_TAINT):
            return [REASON]
        return []


def new(args: Mapping[str, Any] | None, path: str) -> NodeUnschedulable:
    strict_mapping(args, path, set())
    return NodeUnschedulable()
