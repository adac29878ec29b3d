"""The simulator with priorities and preemption: victims restart (from the beginning or their
last checkpoint), lost GPU-hours by priority, `--no-preemption` to compare."""

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


def scenario(**top: Any) -> dict[str, Any]:
    return {
        "name": "preempt",
        "nodes": [{"name": "dgx", "count": 1, "gpuTopology": "dgx1-v100",
                   "resources": {"cpu": "80", "memory": "512Gi"}}],
        "jobs": [
            {"name": "sweep", "arrival": 0, "duration": 1000, "gpus": 8, "priority": 10},
            {"name": "prod", "arrival": 100, "duration": 100, "gpus": 8, "priority": 1000},
        ],
        **top,
    }  # fmt: skip


def run(data: dict[str, Any], policy: str = "topology", **kw: Any) -> Simulation:
    return Simulation(parse_scenario(data), policy, check=True, **kw).run()


@pytest.mark.parametrize("policy", ["topology", "count-only"])
def test_high_priority_job_preempts_and_the_victim_restarts(policy: str) -> None:
    sim = run(scenario(), policy)
    sweep, prod = sim.records["default/sweep"], sim.records["default/prod"]
    # preempted at t=100; the preemptor binds after its 1 s backoff (the victim's deletion
    # came while it was in its cycle, as in kube)
    assert prod.bound_at == pytest.approx(101, abs=1e-3)
    assert sweep.preemptions == 1
    # restarted from the beginning once prod finished (t=201): done at 201 + 1000
    assert sweep.state == "completed" and sweep.bound_at == pytest.approx(201, abs=1e-3)
    assert sim.now == pytest.approx(1201, abs=1e-3)
    assert sweep.lost_gpu_seconds == pytest.approx(8 * 100, abs=0.1)
    report = summarize(sim)["preemption"]
    assert report["enabled"] is True
    assert report["preemptions"] == 1
    assert report["lost_gpu_hours"] == pytest.approx(800 / 3600, abs=1e-3)
    assert report["by_priority"] == {
        "10": {"preemptions": 1, "lost_gpu_hours": pytest.approx(800 / 3600, abs=1e-3)}
    }


def test_checkpoint_interval_limits_the_loss() -> None:
    sim = run(scenario(checkpointInterval=60))
    sweep = sim.records["default/sweep"]
    assert sweep.lost_gpu_seconds == pytest.approx(8 * 40, abs=0.1)  # 100 s run, last at 60
    assert sweep.remaining == pytest.approx(940, abs=1e-3)
    assert sim.now == pytest.approx(201 + 940, abs=1e-3)


def test_no_preemption_makes_the_high_priority_job_wait() -> None:
    sim = run(scenario(), preemption=False)
    assert sim.records["default/prod"].bound_at == pytest.approx(1000, abs=1e-3)
    assert sim.records["default/sweep"].preemptions == 0
    assert summarize(sim)["preemption"] == {
        "enabled": False, "preemptions": 0, "lost_gpu_hours": 0.0, "by_priority": {},
    }  # fmt: skip


def test_equal_priority_never_preempts() -> None:
    data = scenario()
    data["jobs"][1]["priority"] = 10
    sim = run(data)
    assert sim.records["default/prod"].bound_at == pytest.approx(1000, abs=1e-3)
    assert summarize(sim)["preemption"]["preemptions"] == 0


@pytest.mark.parametrize("policy", ["topology", "count-only"])
def test_the_victim_is_the_latest_started_job(policy: str) -> None:
    """The kubelet's status.startTime reaches the cycle: of two equal victims, preemption
    evicts the one that started last (kube's pickOneNodeForPreemption), losing the least."""
    data = scenario()
    data["nodes"][0]["count"] = 2
    data["jobs"] = [  # named so that node-name order alone would pick the early one's node
        {"name": "late", "arrival": 50, "duration": 1000, "gpus": 8, "priority": 10},
        {"name": "early", "arrival": 0, "duration": 1000, "gpus": 8, "priority": 10},
        {"name": "prod", "arrival": 500, "duration": 100, "gpus": 8, "priority": 1000},
    ]
    sim = run(data, policy)
    early, late = sim.records["default/early"], sim.records["default/late"]
    assert (early.preemptions, late.preemptions) == (0, 1)
    assert early.bound_at == pytest.approx(0, abs=1)
    assert late.lost_gpu_seconds == pytest.approx(8 * 450, abs=1)  # ran from t=50 to t=500


def test_bad_checkpoint_interval_is_one_line_error() -> None:
    with pytest.raises(ScenarioError, match=r"^checkpointInterval: "):
        parse_scenario(scenario(checkpointInterval=-5))


def test_cli_reports_preemptions_table_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario()))
    assert main(["simulate", str(path), "--policy", "topology", "--output", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["policies"]["topo+topo-dp"]["preemption"]["preemptions"] == 1
    assert main(["simulate", str(path), "--policy", "topology"]) == 0
    table = capsys.readouterr().out
    assert "preemptions" in table and "lost GPU-hours" in table and "0.2 h" in table
    assert "victims of priority 10" in table
    args = ["simulate", str(path), "--policy", "topology", "--no-preemption", "--output", "json"]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["policies"]["topo+topo-dp"]["preemption"]["enabled"] is False
    assert doc["policies"]["topo+topo-dp"]["preemption"]["preemptions"] == 0
