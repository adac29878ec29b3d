"""GPUTopology plugin: vector path equals the per-node reference; reasons, scores, allocation."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from plugins import frameworks_for, gang_reservation_seconds, node_resources_fit
from plugins.gpu_topology import (
    REASON_NO_TOPOLOGY,
    REASON_NOT_ENOUGH,
    GPUTopology,
    new,
    parse_args,
)
from scheduler.core.cache import Cache
from scheduler.core.config import ConfigError, default_config, load_config
from scheduler.core.framework import CycleState, Framework
from scheduler.core.model import NodeInfo, PodInfo
from scheduler.core.topology import (
    ANNOTATION_GPUS,
    ANNOTATION_PLACEMENT,
    ANNOTATION_TOPOLOGY,
    builtin_topology,
    format_topology,
)


def node_obj(name: str, topology: str | None, gpus: int = 8) -> dict[str, Any]:
    annotations = {}
    if topology == "broken":
        annotations[ANNOTATION_TOPOLOGY] = json.dumps({"version": 1, "gpus": [{"index": 3}]})
    elif topology is not None:
        annotations[ANNOTATION_TOPOLOGY] = format_topology(builtin_topology(topology))
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {}, "annotations": annotations},
        "spec": {},
        "status": {
            "allocatable": {
                "cpu": "64",
                "memory": "512Gi",
                "pods": "110",
                "nvidia.com/gpu": str(gpus),
            },
            "conditions": [{"type": "MemoryPressure", "status": "False"}],
        },
    }


def pod_obj(
    name: str,
    gpus: int,
    *,
    node: str | None = None,
    held: str | None = None,
    placement: str | None = None,
) -> dict[str, Any]:
    annotations = {}
    if held is not None:
        annotations[ANNOTATION_GPUS] = held
    if placement is not None:
        annotations[ANNOTATION_PLACEMENT] = placement
    spec: dict[str, Any] = {
        "schedulerName": "topo-scheduler",
        "containers": [
            {"name": "c", "image": "x", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}
        ],
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}",
            "annotations": annotations,
        },
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


NODES = [
    ("h100-a", "dgx-h100"),
    ("h100-b", "dgx-h100"),
    ("h100-c", "dgx-h100"),
    ("pcie-a", "pcie-8gpu-2socket"),
    ("pcie-b", "pcie-8gpu-2socket"),
    ("dgx1-a", "dgx1-v100"),
    ("a100-a", "dgx-a100"),
    ("plain", None),
    ("broken", "broken"),
]
BOUND = [
    ("h100-b", "0,1,2,3"),
    ("h100-c", "0,1,2,3"),  # same topology and free mask as h100-b: one group
    ("pcie-b", "0,4"),
    ("dgx1-a", "1,6"),
    ("a100-a", "0,2,5"),
]


@pytest.fixture
def cache() -> Cache:
    cache = Cache()
    for name, topology in NODES:
        cache.add_node(NodeInfo.from_object(node_obj(name, topology)))
    for i, (name, held) in enumerate(BOUND):
        count = len(held.split(","))
        cache.add_pod(PodInfo.from_object(pod_obj(f"bound-{i}", count, node=name, held=held)))
    cache.add_pod(PodInfo.from_object(pod_obj("plain-user", 3, node="plain")))
    return cache


def _slot(cache: Cache, name: str) -> int:
    slot = cache.snapshot.slot(name)
    assert slot is not None
    return slot


PODS = [
    pod_obj(f"p{size}-{placement}", size, placement=placement)
    for size in (1, 2, 3, 4, 6, 8)
    for placement in (None, "nvlink", "single-numa")
]


@pytest.mark.parametrize("raw", PODS, ids=lambda p: p["metadata"]["name"])
def test_vector_equals_reference(cache: Cache, raw: dict[str, Any]) -> None:
    plugin = new(None, "args")
    pod = PodInfo.from_object(raw)
    snapshot = cache.snapshot
    live = snapshot.live.copy()
    masks = plugin.filter(CycleState(), pod, snapshot, live)
    feasible = live.copy()
    for slot in snapshot.live_slots():
        reasons = [reason for reason, mask in masks if mask[slot]]
        assert reasons == plugin.filter_node(pod, snapshot.node_state(slot)), snapshot.names[slot]
        feasible[slot] = not reasons
    scores = plugin.score(CycleState(), pod, snapshot, feasible)
    assert scores is not None
    slots = [int(s) for s in np.flatnonzero(feasible)]
    states = [snapshot.node_state(s) for s in slots]
    reference = plugin.score_nodes(pod, states, states)
    assert reference == [int(scores[s]) for s in slots]
    assert all(0 <= v <= 100 for v in reference)


def test_reasons(cache: Cache) -> None:
    plugin = new(None, "args")
    snapshot = cache.snapshot

    def reasons(raw: dict[str, Any], node: str) -> list[str]:
        pod = PodInfo.from_object(raw)
        masks = plugin.filter(CycleState(), pod, snapshot, snapshot.live.copy())
        return [reason for reason, mask in masks if mask[_slot(cache, node)]]

    assert reasons(pod_obj("a", 2, placement="nvlink"), "pcie-a") == [
        "node(s) didn't have 2 NVLink-connected free GPUs"
    ]
    assert reasons(pod_obj("a", 2, placement="nvlink"), "h100-a") == []
    # DGX-1 with 1 and 6 busy: quad 0,2,3 + 4,5,7 — no NVLinked four left.
    assert reasons(pod_obj("a", 4, placement="nvlink"), "dgx1-a") == [
        "node(s) didn't have 4 NVLink-connected free GPUs"
    ]
    assert reasons(pod_obj("a", 4, placement="single-numa"), "pcie-b") == [
        "node(s) didn't have 4 free GPUs on one NUMA node"
    ]
    assert reasons(pod_obj("a", 5), "h100-b") == [REASON_NOT_ENOUGH]
    for node in ("plain", "broken"):
        assert reasons(pod_obj("a", 2), node) == []  # count-only: best-effort passes
        assert reasons(pod_obj("a", 2, placement="single-numa"), node) == [REASON_NO_TOPOLOGY]
    # Pods without GPUs are not this plugin's business.
    cpu_pod = PodInfo.from_object(pod_obj("cpu", 0))
    assert plugin.filter(CycleState(), cpu_pod, snapshot, snapshot.live.copy()) == []
    assert plugin.score(CycleState(), cpu_pod, snapshot, snapshot.live.copy()) is None


def test_scores_prefer_best_set_then_tight_packing(cache: Cache) -> None:
    plugin = new(None, "args")
    snapshot = cache.snapshot
    feasible = snapshot.live.copy()

    def score(raw: dict[str, Any]) -> dict[str, int]:
        pod = PodInfo.from_object(raw)
        masks = plugin.filter(CycleState(), pod, snapshot, feasible)
        ok = feasible.copy()
        for _, mask in masks:
            ok &= ~mask
        values = plugin.score(CycleState(), pod, snapshot, ok)
        assert values is not None
        return {snapshot.names[s] or "": int(values[s]) for s in np.flatnonzero(ok)}

    eight = score(pod_obj("a", 8))
    assert max(eight, key=lambda n: eight[n]) == "h100-a"  # NVSwitch ring: 450 GB/s
    assert eight["h100-a"] == 100 and eight["pcie-a"] == 21  # ring 8 GB/s: 80 * 8 // 450 + 20
    two = score(pod_obj("b", 2))
    # Same NVSwitch pair quality on h100-a (8 free) and h100-b (4 free): the tighter wins.
    assert two["h100-b"] > two["h100-a"]
    assert two["h100-a"] > two["pcie-a"]
    one = score(pod_obj("c", 1))
    # One GPU: taken where the fastest free pair is slowest (PIX 22 GB/s on the PCIe boxes,
    # NV18 450 on the H100s; no topology: nothing known, nothing lost), then packing.
    assert one["pcie-a"] > one["a100-a"] > one["h100-a"]
    assert one["plain"] > one["pcie-a"] and one["pcie-b"] > one["pcie-a"]
    assert one["h100-a"] == 0 + 20 // 8  # gives up the fastest pair there is


def test_groups_share_one_search(cache: Cache) -> None:
    plugin = new(None, "args")
    pod = PodInfo.from_object(pod_obj("g", 2))
    plugin.filter(CycleState(), pod, cache.snapshot, cache.snapshot.live.copy())
    # 7 topology nodes, h100-b and h100-c share (topology, free mask): 6 searches.
    assert plugin.selector.stats.queries == 6


def test_allocation_and_framework(cache: Cache) -> None:
    plugin = new(None, "args")
    framework = Framework(
        "p", filters=[plugin], scores=[(plugin, 5)], pre_filters=[plugin], allocators=[plugin]
    )
    result = framework.schedule(
        PodInfo.from_object(pod_obj("x", 4, placement="nvlink")), cache.snapshot
    )
    assert result.node == "h100-b"  # NVSwitch quad, packs h100-b full
    assert result.allocation is not None and result.allocation.gpus == (4, 5, 6, 7)
    assert "4-5 NV18" in result.allocation.links
    assert result.allocation.score == 6 * (1800 + 20)  # 6 pairs of NV18 on one NUMA node
    big = framework.schedule(
        PodInfo.from_object(pod_obj("y", 8, placement="nvlink")), cache.snapshot
    )
    assert big.node in ("h100-a",)
    fit = node_resources_fit.new(None, "fit")
    with_fit = Framework(
        "p",
        filters=[fit, plugin],
        scores=[(plugin, 5)],
        pre_filters=[plugin],
        allocators=[plugin],
    )
    pod = PodInfo.from_object(pod_obj("z", 5, placement="single-numa"))
    none = with_fit.schedule(pod, cache.snapshot)
    assert none.node is None
    assert none.message == (
        "0/9 nodes are available: 2 Insufficient nvidia.com/gpu, "
        "2 node(s) didn't have a valid GPU topology, "
        "5 node(s) didn't have 5 free GPUs on one NUMA node."
    )
    bad = framework.schedule(PodInfo.from_object(pod_obj("w", 2, placement="fast")), cache.snapshot)
    assert bad.node is None and bad.message is not None
    assert f"annotation {ANNOTATION_PLACEMENT}: unknown value 'fast'" in bad.message
    # Count-only node: lowest free indices, no score.
    plain = plugin.allocate(
        CycleState(), PodInfo.from_object(pod_obj("v", 2)), cache.snapshot, _slot(cache, "plain")
    )
    assert plain is not None and plain.gpus == (0, 1) and plain.score is None
    cache.assume(PodInfo.from_object(pod_obj("v", 2)), "plain", (0, 1))
    again = plugin.allocate(
        CycleState(), PodInfo.from_object(pod_obj("u", 5)), cache.snapshot, _slot(cache, "plain")
    )
    assert again is not None and again.gpus == (2, 3, 4, 5, 6)
    assert (
        plugin.allocate(
            CycleState(),
            PodInfo.from_object(pod_obj("t", 7)),
            cache.snapshot,
            _slot(cache, "plain"),
        )
        is None
    )


def test_args() -> None:
    args = parse_args({"resourceName": "example.com/gpu", "pairScores": {"pix": 70}}, "a")
    assert args.resource_name == "example.com/gpu" and args.pair_scores.pix == 70
    with pytest.raises(ConfigError, match=r"a\.pairScores\.pix: must be a non-negative integer"):
        parse_args({"pairScores": {"pix": -1}}, "a")
    with pytest.raises(ConfigError, match=r"a\.resourceName"):
        parse_args({"resourceName": ""}, "a")
    with pytest.raises(ConfigError, match='unknown field "weights"'):
        parse_args({"weights": 1}, "a")
    assert isinstance(new(None, "a"), GPUTopology)


def _reservation_config(*seconds: Any) -> dict[str, Any]:
    """A configuration with one profile per value, each setting `gangReservationSeconds`
    to it (None: the profile sets no GPUTopology args)."""
    profiles = []
    for i, value in enumerate(seconds):
        profile: dict[str, Any] = {"schedulerName": f"topo-{i}"}
        if value is not None:
            args = {"gangReservationSeconds": value}
            profile["pluginConfig"] = [{"name": "GPUTopology", "args": args}]
        profiles.append(profile)
    return {"profiles": profiles}


def test_gang_reservation_seconds_arg() -> None:
    assert parse_args(None, "a").gang_reservation_seconds is None
    assert parse_args({"gangReservationSeconds": None}, "a").gang_reservation_seconds is None
    for value in (0, 3600, 0.5, 604_800):
        args = parse_args({"gangReservationSeconds": value}, "a")
        assert args.gang_reservation_seconds == float(value)
    # the configuration's: the first profile that sets it (0 included), else 0 (off)
    assert gang_reservation_seconds(default_config()) == 0.0
    assert gang_reservation_seconds(load_config(_reservation_config(None, 600))) == 600.0
    assert gang_reservation_seconds(load_config(_reservation_config(0, 600))) == 0.0
    assert gang_reservation_seconds(load_config(_reservation_config(1800, 600))) == 1800.0


@pytest.mark.parametrize(
    ("value", "shown"),
    [(-1, "-1"), ("x", "'x'"), (True, "True"), (math.nan, "nan"), (10**9, "1000000000"),
     (604_800.5, "604800.5"), (math.inf, "inf"), ([3600], "[3600]")],
)  # fmt: skip
def test_gang_reservation_seconds_rejected_with_the_field(value: Any, shown: str) -> None:
    with pytest.raises(ConfigError) as caught:
        frameworks_for(load_config(_reservation_config(value)))  # as the scheduler loads it
    message = str(caught.value)
    assert message == (
        "profiles[0].pluginConfig[0].args.gangReservationSeconds: "
        f"must be seconds from 0 to 604,800, got {shown}"
    )
    assert "\n" not in message
