"""Prometheus metrics of one scheduler process, under kube-scheduler's names where they exist.

Each `Metrics` owns its CollectorRegistry (never the global one), so several schedulers in
one test process do not collide.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from scheduler.core.reservation import Reservations

RESERVATION_RESULTS = ("made", "fulfilled", "expired", "released")
"""The `result` label of `topo_scheduler_gang_reservations_total`: the `Reservations`
counts of the same names."""

_LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.002,
    0.004,
    0.008,
    0.016,
    0.032,
    0.064,
    0.128,
    0.256,
    0.512,
    1.024,
    2.048,
    4.096,
    8.192,
    16.384,
)


SLI_BUCKETS = tuple(0.01 * 2**i for i in range(20))
"""kube's buckets for the pod scheduling SLI: 0.01 s doubling to 5,242.88 s."""
ATTEMPTS_BUCKETS = (1, 2, 4, 8, 16)
"""kube's buckets for the attempts a pod needed: 1 doubling to 16."""


class Metrics:
    """All series the scheduler exports."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.schedule_attempts = Counter(
            "scheduler_schedule_attempts",
            "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod "
            "could not be scheduled, while 'error' means an internal scheduler problem.",
            ["result", "profile"],
            registry=r,
        )
        self.attempt_duration = Histogram(
            "scheduler_scheduling_attempt_duration_seconds",
            "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
            ["result", "profile"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.algorithm_duration = Histogram(
            "scheduler_scheduling_algorithm_duration_seconds",
            "Scheduling algorithm latency in seconds",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.binding_duration = Histogram(
            "scheduler_binding_duration_seconds",
            "Binding latency in seconds (GPU annotation + pods/binding)",
            ["result"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.e2e_duration = Histogram(
            "scheduler_pod_scheduling_sli_duration_seconds",
            "E2e latency for a pod being scheduled, from the time it entered the queue",
            ["attempts"],
            buckets=SLI_BUCKETS,
            registry=r,
        )
        self.pod_attempts = Histogram(
            "scheduler_pod_scheduling_attempts",
            "Number of attempts to successfully schedule a pod.",
            buckets=ATTEMPTS_BUCKETS,
            registry=r,
        )
        self.preemption_attempts = Counter(
            "scheduler_preemption_attempts",
            "Total preemption attempts in the cluster till now",
            registry=r,
        )
        self.pending_pods = Gauge(
            "scheduler_pending_pods",
            "Number of pending pods, by the queue type.",
            ["queue"],
            registry=r,
        )
        self.cache_size = Gauge(
            "scheduler_scheduler_cache_size",
            "Number of nodes, pods, and assumed (bound) pods in the scheduler cache.",
            ["type"],
            registry=r,
        )
        self.foreign_pending = Gauge(
            "topo_scheduler_other_scheduler_pending_pods",
            "Unbound pods that belong to other schedulers (seen, left alone).",
            registry=r,
        )
        self.config_reloads = Counter(
            "topo_scheduler_config_reloads",
            "Configuration reloads from the ConfigMap, by result.",
            ["result"],
            registry=r,
        )
        self.bind_results = Counter(
            "topo_scheduler_bindings",
            "Binding outcomes: bound, conflict (already assigned), gone, error, aborted.",
            ["result"],
            registry=r,
        )
        self.preemption_victims = Histogram(
            "scheduler_preemption_victims",
            "Number of selected preemption victims",
            buckets=(1, 2, 4, 8, 16, 32, 64),
            registry=r,
        )
        self.gpu_set_quality = Histogram(
            "topo_scheduler_gpu_set_score",
            "Topology score of the GPU set chosen for each placed pod (higher is better).",
            buckets=(0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100),
            registry=r,
        )
        self.relists = Counter(
            "topo_scheduler_informer_relists",
            "Re-lists after the first list (watch too old: 410 Gone).",
            ["informer"],
            registry=r,
        )
        self.events_sent = Counter(
            "topo_scheduler_events_sent",
            "Events written to the API server (through the event client).",
            registry=r,
        )
        self.events_aggregated = Counter(
            "topo_scheduler_events_aggregated",
            "Events not sent because an identical one for the same object was sent within "
            "the deduplication window, or the object's event budget was spent.",
            registry=r,
        )
        self.events_dropped = Counter(
            "topo_scheduler_events_dropped",
            "Events lost: queue_full (the 1,000-event queue overflowed), failed (the API "
            "server refused it or retries ran out), shutdown (still queued at exit).",
            ["reason"],
            registry=r,
        )
        self.client_timeouts = Counter(
            "topo_scheduler_client_request_timeouts",
            "API requests sent that got no answer within the client timeout, by client "
            "(scheduling, events).",
            ["client"],
            registry=r,
        )
        self.gang_reservations_held = Gauge(
            "topo_scheduler_gang_reservations_held",
            "Gang reservations held now: pod groups with nodes held for them as they free "
            "(GPUTopology gangReservationSeconds).",
            registry=r,
        )
        self.gang_reservations = Counter(
            "topo_scheduler_gang_reservations",
            "Gang reservations by result: made, fulfilled (the group was placed while it "
            "held it), expired (its gangReservationSeconds ran out), released (taken over by "
            "a group of higher priority, a free node of it taken by an earlier reservation, "
            "or a held node or the group is gone).",
            ["result"],
            registry=r,
        )
        for result in RESERVATION_RESULTS:
            self.gang_reservations.labels(result)
        self.gang_reservation_gpu_seconds = Counter(
            "topo_scheduler_gang_reservation_gpu_seconds",
            "GPUs held by gang reservations x seconds held.",
            registry=r,
        )
        # the `Reservations` counts and GPU-seconds at the last `sync_reservations`
        self._reservations_seen = dict.fromkeys(RESERVATION_RESULTS, 0)
        self._reservation_gpu_seconds_seen = 0.0
        self.is_leader = Gauge(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates "
            "backup, 1 indicates master.",
            ["name"],
            registry=r,
        )

    def sync_reservations(self, book: Reservations, now: float) -> None:
        """Bring the gang reservation series in step with the group cycle's `book` at `now`
        (its clock): the held gauge, and each counter by what it grew since the last sync
        (counters never decrease)."""
        self.gang_reservations_held.set(len(book.held))
        for result in RESERVATION_RESULTS:
            count: int = getattr(book, result)
            grown = count - self._reservations_seen[result]
            if grown > 0:
                self.gang_reservations.labels(result).inc(grown)
                self._reservations_seen[result] = count
        gpu_seconds = book.gpu_seconds(now)
        if gpu_seconds > self._reservation_gpu_seconds_seen:
            self.gang_reservation_gpu_seconds.inc(gpu_seconds - self._reservation_gpu_seconds_seen)
            self._reservation_gpu_seconds_seen = gpu_seconds
