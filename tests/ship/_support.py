"""Helpers for the shipping tests: render the chart with Helm's engine
(helm-python-sdk), parse what it renders, and validate objects with kubernetes-validate."""

from __future__ import annotations

import functools
import importlib.util
import json
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = ROOT / "helm" / "topo-scheduler"
MANIFESTS_DIR = ROOT / "manifests"
EXAMPLES_DIR = ROOT / "examples" / "pods"
RELEASE = "topo-scheduler"
NAMESPACE = "topo-scheduler"
# Kubernetes minor versions every object must validate against (1.30: the agent's
# ValidatingAdmissionPolicy is admissionregistration.k8s.io/v1, and the node name it checks
# is in pod-bound service account tokens from 1.30 on).
KUBE_VERSIONS = [f"1.{minor}" for minor in range(30, 35)]


def pyproject() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


def render_script() -> ModuleType:
    """hack/render-manifests.py as a module (its file name has a dash)."""
    name = "render_manifests"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "hack" / "render-manifests.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@functools.cache
def _chart() -> Any:
    import helm_python

    return helm_python.Chart.load(str(CHART_DIR))


@functools.cache
def _render_cached(values_json: str, namespace: str) -> dict[str, str]:
    values = json.loads(values_json)
    return dict(_chart().render(values or None, name=RELEASE, namespace=namespace, is_install=True))


def render(values: dict[str, Any] | None = None, namespace: str = NAMESPACE) -> dict[str, str]:
    """Template path -> rendered text, as `helm template` would produce it."""
    return _render_cached(json.dumps(values or {}, sort_keys=True), namespace)


def objects(values: dict[str, Any] | None = None, namespace: str = NAMESPACE) -> list[dict]:
    """Every Kubernetes object the chart renders with these values."""
    out: list[dict] = []
    for path, text in sorted(render(values, namespace).items()):
        if path.endswith("NOTES.txt"):
            continue
        out.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return out


def notes(values: dict[str, Any] | None = None) -> str:
    return next(text for path, text in render(values).items() if path.endswith("NOTES.txt"))


def find(objs: list[dict], kind: str, name_suffix: str = "") -> dict:
    matches = [o for o in objs if o["kind"] == kind and o["metadata"]["name"].endswith(name_suffix)]
    assert len(matches) == 1, f"expected one {kind} *{name_suffix}, found {len(matches)}"
    return matches[0]


def pod_specs(objs: list[dict]) -> Iterator[tuple[str, dict]]:
    """(object name, pod spec) of every workload object."""
    for o in objs:
        if o["kind"] == "Pod":
            yield o["metadata"]["name"], o["spec"]
        elif o["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "Job", "ReplicaSet"):
            yield o["metadata"]["name"], o["spec"]["template"]["spec"]
        elif o["kind"] == "CronJob":
            yield o["metadata"]["name"], o["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def load_yaml_docs(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


@functools.cache
def _validator() -> ModuleType:
    import kubernetes_validate.utils as kv

    # The schema files are read on every call; read each once for the whole run.
    kv.schema_contents = functools.cache(kv.schema_contents)
    return kv


def validation_errors(obj: dict, version: str) -> list[str]:
    """kubernetes-validate in strict mode; an unknown kind or a missing schema is an error
    here (the tool itself only warns about them)."""
    kv = _validator()
    where = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')} on {version}"
    try:
        kv.validate(obj, version, strict=True)
    except kv.ValidationError as e:
        path = ".".join(str(p) for p in e.path)
        return [f"{where}: {path}: {e.message}"]
    except kv.SchemaNotFoundError as e:
        return [f"{where}: no schema: {e.message}"]
    except (kv.InvalidSchemaError, kv.VersionNotSupportedError) as e:
        return [f"{where}: {type(e).__name__}: {getattr(e, 'message', e)}"]
    return []


# Override sets rendered and checked besides the defaults. The ServiceMonitor (a CRD with no
# schema in kubernetes-validate) is off in all of them; test_chart.py checks it on its own.
VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "minimal": {
        "scheduler": {
            "replicas": 1,
            "leaderElection": {"enabled": False},
            "topologySpread": {"enabled": False},
            "podDisruptionBudget": {"enabled": False},
            "priorityClassName": "",
        },
        "metrics": {"service": {"enabled": False}},
        "agent": {"enabled": False},
    },
    "customised": {
        "fullnameOverride": "gpu-sched",
        "commonLabels": {"team": "ml-platform"},
        "commonAnnotations": {"owner": "ml-platform@example.com"},
        "image": {
            "repository": "registry.example.com/ml/topo-scheduler",
            "digest": "sha256:" + "ab" * 32,
            "pullPolicy": "Always",
        },
        "imagePullSecrets": [{"name": "regcred"}],
        "scheduler": {
            "replicas": 3,
            "schedulerName": "gpu-topology",
            "leaderElection": {"enabled": True, "leaseName": "gpu-sched-leader"},
            "port": 9443,
            "extraArgs": ["--kube-api-qps=80"],
            "config": {
                "percentageOfNodesToScore": 50,
                "scoreWeights": {"GPUTopology": 20, "ImageLocality": 2},
                "filterDisabled": ["NodePorts"],
                "scoreDisabled": ["NodeResourcesBalancedAllocation"],
                "pluginConfig": [
                    {
                        "name": "NodeResourcesFit",
                        "args": {
                            "scoringStrategy": {
                                "type": "MostAllocated",
                                "resources": [
                                    {"name": "cpu", "weight": 1},
                                    {"name": "nvidia.com/gpu", "weight": 5},
                                ],
                            }
                        },
                    }
                ],
            },
            "serviceAccount": {"annotations": {"example.com/role": "scheduler"}},
            "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
            "tolerations": [
                {
                    "key": "node-role.kubernetes.io/control-plane",
                    "operator": "Exists",
                    "effect": "NoSchedule",
                }
            ],
            "affinity": {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 1,
                            "preference": {
                                "matchExpressions": [
                                    {
                                        "key": "kubernetes.io/arch",
                                        "operator": "In",
                                        "values": ["amd64"],
                                    }
                                ]
                            },
                        }
                    ]
                }
            },
            "topologySpread": {
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule",
            },
            "podDisruptionBudget": {"maxUnavailable": "50%"},
            "podLabels": {"tier": "control"},
            "podAnnotations": {"example.com/scrape": "true"},
        },
        "metrics": {"service": {"port": 8080, "annotations": {"example.com/svc": "metrics"}}},
        "agent": {
            "interval": 30,
            "runtimeClassName": "nvidia",
            "priorityClassName": "system-node-critical",
            "podResources": {"enabled": False},
            "serviceAccount": {"create": False, "name": "existing-agent"},
            "nodeSelector": {"example.com/gpu": "true"},
            "tolerations": [
                {
                    "key": "example.com/dedicated",
                    "operator": "Equal",
                    "value": "gpu",
                    "effect": "NoExecute",
                }
            ],
            "maxUnavailable": "10%",
            "podLabels": {"tier": "node"},
        },
    },
}
