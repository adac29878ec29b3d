"""`topo-scheduler simulate`: scenario files, errors naming the field, JSON and plot output."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.cli import main
from scheduler.core.config import DEFAULT_PLUGINS
from scheduler.sim.scenario import (
    ScenarioError,
    bundled_scenario_path,
    load_scenario,
    parse_scenario,
)

ROOT = Path(__file__).resolve().parents[2]

TINY: dict[str, Any] = {
    "name": "tiny",
    "nodes": [
        {"name": "dgx", "count": 2, "gpuTopology": "dgx1-v100",
         "resources": {"cpu": "64", "memory": "256Gi"}},
        {"name": "cpu", "count": 1, "resources": {"cpu": "16", "memory": "64Gi"}},
    ],
    "jobs": [
        {"generate": 20, "arrivals": {"meanInterval": 30}, "gpus": {1: 1, 2: 1, 4: 1},
         "duration": {"median": 300}},
        {"name": "solo", "arrival": 5, "duration": 100, "gpus": 8, "count": 2, "interval": 10},
        {"name": "etl", "arrival": 0, "duration": 50, "cpu": "2", "memory": "1Gi"},
    ],
}  # fmt: skip


def _write(tmp_path: Path, data: Any, name: str = "scenario.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return str(path)


def _broken(path: list[Any], value: Any) -> dict[str, Any]:
    data = copy.deepcopy(TINY)
    target: Any = data
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (["nodes", 0, "gpuTopology"], "dgx-9000", "nodes[0].gpuTopology: unknown built-in"),
        (["nodes", 0, "count"], -1, "nodes[0].count: must be >= 0"),
        (["nodes", 1, "resources", "cpu"], "lots", "nodes[1].resources.cpu:"),
        (["nodes", 1, "resources"], {"memory": "1Gi"}, "nodes[1].resources.cpu: is required"),
        (["nodes", 0, "gpuTopology"], {"version": 1, "gpus": [{"index": "x"}]},
         "nodes[0].gpuTopology.gpus[0].index: must be an integer"),
        (["nodes", 0, "flavour"], "x", "nodes[0].flavour: unknown field"),
        (["jobs", 0, "gpus"], {1: -2}, "jobs[0].gpus.1: must be >= 0"),
        (["jobs", 0, "gpus"], {"two": 1}, "jobs[0].gpus.two: GPU count must be an integer"),
        (["jobs", 0, "gpus"], {10**30: 1},
         f"jobs[0].gpus.{10**30}: GPU count must be an integer from 0 to 1,000,000"),
        (["jobs", 0, "duration", "sigma"], 5000, "jobs[0].duration.sigma: must be <= 10"),
        (["jobs", 0, "duration", "min"], 0.0001,
         "jobs[0].duration: need 0.001 <= min <= max, got min 0.0001"),
        (["jobs", 1, "name"], 5, "jobs[1].name: must be a non-empty string, got 5"),
        (["jobs", 0, "duration", "median"], "long", "jobs[0].duration.median: must be a finite number"),
        (["jobs", 0, "placement"], {"nvlink": 2}, "jobs[0].placement.nvlink: a share must be"),
        (["jobs", 0, "placement"], {"anywhere": 0.5}, "jobs[0].placement.anywhere: must be one"),
        (["jobs", 1, "duration"], _DELETE, "jobs[1].duration: is required"),
        (["jobs", 1, "gpus"], 1.5, "jobs[1].gpus: must be an integer"),
        (["jobs", 2, "memory"], "1Gx", "jobs[2].memory:"),
        (["jobs"], [], "jobs: must be a non-empty list"),
        (["nodes"], None, "nodes: must be a non-empty list"),
        (["sed"], 1, "sed: unknown field"),
    ],
)  # fmt: skip
def test_bad_scenario_names_the_field(path: list[Any], value: Any, field: str) -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(_broken(path, value))
    assert str(info.value).startswith(field), str(info.value)


def test_a_huge_bad_value_is_shown_cut() -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(_broken(["jobs", 1, "name"], ["x" * 10**6]))
    message = str(info.value)
    assert message.startswith("jobs[1].name: must be a non-empty string, got ['xxxxxxxx")
    assert message.endswith("... (1,000,004 in all)") and len(message) < 300


def test_cli_bad_scenario_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, _broken(["jobs", 0, "gpus"], {1: "many"}))
    assert main(["simulate", path]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"error: {path}: jobs[0].gpus.1: must be a finite number")
    assert main(["simulate", _write(tmp_path, "nodes: [", "bad.yaml")]) == 2
    assert "not valid YAML" in capsys.readouterr().err
    assert main(["simulate", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml" in capsys.readouterr().err
    config = _write(
        tmp_path,
        {"profiles": [{"plugins": {"bind": {"enabled": [{"name": "NodePorts"}]}}}]},
        "config.yaml",
    )
    assert main(["simulate", path.replace("scenario", "x"), "--config", config]) == 2
    capsys.readouterr()
    good = _write(tmp_path, TINY, "good.yaml")
    assert main(["simulate", good, "--config", config]) == 2
    assert "profiles[0].plugins.bind" in capsys.readouterr().err


def test_cli_json_table_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, TINY)
    png = tmp_path / "out.png"
    args = ["simulate", path, "--policy", "all", "--seed", "4", "--output", "json"]
    assert main([*args, "--plot", str(png)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert list(doc["policies"]) == [
        "topo+topo-dp", "topo+nvidia-dp", "kube+nvidia-dp", "kube+first-free"
    ]  # fmt: skip
    assert doc["scenario"] == {
        "name": "tiny", "source": path, "seed": 4, "nodes": 3, "gpus": 16, "jobs": 23,
        "gpu_jobs": 22, "cpu_pods": 1,
    }  # fmt: skip
    topo = doc["policies"]["topo+topo-dp"]
    default_weight = dict(DEFAULT_PLUGINS)["GPUTopology"]
    assert topo["gpu_topology_weight"] == default_weight
    assert doc["policies"]["kube+nvidia-dp"]["gpu_topology_weight"] is None
    assert topo["pods"]["scheduled"] == 23 and topo["pods"]["completed"] == 23
    assert topo["best_set_share"] == 1.0
    assert len(topo["utilization"]["series"]) == doc["series_points"]
    assert 0 < topo["utilization"]["mean"] <= 1
    assert main(["simulate", path, "--policy", "both"]) == 0
    table = capsys.readouterr().out
    assert "on a best-possible GPU set" in table and "kube+nvidia-dp" in table


def test_config_sets_the_topology_weight(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [
            {"schedulerName": "topo-scheduler",
             "plugins": {"score": {"enabled": [{"name": "GPUTopology", "weight": 20}]}}}
        ],
    }  # fmt: skip
    args = ["simulate", _write(tmp_path, TINY), "--policy", "topology", "--output", "json"]
    assert main([*args, "--config", _write(tmp_path, config, "config.yaml")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["policies"]["topo+topo-dp"]["gpu_topology_weight"] == 20


def test_bundled_and_example_scenarios_load() -> None:
    bundled = load_scenario(bundled_scenario_path())
    kinds = {t.topology_name for t in bundled.templates}
    assert {"dgx1-v100", "dgx-a100", "dgx-h100", "pcie-8gpu-2socket", ""} <= kinds
    assert len(bundled.jobs) >= 500
    assert {j.gpus for j in bundled.jobs} == {0, 1, 2, 4, 8}
    assert load_scenario(bundled_scenario_path(), seed=9).jobs != bundled.jobs
    for example in sorted((ROOT / "examples").glob("scenario*.yaml")):
        load_scenario(example)
