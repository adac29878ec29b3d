"""The simulator's DRA nodes and jobs: GPUs published as NVIDIA's ResourceSlices and asked
through ResourceClaims, allocated by the DynamicResources plugin and freed when jobs end."""

from __future__ import annotations

import copy
import subprocess
import sys
from typing import Any

import pytest

from scheduler.core.dra.types import ResourceSlice
from scheduler.sim.engine import Simulation
from scheduler.sim.scenario import ScenarioError, parse_scenario

ONE_NODE: dict[str, Any] = {
    "name": "one-dgx1",
    "seed": 5,
    "nodes": [
        {"name": "v100", "count": 1, "gpuTopology": "dgx1-v100",
         "resources": {"cpu": "80", "memory": "512Gi"}},
    ],
    "jobs": [
        {"generate": 40, "namePrefix": "train", "arrivals": {"meanInterval": 300},
         "duration": {"median": 1800, "sigma": 0.8, "min": 60, "max": 7200},
         "gpus": {1: 3, 2: 3, 4: 3, 8: 1}},
    ],
}  # fmt: skip

MIXED: dict[str, Any] = {
    "name": "mixed",
    "seed": 2,
    "nodes": [
        {"name": "v100", "count": 2, "gpuTopology": "dgx1-v100",
         "resources": {"cpu": "80", "memory": "512Gi"}},
        {"name": "h100", "count": 1, "gpuTopology": "dgx-h100",
         "resources": {"cpu": "224", "memory": "2Ti"}},
        {"name": "cpu", "count": 1, "resources": {"cpu": "32", "memory": "128Gi"}},
    ],
    "jobs": [
        {"generate": 40, "namePrefix": "train", "arrivals": {"meanInterval": 120},
         "duration": {"median": 1800, "sigma": 0.8, "min": 60, "max": 7200},
         "gpus": {1: 3, 2: 3, 4: 3, 8: 1}},
        {"generate": 10, "namePrefix": "etl", "arrivals": {"meanInterval": 300},
         "duration": {"median": 600}, "gpus": {0: 1}},
    ],
}  # fmt: skip


def _run(data: dict[str, Any], policy: str, request: str | None) -> Simulation:
    scenario = parse_scenario(data, source="s.yaml", gpu_request=request)
    return Simulation(scenario, policy, check=True).run()


def test_same_gpu_sets_both_ways_under_topo() -> None:
    extended = _run(ONE_NODE, "topo+topo-dp", "extended")
    dra = _run(ONE_NODE, "topo+topo-dp", "dra")
    assert extended.scheduled == dra.scheduled == 40
    sets = {k: (r.node, r.gpus, r.bound_at) for k, r in extended.records.items()}
    assert {k: (r.node, r.gpus, r.bound_at) for k, r in dra.records.items()} == sets
    assert any(len(gpus) == 4 for _, gpus, _ in sets.values())


def test_dra_jobs_free_their_devices() -> None:
    for policy in ("topo+topo-dp", "kube+nvidia-dp"):
        sim = _run(MIXED, policy, "dra")
        assert sim.scheduled == 50
        assert all(r.state == "completed" for r in sim.records.values())
        dra = sim.cache.snapshot.storage.dra
        assert not dra.claims  # every job's claim deleted when it ended
        assert not dra.allocated_devices()
        assert all(not k.gpu_sets for k in sim.kubelets.values())
        # the GPUs were never counted as an extended resource
        assert all(k.allocatable.get("nvidia.com/gpu", 0) == 0 for k in sim.kubelets.values())
        gpu_jobs = [r for r in sim.records.values() if r.job.gpus]
        assert all(len(r.gpus) == r.job.gpus for r in gpu_jobs)


def test_preemption_does_not_free_devices() -> None:
    """As in kube, a claim that cannot be allocated is unresolvable: preemption does not
    evict the lower-priority job, the higher one waits for its devices."""
    data = {
        "name": "preempt",
        "nodes": [ONE_NODE["nodes"][0]],
        "jobs": [
            {"name": "low", "arrival": 0, "duration": 3600, "gpus": 8},
            {"name": "high", "arrival": 60, "duration": 600, "gpus": 4, "priority": 100},
        ],
    }
    sim = _run(data, "topo+topo-dp", "dra")
    assert sim.records["default/low"].preemptions == 0
    assert sim.records["default/high"].bound_at == 3600
    assert not sim.cache.snapshot.storage.dra.claims
    extended = _run(data, "topo+topo-dp", "extended")
    assert extended.records["default/low"].preemptions == 1


def test_kube_takes_the_first_free_devices() -> None:
    """kube's allocator, without the GPU graph, takes devices in slice order."""
    sim = _run(ONE_NODE, "kube+nvidia-dp", "dra")
    first = min(sim.records.values(), key=lambda r: (r.bound_at or 0, r.job.name))
    assert first.gpus == tuple(range(first.job.gpus))
    # kube-scheduler's cluster has no GPU graph on its Nodes; the kubelet knows its GPUs
    assert sim.cache.gpus.topology[sim.cache.snapshot.index["v100-0"]] is None
    assert sim.kubelets["v100-0"].topology is not None


def test_slices_shape() -> None:
    scenario = parse_scenario(ONE_NODE, source="s.yaml", gpu_request="dra")
    objects = scenario.dra_objects()
    kinds = [o["kind"] for o in objects]
    assert kinds.count("DeviceClass") == 1 and kinds.count("ResourceSlice") == 1
    templates = [o["metadata"]["name"] for o in objects if o["kind"] == "ResourceClaimTemplate"]
    assert sorted(templates) == ["gpu-1", "gpu-2", "gpu-4", "gpu-8"]
    slice_ = ResourceSlice.from_object(next(o for o in objects if o["kind"] == "ResourceSlice"))
    assert [d.name for d in slice_.devices] == [f"gpu-{i}" for i in range(8)]
    node = scenario.node_objects()[0]
    assert "nvidia.com/gpu" not in node["status"]["allocatable"]
    assert "GPU-" in node["metadata"]["annotations"]["topo-scheduler.io/gpu-topology"]


def test_per_template_and_per_job_fields() -> None:
    data = copy.deepcopy(MIXED)
    data["nodes"][0]["gpuDriver"] = "dra"
    data["jobs"][0]["gpuRequest"] = "dra"
    scenario = parse_scenario(data, source="s.yaml")
    assert [t.dra for t in scenario.templates] == [True, False, False]
    assert all(j.dra for j in scenario.jobs if j.name.startswith("train"))
    assert scenario.gpu_request == "extended"
    data = copy.deepcopy(MIXED)
    data["gpuRequest"] = "dra"
    scenario = parse_scenario(data, source="s.yaml")
    assert [t.dra for t in scenario.templates] == [True, True, False]  # not the CPU nodes


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("gpuRequest",), "claims", "gpuRequest: must be extended or dra, got 'claims'"),
        (("nodes", 0, "gpuDriver"), "nvidia", "nodes[0].gpuDriver: must be device-plugin or dra"),
        (("nodes", 2, "gpuDriver"), "dra", "nodes[2].gpuDriver: dra needs gpuTopology"),
        (("jobs", 0, "gpuRequest"), 1, "jobs[0].gpuRequest: must be extended or dra, got 1"),
        (("jobs", 1, "gpuRequest"), "DRA", "jobs[1].gpuRequest: must be extended or dra"),
    ],
)
def test_malformed_fields(path: tuple[Any, ...], value: Any, message: str) -> None:
    data = copy.deepcopy(MIXED)
    target: Any = data
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(data, source="s.yaml")
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_dra_node_needs_every_gpu() -> None:
    data = copy.deepcopy(MIXED)
    data["nodes"][0]["gpuDriver"] = "dra"
    data["nodes"][0]["resources"]["nvidia.com/gpu"] = "4"
    with pytest.raises(ScenarioError, match=r"nodes\[0\].resources.nvidia.com/gpu: a dra node"):
        parse_scenario(data, source="s.yaml")


def test_cli_flag_one_line_error(tmp_path: Any) -> None:
    bad = tmp_path / "s.yaml"
    bad.write_text("gpuRequest: maybe\nnodes: []\n")
    done = subprocess.run(
        [sys.executable, "-m", "scheduler.cli", "simulate", str(bad)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert "gpuRequest: must be extended or dra, got 'maybe'" in done.stderr
