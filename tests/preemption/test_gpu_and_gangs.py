"""Preemption on GPU nodes: victims whose GPUs form a valid set, whole pod groups, nominated
pods holding their room, and priorities from PriorityClasses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.preemption.helpers import explain_json, gpu_node, pending, running

NVLINK = {"topo-scheduler.io/gpu-placement": "nvlink"}


def gpu_pod(name: str, priority: int, gpus: int, **kw: Any) -> dict[str, Any]:
    return pending(name, priority, {"nvidia.com/gpu": str(gpus)}, **kw)


def test_nvlink_preemptor_evicts_one_quad_not_scattered_gpus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """dgx1-v100: NVLink quads 0-3 and 4-7. The four least important pods hold GPUs 0, 1, 4
    and 5: evicting them frees four GPUs but no NVLink-connected four. Victims are the pods
    on quad 0-3, the filters deciding on each reprieve."""
    prio = {0: 1, 4: 1, 1: 2, 5: 2, 2: 50, 3: 50, 6: 60, 7: 60}
    objects = [gpu_node("dgx")]
    objects += [running(f"g{i}", "dgx", p, gpus=(i,)) for i, p in prio.items()]
    doc = explain_json(tmp_path, objects, gpu_pod("train", 1000, 4, annotations=NVLINK), capsys)
    plan = doc["preemption"]
    assert plan["node"] == "dgx"
    assert sorted(plan["victims"]) == ["default/g0", "default/g1", "default/g2", "default/g3"]
    assert plan["gpus"] == [0, 1, 2, 3]
    # best-effort placement: any four free GPUs do, so the four least important go
    doc = explain_json(tmp_path, objects, gpu_pod("train", 1000, 4), capsys)
    assert sorted(doc["preemption"]["victims"]) == [
        "default/g0", "default/g1", "default/g4", "default/g5",
    ]  # fmt: skip


def test_gpu_set_that_no_eviction_can_form_is_unresolvable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Eight NVLink-connected GPUs do not exist on a dgx1-v100 even when empty: GPUTopology's
    rejection is UnschedulableAndUnresolvable, the node is not tried."""
    objects = [gpu_node("dgx"), running("cpu-only", "dgx", 0, {"cpu": "1"})]
    doc = explain_json(tmp_path, objects, gpu_pod("big", 1000, 8, annotations=NVLINK), capsys)
    assert doc["preemption"] is None
    assert doc["message"] == (
        "0/1 nodes are available: 1 node(s) didn't have 8 NVLink-connected free GPUs. "
        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    )
    # as in kube, a node is judged by its first failing filter: with a GPU in use,
    # NodeResourcesFit rejects first (resolvable), the node is tried, and the dry run's
    # reason is reported
    objects.append(running("g", "dgx", 0, gpus=(0,)))
    doc = explain_json(tmp_path, objects, gpu_pod("big", 1000, 8, annotations=NVLINK), capsys)
    assert doc["preemption"] is None
    assert doc["message"].endswith(
        "preemption: 0/1 nodes are available: 1 node(s) didn't have 8 NVLink-connected free GPUs."
    )


GROUP = {"scheduling.x-k8s.io/pod-group": "sweep"}


def test_victim_in_a_pod_group_takes_its_whole_group(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One member of the group holds the GPUs the preemptor needs on node a; the other
    members, on node b, go too, and are counted in the node choice."""
    objects = [gpu_node("a"), gpu_node("b")]
    objects += [running(f"w{i}", "a", 10, gpus=(i,), labels=GROUP) for i in range(4)]
    objects += [running(f"a{i}", "a", 500, gpus=(i,)) for i in range(4, 8)]
    objects += [running(f"w{i}", "b", 10, gpus=(i - 4,), labels=GROUP) for i in range(4, 8)]
    objects += [running(f"b{i}", "b", 500, gpus=(i,)) for i in range(4, 8)]
    doc = explain_json(tmp_path, objects, gpu_pod("train", 1000, 2), capsys)
    plan = doc["preemption"]
    assert plan["node"] == "a"
    assert sorted(plan["victims"]) == [f"default/w{i}" for i in range(8)]
    # the same cluster without the group label evicts just two pods
    for obj in objects:
        obj["metadata"]["labels"] = {}
    doc = explain_json(tmp_path, objects, gpu_pod("train", 1000, 2), capsys)
    assert len(doc["preemption"]["victims"]) == 2


def test_group_with_a_member_not_lower_is_not_a_victim(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    annotation = {"topo-scheduler.io/pod-group": "mixed", "topo-scheduler.io/min-member": "2"}
    objects = [gpu_node("a"), gpu_node("b")]
    objects += [running(f"low{i}", "a", 10, gpus=(i,), annotations=annotation) for i in range(8)]
    objects += [running("boss", "b", 2000, gpus=(0, 1, 2, 3, 4, 5, 6, 7), annotations=annotation)]
    doc = explain_json(tmp_path, objects, gpu_pod("train", 1000, 2), capsys)
    assert doc["preemption"] is None
    assert "2 No preemption victims found for incoming pod." in doc["message"]


def test_nominated_pod_holds_its_room_for_lower_priority_pods(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pending pod nominated to a node counts there for pods of lower or equal priority
    (kube's nominator): a small pod cannot take the GPUs being freed for it."""
    objects = [gpu_node("a"), running("busy", "a", 0, gpus=(0, 1, 2, 3))]
    waiting = gpu_pod("big", 1000, 4)
    waiting["status"]["nominatedNodeName"] = "a"
    small = gpu_pod("small", 10, 1)
    assert explain_json(tmp_path, objects, small, capsys)["node"] == "a"
    doc = explain_json(tmp_path, [*objects, waiting], small, capsys)
    assert doc["node"] is None
    assert doc["nodes"]["a"]["reasons"] == ["Insufficient nvidia.com/gpu"]
    # a pod of higher priority than the nominated one does not see the nomination
    doc = explain_json(tmp_path, [*objects, waiting], gpu_pod("urgent", 2000, 1), capsys)
    assert doc["node"] == "a"


def test_nominated_node_is_taken_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objects = [gpu_node("a"), gpu_node("b"), running("x", "b", 0, gpus=(0,))]
    incoming = gpu_pod("p", 0, 1)
    assert explain_json(tmp_path, objects, incoming, capsys)["node"] == "a"
    incoming["status"]["nominatedNodeName"] = "b"
    assert explain_json(tmp_path, objects, incoming, capsys)["node"] == "b"


def test_terminating_victim_on_nominated_node_blocks_new_preemption(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    victim = running("old", "a", 0, gpus=tuple(range(8)))
    victim["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    victim["status"]["conditions"] = [
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    ]
    incoming = gpu_pod("p", 1000, 8)
    incoming["status"]["nominatedNodeName"] = "a"
    doc = explain_json(tmp_path, [gpu_node("a"), victim], incoming, capsys)
    assert doc["preemption"] is None
    assert doc["message"].endswith(
        "preemption: not eligible due to a terminating pod on the nominated node."
    )


def priority_class(name: str, value: int, default: bool = False, **extra: Any) -> Any:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "globalDefault": default,
        **extra,
    }


def test_priority_classes_resolve_like_admission(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Pods read from files without spec.priority get their class's value, or the global
    default's; the class's preemptionPolicy applies."""
    low = running("sweep", "a", 0, gpus=tuple(range(8)))
    del low["spec"]["priority"]
    classes = [priority_class("research", 100, default=True), priority_class("prod", 1000)]
    objects = [gpu_node("a"), low, *classes]
    prod = gpu_pod("train", None, 8, priorityClassName="prod")
    assert explain_json(tmp_path, objects, prod, capsys)["preemption"]["victims"] == [
        "default/sweep"
    ]
    # no class: the global default (100), equal to the sweep's: nothing to evict
    doc = explain_json(tmp_path, objects, gpu_pod("train", None, 8), capsys)
    assert doc["preemption"] is None
    never = [*objects[:-1], priority_class("prod", 1000, preemptionPolicy="Never")]
    doc = explain_json(tmp_path, never, prod, capsys)
    assert doc["message"].endswith("preemption: not eligible due to preemptionPolicy=Never.")


def test_unknown_priority_class_is_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml

    from scheduler.cli import main

    (tmp_path / "s.yaml").write_text(yaml.safe_dump_all([gpu_node("a")]))
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(gpu_pod("p", None, 1, priorityClassName="x")))
    code = main(
        ["explain", "--snapshot", str(tmp_path / "s.yaml"), "--pod", str(tmp_path / "p.yaml")]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().endswith(
        "Pod default/p: spec.priorityClassName: no PriorityClass with name x was found"
    )
    assert len(err.strip().splitlines()) == 1


def test_table_shows_the_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    from scheduler.cli import main

    objects = [gpu_node("a"), running("sweep", "a", 0, gpus=tuple(range(8)))]
    (tmp_path / "s.yaml").write_text(yaml.safe_dump_all(objects))
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(gpu_pod("train", 1000, 8)))
    assert (
        main(["explain", "--snapshot", str(tmp_path / "s.yaml"), "--pod", str(tmp_path / "p.yaml")])
        == 0
    )
    out = capsys.readouterr().out
    assert (
        "preemption: would run on a (GPUs 0,1,2,3,4,5,6,7) after evicting 1 pod(s): "
        "default/sweep (dry run: nothing evicted)"
    ) in out


def gang_member(name: str, priority: int = 1000, min_member: int = 2) -> dict[str, Any]:
    annotations = {
        "topo-scheduler.io/pod-group": "train",
        "topo-scheduler.io/min-member": str(min_member),
    }
    return gpu_pod(name, priority, 8, annotations=annotations)


def test_gang_preemptor_places_every_member(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two 8-GPU members, two full nodes of sweeps: both nodes are freed, and the plan names
    each member's node."""
    objects = [gpu_node("a"), gpu_node("b"), gpu_node("c")]
    objects += [running(f"a{i}", "a", 0, gpus=(2 * i, 2 * i + 1)) for i in range(4)]
    objects += [running(f"b{i}", "b", 0, gpus=(2 * i, 2 * i + 1)) for i in range(4)]
    objects += [running("c0", "c", 5000, gpus=tuple(range(8)))]  # not a victim: higher
    objects.append(gang_member("worker-1"))
    doc = explain_json(tmp_path, objects, gang_member("worker-0"), capsys)
    plan = doc["preemption"]
    assert plan["node"] == "a"
    assert plan["members"] == {"default/worker-0": "a", "default/worker-1": "b"}
    assert sorted(plan["victims"]) == [f"default/{n}{i}" for n in "ab" for i in range(4)]


def test_gang_preemptor_that_cannot_fit_evicts_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three 8-GPU members and two nodes with lower-priority pods (the third is held by a
    higher-priority pod): no plan at all, though each member alone could preempt."""
    objects = [gpu_node("a"), gpu_node("b"), gpu_node("c")]
    objects += [running(f"a{i}", "a", 0, gpus=(2 * i, 2 * i + 1)) for i in range(4)]
    objects += [running(f"b{i}", "b", 0, gpus=(2 * i, 2 * i + 1)) for i in range(4)]
    objects += [running("c0", "c", 5000, gpus=tuple(range(8)))]
    objects += [gang_member("worker-1", min_member=3), gang_member("worker-2", min_member=3)]
    doc = explain_json(tmp_path, objects, gang_member("worker-0", min_member=3), capsys)
    assert doc["preemption"] is None
    assert doc["message"].endswith(
        "preemption: pod group default/train: default/worker-2 fits on no node even with "
        "preemption (2 of 3 members placed)."
    )
    # a group of one (no other member), the same pod preempts
    doc = explain_json(tmp_path, objects[:-2], gang_member("worker-0", min_member=1), capsys)
    assert doc["preemption"]["node"] == "a"


@pytest.mark.parametrize("a_is_free", [False, True])
def test_gang_preemptor_with_a_required_level_evicts_in_one_domain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], a_is_free: bool
) -> None:
    """Two 8-GPU members that require one rack. Rack r1: node a of sweeps (or free), node b
    held by a higher-priority pod; rack r2: nodes c and d of sweeps. No rack has room, so the
    group preempts (before, a group whose required level had no room never did), even when its
    first member alone fits on a; name order alone would plan across racks: the plan is c and
    d."""
    rack = "network.topology.nvidia.com/leaf"
    objects = [gpu_node(n, labels={rack: r}) for n, r in (("a", "r1"), ("b", "r1"), ("c", "r2"),
                                                         ("d", "r2"))]  # fmt: skip
    for n in "cd" if a_is_free else "acd":
        objects += [running(f"{n}{i}", n, 0, gpus=(2 * i, 2 * i + 1)) for i in range(4)]
    objects.append(running("b0", "b", 5000, gpus=tuple(range(8))))

    def member(name: str) -> dict[str, Any]:
        obj = gang_member(name)
        obj["metadata"]["annotations"]["topo-scheduler.io/topology-required"] = rack
        return obj

    objects.append(member("worker-1"))
    doc = explain_json(tmp_path, objects, member("worker-0"), capsys)
    plan = doc["preemption"]
    assert plan["members"] == {"default/worker-0": "c", "default/worker-1": "d"}
    assert sorted(plan["victims"]) == [f"default/{n}{i}" for n in "cd" for i in range(4)]
