"""Reclaim with pod groups: a gang preemptor is judged against its quota as a whole (each
member with the members placed before it counted and their victims gone), and a victim's
whole group frees its namespace's usage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.builders import node
from tests.preemption.helpers import explain_json, gpu_node, pending, running

GPU = "nvidia.com/gpu"


def quota(namespace: str, mn: dict[str, str], mx: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {"name": "quota", "namespace": namespace},
        "spec": {"min": mn, "max": mx},
    }


def member(name: str, namespace: str = "dev", gpus: int = 8) -> dict[str, Any]:
    obj = pending(
        name,
        1000,
        {GPU: str(gpus)},
        annotations={"topo-scheduler.io/pod-group": "train", "topo-scheduler.io/min-member": "2"},
    )
    obj["metadata"]["namespace"] = namespace
    return obj


def gpus(n: int) -> dict[str, str]:
    return {GPU: str(n)}


def test_gang_over_its_max_evicts_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """dev may use 8 GPUs; its gang asks for 16. The first member alone could reclaim a
    borrower's node, the second would take dev over its max: nothing is evicted."""
    objects = [gpu_node("a"), gpu_node("b")]
    objects += [running(f"r-{n}", n, 0, gpus=tuple(range(8)), namespace="research") for n in "ab"]
    objects += [
        quota("research", gpus(0), gpus(16)),
        quota("dev", gpus(8), gpus(8)),
        quota("spare", gpus(16), gpus(16)),
        member("worker-1"),
    ]
    doc = explain_json(tmp_path, objects, member("worker-0"), capsys)
    assert doc["preemption"] is None
    assert doc["message"].endswith(
        "preemption: pod group dev/train: dev/worker-1 fits on no node even with preemption "
        "(1 of 2 members placed)."
    )


def test_gang_within_its_min_reclaims_a_node_per_member(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Research borrows all 16 GPUs; dev's 16 are guaranteed: each member needs one borrower
    gone, for room and for the total guaranteed quota."""
    objects = [gpu_node("a"), gpu_node("b")]
    objects += [running(f"r-{n}", n, 0, gpus=tuple(range(8)), namespace="research") for n in "ab"]
    objects += [quota("research", gpus(0), gpus(16)), quota("dev", gpus(16), gpus(16))]
    objects.append(member("worker-1"))
    doc = explain_json(tmp_path, objects, member("worker-0"), capsys)
    plan = doc["preemption"]
    assert plan["members"] == {"dev/worker-0": "a", "dev/worker-1": "b"}
    assert sorted(plan["victims"]) == ["research/r-a", "research/r-b"]


def test_later_member_counts_the_earlier_ones_against_max(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """dev's own low-priority pod holds 8 of its 16 GPUs. The first member fits on the free
    node; with it counted, the second takes dev over its max, so it evicts in its own
    namespace, by priority."""
    objects = [gpu_node("a"), gpu_node("b")]
    objects.append(running("sweep", "a", 0, gpus=tuple(range(8)), namespace="dev"))
    objects += [quota("dev", gpus(16), gpus(16)), member("worker-1")]
    doc = explain_json(tmp_path, objects, member("worker-0"), capsys)
    plan = doc["preemption"]
    assert plan["members"] == {"dev/worker-0": "b", "dev/worker-1": "a"}
    assert plan["victims"] == ["dev/sweep"]


@pytest.mark.parametrize(
    ("borrower_min", "victims"),
    [
        ("4", None),  # the group's 4 CPUs take b down to its min: solo stays, too little room
        ("2", ["b/g0", "b/g1", "b/solo"]),  # b still above its min once the group is gone
    ],
)
def test_a_victims_group_frees_its_whole_usage(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    borrower_min: str,
    victims: list[str] | None,
) -> None:
    """b uses 8 CPUs: a group of two 2-CPU members on n1 and n2, and two 2-CPU pods on n1. Its
    group goes whole, so b is no longer above its min by what the member on n1 alone frees."""
    group = {"scheduling.x-k8s.io/pod-group": "g"}
    objects = [node(n, cpu="6", memory="1Gi") for n in ("n1", "n2")]
    objects += [
        running("g0", "n1", 0, {"cpu": "2"}, namespace="b", labels=group),
        running("g1", "n2", 0, {"cpu": "2"}, namespace="b", labels=group),
        running("solo", "n1", 5, {"cpu": "2"}, namespace="b"),
        running("solo2", "n1", 6, {"cpu": "2"}, namespace="b"),
        running("fill", "n2", 100, {"cpu": "4"}, namespace="c"),
        quota("b", {"cpu": borrower_min}, {"cpu": "100"}),
        quota("a", {"cpu": "8"}, {"cpu": "100"}),
    ]
    preemptor = pending("p", 1, {"cpu": "4"})
    preemptor["metadata"]["namespace"] = "a"
    doc = explain_json(tmp_path, objects, preemptor, capsys)
    if victims is None:
        assert doc["preemption"] is None
    else:
        assert sorted(doc["preemption"]["victims"]) == victims


def test_a_gang_that_requires_one_rack_reclaims_in_one_rack(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """dev's gang of two 8-GPU members requires one rack. Rack r1: node a of research's
    (borrowed) pods and node b of dev's own; rack r2: nodes c and d of research's. Name order
    alone would plan a and c, across racks; the plan is c and d."""
    rack = "network.topology.nvidia.com/leaf"
    objects = [gpu_node(n, labels={rack: r}) for n, r in (("a", "r1"), ("b", "r1"), ("c", "r2"),
                                                         ("d", "r2"))]  # fmt: skip
    objects += [
        running(f"r-{n}", n, 0, gpus=tuple(range(8)), namespace="research") for n in "acd"
    ]
    objects.append(running("own", "b", 0, gpus=tuple(range(8)), namespace="dev"))
    objects += [quota("research", gpus(0), gpus(32)), quota("dev", gpus(32), gpus(32))]
    required = {"topo-scheduler.io/topology-required": rack}
    workers = [member(f"worker-{i}") for i in range(2)]
    for obj in workers:
        obj["metadata"]["annotations"].update(required)
    doc = explain_json(tmp_path, [*objects, workers[1]], workers[0], capsys)
    plan = doc["preemption"]
    assert plan["members"] == {"dev/worker-0": "c", "dev/worker-1": "d"}
    assert sorted(plan["victims"]) == ["research/r-c", "research/r-d"]
