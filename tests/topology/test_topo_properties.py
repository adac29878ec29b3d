"""Property tests: random topologies round-trip through the annotation, and the search
agrees with brute force under every policy, with unhealthy and MIG GPUs mixed in."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st
from test_topo_select import brute_force

from scheduler.core.topology import (
    GpuInfo,
    GpuLink,
    GpuSelector,
    Placement,
    Topology,
    format_topology,
    parse_topology,
)
from scheduler.core.topology.schema import PCIE_LEVELS


@st.composite
def topologies(draw: st.DrawFn) -> Topology:
    n = draw(st.integers(min_value=1, max_value=10))
    gpus = tuple(
        GpuInfo(
            i,
            numa_node=draw(st.one_of(st.none(), st.integers(0, 2))),
            healthy=draw(st.booleans() | st.just(True)),
            mig_enabled=draw(st.booleans()) and draw(st.booleans()),
        )
        for i in range(n)
    )
    links = []
    for a, b in itertools.combinations(range(n), 2):
        if draw(st.integers(0, 9)) == 0:
            continue  # unlisted pair: unknown
        nv = draw(st.sampled_from([0, 0, 0, 1, 2, 12]))
        level = draw(st.one_of(st.none(), st.sampled_from(PCIE_LEVELS)))
        links.append(GpuLink(a, b, level, nv, draw(st.integers(0, nv))))
    return Topology(gpus, tuple(links))


@settings(max_examples=150, deadline=None)
@given(topologies(), st.data())
def test_search_equals_brute_force(topology: Topology, data: st.DataObject) -> None:
    free = data.draw(st.integers(0, (1 << topology.size) - 1))
    size = data.draw(st.integers(1, topology.size))
    placement = data.draw(st.sampled_from(list(Placement)))
    got = GpuSelector().best_set(topology, free, size, placement)
    assert (got.gpus if got else None) == brute_force(topology, free, size, placement)


@settings(max_examples=100, deadline=None)
@given(topologies())
def test_annotation_round_trip(topology: Topology) -> None:
    again = parse_topology(format_topology(topology), node="n")
    assert again == topology and again.key == topology.key
