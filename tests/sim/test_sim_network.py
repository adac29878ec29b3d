"""The simulator's network model: level bandwidths and the core in scenario files
(strict field errors), the hierarchical all-reduce time of a placement by hand, the reference
placement (the whole cluster or the node type), stretch per job size and the GPU-hours lost to
it, and the largest gang of 8-GPU workers each network level could still place."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scheduler.sim.engine import Simulation
from scheduler.sim.network import NetworkModel, allreduce_factor
from scheduler.sim.quality import QualityModel
from scheduler.sim.report import document, render_table, summarize
from scheduler.sim.scenario import ScenarioError, load_scenario, parse_scenario

ROOT = Path(__file__).resolve().parents[2]
SPINE = "network.topology.nvidia.com/spine"
LEAF = "network.topology.nvidia.com/leaf"
A100 = {"gpuTopology": "dgx-a100", "resources": {"cpu": "128", "memory": "1Ti"}}


def two_kinds(jobs: list[dict[str, Any]], **top: Any) -> dict[str, Any]:
    """`far`: two A100 nodes, each its own leaf, under a 12.5 GB/s-per-GPU spine; `near`: two
    A100 nodes in one non-blocking leaf, tainted so that no job runs there. NICs 400 GB/s a
    node (50 per GPU)."""
    return {
        "name": "two-kinds",
        "nodes": [
            {"name": "far", "count": 2, **A100, "interNodeBandwidth": 400,
             "network": [{"key": SPINE, "nodesPer": 2, "bandwidth": 12.5},
                         {"key": LEAF, "nodesPer": 1}]},
            {"name": "near", "count": 2, **A100, "interNodeBandwidth": 400,
             "taints": [{"key": "dedicated", "value": "x"}],
             "network": [{"key": LEAF, "nodesPer": 2}]},
        ],
        "jobs": jobs,
        **top,
    }  # fmt: skip


BIG = [{"name": "big", "duration": 100, "gpus": 8, "workers": 2, "comm": 0.5}]


# ---------------------------------------------------------------------------- scenario fields


def test_network_fields() -> None:
    sc = parse_scenario(two_kinds(BIG))
    assert sc.core_gbps is None and sc.job_time_reference == "cluster"
    assert sc.templates[0].level_gbps == ((SPINE, 12.5),)  # the leaf gives none: no limit
    assert sc.templates[1].level_gbps == ()
    sc = parse_scenario(two_kinds(BIG, coreBandwidth=3, jobTimeReference="node-type"))
    assert sc.core_gbps == 3.0 and sc.job_time_reference == "node-type"


def _with_level(**level: Any) -> dict[str, Any]:
    data = two_kinds(BIG)
    data["nodes"][0]["network"][0] = {"key": SPINE, "nodesPer": 2, **level}
    return data


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (_with_level(bandwidth=0),
         "nodes[0].network[0].bandwidth: must be at least 0.001 (GB/s), got 0"),
        (_with_level(bandwidth=1e-320),  # a transfer time would overflow to inf, then NaN
         "nodes[0].network[0].bandwidth: must be at least 0.001 (GB/s), got 1e-320"),
        (_with_level(bandwidth="fast"),
         "nodes[0].network[0].bandwidth: must be a finite number, got 'fast'"),
        (_with_level(bandwidth=True),
         "nodes[0].network[0].bandwidth: must be a finite number, got True"),
        (_with_level(bandwidth=5000),
         "nodes[0].network[0].bandwidth: must be <= 1,000, got 5000"),
        (_with_level(bandwidth=float("nan")),
         "nodes[0].network[0].bandwidth: must be a finite number, got nan"),
        (_with_level(oversubscription=4), "nodes[0].network[0].oversubscription: unknown field"),
        (two_kinds(BIG, coreBandwidth=-1), "coreBandwidth: must be >= 0, got -1"),
        (two_kinds(BIG, coreBandwidth=0), "coreBandwidth: must be at least 0.001 (GB/s), got 0"),
        (two_kinds(BIG, coreBandwidth=1e-320),
         "coreBandwidth: must be at least 0.001 (GB/s), got 1e-320"),
        (two_kinds(BIG, jobTimeReference="best"),
         "jobTimeReference: must be one of cluster, node-type, got 'best'"),
    ],
)  # fmt: skip
def test_bad_network_fields_name_the_field(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError) as err:
        parse_scenario(data)
    assert str(err.value).startswith(message)


def test_a_level_given_twice_is_refused() -> None:
    data = two_kinds(BIG)
    data["nodes"][0]["network"][1] = {"key": SPINE, "nodesPer": 1}
    with pytest.raises(ScenarioError, match=r"^nodes\[0\]\.network\[1\]\.key: level .* twice"):
        parse_scenario(data)


def test_a_bad_file_names_the_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("name: c\ncoreBandwidth: many\nnodes: [{name: n, resources: {cpu: 1, "
                    "memory: 1Gi}}]\n")  # fmt: skip
    with pytest.raises(ScenarioError) as err:
        load_scenario(path, jobs_required=False)
    assert str(err.value) == f"{path}: coreBandwidth: must be a finite number, got 'many'"


# ---------------------------------------------------------------------------- all-reduce time


def same(got: tuple[float | None, str | None], seconds: float, span: str | None) -> bool:
    return got[0] is not None and abs(got[0] - seconds) < 1e-9 and got[1] == span


def test_hierarchical_all_reduce_by_hand_on_the_philly_cluster() -> None:
    """examples/philly-cluster.yaml: DGX-1 8-GPU ring 50 GB/s, PCIe 8-GPU ring 8 GB/s; NIC
    share 6.25 (DGX-1) and 3.125 (PCIe) GB/s per GPU; leaf 6.25 / 3.125, spine 1.5625 /
    0.78125, core 0.78125."""
    sc = load_scenario(ROOT / "examples" / "philly-cluster.yaml", jobs_required=False)
    model = NetworkModel(sc, QualityModel())
    dgx = sc.templates[0].topology
    pcie = sc.templates[1].topology
    eight = tuple(range(8))

    def time(*nodes: str) -> tuple[float | None, str | None]:
        kinds = {"dgx1": dgx, "pcie": pcie}
        return model.comm_time({n: (kinds[n.split("-")[0]], eight) for n in nodes})

    assert allreduce_factor(8) == 1.75 and allreduce_factor(1) == 0.0
    assert same(time("dgx1-0"), 1.75 / 50, None)
    # one leaf: the NIC share; across leaves: the spine's 4:1; across spines: the core
    assert same(time("dgx1-0", "dgx1-7"), 1.75 / 50 + 1 / (8 * 6.25), LEAF)
    assert same(time("dgx1-0", "dgx1-8"), 1.75 / 50 + 1 / (8 * 1.5625), SPINE)
    assert same(time("dgx1-0", "pcie-0"), 1.75 / 8 + 1 / (8 * 0.78125), None)
    four = model.comm_time({f"dgx1-{i}": (dgx, eight) for i in (0, 1, 2, 9)})
    assert same(four, 1.75 / 50 + 1.5 / (8 * 1.5625), SPINE)
    # the slowest node's ring (GPUs 0-3 of a DGX-1: 25 GB/s), and the fewest GPUs on one
    # node carry its shard over their rails
    mixed = model.comm_time({"dgx1-0": (dgx, eight), "dgx1-1": (dgx, (0, 1, 2, 3))})
    assert same(mixed, 1.5 / 25 + 1 / (4 * 6.25), LEAF)
    # the best placement of 2 x 8 GPUs in the cluster: two DGX-1 of one leaf
    assert model.reference_time(2, 8, []) == pytest.approx(1.75 / 50 + 1 / (8 * 6.25))
    # 16 workers fill two leaves: the spine's bandwidth
    assert model.reference_time(16, 8, []) == pytest.approx(
        1.75 / 50 + allreduce_factor(16) / (8 * 1.5625)
    )


def test_spreading_small_workers_can_beat_packing_and_the_reference_knows() -> None:
    """Two 4-GPU workers on PCIe servers: one node (a cross-socket 8-GPU ring, 8 GB/s) is
    slower than one socket's 4-GPU ring (12 GB/s) on each of two nodes of one leaf."""
    sc = load_scenario(ROOT / "examples" / "philly-cluster.yaml", jobs_required=False)
    sc.templates = [sc.templates[1]]
    model = NetworkModel(sc, QualityModel())
    packed = 1.75 / 8
    spread = 1.5 / 12 + 1 / (4 * 3.125)
    assert spread < packed
    assert model.reference_time(2, 4, []) == pytest.approx(spread)


# ---------------------------------------------------------------------------- job time


@pytest.mark.parametrize(
    ("reference", "run"),
    [
        # against two `near` nodes of one leaf (1.75/300 + 1/(8 x 50)): ratio 1.9, so
        # 100 x (0.5 + 0.5 x 1.9) = 145 s
        ("cluster", 145.0),
        # against the best placement on `far` nodes: this one
        ("node-type", 100.0),
    ],
)
def test_a_gang_across_leaves_is_stretched_against_the_reference(
    reference: str, run: float
) -> None:
    sc = parse_scenario(two_kinds(BIG, jobTimeReference=reference))
    sim = Simulation(sc, "topo+topo-dp", check=True).run()
    workers = [sim.records[f"default/big-w{i}"] for i in range(2)]
    assert {w.node for w in workers} == {"far-0", "far-1"}
    assert [w.run_seconds for w in workers] == [pytest.approx(run)] * 2
    actual = 1.75 / 300 + 1 / (8 * 12.5)
    best = 1.75 / 300 + 1 / (8 * 50) if reference == "cluster" else actual
    job_time = summarize(sim)["job_time"]
    assert job_time["reference"] == reference
    size = job_time["by_size"]["16"]
    assert size["jobs"] == 1 and size["multi_node"] == 1
    assert size["stretch_mean"] == pytest.approx(run / 100, abs=1e-4)
    assert size["busbw_gbps_mean"] == pytest.approx(allreduce_factor(16) / actual, abs=0.01)
    assert size["reference_busbw_gbps_mean"] == pytest.approx(allreduce_factor(16) / best, abs=0.01)
    assert size["stretch_gpu_hours"] == pytest.approx(16 * (run - 100) / 3600, abs=1e-3)
    multi = job_time["multi_node_jobs"]
    assert multi["jobs"] == 1 and multi["narrowest_level"] == {SPINE: 1, LEAF: 0, "none": 0}
    assert job_time["stretch_gpu_hours"] == size["stretch_gpu_hours"]


def test_one_node_job_against_the_cluster_or_its_node_type() -> None:
    """An 8-GPU job on a PCIe server (8 GB/s ring) while a tainted DGX H100 (450 GB/s) exists:
    against the cluster it is stretched 0.7 + 0.3 x 450 / 8; against its node type not."""
    data = {
        "name": "one-node",
        "nodes": [
            {"name": "pcie", "gpuTopology": "pcie-8gpu-2socket",
             "resources": {"cpu": "64", "memory": "512Gi"}},
            {"name": "h100", "gpuTopology": "dgx-h100",
             "resources": {"cpu": "64", "memory": "512Gi"},
             "taints": [{"key": "dedicated", "value": "x"}]},
        ],
        "jobs": [{"name": "eight", "duration": 1000, "gpus": 8}],
    }  # fmt: skip
    runs = {}
    for reference in ("cluster", "node-type"):
        sc = parse_scenario({**data, "jobTimeReference": reference})
        runs[reference] = Simulation(sc, "kube+nvidia-dp").run().records["default/eight"]
    assert runs["cluster"].run_seconds == pytest.approx(1000 * (0.7 + 0.3 * 450 / 8))
    assert runs["node-type"].run_seconds == 1000.0


# ---------------------------------------------------------------------------- fragmentation


def test_largest_gang_per_level_over_time() -> None:
    """At first each level's widest domain is free (far's spine: 2 nodes, near's leaf: 2, the
    cluster 4); while `big` runs on far's two nodes, far's spine has none left."""
    sc = parse_scenario(two_kinds(BIG))
    sim = Simulation(sc, "topo+topo-dp").run()
    assert sim.network.gang_levels == (SPINE, LEAF, "cluster")
    assert sim.network.largest_gangs(lambda name: 8) == (2, 2, 4)  # all free
    assert [s.largest_gang for s in sim.samples] == [(0, 2, 2), (2, 2, 4)]  # at 0 s, 145 s
    room = summarize(sim)["fragmentation"]["largest_gang_workers"]
    assert room[SPINE]["min"] == 0 and room["cluster"]["min"] == 2
    # big runs 145 s of the 145 s makespan: the spine had no room all along
    assert room[SPINE]["mean"] == 0.0 and room[LEAF]["mean"] == 2.0
    assert len(room[LEAF]["series"]) == 100


def test_table_and_plot_show_the_network_figures(tmp_path: Path) -> None:
    from scheduler.sim.report import plot

    sc = parse_scenario(two_kinds(BIG))
    sims = {p: Simulation(sc, p).run() for p in ("topo+topo-dp", "kube+nvidia-dp")}
    doc = document(sc, {p: summarize(s) for p, s in sims.items()}, 1.0)
    table = render_table(doc)
    assert "16-GPU jobs: stretch mean (jobs, multi-node)" in table
    assert "GPU-hours lost to stretch" in table
    assert f"largest gang in one {SPINE} (8-GPU workers): mean / min" in table
    assert f"multi-node jobs held by one {SPINE}" in table
    path = tmp_path / "sim.png"
    plot(sims, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
