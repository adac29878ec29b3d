"""The in-cluster scheduler: informers -> cache and queue -> one cycle at a time -> bind.

Everything runs on one asyncio loop. `KubeScheduler` assembles the core (`scheduler.assembly`)
with the adapter's parts and runs the scheduling loop; each part receives only what it uses:

- `handlers.ClusterHandlers`: the informers (pods of every scheduler, nodes, budgets,
  namespaces, workloads) and the handlers that feed the cache and the queue;
- `volumes.StorageWatches`, `dra.DraWatches`, `quotas.QuotaWatches` and `groups.KubeGroups`:
  the storage, DRA (`resource.k8s.io/v1`, discovered), ElasticQuota (discovered; their
  `status.used` written while leading) and PodGroup watches;
- `reporter.Reporter` and `reporter.PodGroupStatus`: what the cycle reports (`CycleHooks`,
  dispatched here) written as Events, the PodScheduled condition, preemption's writes,
  nominations, PodGroup status, metrics and logs;
- `binder.KubeBinder`: the core's `Binder` for the API server, one POST of pods/binding whose
  annotations carry the chosen GPU set (the API server copies them onto the pod in the write
  that sets spec.nodeName), and its `ClaimStatusWriter` (ResourceClaim status at PreBind).

The loop pops one pod and runs the core's scheduling cycle (`scheduler.core.cycle`) on the
live snapshot: the pod is assumed in the cache (the next cycle sees its resources, ports and
GPUs at once) and its binding cycle runs as a task.

Invariants: a pod is bound at most once (one binding in flight per pod, and the API server
answers a second binding with 409, after which we drop ours); a pod is never silently
dropped (it stays in the queue until it is bound, deleted or no longer ours).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from typing import Any

import structlog

from scheduler.assembly import apply_backoff, assemble
from scheduler.core.cache import Cache
from scheduler.core.config import SchedulerConfiguration
from scheduler.core.cycle import Assumed, CycleHooks, Scheduler
from scheduler.core.framework import BindOutcome, BindResult, Framework, ScheduleResult
from scheduler.core.model import PodInfo
from scheduler.core.preemption import Plan
from scheduler.core.queue import ClusterEvent, QueuedPod, SchedulingQueue, Where
from scheduler.kube.binder import KubeBinder
from scheduler.kube.client import KubeClient
from scheduler.kube.discovery import ServerAPIs
from scheduler.kube.dra import DraWatches
from scheduler.kube.events import EventRecorder
from scheduler.kube.groups import KubeGroups
from scheduler.kube.handlers import POD_FIELD_SELECTOR, ClusterHandlers, waits_on_other_pods
from scheduler.kube.host import Host, Options
from scheduler.kube.metrics import Metrics
from scheduler.kube.quotas import QuotaWatches
from scheduler.kube.reporter import PodGroupStatus, Reporter
from scheduler.kube.volumes import StorageWatches

__all__ = [
    "POD_FIELD_SELECTOR",
    "KubeBinder",
    "KubeScheduler",
    "Options",
    "collector_paused_until_synced",
    "waits_on_other_pods",
]

Obj = dict[str, Any]
log = structlog.get_logger("topo_scheduler")


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
        self.host = Host(client, self.apis, self.options, self._relisted)
        self.binder = KubeBinder(
            client,
            self.metrics,
            self._still_wanted,
            max_in_flight=self.options.max_bindings_in_flight,
        )
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
        self.host.queue_backoff = self.queue.backoff_duration
        self.host.move_all = self.queue.move_all
        self.binding: dict[str, asyncio.Task[None]] = {}
        # the reporter reads the pods watch's objects (given below, once the watch exists)
        self.reporter = Reporter(self.host, self.recorder, self.metrics, pods={}, cache=self.cache)
        self.handlers = ClusterHandlers(
            self.host,
            cache=self.cache,
            queue=self.queue,
            cycle=self.cycle,
            groups=assembly.groups,
            reports=self.reporter,
            in_flight=self.binding,
            names=self.names,
            clock=self.options.clock,
        )
        self.reporter.pods = self.handlers.pods.known
        self.pods = self.handlers.pods
        self.nodes = self.handlers.nodes
        self.budgets = self.handlers.budgets
        self.namespaces = self.handlers.namespaces
        self.workloads = self.handlers.workloads
        # claims, volumes, CSI objects; the writer of VolumeBinding's PreBind
        self.storage_watches = StorageWatches(
            self.host, self.cache.snapshot.storage, self.pods.known
        )
        self.cache.snapshot.storage.writer = self.storage_watches
        # DeviceClasses, ResourceClaims, their templates, ResourceSlices (where served)
        self.dra_watches = DraWatches(self.host, self.cache.snapshot.storage)
        # ElasticQuotas (where the CRD is served); their status.used, written while leading
        self.quota_watches = QuotaWatches(self.host, self.cache, lambda: self.active)
        # PodGroup discovery and watches; their status writes
        self.group_status = PodGroupStatus(self.host)
        self.groups = KubeGroups(
            self.host,
            assembly.groups,
            self.cycle,
            self.group_status,
            self.recorder,
            self.metrics,
        )
        self.active = False  # scheduling allowed (leader, not shutting down)
        self.aborting = False  # leadership lost: do not start new binding requests
        self._wakeup = self.host.wakeup
        self._tasks = self.host.tasks  # background tasks: informers, writes, Event workers
        self._gauges_at = 0.0

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        return (
            all(r.synced.is_set() for r in self.handlers.reflectors)
            and self.groups.is_synced
            and self.storage_watches.synced
            and self.dra_watches.synced
            and self.quota_watches.synced
        )

    @property
    def scheduled(self) -> int:
        """Pods bound by this process."""
        return self.reporter.scheduled

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
        self._tasks.append(asyncio.create_task(self.dra_watches.run(), name="dra"))
        self._tasks.append(asyncio.create_task(self.quota_watches.run(), name="quotas"))
        for i in range(self.options.event_workers):
            self._tasks.append(asyncio.create_task(self.recorder.run(), name=f"events-{i}"))

    async def _pods_after_nodes(self) -> None:
        # nodes first: bound pods then land on known nodes with known resources; the pods'
        # first list is asked for at once and applied once the nodes are synced
        self.pods.hold = self.nodes.synced
        await self.pods.run()

    async def wait_synced(self) -> None:
        for reflector in self.handlers.reflectors:
            await reflector.synced.wait()
        await self.groups.synced()
        await self.storage_watches.wait_synced()
        await self.dra_watches.wait_synced()
        await self.quota_watches.wait_synced()

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
        self.handlers.apply_names(self.names)
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
            key = assumed.pod.key
            if self.binding.get(key) is asyncio.current_task():  # not a later pod's, same name
                del self.binding[key]
            self._wakeup.set()

    # -- what the cycle reports (CycleHooks): to the reporter, and back to the queue --------

    def failed(
        self,
        pod: PodInfo,
        profile: str,
        message: str,
        elapsed: float,
        error: Exception | None = None,
    ) -> None:
        self.reporter.failed(pod, profile, message, elapsed, error)

    def assumed(self, pod: PodInfo, result: ScheduleResult, attempts: int, elapsed: float) -> None:
        self.reporter.assumed(pod, result, attempts, elapsed)

    def bound(self, assumed: Assumed, bind_seconds: float) -> None:
        self.reporter.bound(assumed, bind_seconds, self.handlers.bound(assumed.pod.key))

    def unbound(self, assumed: Assumed, result: BindResult, requeued: bool) -> None:
        pod = assumed.pod
        self.reporter.unbound(assumed, result, ours=pod.scheduler_name in self.names)
        self.handlers.unbound(pod, gone=result.outcome is BindOutcome.GONE, requeued=requeued)

    def unschedulable(self, pod: PodInfo, profile: str, message: str, elapsed: float) -> None:
        self.reporter.unschedulable(pod, profile, message, elapsed)

    def preempt(self, plan: Plan) -> None:
        self.reporter.preempt(plan)

    def nominated(self, pod: PodInfo, node: str | None) -> None:
        self.reporter.nominated(pod, node)

    def preemption_attempted(self, pod: PodInfo) -> None:
        self.metrics.preemption_attempts.inc()

    # -- the binder's question ------------------------------------------------------------

    def _still_wanted(self, pod: PodInfo, node: str) -> bool:
        """Asked before a binding is sent and again right before it leaves, after the
        client's rate-limit wait: a node deleted meanwhile must not receive the pod."""
        if self.aborting or not self.cycle.still_assumed(pod):
            return False
        if not self.handlers.node_live(node):
            log.info("node gone before binding", pod=pod.key, node=node)
            return False
        return True

    # -- gauges ---------------------------------------------------------------------------

    def _update_gauges(self) -> None:
        pending = self.queue.pending()  # kube's queues: in-flight pods are in none of them
        for queue in (Where.ACTIVE, Where.BACKOFF, Where.UNSCHEDULABLE):
            self.metrics.pending_pods.labels(queue.value).set(pending[queue.value])
        self.metrics.pending_pods.labels("gated").set(len(self.handlers.gated))
        self.metrics.cache_size.labels("nodes").set(self.cache.node_count)
        self.metrics.cache_size.labels("pods").set(self.cache.pod_count)
        self.metrics.cache_size.labels("assumed_pods").set(len(self.binding))
        self.metrics.foreign_pending.set(len(self.handlers.foreign))
        self.groups.sync_metrics()  # reservations' GPU-seconds grow while held


async def collector_paused_until_synced(sched: KubeScheduler, limit: float = 120.0) -> None:
    """Run without Python's cyclic garbage collector while the first lists are read, then set
    what they built aside from it.

    The first lists allocate millions of long-lived objects (the listed JSON, the parsed pods
    and nodes): the collector would traverse them again and again while they arrive (more than
    half of the time to a filled cache on 5,000 nodes), to free nothing (JSON and the parsed
    objects hold no reference cycles). Once every informer is synced (or after `limit`
    seconds, or when cancelled), the survivors are frozen (`gc.freeze`: never traversed again;
    plain reference counting still frees them) and the collector runs as before.
    """
    if not gc.isenabled():
        return
    gc.disable()
    try:
        async with asyncio.timeout(limit):
            await sched.wait_synced()
    except TimeoutError:
        log.info("informers not synced yet; garbage collection resumed", after_s=limit)
    finally:
        gc.freeze()
        gc.enable()
