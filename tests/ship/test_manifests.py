"""manifests/ is the chart rendered with default values, and nothing else."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from ._support import MANIFESTS_DIR, NAMESPACE, load_yaml_docs, objects, render_script


def test_manifests_match_the_chart() -> None:
    script = render_script()
    diffs = script.drift(script.render())
    assert not diffs, "manifests/ drifted; run python hack/render-manifests.py\n" + "".join(diffs)


def test_drift_is_detected(tmp_path) -> None:
    script = render_script()
    expected = script.render()
    script.write(expected, tmp_path)
    assert not script.drift(expected, tmp_path)
    edited = tmp_path / "topo-scheduler.yaml"
    edited.write_text(edited.read_text().replace("replicas: 2", "replicas: 3"))
    assert script.drift(expected, tmp_path)
    (tmp_path / "stray.yaml").write_text("kind: ConfigMap\n")
    assert any("stray.yaml" in d for d in script.drift(expected, tmp_path))


CLUSTER_SCOPED = (
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)


def test_manifests_hold_the_namespace_and_every_chart_object() -> None:
    docs = load_yaml_docs(MANIFESTS_DIR / "topo-scheduler.yaml")
    assert docs[0] == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": NAMESPACE,
            "labels": {
                "app.kubernetes.io/name": "topo-scheduler",
                "app.kubernetes.io/instance": "topo-scheduler",
            },
        },
    }
    assert docs[1:] == objects()
    for doc in docs[1:]:
        if doc["kind"] not in CLUSTER_SCOPED:
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["kind"]


def test_kustomization_lists_the_manifests() -> None:
    kustomization = yaml.safe_load((MANIFESTS_DIR / "kustomization.yaml").read_text())
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert kustomization["kind"] == "Kustomization"
    others = sorted(p.name for p in MANIFESTS_DIR.iterdir() if p.name != "kustomization.yaml")
    assert kustomization["resources"] == others == ["topo-scheduler.yaml"]


def _kustomize_available() -> bool:
    if not shutil.which("kubectl"):
        return False
    probe = subprocess.run(
        ["kubectl", "kustomize", "--help"], capture_output=True, text=True, timeout=20
    )
    return probe.returncode == 0


@pytest.mark.skipif(not _kustomize_available(), reason="kubectl with kustomize not installed")
def test_kubectl_kustomize_builds_the_same_objects() -> None:
    out = subprocess.run(
        ["kubectl", "kustomize", str(MANIFESTS_DIR)],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    built = [d for d in yaml.safe_load_all(out) if d]
    want = load_yaml_docs(MANIFESTS_DIR / "topo-scheduler.yaml")

    def key(o: dict) -> tuple[str, str]:
        return o["kind"], o["metadata"]["name"]

    assert sorted(built, key=key) == sorted(want, key=key)
