"""explain reads DeviceClasses, ResourceClaims, ResourceClaimTemplates and ResourceSlices
from a snapshot, shows each node's allocation of the pod's claims (the GPU set and its
bandwidth where the devices are GPUs of the node's topology) and kube's reasons elsewhere."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.dra.objects import (
    DRIVER,
    claim,
    claim_pod,
    device_class,
    dgx1,
    gpu_node,
    gpu_slice,
    request,
)

ROOT = Path(__file__).resolve().parents[2]


def _explain(tmp_path: Path, objects: list[dict[str, Any]], pod: dict[str, Any]) -> Any:
    snapshot = tmp_path / "snapshot.yaml"
    snapshot.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects}))
    pod_file = tmp_path / "pod.yaml"
    pod_file.write_text(yaml.safe_dump(pod))
    out = subprocess.run(
        [sys.executable, "-m", "scheduler.cli", "explain", "--snapshot", str(snapshot),
         "--pod", str(pod_file), "--output", "json"],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_explain_shows_the_claims_devices_per_node_and_kubes_reasons(tmp_path: Path) -> None:
    topology = dgx1()
    held = (0, 1, 4)
    other = claim("other", request(count=3), status={
        "allocation": {"devices": {"results": [
            {"request": "gpus", "driver": DRIVER, "pool": "dgx-0", "device": f"gpu-{i}"}
            for i in held
        ]}},
    })  # fmt: skip
    objects = [
        gpu_node("dgx-0", topology),
        gpu_node("small"),
        gpu_slice("dgx-0", topology=topology),
        gpu_slice("small", gpus=2),
        device_class(),
        other,
        claim("train", request(count=4)),
    ]
    doc = _explain(tmp_path, objects, claim_pod("p", [("gpus", "train")]))
    assert doc["node"] == "dgx-0"
    chosen = doc["nodes"]["dgx-0"]["claims"]["default/train"]
    assert len(chosen["devices"]) == 4 and not set(chosen["gpus"]) & set(held)
    assert chosen["busbw"] > 0
    assert doc["claims"] == doc["nodes"]["dgx-0"]["claims"]
    assert doc["nodes"]["small"]["reasons"] == ["cannot allocate all claims"]
    # a dry run: the claim in the snapshot is not allocated by explaining
    again = _explain(tmp_path, objects, claim_pod("p", [("gpus", "train")]))
    assert again["node"] == "dgx-0"


def test_explain_says_a_template_claim_is_not_created_yet(tmp_path: Path) -> None:
    objects = [gpu_node("n0"), gpu_slice("n0"), device_class()]
    pod = claim_pod("p", [("gpus", "gpu-template")], template=True)
    doc = _explain(tmp_path, objects, pod)
    assert doc["node"] is None
    assert doc["message"].startswith(
        '0/1 nodes are available: pod "default/p": ResourceClaim not created yet.'
    )
