"""The simulator: determinism, fidelity to the scheduler, GPU-set quality, invariants."""

from __future__ import annotations

import random
from typing import Any

import pytest

from plugins import frameworks_for
from scheduler.core.config import default_config
from scheduler.core.framework import ScheduleResult
from scheduler.core.model import PodInfo
from scheduler.core.reference import schedule_reference
from scheduler.core.topology import Topology, builtin_topology, device_plugin_set
from scheduler.explain import explain
from scheduler.sim.cli import simulate
from scheduler.sim.engine import Simulation, count_only_config
from scheduler.sim.quality import QualityModel
from scheduler.sim.report import WALL_CLOCK_FIELDS
from scheduler.sim.scenario import Scenario, parse_scenario

SMALL: dict[str, Any] = {
    "name": "small",
    "seed": 3,
    "nodes": [
        {"name": "v100", "count": 2, "gpuTopology": "dgx1-v100",
         "resources": {"cpu": "80", "memory": "512Gi"}},
        {"name": "a100", "count": 1, "gpuTopology": "dgx-a100",
         "resources": {"cpu": "128", "memory": "1Ti"}},
        {"name": "pcie", "count": 2, "gpuTopology": "pcie-8gpu-2socket",
         "resources": {"cpu": "64", "memory": "512Gi"}},
        {"name": "cpu", "count": 1, "resources": {"cpu": "32", "memory": "128Gi"}},
    ],
    "jobs": [
        {"generate": 70, "namePrefix": "train", "arrivals": {"meanInterval": 60},
         "duration": {"median": 1200, "sigma": 0.8, "min": 60, "max": 7200},
         "gpus": {1: 3, 2: 3, 4: 3, 8: 1}, "cpuPerGpu": "6", "memoryPerGpu": "40Gi",
         "placement": {"nvlink": 0.1, "single-numa": 0.1}},
        {"generate": 20, "namePrefix": "etl", "arrivals": {"meanInterval": 200},
         "duration": {"median": 600}, "gpus": {0: 1}, "cpu": "8", "memory": "16Gi"},
        # never fits: 8 NVLink-connected GPUs exist only on the A100, which has 128 CPUs
        {"name": "huge", "arrival": 100, "duration": 600, "gpus": 8, "cpu": "200",
         "placement": "nvlink"},
    ],
}  # fmt: skip


def small(seed: int | None = None) -> Scenario:
    return parse_scenario(SMALL, source="small.yaml", seed=seed)


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in WALL_CLOCK_FIELDS}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def test_same_seed_same_report() -> None:
    policies = ("topology", "count-only", "naive")
    first, _ = simulate(small(seed=7), policies)
    second, _ = simulate(small(seed=7), policies)
    assert _strip(first) == _strip(second)
    other, _ = simulate(small(seed=8), ("count-only",))
    assert (
        _strip(other)["policies"]["kube+nvidia-dp"] != _strip(first)["policies"]["kube+nvidia-dp"]
    )


@pytest.mark.parametrize("policy", ["topology", "count-only", "naive"])
def test_invariants_hold_after_every_event(policy: str) -> None:
    sim = Simulation(small(), policy, check=True).run()  # checks after every event
    sim.check_invariants()
    assert sim.scheduled == sum(r.bound_at is not None for r in sim.records.values())
    for key, record in sim.records.items():
        assert record.state in ("completed", "pending"), (key, record.state)
        if record.state == "pending":
            assert record.reason and record.reason.startswith("0/6 nodes are available"), key
    huge = sim.records["default/huge"]
    assert huge.state == "pending"
    assert huge.reason is not None and "Insufficient cpu" in huge.reason
    pending = [k for k, r in sim.records.items() if r.state == "pending"]
    if policy != "topology":  # count-only ignores placement annotations: only huge is left
        assert pending == ["default/huge"]
    else:  # 8 GPUs on one NUMA node exist nowhere
        for key in pending:
            reason = sim.records[key].reason or ""
            assert key == "default/huge" or "free GPUs on one NUMA node" in reason, key


def test_count_only_matches_the_default_scheduler() -> None:
    """Cross-check decisions against `explain` and the node-by-node reference path."""
    reference = frameworks_for(count_only_config())["topo-scheduler"]
    assert "GPUTopology" not in [p.name for p in reference.filters]
    assert "GPUTopology" not in reference.weights
    checked: list[str] = []

    def hook(sim: Simulation, pod: PodInfo, result: ScheduleResult) -> None:
        if sim.decisions % 7 or len(checked) >= 12:
            return
        doc = explain(sim.cache, pod, reference)
        assert doc["node"] == result.node, pod.key
        ref = schedule_reference(reference, pod, sim.cache.snapshot)
        assert ref.node == result.node, pod.key
        assert result.gpus == ()  # GPUs are left to the device plugin
        checked.append(pod.key)

    sim = Simulation(small(), "count-only", on_decision=hook).run()
    assert len(checked) >= 8
    gpu_records = [r for r in sim.records.values() if r.gpus]
    # the kubelet handed out what NVIDIA's device plugin picks
    model = QualityModel()
    for record in gpu_records:
        assert record.topology is not None and record.free_mask is not None
        expected = device_plugin_set(record.topology, record.free_mask, len(record.gpus))
        assert record.gpus == expected
        model.judge(record.topology, record.free_mask, record.gpus)


def _rank(model: QualityModel, topology: Topology, gpus: tuple[int, ...]) -> tuple[float, int]:
    """The selection order: ring bandwidth, then set score."""
    return (model.busbw(topology, gpus) or 0.0, model.score(topology, gpus))


def test_topology_never_worse_than_count_only_on_the_same_node_and_mask() -> None:
    sim = Simulation(small(), "topology").run()
    model = QualityModel()
    placed = [r for r in sim.records.values() if len(r.gpus) > 1 and r.free_mask is not None]
    assert len(placed) > 20
    for record in placed:
        assert record.topology is not None and record.free_mask is not None
        theirs = device_plugin_set(record.topology, record.free_mask, len(record.gpus))
        assert _rank(model, record.topology, record.gpus) >= _rank(
            model, record.topology, theirs
        ), record.job.name
        assert record.quality is not None and record.quality.best_possible


def test_best_set_beats_device_plugin_on_random_masks() -> None:
    rng = random.Random(5)
    model = QualityModel()
    fw = frameworks_for(default_config())["topo-scheduler"]
    assert any(a.name == "GPUTopology" for a in fw.allocators)
    for name in ("dgx1-v100", "dgx-a100", "pcie-8gpu-2socket", "dgx-h100"):
        topology = builtin_topology(name)
        for _ in range(25):
            free = rng.randrange(1, 256)
            for size in (2, 3, 4):
                if free.bit_count() < size:
                    continue
                best = model.selector.best_set(topology, free, size)
                assert best is not None
                theirs = device_plugin_set(topology, free, size)
                ours = (best.busbw, best.score)
                assert ours >= _rank(model, topology, theirs), (name, free, size)


def test_progress_counts_arrivals_and_completions() -> None:
    ticks: list[int] = []
    sim = Simulation(small(), "naive", progress=ticks.append).run()
    completed = sum(r.state == "completed" for r in sim.records.values())
    assert sum(ticks) == sim.events == len(sim.records) + completed


def test_topology_dp_hands_out_what_the_device_plugin_picks() -> None:
    """With the stock device plugin the recorded set is not honoured: the kubelet's pick is
    NVIDIA's besteffort over the free GPUs, and the agent's report tells the cache."""
    from scheduler.core.topology import ANNOTATION_GPUS
    from scheduler.core.topology.device_plugin import device_plugin_set
    from scheduler.sim.engine import Simulation

    sim = Simulation(small(), "topology-dp", None)
    seen: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    original = sim._admit

    def admit(kubelet, pod):  # type: ignore[no-untyped-def]
        free = kubelet.topology.allocatable_mask & ~kubelet.gpu_mask if kubelet.topology else 0
        count = pod.requests.get("nvidia.com/gpu", 0)
        held = original(kubelet, pod)
        if count and kubelet.topology is not None and ANNOTATION_GPUS in pod.annotations:
            seen.append((tuple(held), device_plugin_set(kubelet.topology, free, count)))
        return held

    sim._admit = admit  # type: ignore[method-assign]
    sim.run()
    assert seen, "no GPU pod with a recorded set was admitted"
    assert all(held == expected for held, expected in seen)
