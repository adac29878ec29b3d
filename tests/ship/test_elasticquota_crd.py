"""The chart's optional ElasticQuota CRD (scheduler-plugins' scheduling.x-k8s.io/v1alpha1)."""

from __future__ import annotations

from ._support import objects


def _crds(values: dict) -> list[dict]:
    return [o for o in objects(values) if o["kind"] == "CustomResourceDefinition"]


def test_off_by_default() -> None:
    assert _crds({}) == []


def test_installed_on_request_with_status_subresource_and_kept_on_uninstall() -> None:
    (crd,) = _crds({"elasticQuotas": {"installCRD": True}})
    assert crd["metadata"]["name"] == "elasticquotas.scheduling.x-k8s.io"
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    spec = crd["spec"]
    assert (spec["group"], spec["names"]["kind"], spec["scope"]) == (
        "scheduling.x-k8s.io",
        "ElasticQuota",
        "Namespaced",
    )
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}
    fields = version["schema"]["openAPIV3Schema"]["properties"]
    assert set(fields["spec"]["properties"]) == {"min", "max"}
    assert set(fields["status"]["properties"]) == {"used"}


def test_both_crds_together() -> None:
    names = {
        c["metadata"]["name"]
        for c in _crds({"elasticQuotas": {"installCRD": True}, "podGroups": {"installCRD": True}})
    }
    assert names == {"elasticquotas.scheduling.x-k8s.io", "podgroups.scheduling.x-k8s.io"}
