"""The chart installs the device plugin only when asked, with the mounts and rights it needs."""

from __future__ import annotations

import pytest

from tests.ship._support import find, objects, validation_errors

ON = {"devicePlugin": {"enabled": True}}


def _containers(values: dict[str, object] | None) -> dict[str, dict]:
    ds = find(objects(values), "DaemonSet", "-agent")
    return {c["name"]: c for c in ds["spec"]["template"]["spec"]["containers"]}


def test_off_by_default() -> None:
    assert list(_containers(None)) == ["agent"]
    role = find(objects(None), "ClusterRole", "-agent")
    assert not any("events" in r["resources"] for r in role["rules"])


def test_enabled_adds_the_plugin_container() -> None:
    containers = _containers(ON)
    plugin = containers["device-plugin"]
    assert plugin["args"][:2] == ["device-plugin", "--node-name=$(NODE_NAME)"]
    assert "--resource-name=nvidia.com/gpu" in plugin["args"]
    assert "--device-list-strategy=envvar" in plugin["args"]
    mounts = {m["mountPath"]: m.get("readOnly", False) for m in plugin["volumeMounts"]}
    assert mounts == {
        "/tmp": False,
        "/var/lib/kubelet/device-plugins": False,
        "/var/lib/kubelet/pod-resources": True,
    }
    security = plugin["securityContext"]
    assert security["privileged"] is False and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["readOnlyRootFilesystem"] is True
    ds = find(objects(ON), "DaemonSet", "-agent")
    volumes = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
    assert volumes["device-plugins"]["hostPath"]["path"] == "/var/lib/kubelet/device-plugins"
    assert validation_errors(ds, "1.30.0") == []


def test_cdi_strategy_and_fake_gpus_pass_through() -> None:
    values = {
        "devicePlugin": {"enabled": True, "deviceListStrategy": "cdi-cri", "fakeGpus": "dgx-a100"}
    }
    args = _containers(values)["device-plugin"]["args"]
    assert "--device-list-strategy=cdi-cri" in args and "--fake-gpus=dgx-a100" in args


def test_pod_resources_mounted_even_when_the_agent_skips_them() -> None:
    values = {"devicePlugin": {"enabled": True}, "agent": {"podResources": {"enabled": False}}}
    containers = _containers(values)
    assert [m["name"] for m in containers["device-plugin"]["volumeMounts"]].count("pod-resources")
    assert "pod-resources" not in [m["name"] for m in containers["agent"]["volumeMounts"]]


def test_rbac_reads_pods_and_creates_events_only_when_enabled() -> None:
    rules = find(objects(ON), "ClusterRole", "-agent")["rules"]
    verbs = {(r["resources"][0], v) for r in rules for v in r["verbs"]}
    assert {("pods", "list"), ("pods", "watch"), ("events", "create")} <= verbs
    assert not {("pods", "create"), ("pods", "patch"), ("pods", "delete")} & verbs


def test_schema_rejects_an_unknown_strategy() -> None:
    with pytest.raises(Exception, match="deviceListStrategy"):
        objects({"devicePlugin": {"enabled": True, "deviceListStrategy": "volume-mounts"}})
