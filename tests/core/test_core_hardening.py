"""Hostile and unlucky inputs to the model, the GPU state and the GPU plugin:
accounting holes, fractional GPUs, pod-level hugepages, unreadable annotations, score bounds."""

from __future__ import annotations

import json
import logging
from fractions import Fraction
from typing import Any

import pytest
from core_support import cache_of, container, filter_reasons, node, plugin_scores, pod

from plugins import node_resources_fit
from plugins.gpu_topology import new as new_gpu_topology
from scheduler.core.config import ConfigError
from scheduler.core.model import ModelError, NodeInfo, PodInfo
from scheduler.core.quantity import QuantityError, parse_quantity
from scheduler.core.topology import ANNOTATION_TOPOLOGY, builtin_topology, format_topology
from scheduler.core.topology.bandwidth import MAX_GBPS
from scheduler.core.topology.schema import MAX_GPUS, MAX_NVLINKS
from scheduler.core.topology.scoring import MAX_PAIR_SCORE

Mi = 2**20

# --------------------------------------------------------------------------- accounting


def test_bound_pod_with_huge_quantity_holds_what_can_be_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
    requests = {"cpu": "3", "memory": "6Gi", "nvidia.com/gpu": "2", "example.com/widgets": "1e16"}
    raw = pod("other", requests, node_name="n1", scheduler_name="default-scheduler")
    with caplog.at_level(logging.WARNING, "topo_scheduler.core.model"):
        held = PodInfo.from_object(raw)
        PodInfo.from_object(raw)  # parsed again on every watch event: logged once
    assert held.requests == {"cpu": 3000, "memory": 6 * 2**30, "nvidia.com/gpu": 2}
    logged = [r.getMessage() for r in caplog.records if "example.com/widgets" in r.getMessage()]
    assert len(logged) == 1 and "'1e16' is too large" in logged[0], logged
    # ... so the node is not overcommitted: 3 of 4 CPUs are taken.
    cache = cache_of([node("n1", cpu="4")], [raw])
    fit = node_resources_fit.new({}, "args")
    reasons = filter_reasons(fit, PodInfo.from_object(pod("new", {"cpu": "2"})), cache)
    assert reasons == {"n1": ["Insufficient cpu"]}


def test_bound_pod_whose_amounts_add_up_beyond_the_bound() -> None:
    containers = [
        container("a", {"cpu": "1", "example.com/widgets": "5e15"}),
        container("b", {"memory": "1Gi", "example.com/widgets": "5e15"}),
    ]
    raw = pod("other", containers=containers, node_name="n1")
    assert PodInfo.from_object(raw).requests == {"cpu": 1000, "memory": 2**30}
    with pytest.raises(ModelError, match=r"total example\.com/widgets request is too large"):
        PodInfo.from_object(pod("mine", containers=containers))


def test_pending_pod_with_unreadable_quantity_is_still_an_error() -> None:
    with pytest.raises(ModelError, match=r"requests.example.com/widgets: '1e16' is too large"):
        PodInfo.from_object(pod("mine", {"example.com/widgets": "1e16"}))


@pytest.mark.parametrize("value", ["0.5", "2.5", 1.5, "500m"])
def test_fractional_gpus_are_invalid_for_pods_and_nodes(value: Any) -> None:
    with pytest.raises(ModelError, match=r"nvidia\.com/gpu: must be a whole number"):
        PodInfo.from_object(pod("p", {"nvidia.com/gpu": value}))
    with pytest.raises(ModelError, match=r"nvidia\.com/gpu: must be a whole number"):
        NodeInfo.from_object(node("n", extra={"nvidia.com/gpu": value}))
    # kube's native resources keep their fractions
    assert PodInfo.from_object(pod("p", {"cpu": "0.5", "nvidia.com/gpu": "2"})).requests == {
        "cpu": 500,
        "nvidia.com/gpu": 2,
    }


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1" * 5000, 2**63 - 1),  # capped as kube caps it
        ("0." + "1" * 5000, Fraction(111111112, 10**9)),  # rounded up to a nano unit
        ("1" * 5000 + "e-4999", Fraction(1111111112, 10**9)),
        ("1e" + "0" * 5000 + "3", 1000),
    ],
)
def test_quantities_of_thousands_of_digits(value: str, expected: Any) -> None:
    assert parse_quantity(value) == expected


def test_quantity_exponent_beyond_int64_is_invalid() -> None:
    with pytest.raises(QuantityError, match="unable to parse quantity's suffix"):
        parse_quantity("1e" + "9" * 5000)
    with pytest.raises(ModelError, match=r"requests\.cpu: unable to parse"):
        PodInfo.from_object(pod("p", {"cpu": "1e" + "9" * 5000}))


def test_pod_level_hugepages_count_in_node_resources_fit() -> None:
    spec = {"resources": {"requests": {"hugepages-2Mi": "10Mi"}}}
    containers = [container("a", {"hugepages-2Mi": "2Mi"}), container("b", {"cpu": "1"})]
    p = PodInfo.from_object(pod("huge", containers=containers, spec=spec))
    assert p.requests["hugepages-2Mi"] == 10 * Mi  # the pod-level value, not the 2Mi sum
    nodes = [
        node("small", extra={"hugepages-2Mi": "8Mi"}),
        node("large", extra={"hugepages-2Mi": "12Mi"}),
    ]
    reasons = filter_reasons(node_resources_fit.new({}, "args"), p, cache_of(nodes))
    assert reasons == {"large": [], "small": ["Insufficient hugepages-2Mi"]}


# --------------------------------------------------------------------------- GPU annotations


@pytest.mark.parametrize(
    ("annotation", "problem"),
    [
        ("[" * 100_000, "nested more than 100 levels deep"),
        ('{"version":1,"gpus":[{"index":' + "1" * 5001 + "}]}", "integer of 5,001 characters"),
        (
            json.dumps(
                {
                    "version": 1,
                    "gpus": [{"index": 0}, {"index": 1}],
                    "links": [{"a": 0, "b": 1, "nvlinks": 10**17}],
                }
            ),
            "links[0].nvlinks: must be <= 64",
        ),
        (
            json.dumps(
                {
                    "version": 1,
                    "gpus": [{"index": 0}, {"index": 1}],
                    "links": [{"a": 0, "b": 1, "nvlinks": 1e17}],
                }
            ),
            "links[0].nvlinks: must be an integer",
        ),
        (json.dumps({"version": 1, "gpus": [{"index": 0, "numaNode": 10**6}]}), "numaNode"),
        ("\udcff", "invalid JSON"),
    ],
)
def test_unreadable_topology_makes_the_node_count_only_at_once(
    annotation: str, problem: str
) -> None:
    good = format_topology(builtin_topology("dgx-h100"))
    cache = cache_of([node("n", annotations={ANNOTATION_TOPOLOGY: good})])
    state = cache.gpus
    assert state.topology[0] is not None
    cache.add_node(NodeInfo.from_object(node("n", annotations={ANNOTATION_TOPOLOGY: annotation})))
    assert state.topology[0] is None and state.topology_id[0] == -1  # no stale topology
    assert state.problem[0] is not None and problem in state.problem[0], state.problem[0]
    assert "\n" not in state.problem[0]


def test_unreadable_gpu_record_on_a_pod_is_no_record() -> None:
    topo = {ANNOTATION_TOPOLOGY: format_topology(builtin_topology("dgx-a100"))}
    nodes = [node("n", annotations=topo, extra={"nvidia.com/gpu": "8"})]
    held = pod(
        "old",
        {"nvidia.com/gpu": "2"},
        node_name="n",
        annotations={"topo-scheduler.io/gpus": "1" * 5001},
    )
    cache = cache_of(nodes, [held])
    assert bin(int(cache.gpus.used[0])).count("1") == 2  # guessed, as for an unrecorded pod


# --------------------------------------------------------------------------- args and scores


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"resourceName": "memory"}, "resourceName: must be an extended resource"),
        ({"resourceName": "cpu"}, "must be an extended resource"),
        ({"resourceName": "hugepages-2Mi"}, "must be an extended resource"),
        ({"resourceName": "ephemeral-storage"}, "must be an extended resource"),
        ({"resourceName": "pods"}, "must be an extended resource"),
        ({"resourceName": "kubernetes.io/gpu"}, "must be an extended resource"),
        ({"pairScores": {"nvlink": 10**20}}, "pairScores.nvlink: must be a non-negative integer"),
        ({"pairScores": {"sys": MAX_PAIR_SCORE + 1}}, "at most 10,000"),
        ({"linkBandwidth": {"nvlink": 1e300}}, r"linkBandwidth.nvlink: .* 0.001 .* got 1e\+300"),
        ({"linkBandwidth": {"sys": MAX_GBPS + 0.5}}, r"to 1,000 \(GB/s\), got 1000.5"),
    ],
)
def test_gpu_topology_args_rejected(args: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        new_gpu_topology(args, "args")


def test_node_score_key_fits_int64_at_the_bounds() -> None:
    # The largest set score (63 GPUs, every pair at the maximum) and ring bandwidth.
    pairs = MAX_GPUS * (MAX_GPUS - 1) // 2
    s_max = pairs * MAX_PAIR_SCORE * (1 + MAX_NVLINKS)
    busbw_mbps = MAX_GBPS * MAX_NVLINKS * 1000
    assert 80 * (busbw_mbps * (s_max + 1) + s_max) < 2**63


def test_scores_at_the_largest_args_equal_the_reference() -> None:
    def topology(links: int) -> str:
        gpus = [{"index": i, "numaNode": 0} for i in range(16)]
        pairs = [{"a": a, "b": b, "nvlinks": links} for a in range(16) for b in range(a + 1, 16)]
        return json.dumps({"version": 1, "gpus": gpus, "links": pairs})

    nodes = [
        node(
            "wide",
            annotations={ANNOTATION_TOPOLOGY: topology(MAX_NVLINKS)},
            extra={"nvidia.com/gpu": "16"},
        ),
        node(
            "narrow",
            annotations={ANNOTATION_TOPOLOGY: topology(MAX_NVLINKS - 1)},
            extra={"nvidia.com/gpu": "16"},
        ),
    ]
    levels = ("sys", "node", "phb", "pxb", "pix", "board", "nvlink")
    plugin = new_gpu_topology(
        {
            "pairScores": dict.fromkeys(levels, MAX_PAIR_SCORE),
            "linkBandwidth": dict.fromkeys(levels, MAX_GBPS),
        },
        "args",
    )
    for count in (2, 8, 16):
        p = PodInfo.from_object(pod("p", {"nvidia.com/gpu": str(count)}))
        scores = plugin_scores(plugin, p, cache_of(nodes))
        assert scores is not None
        assert all(0 <= v <= 100 for v in scores.values()), scores
        assert scores["wide"] > scores["narrow"], scores


# --------------------------------------------------------------------------- huge values


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0." + "1" * 1_000_000, Fraction(111111112, 10**9)),
        ("1" * 1_000_000, 2**63 - 1),
        ("1" * 1_000_000 + "e-999999", Fraction(1111111112, 10**9)),
        ("0.000000001" + "0" * 100_000, Fraction(1, 10**9)),  # exactly one nano unit
        ("0.000000001" + "0" * 100_000 + "1", Fraction(2, 10**9)),  # just above: rounded up
        ("7." + "9" * 100_000 + "Ei", 2**63 - 1),  # rounded up to 2^63, then capped
    ],
)
def test_quantities_of_a_million_digits_are_read_exactly(value: str, expected: Any) -> None:
    """Read exactly from the first significant digits (reading all of them exactly took half
    a minute for a million): the rounding still sees a non-zero digit far down."""
    assert parse_quantity(value) == expected


def test_a_huge_bad_quantity_is_shown_cut() -> None:
    with pytest.raises(QuantityError) as info:
        parse_quantity("1" * 1_000_000 + "x")
    message = str(info.value)
    assert message.endswith("... (1,000,001 characters)") and len(message) < 300


def test_huge_annotation_values_are_shown_cut() -> None:
    from scheduler.core.topology.schema import TopologyError, parse_assignments, parse_placement

    with pytest.raises(TopologyError) as info:
        parse_placement("x" * 10_000_000, pod="ml/p")
    assert "... (10,000,000 characters)" in str(info.value) and len(str(info.value)) < 300
    with pytest.raises(TopologyError) as info:  # a key with a line break stays on one line
        parse_assignments(json.dumps({"uid\n" + "u" * 10_000: [0, "x"] * 10_000}), node="n1")
    assert "\n" not in str(info.value) and len(str(info.value)) < 400


def test_huge_keys_and_link_levels_are_shown_cut() -> None:
    from scheduler.core.dra import ResourceSlice
    from scheduler.core.model import ModelError
    from scheduler.core.topology.builtin import builtin_topology
    from scheduler.core.topology.schema import (
        TopologyError,
        parse_topology,
        topology_to_dict,
    )
    from tests.dra import objects

    raw = objects.gpu_slice("n1", gpus=1)
    raw["spec"]["devices"][0]["attributes"] = {"k" * 300_000: {"int": "x"}}
    with pytest.raises(ModelError) as info:
        ResourceSlice.from_object(raw)
    assert "... (300,0" in str(info.value) and len(str(info.value)) < 600
    data = topology_to_dict(builtin_topology("dgx1-v100"))
    data["links"][0]["pcie"] = "X" * 1_000_000
    with pytest.raises(TopologyError) as info:
        parse_topology(data, node="n1")
    assert "... (1,000,000 characters)" in str(info.value) and len(str(info.value)) < 400
