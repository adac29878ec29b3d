"""The plugins shipped with topo-scheduler and the registry that names them.

Each module holds one plugin: its NAME, its args parsing, and a factory `new(args, path)`.
"""

from __future__ import annotations

from collections.abc import Iterator

from plugins import (
    balanced_allocation,
    capacity_scheduling,
    default_binder,
    default_preemption,
    dynamic_resources,
    gpu_topology,
    image_locality,
    inter_pod_affinity,
    node_affinity,
    node_memory_pressure,
    node_ports,
    node_resources_fit,
    node_unschedulable,
    node_volume_limits,
    pod_topology_spread,
    priority_sort,
    scheduling_gates,
    taint_toleration,
    volume_binding,
    volume_restrictions,
    volume_zone,
)
from scheduler.core.config import SchedulerConfiguration, build_frameworks
from scheduler.core.framework import Framework, PluginFactory
from scheduler.core.reservation import DEFAULT_TIMEOUT

__all__ = [
    "REGISTRY",
    "frameworks_for",
    "gang_reservation_seconds",
    "gpu_resource",
    "topology_levels",
]

REGISTRY: dict[str, PluginFactory] = {
    scheduling_gates.NAME: scheduling_gates.new,
    priority_sort.NAME: priority_sort.new,
    node_unschedulable.NAME: node_unschedulable.new,
    taint_toleration.NAME: taint_toleration.new,
    node_affinity.NAME: node_affinity.new,
    node_ports.NAME: node_ports.new,
    node_resources_fit.NAME: node_resources_fit.new,
    node_memory_pressure.NAME: node_memory_pressure.new,
    pod_topology_spread.NAME: pod_topology_spread.new,
    inter_pod_affinity.NAME: inter_pod_affinity.new,
    balanced_allocation.NAME: balanced_allocation.new,
    image_locality.NAME: image_locality.new,
    gpu_topology.NAME: gpu_topology.new,
    volume_restrictions.NAME: volume_restrictions.new,
    node_volume_limits.NAME: node_volume_limits.new,
    volume_binding.NAME: volume_binding.new,
    volume_zone.NAME: volume_zone.new,
    dynamic_resources.NAME: dynamic_resources.new,
    default_preemption.NAME: default_preemption.new,
    capacity_scheduling.NAME: capacity_scheduling.new,
    default_binder.NAME: default_binder.new,
}


def frameworks_for(config: SchedulerConfiguration) -> dict[str, Framework]:
    """Build every profile of a configuration with the shipped plugins."""
    return build_frameworks(config, REGISTRY)


def gpu_resource(config: SchedulerConfiguration) -> str:
    """The GPU resource of the configuration's GPUTopology args (`resourceName`), which the
    cache's GPU state accounts; `nvidia.com/gpu` by default. Profiles must agree: the cache
    is shared."""
    for profile in config.profiles:
        path = profile.args_path.get(gpu_topology.NAME, "")
        args = gpu_topology.parse_args(profile.plugin_args.get(gpu_topology.NAME), path)
        if args.resource_name != gpu_topology.DEFAULT_RESOURCE:
            return args.resource_name
    return gpu_topology.DEFAULT_RESOURCE


def _gpu_topology_args(config: SchedulerConfiguration) -> Iterator[gpu_topology.GPUTopologyArgs]:
    """Each profile's GPUTopology args, in profile order."""
    for profile in config.profiles:
        path = profile.args_path.get(gpu_topology.NAME, "")
        yield gpu_topology.parse_args(profile.plugin_args.get(gpu_topology.NAME), path)


def topology_levels(config: SchedulerConfiguration) -> tuple[str, ...]:
    """The network topology levels of the configuration's GPUTopology args
    (`topologyLevels`, node label keys widest first) that pod groups are placed in; the
    first profile that sets them (profiles share the cache and the group cycle)."""
    return next((a.topology_levels for a in _gpu_topology_args(config) if a.topology_levels), ())


def gang_reservation_seconds(config: SchedulerConfiguration) -> float:
    """How long a gang reservation holds its nodes (`scheduler.core.reservation`): the
    configuration's GPUTopology `gangReservationSeconds`, from the first profile that sets it
    (profiles share the group cycle); 0 (no reservations) when none does."""
    seconds = (a.gang_reservation_seconds for a in _gpu_topology_args(config))
    return next((s for s in seconds if s is not None), DEFAULT_TIMEOUT)
