"""Regressions: a resource first seen in a pod, and kube's MultiPoint expansion order."""

from __future__ import annotations

from core_support import cache_of, framework, node, pod, pod_info

from scheduler.core.reference import schedule_reference


def test_pod_first_to_use_a_resource_is_accounted() -> None:
    # A bound GPU pod reported before any GPU node (or on a cluster with none).
    cache = cache_of(
        [node("cpu-only")], [pod("gpu-job", {"nvidia.com/gpu": "1"}, node_name="cpu-only")]
    )
    row = cache.snapshot.row["nvidia.com/gpu"]
    slot = cache.snapshot.slot("cpu-only")
    assert slot is not None
    assert int(cache.snapshot.requested[row, slot]) == 1


def test_reenabled_default_filter_runs_first_as_in_kube() -> None:
    fw = framework({"filter": {"enabled": [{"name": "NodeResourcesFit"}]}})
    assert fw.filters[0].name == "NodeResourcesFit"
    # The visible effect: the reason reported for a cordoned, too-small node.
    cache = cache_of([node("n", cpu="1", unschedulable=True)])
    result = fw.schedule(pod_info("p", {"cpu": "2"}), cache.snapshot)
    assert result.message == "0/1 nodes are available: 1 Insufficient cpu."


def test_amounts_beyond_2_53_are_rejected_naming_the_field() -> None:
    import pytest

    from scheduler.core.model import ModelError, PodInfo

    big = pod("huge", {"memory": "1Gi", "cpu": "1E"})
    with pytest.raises(ModelError, match=r"Pod default/huge: spec.containers\[0\].resources"
                                         r".requests.cpu: '1E' is too large"):  # fmt: skip
        PodInfo.from_object(big)


def test_bad_gpu_annotations_leave_the_accounting_intact() -> None:
    from scheduler.core.topology import ANNOTATION_GPUS, builtin_topology, format_topology
    from scheduler.core.topology.schema import ANNOTATION_TOPOLOGY

    topo = {ANNOTATION_TOPOLOGY: format_topology(builtin_topology("dgx-h100"))}
    gpu_node = node("g", extra={"nvidia.com/gpu": "8"}, annotations=topo)
    good = pod("good", {"nvidia.com/gpu": "2"}, node_name="g",
               annotations={ANNOTATION_GPUS: "0,1"}, created="2026-01-01T00:00:00Z")  # fmt: skip
    cache = cache_of([gpu_node], [good])
    slot = cache.snapshot.slot("g")
    assert slot is not None
    assert int(cache.snapshot.gpus.used[slot]) == 0b11
    for bad in ("99", "\u00b2", "1,x", "64"):
        cache.add_pod(pod_info_bound(bad))
        # The unreadable record is no record: the pod is given what the device plugin would
        # give it, and the good pod's GPUs stay held.
        used = int(cache.snapshot.gpus.used[slot])
        assert used & 0b11 == 0b11
        assert bin(used).count("1") == 3


def pod_info_bound(annotation: str):  # type: ignore[no-untyped-def]
    from scheduler.core.model import PodInfo
    from scheduler.core.topology import ANNOTATION_GPUS

    return PodInfo.from_object(
        pod(
            "odd",
            {"nvidia.com/gpu": "1"},
            node_name="g",
            annotations={ANNOTATION_GPUS: annotation},
            created="2026-01-02T00:00:00Z",
        )  # fmt: skip
    )


def test_topology_with_too_many_gpus_is_invalid_and_names_the_node() -> None:
    import json

    import pytest

    from scheduler.core.topology import TopologyError, parse_topology

    gpus = [{"index": i} for i in range(64)]
    with pytest.raises(TopologyError, match=r"big.*64 GPUs; at most 63"):
        parse_topology(json.dumps({"version": 1, "gpus": gpus, "links": []}), node="big")


def test_gpu_verdicts_reused_within_a_cycle_never_outlive_an_assumption() -> None:
    """GPUTopology reuses filter's evaluation in score; an assume in between must not be
    missed: identical pods get disjoint sets until the node is full."""
    from plugins import frameworks_for
    from scheduler.core.config import default_config
    from scheduler.core.topology import builtin_topology, format_topology
    from scheduler.core.topology.schema import ANNOTATION_TOPOLOGY

    topo = {ANNOTATION_TOPOLOGY: format_topology(builtin_topology("dgx-h100"))}
    cache = cache_of([node("g", cpu="64", extra={"nvidia.com/gpu": "8"}, annotations=topo)])
    fw = frameworks_for(default_config())["topo-scheduler"]
    taken: set[int] = set()
    for i in range(2):
        p = pod_info(f"p{i}", {"nvidia.com/gpu": "4"})
        result = fw.schedule(p, cache.snapshot)
        reference = schedule_reference(fw, p, cache.snapshot)
        assert result.node == "g" and len(result.gpus) == 4
        slot = cache.snapshot.slot("g")
        assert slot is not None
        # The packing part of the score sees the GPUs the previous pod took.
        assert int(result.scores["GPUTopology"][slot]) == reference.scores["GPUTopology"]["g"]
        assert taken.isdisjoint(result.gpus)
        taken |= set(result.gpus)
        cache.assume(p, "g", result.gpus)
    third = fw.schedule(pod_info("p2", {"nvidia.com/gpu": "1"}), cache.snapshot)
    assert third.node is None
