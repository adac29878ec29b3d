"""DefaultPreemption (PostFilter): when no node fits, evict lower-priority pods to make room,
as kube-scheduler 1.33 decides it (`scheduler.core.preemption`), with GPU-aware victims and
whole pod groups.

The plugin says which of the shipped filters' rejections are UnschedulableAndUnresolvable (no
eviction cures them), as kube's plugins do:

- NodeUnschedulable, TaintToleration, NodeAffinity, NodeMemoryPressure: always (evicting pods
  changes neither the node's labels, taints, cordon nor conditions);
- NodeResourcesFit: a request larger than the node's allocatable (kube's `Unresolvable`);
  `Too many pods` and a shortfall the node's capacity covers are resolvable;
- GPUTopology: a node without a valid topology, and a node whose GPUs, all free, hold no set
  meeting the pod's count and placement policy (e.g. 8 NVLink-connected GPUs on a node of
  NVLink quads).

Another filter plugin may say it itself with an `unresolvable(pod, snapshot, reason,
rejected)` method; reasons of plugins that say nothing are taken as resolvable (NodePorts).

Args (kube's DefaultPreemptionArgs): `minCandidateNodesPercentage` (0..100) and
`minCandidateNodesAbsolute` (>= 0) are checked and have no effect: every node is tried.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from plugins.gpu_topology import REASON_NO_TOPOLOGY
from scheduler.core.config import ConfigError, strict_mapping
from scheduler.core.framework import CycleState, PostFilterResult, ScheduleResult
from scheduler.core.model import PodInfo
from scheduler.core.preemption import (
    CONTEXT_KEY,
    PLUGIN_NAME,
    PreemptionContext,
    UnresolvableCheck,
    preempt,
)
from scheduler.core.snapshot import BoolArray, Snapshot
from scheduler.core.topology.schema import (
    ANNOTATION_PLACEMENT,
    TopologyError,
    parse_placement,
)

NAME = PLUGIN_NAME


def _always(pod: PodInfo, snapshot: Snapshot, reason: str, rejected: BoolArray) -> BoolArray:
    return rejected


def _larger_than_node(
    pod: PodInfo, snapshot: Snapshot, reason: str, rejected: BoolArray
) -> BoolArray:
    """`Insufficient X` where the pod asks more X than the node has at all."""
    prefix = "Insufficient "
    if not reason.startswith(prefix):
        return np.zeros_like(rejected)
    resource = reason[len(prefix) :]
    amount = pod.requests.get(resource, 0)
    row = snapshot.row.get(resource)
    if row is None:
        return rejected.copy()
    larger: BoolArray = rejected & (snapshot.allocatable[row] < amount)
    return larger


def _gpus_never_enough(
    pod: PodInfo, snapshot: Snapshot, reason: str, rejected: BoolArray
) -> BoolArray:
    """Nodes where the pod's GPU set cannot exist even with every GPU free."""
    if reason == REASON_NO_TOPOLOGY:
        return rejected.copy()
    gpus = snapshot.gpus
    count = gpus.count(pod)
    try:
        placement = parse_placement(pod.annotations.get(ANNOTATION_PLACEMENT), pod=pod.key)
    except TopologyError:
        return rejected.copy()
    out = np.zeros_like(rejected)
    for slot in np.flatnonzero(rejected):
        topology = gpus.topology[slot]
        if topology is None:
            out[slot] = True
            continue
        found = gpus.selector.best_set(topology, topology.allocatable_mask, count, placement)
        out[slot] = found is None
    return out


CHECKS: dict[str, UnresolvableCheck] = {
    "NodeUnschedulable": _always,
    "TaintToleration": _always,
    "NodeAffinity": _always,
    "NodeMemoryPressure": _always,
    "NodeResourcesFit": _larger_than_node,
    "GPUTopology": _gpus_never_enough,
}


class DefaultPreemption:
    name = NAME

    def post_filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, result: ScheduleResult
    ) -> PostFilterResult | None:
        context: PreemptionContext | None = state.get(CONTEXT_KEY)
        if context is None:  # run outside the cycle: nothing to re-run the filters with
            return None
        outcome = preempt(context, state, pod, snapshot, result, CHECKS)
        if outcome.plan is not None:
            return PostFilterResult(nominated_node=outcome.plan.node, plan=outcome.plan)
        return PostFilterResult(
            message=f"preemption: {outcome.message}",
            clear_nomination=outcome.clear_nomination,
        )


def _percentage(value: Any, path: str, low: int, high: int | None) -> int:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= low
    if not ok or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise ConfigError(f"{path}: must be an integer {bound}, got {value!r}")
    return int(value)


def new(args: Mapping[str, Any] | None, path: str) -> DefaultPreemption:
    data = strict_mapping(args, path, {"minCandidateNodesPercentage", "minCandidateNodesAbsolute"})
    if "minCandidateNodesPercentage" in data:
        _percentage(
            data["minCandidateNodesPercentage"], f"{path}.minCandidateNodesPercentage", 0, 100
        )
    if "minCandidateNodesAbsolute" in data:
        _percentage(data["minCandidateNodesAbsolute"], f"{path}.minCandidateNodesAbsolute", 0, None)
    return DefaultPreemption()
