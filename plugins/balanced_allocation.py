"""NodeResourcesBalancedAllocation: favour nodes whose resource use stays balanced.

Score = (1 - std) x 100, the standard deviation of requested/allocatable fractions over
the configured resources (cpu and memory by default), counting plain requests as kube
1.33 does. Pods that request none of the resources (BestEffort) are not scored.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from plugins._args import ResourceSpec, args_mapping, resource_specs
from plugins._resources import pod_request, reference_inputs, vector_inputs
from scheduler.framework import MAX_NODE_SCORE
from scheduler.model import PodInfo
from scheduler.snapshot import BoolArray, IntArray, NodeState, Snapshot

NAME = "NodeResourcesBalancedAllocation"
DEFAULT_RESOURCES = (ResourceSpec("cpu", 1), ResourceSpec("memory", 1))


def balanced_score(fractions: list[float]) -> int:
    """kube's balancedResourceScorer over already-capped fractions, in resource order."""
    std = 0.0
    if len(fractions) == 2:
        std = abs((fractions[0] - fractions[1]) / 2)
    elif len(fractions) > 2:
        total = 0.0
        for f in fractions:
            total += f
        mean = total / len(fractions)
        squares = 0.0
        for f in fractions:
            squares = squares + (f - mean) * (f - mean)
        std = math.sqrt(squares / len(fractions))
    return int((1 - std) * MAX_NODE_SCORE)


class BalancedAllocation:
    name = NAME

    def __init__(self, resources: tuple[ResourceSpec, ...]) -> None:
        self.resources = resources

    def _skip(self, pod: PodInfo) -> bool:
        return all(pod_request(pod, r.name, use_requested=True) == 0 for r in self.resources)

    def score(self, pod: PodInfo, snapshot: Snapshot, feasible: BoolArray) -> IntArray | None:
        if self._skip(pod):
            return None
        inputs = vector_inputs(pod, snapshot, self.resources, use_requested=True)
        n = snapshot.capacity
        if not inputs:
            return np.full(n, MAX_NODE_SCORE, np.int64)
        fractions = []
        valid = []
        for allocatable, requested, _ in inputs:
            present = allocatable != 0
            fractions.append(np.minimum(requested / np.maximum(allocatable, 1), 1.0))
            valid.append(present)
        if len(inputs) == 2 and not any(np.any(feasible & ~ok) for ok in valid):
            # The common case: cpu and memory present on every feasible node.
            std2 = np.abs((fractions[0] - fractions[1]) / 2)
            return ((1 - std2) * MAX_NODE_SCORE).astype(np.int64)
        frac = np.vstack(fractions)
        ok = np.vstack(valid)
        count = ok.sum(axis=0)
        std = np.zeros(n, np.float64)
        # Exactly two fractions: |f0 - f1| / 2, with f0, f1 the first two present ones.
        first = np.argmax(ok, axis=0)
        last = len(inputs) - 1 - np.argmax(ok[::-1], axis=0)
        cols = np.arange(n)
        two = np.abs((frac[first, cols] - frac[last, cols]) / 2)
        std = np.where(count == 2, two, std)
        if len(inputs) > 2:
            total = np.zeros(n, np.float64)
            for r in range(len(inputs)):
                total = total + np.where(ok[r], frac[r], 0.0)
            safe_count = np.where(count == 0, 1, count)
            mean = total / safe_count
            squares = np.zeros(n, np.float64)
            for r in range(len(inputs)):
                d = frac[r] - mean
                squares = squares + np.where(ok[r], d * d, 0.0)
            many = np.sqrt(squares / safe_count)
            std = np.where(count > 2, many, std)
        return ((1 - std) * MAX_NODE_SCORE).astype(np.int64)

    def normalize(self, scores: IntArray, feasible: BoolArray) -> IntArray:
        return scores

    def score_nodes(
        self, pod: PodInfo, feasible: Sequence[NodeState], all_nodes: Sequence[NodeState]
    ) -> list[int] | None:
        if self._skip(pod):
            return None
        out = []
        for node in feasible:
            fractions = [
                min(requested / allocatable, 1.0)
                for allocatable, requested, _ in reference_inputs(
                    pod, node, self.resources, use_requested=True
                )
                if allocatable != 0
            ]
            out.append(balanced_score(fractions))
        return out

    def normalize_reference(self, scores: list[int]) -> list[int]:
        return scores


def new(args: Mapping[str, Any] | None, path: str) -> BalancedAllocation:
    data = args_mapping(args, path, {"resources"})
    return BalancedAllocation(
        resource_specs(data.get("resources"), f"{path}.resources", DEFAULT_RESOURCES)
    )
