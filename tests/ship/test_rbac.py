"""Least privilege: exactly the rules the scheduler and the agent use, no wildcard."""

from __future__ import annotations

from collections import defaultdict

import pytest

from ._support import NAMESPACE, VALUE_SETS, find, objects

Perm = tuple[str, str, str, str]  # (apiGroup, resource, verb, resourceName or "")
# a non-resource URL is written ("nonResourceURL", path, verb, "")


def _expand(rules: list[dict]) -> set[Perm]:
    perms: set[Perm] = set()
    for rule in rules:
        if "nonResourceURLs" in rule:
            assert set(rule) == {"nonResourceURLs", "verbs"}, rule
            perms |= {
                ("nonResourceURL", u, v, "") for u in rule["nonResourceURLs"] for v in rule["verbs"]
            }
            continue
        assert set(rule) <= {"apiGroups", "resources", "verbs", "resourceNames"}, rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    for name in rule.get("resourceNames") or [""]:
                        perms.add((group, resource, verb, name))
    return perms


def _permissions_by_subject(objs: list[dict]) -> dict[tuple[str, str], set[Perm]]:
    """(namespace, service account) -> every permission its bindings grant."""
    roles = {
        (o["kind"], o["metadata"]["name"]): o for o in objs if o["kind"] in ("Role", "ClusterRole")
    }
    granted: dict[tuple[str, str], set[Perm]] = defaultdict(set)
    for b in objs:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        ref = b["roleRef"]
        assert ref["apiGroup"] == "rbac.authorization.k8s.io"
        if b["kind"] == "ClusterRoleBinding":
            assert ref["kind"] == "ClusterRole"
        role = roles[(ref["kind"], ref["name"])]  # a binding to a role we do not ship fails
        if role["kind"] == "Role":
            assert role["metadata"]["namespace"] == b["metadata"]["namespace"]
        for s in b["subjects"]:
            assert s["kind"] == "ServiceAccount"
            granted[(s["namespace"], s["name"])] |= _expand(role["rules"])
    return granted


def _service_account(objs: list[dict], kind: str) -> tuple[str, str]:
    workload = find(objs, kind)
    return workload["metadata"]["namespace"], workload["spec"]["template"]["spec"][
        "serviceAccountName"
    ]


# The storage kinds: list and watch them all (informers), update only claims and volumes
# (VolumeBinding's PreBind PUTs); nothing else (no single-object get).
STORAGE_PERMISSIONS = {
    *(
        (g, r, v, "")
        for g, r in (("", "persistentvolumeclaims"), ("", "persistentvolumes"))
        for v in ("list", "watch", "update")
    ),
    *(
        ("storage.k8s.io", r, v, "")
        for r in (
            "storageclasses",
            "csinodes",
            "csidrivers",
            "csistoragecapacities",
            "volumeattachments",
        )
        for v in ("list", "watch")
    ),
}

# DRA (resource.k8s.io/v1): classes, claims and slices listed and watched (no templates); a claim read again after a
# conflict, its finalizer added (update), its status written (update of the subresource, and
# of resourceclaims/binding, which 1.36+ checks for allocation and reservedFor)
DRA_PERMISSIONS = {
    *(
        ("resource.k8s.io", r, v, "")
        for r in ("deviceclasses", "resourceclaims", "resourceslices")
        for v in ("list", "watch")
    ),
    ("resource.k8s.io", "resourceclaims", "get", ""),
    ("resource.k8s.io", "resourceclaims", "update", ""),
    ("resource.k8s.io", "resourceclaims/status", "update", ""),
    ("resource.k8s.io", "resourceclaims/binding", "update", ""),  # 1.36+: allocation, reservedFor
}


def _scheduler_expected(configmap: str, lease: str | None) -> set[Perm]:
    perms = {
        ("", "pods", "list", ""),
        ("", "pods", "watch", ""),
        ("", "pods", "delete", ""),  # preemption deletes its victims
        ("policy", "poddisruptionbudgets", "list", ""),  # preemption weighs PDB violations
        ("policy", "poddisruptionbudgets", "watch", ""),
        ("", "pods/binding", "create", ""),
        ("", "pods/status", "patch", ""),
        ("", "nodes", "list", ""),
        ("", "nodes", "watch", ""),
        ("", "namespaces", "list", ""),
        ("", "namespaces", "watch", ""),
        ("", "services", "list", ""),
        ("", "services", "watch", ""),
        ("", "replicationcontrollers", "list", ""),
        ("", "replicationcontrollers", "watch", ""),
        ("apps", "replicasets", "list", ""),
        ("apps", "replicasets", "watch", ""),
        ("apps", "statefulsets", "list", ""),
        ("apps", "statefulsets", "watch", ""),
        ("", "events", "create", ""),
        ("events.k8s.io", "events", "create", ""),
        # /metrics on the secure port: the caller's token is reviewed, then its access
        ("authentication.k8s.io", "tokenreviews", "create", ""),
        ("authorization.k8s.io", "subjectaccessreviews", "create", ""),
        *(
            (group, resource, verb, "")
            for group in ("scheduling.x-k8s.io", "scheduling.k8s.io")
            for resource, verb in (
                ("podgroups", "list"),
                ("podgroups", "watch"),
                ("podgroups/status", "patch"),
            )
        ),
        *STORAGE_PERMISSIONS,
        *DRA_PERMISSIONS,
        # ElasticQuotas: read, and their status.used written
        ("scheduling.x-k8s.io", "elasticquotas", "list", ""),
        ("scheduling.x-k8s.io", "elasticquotas", "watch", ""),
        ("scheduling.x-k8s.io", "elasticquotas/status", "patch", ""),
        ("", "configmaps", "get", configmap),
        ("", "configmaps", "list", configmap),
        ("", "configmaps", "watch", configmap),
    }
    if lease:
        perms |= {
            ("coordination.k8s.io", "leases", "create", ""),
            ("coordination.k8s.io", "leases", "get", lease),
            ("coordination.k8s.io", "leases", "update", lease),
        }
    return perms


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_no_wildcards(name: str) -> None:
    for o in objects(VALUE_SETS[name]):
        for rule in o.get("rules", []):
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert not any("*" in v for v in rule.get(field, [])), (o["kind"], rule)


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_scheduler_has_exactly_what_it_uses(name: str) -> None:
    objs = objects(VALUE_SETS[name])
    granted = _permissions_by_subject(objs)
    container = find(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    args = dict(a.removeprefix("--").split("=", 1) for a in container["args"] if "=" in a)
    configmap_ns, configmap = args["config-map"].split("/")
    assert configmap_ns == NAMESPACE
    lease = args.get("leader-elect-name") if "--leader-elect" in container["args"] else None
    assert granted[_service_account(objs, "Deployment")] == _scheduler_expected(configmap, lease)
    # The namespaced part (ConfigMap, Lease) is a Role in the release namespace, not cluster-wide.
    for role in (o for o in objs if o["kind"] == "ClusterRole"):
        assert not {r for r in role["rules"] if {"configmaps", "leases"} & set(r.get("resources", []))}


NODE_RIGHTS = {("", "nodes", "get", ""), ("", "nodes", "patch", "")}


def test_agent_reads_and_annotates_nodes_and_lists_pods(default_objects: list[dict]) -> None:
    """With the kubelet socket read (the default) it maps pods to UIDs: pods list, nothing else."""
    granted = _permissions_by_subject(default_objects)
    agent = _service_account(default_objects, "DaemonSet")
    assert granted[agent] == NODE_RIGHTS | {("", "pods", "list", "")}


def test_agent_without_the_kubelet_socket_has_no_right_on_pods() -> None:
    objs = objects({"agent": {"podResources": {"enabled": False}}})
    assert _permissions_by_subject(objs)[_service_account(objs, "DaemonSet")] == NODE_RIGHTS


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_agent_cannot_touch_pods_or_secrets(name: str) -> None:
    objs = objects(VALUE_SETS[name])
    if not any(o["kind"] == "DaemonSet" for o in objs):
        return
    perms = _permissions_by_subject(objs)[_service_account(objs, "DaemonSet")]
    assert perms - NODE_RIGHTS <= {("", "pods", "list", "")}
    resources = {resource for _, resource, _, _ in perms}
    assert not {r for r in resources if r.startswith("pods/")}
    assert "secrets" not in resources
    # No other pod runs with the agent's service account.
    spec = find(objs, "DaemonSet")["spec"]["template"]["spec"]
    scheduler = find(objs, "Deployment")["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] != scheduler["serviceAccountName"]


def test_service_accounts_exist_where_the_chart_creates_them(default_objects: list[dict]) -> None:
    accounts = {
        (o["metadata"]["namespace"], o["metadata"]["name"])
        for o in default_objects
        if o["kind"] == "ServiceAccount"
    }
    assert set(_permissions_by_subject(default_objects)) == accounts
    assert _service_account(default_objects, "Deployment") in accounts
    assert _service_account(default_objects, "DaemonSet") in accounts


def test_existing_service_account_is_bound_not_created() -> None:
    objs = objects(VALUE_SETS["customised"])
    assert _service_account(objs, "DaemonSet") == (NAMESPACE, "existing-agent")
    assert (NAMESPACE, "existing-agent") in _permissions_by_subject(objs)
    assert not [
        o
        for o in objs
        if o["kind"] == "ServiceAccount" and o["metadata"]["name"] == "existing-agent"
    ]


def test_metrics_reader_role_is_get_on_metrics_and_bound_only_to_whom_the_values_name() -> None:
    objs = objects()
    reader = find(objs, "ClusterRole", "-metrics-reader")
    assert _expand(reader["rules"]) == {("nonResourceURL", "/metrics", "get", "")}
    assert not [
        o
        for o in objs
        if o["kind"] == "ClusterRoleBinding" and o["roleRef"]["name"] == reader["metadata"]["name"]
    ]
    prometheus = {"name": "prometheus-k8s", "namespace": "monitoring"}
    objs = objects({"metrics": {"reader": {"serviceAccounts": [prometheus]}}})
    granted = _permissions_by_subject(objs)
    assert granted[("monitoring", "prometheus-k8s")] == {("nonResourceURL", "/metrics", "get", "")}
