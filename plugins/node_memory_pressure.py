"""NodeMemoryPressure: no BestEffort pod on a node reporting memory pressure.

The kubelet refuses BestEffort pods under memory pressure (and kube's old
CheckNodeMemoryPressure predicate did the same); every other pod is governed by the
`node.kubernetes.io/memory-pressure` taint through TaintToleration.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.core.config import strict_mapping
from scheduler.core.framework import CycleState, ReasonMasks
from scheduler.core.model import PodInfo
from scheduler.core.snapshot import BoolArray, NodeState, Snapshot

NAME = "NodeMemoryPressure"
REASON = "node(s) had memory pressure"


class NodeMemoryPressure:
    name = NAME

    def filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: BoolArray
    ) -> ReasonMasks:
        return [(REASON, snapshot.memory_pressure)] if pod.best_effort else []

    def filter_node(self, pod: PodInfo, node: NodeState) -> list[str]:
        return [REASON] if pod.best_effort and node.info.memory_pressure else []


def new(args: Mapping[str, Any] | None, path: str) -> NodeMemoryPressure:
    strict_mapping(args, path, set())
    return NodeMemoryPressure()
