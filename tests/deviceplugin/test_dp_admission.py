"""The admission rule and the preferred set, on pod objects (no kubelet, no API server)."""

from __future__ import annotations

from typing import Any

from scheduler.agent.deviceplugin.admission import (
    KubeletPod,
    Pending,
    Source,
    match_allocation,
    pending_containers,
    pod_view,
    prefer,
    preference_order,
    recorded_part,
)
from scheduler.core.topology import GpuSelector, builtin_topology

V100 = builtin_topology("dgx1-v100")
UUIDS = {f"GPU-{i}": i for i in range(8)}


def _pod(
    name: str,
    created: str,
    *gpus: int,
    recorded: str | None = None,
    phase: str = "Pending",
    placement: str | None = None,
    uid: str | None = None,
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
            "uid": uid or f"uid-{name}",
            "creationTimestamp": created,
            "annotations": annotations,
        },
        "spec": {"containers": containers},
        "status": {"phase": phase},
    }


def _views(*pods: dict[str, Any]) -> list[Any]:
    return [v for p in pods if (v := pod_view(p, "nvidia.com/gpu")) is not None]


def _listed(name: str, **held: list[int]) -> KubeletPod:
    return KubeletPod(
        "ml", name, {c: frozenset(f"GPU-{i}" for i in ids) for c, ids in held.items()}
    )


def _pending(views: list[Any], kubelet: list[KubeletPod], **kw: Any) -> list[Pending]:
    return pending_containers(views, kubelet, UUIDS.get, **kw)


SAME_SECOND = "2026-01-01T00:00:05Z"


def test_pending_containers_are_per_uid_and_skip_finished_or_cpu_pods() -> None:
    views = _views(
        _pod("b", SAME_SECOND, 2, recorded="1,4"),
        _pod("a", SAME_SECOND, 2, recorded="5,6"),
        _pod("old", "2026-01-01T00:00:01Z", 4),
        _pod("cpu", "2026-01-01T00:00:00Z", 0),
        _pod("done", "2026-01-01T00:00:00Z", 2, phase="Succeeded"),
    )
    assert [p.name for p in views] == ["b", "a", "old"]  # no GPU or finished: not candidates
    pending = _pending(views, [_listed("old", c0=[0, 1, 2, 3])])
    assert [(p.pod.uid, p.position, p.listed) for p in pending] == [
        ("uid-b", 0, False),
        ("uid-a", 0, False),
    ]
    # What this plugin allocated and the kubelet does not list yet counts as held.
    pending = _pending(views, [], granted={"uid-a": (1, frozenset({5, 6}))})
    assert [p.pod.uid for p in pending] == ["uid-b", "uid-old"]


def test_the_listed_pod_is_preferred_whatever_the_creation_order() -> None:
    # a and b were created in the same second; the kubelet admits b first (it lists b only).
    views = _views(
        _pod("a", SAME_SECOND, 2, recorded="5,6"), _pod("b", SAME_SECOND, 2, recorded="1,4")
    )
    pending = _pending(views, [_listed("b")])
    order = preference_order(pending, 2, range(8), [])
    assert [p.pod.name for p in order] == ["b"]
    # A kubelet listing both: a tie, broken toward the pod whose record is available.
    pending = _pending(views, [_listed("a"), _listed("b")])
    order = preference_order(pending, 2, [0, 1, 2, 3, 4, 7], [])
    assert [p.pod.name for p in order] == ["b", "a"]
    assert preference_order(pending, 3, range(8), []) == []


def test_allocate_devices_identify_the_pod() -> None:
    views = _views(
        _pod("a", "2026-01-01T00:00:01Z", 2, recorded="5,6"),
        _pod("b", "2026-01-01T00:00:02Z", 2, recorded="1,4"),
        _pod("c", "2026-01-01T00:00:03Z", 2, recorded="0,2"),
    )
    pending = _pending(views, [_listed("a"), _listed("b"), _listed("c")])
    found, exact = match_allocation(pending, (1, 4), ("uid-a", 0))
    assert found is not None and found.pod.name == "b" and exact
    # Devices matching no record: the pod the preference was for, else nobody.
    found, exact = match_allocation(pending, (3, 7), ("uid-c", 0))
    assert found is not None and found.pod.name == "c" and not exact
    assert match_allocation(pending, (3, 7), None) == (None, False)
    # ...unless a single pending container asks for that many.
    only = _pending(views, [_listed("c")])
    found, exact = match_allocation(only, (3, 7), None)
    assert found is not None and found.pod.name == "c" and not exact


def test_recreated_pod_is_a_new_pod() -> None:
    # The old x still terminates with GPUs 0,1; the new x (another UID) is being admitted.
    new = _views(_pod("x", "2026-01-01T00:00:09Z", 2, recorded="2,3", uid="uid-x2"))
    kubelet = [_listed("x", c0=[0, 1]), _listed("x")]
    pending = _pending(new, kubelet)
    assert [(p.pod.uid, p.held) for p in pending] == [("uid-x2", ())]
    # A stale copy of the old pod (the watch has not seen it go) is never taken for the new
    # one: the plugin saw its container holding devices.
    old = _views(_pod("x", "2026-01-01T00:00:01Z", 2, recorded="0,1", uid="uid-x1"))
    assert _pending(old, [_listed("x")], admitted={"uid-x1": 1}) == []


def test_recorded_part_judged_afterwards() -> None:
    pod = _views(_pod("a", "t", 2, 2, recorded="0,3,4,7"))[0]
    assert recorded_part(pod, 0, [], (0, 3)) == (0, 3)
    assert recorded_part(pod, 0, [], (0, 1)) == (0, 3, 4, 7)
    assert recorded_part(pod, 1, [0, 3], (4, 7)) == (4, 7)
    assert recorded_part(_views(_pod("f", "t", 1))[0], 0, [], (2,)) is None


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


def test_must_include_repeated_or_larger_than_the_size() -> None:
    pod = _views(_pod("a", "t", 2, recorded="5,6"))[0]
    for admitted in ((pod, 0), None):
        choice = prefer(GpuSelector(), V100, admitted, [], list(range(8)), [3, 3], 2)
        assert len(choice.indices) == len(set(choice.indices)) == 2 and 3 in choice.indices
        choice = prefer(GpuSelector(), V100, admitted, [], list(range(8)), [4, 1, 4, 2], 2)
        assert choice.indices == (1, 4)  # the first two of must, never more than asked
        choice = prefer(GpuSelector(), V100, admitted, [], list(range(8)), [], 0)
        assert choice.indices == ()
