"""Trace replay: the neutral CSV format, bad rows, windows, jobs too big for any node."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from scheduler.cli import main
from scheduler.sim.scenario import parse_scenario
from scheduler.sim.trace import load_trace, replay_on

ROOT = Path(__file__).resolve().parents[2]
HEADER = "job,arrival_s,duration_s,gpus,workers,gpu_model,status\n"
CLUSTER = {
    "name": "c",
    "nodes": [{"name": "dgx", "count": 2, "gpuTopology": "dgx1-v100",
               "resources": {"cpu": "80", "memory": "512Gi"}, "gpuTaint": False}],
}  # fmt: skip
GOOD = HEADER + (
    "a_1,100,600,2,1,V100,Pass\n"
    "b,160,60,1,,,\n"
    ",200,30,0,,,\n"  # no name: row-4; a CPU pod
    "big,250,3600,16,2,,Failed\n"  # more than the largest node (8)
    "gap,,30,1,,,\n"  # no arrival: cannot be replayed
    "late,5000,30,4,,,\n"
)


def _files(tmp_path: Path, trace: str) -> tuple[str, str]:
    (tmp_path / "t.csv").write_text(trace)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(CLUSTER))
    return str(tmp_path / "t.csv"), str(tmp_path / "c.yaml")


def test_replay_keeps_the_window_and_counts_what_it_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace, cluster = _files(tmp_path, GOOD)
    args = ["simulate", "--trace", trace, "--cluster", cluster, "--window", "0:1000"]
    assert main([*args, "--output", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["scenario"]["trace"] == {
        "file": trace, "window": "0:1000", "rows": 6, "jobs": 5, "outside_window": 1,
        "incomplete": 1, "not_placeable": 0, "not_placeable_gpu_hours": 0.0,
        "largest_node_gpus": 8, "gangs": 1,
    }  # fmt: skip
    # big (16 GPUs, 2 workers in the trace) runs as a pod group of two 8-GPU workers
    assert doc["scenario"]["jobs"] == 5 and doc["scenario"]["cpu_pods"] == 1
    for policy in doc["policies"].values():
        assert policy["pods"]["completed"] == 5
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "1 jobs larger than the largest node, 8 GPUs, as pod groups of workers" in out


def test_trace_jobs_start_at_the_window(tmp_path: Path) -> None:
    trace, _ = _files(tmp_path, GOOD)
    scenario = parse_scenario(CLUSTER, jobs_required=False)
    # Offsets from the first arrival (100): a_1 0, b 60, row 4 100, late 4900.
    replay = replay_on(scenario, load_trace(trace), trace, (50.0, None))
    jobs = {j.name: j for j in scenario.jobs}
    assert sorted(jobs) == ["b", "big-w0", "big-w1", "late", "row-4"]
    assert jobs["big-w0"].gpus == 8 and jobs["big-w0"].workers == 2
    assert (jobs["b"].arrival, jobs["row-4"].arrival, jobs["late"].arrival) == (10, 50, 4850)
    assert jobs["late"].gpus == 4 and jobs["late"].cpu == "17000m"
    assert jobs["late"].memory == "68Gi" and jobs["row-4"].gpus == 0
    assert replay.outside_window == 1 and replay.not_placeable == 0 and replay.gangs == 1
    names = parse_scenario(CLUSTER, jobs_required=False)
    replay_on(names, load_trace(trace), trace, (0.0, None))
    assert "a-1" in {j.name for j in names.jobs}  # a_1: made a valid pod name


@pytest.mark.parametrize(
    ("trace", "message"),
    [
        (HEADER + "a,1,2,3,,,\nb,1,2,x,,,\n",
         "t.csv: line 3: gpus: must be an integer from 0 to 1,000,000, got 'x'"),
        (HEADER + "a,-1,2,3,,,\n",
         "t.csv: line 2: arrival_s: must be a number of seconds from 0 to "
         "315,360,000 (ten years), got '-1'"),
        (HEADER + "a,1,soon,3,,,\n",
         "t.csv: line 2: duration_s: must be a number of seconds from 0 to "
         "315,360,000 (ten years), got 'soon'"),
        (HEADER + "a,1,2,3,0,,\n",
         "t.csv: line 2: workers: must be an integer from 1 to 1,000,000, got '0'"),
        (HEADER + "a,1,2\n", "t.csv: line 2: expected 7 cells, got 3"),
        ("job,arrival_s,gpus\n", "t.csv: line 1: header lacks column(s) duration_s, workers"),
        ("", "t.csv: line 1: empty file"),
        (HEADER.replace("status", "gpus") + "a,1,2,3,,,\n",
         "t.csv: line 1: column(s) named twice: gpus"),
        (HEADER + 'a,1,2,3,,"V100,\nb,1,2,3,,,\n', "t.csv: line 3: unexpected end of data"),
        (HEADER + 'a,1,2,3,,"V100"x,\n', "t.csv: line 2: ',' expected after '\"'"),
    ],
)  # fmt: skip
def test_bad_rows_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], trace: str, message: str
) -> None:
    path, cluster = _files(tmp_path, trace)
    assert main(["simulate", "--trace", path, "--cluster", cluster]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--window", "10"], "--window: '10': expected START:END in seconds"),
        (["--window", "50:20"], "--window: '50:20': need 0 <= START < END"),
        (["--window", "a:b"], "START and END must be numbers of seconds"),
        (["--window", "9000:"], "no job to replay (window 9000:)"),
    ],
)
def test_bad_windows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    path, cluster = _files(tmp_path, GOOD)
    assert main(["simulate", "--trace", path, "--cluster", cluster, *extra]) == 2
    assert message in capsys.readouterr().err


def test_flag_combinations(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, cluster = _files(tmp_path, GOOD)
    assert main(["simulate", "--trace", path]) == 2
    assert "--trace: needs --cluster" in capsys.readouterr().err
    assert main(["simulate", "--window", "0:10"]) == 2
    assert "--window: only with --trace" in capsys.readouterr().err
    assert main(["simulate", "--cluster", cluster]) == 2
    assert "--cluster: only with --trace" in capsys.readouterr().err


def test_shipped_excerpt_and_cluster_load() -> None:
    rows = load_trace(ROOT / "examples/traces/philly-2017-11-08.csv")
    assert len(rows) > 1000 and all(r.gpus is not None for r in rows)
    scenario = parse_scenario(
        yaml.safe_load((ROOT / "examples/trace-cluster.yaml").read_text()), jobs_required=False
    )
    assert scenario.jobs == [] and scenario.largest_node_gpus == 8


def test_readme_trace_command_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """The README's replay command, as written (one policy here to keep the suite quick)."""
    readme = (ROOT / "README.md").read_text()
    start = readme.index("topo-scheduler simulate --trace ")
    command = readme[start : readme.index("```", start)].replace("\\\n", " ").split()
    assert command[:2] == ["topo-scheduler", "simulate"]
    assert main([*command[1:], "--policy", "topo+topo-dp", "--output", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    trace = doc["scenario"]["trace"]
    assert trace["jobs"] == doc["scenario"]["jobs"] > 1000 and trace["gangs"] > 0
    policy = doc["policies"]["topo+topo-dp"]
    assert policy["pods"]["completed"] == trace["jobs"]
    assert policy["gpu_hours"] > 0 and policy["gpu_job_completion_seconds"]["mean"] > 0
