"""`topo-scheduler explain`: why a pod is Pending, or why it landed where it did.

Reads a cluster snapshot (what `kubectl get nodes,pods,namespaces -A -o yaml` prints, or
multi-document YAML of Nodes, Pods and Namespaces; Namespaces feed `namespaceSelector`;
Services, ReplicaSets, ReplicationControllers and StatefulSets, when present, feed
PodTopologySpread's default constraints) and a Pod manifest, and runs the same framework the
scheduler runs, on every node, printing each node's verdict, reasons and per-plugin scores.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from scheduler.core.cache import Cache
from scheduler.core.config import ConfigError, SchedulerConfiguration, default_config, load_config
from scheduler.core.cycle import CycleHooks, Scheduler, drive
from scheduler.core.framework import (
    BindOutcome,
    BindResult,
    CycleState,
    Framework,
    ScheduleResult,
)
from scheduler.core.model import ModelError, NamespaceInfo, NodeInfo, PodInfo, WorkloadInfo
from scheduler.core.queue import SchedulingQueue

__all__ = ["DryRunBinder", "ExplainError", "explain", "load_snapshot", "report", "run_explain"]


class ExplainError(ValueError):
    """Bad input to explain; the message is printed as one line."""


def _documents(path: str) -> list[Any]:
    try:
        text = Path(path).read_text() if path != "-" else sys.stdin.read()
    except OSError as exc:
        raise ExplainError(f"{path}: {exc.strerror}") from None
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise ExplainError(f"{path}: not valid YAML: {exc}".replace("\n", " ")) from None


def _flatten(docs: Iterable[Any], path: str) -> list[Mapping[str, Any]]:
    objects: list[Mapping[str, Any]] = []
    for i, doc in enumerate(docs):
        if not isinstance(doc, Mapping):
            raise ExplainError(f"{path}: document {i}: must be a Kubernetes object")
        kind = doc.get("kind")
        if kind == "List" or (isinstance(kind, str) and kind.endswith("List")):
            items = doc.get("items") or []
            if not isinstance(items, list):
                raise ExplainError(f"{path}: document {i}: items: must be a list")
            objects.extend(_flatten(items, path))
        else:
            objects.append(doc)
    return objects


def load_snapshot(path: str, cache: Cache | None = None) -> Cache:
    """Fill a cache from a snapshot file: nodes, namespaces, and the pods bound to nodes."""
    cache = cache or Cache()
    nodes: list[NodeInfo] = []
    pods: list[PodInfo] = []
    namespaces: list[NamespaceInfo] = []
    workloads: list[WorkloadInfo] = []
    for obj in _flatten(_documents(path), path):
        kind = obj.get("kind")
        try:
            if kind == "Node":
                nodes.append(NodeInfo.from_object(obj))
            elif kind == "Pod":
                pods.append(PodInfo.from_object(obj))
            elif kind == "Namespace":
                namespaces.append(NamespaceInfo.from_object(obj))
            elif kind in ("Service", "ReplicationController", "ReplicaSet", "StatefulSet"):
                workloads.append(WorkloadInfo.from_object(obj))
        except ModelError as exc:
            raise ExplainError(f"{path}: {exc}") from None
    for namespace in namespaces:
        cache.add_namespace(namespace)
    for workload in workloads:
        cache.add_workload(workload)
    for node in nodes:
        cache.add_node(node)
    for pod in pods:
        cache.add_pod(pod)
    return cache


def _load_pod(path: str) -> tuple[PodInfo, str | None]:
    objects = _flatten(_documents(path), path)
    pods = [o for o in objects if o.get("kind", "Pod") == "Pod"]
    if len(pods) != 1:
        raise ExplainError(f"{path}: must hold exactly one Pod, found {len(pods)}")
    raw = pods[0]
    spec = raw.get("spec")
    scheduler_name = spec.get("schedulerName") if isinstance(spec, Mapping) else None
    try:
        pod = PodInfo.from_object(raw)
    except ModelError as exc:
        raise ExplainError(f"{path}: {exc}") from None
    return pod, scheduler_name if isinstance(scheduler_name, str) else None


def _load_config(path: str | None) -> SchedulerConfiguration:
    if path is None:
        return default_config()
    try:
        return load_config(Path(path).read_text(), origin=path)
    except OSError as exc:
        raise ExplainError(f"{path}: {exc.strerror}") from None
    except ConfigError as exc:
        raise ExplainError(f"{path}: {exc}") from None


class DryRunBinder:
    """explain's Binder: the binding is taken as done, nothing is written anywhere."""

    async def bind(self, pod: PodInfo, node: str, gpus: tuple[int, ...]) -> BindResult:
        return BindResult(BindOutcome.BOUND)


class _NodeReport(CycleHooks):
    """Builds the per-node part of the report from the decision, before the pod is assumed
    (each feasible node's GPU set is what the pod would get there)."""

    def __init__(self, cache: Cache, framework: Framework) -> None:
        self.cache = cache
        self.framework = framework
        self.result: ScheduleResult | None = None
        self.nodes: dict[str, Any] = {}

    def decided(self, pod: PodInfo, result: ScheduleResult, state: CycleState) -> None:
        self.result = result
        snapshot = self.cache.snapshot
        for slot in sorted(snapshot.live_slots(), key=lambda s: snapshot.names[s] or ""):
            name = snapshot.names[slot]
            assert name is not None
            if result.feasible[slot]:
                entry: dict[str, Any] = {
                    "feasible": True,
                    "reasons": [],
                    "scores": {p: int(s[slot]) for p, s in result.scores.items()},
                    "total": int(result.totals[slot]),
                }
                allocation = self.framework.allocate(state, pod, snapshot, slot)
                if allocation is not None:
                    entry["gpus"] = list(allocation.gpus)
                    if allocation.score is not None:
                        entry["gpuSetScore"] = allocation.score
                    entry["gpuLinks"] = _link_summary(allocation.links)
            else:
                entry = {
                    "feasible": False,
                    "reasons": result.node_reasons(slot),
                    "scores": {},
                    "total": None,
                }
            problem = self.cache.gpus.problem[slot]
            if problem:
                entry["gpuTopologyProblem"] = problem
            self.nodes[name] = entry


def explain(cache: Cache, pod: PodInfo, framework: Framework) -> dict[str, Any]:
    """Run the scheduling cycle for the pod on the snapshot, binding nothing (dry run), and
    build the JSON report (the stable contract)."""
    cache.remove_pod(pod.key)  # a bound pod is explained as if it were not there yet
    notes = [
        f"pod {key} on {node} holds GPUs {','.join(map(str, gpus))} as the device plugin "
        "would have assigned them (no record of its GPUs)"
        for key, node, gpus in cache.guessed_gpus()
    ]
    report = _NodeReport(cache, framework)
    queue: SchedulingQueue[PodInfo] = SchedulingQueue(lambda: 0.0)
    cycle = Scheduler(cache, queue, {pod.scheduler_name: framework}, DryRunBinder(), report)
    queue.add(pod.key, pod.priority, pod.creation_timestamp, pod)
    queued = queue.pop()
    assert queued is not None
    decision = cycle.schedule_one(queued)
    if decision.assumed is not None:
        drive(cycle.bind(decision.assumed))
    cache.remove_pod(pod.key)  # a dry run: the cache is left as it was
    result = report.result
    notes += [
        f"node {name}: GPU topology ignored (count-only): {entry['gpuTopologyProblem']}"
        for name, entry in report.nodes.items()
        if "gpuTopologyProblem" in entry
    ]
    document: dict[str, Any] = {
        "pod": pod.key,
        "node": result.node if result is not None else None,
        "message": result.message if result is not None else decision.message,
    }
    if result is not None and result.allocation is not None:
        document["gpus"] = list(result.allocation.gpus)
    document["nodes"] = report.nodes
    if notes:
        document["notes"] = notes
    return document


def _link_summary(links: Iterable[str]) -> str:
    """`0-1 NV18`, `0-2 NV18`, ... -> `NV18 x2`: the link types inside a GPU set."""
    counts: dict[str, int] = {}
    for link in links:
        kind = link.split(" ", 1)[-1]
        counts[kind] = counts.get(kind, 0) + 1
    return ", ".join(f"{kind} x{n}" for kind, n in sorted(counts.items()))


def report(document: Mapping[str, Any], weights: Mapping[str, int]) -> str:
    """The table for people: nodes by total, each plugin's score, reasons, chosen node."""
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    nodes: Mapping[str, Any] = document["nodes"]
    plugins = list(dict.fromkeys(p for entry in nodes.values() for p in entry["scores"]))
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("", no_wrap=True)
    table.add_column("NODE", no_wrap=True)
    for plugin in plugins:
        table.add_column(f"{plugin} (x{weights.get(plugin, 1)})", justify="right")
    table.add_column("TOTAL", justify="right")
    table.add_column("GPUS / REASONS")
    order = sorted(
        nodes.items(),
        key=lambda kv: (not kv[1]["feasible"], -(kv[1]["total"] or 0), kv[0]),
    )
    for name, entry in order:
        mark = "*" if name == document["node"] else ""
        if entry["feasible"]:
            gpus = entry.get("gpus")
            detail = ""
            if gpus:
                detail = f"gpus {','.join(map(str, gpus))}"
                if "gpuSetScore" in entry:
                    detail += f" set score {entry['gpuSetScore']}"
                if entry.get("gpuLinks"):
                    detail += f" ({entry['gpuLinks']})"
            cells = [str(entry["scores"].get(p, "-")) for p in plugins]
            table.add_row(mark, name, *cells, str(entry["total"]), detail)
        else:
            table.add_row(mark, name, *["-"] * len(plugins), "-", "; ".join(entry["reasons"]))
    out = StringIO()
    console = Console(file=out, width=1000, no_color=True, highlight=False)
    if document["node"] is not None:
        gpus = document.get("gpus")
        suffix = f" with GPUs {','.join(map(str, gpus))}" if gpus else ""
        console.print(f"pod {document['pod']} -> node {document['node']}{suffix}")
    else:
        console.print(f"pod {document['pod']} is unschedulable: {document['message']}")
    console.print(table)
    for note in document.get("notes", []):
        console.print(f"note: {note}")
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines()) + "\n"


def run_explain(args: argparse.Namespace) -> int:
    """CLI entry: exit 0 whether or not the pod fits, 2 with one line for bad input."""
    from plugins import frameworks_for, gpu_resource

    try:
        config = _load_config(args.config)
        try:
            frameworks = frameworks_for(config)
        except ConfigError as exc:
            raise ExplainError(f"{args.config or 'config'}: {exc}") from None
        pod, scheduler_name = _load_pod(args.pod)
        profile = config.profile(scheduler_name)
        if profile is None:
            raise ExplainError(
                f"{args.pod}: spec.schedulerName: {scheduler_name!r} matches no profile "
                f"(profiles: {', '.join(p.scheduler_name for p in config.profiles)})"
            )
        framework = frameworks[profile.scheduler_name]
        cache = load_snapshot(args.snapshot, Cache(gpu_resource(config)))
    except ExplainError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    document = explain(cache, pod, framework)
    if args.output == "json":
        print(json.dumps(document, indent=2))
    else:
        print(report(document, framework.weights), end="")
    return 0
