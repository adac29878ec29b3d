"""`explain` for a pod group shows the modelled all-reduce bus bandwidth of the chosen
placement and of the runner-up, priced with GPUTopology's `networkBandwidth`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.cli import main
from scheduler.core.network import allreduce_factor, allreduce_time
from scheduler.core.topology import ANNOTATION_TOPOLOGY, builtin_topology, format_topology
from scheduler.core.topology.select import GpuSelector
from tests.builders import node, pod

RACK = "network.topology.nvidia.com/leaf"
SPINE = "network.topology.nvidia.com/spine"
H100 = builtin_topology("dgx-h100")


def gpu_node(name: str, rack: str, spine: str) -> dict[str, Any]:
    return node(
        name,
        cpu="64",
        memory="512Gi",
        extra={"nvidia.com/gpu": "8"},
        labels={RACK: rack, SPINE: spine},
        annotations={ANNOTATION_TOPOLOGY: format_topology(H100)},
    )


def worker(name: str) -> dict[str, Any]:
    annotations = {"topo-scheduler.io/pod-group": "llama", "topo-scheduler.io/min-member": "2"}
    return pod(name, {"cpu": "1", "nvidia.com/gpu": "8"}, namespace="ml", annotations=annotations)


CONFIG = {
    "apiVersion": "kubescheduler.config.k8s.io/v1",
    "kind": "KubeSchedulerConfiguration",
    "profiles": [
        {
            "schedulerName": "topo-scheduler",
            "pluginConfig": [
                {
                    "name": "GPUTopology",
                    "args": {
                        "topologyLevels": [SPINE, RACK],
                        "networkBandwidth": {"node": 400, "levels": {SPINE: 12.5}},
                    },
                }
            ],
        }
    ],
}


def test_explain_shows_the_modelled_bus_bandwidth_of_the_placement_and_the_runner_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # rack a (spine s0) holds the two workers; b0 and c0 share spine s1 but not a rack, so
    # across them the spine's 12.5 GB/s per GPU applies
    nodes = [gpu_node("a0", "a", "s0"), gpu_node("a1", "a", "s0")]
    nodes += [gpu_node("b0", "b", "s1"), gpu_node("c0", "c", "s1")]
    snapshot = tmp_path / "snapshot.yaml"
    snapshot.write_text(yaml.safe_dump_all([*nodes, worker("w1")]))
    pod_file = tmp_path / "pod.yaml"
    pod_file.write_text(yaml.safe_dump(worker("w0")))
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    args = ["explain", "--snapshot", str(snapshot), "--pod", str(pod_file)]
    args += ["--config", str(config)]
    assert main([*args, "--output", "json"]) == 0
    group = json.loads(capsys.readouterr().out)["group"]
    assert group["domain"] == {"key": RACK, "value": "a"}
    best = GpuSelector().best_set(H100, H100.allocatable_mask, 8)
    assert best is not None and best.busbw is not None
    in_rack = allreduce_time([(8, best.busbw)] * 2, 2, 8, 400 / 8)
    across = allreduce_time([(8, best.busbw)] * 2, 2, 8, 12.5)
    assert group["busbw"] == pytest.approx(allreduce_factor(16) / in_rack, abs=0.01)
    runner = group["runnerUp"]
    assert runner["domain"] == {"key": SPINE, "value": "s1"}
    assert runner["busbw"] == pytest.approx(allreduce_factor(16) / across, abs=0.01)
    assert main(args) == 0
    table = capsys.readouterr().out
    line = f"  modelled all-reduce bus bandwidth: {group['busbw']:.1f} GB/s; runner-up "
    line += f"{SPINE}=s1: {runner['busbw']:.1f} GB/s"
    assert line in table
    assert "domain: network.topology.nvidia.com/leaf=a, no topology request" in table
