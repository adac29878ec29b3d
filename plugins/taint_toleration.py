"""TaintToleration: NoSchedule/NoExecute taints reject pods that do not tolerate them;
PreferNoSchedule taints lower a node's score.

Only tainted nodes are visited, and the verdicts are cached per set of tolerations until a
node's taints change (the snapshot's node generation).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from scheduler.core.config import strict_mapping
from scheduler.core.framework import (
    CycleState,
    ReasonMasks,
    default_normalize,
    default_normalize_reference,
)
from scheduler.core.model import PodInfo, Taint, Toleration, tolerates
from scheduler.core.snapshot import BoolArray, IntArray, NodeState, Snapshot

NAME = "TaintToleration"


def untolerated_reason(taints: Sequence[Taint], tolerations: Sequence[Toleration]) -> str | None:
    """kube's FindMatchingUntoleratedTaint over NoSchedule and NoExecute taints."""
    for taint in taints:
        if taint.effect in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"
    return None


def intolerable_prefer_no_schedule(
    taints: Sequence[Taint], tolerations: Sequence[Toleration]
) -> int:
    """PreferNoSchedule taints not tolerated by the pod's empty-effect or PreferNoSchedule
    tolerations."""
    relevant = [t for t in tolerations if t.effect in ("", "PreferNoSchedule")]
    return sum(1 for t in taints if t.effect == "PreferNoSchedule" and not tolerates(relevant, t))


class TaintToleration:
    name = NAME

    def filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: BoolArray
    ) -> ReasonMasks:
        if not snapshot.tainted:
            return []

        def compute() -> ReasonMasks:
            by_reason: dict[str, BoolArray] = {}
            for slot in snapshot.tainted:
                info = snapshot.nodes[slot]
                reason = untolerated_reason(info.taints, pod.tolerations) if info else None
                if reason is not None:
                    if reason not in by_reason:
                        by_reason[reason] = np.zeros(snapshot.capacity, np.bool_)
                    by_reason[reason][slot] = True
            return list(by_reason.items())

        return snapshot.derived((NAME, pod.tolerations), compute)

    def filter_node(self, pod: PodInfo, node: NodeState) -> list[str]:
        reason = untolerated_reason(node.info.taints, pod.tolerations)
        return [reason] if reason else []

    def score(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, feasible: BoolArray
    ) -> IntArray:
        def compute() -> IntArray:
            counts = np.zeros(snapshot.capacity, np.int64)
            for slot in snapshot.tainted:
                info = snapshot.nodes[slot]
                if info is not None:
                    counts[slot] = intolerable_prefer_no_schedule(info.taints, pod.tolerations)
            return counts

        return snapshot.derived((NAME, "prefer", pod.tolerations), compute)

    def normalize(self, state: CycleState, scores: IntArray, feasible: BoolArray) -> IntArray:
        return default_normalize(scores, feasible, reverse=True)

    def score_nodes(
        self, pod: PodInfo, feasible: Sequence[NodeState], all_nodes: Sequence[NodeState]
    ) -> list[int]:
        return [intolerable_prefer_no_schedule(n.info.taints, pod.tolerations) for n in feasible]

    def normalize_reference(self, scores: list[int]) -> list[int]:
        return default_normalize_reference(scores, reverse=True)


def new(args: Mapping[str, Any] | None, path: str) -> TaintToleration:
    strict_mapping(args, path, set())
    return TaintToleration()
