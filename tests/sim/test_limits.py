"""The simulator's limits cover every phase:
preemption's and the group cycle's reads of a pod group count against the work limit; the pod
caps are checked before a job, a generator or a trace row is expanded into its workers;
worker names never collide with job names; `wall_seconds` is the whole run; trace cells and
`--window` are read strictly. Small limits (monkeypatched) exercise the caps."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.cli import main
from scheduler.core.framework import Framework
from scheduler.sim import engine, scenario, trace
from scheduler.sim.engine import Simulation, WorkLimitError
from scheduler.sim.scenario import Job, Scenario, ScenarioError, parse_scenario
from scheduler.sim.trace import _smallest_divisor_from, load_trace, replay_on

HEADER = "job,arrival_s,duration_s,gpus,workers,gpu_model,status\n"


def cluster(count: int = 1, jobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "c",
        "nodes": [{"name": "h", "count": count, "gpuTopology": "dgx-h100",
                   "resources": {"cpu": "128", "memory": "1Ti"}}],
    }  # fmt: skip
    if jobs is not None:
        data["jobs"] = jobs
    return data


GANG = [{"name": "gang", "duration": 60, "gpus": 8, "workers": 40}]
"""40 workers of 8 GPUs on one 8-GPU node: one is bound, 39 fail and each runs preemption."""


# ---------------------------------------------------------------------------- the work limit


def test_preemption_reading_a_pod_group_counts_against_the_work_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sc = parse_scenario(cluster(jobs=GANG))
    sim = Simulation(sc, "kube+nvidia-dp").run()
    phases = sim.meter.by_phase
    # every failing worker's preemption read the group's 40 pods, and was charged its scan
    assert phases["pod groups"] >= 39 * 40
    assert phases["preemption"] >= 39 * (1 + engine.ATTEMPT_OVERHEAD)
    assert phases["scheduling"] == 40 * (1 + engine.ATTEMPT_OVERHEAD)
    assert sim.work == sum(phases.values())
    # a limit the attempts alone stay under, preemption's reads do not
    monkeypatch.setattr(engine, "WORK_LIMIT", 40 * (1 + engine.ATTEMPT_OVERHEAD) + 1000)
    with pytest.raises(WorkLimitError, match=r"policy kube\+nvidia-dp: more than 3,040 node "):
        Simulation(sc, "kube+nvidia-dp").run()
    quiet = Simulation(sc, "kube+nvidia-dp", preemption=False).run()  # no preemption: fits
    assert quiet.work == 40 * (1 + engine.ATTEMPT_OVERHEAD)


def test_the_group_cycle_charges_every_member(monkeypatch: pytest.MonkeyPatch) -> None:
    sim = Simulation(parse_scenario(cluster(jobs=GANG)), "topo+topo-dp").run()
    # the group cycle tries all 40 members in one pop: 40 attempts, not one
    assert sim.meter.by_phase["scheduling"] >= 40 * (1 + engine.ATTEMPT_OVERHEAD)
    assert sim.meter.by_phase["pod groups"] >= 40
    monkeypatch.setattr(engine, "WORK_LIMIT", 20 * (1 + engine.ATTEMPT_OVERHEAD))
    with pytest.raises(WorkLimitError, match=r"spent on scheduling"):
        Simulation(parse_scenario(cluster(jobs=GANG)), "topo+topo-dp").run()


def test_work_limit_exits_2_naming_the_trace_and_the_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "t.csv").write_text(HEADER + "big,0,60,320,,,\n")  # 40 workers of 8 GPUs
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cluster()))
    monkeypatch.setattr(engine, "WORK_LIMIT", 3000)
    args = ["simulate", "--trace", str(tmp_path / "t.csv"), "--cluster", str(tmp_path / "c.yaml")]
    assert main([*args, "--policy", "kube+nvidia-dp"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"error: {tmp_path / 't.csv'}: policy kube+nvidia-dp: more than 3,000")
    assert "the simulator's limit per policy run (spent on " in err and "pod groups" in err


def test_wall_seconds_includes_preemption(monkeypatch: pytest.MonkeyPatch) -> None:
    """PostFilter ran outside the decision's timer: `wall_seconds` now counts it (and every
    other phase), `decide_seconds` is the deciding alone."""
    slept = []
    post_filter = Framework.run_post_filter

    def slow(self: Framework, *args: Any) -> Any:
        time.sleep(0.01)
        slept.append(0.01)
        return post_filter(self, *args)

    monkeypatch.setattr(Framework, "run_post_filter", slow)
    sim = Simulation(parse_scenario(cluster(jobs=GANG)), "kube+nvidia-dp").run()
    assert len(slept) == 39
    assert sim.wall_seconds >= sum(slept) > sim.schedule_seconds
    doc = json.loads(json.dumps(_summary(sim)))
    assert doc["wall_seconds"] == round(sim.wall_seconds, 4)
    assert doc["decide_seconds"] == round(sim.schedule_seconds, 4)
    assert doc["work"] == {"node_evaluations": sim.work, "limit": engine.WORK_LIMIT}


def _summary(sim: Simulation) -> dict[str, Any]:
    from scheduler.sim.report import summarize

    return summarize(sim)


# ---------------------------------------------------------------------------- pod caps


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Pods made by `as_workers` (scenario and trace), per call."""
    calls: list[int] = []
    real = scenario.as_workers

    def counting(job: Job, workers: int, topology: tuple[str, str] | None) -> list[Job]:
        calls.append(max(1, workers))
        return real(job, workers, topology)

    monkeypatch.setattr(scenario, "as_workers", counting)
    monkeypatch.setattr(trace, "as_workers", counting)
    monkeypatch.setattr(scenario, "MAX_JOBS", 20)
    return calls


def test_explicit_jobs_times_workers_are_checked_before_expanding(made: list[int]) -> None:
    jobs = [{"name": "a", "duration": 1, "gpus": 8, "count": 6, "workers": 10}]
    with pytest.raises(ScenarioError, match=r"^jobs\[0\]\.workers: 6 job\(s\) of 10 workers: "
                       r"60 jobs in all; the simulator takes at most 20 \(pods"):  # fmt: skip
        parse_scenario(cluster(jobs=jobs))
    assert made == []


def test_generated_workers_are_checked_as_they_are_made(made: list[int]) -> None:
    jobs = [{"generate": 10, "duration": {"median": 60}, "gpus": {8: 1}, "workers": {5: 1}}]
    with pytest.raises(ScenarioError, match=r"^jobs\[0\]\.workers: job job0-0004 of 5 workers: "
                       r"25 jobs in all"):  # fmt: skip
        parse_scenario(cluster(jobs=jobs))
    assert sum(made) <= 20


def test_nodes_times_pods_is_checked_before_expanding(
    made: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scenario, "MAX_NODE_JOBS", 100)
    jobs = [{"name": "a", "duration": 1, "gpus": 8, "count": 3, "workers": 4}]
    message = r"^jobs\[0\]\.workers: 3 job\(s\) of 4 workers: nodes x jobs: 10 x 12 is more"
    with pytest.raises(ScenarioError, match=message + " than the simulator's limit of 100"):
        parse_scenario(cluster(count=10, jobs=jobs))
    assert made == []


def test_trace_gangs_are_checked_before_expanding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], made: list[int]
) -> None:
    rows = "".join(f"j{i},{i},60,{8 * 15},,,\n" for i in range(100))  # 15 workers each
    (tmp_path / "t.csv").write_text(HEADER + rows)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cluster()))
    args = ["simulate", "--trace", str(tmp_path / "t.csv"), "--cluster", str(tmp_path / "c.yaml")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "t.csv: line 3: gpus: a job of 15 worker pods: 30 jobs in all; the simulator " in err
    assert sum(made) <= 20


def test_smallest_divisor_matches_the_definition() -> None:
    for n in range(1, 150):
        for low in range(1, n + 1):
            expected = min(d for d in range(low, n + 1) if n % d == 0)
            assert _smallest_divisor_from(n, low) == expected, (n, low)
    assert _smallest_divisor_from(999_983, 124_998) == 999_983  # a prime: itself, at once
    assert _smallest_divisor_from(80_000, 10_000) == 10_000


# ---------------------------------------------------------------------------- names


def _replay(tmp_path: Path, rows: str, jobs: list[dict[str, Any]] | None = None) -> Scenario:
    (tmp_path / "t.csv").write_text(HEADER + rows)
    sc = parse_scenario(cluster(count=2, jobs=jobs), jobs_required=False)
    replay_on(sc, load_trace(tmp_path / "t.csv"), "t.csv", (0.0, None))
    return sc


@pytest.mark.parametrize(
    ("rows", "names"),
    [
        # a job row named like a worker of an earlier gang
        ("big,0,60,16,,,\nbig-w0,5,60,1,,,\n", ["big-w0", "big-w0-line3", "big-w1"]),
        # ... of a later gang: the gang is renamed
        ("big-w1,0,60,1,,,\nbig,5,60,16,,,\n", ["big-line3-w0", "big-line3-w1", "big-w1"]),
        # the renamed name is itself taken
        ("x-line4,0,60,1,,,\nx,1,60,1,,,\nx,2,60,1,,,\n", ["x", "x-line4", "x-line4-2"]),
    ],
)
def test_trace_worker_and_job_names_never_collide(
    tmp_path: Path, rows: str, names: list[str]
) -> None:
    sc = _replay(tmp_path, rows)
    assert sorted(j.name for j in sc.jobs) == names
    sim = Simulation(sc, "topo+topo-dp").run()
    assert len(sim.records) == len(sc.jobs)
    assert all(r.state == "completed" for r in sim.records.values())


def test_trace_gang_renamed_past_the_scenario_pods(tmp_path: Path) -> None:
    own = [{"name": "big-w0", "duration": 10, "gpus": 1}]
    sc = _replay(tmp_path, "big,0,60,16,,,\n", own)
    assert sorted(j.name for j in sc.jobs) == ["big-line2-w0", "big-line2-w1", "big-w0"]
    assert {j.group for j in sc.jobs} == {None, "big-line2"}


def test_scenario_worker_name_collision_names_both_entries() -> None:
    jobs = [{"name": "a", "duration": 60, "gpus": 8, "workers": 2},
            {"name": "a-w1", "duration": 60, "gpus": 1}]  # fmt: skip
    with pytest.raises(ScenarioError, match=r"^jobs\[1\]: pod name 'a-w1' is already the name "
                       r"of a worker of multi-node job 'a' of jobs\[0\]"):  # fmt: skip
        parse_scenario(cluster(jobs=jobs))


def test_simulation_refuses_duplicate_pod_names() -> None:
    sc = parse_scenario(cluster(jobs=[{"name": "a", "duration": 60}]))
    sc.jobs = [*sc.jobs, sc.jobs[0]]
    with pytest.raises(ValueError, match="pod name 'a' is used twice"):
        Simulation(sc, "topo+topo-dp")


# ---------------------------------------------------------------------------- strict numbers


@pytest.mark.parametrize(
    ("column", "cell"),
    [
        ("gpus", "1_0"), ("gpus", "1 0"), ("gpus", "٣"), ("gpus", "0x10"), ("gpus", "1.0"),
        ("gpus", "9" * 60), ("workers", "2_0"), ("workers", "nan"),
        ("arrival_s", "1_0"), ("arrival_s", "nan"), ("arrival_s", "inf"), ("arrival_s", "٣"),
        ("duration_s", "1e400"), ("duration_s", "-inf"), ("duration_s", "1 0"),
        ("duration_s", "0x1p3"),
    ],
)  # fmt: skip
def test_trace_numbers_are_read_strictly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], column: str, cell: str
) -> None:
    values = {"job": "j", "arrival_s": "0", "duration_s": "60", "gpus": "1", "workers": "",
              "gpu_model": "", "status": "", column: cell}  # fmt: skip
    row = ",".join(values[c] for c in trace.TRACE_COLUMNS)
    (tmp_path / "t.csv").write_text(HEADER + row + "\n", encoding="utf-8")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cluster()))
    args = ["simulate", "--trace", str(tmp_path / "t.csv"), "--cluster", str(tmp_path / "c.yaml")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"t.csv: line 2: {column}: must be " in err, err


@pytest.mark.parametrize("window", ["1_0:20", " 1:20", "1 :20", "nan:", "0:inf", "١:5", "0:1e400"])
def test_window_is_read_strictly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], window: str
) -> None:
    (tmp_path / "t.csv").write_text(HEADER + "j,0,60,1,,,\n")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cluster()))
    args = ["simulate", "--trace", str(tmp_path / "t.csv"), "--cluster", str(tmp_path / "c.yaml")]
    assert main([*args, "--window", window]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--window: {window!r}: START and END must be numbers" in err


def test_plain_numbers_still_read(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text(HEADER + "j, +5 ,6e1,+2,1,,\n")
    (row,) = load_trace(tmp_path / "t.csv")
    assert (row.arrival, row.duration, row.gpus, row.workers) == (5.0, 60.0, 2, 1)
    assert trace.parse_window("1.5:2e3") == (1.5, 2000.0)
    assert trace.parse_window(":") == (0.0, None)


def test_fractional_gpu_quantity_on_a_node_is_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`nvidia.com/gpu: "8.0"` is a whole quantity: it used to end in a traceback."""
    data = cluster(jobs=[{"name": "a", "duration": 60, "gpus": 8}])
    data["nodes"][0]["resources"]["nvidia.com/gpu"] = "8.0"
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    assert main(["simulate", str(tmp_path / "s.yaml"), "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["scenario"]["gpus"] == 8
