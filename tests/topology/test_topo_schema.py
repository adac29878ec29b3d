"""Annotation schema: valid round trips and invalid input named by node and field."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from scheduler.core.topology import (
    ANNOTATION_GPUS,
    ANNOTATION_PLACEMENT,
    ANNOTATION_TOPOLOGY,
    Placement,
    TopologyError,
    builtin_topology,
    format_assignments,
    format_gpu_indices,
    format_topology,
    parse_assignments,
    parse_gpu_indices,
    parse_placement,
    parse_topology,
    topology_to_dict,
)

VALID: dict[str, Any] = {
    "version": 1,
    "gpus": [
        {
            "index": 1,
            "uuid": "GPU-b",
            "model": "NVIDIA H100 80GB HBM3",
            "memoryMiB": 81559,
            "numaNode": 0,
            "pciBusId": "0000:2a:00.0",
            "healthy": True,
            "migEnabled": False,
        },
        {"index": 0, "uuid": "GPU-a", "numaNode": 0},
        {"index": 2, "healthy": False},
    ],
    "links": [
        {"a": 1, "b": 0, "pcie": "PIX", "nvlinks": 18, "nvswitchLinks": 18},
        {"a": 0, "b": 2, "pcie": None, "nvlinks": 0},
        {"a": 0, "b": 1, "pcie": "PIX", "nvlinks": 18, "nvswitchLinks": 18},
    ],
}


def test_parse_valid_and_round_trip() -> None:
    topology = parse_topology(json.dumps(VALID), node="n1")
    assert [g.index for g in topology.gpus] == [0, 1, 2]
    assert topology.gpus[1].model == "NVIDIA H100 80GB HBM3" and topology.gpus[0].memory_mib is None
    assert topology.gpus[2].healthy is False and topology.gpus[2].numa_node is None
    assert topology.link(1, 0) == topology.link(0, 1)
    assert topology.link(0, 1).nvlinks == 18 and topology.link(0, 1).nvswitch_links == 18
    assert topology.link(1, 2).pcie is None and topology.link(1, 2).nvlinks == 0  # unlisted
    assert topology.allocatable_mask == 0b011
    again = parse_topology(format_topology(topology), node="n1")
    assert again == topology and again.key == topology.key
    assert parse_topology(topology_to_dict(topology)) == topology


def test_builtin_round_trip() -> None:
    for name in ("dgx1-v100", "dgx-h100", "dgx2-v100"):
        topology = builtin_topology(name)
        assert parse_topology(format_topology(topology)) == topology


def _broken(path: list[Any], value: Any) -> dict[str, Any]:
    data = copy.deepcopy(VALID)
    target = data
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (_broken(["version"], 2), "version: unsupported version 2"),
        (_broken(["version"], KeyError), "version"),
        (_broken(["version"], 1.0), "version: unsupported version 1.0"),
        (_broken(["version"], True), "version: unsupported version True"),
        (_broken(["gpus"], {}), "gpus: must be a list"),
        (_broken(["gpus", 0, "index"], "1"), "gpus[0].index: must be an integer"),
        (_broken(["gpus", 0, "index"], True), "gpus[0].index"),
        (_broken(["gpus", 0, "index"], 0), "gpus[1].index: index 0 repeats gpus[0]"),
        (_broken(["gpus", 2, "index"], 5), "gpus[2].index: index 5 out of range"),
        (_broken(["gpus", 1, "numaNode"], -1), "gpus[1].numaNode: must be >= 0"),
        (_broken(["gpus", 1, "healthy"], "yes"), "gpus[1].healthy: must be true or false"),
        (_broken(["gpus", 0, "memoryMiB"], 1.5), "gpus[0].memoryMiB"),
        (_broken(["links", 1, "b"], 3), "links[1].b: GPU index 3 out of range"),
        (_broken(["links", 1, "b"], 0), "links[1]: a and b are both 0"),
        (_broken(["links", 1, "pcie"], "QPI"), "links[1].pcie: must be one of"),
        (_broken(["links", 1, "nvlinks"], -2), "links[1].nvlinks: must be >= 0"),
        (_broken(["links", 0, "nvswitchLinks"], 19), "links[0].nvswitchLinks: 19 exceeds"),
        (_broken(["links", 2, "nvlinks"], 19), "links[2]: pair (0, 1) listed again"),
        (_broken(["links", 2, "pcie"], "SYS"), "links[2]: pair (0, 1) listed again"),
        (_broken(["links"], "all"), "links: must be a list"),
        ([1, 2], "must be an object"),
    ],
)
def test_invalid_topology_names_node_and_field(data: Any, field: str) -> None:
    with pytest.raises(TopologyError) as info:
        parse_topology(json.dumps(data), node="gpu-node-7")
    message = str(info.value)
    assert message.startswith(f"node gpu-node-7: annotation {ANNOTATION_TOPOLOGY}")
    assert field in message


def test_bad_json() -> None:
    with pytest.raises(TopologyError, match=r"node n: annotation .*gpu-topology: invalid JSON"):
        parse_topology('{"version": 1, "gpus": [', node="n")


def test_pod_gpu_indices() -> None:
    assert parse_gpu_indices("3,0, 2", pod="ns/p") == (0, 2, 3)
    assert parse_gpu_indices("", pod="ns/p") == ()
    assert format_gpu_indices([3, 0, 2]) == "0,2,3"
    assert parse_gpu_indices(format_gpu_indices([7, 1])) == (1, 7)
    for bad in ("0,x", "0,,1", "-1", "1,1"):
        with pytest.raises(TopologyError, match=f"pod ns/p: annotation {ANNOTATION_GPUS}"):
            parse_gpu_indices(bad, pod="ns/p")


def test_assignments() -> None:
    text = format_assignments({"uid-b": [3, 1], "uid-a": (0,)})
    assert text == '{"uid-a":[0],"uid-b":[1,3]}'
    assert parse_assignments(text, node="n") == {"uid-a": (0,), "uid-b": (1, 3)}
    for bad in ("[]", '{"u": [1, "2"]}', '{"u": 3}', "{", '{"u": [true]}'):
        with pytest.raises(
            TopologyError, match=r"node n: annotation topo-scheduler\.io/gpu-assignments"
        ):
            parse_assignments(bad, node="n")


def test_placement() -> None:
    assert parse_placement(None) is Placement.BEST_EFFORT
    assert parse_placement("nvlink") is Placement.NVLINK
    assert parse_placement("single-numa") is Placement.SINGLE_NUMA
    with pytest.raises(TopologyError) as info:
        parse_placement("fastest", pod="ml/trainer")
    assert f"pod ml/trainer: annotation {ANNOTATION_PLACEMENT}: unknown value 'fastest'" in str(
        info.value
    )
