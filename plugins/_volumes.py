"""What the storage plugins share: a per-node check over the candidate slots as a mask."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from scheduler.core.model import NodeInfo
from scheduler.core.snapshot import BoolArray, Snapshot

__all__ = ["node_mask"]


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
