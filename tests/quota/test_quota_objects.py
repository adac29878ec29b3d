"""ElasticQuota objects: field-path errors, the last good version kept, explain's snapshot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.cli import main
from scheduler.core.model import PodInfo
from scheduler.core.quota import ElasticQuota
from scheduler.core.selectors import ModelError
from tests.builders import node, pod
from tests.quota.test_capacity_scheduling import cluster, eq, make_pod


def _quota(spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {"name": "team", "namespace": "ml"},
        "spec": spec,
    }


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"min": {"cpu": "lots"}}, "ElasticQuota ml/team: spec.min.cpu: "),
        (
            {"max": {"nvidia.com/gpu": "-1"}},
            "ElasticQuota ml/team: spec.max.nvidia.com/gpu: must be",
        ),
        ({"max": ["cpu"]}, "ElasticQuota ml/team: spec.max: must be a mapping"),
        ("x", "ElasticQuota ml/team: spec: must be a mapping"),
    ],
)
def test_malformed_quota_names_object_and_field(spec: Any, message: str) -> None:
    with pytest.raises(ModelError) as info:
        ElasticQuota.from_object(_quota(spec))
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_unreadable_update_keeps_the_last_good_version() -> None:
    cache = cluster([eq("ml", "team", {"cpu": "2"}, None)], [])
    assert cache.set_unreadable_quota("ml", "team", "spec.max.cpu: bad")
    assert not cache.set_unreadable_quota("ml", "team", "spec.max.cpu: bad")  # once
    info = cache.snapshot.quotas.info("ml")
    assert info is not None and info.max == {"cpu": 2000}
    assert cache.unreadable() == [
        "ElasticQuota ml/team: not understood, its last good version is in force: spec.max.cpu: bad"
    ]
    cache.update_quota(eq("ml", "team", {"cpu": "3"}, None))
    assert cache.unreadable() == []


def test_quota_added_after_pods_counts_them() -> None:
    cache = cluster([], [make_pod("run", "ml", 0, 1500, node_name="n1")])
    cache.add_quota(eq("ml", "team", None, {"cpu": "1"}))
    assert cache.snapshot.quotas.info("ml").used == {"cpu": 1500}  # type: ignore[union-attr]
    assert cache.snapshot.quotas.dominant_share("ml") == 1.5


def test_second_quota_in_a_namespace_waits_for_the_first() -> None:
    cache = cluster([eq("ml", "a", {"cpu": "1"}, None), eq("ml", "b", {"cpu": "5"}, None)], [])
    assert cache.snapshot.quotas.info("ml").name == "a"  # type: ignore[union-attr]
    cache.remove_quota("ml", "a")
    assert cache.snapshot.quotas.info("ml").name == "b"  # type: ignore[union-attr]


def test_group_checked_as_a_whole() -> None:
    cache = cluster([eq("ml", "team", {"cpu": "3"}, {"cpu": "3"})], [])
    members = []
    for i in range(4):
        obj = pod(f"w{i}", {"cpu": "1"}, namespace="ml")
        obj["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "llama"}
        members.append(PodInfo.from_object(obj))
    assert cache.snapshot.quotas.check_group(members[:3]) is None
    assert cache.snapshot.quotas.check_group(members) == (
        "PodGroup ml/llama (4 pending pods) is rejected in PreFilter because ElasticQuota ml "
        "is more than Max"
    )


def test_explain_shows_the_quota_reason(tmp_path: Path, capsys: Any) -> None:
    objects = [
        node("n1", cpu="8", memory="8Gi"),
        _quota({"max": {"cpu": "2", "memory": "4Gi"}, "min": {"cpu": "1", "memory": "1Gi"}}),
        {**pod("run", {"cpu": "2"}, namespace="ml", node_name="n1", phase="Running")},
    ]
    snap = tmp_path / "snapshot.yaml"
    snap.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects}))
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(pod("new", {"cpu": "1"}, namespace="ml")))
    code = main(["explain", "--snapshot", str(snap), "--pod", str(manifest), "--output", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "Pod ml/new is rejected in PreFilter because ElasticQuota ml is more than Max" in out
    json.loads(out)
