"""Property tests: quantity round trips, and vectorised == reference on random clusters.

The vectorised path (`Framework.schedule`) and the reference path
(`Framework.schedule_reference`) must agree on every verdict, reason, per-plugin score, total
and the chosen node; and the cache's incremental columns must equal a fresh rebuild after any
sequence of assume / forget / confirm / add / remove operations.
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction
from typing import Any

from core_support import container, framework, node, pod
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from scheduler.core.cache import Cache
from scheduler.core.framework import Framework, fit_error_message
from scheduler.core.model import NodeInfo, PodInfo
from scheduler.core.quantity import QuantityError, parse_quantity
from scheduler.core.reference import schedule_reference
from scheduler.core.snapshot import Snapshot

SETTINGS = settings(
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
Mi, Gi = 2**20, 2**30

# --------------------------------------------------------------------------- quantities

_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def _fmt(mantissa: int, decimals: int) -> str:
    """mantissa / 10**decimals as a decimal string."""
    sign = "-" if mantissa < 0 else ""
    digits = str(abs(mantissa)).rjust(decimals + 1, "0")
    if decimals == 0:
        return sign + digits
    return f"{sign}{digits[:-decimals]}.{digits[-decimals:]}"


@st.composite
def exact_quantities(draw: Any) -> tuple[str, Fraction]:
    """A random exact value in a random valid suffix, with the value it must parse to."""
    mantissa = draw(st.integers(-(10**12), 10**12))
    decimals = draw(st.integers(0, 6))
    kind = draw(st.sampled_from(["decimal", "binary", "exponent"]))
    number = Fraction(mantissa, 10**decimals)
    if kind == "decimal":
        suffix = draw(st.sampled_from(sorted(_DECIMAL)))
        value = number * _DECIMAL[suffix]
    elif kind == "binary":
        suffix = draw(st.sampled_from(sorted(_BINARY)))
        value = number * _BINARY[suffix]
    else:
        exponent = draw(st.integers(-9, 9))
        suffix = (
            draw(st.sampled_from(["e", "E"]))
            + draw(st.sampled_from(["", "+"] if exponent >= 0 else [""]))
            + str(exponent)
        )
        value = number * Fraction(10) ** exponent
    text = _fmt(mantissa, decimals) + suffix
    return text, value


def _kube_round(value: Fraction) -> Fraction:
    """kube's parse: round away from zero to a whole nano, cap at 2^63-1."""
    if value == 0:
        return value
    magnitude = abs(value) * 10**9
    nanos = -(-magnitude.numerator // magnitude.denominator)
    rounded = min(Fraction(nanos, 10**9), Fraction(2**63 - 1))
    return rounded if value > 0 else -rounded


@SETTINGS
@given(exact_quantities())
def test_quantity_round_trip(case: tuple[str, Fraction]) -> None:
    text, value = case
    assert parse_quantity(text) == _kube_round(value)


@SETTINGS
@given(
    st.text(alphabet="0123456789", min_size=0, max_size=400),
    st.text(alphabet="0123456789", min_size=0, max_size=400),
    st.sampled_from(["", "n", "m", "k", "E", "Ki", "Ei", "e-300", "e-130", "e+25", "e9"]),
)
def test_long_quantities_round_as_from_every_digit(whole: str, fraction: str, suffix: str) -> None:
    """Hundreds of digits: only the first ones are read exactly, the rest tell whether the
    value lies above them; the result is the one every digit gives."""
    text = f"{whole}.{fraction}{suffix}"
    digits = (whole + fraction) or "0"
    value = Fraction(int(digits), 10 ** len(fraction))
    if suffix in _DECIMAL:
        value *= _DECIMAL[suffix]
    elif suffix in _BINARY:
        value *= _BINARY[suffix]
    else:
        value *= Fraction(10) ** int(suffix[1:])
    assert parse_quantity(text) == _kube_round(value)


@SETTINGS
@given(st.text(alphabet="0123456789.+-eEinumkKMGTPxB _", min_size=1, max_size=12))
def test_quantity_grammar(text: str) -> None:
    """Anything the reference grammar rejects raises QuantityError; the rest parses."""
    import re

    shape = re.fullmatch(
        r"[+-]?[0-9]*(\.[0-9]*)?(?P<suffix>[eEinumkKMGTP]*[+-]?[0-9]*)", text.strip()
    )
    suffix_ok = shape is not None and (
        shape["suffix"] in _DECIMAL
        or shape["suffix"] in _BINARY
        or re.fullmatch(r"[eE][+-]?[0-9]+", shape["suffix"]) is not None
    )
    if shape is None or not suffix_ok or not text.strip():
        try:
            parse_quantity(text)
        except QuantityError:
            return
        raise AssertionError(f"{text!r} should be rejected")
    assert isinstance(parse_quantity(text), Fraction)


@SETTINGS
@given(
    st.text(min_size=1, max_size=8).filter(
        lambda t: any(c.isalpha() and c not in "eEinumkKMGTP" for c in t)
    )
)
def test_quantity_rejects_garbage(text: str) -> None:
    try:
        parse_quantity(text)
    except QuantityError:
        return
    raise AssertionError(f"{text!r} should be rejected")


# --------------------------------------------------------------------------- random clusters

LABEL_KEYS = ["zone", "disk", "gpu", "tier"]
LABEL_VALUES = ["a", "b", "1", "5", "10"]
IMAGES = ["img/a", "img/b:v1", "img/c:latest", "img/c"]
TAINT_KEYS = ["dedicated", "gpu", "spot"]
EFFECTS = ["NoSchedule", "PreferNoSchedule", "NoExecute"]
PORTS = [
    ("TCP", "", 80),
    ("TCP", "127.0.0.1", 80),
    ("UDP", "", 80),
    ("TCP", "10.0.0.1", 443),
    ("TCP", "0.0.0.0", 443),
]
GPU = "nvidia.com/gpu"


@st.composite
def nodes(draw: Any, index: int) -> dict[str, Any]:
    extra = {}
    if draw(st.booleans()):
        extra[GPU] = str(draw(st.integers(0, 8)))
    if draw(st.booleans()):
        extra["ephemeral-storage"] = f"{draw(st.integers(0, 100))}Gi"
    return node(
        f"node-{index}",
        cpu=f"{draw(st.integers(0, 16)) * 500}m",
        memory=f"{draw(st.integers(0, 32))}Gi",
        pods=draw(st.integers(0, 6)),
        labels=draw(
            st.dictionaries(st.sampled_from(LABEL_KEYS), st.sampled_from(LABEL_VALUES), max_size=3)
        ),
        taints=draw(
            st.lists(
                st.builds(
                    lambda k, v, e: {"key": k, "value": v, "effect": e},
                    st.sampled_from(TAINT_KEYS),
                    st.sampled_from(["", "x"]),
                    st.sampled_from(EFFECTS),
                ),
                max_size=2,
            )
        ),
        unschedulable=draw(st.booleans()),
        memory_pressure=draw(st.integers(0, 4)) == 0,
        extra=extra,
        images=draw(
            st.lists(
                st.tuples(
                    st.lists(st.sampled_from(IMAGES), min_size=1, max_size=2, unique=True),
                    st.integers(0, 2000).map(lambda m: m * Mi),
                ),
                max_size=3,
            )
        ),
    )


@st.composite
def resources(draw: Any) -> dict[str, str] | None:
    if draw(st.integers(0, 5)) == 0:
        return None
    out: dict[str, str] = {}
    if draw(st.booleans()):
        out["cpu"] = f"{draw(st.integers(0, 4000))}m"
    if draw(st.booleans()):
        out["memory"] = f"{draw(st.integers(0, 8 * 1024))}Mi"
    if draw(st.integers(0, 3)) == 0:
        out[GPU] = str(draw(st.integers(0, 4)))
    if draw(st.integers(0, 5)) == 0:
        out["ephemeral-storage"] = f"{draw(st.integers(0, 20))}Gi"
    return out


@st.composite
def containers(draw: Any, name: str) -> dict[str, Any]:
    ports = draw(st.lists(st.sampled_from(PORTS), max_size=2, unique=True))
    return container(
        name,
        draw(resources()),
        draw(resources()) if draw(st.integers(0, 4)) == 0 else None,
        image=draw(st.sampled_from(IMAGES)),
        ports=[
            {"containerPort": p, "hostPort": p, "hostIP": ip, "protocol": proto}
            for proto, ip, p in ports
        ],
    )


@st.composite
def pods(draw: Any, name: str, node_name: str | None) -> dict[str, Any]:
    main = [draw(containers(f"c{i}")) for i in range(draw(st.integers(0, 2)))]
    inits = []
    for i in range(draw(st.integers(0, 2))):
        c = draw(containers(f"i{i}"))
        if draw(st.booleans()):
            c["restartPolicy"] = "Always"
        inits.append(c)
    spec: dict[str, Any] = {}
    if draw(st.integers(0, 4)) == 0:
        spec["overhead"] = {"cpu": "100m", "memory": "64Mi"}
    return pod(
        name,
        containers=main,
        init_containers=inits,
        node_name=node_name,
        spec=spec,
        phase="Running" if node_name else "Pending",
    )


@st.composite
def requirements(draw: Any, node_names: list[str]) -> dict[str, Any]:
    op = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Bogus"]))
    key = draw(st.sampled_from([*LABEL_KEYS, "bad key"]))
    if op in ("In", "NotIn"):
        values = draw(st.lists(st.sampled_from([*LABEL_VALUES, "x y"]), max_size=2))
    elif op in ("Gt", "Lt"):
        values = draw(st.lists(st.sampled_from(["0", "3", "7", "x"]), min_size=0, max_size=2))
    else:
        values = draw(st.lists(st.sampled_from(LABEL_VALUES), max_size=1))
    out: dict[str, Any] = {"key": key, "operator": op}
    if values:
        out["values"] = values
    return out


@st.composite
def terms(draw: Any, node_names: list[str]) -> dict[str, Any]:
    term: dict[str, Any] = {
        "matchExpressions": draw(st.lists(requirements(node_names), max_size=2))
    }
    if draw(st.integers(0, 3)) == 0:
        term["matchFields"] = [
            {
                "key": "metadata.name",
                "operator": draw(st.sampled_from(["In", "In", "NotIn"])),
                "values": [draw(st.sampled_from([*node_names, "ghost"]))],
            }
        ]
    return term


@st.composite
def pending_pods(draw: Any, node_names: list[str]) -> PodInfo:
    obj = draw(pods("pending", None))
    spec = obj["spec"]
    if draw(st.booleans()):
        spec["nodeSelector"] = draw(
            st.dictionaries(st.sampled_from(LABEL_KEYS), st.sampled_from(LABEL_VALUES), max_size=2)
        )
    affinity: dict[str, Any] = {}
    if draw(st.booleans()):
        affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": draw(st.lists(terms(node_names), max_size=2))
        }
    if draw(st.booleans()):
        affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": draw(st.integers(1, 100)), "preference": draw(terms(node_names))}
            for _ in range(draw(st.integers(1, 3)))
        ]
    if affinity:
        spec["affinity"] = {"nodeAffinity": affinity}
    spec["tolerations"] = draw(
        st.lists(
            st.builds(
                lambda k, op, v, e: {
                    k2: v2
                    for k2, v2 in {"key": k, "operator": op, "value": v, "effect": e}.items()
                    if v2
                },
                st.sampled_from(["", *TAINT_KEYS, "node.kubernetes.io/unschedulable"]),
                st.sampled_from(["", "Equal", "Exists"]),
                st.sampled_from(["", "x"]),
                st.sampled_from(["", *EFFECTS]),
            ),
            max_size=3,
        )
    )
    return PodInfo.from_object(obj)


def _no_gpu_frameworks() -> list[Framework]:
    gpu_resources = [
        {"name": "cpu", "weight": 1},
        {"name": "memory", "weight": 2},
        {"name": GPU, "weight": 3},
    ]
    return [
        framework(),
        framework(
            plugin_config=[
                {
                    "name": "NodeResourcesFit",
                    "args": {
                        "scoringStrategy": {"type": "MostAllocated", "resources": gpu_resources}
                    },
                },
                {
                    "name": "NodeResourcesBalancedAllocation",
                    "args": {
                        "resources": [
                            {"name": "cpu"},
                            {"name": "memory"},
                            {"name": GPU},
                            {"name": "ephemeral-storage"},
                        ]
                    },
                },
            ]
        ),
        framework(
            plugin_config=[
                {
                    "name": "NodeResourcesFit",
                    "args": {
                        "scoringStrategy": {
                            "type": "RequestedToCapacityRatio",
                            "resources": gpu_resources,
                            "requestedToCapacityRatio": {
                                "shape": [
                                    {"utilization": 0, "score": 0},
                                    {"utilization": 30, "score": 8},
                                    {"utilization": 100, "score": 3},
                                ]
                            },
                        }
                    },
                }
            ]
        ),
    ]


# Shared across examples on purpose: plugin caches must not leak between snapshots.
FRAMEWORKS = _no_gpu_frameworks()


@st.composite
def clusters(draw: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]], PodInfo]:
    node_objs = [draw(nodes(i)) for i in range(draw(st.integers(1, 6)))]
    names = [n["metadata"]["name"] for n in node_objs]
    bound = [
        draw(pods(f"bound-{i}", draw(st.sampled_from([*names, "ghost-node"]))))
        for i in range(draw(st.integers(0, 10)))
    ]
    return node_objs, bound, draw(pending_pods(names))


def _new_cache() -> Cache:
    return Cache()


def _build(node_objs: list[dict[str, Any]], bound: list[dict[str, Any]]) -> Cache:
    cache = _new_cache()
    for n in node_objs:
        cache.add_node(NodeInfo.from_object(n))
    for p in bound:
        cache.add_pod(PodInfo.from_object(p))
    return cache


def assert_paths_agree(fw: Framework, p: PodInfo, snap: Snapshot) -> str | None:
    result = fw.schedule(p, snap)
    ref = schedule_reference(fw, p, snap)
    live = sorted(snap.live_slots(), key=lambda s: snap.names[s] or "")
    slot_of = {snap.names[s]: s for s in live}
    for slot in live:
        name = snap.names[slot]
        assert bool(result.feasible[slot]) == (name not in ref.reasons), name
        assert result.node_reasons(slot) == ref.reasons.get(str(name), []), name
    assert set(result.scores) == set(ref.scores)
    for plugin, by_name in ref.scores.items():
        got = {n: int(result.scores[plugin][slot_of[n]]) for n in by_name}
        assert got == by_name, plugin
    assert {n: int(result.totals[slot_of[n]]) for n in ref.totals} == ref.totals
    assert result.node == ref.node
    if result.node is None and live:
        prefilter = result.prefilter_message
        if prefilter is not None:
            expected = f"0/{len(live)} nodes are available: {prefilter}."
        else:
            counts = Counter(r for reasons in ref.reasons.values() for r in reasons)
            expected = fit_error_message(len(live), counts)
        assert result.message == expected
    return result.node


@SETTINGS
@given(clusters(), st.integers(0, len(FRAMEWORKS) - 1))
def test_vectorised_equals_reference(
    cluster: tuple[list[dict[str, Any]], list[dict[str, Any]], PodInfo], which: int
) -> None:
    node_objs, bound, p = cluster
    cache = _build(node_objs, bound)
    assert_paths_agree(FRAMEWORKS[which], p, cache.snapshot)


# --------------------------------------------------------------------------- cache sequences


def _columns(snap: Snapshot) -> dict[str, Any]:
    """Everything the plugins read, keyed by node name (slots differ between caches)."""
    out: dict[str, Any] = {}
    for name, slot in snap.index.items():
        rows = {
            r: int(snap.requested[snap.row[r], slot])
            for r in snap.resources
            if int(snap.requested[snap.row[r], slot])
        }
        alloc = {
            r: int(snap.allocatable[snap.row[r], slot])
            for r in snap.resources
            if int(snap.allocatable[snap.row[r], slot])
        }
        ports = {
            key: dict(by_slot[slot]) for key, by_slot in snap.port_index.items() if slot in by_slot
        }
        images = {
            image: holders[slot] for image, holders in snap.image_index.items() if slot in holders
        }
        out[name] = {
            "live": bool(snap.live[slot]),
            "requested": rows,
            "allocatable": alloc,
            "non_zero": (int(snap.non_zero_cpu[slot]), int(snap.non_zero_memory[slot])),
            "pod_count": int(snap.pod_count[slot]),
            "pods": sorted(snap.pods[slot]),
            "ports": ports,
            "used_ports": dict(snap.ports[slot]),
            "images": images,
            "unschedulable": bool(snap.unschedulable[slot]),
            "memory_pressure": bool(snap.memory_pressure[slot]),
            "tainted": slot in snap.tainted,
            "node": snap.nodes[slot],
        }
    assert snap.live_count == sum(1 for v in out.values() if v["live"])
    return out


OPS = [
    "add",
    "assume",
    "forget",
    "confirm",
    "remove",
    "update_node",
    "remove_node",
    "unbind",
    "terminate",
]


@SETTINGS
@given(st.data())
def test_cache_incremental_equals_rebuild(data: Any) -> None:
    node_objs = [data.draw(nodes(i)) for i in range(data.draw(st.integers(1, 4)))]
    names = [n["metadata"]["name"] for n in node_objs]
    cache = _new_cache()
    live_nodes: dict[str, NodeInfo] = {}
    for n in node_objs:
        info = NodeInfo.from_object(n)
        cache.add_node(info)
        live_nodes[info.name] = info
    # The model: pod key -> (pod, node name, assumed).
    model: dict[str, tuple[PodInfo, str, bool]] = {}
    keys = [f"default/p{i}" for i in range(6)]
    for _ in range(data.draw(st.integers(1, 25))):
        op = data.draw(st.sampled_from(OPS))
        key = data.draw(st.sampled_from(keys))
        name = key.split("/")[1]
        target = data.draw(st.sampled_from([*names, "ghost-node"]))
        if op in ("add", "assume", "unbind", "terminate"):
            obj = data.draw(pods(name, target if op in ("add", "terminate") else None))
            if op == "terminate":
                obj["status"]["phase"] = data.draw(st.sampled_from(["Succeeded", "Failed"]))
            p = PodInfo.from_object(obj)
            if op == "assume":
                cache.assume(p, target)
                model[key] = (p, target, True)
            else:
                cache.add_pod(p)
                old = model.get(key)
                if op == "add":
                    model[key] = (p, target, False)
                elif old is not None and not (old[2] and op == "unbind"):
                    del model[key]
        elif op == "forget":
            cache.forget(key)
            if key in model and model[key][2]:
                del model[key]
        elif op == "confirm":
            cache.confirm(key)
            if key in model:
                model[key] = (model[key][0], model[key][1], False)
        elif op == "remove":
            cache.remove_pod(key)
            model.pop(key, None)
        elif op == "update_node":
            info = NodeInfo.from_object(
                data.draw(nodes(int(target.split("-")[-1])))
                if target != "ghost-node"
                else data.draw(nodes(99))
            )
            cache.update_node(info)
            live_nodes[info.name] = info
        elif op == "remove_node":
            cache.remove_node(target)
            live_nodes.pop(target, None)
        assert cache.pod_count == len(model)
        for k, (_p, where, assumed) in model.items():
            assert cache.node_of(k) == where
            assert cache.is_assumed(k) == assumed

    fresh = _new_cache()
    for info in live_nodes.values():
        fresh.add_node(info)
    for p, where, assumed in model.values():
        if assumed or p.node_name != where:  # assumed, or an assumption confirmed
            fresh.assume(p, where)
            if not assumed:
                fresh.confirm(p.key)
        else:
            fresh.add_pod(p)
    assert _columns(cache.snapshot) == _columns(fresh.snapshot)

    p = data.draw(pending_pods(names))
    fw = FRAMEWORKS[data.draw(st.integers(0, len(FRAMEWORKS) - 1))]
    chosen = assert_paths_agree(fw, p, cache.snapshot)
    assert chosen == assert_paths_agree(fw, p, fresh.snapshot)
