"""What the storage plugins share: a per-node check over the candidate slots as a mask."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from scheduler.core.model import NodeInfo
from scheduler.core.snapshot import BoolArray, Snapshot

__all__ = ["ERROR", "UNRESOLVABLE", "UNSCHEDULABLE", "node_mask"]

# kube's status codes, recorded per reason by each storage plugin (its `CODES`): preemption
# can help an `Unschedulable` node, never an `UnschedulableAndUnresolvable` one; `Error` is
# kube's internal-error status (the scheduling cycle fails with the message).
UNSCHEDULABLE = "Unschedulable"
UNRESOLVABLE = "UnschedulableAndUnresolvable"
ERROR = "Error"


def node_mask(
    snapshot: Snapshot, candidates: BoolArray, rejects: Callable[[NodeInfo], bool]
) -> BoolArray:
    """The candidate slots whose node `rejects` (the storage checks look at one node at a
    time: claims, volumes and CSI objects are per node, not columns)."""
    mask = np.zeros(snapshot.capacity, np.bool_)
    for slot in np.flatnonzero(candidates):
        node = snapshot.nodes[int(slot)]
        if node is not None and rejects(node):
            mask[slot] = True
    return mask
