"""A small synchronous admin client for the real plane's tests (bearer token, the plane's CA)."""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from tests.realkube.plane import Plane

Obj = dict[str, Any]


class HTTPFailure(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"{status}: {body[:300]}")
        self.status = status
        self.body = body


class Api:
    def __init__(self, plane: Plane, token_name: str = "ADMIN", token: str | None = None) -> None:
        """The plane's `token_name` token (ADMIN, SCHEDULER, RESTRICTED), or `token`."""
        env = {}
        for line in (plane.state_dir / "env.sh").read_text().splitlines():
            key, _, value = line.removeprefix("export ").partition("=")
            env[key] = value.strip("'\"")
        self.base = plane.url
        self.token = token or env[f"REALKUBE_{token_name}_TOKEN"]
        self.ssl = ssl.create_default_context(cafile=env["REALKUBE_CA"])

    def call(
        self,
        method: str,
        path: str,
        body: Obj | None = None,
        content_type: str = "application/json",
        query: dict[str, str] | None = None,
    ) -> Obj:
        url = self.base + path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self.ssl, timeout=30) as resp:
                text = resp.read().decode()
        except urllib.error.HTTPError as err:
            raise HTTPFailure(err.code, err.read().decode(errors="replace")) from None
        return json.loads(text) if text else {}

    def get(self, path: str, **query: str) -> Obj:
        return self.call("GET", path, query=query or None)

    def post(self, path: str, body: Obj) -> Obj:
        return self.call("POST", path, body)

    def put(self, path: str, body: Obj) -> Obj:
        return self.call("PUT", path, body)

    def merge_patch(self, path: str, body: Obj) -> Obj:
        return self.call("PATCH", path, body, "application/merge-patch+json")

    def delete(self, path: str) -> Obj:
        return self.call("DELETE", path, {"gracePeriodSeconds": 0})

    def apply(self, obj: Obj) -> Obj:
        """Create, or replace when it exists (kubectl apply's effect, simply)."""
        path = collection_path(obj)
        try:
            return self.post(path, obj)
        except HTTPFailure as err:
            if err.status != 409:
                raise
        current = self.get(f"{path}/{obj['metadata']['name']}")
        obj = {
            **obj,
            "metadata": {
                **obj["metadata"],
                "resourceVersion": current["metadata"]["resourceVersion"],
            },
        }
        return self.put(f"{path}/{obj['metadata']['name']}", obj)


_PLURALS = {
    "Namespace": "namespaces",
    "Node": "nodes",
    "Pod": "pods",
    "ConfigMap": "configmaps",
    "ServiceAccount": "serviceaccounts",
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "Lease": "leases",
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
    "PodGroup": "podgroups",
    "Workload": "workloads",
}


def collection_path(obj: Obj) -> str:
    api_version = obj["apiVersion"]
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    ns = obj["metadata"].get("namespace")
    plural = _PLURALS[obj["kind"]]
    return f"{prefix}/namespaces/{ns}/{plural}" if ns else f"{prefix}/{plural}"


def wait_for(check: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    """Poll `check` until it returns something truthy; its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)
