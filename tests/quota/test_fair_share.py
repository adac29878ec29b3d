"""PrioritySort's fairShare: among pods of equal priority, the namespace with the lowest
dominant share of its ElasticQuota goes first; without it (or without quotas) the order is
PrioritySort's."""

from __future__ import annotations

import pytest

from plugins import priority_sort
from scheduler.assembly import assemble
from scheduler.core.cache import Cache
from scheduler.core.config import ConfigError, load_config
from scheduler.core.model import PodInfo
from scheduler.core.queue import SchedulingQueue
from scheduler.explain.dryrun import DryRunBinder
from tests.builders import pod
from tests.quota.test_capacity_scheduling import cluster, eq, make_pod

FAIR = {
    "profiles": [
        {"pluginConfig": [{"name": "PrioritySort", "args": {"fairShare": True}}]},
    ]
}


def _order(cache: Cache, pods: list[PodInfo], config: dict | None = None) -> list[str]:
    parts = assemble(
        load_config(config) if config else None, DryRunBinder(), clock=lambda: 0.0, cache=cache
    )
    for p in pods:
        parts.cycle.enqueue(p)
    out = []
    while (qp := parts.queue.pop()) is not None:
        out.append(qp.key)
    return out


def _pending(name: str, ns: str, priority: int = 0) -> PodInfo:
    obj = pod(name, {"cpu": "1"}, namespace=ns)
    obj["spec"]["priority"] = priority
    return PodInfo.from_object(obj)


def test_lowest_dominant_share_first_among_equal_priority() -> None:
    quotas = [eq("a", "qa", None, {"cpu": "4"}), eq("b", "qb", None, {"cpu": "4"})]
    # a uses 3 of its 4 guaranteed CPUs, b 1 of 4: b's pods go first, then by share again
    cache = cluster(
        quotas,
        [
            make_pod("a-run", "a", 0, 3000, node_name="n"),
            make_pod("b-run", "b", 0, 1000, node_name="n"),
        ],
    )
    pods = [_pending("a1", "a"), _pending("a2", "a"), _pending("b1", "b"), _pending("hi", "a", 10)]
    order = _order(cache, pods, FAIR)
    assert order[0] == "a/hi"  # priority first
    assert order[1] == "b/b1"  # then the namespace with the lower share
    assert order[2:] == ["a/a1", "a/a2"]


def test_without_fair_share_the_order_is_priority_sort() -> None:
    quotas = [eq("a", "qa", None, {"cpu": "4"}), eq("b", "qb", None, {"cpu": "4"})]
    cache = cluster(quotas, [make_pod("a-run", "a", 0, 3000, node_name="n")])
    pods = [_pending("a1", "a"), _pending("b1", "b")]
    assert _order(cache, pods) == ["a/a1", "b/b1"]


def test_fair_share_without_quotas_keeps_the_order() -> None:
    pods = [_pending(f"p{i}", ns) for i, ns in enumerate("abcabc")]
    assert _order(cluster([], []), pods, FAIR) == _order(cluster([], []), pods)


def test_share_is_read_when_the_pod_is_taken() -> None:
    queue: SchedulingQueue[PodInfo] = SchedulingQueue(lambda: 0.0)
    shares = {"a": 0.0, "b": 0.5}
    queue.fair(lambda p: p.namespace, lambda ns: shares[ns])
    for p in (_pending("a1", "a"), _pending("a2", "a"), _pending("b1", "b")):
        queue.add(p.key, p.priority, 0.0, p)
    assert queue.pop().key == "a/a1"  # type: ignore[union-attr]
    shares["a"] = 1.0  # a's first pod now runs
    assert queue.pop().key == "b/b1"  # type: ignore[union-attr]


def test_fair_share_arg_must_be_a_boolean() -> None:
    with pytest.raises(ConfigError, match=r"args\.fairShare: must be a boolean"):
        priority_sort.new({"fairShare": "yes"}, "profiles[0].pluginConfig[0].args")
