"""Queues in the simulator: ElasticQuotas per namespace, where trace jobs go, the report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.cli import main
from scheduler.sim.engine import Simulation
from scheduler.sim.report import summarize
from scheduler.sim.scenario import ScenarioError, parse_scenario
from scheduler.sim.trace import load_trace, replay_on

ROOT = Path(__file__).resolve().parents[2]
NODES = [{"name": "n", "count": 2, "gpuTopology": "dgx1-v100",
          "resources": {"cpu": "80", "memory": "512Gi"}, "gpuTaint": False}]  # fmt: skip
QUEUES = [
    {"namespace": "research", "min": {"nvidia.com/gpu": 8}, "max": {"nvidia.com/gpu": 16}},
    {"namespace": "dev", "min": {"nvidia.com/gpu": 8}, "max": {"nvidia.com/gpu": 16}},
]
RULES = [{"namespace": "research", "minGpus": 8}, {"namespace": "dev"}]


def cluster(**extra: Any) -> dict[str, Any]:
    return {"name": "q", "nodes": NODES, "queues": QUEUES, "traceNamespaces": RULES, **extra}


def test_trace_jobs_go_to_the_first_matching_namespace_or_their_column(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text(
        "job,arrival_s,duration_s,gpus,workers,gpu_model,status,namespace\n"
        "big,0,100,16,2,,,\n"  # 16 GPUs: research (a gang of two workers)
        "mid,0,100,8,1,,,\n"  # 8: research
        "one,0,100,1,,,,\n"  # dev
        "own,0,100,1,,,,team-x\n"  # its column
    )
    scenario = parse_scenario(cluster(), jobs_required=False)
    replay_on(scenario, load_trace(tmp_path / "t.csv"), "t.csv", (0.0, None))
    where = {j.name: j.namespace for j in scenario.jobs}
    assert where == {"big-w0": "research", "big-w1": "research", "mid": "research",
                     "one": "dev", "own": "team-x"}  # fmt: skip


def test_kube_ignores_quotas_topo_enforces_and_reclaims() -> None:
    """Research borrows the whole cluster; dev's jobs within its min reclaim from it under
    topo-scheduler, and wait under kube-scheduler (no quotas)."""
    jobs = [
        {"name": "r", "gpus": 8, "count": 2, "duration": 1000, "namespace": "research"},
        {"name": "d", "gpus": 4, "count": 2, "arrival": 10, "duration": 100, "namespace": "dev"},
    ]
    scenario = parse_scenario(cluster(jobs=jobs))
    topo = Simulation(scenario, "topo+topo-dp", check=True).run()
    kube = Simulation(scenario, "kube+nvidia-dp", check=True).run()
    from scheduler.sim.report import summarize

    t, k = summarize(topo), summarize(kube)
    assert t["namespaces"]["research"]["reclaim"]["preemptions"] == 1
    assert t["namespaces"]["research"]["reclaim"]["lost_gpu_hours"] == pytest.approx(
        8 * 10 / 3600, abs=1e-3
    )
    assert t["namespaces"]["dev"]["by_gpus"]["4"]["wait_seconds_mean"] < 5.0
    assert t["namespaces"]["research"]["borrowed_gpu_hours"] > 0
    assert k["namespaces"]["research"]["reclaim"]["preemptions"] == 0
    assert k["namespaces"]["dev"]["by_gpus"]["4"]["wait_seconds_mean"] == pytest.approx(990.0)
    assert k["namespaces"]["research"]["borrowed_gpu_hours"] is None
    assert t["namespaces"]["dev"]["queue"]["enforced"] is True
    assert k["namespaces"]["dev"]["queue"]["enforced"] is False
    assert "reservations" not in k and t["reservations"]["made"] == 0


def test_over_max_waits_under_topo() -> None:
    queues = [{"namespace": "dev", "min": {"nvidia.com/gpu": 4}, "max": {"nvidia.com/gpu": 4}}]
    jobs = [{"name": "d", "gpus": 4, "count": 2, "duration": 100, "namespace": "dev"}]
    scenario = parse_scenario({"name": "q", "nodes": NODES, "queues": queues, "jobs": jobs})
    topo = Simulation(scenario, "topo+topo-dp", check=True).run()
    waits = sorted(r.wait or 0.0 for r in topo.records.values())
    assert waits == [0.0, 100.0]
    kube = Simulation(scenario, "kube+nvidia-dp", check=True).run()
    assert sorted(r.wait or 0.0 for r in kube.records.values()) == [0.0, 0.0]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"queues": {"a": 1}}, "queues: must be a list of queues"),
        ({"queues": [{"namespace": "A"}]}, "queues[0].namespace: must be a namespace name"),
        ({"queues": [{"namespace": "a", "min": {"nvidia.com/gpu": "x"}}]},
         "queues[0].min.nvidia.com/gpu:"),
        ({"queues": [{"namespace": "a", "min": {"nvidia.com/gpu": 9},
                      "max": {"nvidia.com/gpu": 8}}]},
         "queues[0].min.nvidia.com/gpu: must not exceed max (8), got 9"),
        ({"queues": [{"namespace": "a"}, {"namespace": "a"}]},
         "queues[1].namespace: 'a' has a queue already"),
        ({"queues": [{"namespace": "a", "limit": 3}]},
         "queues[0].limit: unknown field (known: max, min, namespace)"),
        ({"traceNamespaces": [{"namespace": "a", "minGpus": -1}]},
         "traceNamespaces[0].minGpus:"),
        ({"traceNamespaces": [{"minGpus": 1}]}, "traceNamespaces[0].namespace:"),
        ({"jobs": [{"name": "j", "duration": 1, "namespace": "No"}]},
         "jobs[0].namespace: must be a namespace name"),
    ],
)  # fmt: skip
def test_bad_queue_fields_name_the_field(extra: dict[str, Any], message: str) -> None:
    data = {"name": "q", "nodes": NODES, **extra}
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data, jobs_required=False)
    assert str(info.value).startswith(message), str(info.value)


def test_a_bad_namespace_cell_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "t.csv").write_text(
        "job,arrival_s,duration_s,gpus,workers,gpu_model,status,namespace\na,0,1,1,,,,Dev_X\n"
    )
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cluster()))
    args = ["simulate", "--trace", str(tmp_path / "t.csv"), "--cluster", str(tmp_path / "c.yaml")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "line 2: namespace: must be a namespace name" in err, err


def test_report_table_and_json_have_the_namespaces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "t.csv").write_text(
        "job,arrival_s,duration_s,gpus,workers,gpu_model,status\n"
        "big,0,600,16,2,,\nsmall,10,60,1,,,\n"
    )
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cluster()))
    args = ["simulate", "--trace", str(tmp_path / "t.csv"), "--cluster", str(tmp_path / "c.yaml")]
    assert main([*args, "--output", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    topo = doc["policies"]["topo+topo-dp"]
    assert set(topo["namespaces"]) == {"research", "dev"}
    assert topo["namespaces"]["research"]["jobs"] == 2
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "namespace research: GPU jobs" in out and "gang reservations" in out


def test_shipped_queue_cluster_loads() -> None:
    from scheduler.sim.scenario import load_scenario

    scenario = load_scenario(ROOT / "examples/trace-cluster-queues.yaml", jobs_required=False)
    assert [q.namespace for q in scenario.queues] == ["research-large", "dev-small"]
    assert scenario.namespace_for(8) == "research-large"
    assert scenario.namespace_for(4) == "dev-small"


# small jobs hold part of both nodes as a two-node gang arrives; more keep coming
GANG_JOBS = [
    {"name": "s", "gpus": 1, "count": 4, "duration": 500, "interval": 1},
    {"name": "g", "gpus": 8, "workers": 2, "arrival": 10, "duration": 100},
    {"name": "t", "gpus": 1, "count": 8, "arrival": 20, "interval": 100, "duration": 500},
]


def test_gang_reservation_holds_nodes_for_a_gang(capsys: pytest.CaptureFixture[str]) -> None:
    scenario = parse_scenario({"name": "r", "nodes": NODES, "jobs": GANG_JOBS})
    from scheduler.sim.report import summarize

    held = summarize(
        Simulation(scenario, "topo+topo-dp", check=True, reservation_timeout=3600).run()
    )
    plain = summarize(Simulation(scenario, "topo+topo-dp", check=True).run())
    assert held["reservations"]["made"] == 1 and held["reservations"]["fulfilled"] == 1
    assert plain["reservations"]["made"] == 0
    assert held["gangs"]["partially_placed"] == 0
    gang_wait = held["by_gpus"]["8"]["wait_seconds"]["mean"]
    assert gang_wait < plain["by_gpus"]["8"]["wait_seconds"]["mean"]
    assert main(["simulate", "--gang-reservation", "-1"]) == 2
    assert "--gang-reservation: must be seconds" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse's exit 2: read as every number flag is
        main(["simulate", "--gang-reservation", "1_0"])
    assert "must be a finite number, got '1_0'" in capsys.readouterr().err


def test_gang_reservation_from_the_configuration_unless_the_flag_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "r.yaml"
    scenario.write_text(yaml.safe_dump({"name": "r", "nodes": NODES, "jobs": GANG_JOBS}))
    args = {"gangReservationSeconds": 3600}
    profile = {
        "schedulerName": "topo-scheduler",
        "pluginConfig": [{"name": "GPUTopology", "args": args}],
    }
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"profiles": [profile]}))

    def made(*flags: str) -> int:
        argv = ["simulate", str(scenario), "--policy", "topology", "--output", "json", *flags]
        assert main(argv) == 0
        doc = json.loads(capsys.readouterr().out)
        return int(doc["policies"]["topo+topo-dp"]["reservations"]["made"])

    assert made("--config", str(config)) == 1  # the configuration's gangReservationSeconds
    assert made("--config", str(config), "--gang-reservation", "0") == 0  # the flag wins
    assert made() == 0  # neither: off
    assert made("--gang-reservation", "3600") == 1


def test_a_reclaiming_gang_keeps_what_it_reclaimed_from_a_higher_priority_borrower() -> None:
    """research's gang, within its min, reclaims dev's borrowing job of higher priority. The
    gang's nominated members count against the total guaranteed quota whatever their priority
    (CapacityScheduling's rule), so the evicted job, back at once, does not take the room
    back: before, it did, and the two evicted each other every ten seconds until the work limit
    ended the run."""
    nodes = [{"name": "n", "count": 1, "gpuTopology": "dgx2-v100",
              "resources": {"cpu": "32", "memory": "64Gi"}}]  # fmt: skip
    queues = [
        {"namespace": "research", "min": {"nvidia.com/gpu": 16}, "max": {"nvidia.com/gpu": 48}},
        {"namespace": "dev", "min": {"nvidia.com/gpu": 4}, "max": {"nvidia.com/gpu": 20}},
    ]
    jobs = [
        {"name": "small", "arrival": 200, "duration": 2800, "gpus": 2, "workers": 3,
         "namespace": "dev"},
        {"name": "hi", "arrival": 450, "duration": 1700, "gpus": 8, "priority": 100,
         "namespace": "research"},
        {"name": "gang", "arrival": 640, "duration": 2500, "gpus": 4, "workers": 4,
         "namespace": "research"},
        {"name": "borrower", "arrival": 980, "duration": 2100, "gpus": 8, "workers": 2,
         "priority": 10, "namespace": "dev"},
    ]  # fmt: skip
    scenario = parse_scenario({"name": "q", "nodes": nodes, "queues": queues, "jobs": jobs})
    sim = Simulation(scenario, "topo+topo-dp", check=True).run()
    assert all(r.state == "completed" for r in sim.records.values())
    assert sum(r.preemptions for r in sim.records.values()) <= 5


RESERVED_AT_THE_END: dict[str, Any] = {
    "name": "s319",
    "nodes": [
        {
            "name": "t0",
            "count": 3,
            "gpuTopology": "dgx2-v100",
            "resources": {"cpu": "80", "memory": "512Gi"},
            "network": [
                {"key": "network.topology.nvidia.com/spine", "nodesPer": 2},
                {"key": "network.topology.nvidia.com/leaf", "nodesPer": 1},
            ],
        },
        {"name": "cpu", "count": 1, "resources": {"cpu": "16", "memory": "64Gi"}},
    ],
    "queues": [
        {"namespace": "research", "min": {"nvidia.com/gpu": 8}, "max": {"nvidia.com/gpu": 40}},
        {"namespace": "dev", "min": {"nvidia.com/gpu": 16}, "max": {"nvidia.com/gpu": 20}},
    ],
    "jobs": [
        {
            "name": "j6",
            "arrival": 923,
            "duration": 2410,
            "gpus": 8,
            "workers": 4,
            "priority": 100,
            "cpu": "4",
        },
        {
            "name": "j11",
            "arrival": 1954,
            "duration": 2466,
            "gpus": 2,
            "priority": 10,
            "namespace": "research",
        },
        {
            "name": "j13",
            "arrival": 1975,
            "duration": 2563,
            "gpus": 8,
            "priority": 10,
            "namespace": "dev",
        },
        {
            "name": "j14",
            "arrival": 862,
            "duration": 1988,
            "gpus": 1,
            "workers": 3,
            "topology": {"preferred": "network.topology.nvidia.com/spine"},
            "namespace": "dev",
            "cpu": "8",
        },
        {
            "name": "j15",
            "arrival": 674,
            "duration": 2267,
            "gpus": 1,
            "priority": 100,
            "namespace": "dev",
        },
        {
            "name": "j16",
            "arrival": 985,
            "duration": 775,
            "gpus": 1,
            "priority": 10,
            "namespace": "dev",
        },
        {
            "name": "j17",
            "arrival": 1579,
            "duration": 578,
            "gpus": 1,
            "workers": 4,
            "topology": {"preferred": "network.topology.nvidia.com/leaf"},
            "priority": 0,
            "namespace": "dev",
        },
        {
            "name": "j19",
            "arrival": 396,
            "duration": 1031,
            "gpus": 4,
            "workers": 2,
            "priority": 100,
            "namespace": "research",
            "cpu": "4",
        },
        {
            "name": "j20",
            "arrival": 368,
            "duration": 2335,
            "gpus": 8,
            "workers": 2,
            "priority": 100,
            "namespace": "research",
            "cpu": "4",
        },
        {
            "name": "j22",
            "arrival": 363,
            "duration": 1022,
            "gpus": 4,
            "workers": 4,
            "topology": {"required": "network.topology.nvidia.com/leaf"},
            "namespace": "research",
        },
    ],
}


def test_reservations_held_when_nothing_else_happens_still_expire() -> None:
    """Reservations (and the nominations of a reclaim) that block each other after the last
    job ends: the queue's flush retries the waiting pods until the reservations expire, as in
    a cluster; before, the run stopped at the last event with them still held and most jobs
    pending on idle GPUs."""
    scenario = parse_scenario(RESERVED_AT_THE_END)
    sim = Simulation(scenario, "topo+nvidia-dp", check=True, reservation_timeout=5000).run()
    from scheduler.sim.report import summarize

    reservations = summarize(sim)["reservations"]
    assert reservations["held_at_end"] == 0 and reservations["expired"] >= 1


def test_reclaim_for_a_gang_stays_in_one_domain_of_its_required_level() -> None:
    """dev's gang of three 4-GPU workers requires one leaf (one 8-GPU node): it fits in none,
    so it evicts nothing. Before, reclaim planned it across both leaves, evicted research's
    running gang, and left nominations that kept that gang pending on idle GPUs."""
    leaf = "network.topology.nvidia.com/leaf"
    nodes = [{"name": "v", "count": 2, "gpuTopology": "dgx1-v100",
              "resources": {"cpu": "16", "memory": "512Gi"},
              "network": [{"key": "network.topology.nvidia.com/spine", "nodesPer": 2},
                          {"key": leaf, "nodesPer": 1}]}]  # fmt: skip
    queues = [
        {"namespace": "research", "min": {"nvidia.com/gpu": 8}, "max": {"nvidia.com/gpu": 24}},
        {"namespace": "dev", "min": {"nvidia.com/gpu": 16}, "max": {"nvidia.com/gpu": 16}},
    ]
    jobs = [
        {"name": "small", "duration": 2000, "gpus": 1, "workers": 4, "cpu": "8",
         "namespace": "dev"},
        {"name": "big", "arrival": 100, "duration": 500, "gpus": 4, "workers": 4,
         "namespace": "research"},
        {"name": "never", "arrival": 1000, "duration": 500, "gpus": 4, "workers": 3,
         "namespace": "dev", "topology": {"required": leaf}},
    ]  # fmt: skip
    scenario = parse_scenario({"name": "q", "nodes": nodes, "queues": queues, "jobs": jobs})
    sim = Simulation(scenario, "topo+topo-dp", check=True).run()
    states = {key: r.state for key, r in sim.records.items()}
    assert all(states[f"research/big-w{i}"] == "completed" for i in range(4))
    assert sum(r.preemptions for r in sim.records.values()) == 0
    assert {states[f"dev/never-w{i}"] for i in range(3)} == {"pending"}


def test_reclaiming_one_worker_counts_the_whole_jobs_loss_for_its_namespace() -> None:
    """A dev job reclaims a research gang of two 8-GPU workers after 100 s: both workers'
    100 s are lost (16 GPUs x 100 s), in the namespace figure as in the total."""
    sc = parse_scenario(
        {
            "name": "reclaim-gang",
            "nodes": [
                {
                    "name": "n",
                    "count": 3,
                    "gpuTopology": "dgx-h100",
                    "resources": {"cpu": "200", "memory": "2Ti"},
                    "gpuTaint": False,
                }
            ],
            "queues": [
                {"namespace": "research", "min": {"nvidia.com/gpu": 0},
                 "max": {"nvidia.com/gpu": 16}},
                {"namespace": "dev", "min": {"nvidia.com/gpu": 24},
                 "max": {"nvidia.com/gpu": 24}},
            ],  # fmt: skip
            "jobs": [
                {"name": "g", "arrival": 0, "duration": 1000, "gpus": 8, "workers": 2,
                 "comm": 0, "namespace": "research"},
                {"name": "d0", "arrival": 0, "duration": 2000, "gpus": 8, "comm": 0,
                 "namespace": "dev"},
                {"name": "d1", "arrival": 100, "duration": 300, "gpus": 8, "comm": 0,
                 "namespace": "dev"},
            ],  # fmt: skip
        }
    )
    summary = summarize(Simulation(sc, "topology", check=True).run())
    lost = 16 * 100 / 3600
    assert summary["preemption"]["lost_gpu_hours"] == pytest.approx(lost, abs=0.001)
    research = summary["namespaces"]["research"]
    assert research["reclaim"]["lost_gpu_hours"] == pytest.approx(lost, abs=0.001)
    assert set(research["by_gpus"]) == {"16"}  # one job of 16 GPUs, not two of 8
