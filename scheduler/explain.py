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
from dataclasses import dataclass, field
from typing import Any

from scheduler.core.cache import Cache
from scheduler.core.config import ConfigError, SchedulerConfiguration, default_config, load_config
from scheduler.core.cycle import CycleHooks, Scheduler, drive
from scheduler.core.disruption import DisruptionBudget
from scheduler.core.framework import (
    BindOutcome,
    BindResult,
    CycleState,
    Framework,
    ScheduleResult,
)
from scheduler.core.group import (
    GroupCycle,
    GroupError,
    GroupOutcome,
    GroupSpec,
    kubernetes_group,
    scheduler_plugins_group,
)
from scheduler.core.model import (
    SOURCE_KUBERNETES,
    SOURCE_SCHEDULER_PLUGINS,
    ModelError,
    NamespaceInfo,
    NodeInfo,
    PodInfo,
    WorkloadInfo,
)
from scheduler.core.preemption import Plan, group_key
from scheduler.core.priority import PriorityClass, resolve_priority
from scheduler.core.queue import SchedulingQueue
from scheduler.core.safeload import (
    InputError,
    load_yaml_all,
    one_line,
    read_input,
    with_origin,
)
from scheduler.core.storage import STORAGE_KINDS

__all__ = ["DryRunBinder", "ExplainError", "explain", "load_snapshot", "report", "run_explain"]


class ExplainError(ValueError):
    """Bad input to explain; the message is printed as one line."""


def _documents(path: str) -> list[Any]:
    try:
        return [d for d in load_yaml_all(read_input(path), path) if d is not None]
    except InputError as exc:
        raise ExplainError(str(exc)) from None


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


_GROUP_PARSERS = {
    "scheduling.x-k8s.io": scheduler_plugins_group,
    "scheduling.k8s.io": kubernetes_group,
}


@dataclass
class Cluster:
    """What a snapshot file holds beside the cache: PriorityClasses, the pending pods (a
    pod group's members are placed together; nominated pods hold room on their node) and
    PodGroup objects."""

    cache: Cache
    classes: list[PriorityClass] = field(default_factory=list)
    pending: list[PodInfo] = field(default_factory=list)
    groups: list[GroupSpec] = field(default_factory=list)


def load_snapshot(path: str, cache: Cache | None = None) -> Cache:
    """Fill a cache from a snapshot file: nodes, and the pods bound to them."""
    return load_cluster(path, cache).cache


def load_cluster(path: str, cache: Cache | None = None) -> Cluster:
    """Fill a cache from a snapshot file (nodes, bound pods, storage objects,
    PodDisruptionBudgets) and read the rest of the cluster. Pods without `spec.priority` get
    the priority admission would have given them from the snapshot's PriorityClasses."""
    cluster = Cluster(cache or Cache())
    nodes: list[NodeInfo] = []
    pods: list[PodInfo] = []
    storage: list[Any] = []
    seen: dict[str, int] = {}
    try:
        for i, obj in enumerate(_flatten(_documents(path), path)):
            kind = obj.get("kind")
            if not isinstance(kind, str) or not kind:
                raise ExplainError(f"{path}: object {i}: kind: is required (Node, Pod, ...)")
            if kind == "Node":
                nodes.append(NodeInfo.from_object(obj))
                _unique(seen, f"Node {nodes[-1].name}", i, path)
            elif kind == "Pod":
                pods.append(PodInfo.from_object(obj))
                _unique(seen, f"Pod {pods[-1].key}", i, path)
            elif kind == "PodGroup":
                api = str(obj.get("apiVersion") or "").split("/")[0]
                if api in _GROUP_PARSERS:
                    cluster.groups.append(_GROUP_PARSERS[api](obj))
            elif kind in STORAGE_KINDS:
                storage.append(STORAGE_KINDS[kind].from_object(obj))
            elif kind == "PriorityClass":
                cluster.classes.append(PriorityClass.from_object(obj))
            elif kind == "PodDisruptionBudget":
                cluster.cache.set_budget(DisruptionBudget.from_object(obj))
            elif kind == "Namespace":
                cluster.cache.add_namespace(NamespaceInfo.from_object(obj))
            elif kind in ("Service", "ReplicationController", "ReplicaSet", "StatefulSet"):
                cluster.cache.add_workload(WorkloadInfo.from_object(obj))
        pods = [resolve_priority(pod, cluster.classes) for pod in pods]
    except (ModelError, GroupError) as exc:
        raise ExplainError(f"{path}: {exc}") from None
    for value in storage:
        cluster.cache.snapshot.storage.add(value)
    for node in nodes:
        cluster.cache.add_node(node)
    for pod in pods:
        cluster.cache.add_pod(pod)
    cluster.pending = [p for p in pods if p.node_name is None and not p.terminal]
    return cluster


def _unique(seen: dict[str, int], name: str, index: int, path: str) -> None:
    """kubectl never lists an object twice: a repeated Node or Pod name is an error."""
    if name in seen:
        raise ExplainError(f"{path}: object {index}: {name} repeats object {seen[name]}")
    seen[name] = index


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
    if pod.unreadable:  # a bound pod is read leniently; the one explained must be read whole
        raise ExplainError(f"{path}: {pod.unreadable[0]}")
    return pod, scheduler_name if isinstance(scheduler_name, str) else None


def _load_config(path: str | None) -> SchedulerConfiguration:
    if path is None:
        return default_config()
    try:
        return load_config(read_input(path), origin=path)
    except InputError as exc:
        raise ExplainError(str(exc)) from None
    except ConfigError as exc:
        raise ExplainError(with_origin(path, str(exc))) from None


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
        self.target: str | None = None  # with a pod group: the explained member only
        self.plan: Plan | None = None

    def preempt(self, plan: Plan) -> None:
        self.plan = plan  # a dry run: reported, nothing is evicted

    def decided(self, pod: PodInfo, result: ScheduleResult, state: CycleState) -> None:
        if self.target is not None and pod.key != self.target:
            return
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
                    entry["busbw"] = allocation.busbw
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


def explain(
    cache: Cache,
    pod: PodInfo,
    framework: Framework,
    *,
    pending: Iterable[PodInfo] = (),
    groups: Iterable[GroupSpec] = (),
    levels: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Run the scheduling cycle for the pod on the snapshot, binding nothing and evicting
    nothing (dry run), and build the JSON report (the stable contract). `pending`: the
    snapshot's pending pods (nominated ones hold room on their node; members of the pod's
    group are placed with it). A pod of a pod group is placed with the group's pending members
    (the group cycle, `groups` its PodGroup objects, `levels` the topologyLevels); the report
    then has a `group` part."""
    if pod.pod_group is not None:
        return _explain_group(cache, pod, framework, pending, groups, levels)
    cache.remove_pod(pod.key)  # a bound pod is explained as if it were not there yet
    notes = [
        f"pod {key} on {node} holds GPUs {','.join(map(str, gpus))} as the device plugin "
        "would have assigned them (no record of its GPUs)"
        for key, node, gpus in cache.guessed_gpus()
    ]
    notes += cache.unreadable()  # bound pods counted without the parts that cannot be read
    report = _NodeReport(cache, framework)
    queue: SchedulingQueue[PodInfo] = SchedulingQueue(lambda: 0.0)
    cycle = Scheduler(cache, queue, {pod.scheduler_name: framework}, DryRunBinder(), report)
    waiting = [other for other in pending if other.key != pod.key]
    for other in waiting:
        cycle.nominator.observe(other)
    cycle.nominator.observe(pod)
    group = group_key(pod)
    members = [other for other in waiting if group is not None and group_key(other) == group]
    cycle.pending_members = lambda _: members
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
        # the cycle's FailedScheduling text, with the PostFilter (preemption) suffix
        "message": decision.message
        if decision.message is not None or result is None
        else result.message,
    }
    if result is not None and result.allocation is not None:
        document["gpus"] = list(result.allocation.gpus)
        document["busbw"] = result.allocation.busbw
    document["preemption"] = _preemption_part(report.plan)
    document["nodes"] = report.nodes
    if notes:
        document["notes"] = notes
    return document


def _preemption_part(plan: Plan | None) -> dict[str, Any] | None:
    """The preemption plan (a dry run: nothing is evicted), or None."""
    if plan is None:
        return None
    part: dict[str, Any] = {
        "node": plan.node,
        "victims": [victim.pod.key for victim in plan.victims],
        "gpus": list(plan.gpus),
    }
    if plan.members:  # a gang preemptor: where each member goes
        part["members"] = {member.key: node for member, node, _ in plan.members}
    return part


def _explain_group(
    cache: Cache,
    pod: PodInfo,
    framework: Framework,
    pending: Iterable[PodInfo],
    groups: Iterable[GroupSpec],
    levels: tuple[str, ...],
) -> dict[str, Any]:
    """explain for a pod group's member: the whole group is placed (dry run)."""
    ref = pod.pod_group
    assert ref is not None
    cache.remove_pod(pod.key)
    members = [
        p
        for p in pending
        if p.key != pod.key
        and p.pod_group is not None
        and (p.pod_group.source, p.pod_group.key) == (ref.source, ref.key)
        and p.scheduler_name == pod.scheduler_name
    ]
    report = _NodeReport(cache, framework)
    report.target = pod.key
    queue: SchedulingQueue[PodInfo] = SchedulingQueue(lambda: 0.0)
    cycle = Scheduler(cache, queue, {pod.scheduler_name: framework}, DryRunBinder(), report)
    outcomes: list[GroupOutcome] = []
    cycle.groups = GroupCycle(levels, lambda: 0.0, outcomes.append)
    cycle.groups.served |= {SOURCE_SCHEDULER_PLUGINS, SOURCE_KUBERNETES}
    for spec in groups:
        cycle.groups.set_spec(spec)
    for bound in cache.snapshot.pods:  # members already bound count for the group
        for other in bound.values():
            cycle.groups.observe(other)
    queue.add(pod.key, pod.priority, pod.creation_timestamp, pod)
    queued = queue.pop()
    assert queued is not None
    for member in members:
        cycle.enqueue(member)
    decisions = cycle.schedule(queued)
    for decision in decisions:
        if decision.assumed is not None:
            drive(cycle.bind(decision.assumed))
    for member in (pod, *members):  # a dry run: the cache is left as it was
        cache.remove_pod(member.key)
    mine = next(d for d in decisions if d.pod.key == pod.key)
    outcome = outcomes[-1] if outcomes else None
    result = report.result
    placed = mine.assumed is not None
    document: dict[str, Any] = {
        "pod": pod.key,
        "node": mine.assumed.node if mine.assumed is not None else None,
        "message": None if placed else mine.message,
    }
    if mine.assumed is not None and mine.assumed.gpus:
        document["gpus"] = list(mine.assumed.gpus)
    document["nodes"] = report.nodes if result is not None else {}
    document["preemption"] = _preemption_part(report.plan)
    document["group"] = _group_part(outcome, ref.key)
    return document


def _group_part(outcome: GroupOutcome | None, key: str) -> dict[str, Any]:
    if outcome is None:
        return {"name": key, "minMember": None, "members": {}, "domain": None, "message": None}
    return {
        "name": outcome.spec.key,
        "minMember": outcome.spec.min_member,
        "members": {
            member: {"node": node, "gpus": list(gpus)}
            for member, (node, gpus) in outcome.members.items()
        },
        "domain": (
            {"key": outcome.domain[0], "value": outcome.domain[1]} if outcome.domain else None
        ),
        "domainReason": outcome.domain_note,
        "message": outcome.message,
    }


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
                if entry.get("busbw") is not None:
                    detail += f" busbw {entry['busbw']:g} GB/s"
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
    plan = document.get("preemption")
    if plan is not None:
        victims = plan["victims"]
        gpus = f" (GPUs {','.join(map(str, plan['gpus']))})" if plan.get("gpus") else ""
        console.print(
            f"preemption: would run on {plan['node']}{gpus} after evicting "
            f"{len(victims)} pod(s): {', '.join(victims)} (dry run: nothing evicted)"
        )
        for member, node in (plan.get("members") or {}).items():
            console.print(f"preemption: pod group member {member} -> {node}")
    for note in document.get("notes", []):
        console.print(f"note: {note}")
    group = document.get("group")
    if group is not None:
        console.print(_group_table(group), end="")
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines()) + "\n"


def _group_table(group: Mapping[str, Any]) -> str:
    """The group's placement for people: one line per member."""
    lines = [f"pod group {group['name']} (minMember {group['minMember']}):"]
    domain = group.get("domain")
    if group.get("message"):
        lines[0] += f" not placed: {group['message']}"
    elif domain is not None:
        lines[0] += f" placed in {domain['key']}={domain['value']}"
    else:
        lines[0] += " placed"
    if group.get("domainReason"):
        lines.append(f"  domain: {group['domainReason']}")
    for member, where in group["members"].items():
        node = where["node"] or "-"
        gpus = ",".join(map(str, where["gpus"]))
        lines.append(f"  {member} -> {node}" + (f" gpus {gpus}" if gpus else ""))
    return "\n".join(lines) + "\n"


def run_explain(args: argparse.Namespace) -> int:
    """CLI entry: exit 0 whether or not the pod fits, 2 with one line for bad input."""
    from plugins import frameworks_for, gpu_resource, topology_levels

    try:
        flags = (("--snapshot", args.snapshot), ("--pod", args.pod), ("--config", args.config))
        stdin = [f"{flag} -" for flag, value in flags if value == "-"]
        if len(stdin) > 1:
            raise ExplainError(f"{' and '.join(stdin)}: only one of them can read stdin")
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
        cluster = load_cluster(args.snapshot, Cache(gpu_resource(config)))
        try:
            pod = resolve_priority(pod, cluster.classes)
        except ModelError as exc:
            raise ExplainError(f"{args.pod}: {exc}") from None
    except ExplainError as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2
    document = explain(
        cluster.cache,
        pod,
        framework,
        pending=cluster.pending,
        groups=cluster.groups,
        levels=topology_levels(config),
    )
    if args.output == "json":
        print(json.dumps(document, indent=2))
    else:
        print(report(document, framework.weights), end="")
    return 0
