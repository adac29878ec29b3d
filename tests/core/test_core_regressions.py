"""Regressions: a resource first seen in a pod, and kube's MultiPoint expansion order."""

from __future__ import annotations

from core_support import cache_of, framework, node, pod, pod_info


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
