"""`explain` for a pod of a pod group: the pending members in the snapshot are placed with it,
the JSON gains `group`, the table shows the group's placement."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.cli import main
from scheduler.core.topology import ANNOTATION_TOPOLOGY, builtin_topology, format_topology
from tests.builders import node, pod

RACK = "network.topology.nvidia.com/leaf"
TOPOLOGY = format_topology(builtin_topology("dgx-h100"))


def gpu_node(name: str, rack: str) -> dict[str, Any]:
    return node(
        name,
        cpu="64",
        memory="512Gi",
        extra={"nvidia.com/gpu": "8"},
        labels={RACK: rack},
        annotations={ANNOTATION_TOPOLOGY: TOPOLOGY},
    )


def worker(name: str, min_member: int, **extra: str) -> dict[str, Any]:
    annotations = {
        "topo-scheduler.io/pod-group": "llama",
        "topo-scheduler.io/min-member": str(min_member),
        **extra,
    }
    return pod(name, {"cpu": "1", "nvidia.com/gpu": "8"}, namespace="ml", annotations=annotations)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["explain", *args])
    out, err = capsys.readouterr()
    return code, out, err


def files(tmp_path: Path, objects: list[dict[str, Any]], target: dict[str, Any]) -> list[str]:
    snapshot = tmp_path / "snapshot.yaml"
    snapshot.write_text(yaml.safe_dump_all(objects))
    pod_file = tmp_path / "pod.yaml"
    pod_file.write_text(yaml.safe_dump(target))
    return ["--snapshot", str(snapshot), "--pod", str(pod_file)]


def test_group_placed_whole_in_the_least_free_rack(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = [gpu_node(f"a{i}", "a") for i in range(3)] + [gpu_node(f"b{i}", "b") for i in range(2)]
    ask = {"topo-scheduler.io/topology-required": RACK}
    members = [worker(f"w{i}", 2, **ask) for i in range(1, 2)]
    args = files(tmp_path, nodes + members, worker("w0", 2, **ask))
    code, out, err = run(capsys, *args, "--output", "json")
    assert code == 0, err
    document = json.loads(out)
    group = document["group"]
    assert group["name"] == "ml/llama" and group["minMember"] == 2
    assert group["domain"] == {"key": RACK, "value": "b"}
    assert group["message"] is None
    assert set(group["members"]) == {"ml/w0", "ml/w1"}
    nodes_used = {m["node"] for m in group["members"].values()}
    assert nodes_used == {"b0", "b1"}
    assert all(len(m["gpus"]) == 8 for m in group["members"].values())
    assert document["node"] == group["members"]["ml/w0"]["node"]
    assert document["gpus"] == group["members"]["ml/w0"]["gpus"]
    code, table, _ = run(capsys, *args)
    assert f"pod group ml/llama (minMember 2): placed in {RACK}=b" in table
    assert "  ml/w1 -> b" in table


def test_group_that_does_not_fit_says_why_for_every_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = [gpu_node(f"a{i}", "a") for i in range(2)]
    members = [worker(f"w{i}", 3) for i in range(1, 3)]
    args = files(tmp_path, nodes + members, worker("w0", 3))
    code, out, err = run(capsys, *args, "--output", "json")
    assert code == 0, err
    document = json.loads(out)
    assert document["node"] is None
    assert document["message"].startswith("pod group ml/llama: 2/3 pods fit; 0/2 nodes")
    assert document["group"]["message"] == document["message"]
    assert all(m["node"] is None for m in document["group"]["members"].values())
    # every node's verdict for the first member that did not fit (the two others hold them)
    first = document["group"]["firstUnplaced"]
    assert first["position"] == 3 and first["pod"] in document["group"]["members"]
    assert set(document["nodes"]) == {"a0", "a1"}
    for entry in document["nodes"].values():
        assert entry["feasible"] is False
        assert entry["reasons"] == ["Insufficient nvidia.com/gpu"]
    code, table, _ = run(capsys, *args)
    assert "pod group ml/llama (minMember 3): not placed: pod group ml/llama: 2/3" in table
    assert f"first pod that does not fit: {first['pod']} (3rd)" in table


def test_group_no_domain_holds_shows_each_domain_and_every_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = [gpu_node("a0", "a"), gpu_node("a1", "a"), gpu_node("b0", "b")]
    ask = {"topo-scheduler.io/topology-required": RACK}
    members = [worker(f"w{i}", 3, **ask) for i in range(1, 3)]
    args = files(tmp_path, nodes + members, worker("w0", 3, **ask))
    code, out, err = run(capsys, *args, "--output", "json")
    assert code == 0, err
    document = json.loads(out)
    assert document["message"] == (  # no domain has room: preemption is tried, per domain
        f"pod group ml/llama: no {RACK} domain holds 3 pods of the group "
        f"(topology-required {RACK}) preemption: pod group ml/llama: no {RACK} domain has "
        "room for all 3 members, even with preemption."
    )
    assert document["group"]["domains"] == [
        {"key": RACK, "value": "a", "fit": 2, "placed": None},
        {"key": RACK, "value": "b", "fit": 1, "placed": None},
    ]
    # each node holds one member: the pod's own verdicts, every snapshot node listed
    assert set(document["nodes"]) == {"a0", "a1", "b0"}
    assert all(entry["feasible"] for entry in document["nodes"].values())
    code, table, _ = run(capsys, *args)
    assert f"  {RACK}=a: 2 pods of the group fit" in table
    assert f"  {RACK}=b: 1 pods of the group fit" in table


def test_group_waiting_for_members_keeps_its_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = files(tmp_path, [gpu_node("a0", "a")], worker("w0", 3))
    code, out, err = run(capsys, *args, "--output", "json")
    assert code == 0, err
    document = json.loads(out)
    assert document["message"] == "waiting for 2 more pods of pod group ml/llama"
    assert document["nodes"] == {}
    assert "domains" not in document["group"] and "firstUnplaced" not in document["group"]


def test_podgroup_object_in_the_snapshot_is_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "job", "namespace": "ml"},
        "spec": {"minMember": 2},
    }
    target = pod("w0", {"nvidia.com/gpu": "8"}, namespace="ml")
    target["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "job"}
    args = files(tmp_path, [gpu_node("a0", "a"), gpu_node("a1", "a"), group], target)
    code, out, err = run(capsys, *args, "--output", "json")
    assert code == 0, err
    assert json.loads(out)["message"] == "waiting for 1 more pod of pod group ml/job"
    bad = dict(group, spec={"minMember": "two"})
    args = files(tmp_path, [gpu_node("a0", "a"), bad], target)
    code, _, err = run(capsys, *args)
    assert code == 2
    assert "PodGroup ml/job: spec.minMember: must be an integer, got 'two'" in err
    assert "Traceback" not in err


def test_group_that_would_fit_once_pods_end_shows_the_capacity_a_reservation_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With the configuration's gangReservationSeconds, a group that fits once running pods
    end shows the nodes a reservation would hold for each member; without it, none."""
    nodes = [gpu_node(f"n{i}", "a") for i in range(3)]
    running = [
        pod(f"run{i}", {"cpu": "1", "nvidia.com/gpu": "4"}, node_name=f"n{i}", phase="Running")
        for i in range(3)
    ]
    args = files(tmp_path, nodes + running + [worker("w1", 2)], worker("w0", 2))
    config = tmp_path / "config.yaml"
    profile = {
        "schedulerName": "topo-scheduler",
        "pluginConfig": [{"name": "GPUTopology", "args": {"gangReservationSeconds": 3600}}],
    }
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "profiles": [profile],
            }
        )
    )
    code, out, err = run(capsys, *args, "--config", str(config), "--output", "json")
    assert code == 0, err
    group = json.loads(out)["group"]
    reservation = group["reservation"]
    assert reservation["gpus"] == 16 and reservation["expiresInSeconds"] == 3600
    held = reservation["members"]
    assert set(held) == {"ml/w0", "ml/w1"} and len(set(held.values())) == 2
    assert "capacity held for it as it frees on 2 node(s)" in group["message"]
    code, table, _ = run(capsys, *args, "--config", str(config))
    assert f"  ml/w0 -> - (held on {held['ml/w0']})" in table
    code, out, _ = run(capsys, *args, "--output", "json")  # reservations off by default
    assert "reservation" not in json.loads(out)["group"]
    assert "capacity held" not in json.loads(out)["group"]["message"]
