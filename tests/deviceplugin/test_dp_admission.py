"""The admission rule and the preferred set, on pod objects (no kubelet, no API server)."""

from __future__ import annotations

from typing import Any

from scheduler.agent.deviceplugin.admission import (
    Source,
    admitted_container,
    pod_view,
    prefer,
)
from scheduler.core.topology import GpuSelector, builtin_topology

V100 = builtin_topology("dgx1-v100")


def _pod(
    name: str,
    created: str,
    *gpus: int,
    recorded: str | None = None,
    phase: str = "Pending",
    placement: str | None = None,
) -> dict[str, Any]:
    annotations = {}
    if recorded is not None:
        annotations["topo-scheduler.io/gpus"] = recorded
    if placement is not None:
        annotations["topo-scheduler.io/gpu-placement"] = placement
    containers = [
        {"name": f"c{i}", "resources": {"limits": {"nvidia.com/gpu": str(n)}}}
        if n
        else {"name": f"c{i}"}
        for i, n in enumerate(gpus)
    ]
    return {
        "metadata": {
            "namespace": "ml",
            "name": name,
            "uid": f"uid-{name}",
            "creationTimestamp": created,
            "annotations": annotations,
        },
        "spec": {"containers": containers},
        "status": {"phase": phase},
    }


def _views(*pods: dict[str, Any]) -> list[Any]:
    return [v for p in pods if (v := pod_view(p, "nvidia.com/gpu")) is not None]


def test_oldest_then_name_among_pods_asking_that_size() -> None:
    pods = _views(
        _pod("b", "2026-01-01T00:00:05Z", 2),
        _pod("a", "2026-01-01T00:00:05Z", 2),
        _pod("old", "2026-01-01T00:00:01Z", 4),
        _pod("cpu", "2026-01-01T00:00:00Z", 0),
        _pod("done", "2026-01-01T00:00:00Z", 2, phase="Succeeded"),
    )
    assert [p.name for p in pods] == ["b", "a", "old"]  # no GPU or finished: not candidates
    found = admitted_container(pods, {}, 2)
    assert found is not None and found[0].name == "a" and found[1] == 0
    found = admitted_container(pods, {("ml", "a"): 1}, 2)
    assert found is not None and found[0].name == "b"
    assert admitted_container(pods, {}, 3) is None


def test_recorded_set_preferred_when_available() -> None:
    pod = _views(_pod("a", "t", 2, recorded="5,6"))[0]
    choice = prefer(GpuSelector(), V100, (pod, 0), [], list(range(8)), [], 2)
    assert choice.source is Source.RECORDED and choice.indices == (5, 6)
    choice = prefer(GpuSelector(), V100, (pod, 0), [], [0, 1, 2, 3, 4, 6, 7], [], 2)
    assert choice.source is Source.RECORD_UNAVAILABLE and 5 not in choice.indices
    assert choice.expected == (5, 6)  # Allocate reports the mismatch against the record


def test_several_gpu_containers_split_the_recorded_set() -> None:
    pod = _views(_pod("a", "t", 2, 0, 2, recorded="0,3,4,7"))[0]
    assert pod.containers == (("c0", 2), ("c2", 2))
    first = prefer(GpuSelector(), V100, (pod, 0), [], list(range(8)), [], 2)
    assert first.source is Source.RECORDED and set(first.indices) < {0, 3, 4, 7}
    rest = tuple(sorted({0, 3, 4, 7} - set(first.indices)))
    free = [i for i in range(8) if i not in first.indices]
    second = prefer(GpuSelector(), V100, (pod, 1), list(first.indices), free, [], 2)
    assert second.source is Source.RECORDED and second.indices == rest


def test_must_include_is_always_in_the_answer() -> None:
    pod = _views(_pod("a", "t", 2, recorded="5,6"))[0]
    choice = prefer(GpuSelector(), V100, (pod, 0), [], list(range(8)), [1], 2)
    assert 1 in choice.indices and len(choice.indices) == 2
    assert choice.source is Source.RECORD_UNAVAILABLE
    unknown = prefer(GpuSelector(), V100, None, [], list(range(8)), [2], 3)
    assert 2 in unknown.indices and len(unknown.indices) == 3


def test_own_best_set_follows_the_pods_placement_policy() -> None:
    pod = _views(_pod("a", "t", 4, placement="single-numa"))[0]
    choice = prefer(GpuSelector(), V100, (pod, 0), [], [2, 3, 4, 5, 6, 7], [], 4)
    assert choice.source is Source.NO_RECORD
    assert set(choice.indices) == {4, 5, 6, 7}  # the only whole NUMA node left


def test_unreadable_record_is_reported_as_such() -> None:
    pod = _views(_pod("a", "t", 1, recorded="zero"))[0]
    assert pod.record_error is not None and "topo-scheduler.io/gpus" in pod.record_error
    choice = prefer(GpuSelector(), V100, (pod, 0), [], list(range(8)), [], 1)
    assert choice.source is Source.BAD_RECORD
