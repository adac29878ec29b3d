"""`run`, `simulate` and `explain` make the same decisions: they share one scheduling cycle.

A random cluster (built-in GPU topologies, CPU nodes) and a random sequence of pods (GPU
counts, placement policies) are scheduled three ways, one pod at a time in the same order:
by the simulator, by `explain` on a snapshot that grows with each bound pod, and by the
in-cluster scheduler through the API-server emulator. Every pod must get the same node and
the same GPU set (or be unschedulable) in all three.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from plugins import frameworks_for
from scheduler.core.cache import Cache
from scheduler.core.config import default_config
from scheduler.core.framework import ScheduleResult
from scheduler.core.model import NodeInfo, PodInfo
from scheduler.core.topology.schema import ANNOTATION_GPUS, parse_gpu_indices
from scheduler.explain import explain
from scheduler.sim.engine import Simulation
from scheduler.sim.scenario import Scenario, parse_scenario
from tests.emulator import NODES, PODS, Emulator
from tests.emulator.harness import Replica, fast_settings, wait_for

Placement = tuple[str | None, tuple[int, ...]]
TOPOLOGIES = ["dgx1-v100", "dgx-a100", "pcie-8gpu-2socket", "pcie-4gpu", "all-sys-2numa"]


def _scenario(seed: int) -> Scenario:
    rng = random.Random(seed)
    templates: list[dict[str, Any]] = [
        {
            "name": f"t{i}",
            "count": rng.randint(1, 2),
            "gpuTopology": topology,
            "resources": {"cpu": "64", "memory": "512Gi"},
        }
        for i, topology in enumerate(rng.sample(TOPOLOGIES, 3))
    ]
    templates.append({"name": "cpu", "count": 1, "resources": {"cpu": "16", "memory": "64Gi"}})
    jobs = []
    for i in range(10):
        gpus = rng.choice([0, 1, 2, 2, 4, 4, 8])
        job: dict[str, Any] = {
            "name": f"job-{i}",
            "arrival": 10 * i,  # one at a time, in this order
            "duration": 10**7,  # nothing finishes while the others arrive
            "gpus": gpus,
        }
        if gpus > 1:
            job["placement"] = rng.choice(["best-effort", "nvlink", "single-numa"])
        jobs.append(job)
    return parse_scenario({"name": f"diff-{seed}", "seed": seed, "nodes": templates, "jobs": jobs})


def _simulated(scenario: Scenario) -> dict[str, Placement]:
    """Each pod's first decision (later ones come after jobs finish)."""
    first: dict[str, Placement] = {}

    def hook(sim: Simulation, pod: PodInfo, result: ScheduleResult) -> None:
        first.setdefault(pod.name, (result.node, result.gpus))

    Simulation(scenario, "topology", check=True, on_decision=hook).run()
    return first


def _explained(scenario: Scenario) -> dict[str, Placement]:
    framework = frameworks_for(default_config())["topo-scheduler"]
    cache = Cache()
    for obj in scenario.node_objects():
        cache.add_node(NodeInfo.from_object(obj))
    out: dict[str, Placement] = {}
    for job in scenario.jobs:
        obj = job.pod_object()
        document = explain(cache, PodInfo.from_object(obj), framework)
        gpus = tuple(document.get("gpus", ()))
        out[job.name] = (document["node"], gpus)
        if document["node"] is not None:  # bound: the next pod sees it
            obj["spec"]["nodeName"] = document["node"]
            obj["status"] = {"phase": "Running"}
            if gpus:
                obj["metadata"]["annotations"][ANNOTATION_GPUS] = ",".join(map(str, gpus))
            cache.add_pod(PodInfo.from_object(obj))
    return out


def _in_cluster(emulator: Emulator, scenario: Scenario, expected: dict[str, Any]) -> dict[str, Any]:
    for obj in scenario.node_objects():
        emulator.create(NODES, obj)

    def placement(name: str) -> Placement:
        pod = emulator.pod(f"default/{name}")
        node = pod["spec"].get("nodeName")
        text = (pod["metadata"].get("annotations") or {}).get(ANNOTATION_GPUS)
        return node, parse_gpu_indices(text) if text else ()

    def unschedulable(name: str) -> bool:
        conditions = emulator.pod(f"default/{name}")["status"].get("conditions") or []
        return any(c.get("reason") == "Unschedulable" for c in conditions)

    async def scenario_run() -> dict[str, Placement]:
        rep = Replica(fast_settings(emulator)).start()
        await wait_for(lambda: rep.sched is not None and rep.sched.synced, what="sync")
        out: dict[str, Placement] = {}
        for job in scenario.jobs:
            obj = job.pod_object()
            for field in ("uid", "creationTimestamp"):
                del obj["metadata"][field]  # the API server sets these
            emulator.create(PODS, obj, "default")
            if expected[job.name][0] is None:
                await wait_for(lambda n=job.name: unschedulable(n), what=f"{job.name} rejected")
            else:
                await wait_for(
                    lambda n=job.name: placement(n)[0] is not None, what=f"{job.name} bound"
                )
            out[job.name] = placement(job.name)
        assert await rep.shutdown() == 0
        return out

    return asyncio.run(scenario_run())


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_run_simulate_and_explain_decide_alike(emulator: Emulator, seed: int) -> None:
    scenario = _scenario(seed)
    simulated = _simulated(scenario)
    explained = _explained(scenario)
    assert explained == simulated
    assert any(gpus for _, gpus in simulated.values())  # GPU sets were really chosen
    assert _in_cluster(emulator, scenario, explained) == explained
