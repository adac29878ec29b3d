"""Multi-node jobs in the simulator: a trace of gangs finishes with no partial group under the
group cycle, while count-only (one pod at a time, as kube-scheduler) leaves groups partially
placed and GPUs idle; network labels from templates; scenario errors name the field."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.sim.engine import Simulation
from scheduler.sim.report import document, render_table, summarize
from scheduler.sim.scenario import ScenarioError, parse_scenario

SPINE = "network.topology.nvidia.com/spine"
RACK = "network.topology.nvidia.com/leaf"


def scenario(jobs: list[dict[str, Any]], count: int = 16) -> dict[str, Any]:
    return {
        "name": "gangs",
        "seed": 3,
        "nodes": [
            {
                "name": "h100",
                "count": count,
                "gpuTopology": "dgx-h100",
                "resources": {"cpu": "128", "memory": "1Ti"},
                "network": [{"key": SPINE, "nodesPer": 8}, {"key": RACK, "nodesPer": 4}],
            }
        ],
        "jobs": jobs,
    }


TRACE = [
    {
        "generate": 40,
        "namePrefix": "train",
        "arrivals": {"meanInterval": 300},
        "duration": {"median": 3600, "sigma": 0.5, "min": 600, "max": 14400},
        "gpus": {8: 1},
        "workers": {2: 1, 3: 1, 4: 1, 6: 1},
        "topology": {"preferred": RACK},
    },
    {
        "generate": 60,
        "namePrefix": "small",
        "arrivals": {"meanInterval": 200},
        "duration": {"median": 1800},
        "gpus": {1: 2, 2: 1, 4: 1},
    },
]


def test_network_labels_and_workers_expand() -> None:
    sc = parse_scenario(scenario([{"name": "job", "duration": 60, "gpus": 8, "workers": 3}]))
    nodes = sc.node_objects()
    assert nodes[0]["metadata"]["labels"][RACK] == "h100-leaf0"
    assert nodes[5]["metadata"]["labels"][RACK] == "h100-leaf1"
    assert nodes[9]["metadata"]["labels"][SPINE] == "h100-spine1"
    assert sc.network_levels == (SPINE, RACK)
    assert [j.name for j in sc.jobs] == ["job-w0", "job-w1", "job-w2"]
    annotations = sc.jobs[0].pod_object()["metadata"]["annotations"]
    assert annotations["topo-scheduler.io/pod-group"] == "job"
    assert annotations["topo-scheduler.io/min-member"] == "3"


@pytest.mark.parametrize(
    ("job", "message"),
    [
        ({"workers": 0}, r"jobs\[0\].workers: must be >= 1, got 0"),
        ({"topology": {"tight": RACK}}, r"jobs\[0\].topology.tight: unknown field"),
        ({"topology": {}}, r"jobs\[0\].topology: give one of required, preferred"),
    ],
)
def test_bad_job_fields_name_the_field(job: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        parse_scenario(scenario([{"name": "job", "duration": 60, "gpus": 8, **job}]))


def test_bad_network_names_the_field() -> None:
    data = scenario([{"name": "job", "duration": 60}])
    data["nodes"][0]["network"] = [{"key": RACK, "nodesPer": 4}, {"key": SPINE, "nodesPer": 8}]
    with pytest.raises(ScenarioError, match=r"nodes\[0\].network\[1\].nodesPer: 8 is wider"):
        parse_scenario(data)


def test_trace_of_gangs_finishes_with_no_partial_group() -> None:
    sc = parse_scenario(scenario(TRACE))
    gang = Simulation(sc, "topology", check=True).run()
    summary = summarize(gang)
    gangs = summary["gangs"]
    assert gangs["jobs"] == 40
    assert gangs["partially_placed"] == 0
    assert gangs["never_started"] == 0
    assert gangs["idle_gpu_hours"] == 0
    assert summary["pods"]["completed"] == summary["pods"]["total"]
    # no job of at most 4 workers (a rack holds 4 nodes) spans racks, when a rack was free
    assert gangs["spanning_domains"][RACK] < gangs["jobs"]
    count_only = Simulation(sc, "count-only", check=True).run()
    baseline = summarize(count_only)["gangs"]
    assert baseline["partially_placed"] > 0
    assert baseline["idle_gpu_hours"] > 0
    table = render_table(
        document(sc, {"topo+topo-dp": summary, "kube+nvidia-dp": summarize(count_only)}, 1.0)
    )
    assert "partially placed groups" in table
    assert f"jobs spanning >1 {RACK}" in table


def test_two_gangs_that_cannot_share_the_cluster_never_deadlock() -> None:
    jobs = [
        # comm 0: run times not stretched by the inter-node link, so starts are exact
        {"name": "a", "duration": 600, "gpus": 8, "workers": 3, "comm": 0},
        {"name": "b", "duration": 600, "gpus": 8, "workers": 3, "comm": 0},
    ]
    sc = parse_scenario(scenario(jobs, count=4))
    sim = Simulation(sc, "topology", check=True).run()
    gangs = summarize(sim)["gangs"]
    assert gangs["started"] == 2 and gangs["partially_placed"] == 0
    starts = sorted({r.bound_at for r in sim.records.values()})
    assert starts == [0.0, 600.0]  # one gang, then the other, each whole
    baseline = summarize(Simulation(sc, "count-only").run())["gangs"]
    assert baseline["partially_placed"] == 1  # b's first worker waits on a's GPUs


def one_node(jobs: list[dict[str, Any]], topology: str) -> dict[str, Any]:
    return {
        "name": "one",
        "nodes": [{"name": "n", "count": 1, "gpuTopology": topology,
                   "resources": {"cpu": "80", "memory": "512Gi"}}],
        "jobs": jobs,
    }  # fmt: skip


def test_a_gang_preempted_whole_runs_again_as_one_job() -> None:
    """Four 1-GPU workers, all evicted at t=100 for an 8-GPU job of higher priority (bound at
    101, done at 201): the job runs its 1,000 s again from the start (no checkpoint), every
    worker ending at the same instant; before, each worker ran as a job of its own, and they
    ended apart."""
    jobs = [
        {"name": "gang", "duration": 1000, "gpus": 1, "workers": 4},
        {"name": "hi", "arrival": 100, "duration": 100, "gpus": 8, "priority": 100},
    ]
    sim = Simulation(parse_scenario(one_node(jobs, "dgx-a100")), "topo+topo-dp", check=True).run()
    workers = [r for k, r in sim.records.items() if "/gang-" in k]
    assert {r.bound_at for r in workers} == {201.0}
    assert len({r.completed_at for r in workers}) == 1
    (run,) = {r.run_seconds for r in workers}
    assert run is not None and run >= 1000
    lost = sum(r.lost_gpu_seconds for k, r in sim.records.items() if "/gang-" in k)
    assert lost == pytest.approx(4 * 100)


def test_a_worker_preempted_alone_leaves_its_gang_waiting() -> None:
    """kube-scheduler places three 4-GPU workers one by one on one 8-GPU node (two fit), then
    evicts single workers for a 2-GPU job of higher priority: the gang never runs, nothing of
    it completes (before, the tracker still counted an evicted worker as bound, started the
    job without it, and the run ended in a KeyError)."""
    jobs = [
        {"name": "gang", "duration": 300, "gpus": 4, "workers": 3, "priority": 10},
        {"name": "hi", "arrival": 100, "duration": 200, "gpus": 2, "priority": 100},
    ]
    sim = Simulation(parse_scenario(one_node(jobs, "dgx-h100")), "kube+nvidia-dp", check=True)
    sim.run()
    workers = [r for k, r in sim.records.items() if "/gang-" in k]
    assert sum(r.preemptions for r in workers) >= 1
    assert all(r.completed_at is None and r.run_start is None for r in workers)
    gangs = summarize(sim)["gangs"]
    assert gangs["started"] == 0 and gangs["partially_placed"] == 1


def test_job_sizes_count_a_multi_node_job_once_by_all_its_gpus() -> None:
    """`by_gpus` counts pods; `by_job_size` counts jobs: the 2- to 6-worker jobs of 8-GPU
    workers are jobs of 16 to 48 GPUs, each counted once, its completion its last worker's."""
    sim = Simulation(parse_scenario(scenario(TRACE)), "topology", check=True).run()
    summary = summarize(sim)
    by_job = summary["by_job_size"]
    jobs: dict[str, list[Any]] = {}
    for record in sim.records.values():
        if record.job.gpus:
            jobs.setdefault(record.job.group or record.job.name, []).append(record)
    sizes: dict[str, list[float]] = {}
    for workers in jobs.values():
        done = max(r.completion_time for r in workers)
        sizes.setdefault(str(sum(r.job.gpus for r in workers)), []).append(done)
    assert set(by_job) == set(sizes) and {"16", "24", "32", "48"} <= set(by_job)
    assert "8" not in by_job  # every 8-GPU pod of the trace is a worker of a larger job
    assert summary["by_gpus"]["8"]["jobs"] == sum(len(w) for w in jobs.values() if w[0].job.group)
    for size, done in sizes.items():
        assert by_job[size]["jobs"] == len(done)
        assert by_job[size]["completion_seconds"]["mean"] == pytest.approx(
            sum(done) / len(done), abs=0.01
        )
    every = [d for done in sizes.values() for d in done]
    assert summary["job_completion_seconds"]["mean"] == pytest.approx(
        sum(every) / len(every), abs=0.01
    )
