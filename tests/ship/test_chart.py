"""The chart itself: metadata, lint, values schema, values comments, rendered wiring."""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

import helm_python
import pytest
import yaml

from scheduler.cli import build_parser

from ._support import (
    CHART_DIR,
    NAMESPACE,
    VALUE_SETS,
    find,
    notes,
    objects,
    pod_specs,
    pyproject,
    render,
)


def test_chart_metadata_matches_package() -> None:
    meta = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    assert meta["apiVersion"] == "v2"
    assert meta["name"] == "topo-scheduler"
    assert meta["appVersion"] == pyproject()["project"]["version"]


def test_default_image_tag_is_the_app_version(default_objects: list[dict]) -> None:
    version = pyproject()["project"]["version"]
    images = {c["image"] for _, spec in pod_specs(default_objects) for c in spec["containers"]}
    assert images == {f"topo-scheduler:{version}"}


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_lint_is_clean(name: str) -> None:
    report = helm_python.lint(
        str(CHART_DIR), VALUE_SETS[name] or None, strict=True, namespace=NAMESPACE
    )
    # Severity 1 is informational (Helm suggests an icon); warnings (2) and errors (3) fail.
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not problems and not report["errors"], problems or report["errors"]


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"scheduler": {"replicas": "two"}}, "/scheduler/replicas"),
        (
            {"scheduler": {"config": {"scoreWeights": {"GPUTopology": "high"}}}},
            "/scheduler/config/scoreWeights/GPUTopology",
        ),
        (
            {"scheduler": {"config": {"scoreWeights": {"GPUTopology": 0}}}},
            "/scheduler/config/scoreWeights/GPUTopology",
        ),
        (
            {"scheduler": {"config": {"scoreWeights": {"GPUTopology": 101}}}},
            "/scheduler/config/scoreWeights/GPUTopology",
        ),
        (
            {"scheduler": {"config": {"pluginConfig": [{"name": "NodeResourcesFit"}]}}},
            "/scheduler/config/pluginConfig/0",
        ),
        (
            {"scheduler": {"leaderElection": {"enabled": "yes"}}},
            "/scheduler/leaderElection/enabled",
        ),
        # `--set agent.nodeSelector.nvidia\.com/gpu\.present=true` gives a boolean.
        (
            {"agent": {"nodeSelector": {"nvidia.com/gpu.present": True}}},
            "/agent/nodeSelector/nvidia.com~1gpu.present",
        ),
        ({"agent": {"enabeld": False}}, "/agent"),
        ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
        ({"scheduler": {"schedulerName": "Topo Scheduler"}}, "/scheduler/schedulerName"),
    ],
)
def test_schema_rejects_wrong_values_naming_the_key(values: dict[str, Any], where: str) -> None:
    with pytest.raises(helm_python.HelmValuesError) as err:
        render(values)
    assert f"at '{where}'" in str(err.value)


def test_schema_accepts_every_value_set() -> None:
    with helm_python.Chart.load(str(CHART_DIR)) as chart:
        for values in VALUE_SETS.values():
            chart.validate_schema(chart.merge_values(values))


def test_two_replicas_without_leader_election_is_refused() -> None:
    with pytest.raises(helm_python.HelmRenderError, match=r"leaderElection\.enabled must be true"):
        render({"scheduler": {"replicas": 2, "leaderElection": {"enabled": False}}})


def _commented(lines: list[str], line_no: int) -> bool:
    if " #" in lines[line_no]:
        return True
    i = line_no - 1
    while i >= 0 and not lines[i].strip():
        i -= 1
    return i >= 0 and lines[i].lstrip().startswith("#")


def _declared_keys(
    node: yaml.Node, schema: dict[str, Any], root: dict[str, Any], path: str
) -> list[tuple[str, int]]:
    """(path, line) of every values.yaml key the schema declares by name."""
    while "$ref" in schema:
        schema = root["definitions"][schema["$ref"].rsplit("/", 1)[1]]
    out: list[tuple[str, int]] = []
    if not isinstance(node, yaml.MappingNode):
        return out
    props = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    for key_node, value_node in node.value:
        key = key_node.value
        if key in props:
            out.append((f"{path}.{key}".lstrip("."), key_node.start_mark.line))
            out.extend(_declared_keys(value_node, props[key], root, f"{path}.{key}"))
        elif isinstance(extra, dict) and extra.get("type") == "integer":
            # A named weight (scheduler.config.scoreWeights.<plugin>): documented too.
            out.append((f"{path}.{key}".lstrip("."), key_node.start_mark.line))
    return out


def test_every_values_key_is_commented() -> None:
    text = (CHART_DIR / "values.yaml").read_text()
    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    keys = _declared_keys(yaml.compose(text), schema, schema, "")
    lines = text.splitlines()
    assert len(keys) > 60  # the walk reached the nested keys
    uncommented = [path for path, line in keys if not _commented(lines, line)]
    assert not uncommented


def test_every_values_key_is_declared_in_the_schema() -> None:
    """additionalProperties: false everywhere values.yaml has a fixed shape, so a typo fails."""
    with helm_python.Chart.load(str(CHART_DIR)) as chart:
        chart.validate_schema(chart.values)
        with pytest.raises(helm_python.HelmValuesError, match="replica"):
            chart.validate_schema({"scheduler": {"replica": 1}})


def _container(objs: list[dict], kind: str) -> dict:
    workload = find(objs, kind)
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    return container


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_container_args_parse_with_the_cli(name: str) -> None:
    objs = objects(VALUE_SETS[name])
    parser = build_parser()
    scheduler = _container(objs, "Deployment")
    args = parser.parse_args(scheduler["args"])
    assert args.command == "run"
    ns, cm_name = args.config_map.split("/")
    configmap = find(objs, "ConfigMap")
    assert (ns, cm_name) == (NAMESPACE, configmap["metadata"]["name"])
    assert "config.yaml" in configmap["data"]
    host, port = args.bind_address.rsplit(":", 1)
    assert host == "0.0.0.0"
    ports = {p["name"]: p["containerPort"] for p in scheduler["ports"]}
    assert ports == {"metrics": int(port)}
    deployment = find(objs, "Deployment")
    if deployment["spec"]["replicas"] > 1:
        assert args.leader_elect
    if args.leader_elect:
        assert args.leader_elect_namespace == NAMESPACE
    if VALUE_SETS[name].get("agent", {}).get("enabled", True):
        agent = _container(objs, "DaemonSet")
        agent_args = parser.parse_args(agent["args"])
        assert agent_args.command == "agent"
        assert agent_args.node_name == "$(NODE_NAME)"


def test_probes_hit_health_endpoints_on_the_metrics_port(default_objects: list[dict]) -> None:
    """The port serves HTTPS (the kubelet does not verify the self-signed certificate)."""
    container = _container(default_objects, "Deployment")
    assert container["livenessProbe"]["httpGet"] == {
        "path": "/healthz",
        "port": "metrics",
        "scheme": "HTTPS",
    }
    assert container["readinessProbe"]["httpGet"] == {
        "path": "/readyz",
        "port": "metrics",
        "scheme": "HTTPS",
    }
    assert container["ports"] == [{"name": "metrics", "containerPort": 10259, "protocol": "TCP"}]
    (port,) = find(default_objects, "Service")["spec"]["ports"]
    assert port["appProtocol"] == "https"
    args = build_parser().parse_args(container["args"])
    assert not args.insecure_plain_http
    assert args.tls_cert_file is None and args.tls_private_key_file is None  # self-signed


def test_certificate_from_a_tls_secret() -> None:
    objs = objects({"scheduler": {"tls": {"secretName": "scheduler-tls"}}})
    deployment = find(objs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = build_parser().parse_args(container["args"])
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "scheduler-tls"
    assert mounts["tls"]["readOnly"] is True
    directory = mounts["tls"]["mountPath"]
    assert args.tls_cert_file == f"{directory}/tls.crt"
    assert args.tls_private_key_file == f"{directory}/tls.key"


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_selectors_pick_exactly_their_pods(name: str) -> None:
    objs = objects(VALUE_SETS[name])
    deployment = find(objs, "Deployment")
    sched_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert _selects(deployment["spec"]["selector"]["matchLabels"], sched_labels)
    daemonsets = [o for o in objs if o["kind"] == "DaemonSet"]
    agent_labels = [d["spec"]["template"]["metadata"]["labels"] for d in daemonsets]
    selectors = [deployment["spec"]["selector"]["matchLabels"]]
    for o in objs:
        if o["kind"] == "Service":
            selectors.append(o["spec"]["selector"])
            assert o["spec"]["ports"][0]["targetPort"] == "metrics"
        if o["kind"] == "PodDisruptionBudget":
            selectors.append(o["spec"]["selector"]["matchLabels"])
    for c in deployment["spec"]["template"]["spec"].get("topologySpreadConstraints", []):
        selectors.append(c["labelSelector"]["matchLabels"])
    for selector in selectors:
        assert _selects(selector, sched_labels)
        assert not any(_selects(selector, labels) for labels in agent_labels)


def test_replicas_spread_and_disruption_budget(default_objects: list[dict]) -> None:
    deployment = find(default_objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    spec = deployment["spec"]["template"]["spec"]
    assert spec["priorityClassName"] == "system-cluster-critical"
    (spread,) = spec["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["maxSkew"] == 1
    pdb = find(default_objects, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1


def test_no_config_checksum_restarts_the_scheduler_on_a_weight_change() -> None:
    """The ConfigMap is applied live; a change of weight must not roll the Deployment."""
    before = find(objects(), "Deployment")
    after = find(
        objects({"scheduler": {"config": {"scoreWeights": {"GPUTopology": 9}}}}), "Deployment"
    )
    assert before == after


def test_agent_daemonset_targets_gpu_nodes(default_objects: list[dict]) -> None:
    spec = find(default_objects, "DaemonSet")["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]
    (container,) = spec["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "utility"
    args = build_parser().parse_args(container["args"])
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert args.pod_resources_socket.startswith(mounts["pod-resources"]["mountPath"] + "/")
    assert mounts["pod-resources"]["readOnly"] is True


def test_agent_without_pod_resources_mounts_nothing_from_the_host() -> None:
    objs = objects({"agent": {"podResources": {"enabled": False}}})
    spec = find(objs, "DaemonSet")["spec"]["template"]["spec"]
    assert not any("hostPath" in v for v in spec.get("volumes", []))
    (container,) = spec["containers"]
    assert build_parser().parse_args(container["args"]).pod_resources_socket == ""
    assert not [m for m in container["volumeMounts"] if m["mountPath"].startswith("/var/lib")]


def test_disabled_parts_render_nothing() -> None:
    kinds = {o["kind"] for o in objects(VALUE_SETS["minimal"])}
    assert "DaemonSet" not in kinds
    assert "Service" not in kinds
    assert "PodDisruptionBudget" not in kinds
    assert "ServiceMonitor" not in kinds
    names = [o["metadata"]["name"] for o in objects(VALUE_SETS["minimal"])]
    assert not [n for n in names if n.endswith("-agent")]


def test_common_labels_and_annotations_reach_every_object() -> None:
    values = VALUE_SETS["customised"]
    for obj in objects(values):
        meta = obj["metadata"]
        assert meta["labels"]["team"] == "ml-platform", obj["kind"]
        assert meta.get("annotations", {}).get("owner") == "ml-platform@example.com", obj["kind"]
        assert meta["name"].startswith("gpu-sched"), meta["name"]


def test_service_monitor_scrapes_the_metrics_service() -> None:
    """A CRD (monitoring.coreos.com/v1) has no schema in kubernetes-validate: checked here."""
    objs = objects({"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "kps"}}}})
    monitor = find(objs, "ServiceMonitor")
    service = find(objs, "Service")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(monitor) == {"apiVersion", "kind", "metadata", "spec"}
    assert monitor["metadata"]["namespace"] == NAMESPACE
    assert monitor["metadata"]["labels"]["release"] == "kps"
    spec = monitor["spec"]
    assert set(spec) == {"selector", "namespaceSelector", "endpoints"}
    assert _selects(spec["selector"]["matchLabels"], service["metadata"]["labels"])
    assert spec["namespaceSelector"] == {"matchNames": [service["metadata"]["namespace"]]}
    (endpoint,) = spec["endpoints"]
    assert set(endpoint) <= {
        "port",
        "path",
        "scheme",
        "interval",
        "scrapeTimeout",
        "bearerTokenFile",
        "tlsConfig",
    }
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    # HTTPS with Prometheus' service account token, which the scheduler reviews
    assert endpoint["scheme"] == "https"
    assert endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    assert endpoint["tlsConfig"] == {"insecureSkipVerify": True}
    pinned = {"ca": {"secret": {"name": "ca", "key": "ca.crt"}}, "serverName": "sched"}
    objs = objects({"metrics": {"serviceMonitor": {"enabled": True, "tlsConfig": pinned}}})
    assert find(objs, "ServiceMonitor")["spec"]["endpoints"][0]["tlsConfig"] == pinned
    assert re.fullmatch(r"\d+(ms|s|m|h)", endpoint["interval"])
    with pytest.raises(helm_python.HelmRenderError, match=r"metrics\.service\.enabled"):
        render({"metrics": {"service": {"enabled": False}, "serviceMonitor": {"enabled": True}}})


def _set_flags(text: str) -> list[str]:
    """Every `--set a.b=c` expression in a text of shell commands."""
    found: list[str] = []
    for line in text.splitlines():
        if "--set" not in line:
            continue
        words = shlex.split(line.strip().rstrip("\\"))
        found.extend(words[i + 1] for i, w in enumerate(words) if w == "--set")
    return found


def test_notes_tell_how_to_opt_in_watch_and_tune(default_objects: list[dict]) -> None:
    text = notes()
    assert "schedulerName: topo-scheduler" in text
    assert "reason=Scheduled" in text
    configmap = find(default_objects, "ConfigMap")["metadata"]["name"]
    assert f"edit configmap {configmap}" in text
    deployment = find(default_objects, "Deployment")["metadata"]["name"]
    assert f"deploy/{deployment}" in text
    # The --set shown in the notes is accepted and changes the rendered configuration.
    (expression,) = _set_flags(text)
    changed = render(helm_python.parse_set_string(expression))
    assert changed != render()
    assert "schedulerName: gpu-topology" in notes({"scheduler": {"schedulerName": "gpu-topology"}})


def test_packaged_chart_renders_the_same(tmp_path) -> None:
    archive = helm_python.package(str(CHART_DIR), destination=str(tmp_path))
    version = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())["version"]
    assert archive.endswith(f"topo-scheduler-{version}.tgz")
    with helm_python.Chart.load(archive) as packaged:
        assert packaged.schema is not None
        rendered = packaged.render(name="topo-scheduler", namespace=NAMESPACE, is_install=True)
    assert rendered == render()
