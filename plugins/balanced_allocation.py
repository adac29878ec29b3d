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

from plugins._args import ResourceSpec, resource_specs
from plugins._resources import pod_request, reference_inputs, vector_rows
from scheduler.core.config import ConfigError, strict_mapping
from scheduler.core.framework import MAX_NODE_SCORE, CycleState
from scheduler.core.model import PodInfo
from scheduler.core.snapshot import BoolArray, IntArray, NodeState, Snapshot

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

    def score(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, feasible: BoolArray
    ) -> IntArray | None:
        if self._skip(pod):
            return None
        rows = vector_rows(pod, snapshot, self.resources, use_requested=True)
        n = snapshot.capacity
        if not rows:
            return np.full(n, MAX_NODE_SCORE, np.int64)
        if len(rows) == 2 and not any(snapshot.missing_anywhere(r) for r, _, _ in rows):
            # The common case: cpu and memory on every node, std = |f0 - f1| / 2.
            (r0, used0, _), (r1, used1, _) = rows
            f0 = np.minimum(used0 / np.maximum(snapshot.allocatable[r0], 1), 1.0)
            f1 = np.minimum(used1 / np.maximum(snapshot.allocatable[r1], 1), 1.0)
            scores: IntArray = ((1 - np.abs((f0 - f1) / 2)) * MAX_NODE_SCORE).astype(np.int64)
            return scores
        inputs = [(snapshot.allocatable[r], used, w) for r, used, w in rows]
        fractions = []
        valid = []
        for allocatable, requested, _ in inputs:
            present = allocatable != 0
            fractions.append(np.minimum(requested / np.maximum(allocatable, 1), 1.0))
            valid.append(present)
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

    def normalize(self, state: CycleState, scores: IntArray, feasible: BoolArray) -> IntArray:
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
    data = strict_mapping(args, path, {"resources"})
    resources = resource_specs(data.get("resources"), f"{path}.resources", DEFAULT_RESOURCES)
    for i, spec in enumerate(resources):
        # kube's ValidateNodeResourcesBalancedAllocationArgs: the weight is unused and must be 1.
        if spec.weight != 1:
            raise ConfigError(f"{path}.resources[{i}].weight: must be 1, got {spec.weight}")
    return BalancedAllocation(resources)
