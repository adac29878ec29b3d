"""`explain` with storage objects in the snapshot: kube's volume reasons, and a dry run that
leaves no assumption and needs no writer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from plugins import frameworks_for
from scheduler.core.config import default_config
from scheduler.core.model import PodInfo
from scheduler.explain import explain, load_snapshot
from tests.builders import node, pod

from .objects import HOSTNAME, pv, pvc, resource_claim, storage_class

ROOT = Path(__file__).resolve().parents[2]


def _snapshot(tmp_path: Path) -> Path:
    items: list[dict[str, Any]] = [
        node("a", labels={HOSTNAME: "a"}),
        node("b", labels={HOSTNAME: "b"}),
        storage_class("local"),
        pv("local-b", class_name="local", size="10Gi", hosts=("b",)),
        pvc("data", class_name="local", size="5Gi"),
        resource_claim("rc", allocated=False),
    ]
    path = tmp_path / "snapshot.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


def _pod(tmp_path: Path, spec: dict[str, Any]) -> Path:
    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump(pod("train", {"cpu": "1"}, spec=spec)))
    return path


def test_explain_gives_volume_binding_reasons_and_writes_nothing(tmp_path: Path) -> None:
    cache = load_snapshot(str(_snapshot(tmp_path)))
    spec = {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}
    p = PodInfo.from_object(yaml.safe_load(_pod(tmp_path, spec).read_text()))
    fw = frameworks_for(default_config())["topo-scheduler"]
    doc = explain(cache, p, fw)
    assert doc["node"] == "b"
    assert doc["nodes"]["a"]["reasons"] == [
        "node(s) didn't find available persistent volumes to bind"
    ]
    storage = cache.snapshot.storage
    assert storage.writer is None
    assert not storage.is_assumed_volume("local-b")  # the dry run reverted its choice
    assert storage.volumes["local-b"].claim_ref is None


def test_explain_cli_reports_a_missing_resource_claim(tmp_path: Path) -> None:
    spec = {"resourceClaims": [{"name": "gpu", "resourceClaimName": "missing"}]}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "scheduler.cli",
            "explain",
            "--snapshot",
            str(_snapshot(tmp_path)),
            "--pod",
            str(_pod(tmp_path, spec)),
            "--output",
            "json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    doc = json.loads(out.stdout)
    assert doc["node"] is None
    assert doc["message"] == (
        '0/2 nodes are available: resourceclaim.resource.k8s.io "missing" not found. '
        "no new claims to deallocate, preemption: 0/2 nodes are available: 2 Preemption is "
        "not helpful for scheduling."
    )


def test_explain_names_a_bad_storage_object(tmp_path: Path) -> None:
    path = tmp_path / "snapshot.yaml"
    path.write_text(yaml.safe_dump(pvc("data") | {"spec": {"volumeName": 7}}))
    spec = {"volumes": []}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "scheduler.cli",
            "explain",
            "--snapshot",
            str(path),
            "--pod",
            str(_pod(tmp_path, spec)),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert out.returncode != 0
    assert (
        out.stderr.strip()
        .splitlines()[-1]
        .endswith("PersistentVolumeClaim default/data: spec.volumeName: must be a string, got int")
    )
    assert "Traceback" not in out.stderr
