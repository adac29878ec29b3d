"""The plugins shipped with topo-scheduler and the registry that names them.

Each module holds one plugin: its NAME, its args parsing, and a factory `new(args, path)`.
"""

from __future__ import annotations

from collections.abc import Mapping

from plugins import (
    balanced_allocation,
    gpu_topology,
    image_locality,
    node_affinity,
    node_memory_pressure,
    node_ports,
    node_resources_fit,
    node_unschedulable,
    taint_toleration,
)
from scheduler.core.config import SchedulerConfiguration, build_frameworks
from scheduler.core.framework import Framework, PluginFactory

__all__ = ["REGISTRY", "frameworks_for", "gpu_resource"]

REGISTRY: dict[str, PluginFactory] = {
    node_unschedulable.NAME: node_unschedulable.new,
    taint_toleration.NAME: taint_toleration.new,
    node_affinity.NAME: node_affinity.new,
    node_ports.NAME: node_ports.new,
    node_resources_fit.NAME: node_resources_fit.new,
    node_memory_pressure.NAME: node_memory_pressure.new,
    balanced_allocation.NAME: balanced_allocation.new,
    image_locality.NAME: image_locality.new,
    gpu_topology.NAME: gpu_topology.new,
}


def frameworks_for(config: SchedulerConfiguration) -> dict[str, Framework]:
    """Build every profile of a configuration with the shipped plugins."""
    return build_frameworks(config, REGISTRY)


def gpu_resource(frameworks: Mapping[str, Framework]) -> str:
    """The GPU resource the profiles' GPUTopology plugin allocates (for the cache's GPU
    accounting); `nvidia.com/gpu` when no profile has one."""
    for framework in frameworks.values():
        for allocator in framework.allocators:
            if isinstance(allocator, gpu_topology.GPUTopology):
                return allocator.args.resource_name
    return gpu_topology.DEFAULT_RESOURCE
