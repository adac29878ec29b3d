"""Job time in the simulator: durations stretched by the bandwidth a GPU set lost."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.sim.cli import simulate
from scheduler.sim.engine import Simulation
from scheduler.sim.quality import stretched_duration
from scheduler.sim.scenario import parse_scenario

# One two-socket PCIe box: PIX pairs 0-1, 2-3 | 4-5, 6-7 (22 GB/s), NODE within a socket
# (12), SYS across (8). The best 2-GPU ring on it is a PIX pair (22), the best 4-GPU ring stays
# on one socket (12).
TWO_JOBS: dict[str, Any] = {
    "name": "two-jobs",
    "nodes": [{"name": "pcie", "count": 1, "gpuTopology": "pcie-8gpu-2socket",
               "resources": {"cpu": "64", "memory": "512Gi"}}],
    "jobs": [
        {"name": "pair", "arrival": 0, "duration": 1000, "gpus": 2},
        {"name": "quad", "arrival": 10, "duration": 2000, "gpus": 4, "comm": 0.5},
    ],
}  # fmt: skip


@pytest.mark.parametrize(
    ("policy", "quad_gpus", "quad_run"),
    [
        # topo-scheduler: 4,5,6,7 rings at NODE speed, the node's best: no stretch.
        ("topo+topo-dp", (4, 5, 6, 7), 2000.0),
        # lowest free indices: 2,3,4,5 must cross the sockets (SYS, 8 GB/s):
        # 2000 x ((1 - 0.5) + 0.5 x 12 / 8) = 2500.
        ("kube+first-free", (2, 3, 4, 5), 2500.0),
    ],
)
def test_two_jobs_by_hand(policy: str, quad_gpus: tuple[int, ...], quad_run: float) -> None:
    sim = Simulation(parse_scenario(TWO_JOBS), policy).run()
    pair, quad = sim.records["default/pair"], sim.records["default/quad"]
    assert pair.gpus == (0, 1) and pair.run_seconds == 1000.0  # PIX pair: the best, comm 0.3
    assert quad.gpus == quad_gpus and quad.run_seconds == pytest.approx(quad_run)
    assert quad.completed_at == pytest.approx(10 + quad_run)
    assert quad.completion_time == pytest.approx(quad_run)  # it started on arrival
    doc, _ = simulate(parse_scenario(TWO_JOBS), (policy,))
    summary = doc["policies"][policy]
    hours = (2 * 1000 + 4 * quad_run) / 3600
    assert summary["gpu_hours"] == pytest.approx(hours, abs=1e-3)
    assert summary["by_gpus"]["4"]["gpu_hours"] == pytest.approx(4 * quad_run / 3600, abs=1e-3)
    assert summary["gpu_job_completion_seconds"]["mean"] == pytest.approx((1000 + quad_run) / 2)
    assert summary["by_gpus"]["4"]["completion_seconds"]["mean"] == pytest.approx(quad_run)
    assert summary["run_time_stretch_mean"] == pytest.approx((1 + quad_run / 2000) / 2)


def test_default_comm_share() -> None:
    jobs = parse_scenario(TWO_JOBS).jobs
    assert [j.comm_share for j in jobs] == [0.3, 0.5]
    one = parse_scenario({**TWO_JOBS, "jobs": [{"name": "x", "duration": 5, "gpus": 1}]})
    assert one.jobs[0].comm_share == 0.0


def test_stretch_formula() -> None:
    assert stretched_duration(100.0, 0.3, 50.0, 25.0) == pytest.approx(130.0)
    assert stretched_duration(100.0, 0.0, 50.0, 8.0) == 100.0
    assert stretched_duration(100.0, 0.3, None, None) == 100.0  # one GPU: no ring
    # Across nodes the ring runs over the inter-node link when that is slower.
    assert stretched_duration(100.0, 0.5, 300.0, 300.0, inter_node_busbw=50.0) == 350.0
    assert stretched_duration(100.0, 0.5, 300.0, 25.0, inter_node_busbw=50.0) == 650.0


def test_inter_node_bandwidth_field() -> None:
    data = {**TWO_JOBS, "nodes": [{**TWO_JOBS["nodes"][0], "interNodeBandwidth": 25}]}
    assert parse_scenario(data).templates[0].inter_node_gbps == 25.0
    assert parse_scenario(TWO_JOBS).templates[0].inter_node_gbps == 50.0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"jobs": [{"name": "x", "duration": 5, "gpus": 2, "comm": 2}]},
         "jobs[0].comm: must be between 0 and 1, got 2"),
        ({"nodes": [{**TWO_JOBS["nodes"][0], "interNodeBandwidth": 0}]},
         "nodes[0].interNodeBandwidth: must be at least 0.001 (GB/s), got 0"),
    ],
)  # fmt: skip
def test_bad_job_time_fields(change: dict[str, Any], message: str) -> None:
    from scheduler.sim.scenario import ScenarioError

    with pytest.raises(ScenarioError) as err:
        parse_scenario({**TWO_JOBS, **change})
    assert str(err.value) == message


def test_a_job_spanning_nodes_runs_at_the_inter_node_bandwidth() -> None:
    """Two 8-GPU workers on two DGX A100 nodes (NVSwitch, 300 GB/s inside a node, NICs of
    50 GB/s a node: 6.25 per GPU): hierarchical all-reduce, by hand 1.75 / 300 + 1 / (8 x 6.25)
    s per GB, an effective busbw of 1.875 / that = 72.58 GB/s. It is the best placement of its
    shape in this cluster (the reference), so it runs for its duration; both workers start and
    finish together (the stretch against a better placement: tests/sim/test_sim_network.py)."""
    data = {
        "name": "two-nodes",
        "nodes": [{"name": "a100", "count": 2, "gpuTopology": "dgx-a100",
                   "resources": {"cpu": "128", "memory": "1Ti"}}],
        "jobs": [{"name": "big", "duration": 100, "gpus": 8, "workers": 2, "comm": 0.5}],
    }  # fmt: skip
    sim = Simulation(parse_scenario(data), "topo+topo-dp").run()
    workers = [sim.records[f"default/big-w{i}"] for i in range(2)]
    assert {w.node for w in workers} == {"a100-0", "a100-1"}
    assert [w.run_seconds for w in workers] == [100.0, 100.0]
    time = sim.network.jobs["big"]
    assert time.nodes == 2 and time.gpus == 16
    assert time.busbw_gbps == pytest.approx(1.875 / (1.75 / 300 + 1 / 50))
    single = {**data, "jobs": [{"name": "one", "duration": 100, "gpus": 8, "comm": 0.5}]}
    one = Simulation(parse_scenario(single), "topo+topo-dp").run().records["default/one"]
    assert one.run_seconds == 100.0  # one node, the best ring on it: no stretch
