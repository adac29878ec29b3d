"""The Helm chart installed as rendered on the 1.37 plane: every object of `helm template`
(tests/ship renders it with Helm's engine) sent with server-side apply and strict field
validation (what `kubectl apply --server-side` does by default, no `--validate=false`), with
the defaults and with every optional part the plane can hold (scheduler-plugins' PodGroup CRD,
the metrics reader's binding). The ServiceMonitor needs the Prometheus Operator's CRD and is
left out.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

from tests.realkube.api import Api, HTTPFailure
from tests.realkube.conftest import NAMESPACE

pytestmark = pytest.mark.plane("1.37")

FIELD_MANAGER = "helm"
WORKLOADS = {"Deployment", "DaemonSet"}  # removed afterwards: the other tests run their own


@functools.cache
def _resource(api: Api, api_version: str, kind: str) -> tuple[str, bool]:
    """(plural, namespaced) from discovery."""
    prefix = "/api/" if api_version == "v1" else "/apis/"
    for res in api.get(prefix + api_version)["resources"]:
        if res["kind"] == kind and "/" not in res["name"]:
            return str(res["name"]), bool(res["namespaced"])
    raise AssertionError(f"{api_version} {kind} not served")


def _path(api: Api, obj: dict[str, Any]) -> str:
    plural, namespaced = _resource(api, obj["apiVersion"], obj["kind"])
    prefix = "/api/v1" if obj["apiVersion"] == "v1" else f"/apis/{obj['apiVersion']}"
    ns = obj["metadata"].get("namespace") or NAMESPACE
    base = f"{prefix}/namespaces/{ns}/{plural}" if namespaced else f"{prefix}/{plural}"
    return f"{base}/{obj['metadata']['name']}"


def _server_side_apply(api: Api, obj: dict[str, Any]) -> dict[str, Any]:
    return api.call(
        "PATCH",
        _path(api, obj),
        obj,
        "application/apply-patch+yaml",  # JSON is YAML
        query={"fieldManager": FIELD_MANAGER, "fieldValidation": "Strict"},
    )


VALUES: dict[str, dict[str, Any]] = {
    "defaults": {},
    "optional parts on": {
        "podGroups": {"installCRD": True},
        "metrics": {"reader": {"serviceAccounts": [{"name": "prometheus", "namespace": "mon"}]}},
    },
}


@pytest.mark.parametrize("values", list(VALUES), ids=list(VALUES))
def test_chart_installs_as_rendered_with_server_side_apply(cluster: Api, values: str) -> None:
    from tests.ship._support import objects

    rendered = objects(VALUES[values], namespace=NAMESPACE)
    kinds = {o["kind"] for o in rendered}
    assert {"Deployment", "DaemonSet", "ValidatingAdmissionPolicy", "PodDisruptionBudget"} <= kinds
    applied: list[dict[str, Any]] = []
    refused: list[str] = []
    try:
        for obj in rendered:
            try:
                result = _server_side_apply(cluster, obj)
            except HTTPFailure as err:
                refused.append(f"{obj['kind']} {obj['metadata']['name']}: {err}")
                continue
            applied.append(obj)
            managers = {m["manager"] for m in result["metadata"].get("managedFields") or []}
            assert FIELD_MANAGER in managers, (obj["kind"], managers)
            # what was sent is what is stored (no field dropped as unknown)
            for key, value in (obj.get("spec") or {}).items():
                if key in ("template", "selector", "versions"):
                    continue
                if isinstance(value, (str, int, bool)):
                    assert result["spec"][key] == value, (obj["kind"], key)
        assert not refused, "\n".join(refused)
        assert len(applied) == len(rendered)
        # a dry run of the same apply again: no conflict, nothing to change
        for obj in rendered:
            cluster.call(
                "PATCH",
                _path(cluster, obj),
                obj,
                "application/apply-patch+yaml",
                query={"fieldManager": FIELD_MANAGER, "fieldValidation": "Strict", "dryRun": "All"},
            )
    finally:
        for obj in applied:
            if obj["kind"] in WORKLOADS or obj["kind"].startswith("ValidatingAdmissionPolicy"):
                try:
                    cluster.call("DELETE", _path(cluster, obj), {"propagationPolicy": "Background"})
                except HTTPFailure as err:
                    if err.status != 404:
                        raise
