"""PodTopologySpread on the cases of kube-scheduler's podtopologyspread filtering_test.go and
scoring_test.go, restated in our own data. Both plugin forms run on each case."""

from __future__ import annotations

from typing import Any

import pytest

from plugins.pod_topology_spread import (
    REASON,
    REASON_MISSING_LABEL,
    PodTopologySpread,
    default_selector,
    new,
)
from scheduler.core.config import ConfigError
from scheduler.core.model import ModelError, PodInfo, WorkloadInfo
from tests.relations.support import HOST, cluster, expr, mknode, mkpod, run_plugin, sel, spread

MISSING = REASON_MISSING_LABEL
APP = {"app": "api"}
TAINT = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]

# Zone A: a1, a2; zone B: b1, b2; zone C: c1 (tainted); x1 has no zone.
NODES = [
    mknode("a1", zone="A"),
    mknode("a2", zone="A"),
    mknode("b1", zone="B"),
    mknode("b2", zone="B"),
    mknode("c1", taints=TAINT, zone="C"),
    mknode("x1"),
]


def api(name: str, on: str, **kw: Any) -> dict[str, Any]:
    return mkpod(name, APP, on=on, **kw)


FILTER: list[tuple[str, list[dict[str, Any]], dict[str, Any], dict[str, str]]] = [
    (
        "no constraints: skipped",
        [api("p1", "a1")],
        mkpod("in", APP),
        dict.fromkeys(("a1", "a2", "b1", "b2", "c1", "x1"), ""),
    ),
    (
        "zone skew 1: A holds 2, B 1, C 0 -> only C (min 0) and B within skew",
        [api("p1", "a1"), api("p2", "a2"), api("p3", "b1")],
        mkpod("in", APP, constraints=[spread(1, "zone", selector=sel(app="api"))]),
        {"a1": REASON, "a2": REASON, "b1": REASON, "b2": REASON, "c1": "", "x1": MISSING},
    ),
    (
        "maxSkew 2 admits B",
        [api("p1", "a1"), api("p2", "a2"), api("p3", "b1")],
        mkpod("in", APP, constraints=[spread(2, "zone", selector=sel(app="api"))]),
        {"a1": REASON, "a2": REASON, "b1": "", "b2": "", "c1": "", "x1": MISSING},
    ),
    (
        "incoming pod not matching its own selector: no self count",
        [api("p1", "a1"), api("p2", "b1"), api("p3", "c1")],
        mkpod("in", {"app": "other"}, constraints=[spread(1, "zone", selector=sel(app="api"))]),
        {"a1": "", "a2": "", "b1": "", "b2": "", "c1": "", "x1": MISSING},
    ),
    (
        "pods of other namespaces and terminating pods are not counted",
        [
            api("p1", "a1", ns="other"),
            api("p2", "a1", terminating=True),
            api("p3", "b1"),
            api("p4", "c1"),
        ],
        mkpod("in", APP, constraints=[spread(1, "zone", selector=sel(app="api"))]),
        {"a1": "", "a2": "", "b1": REASON, "b2": REASON, "c1": REASON, "x1": MISSING},
    ),
    (
        "hostname spread: one per node before any node gets a second",
        [api("p1", "a1"), api("p2", "b1")],
        mkpod("in", APP, constraints=[spread(1, HOST, selector=sel(app="api"))]),
        {"a1": REASON, "a2": "", "b1": REASON, "b2": "", "c1": "", "x1": ""},
    ),
    (
        "two constraints: the first missing key decides the reason",
        [api("p1", "a1")],
        mkpod(
            "in",
            APP,
            constraints=[
                spread(1, "zone", selector=sel(app="api")),
                spread(1, HOST, selector=sel(app="api")),
            ],
        ),
        {"a1": REASON, "a2": REASON, "b1": "", "b2": "", "c1": "", "x1": MISSING},
    ),
    (
        "nodes missing the key do not count even when their pods match",
        [api("p1", "x1"), api("p2", "x1"), api("p3", "a1")],
        mkpod("in", APP, constraints=[spread(1, "zone", selector=sel(app="api"))]),
        {"a1": REASON, "a2": REASON, "b1": "", "b2": "", "c1": "", "x1": MISSING},
    ),
    (
        "nodeAffinityPolicy Honor (default): C is excluded by nodeSelector, min is B's 1",
        [api("p1", "a1"), api("p2", "b1")],
        mkpod(
            "in",
            APP,
            constraints=[spread(1, "zone", selector=sel(app="api"))],
            spec={"nodeSelector": {"pool": "main"}},
        ),
        {"a1": "", "a2": "", "b1": "", "b2": "", "c1": "", "x1": MISSING},
    ),
    (
        "nodeAffinityPolicy Ignore: C counts with 0, A and B are over",
        [api("p1", "a1"), api("p2", "b1")],
        mkpod(
            "in",
            APP,
            constraints=[spread(1, "zone", selector=sel(app="api"), nodeAffinityPolicy="Ignore")],
            spec={"nodeSelector": {"pool": "main"}},
        ),
        {"a1": REASON, "a2": REASON, "b1": REASON, "b2": REASON, "c1": "", "x1": MISSING},
    ),
    (
        "nodeTaintsPolicy Honor: tainted C is out, min is 1",
        [api("p1", "a1"), api("p2", "b1")],
        mkpod(
            "in",
            APP,
            constraints=[spread(1, "zone", selector=sel(app="api"), nodeTaintsPolicy="Honor")],
        ),
        {"a1": "", "a2": "", "b1": "", "b2": "", "c1": "", "x1": MISSING},
    ),
    (
        "nodeTaintsPolicy Ignore (default): C counts with 0",
        [api("p1", "a1"), api("p2", "b1")],
        mkpod("in", APP, constraints=[spread(1, "zone", selector=sel(app="api"))]),
        {"a1": REASON, "a2": REASON, "b1": REASON, "b2": REASON, "c1": "", "x1": MISSING},
    ),
    (
        "minDomains above the domain count makes the global minimum 0",
        [api("p1", "a1"), api("p2", "b1"), api("p3", "c1")],
        mkpod("in", APP, constraints=[spread(1, "zone", selector=sel(app="api"), minDomains=4)]),
        {"a1": REASON, "a2": REASON, "b1": REASON, "b2": REASON, "c1": REASON, "x1": MISSING},
    ),
    (
        "minDomains met: the minimum is the real one",
        [api("p1", "a1"), api("p2", "b1"), api("p3", "c1")],
        mkpod("in", APP, constraints=[spread(1, "zone", selector=sel(app="api"), minDomains=3)]),
        {"a1": "", "a2": "", "b1": "", "b2": "", "c1": "", "x1": MISSING},
    ),
    (
        "an empty selector counts nothing (kube's countPodsMatchSelector)",
        [api("p1", "a1"), api("p2", "a2")],
        mkpod("in", APP, constraints=[spread(1, "zone", selector={})]),
        {"a1": "", "a2": "", "b1": "", "b2": "", "c1": "", "x1": MISSING},
    ),
    (
        "a missing selector matches nothing",
        [api("p1", "a1"), api("p2", "a2")],
        mkpod("in", APP, constraints=[spread(1, "zone")]),
        {"a1": "", "a2": "", "b1": "", "b2": "", "c1": "", "x1": MISSING},
    ),
    (
        "matchLabelKeys narrows the count to the pod's own revision",
        [
            mkpod("o1", {"app": "api", "rev": "1"}, on="a1"),
            mkpod("o2", {"app": "api", "rev": "1"}, on="a2"),
            mkpod("n1", {"app": "api", "rev": "2"}, on="b1"),
        ],
        mkpod(
            "in",
            {"app": "api", "rev": "2"},
            constraints=[spread(1, "zone", selector=sel(app="api"), matchLabelKeys=["rev"])],
        ),
        {"a1": "", "a2": "", "b1": REASON, "b2": REASON, "c1": "", "x1": MISSING},
    ),
    (
        "ScheduleAnyway constraints do not filter",
        [api("p1", "a1"), api("p2", "a2")],
        mkpod("in", APP, constraints=[spread(1, "zone", "ScheduleAnyway", sel(app="api"))]),
        dict.fromkeys(("a1", "a2", "b1", "b2", "c1", "x1"), ""),
    ),
]


@pytest.mark.parametrize(
    ("existing", "incoming", "want"),
    [case[1:] for case in FILTER],
    ids=[case[0] for case in FILTER],
)
def test_filter(
    existing: list[dict[str, Any]], incoming: dict[str, Any], want: dict[str, str]
) -> None:
    nodes = [*NODES]
    # nodeSelector pool=main is carried by every node but c1
    nodes = [
        {**n, "metadata": {**n["metadata"], "labels": {**n["metadata"]["labels"], "pool": "main"}}}
        if n["metadata"]["name"] != "c1"
        else n
        for n in nodes
    ]
    reasons, _ = run_plugin(PodTopologySpread(), cluster(nodes, existing), incoming)
    assert reasons == want


# ------------------------------------------------------------------ scores (scoring_test.go)

SCORE: list[tuple[str, list[dict[str, Any]], list[dict[str, Any]], dict[str, Any], Any]] = [
    (
        "hostname: 2, 1, 0 matching pods -> log(5)-weighted, fewest scores 100",
        [mknode("h1"), mknode("h2"), mknode("h3")],
        [api("p1", "h1"), api("p2", "h1"), api("p3", "h2")],
        mkpod("in", APP, constraints=[spread(1, HOST, "ScheduleAnyway", sel(app="api"))]),
        # raw round(n * ln 5): 3, 2, 0 -> 100 * (3 + 0 - raw) / 3
        {"h1": 0, "h2": 33, "h3": 100},
    ),
    (
        "zone: A holds 3, B 1, maxSkew 2 -> raw round(n * ln 4 + 1)",
        [mknode("a1", zone="A"), mknode("a2", zone="A"), mknode("b1", zone="B")],
        [api("p1", "a1"), api("p2", "a2"), api("p3", "a2"), api("p4", "b1")],
        mkpod("in", APP, constraints=[spread(2, "zone", "ScheduleAnyway", sel(app="api"))]),
        # raw: A 5, B 2 -> 100 * (5 + 2 - raw) / 5
        {"a1": 40, "a2": 40, "b1": 100},
    ),
    (
        "nodes without the key are ignored: 0",
        [mknode("a1", zone="A"), mknode("b1", zone="B"), mknode("x1")],
        [api("p1", "a1")],
        mkpod("in", APP, constraints=[spread(1, "zone", "ScheduleAnyway", sel(app="api"))]),
        # raw: A round(ln 4) = 1, B 0 -> 100 * (1 + 0 - raw) / 1
        {"a1": 0, "b1": 100, "x1": 0},
    ),
    (
        "no matching pods and maxSkew 1: all raw 0 -> all 100",
        [mknode("a1", zone="A"), mknode("b1", zone="B")],
        [mkpod("o", {"app": "other"}, on="a1")],
        mkpod("in", APP, constraints=[spread(1, "zone", "ScheduleAnyway", sel(app="api"))]),
        {"a1": 100, "b1": 100},
    ),
    (
        "two constraints add up (zone then hostname)",
        [mknode("a1", zone="A"), mknode("a2", zone="A"), mknode("b1", zone="B")],
        [api("p1", "a1"), api("p2", "a1"), api("p3", "b1")],
        mkpod(
            "in",
            APP,
            constraints=[
                spread(1, "zone", "ScheduleAnyway", sel(app="api")),
                spread(1, HOST, "ScheduleAnyway", sel(app="api")),
            ],
        ),
        # zone weight ln 4, host weight ln 5: a1 = 2ln4 + 2ln5 = 5.99 -> 6;
        # a2 = 2ln4 = 2.77 -> 3; b1 = ln4 + ln5 = 2.99 -> 3; 100 * (6 + 3 - raw) / 6
        {"a1": 50, "a2": 100, "b1": 100},
    ),
    (
        "nodeTaintsPolicy Honor: a tainted node's pods are not counted in its zone",
        [mknode("a1", zone="A"), mknode("a2", taints=TAINT, zone="A"), mknode("b1", zone="B")],
        [api("p1", "a2"), api("p2", "a2"), api("p3", "b1")],
        mkpod(
            "in",
            APP,
            constraints=[
                spread(1, "zone", "ScheduleAnyway", sel(app="api"), nodeTaintsPolicy="Honor")
            ],
        ),
        # feasible: all three (the plugin alone does not filter taints); A counts 0, B 1
        {"a1": 100, "a2": 100, "b1": 0},
    ),
]


@pytest.mark.parametrize(
    ("nodes", "existing", "incoming", "want"),
    [case[1:] for case in SCORE],
    ids=[case[0] for case in SCORE],
)
def test_scores(
    nodes: list[dict[str, Any]],
    existing: list[dict[str, Any]],
    incoming: dict[str, Any],
    want: dict[str, int],
) -> None:
    _, scores = run_plugin(PodTopologySpread(), cluster(nodes, existing), incoming)
    assert scores == want


def test_no_soft_constraints_skip_the_score() -> None:
    cache = cluster([mknode("a1", zone="A")], [api("p1", "a1")])
    _, scores = run_plugin(
        PodTopologySpread(), cache, mkpod("in", APP, constraints=[spread(1, "zone", selector={})])
    )
    assert scores is None


# ------------------------------------------------------------------ args and bad input


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"defaultingType": "Zone"}, 'args.defaultingType: Unsupported value: "Zone"'),
        (
            {"defaultConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                                     "whenUnsatisfiable": "DoNotSchedule"}]},
            'args.defaultingType: Invalid value: "System": when .defaultConstraints are not empty',
        ),
        (
            {"defaultingType": "List", "defaultConstraints": [
                {"maxSkew": 0, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]},
            "args.defaultConstraints[0].maxSkew",
        ),
        (
            {"defaultingType": "List", "defaultConstraints": [
                {"maxSkew": 1, "topologyKey": "", "whenUnsatisfiable": "DoNotSchedule"}]},
            "args.defaultConstraints[0].topologyKey",
        ),
        (
            {"defaultingType": "List", "defaultConstraints": [
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "Maybe"}]},
            "args.defaultConstraints[0].whenUnsatisfiable",
        ),
        (
            {"defaultingType": "List", "defaultConstraints": [
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                 "labelSelector": {}}]},
            "args.defaultConstraints[0].labelSelector: Forbidden",
        ),
        (
            {"defaultingType": "List", "defaultConstraints": [
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
                {"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]},
            'args.defaultConstraints[1]: Duplicate value: "{zone, DoNotSchedule}"',
        ),
        ({"defaults": []}, 'args.defaults: unknown field "defaults"'),
    ],
)  # fmt: skip
def test_args_rejected_naming_the_field(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        new(raw, "args")
    assert message in str(err.value)


def test_args_list_defaults_accepted() -> None:
    plugin = new(
        {
            "defaultingType": "List",
            "defaultConstraints": [
                {"maxSkew": 3, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}
            ],
        },
        "args",
    )
    assert plugin.args.defaulting_type == "List"
    assert [c.max_skew for c in plugin.args.default_constraints] == [3]
    assert new(None, "args").args.system_defaulted


@pytest.mark.parametrize(
    ("constraint", "field"),
    [
        (spread(0, "zone", selector={}), "topologySpreadConstraints[0].maxSkew"),
        (spread(1, "", selector={}), "topologySpreadConstraints[0].topologyKey"),
        (spread(1, "zone", "Later", {}), "topologySpreadConstraints[0].whenUnsatisfiable"),
        (spread(1, "zone", "ScheduleAnyway", {}, minDomains=2), "[0].minDomains"),
        (spread(1, "zone", selector={}, nodeTaintsPolicy="Sometimes"), "[0].nodeTaintsPolicy"),
        (spread(1, "zone", selector=expr("app", "In")), "[0].labelSelector.matchExpressions[0]"),
    ],
)
def test_bad_constraints_name_the_field(constraint: dict[str, Any], field: str) -> None:
    with pytest.raises(ModelError) as err:
        PodInfo.from_object(mkpod("bad", APP, constraints=[constraint]))
    assert str(err.value).startswith("Pod default/bad: spec.topologySpreadConstraints")
    assert field in str(err.value)


# ------------------------------------------------------------------ default constraints


def owned(name: str, labels: dict[str, str], on: str | None, kind: str = "ReplicaSet",
          owner: str = "web-1") -> dict[str, Any]:  # fmt: skip
    obj = mkpod(name, labels, on=on)
    api_version = "v1" if kind == "ReplicationController" else "apps/v1"
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": api_version, "kind": kind, "name": owner, "controller": True}
    ]
    return obj


def workload(kind: str, name: str, selector: Any) -> WorkloadInfo:
    spec = {"selector": selector}
    return WorkloadInfo.from_object({"kind": kind, "metadata": {"name": name}, "spec": spec})


def test_default_selector_merges_services_and_the_controller() -> None:
    workloads = {
        (w.kind, w.namespace, w.name): w
        for w in (
            workload("Service", "front", {"app": "web"}),
            workload("Service", "other", {"app": "db"}),
            workload("ReplicaSet", "web-1", {"matchLabels": {"app": "web", "rev": "1"}}),
            workload("ReplicationController", "old", {"tier": "legacy"}),
        )
    }
    pod = PodInfo.from_object(owned("p", {"app": "web", "rev": "1"}, None))
    selector = default_selector(pod, workloads)
    assert selector.matches({"app": "web", "rev": "1"})
    assert not selector.matches({"app": "web", "rev": "2"})  # the ReplicaSet's requirement
    assert not selector.matches({"rev": "1"})  # the Service's label
    rc_pod = PodInfo.from_object(
        owned("q", {"tier": "legacy"}, None, kind="ReplicationController", owner="old")
    )
    assert default_selector(rc_pod, workloads).matches({"tier": "legacy"})
    assert not default_selector(rc_pod, workloads).matches({"tier": "new"})
    lone = PodInfo.from_object(mkpod("lone", {"app": "batch"}))
    assert default_selector(lone, workloads).empty


def test_system_defaults_spread_a_replicaset_by_hostname_and_zone() -> None:
    zone = "topology.kubernetes.io/zone"
    nodes = [
        mknode("h1", **{zone: "A"}),
        mknode("h2", **{zone: "A"}),
        mknode("h3", **{zone: "B"}),
        mknode("h4"),
    ]
    web = {"app": "web"}
    existing = [owned("w1", web, "h1"), owned("w2", web, "h1"), owned("w3", web, "h3")]
    cache = cluster(nodes, existing)
    cache.add_workload(workload("ReplicaSet", "web-1", {"matchLabels": web}))
    _, scores = run_plugin(PodTopologySpread(), cache, owned("in", web, None))
    # hostname: maxSkew 3, weight ln(4 + 2); zone: maxSkew 5, weight ln(3 + 2) (A, B and the
    # zone-less h4 as ""); h4 has no zone label, so only hostname spreading scores it:
    # raw h1 = round(2 ln 6 + 2 + 2 ln 5 + 4) = 13, h2 = 9, h3 = 9, h4 = 2
    assert scores == {"h1": 15, "h2": 46, "h3": 46, "h4": 100}


def test_defaults_need_a_workload_selecting_the_pod() -> None:
    cache = cluster([mknode("h1", zone="A")], [owned("w1", {"app": "web"}, "h1")])
    _, scores = run_plugin(PodTopologySpread(), cache, owned("in", {"app": "web"}, None))
    assert scores is None  # the ReplicaSet is not in the snapshot: no selector, no defaults


def test_list_defaults_filter_with_the_workload_selector() -> None:
    plugin = new(
        {
            "defaultingType": "List",
            "defaultConstraints": [
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
            ],
        },
        "args",
    )
    web = {"app": "web"}
    nodes = [mknode("a1", zone="A"), mknode("b1", zone="B"), mknode("x1")]
    cache = cluster(nodes, [owned("w1", web, "a1")])
    cache.add_workload(workload("Service", "front", web))
    reasons, _ = run_plugin(plugin, cache, mkpod("in", web))
    assert reasons == {"a1": REASON, "b1": "", "x1": MISSING}
