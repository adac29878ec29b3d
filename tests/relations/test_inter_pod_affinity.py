"""InterPodAffinity on the cases of kube-scheduler's interpodaffinity filtering_test.go and
scoring_test.go, restated in our own data: each case names the cluster, the incoming pod and
the verdict (or normalized score) kube gives every node. Both plugin forms run on each case.
"""

from __future__ import annotations

from typing import Any

import pytest

from plugins.inter_pod_affinity import (
    REASON_AFFINITY as AFF,
)
from plugins.inter_pod_affinity import (
    REASON_ANTI_AFFINITY as ANTI,
)
from plugins.inter_pod_affinity import (
    REASON_EXISTING_ANTI_AFFINITY as EXISTING,
)
from plugins.inter_pod_affinity import (
    InterPodAffinity,
    InterPodAffinityArgs,
    new,
)
from scheduler.core.config import ConfigError
from scheduler.core.model import ModelError, PodInfo
from tests.relations.support import (
    HOST,
    affinity,
    cluster,
    expr,
    mknode,
    mkpod,
    run_plugin,
    sel,
    term,
    weighted,
)

DB = {"tier": "db"}
WEB = {"tier": "web"}

# One node, region r1 / zone r1-a; the cases of TestRequiredAffinitySingleNode.
ONE = [mknode("m1", region="r1", zone="r1-a")]

SINGLE_NODE: list[tuple[str, list[dict[str, Any]], dict[str, Any], str]] = [
    ("no terms, nothing existing: plugin skipped", [], mkpod("in"), ""),
    (
        "affinity In matches the pod in the region",
        [mkpod("db", DB, on="m1")],
        mkpod("in", WEB, aff=affinity([term(expr("tier", "In", "db", "x"), "region")])),
        "",
    ),
    (
        "affinity NotIn of other values matches the pod in the region",
        [mkpod("db", DB, on="m1")],
        mkpod("in", WEB, aff=affinity([term(expr("tier", "NotIn", "cache", "x"), "region")])),
        "",
    ),
    (
        "the matching pod lives in a namespace the term does not name",
        [mkpod("db", DB, on="m1", ns="other")],
        mkpod("in", WEB, aff=affinity([term(sel(tier="db"), "region", namespaces=["elsewhere"])])),
        AFF,
    ),
    (
        "selector matches nobody and the pod does not match itself",
        [mkpod("db", DB, on="m1")],
        mkpod("in", DB, aff=affinity([term(sel(tier="cache"), "region")])),
        AFF,
    ),
    (
        "two terms with different operators, both matched by the one pod",
        [mkpod("db", DB, on="m1")],
        mkpod(
            "in",
            WEB,
            aff=affinity(
                [
                    term(
                        {
                            "matchExpressions": [
                                {"key": "tier", "operator": "Exists"},
                                {"key": "absent", "operator": "DoesNotExist"},
                            ]
                        },
                        "region",
                    ),
                    term(
                        {
                            "matchExpressions": [
                                {"key": "tier", "operator": "In", "values": ["db"]},
                                {"key": "tier", "operator": "NotIn", "values": ["web"]},
                            ]
                        },
                        "region",
                    ),
                ]
            ),
        ),
        "",
    ),
    (
        "requirements are ANDed: the second term's In fails",
        [mkpod("db", DB, on="m1")],
        mkpod(
            "in",
            WEB,
            aff=affinity(
                [term(expr("tier", "Exists"), "region"), term(expr("tier", "In", "db2"), "region")]
            ),
        ),
        AFF,
    ),
    (
        "affinity and anti-affinity both satisfied",
        [mkpod("db", DB, on="m1")],
        mkpod(
            "in",
            WEB,
            aff=affinity([term(sel(tier="db"), "region")], anti=[term(sel(tier="cache"), HOST)]),
        ),
        "",
    ),
    (
        "existing pod's anti-affinity does not match the incoming pod",
        [mkpod("db", DB, on="m1", aff=affinity(anti=[term(sel(tier="cache"), HOST)]))],
        mkpod("in", WEB, aff=affinity([term(sel(tier="db"), "region")])),
        "",
    ),
    (
        "affinity satisfied, anti-affinity to the same pod in the zone violated",
        [mkpod("db", DB, on="m1")],
        mkpod(
            "in",
            WEB,
            aff=affinity([term(sel(tier="db"), "region")], anti=[term(sel(tier="db"), "zone")]),
        ),
        ANTI,
    ),
    (
        "symmetry: the existing pod's anti-affinity matches the incoming pod",
        [mkpod("db", DB, on="m1", aff=affinity(anti=[term(sel(tier="db"), "zone")]))],
        mkpod("in", DB, aff=affinity([term(sel(tier="db"), "region")])),
        EXISTING,
    ),
    (
        "pod matching its own NotIn term is still refused when others match nowhere it can go",
        [mkpod("db", DB, on="ghost")],
        mkpod("in", DB, aff=affinity([term(expr("tier", "NotIn", "db"), "region")])),
        AFF,
    ),
    (
        "symmetry without any term on the incoming pod",
        [mkpod("db", DB, on="m1", aff=affinity(anti=[term(sel(tier="db"), "zone")]))],
        mkpod("in", DB),
        EXISTING,
    ),
    (
        "existing anti-affinity NotIn excludes the incoming pod: plugin skipped",
        [mkpod("db", DB, on="m1", aff=affinity(anti=[term(expr("tier", "NotIn", "db"), "zone")]))],
        mkpod("in", DB),
        "",
    ),
    (
        "incoming anti-affinity hits before the existing pod's (own rule first)",
        [
            mkpod(
                "x",
                {"sec": "s1"},
                on="m1",
                aff=affinity(anti=[term(expr("sec", "Exists"), "zone")]),
            )
        ],
        mkpod(
            "in",
            {"sec": "s2", "tier": "db"},
            aff=affinity(
                anti=[term(expr("tier", "Exists"), "region"), term(expr("sec", "Exists"), "region")]
            ),
        ),
        ANTI,
    ),
    (
        "partial match each way: only the existing pod's terms match",
        [
            mkpod(
                "x",
                {"a": "", "z": ""},
                on="m1",
                aff=affinity(
                    anti=[term(expr("a", "Exists"), "zone"), term(expr("b", "Exists"), "zone")]
                ),
            )
        ],
        mkpod("in", {"a": "", "z": ""}, aff=affinity(anti=[term(expr("b", "Exists"), "zone")])),
        EXISTING,
    ),
    (
        "namespaceSelector selects the existing pod's namespace",
        [mkpod("db", DB, on="m1", ns="team-a")],
        mkpod(
            "in",
            WEB,
            aff=affinity([term(sel(tier="db"), "region", namespaceSelector=sel(team="blue"))]),
        ),
        "",
    ),
    (
        "namespaceSelector selects no namespace holding the pod",
        [mkpod("db", DB, on="m1", ns="team-b")],
        mkpod(
            "in",
            WEB,
            aff=affinity([term(sel(tier="db"), "region", namespaceSelector=sel(team="blue"))]),
        ),
        AFF,
    ),
    (
        "an empty namespaceSelector means every namespace",
        [mkpod("db", DB, on="m1", ns="team-b")],
        mkpod("in", WEB, aff=affinity([term(sel(tier="db"), "region", namespaceSelector={})])),
        "",
    ),
    (
        "anti-affinity with an empty namespaceSelector sees every namespace",
        [mkpod("db", DB, on="m1", ns="team-b")],
        mkpod("in", WEB, aff=affinity(anti=[term(sel(tier="db"), "zone", namespaceSelector={})])),
        ANTI,
    ),
    (
        "existing pod's anti-affinity selects the incoming pod's namespace by its labels",
        [
            mkpod(
                "db",
                DB,
                on="m1",
                ns="team-b",
                aff=affinity(
                    anti=[term(sel(tier="web"), "zone", namespaceSelector=sel(team="blue"))]
                ),
            )
        ],
        mkpod("in", WEB, ns="team-a"),
        EXISTING,
    ),
    (
        "a missing labelSelector selects nothing",
        [mkpod("db", DB, on="m1")],
        mkpod("in", WEB, aff=affinity(anti=[term(None, "zone")])),
        "",
    ),
    (
        "matchLabelKeys narrows the anti-affinity to the pod's own job",
        [mkpod("w0", {"role": "worker", "job": "j1"}, on="m1")],
        mkpod(
            "in",
            {"role": "worker", "job": "j2"},
            aff=affinity(anti=[term(sel(role="worker"), HOST, matchLabelKeys=["job"])]),
        ),
        "",
    ),
    (
        "matchLabelKeys: same job, refused",
        [mkpod("w0", {"role": "worker", "job": "j1"}, on="m1")],
        mkpod(
            "in",
            {"role": "worker", "job": "j1"},
            aff=affinity(anti=[term(sel(role="worker"), HOST, matchLabelKeys=["job"])]),
        ),
        ANTI,
    ),
    (
        "mismatchLabelKeys keeps away from other tenants only",
        [mkpod("o", {"role": "worker", "tenant": "t1"}, on="m1")],
        mkpod(
            "in",
            {"role": "worker", "tenant": "t2"},
            aff=affinity(anti=[term(sel(role="worker"), HOST, mismatchLabelKeys=["tenant"])]),
        ),
        ANTI,
    ),
]


@pytest.mark.parametrize(
    ("existing", "incoming", "want"),
    [case[1:] for case in SINGLE_NODE],
    ids=[case[0] for case in SINGLE_NODE],
)
def test_single_node(existing: list[dict[str, Any]], incoming: dict[str, Any], want: str) -> None:
    cache = cluster(ONE, existing, namespaces={"team-a": {"team": "blue"}, "team-b": {}})
    reasons, _ = run_plugin(InterPodAffinity(), cache, incoming)
    assert reasons == {"m1": want}


# Three regions, nodes with and without the zone key: TestRequiredAffinityMultipleNodes.
MANY = [
    mknode("a1", region="east", zone="east-1"),
    mknode("a2", region="east", zone="east-2"),
    mknode("b1", region="west", zone="west-1"),
    mknode("c1"),  # no region, no zone
]

MULTI_NODE: list[tuple[str, list[dict[str, Any]], dict[str, Any], dict[str, str]]] = [
    (
        "affinity to a pod's region admits the whole region; nodes without the key fail",
        [mkpod("db", DB, on="a1")],
        mkpod("in", WEB, aff=affinity([term(sel(tier="db"), "region")])),
        {"a1": "", "a2": "", "b1": AFF, "c1": AFF},
    ),
    (
        "first pod of a group: nobody matches, the pod matches itself",
        [],
        mkpod("in", DB, aff=affinity([term(sel(tier="db"), "region")])),
        {"a1": "", "a2": "", "b1": "", "c1": AFF},
    ),
    (
        "first-pod rule does not apply once a matching pod exists elsewhere",
        [mkpod("db", DB, on="b1")],
        mkpod("in", DB, aff=affinity([term(sel(tier="db"), "region")])),
        {"a1": AFF, "a2": AFF, "b1": "", "c1": AFF},
    ),
    (
        "a matching pod on a node without the key does not count: first-pod rule applies",
        [mkpod("db", DB, on="c1")],
        mkpod("in", DB, aff=affinity([term(sel(tier="db"), "region")])),
        {"a1": "", "a2": "", "b1": "", "c1": AFF},
    ),
    (
        "two terms must be met by one pod, each in its own key",
        [mkpod("db", DB, on="a1"), mkpod("cache", {"tier": "cache"}, on="a2")],
        mkpod(
            "in",
            WEB,
            aff=affinity([term(sel(tier="db"), "region"), term(expr("tier", "Exists"), "zone")]),
        ),
        {"a1": "", "a2": AFF, "b1": AFF, "c1": AFF},
    ),
    (
        "anti-affinity to a region; a node without the key passes",
        [mkpod("db", DB, on="a2")],
        mkpod("in", WEB, aff=affinity(anti=[term(sel(tier="db"), "region")])),
        {"a1": ANTI, "a2": ANTI, "b1": "", "c1": ""},
    ),
    (
        "symmetry covers every node of the existing pod's domain",
        [mkpod("db", DB, on="b1", aff=affinity(anti=[term(sel(tier="web"), "region")]))],
        mkpod("in", WEB),
        {"a1": "", "a2": "", "b1": EXISTING, "c1": ""},
    ),
    (
        "one worker per node (hostname anti-affinity)",
        [mkpod("w0", {"app": "w"}, on="a1"), mkpod("w1", {"app": "w"}, on="b1")],
        mkpod("in", {"app": "w"}, aff=affinity(anti=[term(sel(app="w"), HOST)])),
        {"a1": ANTI, "a2": "", "b1": ANTI, "c1": ""},
    ),
    (
        "a terminating pod still counts for affinity (kube counts every cached pod)",
        [mkpod("db", DB, on="b1", terminating=True)],
        mkpod("in", WEB, aff=affinity([term(sel(tier="db"), "region")])),
        {"a1": AFF, "a2": AFF, "b1": "", "c1": AFF},
    ),
]


@pytest.mark.parametrize(
    ("existing", "incoming", "want"),
    [case[1:] for case in MULTI_NODE],
    ids=[case[0] for case in MULTI_NODE],
)
def test_multiple_nodes(
    existing: list[dict[str, Any]], incoming: dict[str, Any], want: dict[str, str]
) -> None:
    reasons, _ = run_plugin(InterPodAffinity(), cluster(MANY, existing), incoming)
    assert reasons == want


def test_fit_error_message_lists_kube_reasons() -> None:
    from plugins import frameworks_for
    from scheduler.core.config import default_config

    fw = frameworks_for(default_config())["topo-scheduler"]
    cache = cluster(MANY, [mkpod("w0", {"app": "w"}, on="a1")])
    p = PodInfo.from_object(
        mkpod(
            "in",
            {"app": "w"},
            aff=affinity([term(sel(app="x"), "region")], anti=[term(sel(app="w"), HOST)]),
        )
    )
    result = fw.schedule(p, cache.snapshot)
    assert result.message == ("0/4 nodes are available: 4 node(s) didn't match pod affinity rules.")


# ------------------------------------------------------------------ scores (scoring_test.go)

SCORE_NODES = [
    mknode("e1", region="east", zone="e"),
    mknode("e2", region="east", zone="e"),
    mknode("w1", region="west", zone="w"),
    mknode("n1", region="north", zone="n"),
]

SCORES: list[tuple[str, list[dict[str, Any]], dict[str, Any], dict[str, int] | None, Any]] = [
    (
        "no terms anywhere: skipped",
        [mkpod("db", DB, on="e1")],
        mkpod("in", WEB),
        None,
        None,
    ),
    (
        "preferred affinity: the region holding the matching pod scores 100",
        [mkpod("db", DB, on="e1")],
        mkpod("in", WEB, aff=affinity(preferred=[weighted(5, term(sel(tier="db"), "region"))])),
        {"e1": 100, "e2": 100, "w1": 0, "n1": 0},
        None,
    ),
    (
        "preferred anti-affinity: the region holding the pod scores 0",
        [mkpod("db", DB, on="w1")],
        mkpod(
            "in", WEB, aff=affinity(preferred_anti=[weighted(5, term(sel(tier="db"), "region"))])
        ),
        {"e1": 100, "e2": 100, "w1": 0, "n1": 100},
        None,
    ),
    (
        "weights add per matching pod; min-max scaled and truncated",
        [mkpod("db1", DB, on="e1"), mkpod("db2", DB, on="w1"), mkpod("db3", DB, on="w1")],
        mkpod(
            "in",
            WEB,
            aff=affinity(
                preferred=[weighted(4, term(sel(tier="db"), "region"))],
                preferred_anti=[weighted(3, term(sel(tier="db"), HOST))],
            ),
        ),
        # raw: e1 = 4 - 3 = 1, e2 = 4, w1 = 8 - 6 = 2, n1 = 0 -> (x - 0) * 100 / 4
        {"e1": 25, "e2": 100, "w1": 50, "n1": 0},
        None,
    ),
    (
        "existing pod's required affinity matching the incoming pod adds hardPodAffinityWeight",
        [mkpod("db", DB, on="n1", aff=affinity([term(sel(tier="web"), "region")]))],
        mkpod("in", WEB),
        {"e1": 0, "e2": 0, "w1": 0, "n1": 100},
        None,
    ),
    (
        "hardPodAffinityWeight 0 leaves it out: skipped",
        [mkpod("db", DB, on="n1", aff=affinity([term(sel(tier="web"), "region")]))],
        mkpod("in", WEB),
        None,
        InterPodAffinityArgs(hard_pod_affinity_weight=0),
    ),
    (
        "existing pods' preferred terms: affinity raises, anti-affinity lowers",
        [
            mkpod(
                "a",
                DB,
                on="e1",
                aff=affinity(preferred=[weighted(10, term(sel(tier="web"), "region"))]),
            ),
            mkpod(
                "b",
                DB,
                on="w1",
                aff=affinity(preferred_anti=[weighted(10, term(sel(tier="web"), "zone"))]),
            ),
        ],
        mkpod("in", WEB),
        # raw: east 10, west -10, north 0 -> (x + 10) * 100 / 20
        {"e1": 100, "e2": 100, "w1": 0, "n1": 50},
        None,
    ),
    (
        "ignorePreferredTermsOfExistingPods without terms of its own: skipped",
        [
            mkpod(
                "a",
                DB,
                on="e1",
                aff=affinity(preferred=[weighted(10, term(sel(tier="web"), "region"))]),
            )
        ],
        mkpod("in", WEB),
        None,
        InterPodAffinityArgs(ignore_preferred_terms_of_existing_pods=True),
    ),
    (
        "every feasible node in one domain: all 0",
        [mkpod("db", DB, on="e1")],
        mkpod("in", WEB, aff=affinity(preferred=[weighted(5, term(sel(tier="db"), "everywhere"))])),
        None,
        "one-domain",
    ),
    (
        "a weight that sums to zero still scores (kube's map entry exists): all 0",
        [mkpod("db", DB, on="e1")],
        mkpod(
            "in",
            WEB,
            aff=affinity(
                preferred=[weighted(5, term(sel(tier="db"), "region"))],
                preferred_anti=[weighted(5, term(sel(tier="db"), "region"))],
            ),
        ),
        {"e1": 0, "e2": 0, "w1": 0, "n1": 0},
        None,
    ),
    (
        "preferred affinity with a namespaceSelector",
        [mkpod("db", DB, on="w1", ns="team-a"), mkpod("db2", DB, on="e1", ns="team-b")],
        mkpod(
            "in",
            WEB,
            aff=affinity(
                preferred=[
                    weighted(7, term(sel(tier="db"), "region", namespaceSelector=sel(team="blue")))
                ]
            ),
        ),
        {"e1": 0, "e2": 0, "w1": 100, "n1": 0},
        None,
    ),
]


@pytest.mark.parametrize(
    ("existing", "incoming", "want", "variant"),
    [case[1:] for case in SCORES],
    ids=[case[0] for case in SCORES],
)
def test_scores(
    existing: list[dict[str, Any]],
    incoming: dict[str, Any],
    want: dict[str, int] | None,
    variant: Any,
) -> None:
    nodes = SCORE_NODES
    if variant == "one-domain":
        nodes = [mknode(n, everywhere="x") for n in ("e1", "e2")]
        want = {"e1": 0, "e2": 0}
    args = variant if isinstance(variant, InterPodAffinityArgs) else InterPodAffinityArgs()
    cache = cluster(nodes, existing, namespaces={"team-a": {"team": "blue"}, "team-b": {}})
    reasons, scores = run_plugin(InterPodAffinity(args), cache, incoming)
    assert not any(reasons.values())
    assert scores == want


# ------------------------------------------------------------------ args and bad input


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {"hardPodAffinityWeight": 101},
            "args.hardPodAffinityWeight: Invalid value: 101: not in valid range [0-100]",
        ),
        (
            {"hardPodAffinityWeight": -1},
            "args.hardPodAffinityWeight: Invalid value: -1: not in valid range [0-100]",
        ),
        ({"hardPodAffinityWeight": "1"}, "args.hardPodAffinityWeight: must be an integer"),
        ({"ignorePreferredTermsOfExistingPods": "yes"}, "args.ignorePreferredTermsOfExistingPods"),
        ({"weight": 1}, 'args.weight: unknown field "weight"'),
    ],
)
def test_args_rejected_naming_the_field(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        new(raw, "args")
    assert message in str(err.value)


def test_args_defaults() -> None:
    plugin = new(None, "args")
    assert plugin.args == InterPodAffinityArgs(1, False)
    assert new({"hardPodAffinityWeight": 0}, "a").args.hard_pod_affinity_weight == 0


@pytest.mark.parametrize(
    ("aff", "field"),
    [
        (affinity([term(expr("tier", "In"), "zone")]), "labelSelector.matchExpressions[0].values"),
        (affinity([term(expr("tier", "Near", "x"), "zone")]), "matchExpressions[0].operator"),
        (
            affinity([term(sel(tier="db"), "")]),
            "requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey",
        ),
        (affinity(preferred=[weighted(0, term(sel(tier="db"), "zone"))]), "[0].weight"),
    ],
)
def test_bad_terms_name_the_field(aff: dict[str, Any], field: str) -> None:
    with pytest.raises(ModelError) as err:
        PodInfo.from_object(mkpod("bad", WEB, aff=aff))
    assert str(err.value).startswith("Pod default/bad: spec.affinity.pod")
    assert field in str(err.value)
