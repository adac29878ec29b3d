"""Watch events into the cache and the queue: the in-cluster scheduler's informers.

`ClusterHandlers` lists and watches pods (all of them, every scheduler's; finished ones are
not listed), nodes, PodDisruptionBudgets, namespaces and the workloads whose selectors
PodTopologySpread's default constraints use, and applies each change: bound pods and nodes to
the cache, our pending pods to the queue (through the cycle's PreEnqueue), pods of other
schedulers to the `foreign` count, and the cluster events that can make waiting pods
schedulable to the queue's moves. An object that cannot be read is logged (and, for one of our
pods, reported); a handler never raises into its watch.

It gets the core's cache, queue, cycle and group algorithm, the narrow `AdapterHost`, the
keys of the bindings in flight and what it reports about unreadable pods (`PodReports`);
never the scheduler.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Container
from typing import Any, Protocol

import structlog

from scheduler.core.cache import Cache
from scheduler.core.cycle import Scheduler
from scheduler.core.disruption import DisruptionBudget
from scheduler.core.group import GroupCycle
from scheduler.core.model import (
    GROUP_ANNOTATIONS,
    ModelError,
    NamespaceInfo,
    NodeInfo,
    PodInfo,
    WorkloadInfo,
)
from scheduler.core.queue import ClusterEvent, SchedulingQueue, eligible
from scheduler.core.topology.schema import ANNOTATION_ASSIGNMENTS, ANNOTATION_TOPOLOGY
from scheduler.kube.host import AdapterHost
from scheduler.kube.informer import Reflector

Obj = dict[str, Any]
log = structlog.get_logger("topo_scheduler")

POD_FIELD_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"

WORKLOAD_PATHS = (
    ("Service", "services", "/api/v1/services"),
    ("ReplicationController", "replicationcontrollers", "/api/v1/replicationcontrollers"),
    ("ReplicaSet", "replicasets", "/apis/apps/v1/replicasets"),
    ("StatefulSet", "statefulsets", "/apis/apps/v1/statefulsets"),
)


class PodReports(Protocol):
    """What the handlers report about pods (`reporter.Reporter` implements it)."""

    def unreadable_pending(self, obj: Obj, error: str) -> None: ...

    def unreadable_bound(self, pod: PodInfo) -> None: ...

    def forget(self, namespace: str, name: str) -> None: ...


class ClusterHandlers:
    """The informers that feed the cache and the queue, and their handlers."""

    def __init__(
        self,
        host: AdapterHost,
        *,
        cache: Cache,
        queue: SchedulingQueue[PodInfo],
        cycle: Scheduler,
        groups: GroupCycle,
        reports: PodReports,
        in_flight: Container[str],
        names: frozenset[str],
        clock: Callable[[], float],
    ) -> None:
        self.host = host
        self.cache = cache
        self.queue = queue
        self.cycle = cycle
        self.groups = groups
        self.reports = reports
        self.in_flight = in_flight  # keys of the pods whose binding is in flight
        self.names = names  # our profiles' schedulerNames
        self.clock = clock
        self.foreign: set[str] = set()  # unbound pods of other schedulers
        self.gated: set[str] = set()  # our pending pods held back by a PreEnqueue plugin
        self.infos: dict[str, PodInfo] = {}  # last parse of every pod, for the fast path
        self.queued_at: dict[str, float] = {}  # pod key -> when first seen pending
        self.pods = host.reflector(
            "/api/v1/pods",
            _GuardedHandler("Pod", self.pods_upsert, self.pods_delete),
            name="pods",
            # kube-scheduler's: finished pods hold no resources; one that finishes arrives as
            # DELETED on this watch (it stops matching), and is not kept at all
            field_selector=POD_FIELD_SELECTOR,
        )
        self.nodes = host.reflector(
            "/api/v1/nodes",
            _GuardedHandler("Node", self.nodes_upsert, self.nodes_delete),
            name="nodes",
        )
        # PodDisruptionBudgets (policy/v1), read by preemption to prefer fewer violations
        self.budgets = host.reflector(
            "/apis/policy/v1/poddisruptionbudgets",
            _GuardedHandler("PodDisruptionBudget", self.budgets_upsert, self.budgets_delete),
            name="poddisruptionbudgets",
            when_unserved="preemption sees no PodDisruptionBudgets (policy/v1: Kubernetes 1.21+)",
            check_served=True,
        )
        # Namespace labels feed the namespaceSelector of pod (anti-)affinity terms.
        self.namespaces = host.reflector(
            "/api/v1/namespaces",
            _GuardedHandler("Namespace", self.namespaces_upsert, self.namespaces_delete),
            name="namespaces",
        )
        # Services, ReplicationControllers, ReplicaSets and StatefulSets: the selectors of
        # PodTopologySpread's default constraints (kube's DefaultSelector).
        self.workloads = [
            host.reflector(
                path,
                _GuardedHandler(
                    kind,
                    functools.partial(self.workloads_upsert, kind),
                    functools.partial(self.workloads_delete, kind),
                ),
                name=name,
            )
            for kind, name, path in WORKLOAD_PATHS
        ]

    @property
    def reflectors(self) -> list[Reflector]:
        """Every informer, pods last (they start once the nodes are synced)."""
        return [self.nodes, self.namespaces, *self.workloads, self.budgets, self.pods]

    def apply_names(self, names: frozenset[str]) -> None:
        """Our schedulerNames changed (a new configuration): re-sort pending pods by owner."""
        self.names = names
        for obj in list(self.pods.known.values()):
            if not (obj.get("spec") or {}).get("nodeName"):  # bound pods do not change owner
                self.pods_upsert(obj, None)

    # -- after a binding ------------------------------------------------------------------

    def bound(self, key: str) -> float | None:
        """Our binding succeeded: seconds since the pod was first seen pending (kept for us
        even when the watch showed the binding before the POST returned)."""
        queued = self.queued_at.pop(key, None)
        return None if queued is None else self.clock() - queued

    def unbound(self, pod: PodInfo, gone: bool, requeued: bool) -> None:
        """Our binding did not happen: the pod goes back to the queue unless the cycle
        requeued it or it is gone."""
        if not requeued and not gone:
            self.requeue(pod)
        if pod.key not in self.queue:
            self.queued_at.pop(pod.key, None)

    def requeue(self, pod: PodInfo) -> None:
        """Put a pod whose binding failed back in the queue if it is (again) ours and pending.

        It left the queue while in flight (e.g. a configuration made it not ours, and a later
        one made it ours again while it was still assumed, so it was not re-added): without
        this it would never be scheduled again.
        """
        obj = self.pods.known.get(pod.key)
        if obj is None or (obj.get("metadata") or {}).get("uid") != pod.uid:
            return
        if pod.key in self.queue or not eligible(obj, self.names):
            return
        current = self.infos.get(pod.key)
        if current is None or current.uid != pod.uid:
            return  # dropped as unreadable: it comes back with an update that can be read
        if self.cycle.enqueue(current) is None:
            self.queued_at.setdefault(pod.key, self.clock())
        log.info("pod re-queued after a failed binding", pod=pod.key)

    # -- pods -----------------------------------------------------------------------------

    def parse_pod(self, obj: Obj, old: Obj | None) -> PodInfo:
        """PodInfo for a watch event; reuses the last parse when only status moved on.

        Binding and status updates (most events) change spec.nodeName, status and
        annotations only; re-parsing containers and quantities for them is the costly part.
        """
        md = obj.get("metadata") or {}
        # `prev` is the parse of `old`: an event whose object could not be read drops it
        # (`pods_upsert`), so an unreadable version in between is never skipped over.
        prev = self.infos.get(f"{md.get('namespace') or 'default'}/{md.get('name')}")
        if old is not None and prev is not None and prev.uid == md.get("uid"):
            spec, old_spec = obj.get("spec") or {}, old.get("spec") or {}
            old_md = old.get("metadata") or {}
            annotations, old_annotations = md.get("annotations"), old_md.get("annotations")
            if (
                {k: v for k, v in spec.items() if k != "nodeName"}
                == {k: v for k, v in old_spec.items() if k != "nodeName"}
                and md.get("labels") == old_md.get("labels")
                and md.get("deletionTimestamp") == old_md.get("deletionTimestamp")
                and isinstance(annotations or {}, dict)
                and isinstance(old_annotations or {}, dict)
                and _same_group_annotations(annotations or {}, old_annotations or {})
                # the ResourceClaims made for the pod from templates are named in its status
                and (obj.get("status") or {}).get("resourceClaimStatuses")
                == (old.get("status") or {}).get("resourceClaimStatuses")
            ):
                # node name, phase, annotations and the status fields read again, as
                # strictly as a whole parse reads them (a ModelError when they cannot be)
                return prev.updated(obj)
        return PodInfo.from_object(obj)

    def pods_upsert(self, obj: Obj, old: Obj | None) -> None:
        try:
            pod = self.parse_pod(obj, old)
        except ModelError as exc:
            # Only a pending pod (or one whose name or node cannot be read) gets here: a bound
            # pod is read with what can be read. Nothing is scheduled on a stale copy: the pod
            # leaves the queue and its nomination, and its last parse is dropped (no fast path
            # from it); it comes back in when an update makes it readable.
            md = obj.get("metadata") or {}
            key = f"{md.get('namespace') or 'default'}/{md.get('name')}"
            log.error("pod not understood", pod=key, error=str(exc))
            stale = self.infos.pop(key, None)
            if stale is not None:
                self.groups.forget(stale)
            if not (obj.get("spec") or {}).get("nodeName"):  # a bound one keeps counting
                self.queue.delete(key)
                self.gated.discard(key)
                self.cycle.forget_nomination(key)
            if eligible(obj, self.names):
                self.reports.unreadable_pending(obj, str(exc))
            return
        key = pod.key
        prev = self.infos.get(key)
        self.infos[key] = pod
        if prev is not None and prev.pod_group != pod.pod_group:
            self.groups.forget(prev)  # it left its group (or its group cannot be read)
        # one of ours, bound, with parts that cannot be read (logged by the model): an event
        # on the pod when what cannot be read changes, not on every status update
        if (
            pod.unreadable
            and pod.scheduler_name in self.names
            and (prev is None or prev.uid != pod.uid or prev.unreadable != pod.unreadable)
        ):
            self.reports.unreadable_bound(pod)
        if pod.node_name:
            self.groups.observe(pod)  # a bound member counts for its group
            was_terminal = old is not None and (old.get("status") or {}).get("phase") in (
                "Succeeded",
                "Failed",
            )
            self.cache.add_pod(pod)
            self.queue.delete(key)
            self.cycle.forget_nomination(key)
            self.foreign.discard(key)
            self.gated.discard(key)
            if key not in self.in_flight:  # else our binding records the SLI when it returns
                self.queued_at.pop(key, None)
            # a pod placed in a domain can satisfy a waiting pod's affinity or spread
            newly_bound = old is None or not (old.get("spec") or {}).get("nodeName")
            if (
                newly_bound
                and not pod.terminal
                and self.queue.move_if(ClusterEvent.POD_ADD, waits_on_other_pods)
            ):
                self.host.wake()
            relabelled = not newly_bound and _labels(old) != _labels(obj)
            if (
                relabelled
                and not pod.terminal
                and self.queue.move_if(ClusterEvent.POD_UPDATE, waits_on_pod_labels)
            ):
                self.host.wake()
            if pod.terminal and not was_terminal:
                self.host.retry_unschedulable(ClusterEvent.POD_DELETE)
            return
        if eligible(obj, self.names):
            self.foreign.discard(key)
            cached = self.cache.get(key)
            if key in self.queue:
                changed = old is None or _pod_spec_changed(old, obj)
                self.cycle.nominator.observe(pod)
                self.queue.update(key, pod.priority, pod, changed)
            elif cached is not None and cached.uid == pod.uid:
                return  # placed by us; the watch has not shown the binding yet
            elif self.cycle.enqueue(pod) is None:
                self.gated.discard(key)
                self.queued_at.setdefault(key, self.clock())
            else:  # held back by a PreEnqueue plugin (scheduling gates)
                self.gated.add(key)
            self.host.wake()
            return
        self.queue.delete(key)
        self.queued_at.pop(key, None)
        self.gated.discard(key)
        if pod.scheduler_name not in self.names and not pod.terminal and not pod.deletion_timestamp:
            self.foreign.add(key)
        else:
            self.foreign.discard(key)

    def pods_delete(self, obj: Obj) -> None:
        md = obj.get("metadata") or {}
        key = f"{md.get('namespace')}/{md.get('name')}"
        bound = bool((obj.get("spec") or {}).get("nodeName"))
        held = self.cache.get(key) is not None
        info = self.infos.pop(key, None)
        if info is not None:
            self.groups.forget(info)
        self.cache.remove_pod(key)
        self.queue.delete(key)
        self.cycle.forget_nomination(key)
        self.foreign.discard(key)
        self.gated.discard(key)
        self.queued_at.pop(key, None)
        self.reports.forget(str(md.get("namespace")), str(md.get("name")))
        if bound or held:
            self.host.retry_unschedulable(ClusterEvent.POD_DELETE)

    # -- nodes ----------------------------------------------------------------------------

    def nodes_upsert(self, obj: Obj, old: Obj | None) -> None:
        try:
            node = NodeInfo.from_object(obj)
        except ModelError as exc:
            # Not scheduled onto from a stale copy, nor from a guess at the part that cannot
            # be read (a taint, a label): the node takes no pods until it can be read, while
            # the pods bound to it still count (its slot is not live, as a deleted node's).
            name = (obj.get("metadata") or {}).get("name")
            if not isinstance(name, str) or not name:
                log.error("node not understood", error=str(exc))
                return
            if self.cache.unreadable_nodes.get(name) != str(exc):  # once, not per heartbeat
                log.error("node not understood, no pod is placed on it", node=name, error=str(exc))
            self.cache.set_unreadable_node(name, str(exc))
            return
        snapshot = self.cache.snapshot
        slot = snapshot.slot(node.name)
        gpus = self.cache.gpus
        problem_before = gpus.problem[slot] if slot is not None else None
        was_unreadable = node.name in self.cache.unreadable_nodes
        if was_unreadable:
            log.info("node readable again", node=node.name)
        self.cache.add_node(node)
        problem = gpus.problem[snapshot.index[node.name]]
        if problem and problem != problem_before:  # once per new problem, not per heartbeat
            log.warning("GPU annotation invalid, node is count-only", node=node.name, error=problem)
        if old is None or was_unreadable:
            self.queue.move_all(ClusterEvent.NODE_ADD)
        else:
            before, after = _node_signature(old), _node_signature(obj)
            if before == after:
                return
            topo = before[4:] != after[4:]
            self.queue.move_all(ClusterEvent.NODE_TOPOLOGY if topo else ClusterEvent.NODE_UPDATE)
        self.host.wake()

    def nodes_delete(self, obj: Obj) -> None:
        name = str((obj.get("metadata") or {}).get("name"))
        self.cache.remove_node(name)
        log.info("node removed", node=name)
        # a domain with no node left no longer holds a spread's global minimum down
        if self.queue.move_if(ClusterEvent.NODE_DELETE, spreads_hard):
            self.host.wake()

    def node_live(self, name: str) -> bool:
        slot = self.cache.snapshot.index.get(name)
        return slot is not None and bool(self.cache.snapshot.live[slot])

    # -- PodDisruptionBudgets, namespaces, workloads --------------------------------------

    def budgets_upsert(self, obj: Obj, old: Obj | None) -> None:
        try:
            self.cache.set_budget(DisruptionBudget.from_object(obj))
        except ModelError as exc:
            log.error("PodDisruptionBudget not understood", error=str(exc))

    def budgets_delete(self, obj: Obj) -> None:
        md = obj.get("metadata") or {}
        self.cache.remove_budget(f"{md.get('namespace') or 'default'}/{md.get('name')}")

    def namespaces_upsert(self, obj: Obj, old: Obj | None) -> None:
        try:
            namespace = NamespaceInfo.from_object(obj)
        except ModelError as exc:
            log.error("namespace not understood", error=str(exc))
            return
        before = dict(self.cache.snapshot.namespaces.get(namespace.name) or {})
        self.cache.add_namespace(namespace)
        if old is not None and before != dict(namespace.labels):
            # a relabelled namespace can satisfy a pod's namespaceSelector
            self.host.retry_unschedulable(ClusterEvent.NAMESPACE_UPDATE)

    def namespaces_delete(self, obj: Obj) -> None:
        self.cache.remove_namespace(str((obj.get("metadata") or {}).get("name")))

    def workloads_upsert(self, kind: str, obj: Obj, old: Obj | None) -> None:
        try:
            workload = WorkloadInfo.from_object(obj, kind)
        except ModelError as exc:
            log.error("workload not understood", error=str(exc))
            return
        self.cache.add_workload(workload)

    def workloads_delete(self, kind: str, obj: Obj) -> None:
        md = obj.get("metadata") or {}
        namespace = str(md.get("namespace") or "default")
        self.cache.remove_workload(kind, namespace, str(md.get("name")))


def _node_signature(obj: Obj) -> tuple[Any, ...]:
    """What about a node can change a scheduling decision (not heartbeats)."""
    md = obj.get("metadata") or {}
    st = obj.get("status") or {}
    ann = md.get("annotations") or {}
    pressure = [
        c.get("status") for c in st.get("conditions") or [] if c.get("type") == "MemoryPressure"
    ]
    return (
        repr(md.get("labels")),
        repr(obj.get("spec")),
        repr(st.get("allocatable") or st.get("capacity")),
        repr(pressure),
        ann.get(ANNOTATION_TOPOLOGY),
        ann.get(ANNOTATION_ASSIGNMENTS),
    )


def _pod_spec_changed(old: Obj, new: Obj) -> bool:
    """kube's isPodUpdated: anything but status and resourceVersion-like metadata."""
    o, n = old.get("metadata") or {}, new.get("metadata") or {}
    return (
        old.get("spec") != new.get("spec")
        or o.get("labels") != n.get("labels")
        or o.get("annotations") != n.get("annotations")
    )


def _same_group_annotations(new: Obj, old: Obj) -> bool:
    """The pod group annotations (read into PodInfo.pod_group) did not change."""
    return all(new.get(key) == old.get(key) for key in GROUP_ANNOTATIONS)


def spreads_hard(pod: PodInfo) -> bool:
    """Whether the pod has a DoNotSchedule spread constraint."""
    return any(c.when_unsatisfiable == "DoNotSchedule" for c in pod.spread_constraints)


def waits_on_other_pods(pod: PodInfo) -> bool:
    """Whether a newly placed pod can make this unschedulable pod schedulable: it has
    required pod affinity, or a DoNotSchedule spread constraint (a new pod can raise the
    global minimum)."""
    return bool(pod.pod_affinity.required) or spreads_hard(pod)


def waits_on_pod_labels(pod: PodInfo) -> bool:
    """Whether a bound pod's new labels can make this unschedulable pod schedulable (kube's
    InterPodAffinity and PodTopologySpread register for UpdatePodLabel): required affinity
    or anti-affinity, or a DoNotSchedule spread constraint."""
    return waits_on_other_pods(pod) or bool(pod.pod_affinity.required_anti)


def _labels(obj: Obj | None) -> Any:
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


def _guarded(kind: str, fn: Callable[..., None], *args: Any) -> None:
    """Apply one watch event; a failure is logged with the object and never kills the watch."""
    try:
        fn(*args)
    except Exception as exc:
        md = (args[0].get("metadata") or {}) if args and isinstance(args[0], dict) else {}
        log.exception(
            "event handling failed",
            kind=kind,
            name=md.get("name"),
            namespace=md.get("namespace"),
            error=str(exc),
        )


class _GuardedHandler:
    """Watch events of one kind to the handlers; an error is logged, not raised."""

    def __init__(
        self,
        kind: str,
        upsert: Callable[[Obj, Obj | None], None],
        delete: Callable[[Obj], None],
    ) -> None:
        self.kind = kind
        self.upsert = upsert
        self.delete = delete

    def on_upsert(self, obj: Obj, old: Obj | None) -> None:
        _guarded(self.kind, self.upsert, obj, old)

    def on_delete(self, obj: Obj) -> None:
        _guarded(self.kind, self.delete, obj)
