"""`topo-scheduler explain`: why a pod is Pending, or why it landed where it did.

Reads a cluster snapshot (what `kubectl get nodes,pods,namespaces -A -o yaml` prints, or
multi-document YAML of Nodes, Pods and Namespaces; Namespaces feed `namespaceSelector`;
Services, ReplicaSets, ReplicationControllers and StatefulSets, when present, feed
PodTopologySpread's default constraints) and a Pod manifest, and runs the same cycle the
scheduler runs, on every node, printing each node's verdict, reasons and per-plugin scores.

Three parts: `snapshot` reads the files, `dryrun` runs the one dry run (a single pod, or a
pod group's members through the same cycle), `render` builds the JSON and the table.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from typing import Any

from scheduler.core.cache import Cache
from scheduler.core.config import ConfigError
from scheduler.core.framework import Framework
from scheduler.core.group import GroupSpec
from scheduler.core.model import ModelError, PodInfo
from scheduler.core.network import NetworkBandwidth
from scheduler.core.priority import resolve_priority
from scheduler.core.safeload import one_line
from scheduler.explain.dryrun import DryRunBinder, dry_run
from scheduler.explain.render import document, report
from scheduler.explain.snapshot import (
    Cluster,
    ExplainError,
    load_cluster,
    load_config_file,
    load_pod,
    load_snapshot,
)

__all__ = [
    "Cluster",
    "DryRunBinder",
    "ExplainError",
    "explain",
    "load_cluster",
    "load_pod",
    "load_snapshot",
    "report",
    "run_explain",
]


def explain(
    cache: Cache,
    pod: PodInfo,
    framework: Framework,
    *,
    pending: Iterable[PodInfo] = (),
    groups: Iterable[GroupSpec] = (),
    levels: tuple[str, ...] = (),
    network: NetworkBandwidth | None = None,
    reservation_timeout: float = 0.0,
) -> dict[str, Any]:
    """Run the scheduling cycle for the pod on the snapshot, binding nothing and evicting
    nothing (dry run), and build the JSON report (the stable contract). `pending`: the
    snapshot's pending pods (nominated ones hold room on their node; members of the pod's
    group are placed with it). A pod of a pod group is placed with the group's pending members
    (the group algorithm, `groups` its PodGroup objects, `levels` the topologyLevels, `network`
    the networkBandwidth, `reservation_timeout` the gangReservationSeconds); the report then
    has a `group` part."""
    run = dry_run(
        cache,
        pod,
        framework,
        pending=pending,
        groups=groups,
        levels=levels,
        network=network,
        reservation_timeout=reservation_timeout,
    )
    return document(run)


def run_explain(args: argparse.Namespace) -> int:
    """CLI entry: exit 0 whether or not the pod fits, 2 with one line for bad input."""
    from plugins import frameworks_for, gang_reservation_seconds, gpu_resource, topology_levels
    from plugins.gpu_topology import network_bandwidth

    try:
        flags = (("--snapshot", args.snapshot), ("--pod", args.pod), ("--config", args.config))
        stdin = [f"{flag} -" for flag, value in flags if value == "-"]
        if len(stdin) > 1:
            raise ExplainError(f"{' and '.join(stdin)}: only one of them can read stdin")
        config = load_config_file(args.config)
        try:
            frameworks = frameworks_for(config)
        except ConfigError as exc:
            raise ExplainError(f"{args.config or 'config'}: {exc}") from None
        pod, scheduler_name = load_pod(args.pod)
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
    out = explain(
        cluster.cache,
        pod,
        framework,
        pending=cluster.pending,
        groups=cluster.groups,
        levels=topology_levels(config),
        network=network_bandwidth(config)[0],
        reservation_timeout=gang_reservation_seconds(config),
    )
    if args.output == "json":
        print(json.dumps(out, indent=2))
    else:
        print(report(out, framework.weights), end="")
    return 0
