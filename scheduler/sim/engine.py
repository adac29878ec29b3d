"""The simulated cluster: a clock, the scheduler's own cache, queue and framework, a binder.

Nothing in the decision path knows it is simulated. Each pending pod is popped from
`scheduler.core.queue.SchedulingQueue` (clock injected: simulated seconds) and goes through the
one scheduling cycle (`scheduler.core.cycle.Scheduler`) on the `scheduler.core.cache.Cache`
snapshot, bound by an in-memory binder that does what the API server does with a Binding:
write the chosen GPU set on the pod's `topo-scheduler.io/gpus` annotation, set
`spec.nodeName`, and deliver the bound pod to the cache as the watch would.

Around the scheduler sits a model of the nodes: the kubelet admits the bound pod and its device
plugin hands out GPUs (topo-scheduler's device plugin: the set in the annotation; NVIDIA's
stock plugin: its besteffort pick, which ignores the annotation; or the lowest free indices),
and the node agent publishes the kubelet's assignments on the Node
(`topo-scheduler.io/gpu-assignments`). A job runs for its trace duration stretched by the
all-reduce time its placement costs over the best placement's (`scheduler.sim.network`).
Completions delete the pod (the cache forgets it) and, like a cluster event, move
unschedulable pods back to the active queue.

Preemption (on unless `preemption=False`): the cycle's DefaultPreemption chooses victims (the
kubelet's `status.startTime`, set at binding, breaks its ties: the latest started go); the
simulated API server deletes them at once (no grace period) and each victim's job is
resubmitted as a new pod that restarts from the beginning, or from its last checkpoint when the
scenario sets `checkpointInterval`. The GPU time run since the last checkpoint is lost, and
counted per priority.
"""

from __future__ import annotations

import copy
import heapq
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.core.cache import Cache
from scheduler.core.config import SchedulerConfiguration, default_config, load_config
from scheduler.core.cycle import CycleHooks, Scheduler, drive
from scheduler.core.dra.state import (
    DRA_KINDS,
    deallocate_claim_in_memory,
    unreserve_claim_in_memory,
    write_claim_in_memory,
)
from scheduler.core.dra.types import AllocationResult, ResourceClaim
from scheduler.core.framework import (
    BindOutcome,
    BindResult,
    CycleState,
    Framework,
    ScheduleResult,
)
from scheduler.core.model import NodeInfo, PodInfo
from scheduler.core.preemption import PLUGIN_NAME as PREEMPTION_PLUGIN
from scheduler.core.preemption import Plan, group_key
from scheduler.core.quantity import resource_value
from scheduler.core.queue import ClusterEvent, SchedulingQueue
from scheduler.core.quota import ElasticQuota
from scheduler.core.topology.device_plugin import device_plugin_set
from scheduler.core.topology.schema import (
    ANNOTATION_ASSIGNMENTS,
    ANNOTATION_GPUS,
    ANNOTATION_TOPOLOGY,
    Topology,
    format_assignments,
    format_gpu_indices,
    parse_gpu_indices,
    parse_topology,
)
from scheduler.core.topology.scoring import mask_to_indices
from scheduler.sim.dra import claim_for
from scheduler.sim.gangs import GangTracker
from scheduler.sim.network import NetworkModel, scheduler_network
from scheduler.sim.policies import (
    KUBE_FIRST_FREE,
    POLICIES,
    POLICY_ALIASES,
    POLICY_DESCRIPTIONS,
    TOPO,
    TOPO_NVIDIA_DP,
)
from scheduler.sim.quality import QualityModel, SetQuality
from scheduler.sim.scenario import GPU_RESOURCE, Job, Scenario, sim_timestamp
from scheduler.sim.work import (
    ATTEMPT_OVERHEAD,
    GROUPS,
    MeteredNominator,
    WorkLimitError,
    WorkMeter,
    meter_framework,
)

__all__ = [
    "ATTEMPT_OVERHEAD",
    "POLICIES",
    "POLICY_ALIASES",
    "POLICY_DESCRIPTIONS",
    "DecisionHook",
    "InvariantError",
    "JobRecord",
    "Simulation",
    "WorkLimitError",
    "count_only_config",
]

GPU_PLUGIN = "GPUTopology"

MIN_STEP = 1e-6
ARRIVAL = 0
COMPLETION = 1

DecisionHook = Callable[["Simulation", PodInfo, ScheduleResult], None]
"""Called after each decision, before the pod is assumed (the state it was decided on)."""


class InvariantError(AssertionError):
    """The simulated cluster reached an impossible state (a bug, never a scenario problem)."""


WORK_LIMIT = 100_000_000
"""Work per policy run, in node evaluations, over every phase (`scheduler.sim.work`): each
scheduling attempt costs the node count plus ATTEMPT_OVERHEAD (the cycle's fixed cost, about
50 node evaluations), and preemption, pod-group and nomination reads are charged as they go.
Two to five minutes on one core (measured: 0.9 us per evaluation on 1 node, 2.8 us on
10,000; the busiest day-long window of the Philly trace needs 75 M under kube+nvidia-dp). Many jobs
waiting on a small cluster retry on every completion, so the work can grow with the square
of the jobs (1,000 8-GPU jobs on one node: 500,000 attempts), and a pod group's preemption
reads all its pending members, for each of them under the kube+ policies."""


def fair_share_config(scheduler_name: str = "topo-scheduler") -> SchedulerConfiguration:
    """The default profile with PrioritySort's fair share between queues (`docs/quotas.md`)."""
    args = {"name": "PrioritySort", "args": {"fairShare": True}}
    return load_config(
        {"profiles": [{"schedulerName": scheduler_name, "pluginConfig": [args]}]},
        origin="fair-share",
    )


def count_only_config(scheduler_name: str = "topo-scheduler") -> SchedulerConfiguration:
    """kube-scheduler's default plugins with GPUs counted as integers (GPUTopology off)."""
    off = {"disabled": [{"name": GPU_PLUGIN}]}
    return load_config(
        {"profiles": [{"schedulerName": scheduler_name, "plugins": {"multiPoint": off}}]},
        origin="count-only",
    )


@dataclass
class JobRecord:
    """What happened to one job of the trace."""

    job: Job
    state: str = "future"  # future | pending | running | completed
    bound_at: float | None = None
    run_start: float | None = None  # when its run began (a job's workers: all of them bound)
    node: str | None = None
    gpus: tuple[int, ...] = ()
    attempts: int = 0
    reason: str | None = None  # the last FitError message while pending
    quality: SetQuality | None = None
    free_mask: int | None = None  # the node's free GPUs when it was placed
    topology: Topology | None = None
    run_seconds: float | None = None  # the duration stretched by the set's bandwidth
    completed_at: float | None = None
    preemptions: int = 0  # times it was preempted
    lost_gpu_seconds: float = 0.0  # GPU time run since its last checkpoint, when preempted
    remaining: float | None = None  # run time left after a preemption (None: the duration)

    @property
    def wait(self) -> float | None:
        return None if self.bound_at is None else self.bound_at - self.job.arrival

    @property
    def completion_time(self) -> float | None:
        """Arrival to completion (wait included)."""
        return None if self.completed_at is None else self.completed_at - self.job.arrival


@dataclass
class _Kubelet:
    """One node as its kubelet sees it: admitted pods, their requests and GPUs."""

    name: str
    obj: dict[str, Any]
    allocatable: dict[str, int]
    topology: Topology | None
    used: Counter[str] = field(default_factory=Counter)
    gpu_sets: dict[str, tuple[int, ...]] = field(default_factory=dict)  # pod uid -> GPUs
    dra_gpus: int = 0  # GPUs published in a ResourceSlice (gpuDriver: dra), not allocatable

    @property
    def gpu_mask(self) -> int:
        mask = 0
        for held in self.gpu_sets.values():
            for i in held:
                mask |= 1 << i
        return mask

    @property
    def gpu_count(self) -> int:
        return self.allocatable.get(GPU_RESOURCE, 0) or self.dra_gpus

    def free_gpus(self) -> int:
        if self.topology is not None:
            return (self.topology.allocatable_mask & ~self.gpu_mask).bit_count()
        if self.dra_gpus:
            return self.dra_gpus - self.gpu_mask.bit_count()
        return self.gpu_count - self.used[GPU_RESOURCE]


@dataclass
class Sample:
    """Cluster state from `time` until the next sample."""

    time: float
    used_gpus: int
    pending: int
    pending_gpu_jobs: int
    stranded_gpus: int  # free GPUs on nodes that cannot host the smallest pending GPU job
    free_gpus: int
    # per network level, then the whole cluster: most nodes with 8 GPUs free in one domain
    largest_gang: tuple[int, ...] = ()
    reserved_idle_gpus: int = 0  # free GPUs on nodes held by reservations (up to their need)


class Simulation:
    """One policy over one scenario. `run()` once, then read `records`, `samples`, counters."""

    def __init__(
        self,
        scenario: Scenario,
        policy: str,
        config: SchedulerConfiguration | None = None,
        *,
        check: bool = False,
        on_decision: DecisionHook | None = None,
        progress: Callable[[int], None] | None = None,
        preemption: bool = True,
        reservation_timeout: float | None = None,
    ) -> None:
        from plugins import frameworks_for, topology_levels
        from plugins.gpu_topology import network_bandwidth
        from scheduler.assembly import assemble

        started = time.perf_counter()
        policy = POLICY_ALIASES.get(policy, policy)
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}")
        self.scenario = scenario
        self.policy = policy
        # topo-scheduler's decisions on nodes whose device plugin ignores the recorded set and
        # picks as NVIDIA's does (the stock device plugin does exactly that).
        self.honors_gpu_set = policy != TOPO_NVIDIA_DP
        # topo-scheduler's cluster: the agent's GPU topology annotation on every GPU node
        self.topology_aware = policy in (TOPO, TOPO_NVIDIA_DP)
        # queues (ElasticQuotas) are enforced by topo-scheduler's policies only: kube-scheduler
        # has no quotas; without a configuration they order by fair share
        self.queues = bool(scenario.queues) and policy in (TOPO, TOPO_NVIDIA_DP)
        if policy in (TOPO, TOPO_NVIDIA_DP):
            self.config = config or (fair_share_config() if self.queues else default_config())
        else:
            self.config = count_only_config()
        self.frameworks: dict[str, Framework] = frameworks_for(self.config)
        self.preemption = preemption
        if not preemption:  # `--no-preemption`: the same profile without its PostFilter
            for fw in self.frameworks.values():
                fw.post_filters = [p for p in fw.post_filters if p.name != PREEMPTION_PLUGIN]
        self.decisions = 0
        self.now = 0.0
        self.kubelets: dict[str, _Kubelet] = {}
        # every phase's work, against WORK_LIMIT (read now: tests lower it)
        self.meter = WorkMeter(WORK_LIMIT, self._where_the_work_went)
        for fw in self.frameworks.values():
            meter_framework(fw, self.meter)
        self.scheduler_name = self.config.profiles[0].scheduler_name
        self.check = check
        self.on_decision = on_decision
        self.progress = progress
        # the one assembly (scheduler.assembly); pod groups are placed whole by the
        # topology-aware policies only (count-only: one pod at a time, as kube), priced with
        # the configuration's networkBandwidth, else the scenario's network
        network, declared = network_bandwidth(self.config)
        assembly = assemble(
            self.config,
            _ClusterBinder(self),
            clock=lambda: self.now,
            frameworks=self.frameworks,
            hooks=_Observer(self),
            nominator=MeteredNominator(self.meter),
            groups=policy in (TOPO, TOPO_NVIDIA_DP),
            levels=topology_levels(self.config) or scenario.network_levels,
            network=network if declared else scheduler_network(scenario, network),
            # `--gang-reservation SECONDS` when given, else the configuration's
            # gangReservationSeconds
            reservation_timeout=reservation_timeout,
        )
        self.cache: Cache = assembly.cache
        self.queue: SchedulingQueue[PodInfo] = assembly.queue
        self.cycle: Scheduler = assembly.cycle
        self.cycle.pending_members = self._pending_members
        preempt_for_group = self.cycle.preempt_for_group

        def metered_preempt_for_group(
            leader: PodInfo,
            members: Sequence[PodInfo],
            group_problem: str | None = None,
            required_level: str | None = None,
        ) -> str | None:
            self.meter.charge(len(members), GROUPS)
            return preempt_for_group(leader, members, group_problem, required_level)

        self.cycle.preempt_for_group = metered_preempt_for_group  # type: ignore[method-assign]
        # pod group key -> its pods' keys (so preemption need not scan the whole queue)
        self._group_pods: dict[str, dict[str, None]] = {}
        self.gangs = GangTracker()  # multi-node jobs: start when all workers run
        self.quality = QualityModel()
        self.network = NetworkModel(scenario, self.quality)  # job time, gang room per level
        self.records: dict[str, JobRecord] = {j.key: JobRecord(j) for j in scenario.jobs}
        if len(self.records) != len(scenario.jobs):  # parse_scenario and replay_on prevent it
            names = Counter(j.name for j in scenario.jobs)
            twice = next(name for name, n in names.items() if n > 1)
            raise ValueError(f"jobs: pod name {twice!r} is used twice")
        self.pod_objects: dict[str, dict[str, Any]] = {}
        self._bound: dict[str, PodInfo] = {}
        self.samples: list[Sample] = []
        self.scheduled = 0
        self.schedule_seconds = 0.0  # wall time deciding (PreFilter to the node choice)
        self.events = 0
        self.total_gpus = 0
        self._pending_sizes: Counter[int] = Counter()
        self._heap: list[tuple[float, int, int, str]] = []
        self._seq = 0
        self._completion: dict[str, int] = {}  # pod key -> its live completion event
        self.preempted: Counter[int] = Counter()  # preemptions by the victim's priority
        self.lost_gpu_seconds: dict[int, float] = {}  # by the victim's priority
        # per namespace: GPUs held now, GPU-seconds held above the queue's min (borrowed),
        # victims of reclaim (a preemptor of another namespace) and the GPU-seconds they lost
        self.quota_min: dict[str, int] = {
            q.namespace: resource_value(GPU_RESOURCE, (q.min or {}).get(GPU_RESOURCE, "0"))
            for q in scenario.queues
        }
        self.ns_gpus: Counter[str] = Counter()
        self.borrowed_gpu_seconds: dict[str, float] = {}
        self._ns_since = 0.0
        self.reclaimed: Counter[str] = Counter()
        self.reclaim_lost_gpu_seconds: dict[str, float] = {}
        self.reserved_idle_gpu_seconds = 0.0  # free GPUs held by reservations, over time
        # wall time of every phase: set-up here, then the whole run (`run`)
        self.wall_seconds = time.perf_counter() - started

    @property
    def work(self) -> int:
        """Node evaluations so far, over every phase (bounded by WORK_LIMIT)."""
        return self.meter.used

    def _where_the_work_went(self) -> str:
        return (
            f"policy {self.policy}: more than {self.meter.limit:,} node evaluations by "
            f"t={self.now:,.0f}s ({self.decisions:,} scheduling attempts on "
            f"{len(self.kubelets):,} node(s))"
        )

    def _pending_members(self, pod: PodInfo) -> list[PodInfo]:
        """The other members of the pod's group waiting in the queue (what the cycle's own
        lookup returns, from the group's pods rather than the whole queue), charged one node
        evaluation per member read."""
        key = group_key(pod)
        if key is None:
            return []
        keys = self._group_pods.get(key, {})
        self.meter.charge(len(keys), GROUPS)
        members = []
        for k in keys:
            qp = self.queue.get(k) if k != pod.key else None
            if qp is not None and group_key(qp.pod) == key:
                members.append(qp.pod)
        return members

    # ------------------------------------------------------------------ setup

    def _setup(self) -> None:
        dra_objects = self.scenario.dra_objects()
        dra_nodes = {
            o["spec"]["nodeName"]: len(o["spec"]["devices"])
            for o in dra_objects
            if o["kind"] == "ResourceSlice"
        }
        storage = self.cache.snapshot.storage
        for dra_object in dra_objects:  # NVIDIA's driver, and the users' templates
            storage.add(DRA_KINDS[dra_object["kind"]].from_object(dra_object))
        for obj in self.scenario.node_objects():
            info = NodeInfo.from_object(obj)
            topology = None
            if info.name in dra_nodes and not self.topology_aware:
                # kube-scheduler's cluster has no GPU graph on its Nodes: kube's allocator
                # takes the first devices that fit; the kubelet still knows its GPUs
                topology = parse_topology(obj["metadata"]["annotations"][ANNOTATION_TOPOLOGY])
                stripped = copy.deepcopy(obj)
                stripped["metadata"]["annotations"].pop(ANNOTATION_TOPOLOGY, None)
                info = NodeInfo.from_object(stripped)
            if info.name not in self.kubelets:
                self.cache.add_node(info)
                slot = self.cache.snapshot.index[info.name]
                topology = self.cache.gpus.topology[slot] or topology
            kubelet = _Kubelet(info.name, obj, dict(info.allocatable), topology)
            kubelet.dra_gpus = dra_nodes.get(info.name, 0)
            self.kubelets[info.name] = kubelet
            self.total_gpus += kubelet.gpu_count
        if self.queues:
            totals = self.scenario.quota_totals()
            for queue in self.scenario.queues:
                self.cache.add_quota(ElasticQuota.from_object(queue.quota_object(totals)))
        for key, record in self.records.items():
            self._push(record.job.arrival, ARRIVAL, key)

    def _push(self, at: float, kind: int, key: str) -> int:
        self._seq += 1
        heapq.heappush(self._heap, (at, kind, self._seq, key))
        return self._seq

    # ------------------------------------------------------------------ the loop

    def run(self) -> Simulation:
        """Replay the whole trace; returns self. `wall_seconds` counts every phase."""
        started = time.perf_counter()
        try:
            return self._run()
        finally:
            self.wall_seconds += time.perf_counter() - started

    def _run(self) -> Simulation:
        self._setup()
        self._sample()
        while True:
            self._drain()
            if self.check:
                self.check_invariants()
            self._sample()
            next_event = self._heap[0][0] if self._heap else None
            wake = self.queue.next_wakeup()
            if next_event is None:
                pending = self.queue.pending()
                held = self.cycle.groups is not None and self.cycle.groups.reservations.held
                if not pending["active"] and not pending["backoff"] and not held:
                    break  # nothing can change any more: the rest stays pending
                # a reservation ends in time: the queue's flush retries the waiting pods
            times = [] if next_event is None else [next_event]
            if wake is not None:
                # At least a microsecond: the queue's flush (`now - since >= limit`) and its
                # next_wakeup (`since + limit - now`) round differently, so a wake-up of ~1e-13 s
                # can leave the clock where it is and the unschedulable pod where it is.
                times.append(self.now + max(wake, MIN_STEP))
            if not times:
                break
            self.now = max(self.now, min(times))
            while self._heap and self._heap[0][0] <= self.now:
                _, kind, seq, key = heapq.heappop(self._heap)
                if kind == ARRIVAL:
                    self._arrive(key)
                elif self._completion.get(key) == seq:  # else the run was preempted
                    self._complete(key)
                self.events += 1
                if self.progress is not None:
                    self.progress(1)
        for key, record in self.records.items():
            if record.state == "pending" and record.reason is None:
                qp = self.queue.get(key)
                record.reason = f"never tried (queue: {self.queue.where(key)}; {qp})"
        return self

    def _drain(self) -> None:
        """Run scheduling cycles until nothing is poppable at this instant."""
        while True:
            qp = self.queue.pop()
            if qp is None:
                self.gangs.round_done()
                return
            self.records[qp.key].attempts = qp.attempts
            group = group_key(qp.pod) if self.cycle.groups is not None else None
            if group is not None:  # the group cycle reads all the group's members first
                self.meter.charge(len(self._group_pods.get(group, ())), GROUPS)
            decisions = self.cycle.schedule(qp)  # a pod group's members together
            self.meter.check()  # a charge past the limit may have been caught in the cycle
            for decision in decisions:
                self.schedule_seconds += decision.elapsed
                if decision.outcome == "skipped":
                    self.records[decision.pod.key].reason = decision.message
                if decision.assumed is not None:
                    drive(self.cycle.bind(decision.assumed))

    # ------------------------------------------------------------------ events

    def _create_claim(self, job: Job, obj: dict[str, Any]) -> None:
        """kube's resourceclaim controller: a DRA job's pod gets its claim from the template
        (named in the pod's status) before the scheduler sees the pod."""
        if job.dra and job.gpus:
            claim = claim_for(obj, job.gpus)
            self.cache.snapshot.storage.add(ResourceClaim.from_object(claim))

    def _delete_claims(self, pod: PodInfo) -> None:
        """kube's resourceclaim controller when a pod is gone: the claims made for it from
        templates (owned by it) are deleted, which frees their devices (the pod's own claims
        are reserved for it alone, so nothing else is written first). Scenario jobs name no
        shared claim."""
        storage = self.cache.snapshot.storage
        for entry in pod.resource_claims:
            if entry.claim and entry.template:
                storage.remove(ResourceClaim, f"{pod.namespace}/{entry.claim}")

    def _arrive(self, key: str) -> None:
        record = self.records[key]
        obj = record.job.pod_object(self.scheduler_name)
        self._create_claim(record.job, obj)
        self.pod_objects[key] = obj
        pod = PodInfo.from_object(obj)
        record.state = "pending"
        self._pending_sizes[record.job.gpus] += 1
        group = group_key(pod)
        if group is not None:
            self._group_pods.setdefault(group, {})[key] = None
        self.cycle.enqueue(pod)

    def _complete(self, key: str) -> None:
        record = self.records[key]
        record.state = "completed"
        record.completed_at = self.now
        self._release(key)

    def _preempt(self, key: str) -> None:
        """A victim is deleted: its run so far is lost back to its last checkpoint, and its
        job comes back as a new pending pod. A worker of a multi-node job stops the job: the
        other workers, still bound, lose their run as well and wait, idle, for it."""
        record = self.records[key]
        if record.state != "running" or record.bound_at is None:
            return
        job = record.job
        self._stop_run(record)
        record.preemptions += 1
        self.preempted[job.priority] += 1
        self._release(key)
        for other in self.gangs.stopped(self, key):
            self._completion.pop(other, None)
            self._stop_run(self.records[other])
        obj = job.pod_object(self.scheduler_name)
        obj["metadata"]["uid"] = f"{obj['metadata']['uid']}-{record.preemptions}"
        self._create_claim(job, obj)
        self.pod_objects[key] = obj
        record.state = "pending"
        self._pending_sizes[job.gpus] += 1
        self.cycle.enqueue(PodInfo.from_object(obj))

    def _stop_run(self, record: JobRecord) -> None:
        """A run ends before its time: what it ran since its last checkpoint is lost."""
        if record.run_start is None:  # bound, waiting for the job's other workers
            return
        job = record.job
        ran = self.now - record.run_start
        interval = self.scenario.checkpoint_interval
        kept = (ran // interval) * interval if interval > 0 else 0.0
        lost = (ran - kept) * job.gpus
        record.remaining = (
            record.remaining if record.remaining is not None else job.duration
        ) - kept
        record.run_start = None
        record.lost_gpu_seconds += lost
        self.lost_gpu_seconds[job.priority] = self.lost_gpu_seconds.get(job.priority, 0.0) + lost

    def _release(self, key: str) -> None:
        """The pod is gone from its node: kubelet, agent and cache forget it."""
        record = self.records[key]
        self._completion.pop(key, None)
        self.pod_objects.pop(key)
        pod = self._bound.pop(key)
        self._namespace_gpus(pod.namespace, -record.job.gpus)
        node = record.node
        assert node is not None
        kubelet = self.kubelets[node]
        for name, amount in pod.requests.items():
            kubelet.used[name] -= amount
        held = kubelet.gpu_sets.pop(pod.uid, None)
        if held is not None and pod.resource_claims:
            self._delete_claims(pod)
        elif held is not None and (
            ANNOTATION_GPUS not in pod.annotations or not self.honors_gpu_set
        ):
            self._publish_assignments(kubelet)
        # The pod is deleted: the watch reports it, the cache forgets it, and a deleted
        # assigned pod is a cluster event that may help unschedulable pods.
        self.cache.remove_pod(key)
        if self.cycle.groups is not None:
            self.cycle.groups.forget(pod)
        self.queue.move_all(ClusterEvent.POD_DELETE)

    # ------------------------------------------------------------------ the cluster

    def _bind(self, pod: PodInfo, node: str, gpus: tuple[int, ...]) -> None:
        """What the API server, kubelet and agent do with a Binding."""
        key = pod.key
        obj = self.pod_objects[key]
        if gpus:  # the Binding's annotation, copied onto the pod by the API server
            obj["metadata"].setdefault("annotations", {})[ANNOTATION_GPUS] = format_gpu_indices(
                gpus
            )
        obj["spec"]["nodeName"] = node
        # the kubelet's status.startTime: preemption evicts the latest-started victims
        obj["status"] = {
            **obj.get("status", {}),
            "phase": "Running",
            "startTime": sim_timestamp(self.now),
        }
        bound = PodInfo.from_object(obj)
        kubelet = self.kubelets[node]
        free_before = None
        if kubelet.topology is not None:
            free_before = kubelet.topology.allocatable_mask & ~kubelet.gpu_mask
        held = self._admit(kubelet, bound)
        self._namespace_gpus(bound.namespace, self.records[key].job.gpus)
        self._bound[key] = bound
        self.cache.add_pod(bound)  # the watch reports the bound pod
        if held and not bound.resource_claims and (not gpus or not self.honors_gpu_set):
            self._publish_assignments(kubelet)
        record = self.records[key]
        record.state = "running"
        record.bound_at = self.now
        record.node = node
        record.gpus = held
        record.reason = None
        self.scheduled += 1
        self._pending_sizes[record.job.gpus] -= 1
        if held and kubelet.topology is not None and free_before is not None:
            record.free_mask = free_before
            record.topology = kubelet.topology
            record.quality = self.quality.judge(kubelet.topology, free_before, held)
        started = self.gangs.bound(self, key, node)  # a job's workers start together
        run = self._run_time([self.records[k] for k in started])
        for k in started:
            self.records[k].run_seconds = run
            self.records[k].run_start = self.now
            self._completion[k] = self._push(self.now + run, COMPLETION, k)

    def _namespace_gpus(self, namespace: str, delta: int) -> None:
        """GPUs held by a namespace change: the GPU-seconds borrowed so far are counted."""
        if delta == 0:
            return
        elapsed = self.now - self._ns_since
        if elapsed > 0:
            for ns, held in self.ns_gpus.items():
                over = held - self.quota_min.get(ns, 0)
                if over > 0 and ns in self.quota_min:
                    self.borrowed_gpu_seconds[ns] = (
                        self.borrowed_gpu_seconds.get(ns, 0.0) + over * elapsed
                    )
        self._ns_since = self.now
        self.ns_gpus[namespace] += delta

    def borrowed_gpu_hours(self) -> dict[str, float]:
        """GPU-hours each queue held above its min, up to now."""
        self._namespace_gpus("", 0)
        out = dict(self.borrowed_gpu_seconds)
        elapsed = self.now - self._ns_since
        for ns, held in self.ns_gpus.items():
            over = held - self.quota_min.get(ns, 0)
            if over > 0 and ns in self.quota_min:
                out[ns] = out.get(ns, 0.0) + over * elapsed
        return {ns: seconds / 3600 for ns, seconds in out.items()}

    def _run_time(self, workers: list[JobRecord]) -> float:
        """How long a job runs on the placement it got (`scheduler.sim.network`): what is
        left of it stretched by its modelled all-reduce time against the reference's."""
        return self.network.run_time(self, workers)

    def _admit(self, kubelet: _Kubelet, pod: PodInfo) -> tuple[int, ...]:
        """The kubelet's admission and the device plugin's allocation; returns the GPUs."""
        for name, amount in pod.requests.items():
            if kubelet.used[name] + amount > kubelet.allocatable.get(name, 0):
                raise InvariantError(
                    f"t={self.now:.0f}s: kubelet on {kubelet.name} rejects {pod.key}: "
                    f"{name} oversubscribed ({kubelet.used[name]} + {amount} > "
                    f"{kubelet.allocatable.get(name, 0)})"
                )
        for name, amount in pod.requests.items():
            kubelet.used[name] += amount
        if pod.resource_claims:
            return self._prepare_claims(kubelet, pod)
        count = pod.requests.get(GPU_RESOURCE, 0)
        if count <= 0 or kubelet.topology is None:
            return ()
        free = kubelet.topology.allocatable_mask & ~kubelet.gpu_mask
        text = pod.annotations.get(ANNOTATION_GPUS)
        if text is not None and self.honors_gpu_set:
            gpus = parse_gpu_indices(text, pod=pod.key)
        elif self.policy == KUBE_FIRST_FREE:
            gpus = mask_to_indices(free)[:count]
        else:
            gpus = device_plugin_set(kubelet.topology, free, count)
        mask = sum(1 << g for g in gpus)
        if len(gpus) != count or mask & ~free:
            raise InvariantError(
                f"t={self.now:.0f}s: device plugin on {kubelet.name} cannot give {pod.key} "
                f"GPUs {list(gpus)} (free {list(mask_to_indices(free))}, asked {count})"
            )
        kubelet.gpu_sets[pod.uid] = gpus
        return gpus

    def _prepare_claims(self, kubelet: _Kubelet, pod: PodInfo) -> tuple[int, ...]:
        """The DRA driver's NodePrepareResources: the devices allocated to the pod's claims,
        which must be on this node, reserved for the pod and held by no other pod."""
        dra = self.cache.snapshot.storage.dra
        gpus: list[int] = []
        for entry in pod.resource_claims:
            claim = dra.claim(pod.namespace, entry.claim) if entry.claim else None
            if claim is None or claim.allocation is None or not claim.reserved_for_pod(pod.uid):
                raise InvariantError(
                    f"t={self.now:.0f}s: kubelet on {kubelet.name} cannot prepare claim "
                    f"{entry.claim!r} of {pod.key}: not allocated and reserved for it"
                )
            for device in claim.allocation.devices:
                if device.id.pool != kubelet.name or not device.id.device.startswith("gpu-"):
                    raise InvariantError(
                        f"t={self.now:.0f}s: kubelet on {kubelet.name} cannot prepare device "
                        f"{device.id} of claim {claim.key}: not one of its GPUs"
                    )
                gpus.append(int(device.id.device.removeprefix("gpu-")))
        held = tuple(sorted(gpus))
        mask = sum(1 << g for g in held)
        if mask & kubelet.gpu_mask or len(set(held)) != len(held):
            raise InvariantError(
                f"t={self.now:.0f}s: kubelet on {kubelet.name}: {pod.key}'s claim devices "
                f"{list(held)} are held already ({list(mask_to_indices(kubelet.gpu_mask))})"
            )
        if held:
            kubelet.gpu_sets[pod.uid] = held
        return held

    def _publish_assignments(self, kubelet: _Kubelet) -> None:
        """The node agent: the kubelet's GPU assignments on the Node, seen by the cache.

        Modelled only where the report tells the cache something it lacks: pods whose GPUs the
        scheduler did not choose (no `topo-scheduler.io/gpus` annotation). For the others the
        kubelet used the annotated set, so the report would leave the cache unchanged, and
        every Node update re-parses its topology annotation.
        """
        annotations = kubelet.obj["metadata"]["annotations"]
        annotations[ANNOTATION_ASSIGNMENTS] = format_assignments(kubelet.gpu_sets)
        self.cache.update_node(NodeInfo.from_object(kubelet.obj))

    # ------------------------------------------------------------------ observation

    def _sample(self) -> None:
        used = 0
        free_total = 0
        stranded = 0
        sizes = [s for s, n in self._pending_sizes.items() if n > 0 and s > 0]
        smallest = min(sizes) if sizes else None
        for kubelet in self.kubelets.values():
            if not kubelet.gpu_count:
                continue
            free = kubelet.free_gpus()
            used += kubelet.gpu_count - free
            free_total += free
            if smallest is not None and 0 < free < smallest:
                stranded += free
        pending = sum(self._pending_sizes.values())
        pending_gpu = sum(n for s, n in self._pending_sizes.items() if s > 0)
        gangs = self.network.largest_gangs(lambda name: self.kubelets[name].free_gpus())
        reserved_idle = 0
        groups = self.cycle.groups
        if groups is not None:
            for reservation in groups.reservations.held.values():
                wanted: Counter[str] = Counter()
                for pod, node in reservation.members.values():
                    wanted[node] += int(pod.requests.get(GPU_RESOURCE, 0))
                for node, gpus in wanted.items():
                    if node in self.kubelets:
                        reserved_idle += min(gpus, self.kubelets[node].free_gpus())
        if self.samples:
            self.reserved_idle_gpu_seconds += self.samples[-1].reserved_idle_gpus * (
                self.now - self.samples[-1].time
            )
        sample = Sample(
            self.now, used, pending, pending_gpu, stranded, free_total, gangs, reserved_idle
        )
        if self.samples and self.samples[-1].time == self.now:
            self.samples[-1] = sample
        else:
            self.samples.append(sample)

    def check_invariants(self) -> None:
        """No resource oversubscribed anywhere; the cache agrees with the kubelets."""
        snapshot = self.cache.snapshot
        for name, kubelet in self.kubelets.items():
            slot = snapshot.index[name]
            for resource, row in snapshot.row.items():
                requested = int(snapshot.requested[row, slot])
                allocatable = int(snapshot.allocatable[row, slot])
                if requested > allocatable and requested > 0:
                    raise InvariantError(
                        f"t={self.now:.0f}s: node {name}: {resource} oversubscribed in the "
                        f"cache ({requested} > {allocatable})"
                    )
                if requested != kubelet.used.get(resource, 0) and resource != "pods":
                    raise InvariantError(
                        f"t={self.now:.0f}s: node {name}: cache has {requested} {resource} "
                        f"requested, kubelet {kubelet.used.get(resource, 0)}"
                    )
            seen = 0
            for uid, held in kubelet.gpu_sets.items():
                mask = sum(1 << g for g in held)
                if mask & seen:
                    raise InvariantError(f"t={self.now:.0f}s: node {name}: GPU held twice ({uid})")
                seen |= mask
            if kubelet.dra_gpus:  # the claims' devices, as the scheduler's cache holds them
                allocated = sum(
                    1 << int(d.device.removeprefix("gpu-"))
                    for d in self.cache.snapshot.storage.dra.allocated_devices()
                    if d.pool == name
                )
                if allocated != seen:
                    raise InvariantError(
                        f"t={self.now:.0f}s: node {name}: claims hold GPUs "
                        f"{list(mask_to_indices(allocated))} != kubelet "
                        f"{list(mask_to_indices(seen))}"
                    )
            elif kubelet.topology is not None:
                if seen & ~kubelet.topology.allocatable_mask:
                    raise InvariantError(f"t={self.now:.0f}s: node {name}: GPU out of range")
                if int(self.cache.gpus.used[slot]) != seen:
                    raise InvariantError(
                        f"t={self.now:.0f}s: node {name}: cache GPUs "
                        f"{list(mask_to_indices(int(self.cache.gpus.used[slot])))} != kubelet "
                        f"{list(mask_to_indices(seen))}"
                    )
        for key, record in self.records.items():
            if record.state == "pending" and key not in self.queue:
                raise InvariantError(f"t={self.now:.0f}s: pending pod {key} left the queue")


class _ClusterBinder:
    """The simulator's Binder: the in-memory API server, kubelet and agent."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim

    async def bind(self, pod: PodInfo, node: str, gpus: tuple[int, ...]) -> BindResult:
        self.sim._bind(pod, node, gpus)
        return BindResult(BindOutcome.BOUND)

    async def write_claim_status(
        self, claim: ResourceClaim, allocation: AllocationResult | None, pod: PodInfo
    ) -> ResourceClaim | None:
        """The in-memory API's claim status write (`ClaimStatusWriter`)."""
        dra = self.sim.cache.snapshot.storage.dra
        return write_claim_in_memory(dra, claim, allocation, pod.name, pod.uid)

    async def deallocate_claim(self, claim: ResourceClaim) -> ResourceClaim | None:
        """The in-memory API's deallocation (`ClaimStatusEditor`, DynamicResources'
        PostFilter)."""
        return deallocate_claim_in_memory(self.sim.cache.snapshot.storage.dra, claim)

    async def unreserve_claim(self, claim: ResourceClaim, pod: PodInfo) -> ResourceClaim | None:
        """The in-memory API's removal of the pod from `reservedFor` (Unreserve)."""
        return unreserve_claim_in_memory(self.sim.cache.snapshot.storage.dra, claim, pod.uid)


class _Observer(CycleHooks):
    """Counts decisions and keeps each job's last FitError message."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim

    def decided(self, pod: PodInfo, result: ScheduleResult, state: CycleState) -> None:
        self.sim.decisions += 1
        if self.sim.on_decision is not None:
            self.sim.on_decision(self.sim, pod, result)

    def unschedulable(self, pod: PodInfo, profile: str, message: str, elapsed: float) -> None:
        self.sim.records[pod.key].reason = message

    def preempt(self, plan: Plan) -> None:
        for victim in plan.victims:
            if victim.pod.namespace != plan.preemptor.namespace:  # reclaim by another queue
                record = self.sim.records.get(victim.pod.key)
                # all the run lost: a worker's eviction stops its job's other workers too
                lost_before = sum(self.sim.lost_gpu_seconds.values())
                self.sim._preempt(victim.pod.key)
                if record is not None:
                    ns = victim.pod.namespace
                    self.sim.reclaimed[ns] += 1
                    self.sim.reclaim_lost_gpu_seconds[ns] = (
                        self.sim.reclaim_lost_gpu_seconds.get(ns, 0.0)
                        + sum(self.sim.lost_gpu_seconds.values())
                        - lost_before
                    )
                continue
            self.sim._preempt(victim.pod.key)
