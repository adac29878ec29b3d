"""One assembly of the scheduler for every front end: `run` (`scheduler/kube`), `simulate`
(`scheduler/sim`) and `explain` (`scheduler/explain.py`).

From the configuration, the profiles, the binder, the hooks and the clock, `assemble` builds
the cache (GPUTopology's resource), the queue (the QueueSort order, the configuration's pod
backoff), the cycle with its nominator, and the group algorithm (the GPUTopology
`topologyLevels` its domains are walked in, the `networkBandwidth` it prices placements
with, and the `gangReservationSeconds` its reservations hold nodes for), so that backoff,
sort order, topology levels, reservations and preemption are wired in one place. Front ends
differ only in what they pass in.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from plugins import frameworks_for, gang_reservation_seconds, gpu_resource, topology_levels
from plugins.gpu_topology import network_bandwidth
from scheduler.core.cache import Cache
from scheduler.core.config import SchedulerConfiguration, default_config
from scheduler.core.cycle import CycleHooks, Scheduler, queue_order
from scheduler.core.framework import Binder, Framework
from scheduler.core.group import GroupCycle, GroupOutcome
from scheduler.core.model import PodInfo
from scheduler.core.network import NetworkBandwidth
from scheduler.core.nominator import Nominator
from scheduler.core.queue import SchedulingQueue

__all__ = ["Assembly", "apply_backoff", "assemble"]


@dataclass(frozen=True, slots=True)
class Assembly:
    """The assembled scheduler: what the front end drives and feeds."""

    config: SchedulerConfiguration
    frameworks: dict[str, Framework]
    cache: Cache
    queue: SchedulingQueue[PodInfo]
    cycle: Scheduler
    groups: GroupCycle | None  # None: pod groups are scheduled pod by pod

    @property
    def nominator(self) -> Nominator:
        return self.cycle.nominator


def apply_backoff(
    queue: SchedulingQueue[PodInfo],
    config: SchedulerConfiguration,
    initial: float | None = None,
    maximum: float | None = None,
) -> None:
    """The queue's pod backoff: the configuration's `podInitialBackoffSeconds` and
    `podMaxBackoffSeconds`, unless given (tests)."""
    queue.initial_backoff = float(
        initial if initial is not None else config.pod_initial_backoff_seconds
    )
    queue.max_backoff = float(maximum if maximum is not None else config.pod_max_backoff_seconds)


def assemble(
    config: SchedulerConfiguration | None,
    binder: Binder,
    *,
    clock: Callable[[], float],
    frameworks: Mapping[str, Framework] | None = None,
    hooks: CycleHooks | None = None,
    cache: Cache | None = None,
    groups: bool = True,
    levels: tuple[str, ...] | None = None,
    network: NetworkBandwidth | None = None,
    reservation_timeout: float | None = None,
    observer: Callable[[GroupOutcome], None] | None = None,
    nominator: Nominator | None = None,
    initial_backoff: float | None = None,
    max_backoff: float | None = None,
    max_unschedulable: float = 300.0,
    timer: Callable[[], float] = time.perf_counter,
) -> Assembly:
    """The scheduler for a configuration (None: the default one). `frameworks`: the
    profiles when already built (else built from the configuration with the shipped
    plugins); `clock`: the queue's (backoff, timeouts; the group algorithm reads it through
    the cycle); `cache`: one already filled (explain's snapshot); `groups`: whether pod groups
    are placed whole, in the `levels` given or the configuration's `topologyLevels`, priced
    with the `network` figures given or the configuration's `networkBandwidth`, their
    reservations held for the `reservation_timeout` given (the simulator's
    `--gang-reservation`) or the configuration's `gangReservationSeconds`."""
    config = config if config is not None else default_config()
    profiles = dict(frameworks) if frameworks is not None else frameworks_for(config)
    queue: SchedulingQueue[PodInfo] = SchedulingQueue(
        clock, max_unschedulable=max_unschedulable, sort_key=queue_order(profiles)
    )
    apply_backoff(queue, config, initial_backoff, max_backoff)
    cache = cache if cache is not None else Cache(gpu_resource(config))
    cycle = Scheduler(cache, queue, profiles, binder, hooks, timer)
    if nominator is not None:  # the simulator's, which meters its reads
        cycle.nominator = nominator
    group_cycle = None
    if groups:
        group_cycle = GroupCycle(
            levels if levels is not None else topology_levels(config),
            observer=observer,
            network=network if network is not None else network_bandwidth(config)[0],
            reservation_timeout=(
                reservation_timeout
                if reservation_timeout is not None
                else gang_reservation_seconds(config)
            ),
        )
        cycle.groups = group_cycle
    return Assembly(config, profiles, cache, queue, cycle, group_cycle)
