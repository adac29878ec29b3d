"""DynamicResources: topo-scheduler does not allocate ResourceClaims (DRA).

A pod with `spec.resourceClaims` is schedulable only when every claim already exists, is
allocated and is reserved for the pod (allocated by another scheduler or a controller); the
pod then goes only to nodes the allocation's node selector admits (`resourceclaim not
available on the node`, kube's reason). Otherwise the pod is unschedulable with a message
saying topo-scheduler does not allocate ResourceClaims, never silently placed without its
devices.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plugins._volumes import UNRESOLVABLE, node_mask
from scheduler.core.config import strict_mapping
from scheduler.core.framework import SKIP, CycleState, PreFilterResult, ReasonMasks
from scheduler.core.model import NodeInfo, NodeSelector, PodInfo
from scheduler.core.snapshot import BoolArray, Snapshot

NAME = "DynamicResources"
NOT_ALLOCATED = (
    'ResourceClaim "{claim}" of the pod is not allocated and reserved for it: '
    "topo-scheduler does not allocate ResourceClaims"
)
NOT_CREATED = (
    'the ResourceClaim of the pod\'s claim "{name}" is not created yet: '
    "topo-scheduler does not allocate ResourceClaims"
)
REASON_NODE = "resourceclaim not available on the node"
CODES: dict[str, str] = {REASON_NODE: UNRESOLVABLE}
"""kube's status code per reason (its statusUnschedulable is UnschedulableAndUnresolvable);
the PreFilter refusals above are UnschedulableAndUnresolvable too."""
PREFILTER_CODE = UNRESOLVABLE
_STATE = f"{NAME}/selectors"


def selector_admits(selector: NodeSelector, node: NodeInfo) -> bool:
    """A node selector against a node, with matchFields on metadata.name (which DRA's
    allocations use for node-local devices)."""
    for term in selector.terms:
        if not term.match_expressions and not term.match_fields:
            continue
        if all(r.matches(node.labels) for r in term.match_expressions) and all(
            r.key == "metadata.name" and r.matches({r.key: node.name}) for r in term.match_fields
        ):
            return True
    return False


class DynamicResources:
    name = NAME

    def pre_filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot
    ) -> PreFilterResult | None:
        if not pod.resource_claims:
            return SKIP
        selectors: list[NodeSelector] = []
        for entry in pod.resource_claims:
            if entry.claim is None:
                return PreFilterResult(unschedulable=NOT_CREATED.format(name=entry.name))
            claim = snapshot.storage.resource_claims.get(f"{pod.namespace}/{entry.claim}")
            if claim is None or not claim.allocated or pod.uid not in claim.reserved_for:
                return PreFilterResult(unschedulable=NOT_ALLOCATED.format(claim=entry.claim))
            if claim.node_selector is not None:
                selectors.append(claim.node_selector)
        if not selectors:
            return SKIP
        state.write(_STATE, selectors)
        return None

    def filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: BoolArray
    ) -> ReasonMasks:
        selectors: list[NodeSelector] = state.read(_STATE)
        return [
            (
                REASON_NODE,
                node_mask(
                    snapshot,
                    candidates,
                    lambda n: not all(selector_admits(s, n) for s in selectors),
                ),
            )
        ]


def new(args: Mapping[str, Any] | None, path: str) -> DynamicResources:
    strict_mapping(args, path, set())
    return DynamicResources()
