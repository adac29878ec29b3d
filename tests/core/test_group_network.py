"""Pod groups placed by their modelled step time: a group without a topology request prefers the
narrowest domain that holds it (`topo-scheduler.io/topology-anywhere` opts out), candidates are
compared by the modelled all-reduce time of the whole group (domains and each member's GPU set
together), and the network figures come from GPUTopology's `networkBandwidth`."""

from __future__ import annotations

import math
from typing import Any

import pytest
from test_core_group import RACK, SPINE, Cluster, labels_of, member, racks

from plugins.gpu_topology import network_bandwidth, parse_args
from scheduler.core.config import ConfigError, default_config, load_config
from scheduler.core.group import (
    ANNOTATION_TOPOLOGY_ANYWHERE,
    GroupError,
    kubernetes_group,
    scheduler_plugins_group,
)
from scheduler.core.network import (
    NetworkBandwidth,
    NodeLinks,
    allreduce_factor,
    allreduce_time,
    bus_bandwidth,
    crossing_gbps,
)
from scheduler.core.topology import ANNOTATION_TOPOLOGY, builtin_topology, format_topology
from scheduler.core.topology.select import GpuSelector
from tests.builders import node

DGX1 = builtin_topology("dgx1-v100")
PCIE = builtin_topology("pcie-8gpu-2socket")


def topo_node(name: str, topology: Any, rack: str, spine: str) -> dict[str, Any]:
    return node(
        name,
        cpu="64",
        memory="512Gi",
        extra={"nvidia.com/gpu": "8"},
        labels={RACK: rack, SPINE: spine},
        annotations={ANNOTATION_TOPOLOGY: format_topology(topology)},
    )


def anywhere(name: str, **kw: Any) -> dict[str, Any]:
    obj = member(name, **kw)
    obj["metadata"]["annotations"][ANNOTATION_TOPOLOGY_ANYWHERE] = "true"
    return obj


# ---------------------------------------------------------------------- the model


def test_the_hierarchical_model_adds_the_ring_inside_and_the_rails_across() -> None:
    assert allreduce_factor(1) == 0.0 and allreduce_factor(4) == 1.5
    # one node: its ring only
    assert allreduce_time([(8, 25.0)], 1, 8, math.inf) == pytest.approx(1.75 / 25)
    # two nodes of 8: the slowest ring plus c(2) / (8 x 6.25)
    t = allreduce_time([(8, 25.0), (8, 8.0)], 2, 8, 6.25)
    assert t == pytest.approx(1.75 / 8 + 1 / 50)
    assert bus_bandwidth(16, t) == pytest.approx(allreduce_factor(16) / t)
    assert bus_bandwidth(1, t) is None


def test_the_crossing_is_the_slowest_link_up_to_the_level_holding_all_nodes() -> None:
    levels = (SPINE, RACK)
    inf = math.inf
    same_rack = [["s0", "r0"], ["s0", "r0"]]
    other_spine = [["s0", "r0"], ["s1", "r1"]]
    gbps = [[1.5, 6.0], [1.5, 6.0]]
    assert crossing_gbps([6.25, 6.25], gbps, same_rack, levels, 0.5) == (6.0, RACK)
    assert crossing_gbps([6.25, 6.25], gbps, other_spine, levels, 0.5) == (0.5, None)
    assert crossing_gbps([6.25, 3.0], [[inf, inf]] * 2, other_spine, levels, None) == (3.0, None)


def test_network_bandwidth_args_and_defaults() -> None:
    args = parse_args(
        {
            "topologyLevels": [SPINE, RACK],
            "networkBandwidth": {"node": 400, "levels": {SPINE: 12.5}, "core": 3},
        },
        "args",
    )
    network = args.network
    assert network.default == NodeLinks(400.0, {SPINE: 12.5})
    assert network.core_gbps == 3.0
    assert network.links("any").level(RACK) == math.inf  # not named: non-blocking
    defaults, declared = network_bandwidth(default_config())
    assert not declared and defaults.default.nic_gbps == 50.0 and defaults.core_gbps is None
    config = load_config(
        {
            "profiles": [
                {
                    "schedulerName": "topo-scheduler",
                    "pluginConfig": [
                        {"name": "GPUTopology", "args": {"networkBandwidth": {"node": 100}}}
                    ],
                }
            ]
        }
    )
    network, declared = network_bandwidth(config)
    assert declared and network.default.nic_gbps == 100.0


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ({"node": 0}, "args.networkBandwidth.node: must be a number from 0.001 to 1,000 (GB/s)"),
        ({"node": True}, "args.networkBandwidth.node: must be a number from 0.001 to 1,000 (GB/s)"),
        ({"levels": {RACK: "fast"}}, f"args.networkBandwidth.levels.{RACK}: must be a number"),
        ({"levels": [RACK]}, "args.networkBandwidth.levels: must be a mapping"),
        ({"core": -1}, "args.networkBandwidth.core: must be a number from 0.001 to 1,000 (GB/s)"),
        ({"nic": 50}, "nic"),
    ],
)
def test_network_bandwidth_args_that_cannot_be_read_name_the_field(
    raw: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_args({"networkBandwidth": raw}, "args")
    assert problem in str(caught.value)


# ---------------------------------------------------------------------- preference and opt-out


def test_a_group_without_a_request_goes_to_the_narrowest_domain_that_holds_it() -> None:
    # rack0 and rack2 (spine0) have 2 nodes each, rack1 (spine1) 3: 2 workers fit every rack
    c = Cluster(racks([2, 3, 2]), levels=(SPINE, RACK))
    c.add(*(member(f"w{i}", min_member=2) for i in range(2)))
    c.run()
    assert len(c.bound) == 2
    assert len({labels_of(c, k, RACK) for k in c.bound}) == 1
    outcome = c.outcomes[-1]
    assert outcome.domain is not None and outcome.domain[0] == RACK
    assert outcome.domain_note is not None
    assert ", no topology request: 2 pods of the group fit there" in outcome.domain_note
    # 4 workers fit no rack: the narrowest level that holds them is the spine
    c = Cluster(racks([2, 3, 2]), levels=(SPINE, RACK))
    c.add(*(member(f"x{i}", "x", 4) for i in range(4)))
    c.run()
    assert len(c.bound) == 4
    assert c.outcomes[-1].domain == (SPINE, "spine0")


def test_topology_anywhere_opts_out_of_the_preference() -> None:
    c = Cluster(racks([2, 3, 2]), levels=(SPINE, RACK))
    c.add(*(anywhere(f"w{i}", min_member=2) for i in range(2)))
    c.run()
    assert len(c.bound) == 2
    assert c.outcomes[-1].domain is None and c.outcomes[-1].domain_note is None
    assert c.outcomes[-1].spec.anywhere


def test_without_levels_a_group_is_placed_across_the_cluster() -> None:
    c = Cluster(racks([2, 3, 2]))
    c.add(*(member(f"w{i}", min_member=2) for i in range(2)))
    c.run()
    assert len(c.bound) == 2 and c.outcomes[-1].domain is None


def test_topology_anywhere_on_a_podgroup() -> None:
    meta = {"name": "job", "namespace": "ml", "annotations": {ANNOTATION_TOPOLOGY_ANYWHERE: "true"}}
    assert scheduler_plugins_group({"metadata": meta, "spec": {"minMember": 2}}).anywhere
    assert kubernetes_group({"metadata": meta, "spec": {}}).anywhere
    meta["annotations"] = {ANNOTATION_TOPOLOGY_ANYWHERE: "yes"}
    with pytest.raises(GroupError, match=f"annotations.{ANNOTATION_TOPOLOGY_ANYWHERE}: must be"):
        scheduler_plugins_group({"metadata": meta, "spec": {}})


# ---------------------------------------------------------------------- the comparison


def _mixed_cluster(core: float | None) -> Cluster:
    """rack0 (spine0): two PCIe servers; DGX-1s alone in rack1 (spine1) and rack2 (spine2)."""
    nodes = [
        topo_node("pcie-0", PCIE, "rack0", "spine0"),
        topo_node("pcie-1", PCIE, "rack0", "spine0"),
        topo_node("dgx-0", DGX1, "rack1", "spine1"),
        topo_node("dgx-1", DGX1, "rack2", "spine2"),
    ]
    c = Cluster(nodes, levels=(SPINE, RACK))
    assert c.sched.groups is not None
    c.sched.groups.network = NetworkBandwidth(core_gbps=core)
    return c


def _modelled(nodes: list[tuple[Any, float]], gbps: float) -> float:
    selector = GpuSelector()
    intra = []
    for topology, _ in nodes:
        best = selector.best_set(topology, topology.allocatable_mask, 8)
        assert best is not None
        intra.append((8, best.busbw))
    return allreduce_time(intra, len(nodes), 8, gbps)


def test_a_placement_in_one_leaf_beats_one_across_spines() -> None:
    # across spines the core gives 0.5 GB/s per GPU: the two PCIe servers of one rack win over
    # the two DGX-1s, whose GPU sets are faster
    c = _mixed_cluster(core=0.5)
    c.add(*(member(f"w{i}", min_member=2) for i in range(2)))
    c.run()
    assert c.nodes_of("ml/w0", "ml/w1") == {"pcie-0", "pcie-1"}
    outcome = c.outcomes[-1]
    assert outcome.domain == (RACK, "rack0")
    leaf = _modelled([(PCIE, 0), (PCIE, 0)], 50 / 8)
    assert outcome.busbw == pytest.approx(allreduce_factor(16) / leaf)
    assert outcome.runner_up is not None and outcome.runner_up.domain is None
    across = _modelled([(DGX1, 0), (DGX1, 0)], 0.5)
    assert outcome.runner_up.busbw == pytest.approx(allreduce_factor(16) / across)
    assert outcome.domain_note is not None
    assert f"(runner-up across the cluster: {outcome.runner_up.busbw:.1f} GB/s)" in (
        outcome.domain_note
    )


def test_better_gpu_sets_are_weighed_against_the_domain() -> None:
    # a non-blocking core: the DGX-1s' NVLink rings outweigh sharing a rack
    c = _mixed_cluster(core=None)
    c.add(*(member(f"w{i}", min_member=2) for i in range(2)))
    c.run()
    assert c.nodes_of("ml/w0", "ml/w1") == {"dgx-0", "dgx-1"}
    outcome = c.outcomes[-1]
    assert outcome.domain is None
    assert outcome.runner_up is None  # the rack's bound could not beat it: not tried
    assert outcome.domain_note is not None
    assert outcome.domain_note.startswith("placed across the cluster (no topology request)")
    # explain's way (compare_all): the runner-up is tried too, the choice is the same
    c = _mixed_cluster(core=None)
    assert c.sched.groups is not None
    c.sched.groups.compare_all = True
    c.add(*(member(f"w{i}", min_member=2) for i in range(2)))
    c.run()
    assert c.nodes_of("ml/w0", "ml/w1") == {"dgx-0", "dgx-1"}
    outcome = c.outcomes[-1]
    runner = outcome.runner_up
    assert runner is not None and runner.domain == (RACK, "rack0")
    assert outcome.busbw is not None and runner.busbw is not None
    assert outcome.busbw > runner.busbw


def test_equal_times_keep_the_narrower_level_and_the_least_free_room() -> None:
    # count-only nodes, non-blocking levels: every placement models alike, so the order
    # falls to the narrower level, then bin packing (rack1 holds exactly 3)
    c = Cluster(racks([5, 3, 4], spines=3), levels=(SPINE, RACK))
    c.add(*(member(f"w{i}", min_member=3) for i in range(3)))
    c.run()
    assert {labels_of(c, k, RACK) for k in c.bound} == {"rack1"}
