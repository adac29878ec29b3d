"""NodeAffinity: `nodeSelector` AND required node affinity filter nodes; preferred terms
add their weights to a node's score.

Terms are ORed, the requirements inside a term ANDed. A term kube would reject as invalid
(an unknown operator, `Gt` with a non-integer, a key or value that is not valid label syntax)
matches nothing, and an empty term matches nothing. Masks are cached per selector until
node labels change.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from scheduler.core.config import strict_mapping
from scheduler.core.decode import go_parse_int
from scheduler.core.framework import (
    CycleState,
    PreFilterResult,
    ReasonMasks,
    default_normalize,
    default_normalize_reference,
)
from scheduler.core.model import (
    NodeInfo,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodInfo,
    PreferredTerm,
)
from scheduler.core.snapshot import BoolArray, IntArray, NodeState, Snapshot

NAME = "NodeAffinity"
REASON = "node(s) didn't match Pod's node affinity/selector"
REASON_CONFLICT = "pod affinity terms conflict"
_NAME_FIELD = "metadata.name"


# apimachinery's qualified-name part and label-value syntax (ASCII only).
_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _valid_key(key: str) -> bool:
    """validation.IsQualifiedName: ``[prefix/]name``, as labels.NewRequirement checks keys."""
    parts = key.split("/")
    if len(parts) == 2:
        prefix, name = parts
        if not prefix or len(prefix) > 253 or _DNS1123_SUBDOMAIN.fullmatch(prefix) is None:
            return False
    elif len(parts) == 1:
        name = parts[0]
    else:
        return False
    return 0 < len(name) <= 63 and _NAME_PART.fullmatch(name) is not None


def _valid_value(value: str) -> bool:
    """validation.IsValidLabelValue: empty, or at most 63 name characters."""
    return value == "" or (len(value) <= 63 and _NAME_PART.fullmatch(value) is not None)


def _valid_expression(req: NodeSelectorRequirement) -> bool:
    """labels.NewRequirement's checks: a key, the operator's value count, valid values."""
    if not _valid_key(req.key) or not all(_valid_value(v) for v in req.values):
        return False
    if req.operator in ("In", "NotIn"):
        return len(req.values) > 0
    if req.operator in ("Exists", "DoesNotExist"):
        return len(req.values) == 0
    if req.operator in ("Gt", "Lt"):
        return len(req.values) == 1 and go_parse_int(req.values[0]) is not None
    return False


def _valid_field(req: NodeSelectorRequirement) -> bool:
    return req.key == _NAME_FIELD and req.operator in ("In", "NotIn") and len(req.values) == 1


def term_matches(term: NodeSelectorTerm, node: NodeInfo) -> bool:
    """One node selector term against a node; invalid or empty terms match nothing."""
    if not term.match_expressions and not term.match_fields:
        return False
    if not all(_valid_expression(r) for r in term.match_expressions):
        return False
    if not all(_valid_field(r) for r in term.match_fields):
        return False
    if not all(r.matches(node.labels) for r in term.match_expressions):
        return False
    return all((node.name in r.values) == (r.operator == "In") for r in term.match_fields)


def required_matches(pod: PodInfo, node: NodeInfo) -> bool:
    """nodeSelector AND required node affinity."""
    if any(node.labels.get(k) != v for k, v in pod.node_selector):
        return False
    affinity = pod.required_affinity
    return affinity is None or any(term_matches(t, node) for t in affinity.terms)


def preferred_score(terms: Sequence[PreferredTerm], node: NodeInfo) -> int:
    return sum(t.weight for t in terms if t.weight != 0 and term_matches(t.preference, node))


class NodeAffinity:
    name = NAME

    def pre_filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot
    ) -> PreFilterResult | None:
        """Pods pinned to node names by matchFields only look at those nodes."""
        affinity = pod.required_affinity
        if affinity is None:
            return None
        names: set[str] | None = None
        for term in affinity.terms:
            term_names: set[str] | None = None
            for req in term.match_fields:
                if req.key == _NAME_FIELD and req.operator == "In":
                    values = set(req.values)
                    term_names = values if term_names is None else term_names & values
            if term_names is None:
                return None  # this term does not pin names; terms are ORed
            names = term_names if names is None else names | term_names
        if names is None:
            return None
        if not names:
            return PreFilterResult(unschedulable=REASON_CONFLICT)
        return PreFilterResult(node_names=frozenset(names))

    def _mask(self, pod: PodInfo, snapshot: Snapshot) -> BoolArray:
        def compute() -> BoolArray:
            mask = np.zeros(snapshot.capacity, np.bool_)
            for slot in snapshot.live_slots():
                info = snapshot.nodes[slot]
                mask[slot] = info is not None and not required_matches(pod, info)
            return mask

        return snapshot.derived((NAME, pod.node_selector, pod.required_affinity), compute)

    def filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: BoolArray
    ) -> ReasonMasks:
        if not pod.node_selector and pod.required_affinity is None:
            return []
        return [(REASON, self._mask(pod, snapshot))]

    def filter_node(self, pod: PodInfo, node: NodeState) -> list[str]:
        return [] if required_matches(pod, node.info) else [REASON]

    def score(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, feasible: BoolArray
    ) -> IntArray | None:
        if not pod.preferred_affinity:
            return None

        def compute() -> IntArray:
            scores = np.zeros(snapshot.capacity, np.int64)
            for slot in snapshot.live_slots():
                info = snapshot.nodes[slot]
                if info is not None:
                    scores[slot] = preferred_score(pod.preferred_affinity, info)
            return scores

        return snapshot.derived((NAME, "preferred", pod.preferred_affinity), compute)

    def normalize(self, state: CycleState, scores: IntArray, feasible: BoolArray) -> IntArray:
        return default_normalize(scores, feasible)

    def score_nodes(
        self, pod: PodInfo, feasible: Sequence[NodeState], all_nodes: Sequence[NodeState]
    ) -> list[int] | None:
        if not pod.preferred_affinity:
            return None
        return [preferred_score(pod.preferred_affinity, n.info) for n in feasible]

    def normalize_reference(self, scores: list[int]) -> list[int]:
        return default_normalize_reference(scores)


def new(args: Mapping[str, Any] | None, path: str) -> NodeAffinity:
    strict_mapping(args, path, set())
    return NodeAffinity()


__all__ = ["NAME", "REASON", "NodeAffinity", "NodeSelector", "new", "required_matches"]
