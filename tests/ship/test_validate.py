"""Every object we ship validates, strictly, against the Kubernetes API of 1.30 through 1.34."""

from __future__ import annotations

import copy

import pytest

from ._support import (
    EXAMPLES_DIR,
    KUBE_VERSIONS,
    MANIFESTS_DIR,
    VALUE_SETS,
    load_yaml_docs,
    objects,
    validation_errors,
)


def _all_errors(docs: list[dict]) -> list[str]:
    return [
        err for doc in docs for version in KUBE_VERSIONS for err in validation_errors(doc, version)
    ]


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_rendered_chart_validates(name: str) -> None:
    docs = objects(VALUE_SETS[name])
    assert docs
    assert not _all_errors(docs)


def test_manifests_validate() -> None:
    docs = load_yaml_docs(MANIFESTS_DIR / "topo-scheduler.yaml")
    assert {d["kind"] for d in docs} >= {"Namespace", "Deployment", "DaemonSet", "ConfigMap"}
    assert not _all_errors(docs)


@pytest.mark.parametrize("path", sorted(EXAMPLES_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_examples_validate(path) -> None:
    docs = load_yaml_docs(path)
    assert docs
    assert not _all_errors(docs)


def test_validation_is_strict_and_fails_on_unknown_kinds() -> None:
    """The checks above would catch a typo'd field, a wrong type and a kind with no schema."""
    (deployment,) = [o for o in objects() if o["kind"] == "Deployment"]
    typo = copy.deepcopy(deployment)
    typo["spec"]["template"]["spec"]["containers"][0]["securityContex"] = {}
    assert validation_errors(typo, "1.30")
    wrong_type = copy.deepcopy(deployment)
    wrong_type["spec"]["replicas"] = "2"
    assert validation_errors(wrong_type, "1.34")
    unknown = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    assert validation_errors(unknown, "1.30")
