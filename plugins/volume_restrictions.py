"""VolumeRestrictions: volumes that cannot be shared with pods already placed.

As kube-scheduler 1.33's (`volumerestrictions`):

- a ReadWriteOncePod claim already used by a pod on any node rejects every node
  (`node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access
  mode`);
- the legacy in-tree disks conflict on a node with a pod that mounts the same disk
  (`node(s) had no available disk`): the same GCE PD unless both mount it read-only, the same
  AWS EBS volume, the same ISCSI IQN unless both are read-only, the same RBD image (a shared
  Ceph monitor, same pool and image) unless both are read-only.

Both Filter reasons are Unschedulable (preemption may free the node or the claim); a missing
claim in PreFilter (`persistentvolumeclaim "NAME" not found`) is UnschedulableAndUnresolvable.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from plugins._volumes import UNRESOLVABLE, UNSCHEDULABLE
from scheduler.core.config import strict_mapping
from scheduler.core.framework import SKIP, CycleState, PreFilterResult, ReasonMasks
from scheduler.core.model import PodInfo
from scheduler.core.snapshot import BoolArray, NodeState, Snapshot
from scheduler.core.storage import PodVolume

NAME = "VolumeRestrictions"
REASON_DISK_CONFLICT = "node(s) had no available disk"
REASON_RWOP_CONFLICT = (
    "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode"
)
_STATE = f"{NAME}/rwop-conflicts"
CODES: dict[str, str] = {
    REASON_DISK_CONFLICT: UNSCHEDULABLE,
    REASON_RWOP_CONFLICT: UNSCHEDULABLE,
}
"""kube's status code per reason."""
PREFILTER_CODE = UNRESOLVABLE


def volumes_conflict(volume: PodVolume, existing: PodVolume) -> bool:
    """kube's isVolumeConflict for one pair of volumes."""
    both_read_only = volume.read_only and existing.read_only
    if volume.disk is not None and volume.disk == existing.disk:
        return volume.disk[0] == "aws" or not both_read_only
    if volume.rbd is not None and existing.rbd is not None:
        monitors, pool, image = volume.rbd
        other_monitors, other_pool, other_image = existing.rbd
        return (
            bool(set(monitors) & set(other_monitors))
            and pool == other_pool
            and image == other_image
            and not both_read_only
        )
    return False


def _disk_conflict(pod: PodInfo, others: list[PodInfo]) -> bool:
    return any(
        volumes_conflict(v, e)
        for v in pod.volumes
        if v.needs_restrictions_check
        for other in others
        for e in other.volumes
    )


class VolumeRestrictions:
    name = NAME

    def pre_filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot
    ) -> PreFilterResult | None:
        storage = snapshot.storage
        needs_check = any(v.needs_restrictions_check for v in pod.volumes)
        conflicts = 0
        for v in pod.volumes:
            if v.claim is None or v.ephemeral:
                continue
            claim = storage.claim(pod.namespace, v.claim)
            if claim is None:
                return PreFilterResult(unschedulable=f'persistentvolumeclaim "{v.claim}" not found')
            if "ReadWriteOncePod" in claim.access_modes and storage.claim_in_use(claim.key):
                conflicts += 1
        if not needs_check and conflicts == 0:
            return SKIP
        state.write(_STATE, conflicts)
        return None

    def filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: BoolArray
    ) -> ReasonMasks:
        disk = np.zeros(snapshot.capacity, np.bool_)
        if any(v.needs_restrictions_check for v in pod.volumes):
            for slot in np.flatnonzero(candidates):
                if _disk_conflict(pod, list(snapshot.pods[int(slot)].values())):
                    disk[slot] = True
        rwop = candidates & ~disk if state.read(_STATE) > 0 else np.zeros_like(disk)
        return [(REASON_DISK_CONFLICT, disk), (REASON_RWOP_CONFLICT, rwop)]

    def filter_node(self, pod: PodInfo, node: NodeState) -> list[str]:
        """The per-node form of the disk check (the ReadWriteOncePod check is cluster-wide:
        its state comes from PreFilter)."""
        return [REASON_DISK_CONFLICT] if _disk_conflict(pod, node.pods) else []


def new(args: Mapping[str, Any] | None, path: str) -> VolumeRestrictions:
    strict_mapping(args, path, set())
    return VolumeRestrictions()
