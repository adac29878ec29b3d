"""Simulation scenarios: node templates times counts, and a trace of jobs (explicit or generated).

A scenario is YAML (documented in docs/simulator.md, example in examples/scenario.yaml). It is
turned into plain Kubernetes objects here -- Nodes with the GPU topology annotation and Pods
with their requests -- so the simulator feeds the scheduler exactly what a cluster would.
Errors name the field (``jobs[1].gpus: weights must be numbers >= 0``).
"""

from __future__ import annotations

import dataclasses
import math
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

from scheduler.core.decode import SHOWN_CHARACTERS, FieldError, Fields, shown
from scheduler.core.model import MAX_AMOUNT
from scheduler.core.quantity import (
    QuantityError,
    is_extended_resource,
    parse_quantity,
    resource_value,
    to_units,
)
from scheduler.core.safeload import InputError, load_yaml, read_input
from scheduler.core.topology.bandwidth import MAX_GBPS, MIN_GBPS
from scheduler.core.topology.builtin import BUILTIN_TOPOLOGIES, builtin_topology
from scheduler.core.topology.schema import (
    ANNOTATION_PLACEMENT,
    ANNOTATION_TOPOLOGY,
    GPU_RESOURCE,
    Placement,
    Topology,
    TopologyError,
    format_topology,
    topology_from_dict,
)
from scheduler.sim import dra as sim_dra
from scheduler.sim.dra import claim_template_name

__all__ = [
    "DEFAULT_COMM",
    "DEFAULT_INTER_NODE_GBPS",
    "EPOCH",
    "GPU_DRIVERS",
    "GPU_REQUESTS",
    "GPU_RESOURCE",
    "JOB_TIME_REFERENCES",
    "MAX_NETWORK_GBPS",
    "SCHEDULER_NAME",
    "Job",
    "NodeTemplate",
    "Queue",
    "Scenario",
    "ScenarioError",
    "as_workers",
    "bundled_scenario_path",
    "check_limits",
    "load_scenario",
    "over_limit",
    "parse_scenario",
    "sim_timestamp",
    "worker_name",
]

SCHEDULER_NAME = "topo-scheduler"
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
"""Simulated time 0, as a wall-clock instant (pods carry creation and start timestamps)."""


def sim_timestamp(seconds: float) -> str:
    """Simulated time `seconds` as the API server writes a time (RFC 3339, UTC)."""
    return (EPOCH + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


_TOP_FIELDS = {
    "name", "description", "seed", "nodes", "jobs", "checkpointInterval", "coreBandwidth",
    "jobTimeReference", "queues", "traceNamespaces", "gpuRequest",
}  # fmt: skip
# Scenario sizes are bounded so a typo cannot make `simulate` run for hours.
_MAX_COUNT = 1_000_000
MAX_NODES = 10_000
MAX_JOBS = 100_000
"""Pods in all: jobs, each worker of a multi-node job counting as one."""
MAX_NODE_JOBS = 20_000_000
"""Nodes times pods: the work of a run grows with both (10,000 nodes and 2,000 jobs take about
40 s per policy on one core, in 200 MB)."""
MAX_SECONDS = 10 * 365 * 86_400
"""Times and durations: at most ten years of simulated seconds."""
MIN_DURATION = 0.001
"""Shortest generated job (s): generated times are kept to the millisecond."""
MAX_SIGMA = 10.0
"""Widest log-normal spread of generated durations (e^10 is a factor of 22,000)."""
_NODE_FIELDS = {
    "name", "count", "resources", "labels", "taints", "gpuTopology", "gpuTaint",
    "interNodeBandwidth", "network", "gpuDriver",
}  # fmt: skip
_JOB_FIELDS = {
    "name", "arrival", "duration", "gpus", "cpu", "memory", "cpuPerGpu", "memoryPerGpu",
    "placement", "priority", "count", "interval", "comm", "workers", "topology", "namespace",
    "gpuRequest",
}  # fmt: skip
_GEN_FIELDS = {
    "generate", "namePrefix", "arrivals", "duration", "gpus", "cpu", "memory", "cpuPerGpu",
    "memoryPerGpu", "placement", "priority", "comm", "workers", "topology", "namespace",
    "gpuRequest",
}  # fmt: skip
DEFAULT_COMM = 0.3
"""Share of a multi-GPU job's best-case time spent in communication, unless it says."""
DEFAULT_INTER_NODE_GBPS = 50.0
"""A node's NIC bandwidth, all its NICs together, GB/s per direction (DGX-1: 4 x 100 Gb/s EDR
InfiniBand), unless the template says; each GPU of the node gets its share (one rail each)."""
MAX_NETWORK_GBPS = float(MAX_GBPS)
"""Ceiling of a network bandwidth figure (GB/s), as for the GPU link figures."""
MIN_NETWORK_GBPS = MIN_GBPS
"""Floor of a network bandwidth figure (GB/s, 1 MB/s), as for the GPU link figures."""
GPU_REQUESTS = ("extended", "dra")
"""How GPU jobs ask for GPUs: the extended resource `nvidia.com/gpu` (a device plugin), or a
ResourceClaim made from a ResourceClaimTemplate (Dynamic Resource Allocation)."""
GPU_DRIVERS = ("device-plugin", "dra")
"""How a GPU node publishes its GPUs: `nvidia.com/gpu` in its allocatable (a device plugin),
or a ResourceSlice of NVIDIA's DRA driver (`gpu.nvidia.com`)."""
JOB_TIME_REFERENCES = ("cluster", "node-type")
"""What a job's run time is measured against (docs/simulator.md): the best placement of its
shape anywhere in the cluster (default), or on the node type(s) it landed on."""


class ScenarioError(FieldError):
    """A scenario that cannot be used; the message starts with the field path."""


@dataclass(frozen=True)
class NodeTemplate:
    name: str
    count: int
    resources: dict[str, str]
    labels: dict[str, str]
    taints: list[dict[str, str]]
    topology: Topology | None
    topology_name: str  # built-in name, "inline", or "" for no GPU topology
    inter_node_gbps: float = DEFAULT_INTER_NODE_GBPS
    # network topology labels by position: (label key, nodes per domain), widest first
    network: tuple[tuple[str, int], ...] = ()
    # GB/s per GPU to peers whose narrowest shared domain is of that level (label key)
    level_gbps: tuple[tuple[str, float], ...] = ()
    dra: bool = False  # GPUs published as a ResourceSlice (gpuDriver: dra), not nvidia.com/gpu


@dataclass(frozen=True)
class Job:
    """One pod of the trace: when it arrives, how long it runs once started, what it asks."""

    name: str
    arrival: float
    duration: float
    gpus: int
    cpu: str
    memory: str
    placement: str | None = None
    priority: int = 0
    comm: float | None = None  # None: DEFAULT_COMM for multi-GPU jobs, 0 for the others
    group: str | None = None  # the multi-node job this pod is a worker of
    workers: int = 1  # the job's workers (the group's minMember)
    topology: tuple[str, str] | None = None  # ("required" | "preferred", node label key)
    namespace: str = "default"
    dra: bool = False  # GPUs asked through a ResourceClaim (gpuRequest: dra)

    @property
    def key(self) -> str:
        """The pod's key (namespace/name)."""
        return f"{self.namespace}/{self.name}"

    @property
    def comm_share(self) -> float:
        """Share of the best-case run time spent in communication."""
        if self.comm is not None:
            return self.comm
        return DEFAULT_COMM if self.gpus > 1 or self.workers > 1 else 0.0

    def pod_object(self, scheduler_name: str = SCHEDULER_NAME) -> dict[str, Any]:
        """The Pod as a user would submit it to the topo-scheduler."""
        requests: dict[str, Any] = {"cpu": self.cpu, "memory": self.memory}
        spec: dict[str, Any] = {
            "schedulerName": scheduler_name,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.local/train:v1" if self.gpus else "registry.local/etl:v1",
                    "resources": {"requests": requests},
                }
            ],
        }
        if self.gpus and self.dra:  # a claim from the template of its GPU count
            spec["resourceClaims"] = [
                {"name": sim_dra.CLAIM, "resourceClaimTemplateName": claim_template_name(self.gpus)}
            ]
            spec["containers"][0]["resources"]["claims"] = [{"name": sim_dra.CLAIM}]
            spec["tolerations"] = [{"key": GPU_RESOURCE, "operator": "Exists"}]
        elif self.gpus:
            requests[GPU_RESOURCE] = str(self.gpus)
            spec["containers"][0]["resources"]["limits"] = {GPU_RESOURCE: str(self.gpus)}
            spec["tolerations"] = [{"key": GPU_RESOURCE, "operator": "Exists"}]
        if self.priority:
            spec["priority"] = self.priority
        annotations = {ANNOTATION_PLACEMENT: self.placement} if self.placement else {}
        if self.group is not None:  # a worker of a multi-node job: an annotation pod group
            annotations["topo-scheduler.io/pod-group"] = self.group
            annotations["topo-scheduler.io/min-member"] = str(self.workers)
            if self.topology is not None:
                mode, key = self.topology
                annotations[f"topo-scheduler.io/topology-{mode}"] = key
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "uid": f"uid-{self.name}",
                "annotations": annotations,
                "creationTimestamp": sim_timestamp(self.arrival),
            },
            "spec": spec,
            "status": {"phase": "Pending"},
        }


@dataclass(frozen=True)
class Queue:
    """One ElasticQuota of the simulated cluster: a namespace's guaranteed `min` and ceiling
    `max` (resource name -> quantity; None: not set)."""

    namespace: str
    min: dict[str, str] | None
    max: dict[str, str] | None

    def quota_object(self, totals: Mapping[str, str]) -> dict[str, Any]:
        """The ElasticQuota. A resource the queue does not list is not limited: cpu, memory,
        ephemeral-storage and pods, which an ElasticQuota that is given compares always, get
        the cluster's total (`totals`) in both bounds."""
        spec: dict[str, Any] = {}
        for part, given in (("min", self.min), ("max", self.max)):
            if given is None and part == "max":
                continue
            amounts = dict(given or {})
            for name, total in totals.items():
                amounts.setdefault(name, total)
            spec[part] = amounts
        return {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "ElasticQuota",
            "metadata": {"name": self.namespace, "namespace": self.namespace},
            "spec": spec,
        }


@dataclass
class Scenario:
    name: str
    seed: int
    templates: list[NodeTemplate]
    jobs: list[Job]
    description: str = ""
    source: str = "<scenario>"
    node_names: list[str] = field(default_factory=list)
    # seconds between checkpoints: a preempted job resumes from its last one (0: restarts)
    checkpoint_interval: float = 0.0
    # GB/s per GPU between nodes that share no domain of any level (None: no further limit)
    core_gbps: float | None = None
    job_time_reference: str = "cluster"  # one of JOB_TIME_REFERENCES
    queues: list[Queue] = field(default_factory=list)  # one ElasticQuota per namespace
    # where trace jobs go: (namespace, least GPUs of the whole job), first match wins
    trace_namespaces: list[tuple[str, int]] = field(default_factory=list)
    gpu_request: str = "extended"  # how trace jobs ask for GPUs (one of GPU_REQUESTS)

    def namespace_for(self, gpus: int) -> str:
        """The namespace of a trace job of `gpus` GPUs in all (`traceNamespaces`)."""
        for namespace, least in self.trace_namespaces:
            if gpus >= least:
                return namespace
        return "default"

    def quota_totals(self) -> dict[str, str]:
        """The cluster's total cpu, memory, ephemeral-storage and pods (for `Queue`)."""
        totals: dict[str, int] = {}
        for t in self.templates:
            for name in ("cpu", "memory", "ephemeral-storage", "pods"):
                raw = t.resources.get(name, "110" if name == "pods" else "0")
                totals[name] = totals.get(name, 0) + t.count * resource_value(name, raw)
        out = {name: str(amount) for name, amount in totals.items()}
        out["cpu"] = f"{totals['cpu']}m"
        return out

    def node_objects(self) -> list[dict[str, Any]]:
        """Every Node of the cluster, named `<template>-<i>`."""
        out: list[dict[str, Any]] = []
        for t in self.templates:
            for i in range(t.count):
                name = f"{t.name}-{i}"
                annotations: dict[str, str] = {}
                allocatable = dict(t.resources)
                if t.dra and t.topology is not None:  # GPUs in a ResourceSlice, not allocatable
                    allocatable.pop(GPU_RESOURCE, None)
                    topology = sim_dra.with_identities(name, t.topology)
                    annotations[ANNOTATION_TOPOLOGY] = format_topology(topology)
                elif t.topology is not None:
                    annotations[ANNOTATION_TOPOLOGY] = format_topology(t.topology)
                labels = {"kubernetes.io/hostname": name, **t.labels}
                for key, per in t.network:  # e.g. racks of 4 nodes under spines of 8
                    labels[key] = f"{t.name}-{key.rsplit('/', 1)[-1]}{i // per}"
                out.append(
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "metadata": {"name": name, "labels": labels, "annotations": annotations},
                        "spec": {"taints": [dict(x) for x in t.taints]},
                        "status": {"allocatable": allocatable},
                    }
                )
        return out

    def dra_objects(self) -> list[dict[str, Any]]:
        """The DRA objects of the cluster: NVIDIA's DeviceClass and one ResourceSlice per DRA
        node (`gpuDriver: dra`), a ResourceClaimTemplate per namespace and GPU count of the
        DRA jobs (`gpuRequest: dra`); none when neither exists (`scheduler.sim.dra`)."""
        slices = [
            sim_dra.node_slice(f"{t.name}-{i}", t.topology)
            for t in self.templates
            if t.dra and t.topology is not None
            for i in range(t.count)
        ]
        shapes = sorted({(j.namespace, j.gpus) for j in self.jobs if j.dra and j.gpus})
        if not slices and not shapes:
            return []
        templates = [sim_dra.claim_template(ns, gpus) for ns, gpus in shapes]
        return [sim_dra.device_class(), *slices, *templates]

    @property
    def uses_dra(self) -> bool:
        return any(t.dra for t in self.templates) or any(j.dra for j in self.jobs)

    @property
    def network_levels(self) -> tuple[str, ...]:
        """The network topology label keys of the node templates, widest first."""
        keys: dict[str, None] = {}
        for t in self.templates:
            for key, _ in t.network:
                keys[key] = None
        return tuple(keys)

    @property
    def total_gpus(self) -> int:
        return sum(t.count * _gpus(t) for t in self.templates)

    @property
    def node_count(self) -> int:
        return sum(t.count for t in self.templates)

    @property
    def largest_node_gpus(self) -> int:
        """GPUs of the largest node: a one-pod job asking more can never be placed."""
        return max((_gpus(t) for t in self.templates), default=0)


def _gpus(template: NodeTemplate) -> int:
    """GPUs of one node of the template (a checked whole quantity: `8`, `8.0`, `8e0`)."""
    return resource_value(GPU_RESOURCE, template.resources.get(GPU_RESOURCE, "0"))


# ---------------------------------------------------------------------------- field helpers


_FIELDS = Fields(ScenarioError, unknown_lists_known=True)


def _mapping(value: Any, path: str, *, required: bool = False) -> Mapping[str, Any]:
    return _FIELDS.mapping(value, path, required=required)


def _no_unknown(data: Mapping[str, Any], allowed: set[str], path: str) -> None:
    _FIELDS.strict(data, path, allowed)


def _number(value: Any, path: str, *, default: float | None = None, minimum: float = 0.0) -> float:
    if default is None:
        return _FIELDS.number(value, path, minimum=minimum, maximum=MAX_SECONDS)
    return _FIELDS.number(value, path, default, minimum=minimum, maximum=MAX_SECONDS)


def _integer(value: Any, path: str, *, default: int | None = None, minimum: int = 0) -> int:
    if default is None:
        return _FIELDS.integer(value, path, minimum=minimum, maximum=_MAX_COUNT)
    return _FIELDS.integer(value, path, default, minimum=minimum, maximum=_MAX_COUNT)


def _string(value: Any, path: str, *, default: str | None = None) -> str:
    if value is None and default is None:
        raise _FIELDS.fail(path, "is required")
    return _FIELDS.name(value, path, default) if default is not None else _FIELDS.name(value, path)


def _quantity(value: Any, resource: str, path: str, *, default: str) -> str:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ScenarioError(f"{path}: must be a quantity such as 8 or 64Gi, got {value!r}")
    try:
        exact = parse_quantity(value)
    except QuantityError as exc:
        raise ScenarioError(f"{path}: {exc}") from None
    amount = to_units(resource, exact)
    if amount < 0:
        raise ScenarioError(f"{path}: must be >= 0, got {value!r}")
    if amount >= MAX_AMOUNT:
        raise ScenarioError(f"{path}: {value!r} is too large (at most 2^53-1 in kube's unit)")
    if exact.denominator != 1 and is_extended_resource(resource):
        raise ScenarioError(f"{path}: must be a whole number (an extended resource), got {value!r}")
    return str(value)


def _scaled(quantity: str, resource: str, factor: int) -> int:
    """A quantity times an integer, in kube's units (milli-CPU, bytes)."""
    return resource_value(resource, quantity) * factor


def _name(value: Any, path: str) -> str:
    name = _string(value, path)
    ok = all(c.isalnum() or c in "-." for c in name) and name[0].isalnum()
    if not ok or name.lower() != name:
        raise ScenarioError(f"{path}: {name!r} is not a valid name (lowercase, digits, '-', '.')")
    return name


def _namespace(value: Any, path: str) -> str:
    """A namespace: a DNS label (lowercase letters, digits, '-'; at most 63)."""
    text = _string(value, path)
    if not _DNS_LABEL.fullmatch(text):
        raise ScenarioError(
            f"{path}: must be a namespace name (a DNS label: lowercase letters, digits and '-', "
            f"at most 63, starting and ending with a letter or digit), got {text!r}"
        )
    return text


def _resource_list(value: Any, path: str) -> dict[str, str]:
    data = _mapping(value, path, required=True)
    out: dict[str, str] = {}
    for name, amount in data.items():
        if not isinstance(name, str) or not name or any(c.isspace() for c in name):
            raise ScenarioError(f"{path}: must be keyed by resource names, got {name!r}")
        if amount is None:
            raise ScenarioError(f"{path}.{name}: must be a quantity such as 8 or 64Gi, got None")
        out[name] = _quantity(amount, name, f"{path}.{name}", default="0")
    return out


def _queues(value: Any) -> list[Queue]:
    if not isinstance(value, list):
        raise ScenarioError(f"queues: must be a list of queues, got {type(value).__name__}")
    queues: list[Queue] = []
    seen: set[str] = set()
    for i, raw in enumerate(value):
        path = f"queues[{i}]"
        item = _mapping(raw, path, required=True)
        _no_unknown(item, {"namespace", "min", "max"}, path)
        namespace = _namespace(item.get("namespace"), f"{path}.namespace")
        if namespace in seen:
            raise ScenarioError(
                f"{path}.namespace: {namespace!r} has a queue already (one ElasticQuota per "
                "namespace)"
            )
        seen.add(namespace)
        low = _resource_list(item["min"], f"{path}.min") if item.get("min") is not None else None
        high = _resource_list(item["max"], f"{path}.max") if item.get("max") is not None else None
        for name, amount in (low or {}).items():
            ceiling = (high or {}).get(name)
            if ceiling is not None and resource_value(name, amount) > resource_value(name, ceiling):
                raise ScenarioError(
                    f"{path}.min.{name}: must not exceed max ({ceiling}), got {amount}"
                )
        queues.append(Queue(namespace, low, high))
    return queues


def _trace_namespaces(value: Any) -> list[tuple[str, int]]:
    if not isinstance(value, list):
        raise ScenarioError(f"traceNamespaces: must be a list of rules, got {type(value).__name__}")
    rules: list[tuple[str, int]] = []
    for i, raw in enumerate(value):
        path = f"traceNamespaces[{i}]"
        item = _mapping(raw, path, required=True)
        _no_unknown(item, {"namespace", "minGpus"}, path)
        namespace = _namespace(item.get("namespace"), f"{path}.namespace")
        rules.append((namespace, _integer(item.get("minGpus"), f"{path}.minGpus", default=0)))
    return rules


def _comm(value: Any, path: str) -> float | None:
    if value is None:
        return None
    share = _number(value, path)
    if share > 1:
        raise ScenarioError(f"{path}: must be between 0 and 1, got {value!r}")
    return share


def _choice(value: Any, path: str, allowed: tuple[str, ...], default: str) -> str:
    if value is None:
        return default
    if not isinstance(value, str) or value not in allowed:
        raise ScenarioError(f"{path}: must be {' or '.join(allowed)}, got {value!r}")
    return value


def _placement(value: Any, path: str) -> str | None:
    if value is None:
        return None
    known = [p.value for p in Placement]
    if value not in known:
        raise ScenarioError(f"{path}: must be one of {', '.join(known)}, got {value!r}")
    return str(value)


# ---------------------------------------------------------------------------- nodes


def _topology(value: Any, path: str) -> tuple[Topology | None, str]:
    if value is None:
        return None, ""
    if isinstance(value, str):
        if value not in BUILTIN_TOPOLOGIES:
            raise ScenarioError(
                f"{path}: unknown built-in topology {value!r} "
                f"(known: {', '.join(BUILTIN_TOPOLOGIES)})"
            )
        return builtin_topology(value), value
    if isinstance(value, Mapping):
        try:
            return topology_from_dict(value, node=path), "inline"
        except TopologyError as exc:
            # "node <path>: annotation ...: gpus[0].index: ..." -> keep the inner field path
            text = str(exc)
            marker = f"annotation {ANNOTATION_TOPOLOGY}: "
            inner = text.split(marker, 1)[1] if marker in text else text
            raise ScenarioError(f"{path}.{inner}") from None
    raise ScenarioError(
        f"{path}: must be a built-in topology name or a mapping in the annotation format"
    )


def _node_template(raw: Any, i: int, seen: set[str], gpu_request: str = "extended") -> NodeTemplate:
    path = f"nodes[{i}]"
    data = _mapping(raw, path, required=True)
    _no_unknown(data, _NODE_FIELDS, path)
    name = _name(data.get("name"), f"{path}.name")
    if name in seen:
        raise ScenarioError(f"{path}.name: template {name!r} defined twice")
    seen.add(name)
    count = _integer(data.get("count"), f"{path}.count", default=1)
    topology, topology_name = _topology(data.get("gpuTopology"), f"{path}.gpuTopology")
    raw_resources = _mapping(data.get("resources"), f"{path}.resources")
    resources: dict[str, str] = {}
    for key, value in raw_resources.items():
        resources[str(key)] = _quantity(value, str(key), f"{path}.resources.{key}", default="0")
    for key in ("cpu", "memory"):
        if key not in resources:
            raise ScenarioError(f"{path}.resources.{key}: is required")
    resources.setdefault("pods", "110")
    if topology is not None:
        gpus = resources.setdefault(GPU_RESOURCE, str(topology.size))
        if resource_value(GPU_RESOURCE, gpus) > topology.size:
            raise ScenarioError(
                f"{path}.resources.{GPU_RESOURCE}: {gpus} exceeds the {topology.size} GPUs "
                "of gpuTopology"
            )
    labels_raw = _mapping(data.get("labels"), f"{path}.labels")
    labels: dict[str, str] = {}
    for key, value in labels_raw.items():
        labels[str(key)] = _FIELDS.string(value, f"{path}.labels.{key}")
    taints: list[dict[str, str]] = []
    raw_taints = data.get("taints")
    if raw_taints is not None and not isinstance(raw_taints, list):
        raise ScenarioError(f"{path}.taints: must be a list")
    for j, taint in enumerate(raw_taints or []):
        tpath = f"{path}.taints[{j}]"
        item = _mapping(taint, tpath, required=True)
        _no_unknown(item, {"key", "value", "effect"}, tpath)
        effect = _string(item.get("effect"), f"{tpath}.effect", default="NoSchedule")
        if effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise ScenarioError(
                f"{tpath}.effect: must be NoSchedule, PreferNoSchedule or NoExecute, got {effect!r}"
            )
        taints.append(
            {
                "key": _string(item.get("key"), f"{tpath}.key"),
                "value": str(item.get("value") or ""),
                "effect": effect,
            }
        )
    gpu_taint = data.get("gpuTaint", True)
    if not isinstance(gpu_taint, bool):
        raise ScenarioError(f"{path}.gpuTaint: must be true or false, got {gpu_taint!r}")
    if gpu_taint and resource_value(GPU_RESOURCE, resources.get(GPU_RESOURCE, "0")) > 0:
        taints.append({"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"})
        labels.setdefault("nvidia.com/gpu.present", "true")
    inter_node = _gbps(
        data.get("interNodeBandwidth"), f"{path}.interNodeBandwidth", DEFAULT_INTER_NODE_GBPS
    )
    network, level_gbps = _network(data.get("network"), f"{path}.network")
    default = "dra" if gpu_request == "dra" and topology is not None else "device-plugin"
    driver = _choice(data.get("gpuDriver"), f"{path}.gpuDriver", GPU_DRIVERS, default)
    if driver == "dra":
        if topology is None:
            raise ScenarioError(
                f"{path}.gpuDriver: dra needs gpuTopology (the ResourceSlice is made from it)"
            )
        if resource_value(GPU_RESOURCE, resources[GPU_RESOURCE]) != topology.size:
            raise ScenarioError(
                f"{path}.resources.{GPU_RESOURCE}: a dra node publishes all "
                f"{topology.size} GPUs of gpuTopology, got {resources[GPU_RESOURCE]}"
            )
    return NodeTemplate(
        name, count, resources, labels, taints, topology, topology_name, inter_node, network,
        level_gbps, driver == "dra",
    )  # fmt: skip


def _gbps(value: Any, path: str, default: float | None = None) -> float:
    """A bandwidth in GB/s, from MIN_NETWORK_GBPS to MAX_NETWORK_GBPS (`default` when not
    given)."""
    if value is None and default is not None:
        return default
    gbps = _FIELDS.number(value, path, minimum=0.0, maximum=MAX_NETWORK_GBPS)
    if gbps < MIN_NETWORK_GBPS:
        raise ScenarioError(f"{path}: must be at least {MIN_NETWORK_GBPS:g} (GB/s), got {value!r}")
    return gbps


def _network(
    value: Any, path: str
) -> tuple[tuple[tuple[str, int], ...], tuple[tuple[str, float], ...]]:
    """`network: [{key: <node label>, nodesPer: N, bandwidth: GB/s}, ...]`, widest first: node
    i of the template is in domain i // N of each level (racks of 4 under spines of 8); the
    optional `bandwidth` is what a GPU gets to peers whose narrowest shared domain is of that
    level (per GPU and direction; unset: no limit beyond the NICs, a non-blocking level)."""
    levels: list[tuple[str, int]] = []
    bandwidths: list[tuple[str, float]] = []
    for j, raw in enumerate(_FIELDS.list(value, path)):
        item = _mapping(raw, f"{path}[{j}]", required=True)
        _no_unknown(item, {"key", "nodesPer", "bandwidth"}, f"{path}[{j}]")
        key = _string(item.get("key"), f"{path}[{j}].key")
        if any(key == k for k, _ in levels):
            raise ScenarioError(f"{path}[{j}].key: level {key!r} given twice")
        per = _integer(item.get("nodesPer"), f"{path}[{j}].nodesPer", minimum=1)
        if levels and per > levels[-1][1]:
            raise ScenarioError(
                f"{path}[{j}].nodesPer: {per} is wider than the level above ({levels[-1][1]})"
            )
        levels.append((key, per))
        if item.get("bandwidth") is not None:
            bandwidths.append((key, _gbps(item["bandwidth"], f"{path}[{j}].bandwidth")))
    return tuple(levels), tuple(bandwidths)


def _job_topology(value: Any, path: str) -> tuple[str, str] | None:
    """`topology: {required: <node label key>}` or `{preferred: ...}`."""
    if value is None:
        return None
    data = _mapping(value, path, required=True)
    _no_unknown(data, {"required", "preferred"}, path)
    if len(data) != 1:
        raise ScenarioError(f"{path}: give one of required, preferred")
    mode = next(iter(data))
    return str(mode), _string(data[mode], f"{path}.{mode}")


def worker_name(job: str, k: int) -> str:
    """The pod name of worker k of a multi-node job (the job's name is its pod group's)."""
    return f"{job}-w{k}"


def as_workers(job: Job, workers: int, topology: tuple[str, str] | None) -> list[Job]:
    """A multi-node job as its worker pods (a pod group of `workers`); one worker stays one.
    The caller has counted its pods against the limits (`over_limit`)."""
    if workers <= 1:
        return [job]
    return [
        dataclasses.replace(
            job, name=worker_name(job.name, k), group=job.name, workers=workers, topology=topology
        )
        for k in range(workers)
    ]


# ---------------------------------------------------------------------------- jobs


def _requests(data: Mapping[str, Any], path: str, gpus: int) -> tuple[str, str]:
    cpu = _quantity(data.get("cpu"), "cpu", f"{path}.cpu", default="1")
    memory = _quantity(data.get("memory"), "memory", f"{path}.memory", default="2Gi")
    cpu_per = _quantity(data.get("cpuPerGpu"), "cpu", f"{path}.cpuPerGpu", default="0")
    mem_per = _quantity(data.get("memoryPerGpu"), "memory", f"{path}.memoryPerGpu", default="0")
    millis = resource_value("cpu", cpu) + _scaled(cpu_per, "cpu", gpus)
    memory_bytes = resource_value("memory", memory) + _scaled(mem_per, "memory", gpus)
    for resource, amount in (("cpu", millis), ("memory", memory_bytes)):
        if amount >= MAX_AMOUNT:
            raise ScenarioError(
                f"{path}: the job's {resource} request is too large (at most 2^53-1 in kube's unit)"
            )
    return f"{millis}m", str(memory_bytes)


def _explicit_jobs(
    data: Mapping[str, Any], path: str, room: _Room, gpu_request: str = "extended"
) -> list[Job]:
    _no_unknown(data, _JOB_FIELDS, path)
    dra = _choice(data.get("gpuRequest"), f"{path}.gpuRequest", GPU_REQUESTS, gpu_request)
    name = _name(data.get("name"), f"{path}.name")
    arrival = _number(data.get("arrival"), f"{path}.arrival", default=0.0)
    duration = _number(data.get("duration"), f"{path}.duration")
    if duration <= 0:
        raise ScenarioError(f"{path}.duration: must be > 0, got {duration:g}")
    gpus = _integer(data.get("gpus"), f"{path}.gpus", default=0)
    count = _integer(data.get("count"), f"{path}.count", default=1, minimum=1)
    interval = _number(data.get("interval"), f"{path}.interval", default=0.0)
    cpu, memory = _requests(data, path, gpus)
    placement = _placement(data.get("placement"), f"{path}.placement")
    priority = _integer(data.get("priority"), f"{path}.priority", default=0, minimum=-(2**31))
    comm = _comm(data.get("comm"), f"{path}.comm")
    workers = _integer(data.get("workers"), f"{path}.workers", default=1, minimum=1)
    topology = _job_topology(data.get("topology"), f"{path}.topology")
    if workers > 1:
        room.take(count * workers, f"{path}.workers", f"{count:,} job(s) of {workers:,} workers")
    else:
        room.take(count, f"{path}.count")
    jobs = [
        Job(
            name if count == 1 else f"{name}-{k}",
            arrival + k * interval,
            duration,
            gpus,
            cpu,
            memory,
            placement,
            priority,
            comm,
            dra=dra == "dra",
        )
        for k in range(count)
    ]
    if data.get("namespace") is not None:
        namespace = _namespace(data["namespace"], f"{path}.namespace")
        jobs = [dataclasses.replace(job, namespace=namespace) for job in jobs]
    return [w for job in jobs for w in as_workers(job, workers, topology)]


def _key(key: Any) -> str:
    """A mapping key as a path component (cut, as `shown` cuts values, when huge)."""
    text = str(key)
    return text if len(text) <= SHOWN_CHARACTERS else shown(text)


def _weights(value: Any, path: str, *, keys_int: bool) -> list[tuple[Any, float]]:
    data = _mapping(value, path, required=True)
    out: list[tuple[Any, float]] = []
    for key, weight in data.items():
        if keys_int and (
            isinstance(key, bool) or not isinstance(key, int) or not 0 <= key <= _MAX_COUNT
        ):
            raise ScenarioError(
                f"{path}.{_key(key)}: GPU count must be an integer from 0 to {_MAX_COUNT:,}"
            )
        w = _number(weight, f"{path}.{key}")
        out.append((key, w))
    return out


def _generated_jobs(
    data: Mapping[str, Any],
    path: str,
    seed: int,
    index: int,
    room: _Room,
    gpu_request: str = "extended",
) -> list[Job]:
    _no_unknown(data, _GEN_FIELDS, path)
    dra = _choice(data.get("gpuRequest"), f"{path}.gpuRequest", GPU_REQUESTS, gpu_request)
    count = _integer(data.get("generate"), f"{path}.generate")
    prefix = _name(data.get("namePrefix", f"job{index}"), f"{path}.namePrefix")
    arrivals = _mapping(data.get("arrivals"), f"{path}.arrivals")
    _no_unknown(arrivals, {"start", "meanInterval"}, f"{path}.arrivals")
    start = _number(arrivals.get("start"), f"{path}.arrivals.start", default=0.0)
    mean_interval = _number(
        arrivals.get("meanInterval"), f"{path}.arrivals.meanInterval", default=60.0
    )
    namespace = _namespace(data.get("namespace", "default"), f"{path}.namespace")
    dur = _mapping(data.get("duration"), f"{path}.duration")
    _no_unknown(dur, {"median", "sigma", "min", "max"}, f"{path}.duration")
    median = _number(dur.get("median"), f"{path}.duration.median", default=1800.0)
    if median <= 0:
        raise ScenarioError(f"{path}.duration.median: must be > 0")
    sigma = _number(dur.get("sigma"), f"{path}.duration.sigma", default=1.0)
    if sigma > MAX_SIGMA:
        raise ScenarioError(f"{path}.duration.sigma: must be <= {MAX_SIGMA:g}, got {sigma:g}")
    low = _number(dur.get("min"), f"{path}.duration.min", default=60.0)
    high = _number(dur.get("max"), f"{path}.duration.max", default=86400.0)
    if low < MIN_DURATION or high < low:
        raise ScenarioError(
            f"{path}.duration: need {MIN_DURATION:g} <= min <= max, got min {low:g}, max {high:g}"
        )
    sizes = _weights(data.get("gpus", {1: 1}), f"{path}.gpus", keys_int=True)
    if sum(w for _, w in sizes) <= 0:
        raise ScenarioError(f"{path}.gpus: at least one weight must be > 0")
    placement_raw = _weights(data.get("placement", {}), f"{path}.placement", keys_int=False)
    placements: list[tuple[str | None, float]] = []
    for key, share in placement_raw:
        _placement(key, f"{path}.placement.{key}")
        if share > 1:
            raise ScenarioError(f"{path}.placement.{key}: a share must be between 0 and 1")
        placements.append((str(key), share))
    if sum(s for _, s in placements) > 1:
        raise ScenarioError(f"{path}.placement: shares add up to more than 1")
    priority = _integer(data.get("priority"), f"{path}.priority", default=0, minimum=-(2**31))
    comm = _comm(data.get("comm"), f"{path}.comm")
    raw_workers = data.get("workers", 1)
    if isinstance(raw_workers, Mapping):
        worker_weights = _weights(raw_workers, f"{path}.workers", keys_int=True)
        if any(k < 1 for k, _ in worker_weights) or sum(w for _, w in worker_weights) <= 0:
            raise ScenarioError(f"{path}.workers: counts must be >= 1 with a weight > 0")
    else:
        worker_weights = [(_integer(raw_workers, f"{path}.workers", minimum=1), 1.0)]
    topology = _job_topology(data.get("topology"), f"{path}.topology")
    worker_rng = random.Random(f"{seed}/{index}/workers")
    rng = random.Random(f"{seed}/{index}")
    size_values = [k for k, _ in sizes]
    size_weights = [w for _, w in sizes]
    jobs: list[Job] = []
    t = start
    for k in range(count):
        if k:
            t += rng.expovariate(1.0 / mean_interval) if mean_interval > 0 else 0.0
        gpus = int(rng.choices(size_values, size_weights)[0])
        duration = min(high, max(low, median * math.exp(sigma * rng.gauss(0.0, 1.0))))
        placement: str | None = None
        if gpus > 1 and placements:
            roll = rng.random()
            acc = 0.0
            for value, share in placements:
                acc += share
                if roll < acc:
                    placement = value
                    break
        cpu, memory = _requests(data, path, gpus)
        job = Job(
            f"{prefix}-{k:04d}",
            round(t, 3),
            round(duration, 3),
            gpus,
            cpu,
            memory,
            placement,
            priority,
            comm,
            namespace=namespace,
            dra=dra == "dra",
        )
        workers = int(worker_rng.choices(*zip(*worker_weights, strict=True))[0])
        room.take(workers, f"{path}.workers", f"job {job.name} of {workers:,} workers")
        jobs.extend(as_workers(job, workers, topology))
    return jobs


# ---------------------------------------------------------------------------- loading


def parse_scenario(
    data: Any,
    *,
    source: str = "<scenario>",
    seed: int | None = None,
    jobs_required: bool = True,
    gpu_request: str | None = None,
) -> Scenario:
    """Validate a decoded scenario and expand it; `seed` overrides the scenario's own, and
    `gpu_request` (`--gpu-request`) its `gpuRequest`.

    `jobs_required=False`: the scenario may have no `jobs` (a cluster for a trace replay)."""
    top = _mapping(data, "scenario", required=True)
    _no_unknown(top, _TOP_FIELDS, "")
    own_request = _choice(top.get("gpuRequest"), "gpuRequest", GPU_REQUESTS, "extended")
    request = gpu_request if gpu_request is not None else own_request
    name = _string(top.get("name"), "name", default=Path(source).stem or "scenario")
    description = str(top.get("description") or "")
    own_seed = _integer(top.get("seed"), "seed", default=1)
    used_seed = own_seed if seed is None else seed
    raw_nodes = top.get("nodes")
    if not isinstance(raw_nodes, list) or not raw_nodes:
        raise ScenarioError("nodes: must be a non-empty list of node templates")
    seen: set[str] = set()
    templates = [_node_template(raw, i, seen, request) for i, raw in enumerate(raw_nodes)]
    _check_nodes(sum(t.count for t in templates))
    room = _Room(sum(t.count for t in templates))  # pods, checked before they are made
    raw_jobs = top.get("jobs")
    if raw_jobs is None and not jobs_required:
        raw_jobs = []
    elif not isinstance(raw_jobs, list) or (not raw_jobs and jobs_required):
        raise ScenarioError("jobs: must be a non-empty list of jobs or job generators")
    jobs: list[Job] = []
    entries: list[int] = []  # the `jobs` entry of each pod
    for i, raw in enumerate(raw_jobs):
        path = f"jobs[{i}]"
        item = _mapping(raw, path, required=True)
        _within_job_limit(room, item, path)
        if "generate" in item:
            made = _generated_jobs(item, path, used_seed, i, room, request)
        else:
            made = _explicit_jobs(item, path, room, request)
        jobs.extend(made)
        entries.extend([i] * len(made))
    _unique_names(jobs, entries)
    jobs.sort(key=lambda j: (j.arrival, j.name))
    scenario = Scenario(name, used_seed, templates, jobs, description, source)
    scenario.gpu_request = request
    scenario.checkpoint_interval = _number(
        top.get("checkpointInterval"), "checkpointInterval", default=0.0
    )
    if top.get("coreBandwidth") is not None:
        scenario.core_gbps = _gbps(top["coreBandwidth"], "coreBandwidth")
    reference = _string(top.get("jobTimeReference"), "jobTimeReference", default="cluster")
    if reference not in JOB_TIME_REFERENCES:
        raise ScenarioError(
            f"jobTimeReference: must be one of {', '.join(JOB_TIME_REFERENCES)}, got {reference!r}"
        )
    scenario.job_time_reference = reference
    if top.get("queues") is not None:
        scenario.queues = _queues(top["queues"])
    if top.get("traceNamespaces") is not None:
        scenario.trace_namespaces = _trace_namespaces(top["traceNamespaces"])
    check_limits(scenario)
    return scenario


def over_limit(nodes: int, pods: int) -> str | None:
    """Why `pods` pods on `nodes` nodes are more than a run may have (MAX_JOBS, MAX_NODE_JOBS;
    every worker of a multi-node job is a pod), or None."""
    if pods > MAX_JOBS:
        return (
            f"{pods:,} jobs in all; the simulator takes at most {MAX_JOBS:,} "
            "(pods: each worker of a multi-node job counts)"
        )
    if nodes * pods > MAX_NODE_JOBS:
        return (
            f"nodes x jobs: {nodes:,} x {pods:,} is more than the simulator's limit of "
            f"{MAX_NODE_JOBS:,} (fewer nodes or fewer jobs)"
        )
    return None


class _Room:
    """The pods of a scenario, counted against the limits before they are made."""

    def __init__(self, nodes: int) -> None:
        self.nodes = nodes
        self.pods = 0

    def take(self, pods: int, path: str, what: str = "") -> None:
        problem = over_limit(self.nodes, self.pods + pods)
        if problem is not None:
            raise ScenarioError(f"{path}: {what}{': ' if what else ''}{problem}")
        self.pods += pods


def _within_job_limit(room: _Room, item: Mapping[str, Any], path: str) -> None:
    """Refuse a job entry whose jobs alone (one pod each) take the scenario past the limits,
    before anything is generated (the workers are counted as they are made)."""
    key = "generate" if "generate" in item else "count"
    planned = _integer(item.get(key), f"{path}.{key}", default=1)
    if over_limit(room.nodes, room.pods + planned) is not None:
        room.take(planned, f"{path}.{key}")


def _unique_names(jobs: list[Job], entries: list[int]) -> None:
    """Every pod has its own name; else name both entries (a worker is `<job>-w<k>`)."""
    first: dict[str, int] = {}
    for at, job in enumerate(jobs):
        if job.name not in first:
            first[job.name] = at
            continue
        other = first[job.name]
        raise ScenarioError(
            f"jobs[{entries[at]}]: pod name {job.name!r} is already {_pod_of(jobs[other])} "
            f"of jobs[{entries[other]}]; pod names must differ (worker k of a multi-node job "
            "is named <job>-w<k>)"
        )


def _pod_of(job: Job) -> str:
    if job.group is None:
        return "the name of a pod"
    return f"the name of a worker of multi-node job {job.group!r}"


def _check_nodes(nodes: int) -> None:
    if nodes > MAX_NODES:
        raise ScenarioError(
            f"nodes: {nodes:,} nodes in all; the simulator takes at most {MAX_NODES:,}"
        )


def check_limits(scenario: Scenario) -> None:
    """The limits that keep a run within minutes and a few hundred MB (see MAX_* above);
    parsing and trace replay already checked the pods before making them."""
    nodes = scenario.node_count
    _check_nodes(nodes)
    problem = over_limit(nodes, len(scenario.jobs))
    if problem is not None:
        raise ScenarioError(problem if problem.startswith("nodes x") else f"jobs: {problem}")
    for job in scenario.jobs:
        if job.arrival > MAX_SECONDS:
            raise ScenarioError(
                f"jobs: {job.name} arrives at {job.arrival:,.0f} s, after the simulator's "
                f"limit of {MAX_SECONDS:,} s (ten years)"
            )


def load_scenario(
    path: str | Path,
    *,
    seed: int | None = None,
    jobs_required: bool = True,
    gpu_request: str | None = None,
) -> Scenario:
    """Read and validate a scenario file; errors start with the file name and the field."""
    source = str(path)
    try:
        data = load_yaml(read_input(path, source), source)
    except InputError as exc:
        raise ScenarioError(str(exc)) from None
    try:
        return parse_scenario(
            data, source=source, seed=seed, jobs_required=jobs_required, gpu_request=gpu_request
        )
    except ScenarioError as exc:
        raise ScenarioError(f"{source}: {exc}") from None


def bundled_scenario_path() -> Path:
    """The default scenario shipped with the package."""
    return Path(str(resources.files("scheduler.sim") / "data" / "default.yaml"))
