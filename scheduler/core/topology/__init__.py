"""GPU topology: annotation schema, pair scores and graph, best-set search, device-plugin
emulation, built-in topologies. Pure: no NVML, no Kubernetes client."""

from scheduler.core.topology.builtin import (
    BUILTIN_TOPOLOGIES,
    builtin_topology,
    builtin_topology_text,
)
from scheduler.core.topology.device_plugin import device_plugin_set
from scheduler.core.topology.nvidia_smi import parse_nvidia_smi
from scheduler.core.topology.schema import (
    ANNOTATION_ASSIGNMENTS,
    ANNOTATION_GPUS,
    ANNOTATION_PLACEMENT,
    ANNOTATION_TOPOLOGY,
    GpuInfo,
    GpuLink,
    Placement,
    Topology,
    TopologyError,
    format_assignments,
    format_gpu_indices,
    format_topology,
    parse_assignments,
    parse_gpu_indices,
    parse_placement,
    parse_topology,
    topology_from_dict,
    topology_to_dict,
)
from scheduler.core.topology.scoring import (
    DEFAULT_TABLE,
    DEVICE_PLUGIN_TABLE,
    PairScoreTable,
    indices_to_mask,
    mask_to_indices,
    pair_matrix,
    set_score,
    topology_graph,
)
from scheduler.core.topology.select import GpuSelector, Selection

__all__ = [
    "ANNOTATION_ASSIGNMENTS",
    "ANNOTATION_GPUS",
    "ANNOTATION_PLACEMENT",
    "ANNOTATION_TOPOLOGY",
    "BUILTIN_TOPOLOGIES",
    "DEFAULT_TABLE",
    "DEVICE_PLUGIN_TABLE",
    "GpuInfo",
    "GpuLink",
    "GpuSelector",
    "PairScoreTable",
    "Placement",
    "Selection",
    "Topology",
    "TopologyError",
    "builtin_topology",
    "builtin_topology_text",
    "device_plugin_set",
    "format_assignments",
    "format_gpu_indices",
    "format_topology",
    "indices_to_mask",
    "mask_to_indices",
    "pair_matrix",
    "parse_assignments",
    "parse_gpu_indices",
    "parse_nvidia_smi",
    "parse_placement",
    "parse_topology",
    "set_score",
    "topology_from_dict",
    "topology_graph",
    "topology_to_dict",
]
