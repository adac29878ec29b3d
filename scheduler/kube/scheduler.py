"""The in-cluster scheduler: informers -> cache and queue -> one cycle at a time -> bind.

Everything runs on one asyncio loop. Watch events update the cache (all pods of every
scheduler, all nodes) and the queue (our pending pods). The scheduling loop pops one pod and
runs the core's scheduling cycle (`scheduler.core.cycle`) on the live snapshot: the pod is
assumed in the cache (the next cycle sees its resources, ports and GPUs at once) and its
binding cycle runs as a task, ending in `KubeBinder`: one POST of pods/binding whose
annotations carry the chosen GPU set (the API server copies them onto the pod in the write
that sets spec.nodeName). This module observes the cycle (`CycleHooks`) for events, the
PodScheduled condition, metrics and logs.

Invariants: a pod is bound at most once (one binding in flight per pod, and the API server
answers a second binding with 409, after which we drop ours); a pod is never silently
dropped (it stays in the queue until it is bound, deleted or no longer ours).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import structlog

from scheduler.assembly import apply_backoff, assemble
from scheduler.core.cache import Cache
from scheduler.core.config import SchedulerConfiguration
from scheduler.core.cycle import Assumed, CycleHooks, Scheduler
from scheduler.core.disruption import DisruptionBudget
from scheduler.core.framework import (
    BindOutcome,
    BindResult,
    Framework,
    ScheduleResult,
)
from scheduler.core.model import (
    GROUP_ANNOTATIONS,
    ModelError,
    NamespaceInfo,
    NodeInfo,
    PodInfo,
    WorkloadInfo,
)
from scheduler.core.preemption import Plan
from scheduler.core.queue import ClusterEvent, QueuedPod, SchedulingQueue, eligible
from scheduler.core.snapshot import Snapshot
from scheduler.core.topology.schema import (
    ANNOTATION_ASSIGNMENTS,
    ANNOTATION_GPUS,
    ANNOTATION_TOPOLOGY,
    format_gpu_indices,
)
from scheduler.kube.client import STRATEGIC_PATCH, Abandoned, ApiError, KubeClient
from scheduler.kube.discovery import ServerAPIs
from scheduler.kube.events import EventRecorder, ObjectRef, rfc3339
from scheduler.kube.groups import KubeGroups
from scheduler.kube.informer import Backoff, Reflector
from scheduler.kube.metrics import Metrics
from scheduler.kube.ratelimit import Priority
from scheduler.kube.volumes import StorageWatches

Obj = dict[str, Any]
log = structlog.get_logger("topo_scheduler")

POD_FIELD_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"


@dataclass
class Options:
    """Timings and limits; tests shorten them."""

    # None: the configuration's podInitialBackoffSeconds / podMaxBackoffSeconds (1 s, 10 s)
    initial_backoff: float | None = None
    max_backoff: float | None = None
    max_unschedulable: float = 300.0
    watch_timeout: int = 300
    reflector_backoff: Backoff = field(default_factory=Backoff)
    max_bindings_in_flight: int = 512
    event_workers: int = 4
    shutdown_grace: float = 30.0
    clock: Callable[[], float] = time.monotonic


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


class KubeScheduler(CycleHooks):
    """One scheduler process: caches always warm, scheduling only while `active`."""

    def __init__(
        self,
        client: KubeClient,
        config: SchedulerConfiguration,
        frameworks: dict[str, Framework],
        *,
        metrics: Metrics | None = None,
        recorder: EventRecorder | None = None,
        options: Options | None = None,
        apis: ServerAPIs | None = None,
    ) -> None:
        self.client = client
        self.options = options or Options()
        self.apis = apis or ServerAPIs()  # unknown: every API taken to be served
        self.metrics = metrics or Metrics()
        self.recorder = recorder or EventRecorder(client)
        self.config = config
        self.frameworks = frameworks
        self.names = frozenset(frameworks)
        self.binder = KubeBinder(self)
        # the one assembly (scheduler.assembly): the cache accounts GPUTopology's resource
        # (a changed resourceName applies on restart), the queue's order and backoff, the
        # cycle, the group algorithm
        assembly = assemble(
            config,
            self.binder,
            clock=self.options.clock,
            frameworks=frameworks,
            hooks=self,
            initial_backoff=self.options.initial_backoff,
            max_backoff=self.options.max_backoff,
            max_unschedulable=self.options.max_unschedulable,
        )
        self.cache: Cache = assembly.cache
        self.queue: SchedulingQueue[PodInfo] = assembly.queue
        self.cycle: Scheduler = assembly.cycle
        assert assembly.groups is not None
        # PodGroup discovery and watches, status writes; the group algorithm
        self.groups = KubeGroups(self, assembly.groups)
        self.pods = Reflector(
            client,
            "/api/v1/pods",
            _GuardedHandler("Pod", self._pods_upsert, self._pods_delete),
            name="pods",
            # kube-scheduler's: finished pods hold no resources; one that finishes arrives as
            # DELETED on this watch (it stops matching), and is not kept at all
            field_selector=POD_FIELD_SELECTOR,
            watch_timeout=self.options.watch_timeout,
            backoff=self.options.reflector_backoff,
            on_relist=self._relisted,
        )
        self.nodes = Reflector(
            client,
            "/api/v1/nodes",
            _GuardedHandler("Node", self._nodes_upsert, self._nodes_delete),
            name="nodes",
            watch_timeout=self.options.watch_timeout,
            backoff=self.options.reflector_backoff,
            on_relist=self._relisted,
        )
        # claims, volumes, CSI objects, ResourceClaims; the writer of VolumeBinding's PreBind
        self.storage_watches = StorageWatches(self)
        self.cache.snapshot.storage.writer = self.storage_watches
        # PodDisruptionBudgets (policy/v1), read by preemption to prefer fewer violations
        self.budgets = Reflector(
            client,
            "/apis/policy/v1/poddisruptionbudgets",
            _GuardedHandler("PodDisruptionBudget", self._budgets_upsert, self._budgets_delete),
            name="poddisruptionbudgets",
            watch_timeout=self.options.watch_timeout,
            backoff=self.options.reflector_backoff,
            on_relist=self._relisted,
            when_unserved="preemption sees no PodDisruptionBudgets (policy/v1: Kubernetes 1.21+)",
        )
        if not self.apis.serves_path(self.budgets.path):
            self.budgets.mark_unserved()
        # Namespace labels feed the namespaceSelector of pod (anti-)affinity terms.
        self.namespaces = Reflector(
            client,
            "/api/v1/namespaces",
            _GuardedHandler("Namespace", self._namespaces_upsert, self._namespaces_delete),
            name="namespaces",
            watch_timeout=self.options.watch_timeout,
            backoff=self.options.reflector_backoff,
            on_relist=self._relisted,
        )
        # Services, ReplicationControllers, ReplicaSets and StatefulSets: the selectors of
        # PodTopologySpread's default constraints (kube's DefaultSelector).
        self.workloads = [
            Reflector(
                client,
                path,
                _GuardedHandler(
                    kind,
                    functools.partial(self._workloads_upsert, kind),
                    functools.partial(self._workloads_delete, kind),
                ),
                name=name,
                watch_timeout=self.options.watch_timeout,
                backoff=self.options.reflector_backoff,
                on_relist=self._relisted,
            )
            for kind, name, path in WORKLOAD_PATHS
        ]
        self.foreign: set[str] = set()  # unbound pods of other schedulers
        self.infos: dict[str, PodInfo] = {}  # last parse of every pod, for the fast path
        self.binding: dict[str, asyncio.Task[None]] = {}
        # pod key -> the PodScheduled=False condition we set: (reason, message, transition time)
        self.conditions: dict[str, tuple[str, str, str]] = {}
        self.queued_at: dict[str, float] = {}  # pod key -> when first seen pending
        # pod key -> its decision, logged with the binding's outcome (one line per pod)
        self.decisions: dict[str, dict[str, Any]] = {}
        self.active = False  # scheduling allowed (leader, not shutting down)
        self.aborting = False  # leadership lost: do not start new binding requests
        self._wakeup = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.scheduled = 0
        self._gauges_at = 0.0

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        return (
            all(r.synced.is_set() for r in self._reflectors())
            and self.groups.is_synced
            and self.storage_watches.synced
        )

    def _reflectors(self) -> list[Reflector]:
        return [self.nodes, self.namespaces, *self.workloads, self.budgets, self.pods]

    async def start(self) -> None:
        """Start informers and event workers (standbys run these too)."""
        self._tasks.append(asyncio.create_task(self.nodes.run(), name="nodes-informer"))
        for reflector in (self.namespaces, *self.workloads, self.budgets):
            self._tasks.append(
                asyncio.create_task(reflector.run(), name=f"{reflector.name}-informer")
            )
        self._tasks.append(asyncio.create_task(self._pods_after_nodes(), name="pods-informer"))
        self._tasks.append(asyncio.create_task(self.groups.run(), name="podgroups"))
        self._tasks.append(asyncio.create_task(self.storage_watches.run(), name="storage"))
        for i in range(self.options.event_workers):
            self._tasks.append(asyncio.create_task(self.recorder.run(), name=f"events-{i}"))

    async def _pods_after_nodes(self) -> None:
        # nodes first: bound pods then land on known nodes with known resources
        await self.nodes.synced.wait()
        await self.pods.run()

    async def wait_synced(self) -> None:
        for reflector in self._reflectors():
            await reflector.synced.wait()
        await self.groups.synced()
        await self.storage_watches.wait_synced()

    async def schedule_loop(self) -> None:
        """Pop and schedule while `active`; returns when deactivated."""
        self.active = True
        self._wakeup.set()
        while self.active:
            qp = self.queue.pop()
            if qp is None:
                self._update_gauges()
                wait = self.queue.next_wakeup()
                self._wakeup.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait if wait is not None else 1.0):
                        await self._wakeup.wait()
                continue
            self.schedule_one(qp)
            now = time.monotonic()
            if now - self._gauges_at > 1.0:  # keep gauges fresh during long bursts
                self._gauges_at = now
                self._update_gauges()
            # let watch events and bindings progress between cycles
            await asyncio.sleep(0)

    def stop_scheduling(self) -> None:
        self.active = False
        self._wakeup.set()

    async def drain_bindings(self, timeout: float) -> None:
        """Wait for in-flight bindings to finish (bounded)."""
        tasks = list(self.binding.values())
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=timeout)
            if pending:
                log.warning("bindings still in flight at shutdown", count=len(pending))

    async def close(self) -> None:
        tasks = list(self._tasks)  # done callbacks edit the list while we wait
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    def apply_config(
        self, config: SchedulerConfiguration, frameworks: dict[str, Framework]
    ) -> None:
        """Use a new configuration from the next cycle; re-sort pending pods by owner.

        A new podInitialBackoffSeconds / podMaxBackoffSeconds applies to backoffs computed
        from now on; pods already backing off keep the time they were given.
        """
        self.config = config
        apply_backoff(self.queue, config, self.options.initial_backoff, self.options.max_backoff)
        self.groups.apply_config(config)
        self.frameworks = frameworks
        self.cycle.frameworks = dict(frameworks)
        self.names = frozenset(frameworks)
        for obj in list(self.pods.known.values()):
            if not (obj.get("spec") or {}).get("nodeName"):  # bound pods do not change owner
                self._pods_upsert(obj, None)
        self.queue.move_all(ClusterEvent.CONFIG_CHANGE)
        self._wakeup.set()

    def _relisted(self, name: str) -> None:
        self.metrics.relists.labels(name).inc()
        log.info("informer re-listed", informer=name)

    # -- one scheduling cycle -------------------------------------------------------------

    def schedule_one(self, queued: QueuedPod[PodInfo]) -> None:
        """Run the scheduling cycle for one popped pod; an assumed pod's binding cycle runs
        as a task."""
        for decision in self.cycle.schedule(queued):  # a pod group's members together
            if decision.assumed is not None:
                key = decision.pod.key
                self.binding[key] = asyncio.create_task(
                    self._binding_cycle(decision.assumed), name=f"bind {key}"
                )

    async def _binding_cycle(self, assumed: Assumed) -> None:
        try:
            await self.cycle.bind(assumed)
        finally:
            self.binding.pop(assumed.pod.key, None)
            self._wakeup.set()

    # -- what the cycle reports (CycleHooks) ----------------------------------------------

    def failed(
        self,
        pod: PodInfo,
        profile: str,
        message: str,
        elapsed: float,
        error: Exception | None = None,
    ) -> None:
        self.metrics.schedule_attempts.labels("error", profile).inc()
        self.metrics.attempt_duration.labels("error", profile).observe(elapsed)
        log.error("scheduling error", pod=pod.key, error=message, exc_info=error)
        # visible like kube's: a FailedScheduling Event, PodScheduled=False SchedulerError
        self._report_failure(pod, "SchedulerError", message)

    def assumed(self, pod: PodInfo, result: ScheduleResult, attempts: int, elapsed: float) -> None:
        self.metrics.algorithm_duration.observe(elapsed)
        self.metrics.schedule_attempts.labels("scheduled", result.profile).inc()
        if result.allocation is not None and result.allocation.score is not None:
            self.metrics.gpu_set_quality.observe(result.allocation.score)
        if log.is_enabled_for(logging.INFO):  # the top scores cost a sort: only when logged
            self.decisions[pod.key] = {
                "pod": pod.key,
                "node": result.node,
                "gpus": format_gpu_indices(result.gpus) if result.gpus else None,
                "gpu_set_score": result.allocation.score if result.allocation else None,
                "top_scores": _top_scores(result, self.cache.snapshot),
                "attempts": attempts,
                "duration_ms": round(elapsed * 1000, 3),
            }

    def bound(self, assumed: Assumed, bind_seconds: float) -> None:
        pod, node, gpus = assumed.pod, assumed.node, assumed.gpus
        key = pod.key
        self.scheduled += 1
        total = time.perf_counter() - assumed.started
        self.metrics.attempt_duration.labels("scheduled", assumed.framework.profile).observe(total)
        # kept for us even when the watch showed the binding before the POST returned
        queued = self.queued_at.pop(key, None)
        if queued is not None:
            label = str(min(max(assumed.attempts, 1), 15))
            self.metrics.e2e_duration.labels(label).observe(self.options.clock() - queued)
        self.conditions.pop(key, None)
        note = f"Successfully assigned {key} to {node}"
        if gpus:
            note += f" with GPUs {format_gpu_indices(gpus)}"
        ref = ObjectRef("Pod", pod.namespace, pod.name, pod.uid)
        self.recorder.record(ref, "Normal", "Scheduled", "Binding", note)
        # one line per decision, once its binding succeeded (kube: "Successfully bound pod")
        decision = self.decisions.pop(key, None) or {"pod": key, "node": node}
        log.info("pod scheduled", **decision, binding_ms=round(bind_seconds * 1000, 3))

    def unbound(self, assumed: Assumed, result: BindResult, requeued: bool) -> None:
        pod = assumed.pod
        self.decisions.pop(pod.key, None)
        failed = result.outcome in (BindOutcome.ERROR, BindOutcome.CONFLICT)
        if failed and pod.scheduler_name in self.names:
            # kube: a FailedScheduling Event and PodScheduled=False, reason SchedulerError
            self._report_failure(pod, "SchedulerError", f"Binding rejected: {result.message}")
        if not requeued and result.outcome is not BindOutcome.GONE:
            self._requeue(pod)
        if pod.key not in self.queue:
            self.queued_at.pop(pod.key, None)

    def unschedulable(self, pod: PodInfo, profile: str, message: str, elapsed: float) -> None:
        self.metrics.algorithm_duration.observe(elapsed)
        self.metrics.schedule_attempts.labels("unschedulable", profile).inc()
        self.metrics.attempt_duration.labels("unschedulable", profile).observe(elapsed)
        log.info(
            "pod unschedulable",
            pod=pod.key,
            message=message,
            duration_ms=round(elapsed * 1000, 3),
        )
        self._report_failure(pod, "Unschedulable", message)

    def _report_failure(self, pod: PodInfo, reason: str, message: str) -> None:
        """A FailedScheduling Warning Event and PodScheduled=False (patched when it changes)."""
        obj = self.pods.known.get(pod.key)
        if obj is not None and (obj.get("spec") or {}).get("nodeName"):
            return  # bound meanwhile (e.g. a binding that timed out but went through)
        ref = ObjectRef("Pod", pod.namespace, pod.name, pod.uid)
        self.recorder.record(ref, "Warning", "FailedScheduling", "Scheduling", message)
        prev = self.conditions.get(pod.key)
        if prev is not None and prev[:2] == (reason, message):
            return
        # kube changes lastTransitionTime only when the status changes: while it stays False
        # (another reason or message), the time it became False is kept
        since = prev[2] if prev is not None else self._false_since(pod)
        if since is None:
            since = rfc3339()
        self.conditions[pod.key] = (reason, message, since)
        self._spawn(self._set_condition(pod, reason, message, since))

    def _false_since(self, pod: PodInfo) -> str | None:
        """lastTransitionTime of the pod's PodScheduled condition when it is already False."""
        obj = self.pods.known.get(pod.key)
        if obj is None or (obj.get("metadata") or {}).get("uid") != pod.uid:
            return None
        for cond in (obj.get("status") or {}).get("conditions") or []:
            if isinstance(cond, dict) and cond.get("type") == "PodScheduled":
                since = cond.get("lastTransitionTime")
                if cond.get("status") == "False" and isinstance(since, str) and since:
                    return since
        return None

    def _forget_task(self, task: asyncio.Task[None]) -> None:
        with contextlib.suppress(ValueError):
            self._tasks.remove(task)

    async def _set_condition(self, pod: PodInfo, reason: str, message: str, since: str) -> None:
        """PodScheduled=False with `reason` (Unschedulable, SchedulerError), as kube sets it."""
        body = {
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": reason,
                        "message": message,
                        "lastProbeTime": None,
                        "lastTransitionTime": since,
                    }
                ]
            }
        }
        try:
            await self.client.patch(
                f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status",
                body,
                STRATEGIC_PATCH,
                priority=Priority.STATUS,  # after every waiting binding
            )
        except ApiError as exc:
            if exc.status != 404:
                log.warning("pod condition not updated", pod=pod.key, error=str(exc))
            self.conditions.pop(pod.key, None)

    def _node_live(self, name: str) -> bool:
        slot = self.cache.snapshot.index.get(name)
        return slot is not None and bool(self.cache.snapshot.live[slot])

    def _requeue(self, pod: PodInfo) -> None:
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
            self.queued_at.setdefault(pod.key, self.options.clock())
        log.info("pod re-queued after a failed binding", pod=pod.key)

    # -- informer handlers ----------------------------------------------------------------

    def _parse_pod(self, obj: Obj, old: Obj | None) -> PodInfo:
        """PodInfo for a watch event; reuses the last parse when only status moved on.

        Binding and status updates (most events) change spec.nodeName, status and
        annotations only; re-parsing containers and quantities for them is the costly part.
        """
        md = obj.get("metadata") or {}
        # `prev` is the parse of `old`: an event whose object could not be read drops it
        # (`_pods_upsert`), so an unreadable version in between is never skipped over.
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

    def _pods_upsert(self, obj: Obj, old: Obj | None) -> None:
        try:
            pod = self._parse_pod(obj, old)
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
                self.groups.cycle.forget(stale)
            if not (obj.get("spec") or {}).get("nodeName"):  # a bound one keeps counting
                self.queue.delete(key)
                self.cycle.forget_nomination(key)
            if eligible(obj, self.names):
                ref = ObjectRef(
                    "Pod", str(md.get("namespace")), str(md.get("name")), str(md.get("uid") or "")
                )
                self.recorder.record(ref, "Warning", "FailedScheduling", "Scheduling", str(exc))
            return
        key = pod.key
        prev = self.infos.get(key)
        self.infos[key] = pod
        if prev is not None and prev.pod_group != pod.pod_group:
            self.groups.cycle.forget(prev)  # it left its group (or its group cannot be read)
        # one of ours, bound, with parts that cannot be read (logged by the model): an event
        # on the pod when what cannot be read changes, not on every status update
        if (
            pod.unreadable
            and pod.scheduler_name in self.names
            and (prev is None or prev.uid != pod.uid or prev.unreadable != pod.unreadable)
        ):
            ref = ObjectRef("Pod", pod.namespace, pod.name, pod.uid)
            left_out = "; ".join(pod.unreadable)
            note = f"Counted on {pod.node_name} with what can be read, without: {left_out}"
            self.recorder.record(ref, "Warning", "Unreadable", "Scheduling", note)
        if pod.node_name:
            self.groups.cycle.observe(pod)  # a bound member counts for its group
            was_terminal = old is not None and (old.get("status") or {}).get("phase") in (
                "Succeeded",
                "Failed",
            )
            self.cache.add_pod(pod)
            self.queue.delete(key)
            self.cycle.forget_nomination(key)
            self.foreign.discard(key)
            if key not in self.binding:  # else our binding records the SLI when it returns
                self.queued_at.pop(key, None)
            # a pod placed in a domain can satisfy a waiting pod's affinity or spread
            newly_bound = old is None or not (old.get("spec") or {}).get("nodeName")
            if (
                newly_bound
                and not pod.terminal
                and self.queue.move_if(ClusterEvent.POD_ADD, waits_on_other_pods)
            ):
                self._wakeup.set()
            if pod.terminal and not was_terminal:
                self.queue.move_all(ClusterEvent.POD_DELETE)
                self._wakeup.set()
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
            elif self.cycle.enqueue(pod) is None:  # else held back by a PreEnqueue plugin
                self.queued_at.setdefault(key, self.options.clock())
            self._wakeup.set()
            return
        self.queue.delete(key)
        self.queued_at.pop(key, None)
        if pod.scheduler_name not in self.names and not pod.terminal and not pod.deletion_timestamp:
            self.foreign.add(key)
        else:
            self.foreign.discard(key)

    def _pods_delete(self, obj: Obj) -> None:
        md = obj.get("metadata") or {}
        key = f"{md.get('namespace')}/{md.get('name')}"
        bound = bool((obj.get("spec") or {}).get("nodeName"))
        held = self.cache.get(key) is not None
        info = self.infos.pop(key, None)
        if info is not None:
            self.groups.cycle.forget(info)
        self.cache.remove_pod(key)
        self.queue.delete(key)
        self.cycle.forget_nomination(key)
        self.foreign.discard(key)
        self.conditions.pop(key, None)
        self.queued_at.pop(key, None)
        self.decisions.pop(key, None)
        self.recorder.forget(str(md.get("namespace")), str(md.get("name")))
        if bound or held:
            self.queue.move_all(ClusterEvent.POD_DELETE)
            self._wakeup.set()

    def _nodes_upsert(self, obj: Obj, old: Obj | None) -> None:
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
        self._wakeup.set()

    def _nodes_delete(self, obj: Obj) -> None:
        name = str((obj.get("metadata") or {}).get("name"))
        self.cache.remove_node(name)
        log.info("node removed", node=name)

    def _budgets_upsert(self, obj: Obj, old: Obj | None) -> None:
        try:
            self.cache.set_budget(DisruptionBudget.from_object(obj))
        except ModelError as exc:
            log.error("PodDisruptionBudget not understood", error=str(exc))

    def _budgets_delete(self, obj: Obj) -> None:
        md = obj.get("metadata") or {}
        self.cache.remove_budget(f"{md.get('namespace') or 'default'}/{md.get('name')}")

    # -- preemption (CycleHooks) ----------------------------------------------------------

    def preempt(self, plan: Plan) -> None:
        """kube's prepareCandidate: each victim gets the DisruptionTarget condition, is
        deleted with its grace period, and a `Preempted` event names the preemptor."""
        log.info(
            "preempting",
            pod=plan.preemptor.key,
            node=plan.node,
            victims=[v.pod.key for v in plan.victims],
            pdb_violations=plan.pdb_violations,
        )
        self.metrics.preemption_victims.observe(len(plan.victims))
        self._spawn(self._evict(plan))

    def nominated(self, pod: PodInfo, node: str | None) -> None:
        """`status.nominatedNodeName` set (or cleared, None) as kube patches it."""
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status"
        self._spawn(self._patch_quietly(pod, path, {"status": {"nominatedNodeName": node}}))

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.append(task)
        task.add_done_callback(self._forget_task)

    async def _patch_quietly(self, pod: PodInfo, path: str, body: Obj) -> bool:
        try:
            await self.client.patch(path, body, STRATEGIC_PATCH)
        except ApiError as exc:
            if exc.status != 404:
                log.warning("pod status not updated", pod=pod.key, error=str(exc))
            return False
        return True

    async def _evict(self, plan: Plan) -> None:
        preemptor = plan.preemptor
        for victim in plan.victims:
            pod = victim.pod
            if pod.deletion_timestamp is not None:
                continue  # graceful deletion already started: no second call (kube's)
            base = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}"
            condition = {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "PreemptionByScheduler",
                "message": f"{preemptor.scheduler_name}: preempting to accommodate a higher "
                "priority pod",
                "lastTransitionTime": rfc3339(),
            }
            if not await self._patch_quietly(
                pod, f"{base}/status", {"status": {"conditions": [condition]}}
            ):
                continue
            try:
                await self.client.delete(base)
            except ApiError as exc:
                if exc.status != 404:
                    log.warning("victim not deleted", pod=pod.key, error=str(exc))
                continue
            self.recorder.record(
                ObjectRef("Pod", pod.namespace, pod.name, pod.uid),
                "Normal",
                "Preempted",
                "Preempting",
                f"Preempted by pod {preemptor.uid or preemptor.key} on node {victim.node}",
            )

    def _namespaces_upsert(self, obj: Obj, old: Obj | None) -> None:
        try:
            namespace = NamespaceInfo.from_object(obj)
        except ModelError as exc:
            log.error("namespace not understood", error=str(exc))
            return
        before = dict(self.cache.snapshot.namespaces.get(namespace.name) or {})
        self.cache.add_namespace(namespace)
        if old is not None and before != dict(namespace.labels):
            # a relabelled namespace can satisfy a pod's namespaceSelector
            self.queue.move_all(ClusterEvent.NAMESPACE_UPDATE)
            self._wakeup.set()

    def _workloads_upsert(self, kind: str, obj: Obj, old: Obj | None) -> None:
        try:
            workload = WorkloadInfo.from_object(obj, kind)
        except ModelError as exc:
            log.error("workload not understood", error=str(exc))
            return
        self.cache.add_workload(workload)

    def _workloads_delete(self, kind: str, obj: Obj) -> None:
        md = obj.get("metadata") or {}
        namespace = str(md.get("namespace") or "default")
        self.cache.remove_workload(kind, namespace, str(md.get("name")))

    def _namespaces_delete(self, obj: Obj) -> None:
        self.cache.remove_namespace(str((obj.get("metadata") or {}).get("name")))

    # -- gauges ---------------------------------------------------------------------------

    def _update_gauges(self) -> None:
        for queue, count in self.queue.pending().items():
            self.metrics.pending_pods.labels(queue).set(count)
        self.metrics.cache_size.labels("nodes").set(self.cache.node_count)
        self.metrics.cache_size.labels("pods").set(self.cache.pod_count)
        self.metrics.cache_size.labels("assumed_pods").set(len(self.binding))
        self.metrics.foreign_pending.set(len(self.foreign))


class KubeBinder:
    """The Binder of the in-cluster scheduler: one POST of pods/binding per pod, at most
    `max_bindings_in_flight` at a time.

    The GPU set travels as an annotation of the Binding: the API server merges a Binding's
    `metadata.annotations` into the pod's in the same write that sets `spec.nodeName`
    (registry/core/pod/storage), so one request annotates and binds, and a binding that fails
    leaves no annotation behind.
    """

    def __init__(self, owner: KubeScheduler) -> None:
        self.owner = owner
        self._slots = asyncio.Semaphore(owner.options.max_bindings_in_flight)

    async def bind(self, pod: PodInfo, node: str, gpus: tuple[int, ...]) -> BindResult:
        owner = self.owner
        async with self._slots:
            t0 = time.perf_counter()
            result = await self._post(pod, node, gpus)
            elapsed = time.perf_counter() - t0
        owner.metrics.bind_results.labels(result.outcome.value).inc()
        owner.metrics.binding_duration.labels(result.outcome.value).observe(elapsed)
        return result

    async def _post(self, pod: PodInfo, node: str, gpus: tuple[int, ...]) -> BindResult:
        owner = self.owner

        def still_wanted() -> bool:
            """Asked again right before the request leaves, after the client's rate-limit
            wait: a node deleted meanwhile must not receive the pod."""
            if owner.aborting or not owner.cycle.still_assumed(pod):
                return False
            if not owner._node_live(node):
                log.info("node gone before binding", pod=pod.key, node=node)
                return False
            return True

        if not still_wanted():
            return BindResult(BindOutcome.ABORTED)
        metadata: Obj = {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid}
        if gpus:
            metadata["annotations"] = {ANNOTATION_GPUS: format_gpu_indices(gpus)}
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            # the answer is a Status, not a Pod: only the status code matters
            await owner.client.post(
                f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/binding",
                binding,
                priority=Priority.BIND,
                still_wanted=still_wanted,
            )
        except Abandoned:
            return BindResult(BindOutcome.ABORTED)
        except ApiError as exc:
            if exc.status == 404:
                return BindResult(BindOutcome.GONE)
            if exc.status == 409:
                log.info("binding conflict", pod=pod.key, node=node, message=exc.message)
                return BindResult(BindOutcome.CONFLICT, str(exc))
            log.warning("binding failed", pod=pod.key, node=node, error=str(exc))
            return BindResult(BindOutcome.ERROR, str(exc))
        return BindResult(BindOutcome.BOUND)


def _same_group_annotations(new: Obj, old: Obj) -> bool:
    """The pod group annotations (read into PodInfo.pod_group) did not change."""
    return all(new.get(key) == old.get(key) for key in GROUP_ANNOTATIONS)


WORKLOAD_PATHS = (
    ("Service", "services", "/api/v1/services"),
    ("ReplicationController", "replicationcontrollers", "/api/v1/replicationcontrollers"),
    ("ReplicaSet", "replicasets", "/apis/apps/v1/replicasets"),
    ("StatefulSet", "statefulsets", "/apis/apps/v1/statefulsets"),
)


def waits_on_other_pods(pod: PodInfo) -> bool:
    """Whether a newly placed pod can make this unschedulable pod schedulable: it has
    required pod affinity, or a DoNotSchedule spread constraint (a new pod can raise the
    global minimum)."""
    return bool(pod.pod_affinity.required) or any(
        c.when_unsatisfiable == "DoNotSchedule" for c in pod.spread_constraints
    )


def _top_scores(result: ScheduleResult, snapshot: Snapshot, n: int = 3) -> dict[str, int]:
    totals = result.totals
    if totals.size == 0:
        return {}
    feasible = np.flatnonzero(result.feasible[: totals.size])
    if feasible.size == 0:
        return {}
    best = feasible[np.argsort(-totals[feasible], kind="stable")[:n]]
    return {str(snapshot.names[int(i)]): int(totals[int(i)]) for i in best}


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
    """Watch events of one kind to the scheduler's handlers; an error is logged, not raised."""

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
