"""What every API object reader shares (`scheduler.core.model` for pods and nodes,
`scheduler.core.storage` for volumes and ResourceClaims): the error of an object that cannot
be read, and the node and label selectors, parsed one way for pod node affinity,
PersistentVolume node affinity, ResourceClaim allocations and every label selector."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.core.decode import FieldError, Fields, go_parse_int
from scheduler.core.podaffinity import (
    NOTHING,
    LabelRequirement,
    LabelSelector,
)

__all__ = [
    "ModelError",
    "NodeSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "parse_label_selector",
    "parse_node_selector",
    "parse_node_selector_term",
]


class ModelError(FieldError):
    """An API object that cannot be understood; the message names the object and field."""


@dataclass(frozen=True, slots=True)
class NodeSelectorRequirement:
    key: str
    operator: str
    values: tuple[str, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        """component-helpers' nodeaffinity: one requirement against a node's labels (used
        by node affinity and by PersistentVolume / ResourceClaim node selectors)."""
        value = labels.get(self.key)
        op = self.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        if op not in ("Gt", "Lt") or value is None or len(self.values) != 1:
            return False
        have, want = go_parse_int(value), go_parse_int(self.values[0])
        if have is None or want is None:
            return False
        return have > want if op == "Gt" else have < want


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeSelector:
    """Required node affinity: terms are ORed, the requirements inside a term ANDed."""

    terms: tuple[NodeSelectorTerm, ...]


def _requirement(raw: Any, where: Fields, path: str) -> NodeSelectorRequirement:
    item = where.mapping(raw, path)
    values = where.list(item.get("values"), f"{path}.values")
    return NodeSelectorRequirement(
        key=where.string(item.get("key"), f"{path}.key", ""),
        operator=where.string(item.get("operator"), f"{path}.operator", ""),
        values=tuple(where.string(v, f"{path}.values[{i}]", "") for i, v in enumerate(values)),
    )


def parse_node_selector_term(raw: Any, where: Fields, path: str) -> NodeSelectorTerm:
    item = where.mapping(raw, path)
    exprs = where.list(item.get("matchExpressions"), f"{path}.matchExpressions")
    fields = where.list(item.get("matchFields"), f"{path}.matchFields")
    return NodeSelectorTerm(
        match_expressions=tuple(
            _requirement(e, where, f"{path}.matchExpressions[{i}]") for i, e in enumerate(exprs)
        ),
        match_fields=tuple(
            _requirement(f, where, f"{path}.matchFields[{i}]") for i, f in enumerate(fields)
        ),
    )


def parse_node_selector(raw: Any, where: Fields, path: str) -> NodeSelector:
    """A v1.NodeSelector (`nodeSelectorTerms`, ORed), as pods, PVs and ResourceClaims hold it."""
    data = where.mapping(raw, path)
    terms = where.list(data.get("nodeSelectorTerms"), f"{path}.nodeSelectorTerms")
    return NodeSelector(
        tuple(
            parse_node_selector_term(t, where, f"{path}.nodeSelectorTerms[{i}]")
            for i, t in enumerate(terms)
        )
    )


# ---------------------------------------------------------------------------- pod relations

_SET_OPERATORS = ("In", "NotIn")
_EXISTENCE_OPERATORS = ("Exists", "DoesNotExist")


def parse_label_selector(raw: Any, where: Fields, path: str) -> LabelSelector:
    """metav1.LabelSelectorAsSelector: None selects nothing, `{}` everything."""
    if raw is None:
        return NOTHING
    data = where.mapping(raw, path)
    requirements: list[LabelRequirement] = []
    match_labels = where.mapping(data.get("matchLabels"), f"{path}.matchLabels")
    for key, value in match_labels.items():
        value = where.string(value, f"{path}.matchLabels.{key}", "")
        requirements.append(LabelRequirement(str(key), "In", frozenset((value,))))
    exprs = where.list(data.get("matchExpressions"), f"{path}.matchExpressions")
    for i, item in enumerate(exprs):
        p = f"{path}.matchExpressions[{i}]"
        expr = where.mapping(item, p)
        key = where.string(expr.get("key"), f"{p}.key", "")
        if not key:
            raise where.fail(f"{p}.key", "is required")
        op = where.string(expr.get("operator"), f"{p}.operator", "")
        values = where.string_list(expr.get("values"), f"{p}.values")
        if op in _SET_OPERATORS:
            if not values:
                message = f"must be specified when `operator` is '{op}'"
                raise where.fail(f"{p}.values", message)
        elif op in _EXISTENCE_OPERATORS:
            if values:
                message = f"may not be specified when `operator` is '{op}'"
                raise where.fail(f"{p}.values", message)
        else:
            raise where.fail(
                f"{p}.operator",
                f'Unsupported value: "{op}": supported values: '
                '"DoesNotExist", "Exists", "In", "NotIn"',
            )
        requirements.append(LabelRequirement(key, op, frozenset(values)))
    return LabelSelector(tuple(requirements))
