"""Builders and runners for the pod-relation plugin tests (InterPodAffinity,
PodTopologySpread).

`run_plugin` schedules a pod with a profile of just the plugin under test, once with the
vector form and once with the per-node reference form, asserts the two agree on every node's
reasons and every score, and returns what they agreed on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.core.cache import Cache
from scheduler.core.framework import Framework
from scheduler.core.model import NamespaceInfo, NodeInfo, PodInfo
from scheduler.core.reference import schedule_reference
from tests.builders import node, pod

HOST = "kubernetes.io/hostname"


def sel(**labels: str) -> dict[str, Any]:
    return {"matchLabels": dict(labels)}


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    item: dict[str, Any] = {"key": key, "operator": op}
    if values:
        item["values"] = list(values)
    return {"matchExpressions": [item]}


def term(selector: dict[str, Any] | None, key: str, **extra: Any) -> dict[str, Any]:
    t: dict[str, Any] = {"topologyKey": key, **extra}
    if selector is not None:
        t["labelSelector"] = selector
    return t


def weighted(weight: int, t: dict[str, Any]) -> dict[str, Any]:
    return {"weight": weight, "podAffinityTerm": t}


def affinity(
    required: list[dict[str, Any]] | None = None,
    anti: list[dict[str, Any]] | None = None,
    preferred: list[dict[str, Any]] | None = None,
    preferred_anti: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    req = "requiredDuringSchedulingIgnoredDuringExecution"
    pref = "preferredDuringSchedulingIgnoredDuringExecution"
    out: dict[str, Any] = {}
    if required or preferred:
        out["podAffinity"] = {req: required or [], pref: preferred or []}
    if anti or preferred_anti:
        out["podAntiAffinity"] = {req: anti or [], pref: preferred_anti or []}
    return out


def spread(
    skew: int, key: str, action: str = "DoNotSchedule", selector: Any = "unset", **extra: Any
) -> dict[str, Any]:
    c: dict[str, Any] = {"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": action}
    if selector != "unset":
        c["labelSelector"] = selector
    c.update(extra)
    return c


def mkpod(
    name: str,
    labels: Mapping[str, str] | None = None,
    *,
    on: str | None = None,
    ns: str = "default",
    aff: dict[str, Any] | None = None,
    constraints: list[dict[str, Any]] | None = None,
    spec: dict[str, Any] | None = None,
    terminating: bool = False,
) -> dict[str, Any]:
    extra: dict[str, Any] = dict(spec or {})
    if aff:
        extra["affinity"] = aff
    if constraints:
        extra["topologySpreadConstraints"] = constraints
    obj = pod(name, namespace=ns, node_name=on, spec=extra)
    obj["metadata"]["labels"] = dict(labels or {})
    if terminating:
        obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:05Z"
    return obj


def mknode(name: str, taints: list[dict[str, str]] | None = None, **labels: str) -> dict[str, Any]:
    return node(name, labels={HOST: name, **labels}, taints=taints)


def cluster(
    nodes: list[dict[str, Any]],
    pods: list[dict[str, Any]] = (),  # type: ignore[assignment]
    namespaces: Mapping[str, Mapping[str, str]] | None = None,
) -> Cache:
    cache = Cache()
    for name, labels in (namespaces or {}).items():
        cache.add_namespace(NamespaceInfo(name, dict(labels)))
    for n in nodes:
        cache.add_node(NodeInfo.from_object(n))
    for p in pods:
        cache.add_pod(PodInfo.from_object(p))
    return cache


def solo(plugin: Any) -> Framework:
    """A profile of one plugin at every point it has."""
    return Framework(
        "test",
        pre_filters=[plugin],
        filters=[plugin],
        pre_scores=[plugin],
        scores=[(plugin, 1)],
    )


def run_plugin(
    plugin: Any, cache: Cache, incoming: dict[str, Any]
) -> tuple[dict[str, str], dict[str, int] | None]:
    """(reason per node, "" when it fits; normalized score per feasible node or None when
    the plugin did not score), asserting vector and reference forms agree."""
    fw = solo(plugin)
    p = PodInfo.from_object(incoming)
    snap = cache.snapshot
    result = fw.schedule(p, snap)
    ref = schedule_reference(fw, p, snap)
    reasons: dict[str, str] = {}
    for slot in snap.live_slots():
        name = str(snap.names[slot])
        got = result.node_reasons(slot)
        assert got == ref.reasons.get(name, []), (name, got, ref.reasons.get(name))
        assert len(got) <= 1
        reasons[name] = got[0] if got else ""
    vector = result.scores.get(plugin.name)
    ref_scores = ref.scores.get(plugin.name)
    assert (vector is None) == (ref_scores is None), (vector, ref_scores)
    if ref_scores is None or vector is None:
        return reasons, None
    got_scores = {n: int(vector[snap.index[n]]) for n in ref_scores}
    assert got_scores == ref_scores, (got_scores, ref_scores)
    return reasons, got_scores


def assert_agree(fw: Framework, p: PodInfo, cache: Cache) -> str | None:
    """The whole profile's decision by both paths: same reasons per node, same scores per
    plugin, same totals and node; returns the node."""
    snap = cache.snapshot
    result = fw.schedule(p, snap)
    ref = schedule_reference(fw, p, snap)
    for slot in snap.live_slots():
        name = str(snap.names[slot])
        assert result.node_reasons(slot) == ref.reasons.get(name, []), name
    assert set(result.scores) == set(ref.scores)
    for plugin, by_name in ref.scores.items():
        got = {n: int(result.scores[plugin][snap.index[n]]) for n in by_name}
        assert got == by_name, plugin
    assert result.node == ref.node
    return result.node
