"""Upstream kube-scheduler plugin cases, ported as data, for the non-resource plugins.

Sources (kube-scheduler, pkg/scheduler/framework/plugins): imagelocality/image_locality_test.go,
nodeports/node_ports_test.go, nodeaffinity/node_affinity_test.go (filter, PreFilter
matchFields, score), tainttoleration/taint_toleration_test.go and
nodeunschedulable/node_unschedulable_test.go.
"""

from __future__ import annotations

from typing import Any

import pytest
from core_support import cache_of, container, filter_reasons, node, plugin_scores, pod

from plugins import image_locality, node_affinity, node_ports, node_unschedulable, taint_toleration
from scheduler.core.framework import CycleState, PreFilterResult
from scheduler.core.model import NodeInfo, PodInfo, normalized_image_name

MB = 1024 * 1024

# --------------------------------------------------------------------------- ImageLocality


def _image_pod(*images: str, init: tuple[str, ...] = ()) -> PodInfo:
    return PodInfo.from_object(
        pod(
            "p",
            containers=[container(f"c{i}", image=im) for i, im in enumerate(images)],
            init_containers=[container(f"i{i}", image=im) for i, im in enumerate(init)],
        )
    )


def _image_node(name: str, images: list[tuple[list[str], int]]) -> dict[str, Any]:
    return node(name, images=[(names, size * MB) for names, size in images])


NODE_40_300_2000 = [
    (["gcr.io/40:latest", "gcr.io/40:v1", "gcr.io/40:v1"], 40),
    (["gcr.io/300:latest", "gcr.io/300:v1"], 300),
    (["gcr.io/2000:latest"], 2000),
]
NODE_250_10 = [(["gcr.io/250:latest"], 250), (["gcr.io/10:latest", "gcr.io/10:v1"], 10)]
NODE_600_40_900 = [
    (["gcr.io/600:latest"], 600),
    (["gcr.io/40:latest"], 40),
    (["gcr.io/900:latest"], 900),
]
NODE_300_600_900 = [
    (["gcr.io/300:latest"], 300),
    (["gcr.io/600:latest"], 600),
    (["gcr.io/900:latest"], 900),
]
NODE_4000_30 = [(["gcr.io/4000:latest"], 4000), (["gcr.io/30:latest"], 30)]
NODE_20_30_40 = [(["gcr.io/20:latest"], 20), (["gcr.io/30:latest"], 30), (["gcr.io/40:latest"], 40)]

IMAGE_CASES = [
    (
        "two images spread on two nodes, prefer the larger image one",
        _image_pod("gcr.io/40", "gcr.io/250"),
        [NODE_40_300_2000, NODE_250_10],
        [0, 5],
    ),
    (
        "two images on one node, prefer this node",
        _image_pod("gcr.io/40", "gcr.io/300"),
        [NODE_40_300_2000, NODE_250_10],
        [7, 0],
    ),
    (
        "if exceed limit, use limit",
        _image_pod("gcr.io/10", "gcr.io/4000"),
        [NODE_4000_30, NODE_250_10],
        [100, 0],
    ),
    (
        "if exceed limit, use limit (with node which has no images present)",
        _image_pod("gcr.io/10", "gcr.io/4000"),
        [NODE_4000_30, NODE_250_10, []],
        [66, 0, 0],
    ),
    (
        "pod with multiple large images, node2 is preferred",
        _image_pod("gcr.io/300", "gcr.io/600", "gcr.io/900"),
        [NODE_600_40_900, NODE_300_600_900, []],
        [32, 36, 0],
    ),
    (
        "pod with multiple small images",
        _image_pod("gcr.io/30", "gcr.io/40"),
        [NODE_20_30_40, NODE_4000_30],
        [1, 0],
    ),
    (
        "include InitContainers: two images spread on two nodes, prefer the larger image one",
        _image_pod("gcr.io/30", init=("gcr.io/300",)),
        [NODE_40_300_2000, NODE_20_30_40],
        [6, 0],
    ),
]


@pytest.mark.parametrize(
    ("p", "node_images", "want"), [c[1:] for c in IMAGE_CASES], ids=[c[0] for c in IMAGE_CASES]
)
def test_image_locality(p: PodInfo, node_images: list[Any], want: list[int]) -> None:
    nodes = [_image_node(f"node{i + 1}", imgs) for i, imgs in enumerate(node_images)]
    got = plugin_scores(image_locality.new(None, "args"), p, cache_of(nodes))
    assert got == {f"node{i + 1}": w for i, w in enumerate(want)}


@pytest.mark.parametrize(
    ("name", "normalized"),
    [
        ("root", "root:latest"),
        ("gcr.io:5000/root", "gcr.io:5000/root:latest"),
        ("root:tag", "root:tag"),
        ("root@sha256:" + "ab" * 32, "root@sha256:" + "ab" * 32),
    ],
)
def test_normalized_image_name(name: str, normalized: str) -> None:
    assert normalized_image_name(name) == normalized


def test_image_locality_does_not_normalize_node_image_names() -> None:
    # kube keys node images by the names the node reports; only the pod's image gets ":latest".
    untagged = node("node1", images=[(["gcr.io/250"], 250 * MB)])
    tagged = node("node2", images=[(["gcr.io/250:latest"], 250 * MB)])
    got = plugin_scores(
        image_locality.new(None, "args"), _image_pod("gcr.io/250"), cache_of([untagged, tagged])
    )
    assert got == {"node1": 0, "node2": 10}


# --------------------------------------------------------------------------- NodePorts


def _port(proto: str, ip: str, port: int) -> dict[str, Any]:
    return {"containerPort": port, "hostPort": port, "hostIP": ip, "protocol": proto}


def _ports_pod(
    name: str, *ports: str, node_name: str | None = None, sidecar: bool = False
) -> dict[str, Any]:
    """Ports as 'PROTO/IP/PORT' strings, like upstream's newPod helper."""
    parsed = []
    for spec in ports:
        proto, ip, port = spec.split("/")
        parsed.append(_port(proto, ip, int(port)))
    c = container("c", ports=parsed, restart_policy="Always" if sidecar else None)
    if sidecar:
        return pod(name, containers=[container("main")], init_containers=[c], node_name=node_name)
    return pod(name, containers=[c], node_name=node_name)


PORT_CASES: list[tuple[str, list[str], list[str], bool]] = [
    ("nothing running", [], [], True),
    ("other port", ["UDP/127.0.0.1/8080"], ["UDP/127.0.0.1/9090"], True),
    ("same udp port", ["UDP/127.0.0.1/8080"], ["UDP/127.0.0.1/8080"], False),
    ("same tcp port", ["TCP/127.0.0.1/8080"], ["TCP/127.0.0.1/8080"], False),
    ("different host ip", ["TCP/127.0.0.1/8080"], ["TCP/127.0.0.2/8080"], True),
    ("different protocol", ["UDP/127.0.0.1/8080"], ["TCP/127.0.0.1/8080"], True),
    (
        "second udp port conflict",
        ["UDP/127.0.0.1/8000", "UDP/127.0.0.1/8080"],
        ["UDP/127.0.0.1/8080"],
        False,
    ),
    (
        "first tcp port conflict",
        ["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8080"],
        ["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8081"],
        False,
    ),
    (
        "first tcp port conflict due to 0.0.0.0 hostIP",
        ["TCP/0.0.0.0/8001"],
        ["TCP/127.0.0.1/8001"],
        False,
    ),
    (
        "TCP hostPort conflict due to 0.0.0.0 hostIP",
        ["TCP/10.0.10.10/8001", "TCP/0.0.0.0/8001"],
        ["TCP/127.0.0.1/8001"],
        False,
    ),
    (
        "second tcp port conflict to 0.0.0.0 hostIP",
        ["TCP/127.0.0.1/8001"],
        ["TCP/0.0.0.0/8001"],
        False,
    ),
    ("second different protocol", ["UDP/127.0.0.1/8001"], ["TCP/0.0.0.0/8001"], True),
    (
        "UDP hostPort conflict due to 0.0.0.0 hostIP",
        ["TCP/0.0.0.0/8001", "UDP/0.0.0.0/8001"],
        ["TCP/127.0.0.1/8001"],
        False,
    ),
    ("empty hostIP binds every address", ["TCP//8001"], ["TCP/127.0.0.1/8001"], False),
    ("empty protocol means TCP", ["/127.0.0.1/8001"], ["TCP/127.0.0.1/8001"], False),
]


@pytest.mark.parametrize(
    ("wanted", "used", "fits"), [c[1:] for c in PORT_CASES], ids=[c[0] for c in PORT_CASES]
)
def test_node_ports(wanted: list[str], used: list[str], fits: bool) -> None:
    cache = cache_of([node("n")], [_ports_pod("existing", *used, node_name="n")] if used else [])
    got = filter_reasons(
        node_ports.new(None, "args"), PodInfo.from_object(_ports_pod("p", *wanted)), cache
    )
    assert got == {"n": [] if fits else [node_ports.REASON]}


@pytest.mark.parametrize(
    ("pending_sidecar", "existing_sidecar"), [(True, False), (False, True), (True, True)]
)
def test_node_ports_count_restartable_init_containers(
    pending_sidecar: bool, existing_sidecar: bool
) -> None:
    cache = cache_of(
        [node("n")],
        [_ports_pod("e", "TCP/127.0.0.1/8080", node_name="n", sidecar=existing_sidecar)],
    )
    p = PodInfo.from_object(_ports_pod("p", "TCP/127.0.0.1/8080", sidecar=pending_sidecar))
    assert filter_reasons(node_ports.new(None, "args"), p, cache) == {"n": [node_ports.REASON]}


def test_node_ports_ignore_plain_init_containers_and_container_only_ports() -> None:
    init_port = pod(
        "e",
        containers=[container("main")],
        node_name="n",
        init_containers=[container("init", ports=[_port("TCP", "", 8080)])],
    )
    no_host = pod("f", containers=[container("c", ports=[{"containerPort": 8080}])], node_name="n")
    cache = cache_of([node("n")], [init_port, no_host])
    p = PodInfo.from_object(_ports_pod("p", "TCP/0.0.0.0/8080"))
    assert filter_reasons(node_ports.new(None, "args"), p, cache) == {"n": []}


# --------------------------------------------------------------------------- NodeAffinity

NAME_FIELD = "metadata.name"


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key, "operator": op}
    if values:
        out["values"] = list(values)
    return out


def term(*exprs: dict[str, Any], fields: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {"matchExpressions": list(exprs)}
    if fields:
        out["matchFields"] = list(fields)
    return out


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
        }
    }


def affinity_pod(
    affinity: dict[str, Any] | None = None, selector: dict[str, str] | None = None
) -> PodInfo:
    spec: dict[str, Any] = {}
    if affinity is not None:
        spec["affinity"] = affinity
    if selector is not None:
        spec["nodeSelector"] = selector
    return PodInfo.from_object(pod("p", spec=spec))


R = node_affinity.REASON
NAME1 = expr(NAME_FIELD, "In", "node1")
NAME2 = expr(NAME_FIELD, "In", "node2")

# (name, pod, node name, node labels, filter fits, PreFilter node names or "conflict" or None)
AFFINITY_FILTER: list[tuple[str, PodInfo, str, dict[str, str], bool, Any]] = [
    ("missing labels", affinity_pod(selector={"foo": "bar"}), "n", {}, False, None),
    ("same labels", affinity_pod(selector={"foo": "bar"}), "n", {"foo": "bar"}, True, None),
    (
        "node labels are superset",
        affinity_pod(selector={"foo": "bar"}),
        "n",
        {"foo": "bar", "baz": "blah"},
        True,
        None,
    ),
    (
        "node labels are subset",
        affinity_pod(selector={"foo": "bar", "baz": "blah"}),
        "n",
        {"foo": "bar"},
        False,
        None,
    ),
    (
        "matchExpressions using In operator that matches the existing node",
        affinity_pod(required(term(expr("foo", "In", "bar", "value2")))),
        "n",
        {"foo": "bar"},
        True,
        None,
    ),
    (
        "matchExpressions using Gt operator that matches the existing node",
        affinity_pod(required(term(expr("kernel-version", "Gt", "0204")))),
        "n",
        {"kernel-version": "0206"},
        True,
        None,
    ),
    (
        "matchExpressions using NotIn operator that matches the existing node",
        affinity_pod(required(term(expr("mem-type", "NotIn", "DDR", "DDR2")))),
        "n",
        {"mem-type": "DDR3"},
        True,
        None,
    ),
    (
        "matchExpressions using Exists operator that matches the existing node",
        affinity_pod(required(term(expr("GPU", "Exists")))),
        "n",
        {"GPU": "NVIDIA-GRID-K1"},
        True,
        None,
    ),
    (
        "affinity that don't match node's labels won't schedule onto the node",
        affinity_pod(required(term(expr("foo", "In", "value1", "value2")))),
        "n",
        {"foo": "bar"},
        False,
        None,
    ),
    (
        "empty MatchExpressions is not a valid value will match no objects",
        affinity_pod(required(term())),
        "n",
        {"foo": "bar"},
        False,
        None,
    ),
    ("no Affinity will schedule onto a node", affinity_pod(), "n", {"foo": "bar"}, True, None),
    (
        "Affinity but nil NodeSelector will schedule onto a node",
        affinity_pod({"nodeAffinity": {}}),
        "n",
        {"foo": "bar"},
        True,
        None,
    ),
    (
        "multiple matchExpressions ANDed that matches the existing node",
        affinity_pod(required(term(expr("GPU", "Exists"), expr("GPU", "NotIn", "AMD", "INTER")))),
        "n",
        {"GPU": "NVIDIA-GRID-K1"},
        True,
        None,
    ),
    (
        "multiple matchExpressions ANDed that doesn't match the existing node",
        affinity_pod(required(term(expr("GPU", "Exists"), expr("GPU", "In", "AMD", "INTER")))),
        "n",
        {"GPU": "NVIDIA-GRID-K1"},
        False,
        None,
    ),
    (
        "multiple NodeSelectorTerms ORed in affinity, matches the node's labels",
        affinity_pod(
            required(
                term(expr("foo", "In", "bar", "value2")),
                term(expr("diffkey", "In", "wrong", "value2")),
            )
        ),
        "n",
        {"foo": "bar"},
        True,
        None,
    ),
    (
        "Affinity and PodSpec.NodeSelector both satisfied",
        affinity_pod(required(term(expr("foo", "Exists"))), {"foo": "bar"}),
        "n",
        {"foo": "bar"},
        True,
        None,
    ),
    (
        "Affinity matches but PodSpec.NodeSelector is not satisfied",
        affinity_pod(required(term(expr("foo", "Exists"))), {"foo": "bar"}),
        "n",
        {"foo": "barrrrrr"},
        False,
        None,
    ),
    (
        "an invalid value in Affinity term won't be scheduled onto the node",
        affinity_pod(required(term(expr("foo", "NotIn", "invalid value: ___@#$%^")))),
        "n",
        {"foo": "bar"},
        False,
        None,
    ),
    (
        "matchFields using In operator that matches the existing node",
        affinity_pod(required(term(fields=(NAME1,)))),
        "node1",
        {},
        True,
        {"node1"},
    ),
    (
        "matchFields using In operator that does not match the existing node",
        affinity_pod(required(term(fields=(NAME1,)))),
        "node2",
        {},
        False,
        {"node1"},
    ),
    (
        "two terms: matchFields does not match, but matchExpressions matches",
        affinity_pod(required(term(fields=(NAME1,)), term(expr("foo", "In", "bar")))),
        "node2",
        {"foo": "bar"},
        True,
        None,
    ),
    (
        "one term: matchFields does not match, but matchExpressions matches",
        affinity_pod(required(term(expr("foo", "In", "bar"), fields=(NAME1,)))),
        "node2",
        {"foo": "bar"},
        False,
        {"node1"},
    ),
    (
        "one term: both matchFields and matchExpressions match",
        affinity_pod(required(term(expr("foo", "In", "bar"), fields=(NAME1,)))),
        "node1",
        {"foo": "bar"},
        True,
        {"node1"},
    ),
    (
        "two terms: both matchFields and matchExpressions do not match",
        affinity_pod(required(term(fields=(NAME1,)), term(expr("foo", "In", "not-match-to-bar")))),
        "node2",
        {"foo": "bar"},
        False,
        None,
    ),
    (
        "two terms of node.Name affinity",
        affinity_pod(required(term(fields=(NAME1,)), term(fields=(NAME2,)))),
        "node2",
        {},
        True,
        {"node1", "node2"},
    ),
    (
        "two conflicting match field requirements",
        affinity_pod(required(term(fields=(NAME1, NAME2)))),
        "node2",
        {"foo": "bar"},
        False,
        "conflict",
    ),
    (
        "Matches node selector correctly even if PreFilter is not called",
        affinity_pod(selector={"foo": "bar"}),
        "n",
        {"foo": "bar", "baz": "blah"},
        True,
        None,
    ),
    (
        "Matches node affinity correctly even if PreFilter is not called",
        affinity_pod(required(term(expr("GPU", "Exists"), expr("GPU", "NotIn", "AMD", "INTER")))),
        "n",
        {"GPU": "NVIDIA-GRID-K1"},
        True,
        None,
    ),
    # Go-semantics edge cases of the label selector library.
    (
        "required affinity with no terms matches nothing",
        affinity_pod(required()),
        "n",
        {"foo": "bar"},
        False,
        None,
    ),
    (
        "Gt needs an integer node label",
        affinity_pod(required(term(expr("v", "Gt", "1")))),
        "n",
        {"v": "abc"},
        False,
        None,
    ),
    (
        "Gt parses like Go's ParseInt: no underscores",
        affinity_pod(required(term(expr("v", "Gt", "1")))),
        "n",
        {"v": "1_000"},
        False,
        None,
    ),
    (
        "Lt value beyond int64 is invalid",
        affinity_pod(required(term(expr("v", "Lt", "99999999999999999999")))),
        "n",
        {"v": "1"},
        False,
        None,
    ),
    (
        "Gt with two values is invalid",
        affinity_pod(required(term(expr("v", "Gt", "1", "2")))),
        "n",
        {"v": "5"},
        False,
        None,
    ),
    (
        "Exists with values is invalid",
        affinity_pod(required(term(expr("v", "Exists", "x")))),
        "n",
        {"v": "x"},
        False,
        None,
    ),
    (
        "unknown operator is invalid",
        affinity_pod(required(term(expr("v", "Equals", "x")))),
        "n",
        {"v": "x"},
        False,
        None,
    ),
    (
        "an invalid key makes the term invalid",
        affinity_pod(required(term(expr("invalid key", "DoesNotExist")))),
        "n",
        {},
        False,
        None,
    ),
    (
        "an invalid term does not spoil a valid one",
        affinity_pod(required(term(expr("v", "Gt", "x")), term(expr("foo", "In", "bar")))),
        "n",
        {"foo": "bar"},
        True,
        None,
    ),
    (
        "NotIn matches a node without the label",
        affinity_pod(required(term(expr("foo", "NotIn", "bar")))),
        "n",
        {},
        True,
        None,
    ),
    (
        "nodeSelector with an empty value needs the label present",
        affinity_pod(selector={"foo": ""}),
        "n",
        {},
        False,
        None,
    ),
]


@pytest.mark.parametrize(
    ("p", "node_name", "labels", "fits", "prefilter"),
    [c[1:] for c in AFFINITY_FILTER],
    ids=[c[0] for c in AFFINITY_FILTER],
)
def test_node_affinity_filter(
    p: PodInfo, node_name: str, labels: dict[str, str], fits: bool, prefilter: Any
) -> None:
    plugin = node_affinity.new(None, "args")
    cache = cache_of([node(node_name, labels=labels)])
    assert filter_reasons(plugin, p, cache) == {node_name: [] if fits else [R]}
    result = plugin.pre_filter(CycleState(), p, cache.snapshot)
    if prefilter is None:
        assert result is None
    elif prefilter == "conflict":
        assert result == PreFilterResult(unschedulable="pod affinity terms conflict")
    else:
        assert result == PreFilterResult(node_names=frozenset(prefilter))


def test_node_affinity_prefilter_conflict_fails_every_node_with_its_reason() -> None:
    from core_support import framework

    fw = framework()
    cache = cache_of([node("node1"), node("node2")])
    p = affinity_pod(required(term(fields=(NAME1, NAME2))))
    result = fw.schedule(p, cache.snapshot)
    assert result.node is None
    assert result.message == "0/2 nodes are available: pod affinity terms conflict."


def test_node_affinity_prefilter_restricts_other_nodes() -> None:
    from core_support import framework

    fw = framework()
    cache = cache_of([node("node1", cpu="1"), node("node2"), node("node3")])
    p = PodInfo.from_object(
        pod("p", {"cpu": "2"}, spec={"affinity": required(term(fields=(NAME1,)))})
    )
    result = fw.schedule(p, cache.snapshot)
    assert result.node is None
    assert result.message == (
        "0/3 nodes are available: 1 Insufficient cpu, "
        "2 node(s) didn't satisfy plugin(s) [NodeAffinity]."
    )


LABEL1 = {"foo": "bar"}
LABEL2 = {"key": "value"}
LABEL3 = {"az": "az1"}
LABEL4 = {"abc": "az11", "def": "az22"}
LABEL5 = {"foo": "bar", "key": "value", "az": "az1"}


def preferred(*terms: tuple[int, dict[str, Any]]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": w, "preference": t} for w, t in terms
            ]
        }
    }


AFFINITY1 = preferred((2, term(expr("foo", "In", "bar"))))
AFFINITY2 = preferred(
    (2, term(expr("foo", "In", "bar"))),
    (4, term(expr("key", "In", "value"))),
    (5, term(expr("foo", "In", "bar"), expr("key", "In", "value"), expr("az", "In", "az1"))),
)

AFFINITY_SCORE: list[tuple[str, PodInfo, list[tuple[str, dict[str, str]]], Any]] = [
    (
        "all nodes are same priority as NodeAffinity is nil (score skipped)",
        affinity_pod(),
        [("node1", LABEL1), ("node2", LABEL2), ("node3", LABEL3)],
        None,
    ),
    (
        "no node matches preferred scheduling requirements so all nodes' priority is zero",
        affinity_pod(AFFINITY1),
        [("node1", LABEL4), ("node2", LABEL2), ("node3", LABEL3)],
        {"node1": 0, "node2": 0, "node3": 0},
    ),
    (
        "only node1 matches the preferred scheduling requirements of pod",
        affinity_pod(AFFINITY1),
        [("node1", LABEL1), ("node2", LABEL2), ("node3", LABEL3)],
        {"node1": 100, "node2": 0, "node3": 0},
    ),
    (
        "all nodes matches the preferred scheduling requirements of pod but with different "
        "priorities",
        affinity_pod(AFFINITY2),
        [("node1", LABEL1), ("node5", LABEL5), ("node2", LABEL2)],
        {"node1": 18, "node5": 100, "node2": 36},
    ),
    (
        "preferred matchFields term",
        affinity_pod(preferred((7, term(fields=(NAME2,))))),
        [("node1", {}), ("node2", {})],
        {"node1": 0, "node2": 100},
    ),
    (
        "empty preferred term is ignored",
        affinity_pod(preferred((7, term()))),
        [("node1", {}), ("node2", {})],
        {"node1": 0, "node2": 0},
    ),
]


@pytest.mark.parametrize(
    ("p", "nodes", "want"), [c[1:] for c in AFFINITY_SCORE], ids=[c[0] for c in AFFINITY_SCORE]
)
def test_node_affinity_score(
    p: PodInfo, nodes: list[tuple[str, dict[str, str]]], want: Any
) -> None:
    cache = cache_of([node(n, labels=labels) for n, labels in nodes])
    assert plugin_scores(node_affinity.new(None, "args"), p, cache) == want


def test_node_affinity_caches_follow_label_changes() -> None:
    plugin = node_affinity.new(None, "args")
    cache = cache_of([node("node1", labels={"foo": "bar"}), node("node2")])
    p = affinity_pod(required(term(expr("foo", "In", "bar"))))
    assert filter_reasons(plugin, p, cache) == {"node1": [], "node2": [R]}
    cache.update_node(NodeInfo.from_object(node("node2", labels={"foo": "bar"})))
    cache.update_node(NodeInfo.from_object(node("node1", labels={"foo": "baz"})))
    assert filter_reasons(plugin, p, cache) == {"node1": [R], "node2": []}
    sp = affinity_pod(AFFINITY1)
    assert plugin_scores(plugin, sp, cache) == {"node1": 0, "node2": 100}
    cache.update_node(NodeInfo.from_object(node("node1", labels={"foo": "bar"})))
    assert plugin_scores(plugin, sp, cache) == {"node1": 100, "node2": 100}


# --------------------------------------------------------------------------- TaintToleration


def taint(key: str, value: str, effect: str) -> dict[str, str]:
    return {"key": key, "value": value, "effect": effect}


def tol(key: str = "", op: str = "", value: str = "", effect: str = "") -> dict[str, str]:
    out = {"key": key, "operator": op, "value": value, "effect": effect}
    return {k: v for k, v in out.items() if v}


def tol_pod(*tolerations: dict[str, str]) -> PodInfo:
    return PodInfo.from_object(pod("p", spec={"tolerations": list(tolerations)}))


TAINT_FILTER: list[tuple[str, PodInfo, list[dict[str, str]], str | None]] = [
    (
        "A pod having no tolerations can't be scheduled onto a node with nonempty taints",
        tol_pod(),
        [taint("dedicated", "user1", "NoSchedule")],
        "node(s) had untolerated taint {dedicated: user1}",
    ),
    (
        "A pod which can be scheduled on a dedicated node assigned to user1 with effect NoSchedule",
        tol_pod(tol("dedicated", "Equal", "user1", "NoSchedule")),
        [taint("dedicated", "user1", "NoSchedule")],
        None,
    ),
    (
        "A pod which can't be scheduled on a dedicated node assigned to user2 with effect "
        "NoSchedule",
        tol_pod(tol("dedicated", "Equal", "user2", "NoSchedule")),
        [taint("dedicated", "user1", "NoSchedule")],
        "node(s) had untolerated taint {dedicated: user1}",
    ),
    (
        "A pod can be scheduled onto the node, with a toleration uses operator Exists",
        tol_pod(tol("foo", "Exists", effect="NoSchedule")),
        [taint("foo", "bar", "NoSchedule")],
        None,
    ),
    (
        "A pod has multiple tolerations, node has multiple taints, all the taints are tolerated",
        tol_pod(
            tol("dedicated", "Equal", "user2", "NoSchedule"),
            tol("foo", "Exists", effect="NoSchedule"),
        ),
        [taint("dedicated", "user2", "NoSchedule"), taint("foo", "bar", "NoSchedule")],
        None,
    ),
    (
        "A pod has a toleration that keys and values match the taint on the node, but (non-empty) "
        "effect doesn't match",
        tol_pod(tol("foo", "Equal", "bar", "PreferNoSchedule")),
        [taint("foo", "bar", "NoSchedule")],
        "node(s) had untolerated taint {foo: bar}",
    ),
    (
        "The pod has a toleration that keys and values match the taint on the node, the effect of "
        "toleration is empty",
        tol_pod(tol("foo", "Equal", "bar")),
        [taint("foo", "bar", "NoSchedule")],
        None,
    ),
    (
        "The pod has a toleration that key and value don't match the taint on the node, but the "
        "effect of taint on node is PreferNoSchedule",
        tol_pod(tol("dedicated", "Equal", "user2", "NoSchedule")),
        [taint("dedicated", "user1", "PreferNoSchedule")],
        None,
    ),
    (
        "The pod has no toleration, but the effect of taint on node is PreferNoSchedule",
        tol_pod(),
        [taint("dedicated", "user1", "PreferNoSchedule")],
        None,
    ),
    (
        "The pod has no toleration, and the taint on node is NoExecute",
        tol_pod(),
        [taint("node.kubernetes.io/not-ready", "", "NoExecute")],
        "node(s) had untolerated taint {node.kubernetes.io/not-ready: }",
    ),
    (
        "first untolerated taint is reported",
        tol_pod(tol("a", "Exists")),
        [
            taint("a", "1", "NoSchedule"),
            taint("b", "2", "NoExecute"),
            taint("c", "3", "NoSchedule"),
        ],
        "node(s) had untolerated taint {b: 2}",
    ),
    (
        "an empty key with Exists tolerates everything",
        tol_pod(tol(op="Exists")),
        [taint("a", "1", "NoSchedule"), taint("b", "2", "NoExecute")],
        None,
    ),
    (
        "an unknown operator tolerates nothing",
        tol_pod(tol("a", "Gt", "1")),
        [taint("a", "1", "NoSchedule")],
        "node(s) had untolerated taint {a: 1}",
    ),
]


@pytest.mark.parametrize(
    ("p", "taints", "reason"), [c[1:] for c in TAINT_FILTER], ids=[c[0] for c in TAINT_FILTER]
)
def test_taint_toleration_filter(
    p: PodInfo, taints: list[dict[str, str]], reason: str | None
) -> None:
    cache = cache_of([node("n", taints=taints)])
    got = filter_reasons(taint_toleration.new(None, "args"), p, cache)
    assert got == {"n": [reason] if reason else []}


PNS = "PreferNoSchedule"
TAINT_SCORE: list[tuple[str, PodInfo, list[list[dict[str, str]]], list[int]]] = [
    (
        "node with taints tolerated by the pod, gets a higher score than those node with "
        "intolerable taints",
        tol_pod(tol("foo", "Equal", "bar", PNS)),
        [[taint("foo", "bar", PNS)], [taint("foo", "blah", PNS)]],
        [100, 0],
    ),
    (
        "the nodes that all of their taints are tolerated by the pod, get the same score",
        tol_pod(tol("cpu-type", "Equal", "arm64", PNS), tol("disk-type", "Equal", "ssd", PNS)),
        [
            [],
            [taint("cpu-type", "arm64", PNS)],
            [taint("cpu-type", "arm64", PNS), taint("disk-type", "ssd", PNS)],
        ],
        [100, 100, 100],
    ),
    (
        "the more intolerable taints a node has, the lower score it gets",
        tol_pod(tol("foo", "Equal", "bar", PNS)),
        [
            [],
            [taint("cpu-type", "arm64", PNS)],
            [taint("cpu-type", "arm64", PNS), taint("disk-type", "ssd", PNS)],
        ],
        [100, 50, 0],
    ),
    (
        "only taints and tolerations that have effect PreferNoSchedule are checked",
        tol_pod(
            tol("cpu-type", "Equal", "arm64", "NoSchedule"),
            tol("disk-type", "Equal", "ssd", "NoSchedule"),
        ),
        [
            [],
            [taint("cpu-type", "arm64", "NoSchedule")],
            [taint("cpu-type", "arm64", PNS), taint("disk-type", "ssd", PNS)],
        ],
        [100, 100, 0],
    ),
    (
        "Default behaviour No taints and tolerations",
        tol_pod(),
        [[], [taint("cpu-type", "arm64", PNS)]],
        [100, 0],
    ),
    (
        "no PreferNoSchedule taint anywhere: every node gets 100",
        tol_pod(),
        [[], [taint("cpu-type", "arm64", "NoSchedule")]],
        [100, 100],
    ),
    (
        "a toleration with an empty effect tolerates PreferNoSchedule",
        tol_pod(tol("cpu-type", "Exists")),
        [[taint("cpu-type", "arm64", PNS)], [taint("x", "", PNS)]],
        [100, 0],
    ),
    (
        "three levels",
        tol_pod(),
        [
            [taint("a", "", PNS)],
            [taint("a", "", PNS), taint("b", "", PNS), taint("c", "", PNS)],
            [],
        ],
        [67, 0, 100],
    ),
]


@pytest.mark.parametrize(
    ("p", "node_taints", "want"), [c[1:] for c in TAINT_SCORE], ids=[c[0] for c in TAINT_SCORE]
)
def test_taint_toleration_score(p: PodInfo, node_taints: list[Any], want: list[int]) -> None:
    cache = cache_of([node(f"node{i}", taints=t) for i, t in enumerate(node_taints)])
    got = plugin_scores(taint_toleration.new(None, "args"), p, cache)
    assert got == {f"node{i}": w for i, w in enumerate(want)}


# --------------------------------------------------------------------------- NodeUnschedulable

UNSCHEDULABLE: list[tuple[str, PodInfo, bool, bool]] = [
    (
        "Does not schedule pod to unschedulable node (node.Spec.Unschedulable==true)",
        tol_pod(),
        True,
        False,
    ),
    ("Schedule pod to normal node", tol_pod(), False, True),
    (
        "Schedule pod with toleration to unschedulable node (node.Spec.Unschedulable==true)",
        tol_pod(tol("node.kubernetes.io/unschedulable", effect="NoSchedule", op="Exists")),
        True,
        True,
    ),
    (
        "a toleration of every NoSchedule taint tolerates a cordoned node",
        tol_pod(tol(op="Exists", effect="NoSchedule")),
        True,
        True,
    ),
    ("a NoExecute toleration does not", tol_pod(tol(op="Exists", effect="NoExecute")), True, False),
]


@pytest.mark.parametrize(
    ("p", "unschedulable", "fits"),
    [c[1:] for c in UNSCHEDULABLE],
    ids=[c[0] for c in UNSCHEDULABLE],
)
def test_node_unschedulable(p: PodInfo, unschedulable: bool, fits: bool) -> None:
    cache = cache_of([node("n", unschedulable=unschedulable)])
    got = filter_reasons(node_unschedulable.new(None, "args"), p, cache)
    assert got == {"n": [] if fits else ["node(s) were unschedulable"]}


def test_plugin_caches_do_not_leak_between_snapshots() -> None:
    # Two caches built the same way have the same node generation and size; a framework that
    # outlives one cache (a relist, a new simulation) must not reuse its verdicts.
    tainted = cache_of([node("a", taints=[taint("gpu", "x", "NoSchedule")]), node("b")])
    other = cache_of([node("a"), node("b", taints=[taint("spot", "", "NoSchedule")])])
    assert tainted.snapshot.node_generation == other.snapshot.node_generation
    tt = taint_toleration.new(None, "args")
    p = tol_pod()
    assert filter_reasons(tt, p, tainted) == {
        "a": ["node(s) had untolerated taint {gpu: x}"],
        "b": [],
    }
    assert filter_reasons(tt, p, other) == {
        "a": [],
        "b": ["node(s) had untolerated taint {spot: }"],
    }
    na = node_affinity.new(None, "args")
    q = affinity_pod(required(term(expr("zone", "In", "a"))))
    first = cache_of([node("a", labels={"zone": "a"}), node("b")])
    second = cache_of([node("a"), node("b", labels={"zone": "a"})])
    assert filter_reasons(na, q, first) == {"a": [], "b": [R]}
    assert filter_reasons(na, q, second) == {"a": [R], "b": []}
    s = affinity_pod(AFFINITY1)
    assert plugin_scores(na, s, cache_of([node("a", labels=LABEL1), node("b")])) == {
        "a": 100,
        "b": 0,
    }
    assert plugin_scores(na, s, cache_of([node("a"), node("b", labels=LABEL1)])) == {
        "a": 0,
        "b": 100,
    }
