"""Parsing what preemption reads: PriorityClasses, PodDisruptionBudgets, the pod's policy,
and the DefaultPreemption args; bad input is one line naming the object and field."""

from __future__ import annotations

from typing import Any

import pytest

from plugins import default_preemption
from scheduler.core.config import ConfigError
from scheduler.core.disruption import DisruptionBudget, pdb_violations
from scheduler.core.model import ModelError, PodInfo
from scheduler.core.priority import PriorityClass, resolve_priority
from tests.builders import pod


def budget(selector: Any, allowed: int = 1, **status: Any) -> dict[str, Any]:
    return {
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "b", "namespace": "ml"},
        "spec": {"selector": selector},
        "status": {"disruptionsAllowed": allowed, **status},
    }


def labelled(name: str, labels: dict[str, str], namespace: str = "ml") -> PodInfo:
    obj = pod(name, namespace=namespace)
    obj["metadata"]["labels"] = labels
    return PodInfo.from_object(obj)


def test_budget_counts_victims_in_order() -> None:
    b = DisruptionBudget.from_object(
        budget({"matchExpressions": [{"key": "app", "operator": "In", "values": ["x"]}]})
    )
    pods = [labelled(f"p{i}", {"app": "x"}) for i in range(3)]
    other_ns = labelled("q", {"app": "x"}, namespace="default")
    assert pdb_violations([*pods, other_ns], [b]) == [False, True, True, False]


def test_empty_selector_matches_nothing_and_disrupted_pods_are_not_counted() -> None:
    empty = DisruptionBudget.from_object(budget({}, allowed=0))
    assert pdb_violations([labelled("p", {"app": "x"})], [empty]) == [False]
    missing = budget({}, allowed=0)
    del missing["spec"]["selector"]
    unset = DisruptionBudget.from_object(missing)
    assert pdb_violations([labelled("p", {"app": "x"})], [unset]) == [False]
    expr = {"matchExpressions": [{"key": "app", "operator": "In", "values": ["x", "y"]}]}
    by_expression = DisruptionBudget.from_object(budget(expr, allowed=0))
    assert pdb_violations(
        [labelled("p", {"app": "y"}), labelled("q", {"app": "z"})], [by_expression]
    ) == [True, False]
    b = DisruptionBudget.from_object(
        budget({"matchLabels": {"app": "x"}}, allowed=0, disruptedPods={"p": "t"})
    )
    assert pdb_violations([labelled("p", {"app": "x"}), labelled("r", {"app": "x"})], [b]) == [
        False,
        True,
    ]


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (
            budget({"matchExpressions": [{"key": "a", "operator": "Maybe"}]}),
            "PodDisruptionBudget ml/b: spec.selector.matchExpressions[0].operator: Unsupported "
            'value: "Maybe": supported values: "DoesNotExist", "Exists", "In", "NotIn"',
        ),
        (
            budget({}, allowed="x"),
            "PodDisruptionBudget ml/b: status.disruptionsAllowed:",
        ),
    ],
)
def test_bad_budget(obj: dict[str, Any], message: str) -> None:
    with pytest.raises(ModelError) as err:
        DisruptionBudget.from_object(obj)
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_priority_class_errors() -> None:
    with pytest.raises(ModelError, match=r"^PriorityClass hi: value: is required$"):
        PriorityClass.from_object({"metadata": {"name": "hi"}})
    with pytest.raises(ModelError, match=r"^PriorityClass hi: preemptionPolicy: Unsupported"):
        PriorityClass.from_object({"metadata": {"name": "hi"}, "value": 1, "preemptionPolicy": "x"})
    with pytest.raises(ModelError, match=r"^PriorityClass hi: value: must be no greater"):
        PriorityClass.from_object({"metadata": {"name": "hi"}, "value": 2_000_000_001})


def test_builtin_class_and_explicit_priority() -> None:
    obj = pod("p", spec={"priorityClassName": "system-node-critical"})
    assert resolve_priority(PodInfo.from_object(obj), []).priority == 2_000_001_000
    # spec.priority, as the API server set it, wins over any class
    obj = pod("p", spec={"priorityClassName": "nope", "priority": 7})
    assert resolve_priority(PodInfo.from_object(obj), []).priority == 7
    # the lowest of several global defaults
    classes = [
        PriorityClass("a", 50, global_default=True),
        PriorityClass("b", 10, global_default=True),
    ]
    assert resolve_priority(PodInfo.from_object(pod("p")), classes).priority == 10


def test_pod_preemption_fields() -> None:
    obj = pod("p", spec={"preemptionPolicy": "Never"})
    obj["status"].update(
        nominatedNodeName="n1",
        startTime="2026-01-01T00:00:10Z",
        conditions=[
            {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
        ],
    )
    info = PodInfo.from_object(obj)
    assert (info.preemption_policy, info.nominated_node_name, info.preempted) == (
        "Never",
        "n1",
        True,
    )
    assert info.start_time is not None
    with pytest.raises(ModelError, match=r"^Pod default/p: spec.preemptionPolicy: Unsupported"):
        PodInfo.from_object(pod("p", spec={"preemptionPolicy": "Sometimes"}))


def test_plugin_args() -> None:
    default_preemption.new(
        {"minCandidateNodesPercentage": 10, "minCandidateNodesAbsolute": 100}, "a"
    )
    with pytest.raises(ConfigError, match=r"^a.minCandidateNodesPercentage: must be an integer"):
        default_preemption.new({"minCandidateNodesPercentage": 101}, "a")
    with pytest.raises(ConfigError, match="unknown"):
        default_preemption.new({"maxVictims": 1}, "a")
