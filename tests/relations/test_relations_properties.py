"""Property tests: the vector forms of InterPodAffinity and PodTopologySpread (which read the
snapshot's pod indexes) equal their reference forms (which walk every pod as kube does) on
random clusters with random affinity terms, namespace selectors and spread constraints; and
the indexes kept incrementally through adds, assumes and removals give the same decisions as
a cache built afresh."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from plugins import frameworks_for
from plugins.inter_pod_affinity import InterPodAffinity, InterPodAffinityArgs
from plugins.pod_topology_spread import PodTopologySpread, parse_args
from scheduler.core.cache import Cache
from scheduler.core.config import load_config
from scheduler.core.framework import Framework
from scheduler.core.model import NamespaceInfo, NodeInfo, PodInfo, WorkloadInfo
from tests.relations.support import HOST, assert_agree, mknode, mkpod, solo

SETTINGS = settings(
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
KEYS = ["app", "tier", "job"]
VALUES = ["a", "b", "c"]
NAMESPACES = ["default", "ns1", "ns2"]
TOPOLOGY = [HOST, "zone", "region"]
ZONE = "topology.kubernetes.io/zone"
WORKLOADS = [
    {"kind": "ReplicaSet", "metadata": {"name": "rs"},
     "spec": {"selector": {"matchLabels": {"app": "a"}}}},
    {"kind": "Service", "metadata": {"name": "svc"}, "spec": {"selector": {"tier": "b"}}},
]  # fmt: skip
TAINT = [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]

labels_st = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=3)


@st.composite
def selectors(draw: Any) -> dict[str, Any] | None:
    kind = draw(st.integers(0, 6))
    if kind == 0:
        return None
    if kind == 1:
        return {}
    if kind <= 3:
        return {"matchLabels": draw(labels_st.filter(bool))}
    op = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]))
    item: dict[str, Any] = {"key": draw(st.sampled_from(KEYS)), "operator": op}
    if op in ("In", "NotIn"):
        item["values"] = draw(st.lists(st.sampled_from(VALUES), min_size=1, max_size=2))
    return {"matchExpressions": [item]}


@st.composite
def terms(draw: Any) -> dict[str, Any]:
    t: dict[str, Any] = {"topologyKey": draw(st.sampled_from(TOPOLOGY))}
    selector = draw(selectors())
    if selector is not None:
        t["labelSelector"] = selector
    ns = draw(st.integers(0, 3))
    if ns == 1:
        t["namespaces"] = draw(st.lists(st.sampled_from(NAMESPACES), min_size=1, max_size=2))
    elif ns == 2:
        t["namespaceSelector"] = draw(
            st.sampled_from(
                [{}, {"matchLabels": {"team": "blue"}}, {"matchLabels": {"team": "red"}}]
            )
        )
    if draw(st.integers(0, 4)) == 0:
        t["matchLabelKeys"] = [draw(st.sampled_from(KEYS))]
    if draw(st.integers(0, 6)) == 0:
        t["mismatchLabelKeys"] = [draw(st.sampled_from(KEYS))]
    return t


@st.composite
def affinities(draw: Any) -> dict[str, Any] | None:
    if draw(st.integers(0, 2)) == 0:
        return None
    req = "requiredDuringSchedulingIgnoredDuringExecution"
    pref = "preferredDuringSchedulingIgnoredDuringExecution"

    def weighted() -> Any:
        return st.builds(
            lambda w, t: {"weight": w, "podAffinityTerm": t}, st.integers(1, 100), terms()
        )

    return {
        "podAffinity": {
            req: draw(st.lists(terms(), max_size=2)),
            pref: draw(st.lists(weighted(), max_size=2)),
        },
        "podAntiAffinity": {
            req: draw(st.lists(terms(), max_size=2)),
            pref: draw(st.lists(weighted(), max_size=2)),
        },
    }


@st.composite
def constraints(draw: Any) -> list[dict[str, Any]]:
    out = []
    used: set[tuple[str, str]] = set()
    for _ in range(draw(st.integers(0, 3))):
        key = draw(st.sampled_from(TOPOLOGY))
        action = draw(st.sampled_from(["DoNotSchedule", "ScheduleAnyway"]))
        if (key, action) in used:
            continue
        used.add((key, action))
        c: dict[str, Any] = {"maxSkew": draw(st.integers(1, 3)), "topologyKey": key,
                             "whenUnsatisfiable": action}  # fmt: skip
        selector = draw(selectors())
        if selector is not None:
            c["labelSelector"] = selector
        if action == "DoNotSchedule" and draw(st.booleans()):
            c["minDomains"] = draw(st.integers(1, 4))
        if draw(st.integers(0, 3)) == 0:
            c["matchLabelKeys"] = [draw(st.sampled_from(KEYS))]
        if draw(st.booleans()):
            c["nodeAffinityPolicy"] = draw(st.sampled_from(["Honor", "Ignore"]))
        if draw(st.booleans()):
            c["nodeTaintsPolicy"] = draw(st.sampled_from(["Honor", "Ignore"]))
        out.append(c)
    return out


@st.composite
def pods(draw: Any, name: str, nodes: list[str]) -> dict[str, Any]:
    on = draw(st.sampled_from([None, *nodes, "ghost"])) if nodes else None
    spec: dict[str, Any] = {}
    if draw(st.integers(0, 3)) == 0:
        spec["nodeSelector"] = {"pool": draw(st.sampled_from(["p1", "p2"]))}
    if draw(st.booleans()):
        spec["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
    obj = mkpod(
        name,
        draw(labels_st),
        on=on,
        ns=draw(st.sampled_from(NAMESPACES)),
        aff=draw(affinities()),
        constraints=draw(constraints()),
        spec=spec,
        terminating=draw(st.integers(0, 6)) == 0,
    )
    if draw(st.booleans()):  # owned by the ReplicaSet of WORKLOADS (default constraints)
        obj["metadata"]["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "controller": True}
        ]
    return obj


@st.composite
def worlds(draw: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    nodes = []
    for i in range(draw(st.integers(1, 6))):
        labels = {}
        for key in ("zone", "region", "pool", ZONE):
            if draw(st.integers(0, 3)) > 0:
                labels[key] = draw(st.sampled_from(["p1", "p2"] if key == "pool" else VALUES))
        nodes.append(
            mknode(f"n{i}", taints=TAINT if draw(st.integers(0, 3)) == 0 else None, **labels)
        )
    names = [n["metadata"]["name"] for n in nodes]
    existing = [draw(pods(f"e{i}", names)) for i in range(draw(st.integers(0, 10)))]
    existing = [p for p in existing if p["spec"].get("nodeName")]
    incoming = draw(pods("in", []))
    return nodes, existing, incoming


NAMESPACE_LABELS = {"default": {}, "ns1": {"team": "blue"}, "ns2": {"team": "red"}}


def build(nodes: list[dict[str, Any]], existing: list[dict[str, Any]]) -> Cache:
    cache = Cache()
    for name, labels in NAMESPACE_LABELS.items():
        cache.add_namespace(NamespaceInfo(name, labels))
    for w in WORKLOADS:
        cache.add_workload(WorkloadInfo.from_object(w))
    for n in nodes:
        cache.add_node(NodeInfo.from_object(n))
    for p in existing:
        cache.add_pod(PodInfo.from_object(p))
    return cache


def _default_profile() -> Framework:
    text = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: topo-scheduler
  plugins:
    multiPoint:
      disabled: [{name: GPUTopology}]
"""
    return frameworks_for(load_config(text))["topo-scheduler"]


FRAMEWORKS = [
    _default_profile(),
    solo(InterPodAffinity()),
    solo(
        InterPodAffinity(
            InterPodAffinityArgs(
                hard_pod_affinity_weight=7, ignore_preferred_terms_of_existing_pods=True
            )
        )
    ),
    solo(PodTopologySpread()),
    solo(
        PodTopologySpread(
            parse_args(
                {
                    "defaultingType": "List",
                    "defaultConstraints": [
                        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
                        {"maxSkew": 2, "topologyKey": HOST, "whenUnsatisfiable": "ScheduleAnyway"},
                    ],
                },
                "args",
            )
        )
    ),
]


@SETTINGS
@given(worlds(), st.integers(0, len(FRAMEWORKS) - 1))
def test_vector_equals_reference(world: Any, which: int) -> None:
    nodes, existing, incoming = world
    cache = build(nodes, existing)
    assert_agree(FRAMEWORKS[which], PodInfo.from_object(incoming), cache)


@SETTINGS
@given(worlds(), st.lists(st.integers(0, 9), max_size=4), st.data())
def test_incremental_indexes_equal_a_fresh_cache(
    world: Any, removals: list[int], data: st.DataObject
) -> None:
    """Assume pods one after another (and remove some bound ones); each decision on the
    incrementally kept cache equals the one on a cache rebuilt from the same pods."""
    nodes, existing, incoming = world
    fw = FRAMEWORKS[0]
    cache = build(nodes, existing)
    placed = list(existing)
    for index in removals:
        if placed:
            gone = placed.pop(index % len(placed))
            cache.remove_pod(f"{gone['metadata']['namespace']}/{gone['metadata']['name']}")
    for step in range(3):
        obj = data.draw(pods(f"next{step}", []))
        p = PodInfo.from_object(obj)
        node = assert_agree(fw, p, cache)
        fresh = build(nodes, placed)
        assert fw.schedule(p, fresh.snapshot).node == node
        if node is not None:
            cache.assume(p, node)
            placed.append({**obj, "spec": {**obj["spec"], "nodeName": node}})
    assert_agree(fw, PodInfo.from_object(incoming), cache)
