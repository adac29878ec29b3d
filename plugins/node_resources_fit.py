"""NodeResourcesFit: the pod's requests must fit in what is left of the node's allocatable;
nodes are scored by a scoring strategy over weighted resources.

Filter reasons are kube's (`Too many pods`, `Insufficient cpu`, `Insufficient nvidia.com/gpu`)
and every failing resource is reported. Strategies: `LeastAllocated` (default: spread),
`MostAllocated` (pack), `RequestedToCapacityRatio` (a utilization -> score shape).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from plugins._args import ResourceSpec, resource_specs, string_list
from plugins._resources import (
    floor_div,
    go_div,
    is_extended,
    is_scalar,
    node_totals,
    reference_inputs,
    trunc_div,
    vector_rows,
)
from scheduler.core.config import ConfigError, strict_mapping
from scheduler.core.framework import MAX_NODE_SCORE, CycleState, ReasonMasks
from scheduler.core.model import PodInfo
from scheduler.core.snapshot import BoolArray, IntArray, NodeState, Snapshot

NAME = "NodeResourcesFit"
LEAST_ALLOCATED = "LeastAllocated"
MOST_ALLOCATED = "MostAllocated"
REQUESTED_TO_CAPACITY_RATIO = "RequestedToCapacityRatio"
DEFAULT_RESOURCES = (ResourceSpec("cpu", 1), ResourceSpec("memory", 1))
_MAX_UTILIZATION = 100
_MAX_CUSTOM_SCORE = 10


@dataclass(frozen=True, slots=True)
class ShapePoint:
    utilization: int
    score: int


@dataclass(frozen=True, slots=True)
class FitArgs:
    ignored_resources: frozenset[str] = frozenset()
    ignored_resource_groups: frozenset[str] = frozenset()
    strategy: str = LEAST_ALLOCATED
    resources: tuple[ResourceSpec, ...] = DEFAULT_RESOURCES
    shape: tuple[ShapePoint, ...] = ()


def parse_args(raw: Mapping[str, Any] | None, path: str) -> FitArgs:
    """NodeResourcesFitArgs, validated as kube validates them."""
    data = strict_mapping(
        raw, path, {"ignoredResources", "ignoredResourceGroups", "scoringStrategy"}
    )
    ignored = string_list(data.get("ignoredResources"), f"{path}.ignoredResources")
    groups = string_list(data.get("ignoredResourceGroups"), f"{path}.ignoredResourceGroups")
    for i, group in enumerate(groups):
        if "/" in group:
            raise ConfigError(
                f"{path}.ignoredResourceGroups[{i}]: resource group name can't contain '/'"
            )
    spath = f"{path}.scoringStrategy"
    strategy = strict_mapping(data.get("scoringStrategy"), spath,
                            {"type", "resources", "requestedToCapacityRatio"})  # fmt: skip
    kind = strategy.get("type", LEAST_ALLOCATED)
    if kind not in (LEAST_ALLOCATED, MOST_ALLOCATED, REQUESTED_TO_CAPACITY_RATIO):
        raise ConfigError(
            f'{spath}.type: Unsupported value: "{kind}": supported values: '
            f'"{LEAST_ALLOCATED}", "{MOST_ALLOCATED}", "{REQUESTED_TO_CAPACITY_RATIO}"'
        )
    resources = resource_specs(strategy.get("resources"), f"{spath}.resources", DEFAULT_RESOURCES)
    shape: list[ShapePoint] = []
    if kind == REQUESTED_TO_CAPACITY_RATIO:
        rpath = f"{spath}.requestedToCapacityRatio"
        ratio = strict_mapping(strategy.get("requestedToCapacityRatio"), rpath, {"shape"})
        raw_shape = ratio.get("shape")
        if not isinstance(raw_shape, list) or not raw_shape:
            raise ConfigError(
                f"{rpath}.shape: Required value: at least one point must be specified"
            )
        for i, item in enumerate(raw_shape):
            ipath = f"{rpath}.shape[{i}]"
            point = strict_mapping(item, ipath, {"utilization", "score"})
            utilization, score = point.get("utilization", 0), point.get("score", 0)
            for field, value, top in (("utilization", utilization, _MAX_UTILIZATION),
                                      ("score", score, _MAX_CUSTOM_SCORE)):  # fmt: skip
                if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
                    raise ConfigError(
                        f"{ipath}.{field}: must be between 0 and {top}, got {value!r}"
                    )
            if shape and utilization <= shape[-1].utilization:
                raise ConfigError(
                    f"{ipath}.utilization: utilization values must be sorted in increasing order"
                )
            shape.append(ShapePoint(utilization, score * (MAX_NODE_SCORE // _MAX_CUSTOM_SCORE)))
    return FitArgs(frozenset(ignored), frozenset(groups), kind, resources, tuple(shape))


def checked_requests(pod: PodInfo, args: FitArgs) -> list[tuple[str, int]]:
    """The pod's requests the filter checks, in kube's order (cpu, memory, storage, scalars)."""
    checks = [(n, pod.requests.get(n, 0)) for n in ("cpu", "memory", "ephemeral-storage")]
    for name in sorted(pod.requests):
        if not is_scalar(name) or pod.requests[name] == 0:
            continue
        if is_extended(name) and (
            name in args.ignored_resources or name.split("/", 1)[0] in args.ignored_resource_groups
        ):
            continue
        checks.append((name, pod.requests[name]))
    return [(n, amount) for n, amount in checks if amount > 0]


# ---------------------------------------------------------------------------- scorers


def _least(requested: IntArray, allocatable: IntArray) -> IntArray:
    """((allocatable - requested) x 100) / allocatable, 0 when over; allocatable > 0."""
    return floor_div(np.maximum(allocatable - requested, 0) * MAX_NODE_SCORE, allocatable)


def _most(requested: IntArray, allocatable: IntArray) -> IntArray:
    """(requested x 100) / allocatable, requested capped at allocatable; allocatable > 0."""
    return floor_div(np.minimum(requested, allocatable) * MAX_NODE_SCORE, allocatable)


def _broken_linear(shape: Sequence[ShapePoint], p: IntArray) -> IntArray:
    out = np.full_like(p, shape[-1].score)
    for i in range(len(shape) - 1, -1, -1):
        if i == 0:
            value = np.full_like(p, shape[0].score)
        else:
            lo, hi = shape[i - 1], shape[i]
            value = lo.score + trunc_div(
                (hi.score - lo.score) * (p - lo.utilization), hi.utilization - lo.utilization
            )
        out = np.where(p <= shape[i].utilization, value, out)
    return out


def _broken_linear_one(shape: Sequence[ShapePoint], p: int) -> int:
    for i, point in enumerate(shape):
        if p <= point.utilization:
            if i == 0:
                return shape[0].score
            lo = shape[i - 1]
            return lo.score + go_div(
                (point.score - lo.score) * (p - lo.utilization), point.utilization - lo.utilization
            )
    return shape[-1].score


class NodeResourcesFit:
    name = NAME

    def __init__(self, args: FitArgs) -> None:
        self.args = args

    # ------------------------------------------------------------------ filter

    def filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: BoolArray
    ) -> ReasonMasks:
        pods_row = snapshot.row["pods"]
        masks: ReasonMasks = [
            ("Too many pods", snapshot.pod_count + 1 > snapshot.allocatable[pods_row])
        ]
        for name, amount in checked_requests(pod, self.args):
            row = snapshot.row.get(name)
            if row is None:
                masks.append((f"Insufficient {name}", np.ones(snapshot.capacity, np.bool_)))
                continue
            free = snapshot.allocatable[row] - snapshot.requested[row]
            masks.append((f"Insufficient {name}", amount > free))
        return masks

    def filter_node(self, pod: PodInfo, node: NodeState) -> list[str]:
        requested, _, _ = node_totals(node)
        allocatable = node.info.allocatable
        reasons = []
        if len(node.pods) + 1 > allocatable.get("pods", 0):
            reasons.append("Too many pods")
        for name, amount in checked_requests(pod, self.args):
            if amount > allocatable.get(name, 0) - requested.get(name, 0):
                reasons.append(f"Insufficient {name}")
        return reasons

    # ------------------------------------------------------------------ score

    def score(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, feasible: BoolArray
    ) -> IntArray:
        rows = vector_rows(pod, snapshot, self.args.resources, use_requested=False)
        node_score = np.zeros(snapshot.capacity, np.int64)
        if not rows:
            return node_score
        # Nodes without a resource skip it (and its weight); when every node has every
        # resource, the weight sum is one number and the arithmetic stays simple.
        uniform = not any(snapshot.missing_anywhere(row) for row, _, _ in rows)
        weight_sum: IntArray | int = 0
        strategy = self.args.strategy
        for row, requested, weight in rows:
            allocatable = snapshot.allocatable[row]
            present = allocatable != 0
            safe = np.maximum(allocatable, 1)
            if strategy == REQUESTED_TO_CAPACITY_RATIO:
                utilization = np.where(
                    requested > allocatable,
                    _MAX_UTILIZATION,
                    floor_div(requested * _MAX_UTILIZATION, safe),
                )
                value = _broken_linear(self.args.shape, utilization)
                counted = present & (value > 0)
                node_score += np.where(counted, value * weight, 0)
                weight_sum = weight_sum + np.where(counted, weight, 0)
                continue
            value = (
                _most(requested, safe) if strategy == MOST_ALLOCATED else _least(requested, safe)
            )
            if uniform:
                node_score += value * weight
                weight_sum = weight_sum + weight
            else:
                node_score += np.where(present, value * weight, 0)
                weight_sum = weight_sum + np.where(present, weight, 0)
        if strategy == REQUESTED_TO_CAPACITY_RATIO:
            total = np.asarray(weight_sum)
            ratio = node_score / np.maximum(total, 1)
            whole = np.floor(ratio)
            rounded = (whole + (ratio - whole >= 0.5)).astype(np.int64)
            return np.where(total == 0, 0, rounded)
        if isinstance(weight_sum, int):
            return node_score // weight_sum
        return np.where(weight_sum == 0, 0, node_score // np.maximum(weight_sum, 1))

    def normalize(self, state: CycleState, scores: IntArray, feasible: BoolArray) -> IntArray:
        return scores

    def _score_one(self, pod: PodInfo, node: NodeState) -> int:
        node_score = weight_sum = 0
        strategy = self.args.strategy
        for allocatable, requested, weight in reference_inputs(
            pod, node, self.args.resources, use_requested=False
        ):
            if allocatable == 0:
                continue
            if strategy == REQUESTED_TO_CAPACITY_RATIO:
                if requested > allocatable:
                    utilization = _MAX_UTILIZATION
                else:
                    utilization = requested * _MAX_UTILIZATION // allocatable
                value = _broken_linear_one(self.args.shape, utilization)
                if value <= 0:
                    continue
            elif strategy == MOST_ALLOCATED:
                value = min(requested, allocatable) * MAX_NODE_SCORE // allocatable
            else:
                value = (
                    0
                    if requested > allocatable
                    else (allocatable - requested) * MAX_NODE_SCORE // allocatable
                )
            node_score += value * weight
            weight_sum += weight
        if weight_sum == 0:
            return 0
        if strategy == REQUESTED_TO_CAPACITY_RATIO:
            ratio = node_score / weight_sum
            return int(ratio) + (1 if ratio - int(ratio) >= 0.5 else 0)
        return node_score // weight_sum

    def score_nodes(
        self, pod: PodInfo, feasible: Sequence[NodeState], all_nodes: Sequence[NodeState]
    ) -> list[int]:
        return [self._score_one(pod, node) for node in feasible]

    def normalize_reference(self, scores: list[int]) -> list[int]:
        return scores


def new(args: Mapping[str, Any] | None, path: str) -> NodeResourcesFit:
    return NodeResourcesFit(parse_args(args, path))


__all__: list[str] = ["NAME", "FitArgs", "NodeResourcesFit", "new", "parse_args"]
