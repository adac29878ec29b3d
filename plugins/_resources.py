"""What a node has and what the pod would make it use, per scored resource.

Shared by NodeResourcesFit and NodeResourcesBalancedAllocation, in their vectorised form
(numpy rows over every slot) and in the reference form (one node, summed from its pods).
It follows kube's resourceAllocationScorer: CPU and memory count the non-zero requests
(100m / 200Mi for containers that omit them) unless a plugin asks for plain requests; an
extended resource the pod does not request is left out of the score.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from plugins._args import ResourceSpec
from scheduler.core.model import PodInfo
from scheduler.core.quantity import is_extended_resource
from scheduler.core.snapshot import IntArray, NodeState, Snapshot

__all__ = [
    "is_extended",
    "is_scalar",
    "node_totals",
    "pod_request",
    "reference_inputs",
    "vector_rows",
]


def is_native(name: str) -> bool:
    return "/" not in name or "kubernetes.io/" in name


def is_extended(name: str) -> bool:
    """Extended resources such as `nvidia.com/gpu` (outside the kubernetes.io domain)."""
    return is_extended_resource(name)


def is_scalar(name: str) -> bool:
    """kube's scalar resources: extended, hugepages, prefixed native, attachable volumes."""
    return (
        is_extended(name)
        or name.startswith("hugepages-")
        or ("/" in name and "kubernetes.io/" in name)
        or name.startswith("attachable-volumes-")
    )


def pod_request(pod: PodInfo, name: str, use_requested: bool) -> int:
    if not use_requested and name == "cpu":
        return pod.non_zero_cpu
    if not use_requested and name == "memory":
        return pod.non_zero_memory
    return pod.requests.get(name, 0)


def vector_rows(
    pod: PodInfo, snapshot: Snapshot, resources: Sequence[ResourceSpec], use_requested: bool
) -> list[tuple[int, IntArray, int]]:
    """(resource row, requested-after-pod, weight) for the resources that take part."""
    rows = []
    for spec in resources:
        name = spec.name
        request = pod_request(pod, name, use_requested)
        if request == 0 and is_scalar(name):
            continue
        row = snapshot.row.get(name)
        if name == "cpu" and not use_requested:
            used = snapshot.non_zero_cpu
        elif name == "memory" and not use_requested:
            used = snapshot.non_zero_memory
        elif name in ("cpu", "memory", "ephemeral-storage") or (
            is_scalar(name) and row is not None
        ):
            assert row is not None
            used = snapshot.requested[row]
        else:
            continue
        assert row is not None
        rows.append((row, used + request, spec.weight))
    return rows


def node_totals(node: NodeState) -> tuple[dict[str, int], int, int]:
    """Requested amounts, non-zero CPU and non-zero memory, summed from the node's pods."""
    requested: dict[str, int] = {}
    cpu = memory = 0
    for pod in node.pods:
        for name, amount in pod.requests.items():
            requested[name] = requested.get(name, 0) + amount
        cpu += pod.non_zero_cpu
        memory += pod.non_zero_memory
    return requested, cpu, memory


def reference_inputs(
    pod: PodInfo, node: NodeState, resources: Sequence[ResourceSpec], use_requested: bool
) -> list[tuple[int, int, int]]:
    """The per-node form of `vector_rows`: (allocatable, requested-after-pod, weight)."""
    requested, non_zero_cpu, non_zero_memory = node_totals(node)
    allocatable = node.info.allocatable
    out = []
    for spec in resources:
        name = spec.name
        request = pod_request(pod, name, use_requested)
        if request == 0 and is_scalar(name):
            continue
        if name == "cpu":
            used = requested.get(name, 0) if use_requested else non_zero_cpu
        elif name == "memory":
            used = requested.get(name, 0) if use_requested else non_zero_memory
        elif name == "ephemeral-storage" or (is_scalar(name) and name in allocatable):
            used = requested.get(name, 0)
        else:
            continue
        out.append((allocatable.get(name, 0), used + request, spec.weight))
    return out


def floor_div(a: IntArray, b: IntArray) -> IntArray:
    """Exact ``a // b`` for 0 <= a, 0 < b < 2**53, several times faster than numpy's
    integer division: the float quotient can only overshoot by one, which is corrected."""
    q = (a / b).astype(np.int64)
    return q - (q * b > a)


def trunc_div(a: IntArray, b: IntArray | int) -> IntArray:
    """Integer division rounding toward zero, as Go does (numpy floors)."""
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (np.asarray(b) < 0), -q, q)


def go_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return -q if (a < 0) != (b < 0) else q
