"""Pod security: every container runs without privilege on a read-only root filesystem."""

from __future__ import annotations

import pytest

from ._support import VALUE_SETS, find, objects, pod_specs


def _effective(pod: dict, container: dict, key: str):
    return container.get("securityContext", {}).get(key, pod.get("securityContext", {}).get(key))


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_container_is_locked_down(name: str) -> None:
    objs = objects(VALUE_SETS[name])
    seen = 0
    for _, spec in pod_specs(objs):
        assert not spec.get("hostPID") and not spec.get("hostNetwork") and not spec.get("hostIPC")
        for c in spec.get("initContainers", []) + spec["containers"]:
            seen += 1
            ctx = c["securityContext"]
            assert ctx["readOnlyRootFilesystem"] is True
            assert ctx["allowPrivilegeEscalation"] is False
            assert ctx.get("privileged", False) is False
            assert ctx["capabilities"] == {"drop": ["ALL"]}
            assert ctx["seccompProfile"] == {"type": "RuntimeDefault"}
            assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert seen >= 1


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_scheduler_runs_as_non_root(name: str) -> None:
    spec = find(objects(VALUE_SETS[name]), "Deployment")["spec"]["template"]["spec"]
    for c in spec["containers"]:
        assert _effective(spec, c, "runAsNonRoot") is True
        assert _effective(spec, c, "runAsUser") == 65532


def test_agent_runs_as_non_root_without_the_kubelet_socket() -> None:
    objs = objects({"agent": {"podResources": {"enabled": False}}})
    spec = find(objs, "DaemonSet")["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert _effective(spec, c, "runAsNonRoot") is True
    assert _effective(spec, c, "runAsUser") == 65532


def test_agent_reading_the_kubelet_socket_is_root_without_capabilities(
    default_objects: list[dict],
) -> None:
    """The kubelet's pod-resources socket is writable by root only, so connecting to it needs
    UID 0; the container still holds no capability, cannot escalate and mounts only that
    directory of the host, read-only."""
    spec = find(default_objects, "DaemonSet")["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert _effective(spec, c, "runAsUser") == 0
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    host_volumes = {v["name"]: v["hostPath"] for v in spec["volumes"] if "hostPath" in v}
    assert host_volumes == {
        "pod-resources": {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"}
    }
    for m in c["volumeMounts"]:
        if m["name"] in host_volumes:
            assert m["readOnly"] is True


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_only_tmp_is_writable(name: str) -> None:
    for _, spec in pod_specs(objects(VALUE_SETS[name])):
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for c in spec["containers"]:
            writable = [m for m in c.get("volumeMounts", []) if not m.get("readOnly")]
            assert [m["mountPath"] for m in writable] == ["/tmp"]
            assert "emptyDir" in volumes[writable[0]["name"]]
