"""Dynamic Resource Allocation, pure: resource.k8s.io/v1 values, the CEL environment for
device selectors and kube's structured allocator, with an NVLink-aware device order.

What the DynamicResources plugin calls:

    from scheduler.core.dra import Allocator, CelCache, DeviceClass, ResourceClaim, ...

    cel = CelCache()                                   # one per scheduler: compiled selectors
    allocator = Allocator(classes, slices, allocated,  # one per cycle (PreFilter)
                          cel=cel, gpu_selector=selector)
    results = allocator.allocate(node, claims, topology=topology)   # per node (Filter)
    # -> [AllocationResult per claim] | None ("cannot allocate all claims")
    # AllocationError: kube's error status (on_node: unschedulable on this node only)
    results[i].to_api()                                # status.allocation for PreBind

`allocated` holds the DeviceIDs of every allocated claim (and of claims held in Reserve);
`topology` is the node's GPU topology (annotation) or None; `allocator.preferences` says
which GPU sets were put first (for explain).
"""

from scheduler.core.dra.allocator import (
    ALLOCATION_RESULTS_MAX_SIZE,
    CANNOT_ALLOCATE,
    NOT_AVAILABLE,
    AllocationError,
    Allocator,
    Features,
    NodeLike,
    Pool,
    gather_pools,
    node_selector_matches,
)
from scheduler.core.dra.cel import CelCache, CelError, CompiledSelector
from scheduler.core.dra.nvlink import PCI_ATTRIBUTES, UUID_ATTRIBUTE, canonical_pci, gpu_of
from scheduler.core.dra.types import (
    ALLOCATION_MODE_ALL,
    ALLOCATION_MODE_EXACT_COUNT,
    AllocationResult,
    Attribute,
    ConsumerRef,
    CounterConsumption,
    CounterSet,
    Device,
    DeviceClass,
    DeviceConstraint,
    DeviceID,
    DeviceRequest,
    DeviceResult,
    DeviceTaint,
    DeviceToleration,
    ExactRequest,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
    Selector,
    SubRequest,
)

__all__ = [
    "ALLOCATION_MODE_ALL",
    "ALLOCATION_MODE_EXACT_COUNT",
    "ALLOCATION_RESULTS_MAX_SIZE",
    "CANNOT_ALLOCATE",
    "NOT_AVAILABLE",
    "PCI_ATTRIBUTES",
    "UUID_ATTRIBUTE",
    "AllocationError",
    "AllocationResult",
    "Allocator",
    "Attribute",
    "CelCache",
    "CelError",
    "CompiledSelector",
    "ConsumerRef",
    "CounterConsumption",
    "CounterSet",
    "Device",
    "DeviceClass",
    "DeviceConstraint",
    "DeviceID",
    "DeviceRequest",
    "DeviceResult",
    "DeviceTaint",
    "DeviceToleration",
    "ExactRequest",
    "Features",
    "NodeLike",
    "Pool",
    "ResourceClaim",
    "ResourceClaimTemplate",
    "ResourceSlice",
    "Selector",
    "SubRequest",
    "canonical_pci",
    "gather_pools",
    "gpu_of",
    "node_selector_matches",
]
