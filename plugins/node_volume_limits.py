"""NodeVolumeLimits: CSI volumes attached to a node stay within the driver's limit.

As kube-scheduler 1.33's CSI limits (`nodevolumelimits/csi.go`): each PVC (or generic
ephemeral volume's PVC) of a pod counts as one volume of its CSI driver, identified by
driver and volume handle (the PV's `spec.csi`, or, for an unbound claim, the class's
provisioner and a per-claim handle); a volume already used on the node is not counted twice.
Volumes the node's VolumeAttachments hold (attacher and the PV's CSI handle) count too, once,
even when no pod on the node uses them any more (kube's getNodeVolumeAttachmentInfo).
The limit per driver is the node's CSINode `spec.drivers[].allocatable.count` (or the node's
`attachable-volumes-csi-<driver>` allocatable, kube's older form); over it the node is
rejected (`node(s) exceed max volume count`, Unschedulable: preemption may help). A missing
claim of the pod rejects every node (UnschedulableAndUnresolvable); a generic ephemeral claim
the pod does not own, or a claim volume without a name, is kube's Error. Inline in-tree
volumes migrated to CSI are not counted (topo-scheduler does not translate in-tree volumes).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from plugins._volumes import ERROR, UNRESOLVABLE, UNSCHEDULABLE, node_mask
from scheduler.core.config import strict_mapping
from scheduler.core.framework import SKIP, CycleState, PreFilterResult, ReasonMasks
from scheduler.core.model import NodeInfo, PodInfo
from scheduler.core.snapshot import BoolArray, Snapshot
from scheduler.core.storage import CSINode, StorageState, VolumeAttachment, attach_limit_key

NAME = "NodeVolumeLimits"
REASON = "node(s) exceed max volume count"
NO_NAME = "PersistentVolumeClaim had no name"
CODES: dict[str, str] = {REASON: UNSCHEDULABLE, NO_NAME: ERROR}
"""kube's status code per fixed reason; a claim lookup failure carries `_NotFound.code`."""


class _NotFound(Exception):
    def __init__(self, message: str, code: str = UNRESOLVABLE) -> None:
        super().__init__(message)
        self.code = code


def attachable_volumes(
    pod: PodInfo, storage: StorageState, new_pod: bool, into: dict[str, str]
) -> None:
    """kube's filterAttachableVolumes: unique volume name -> attach limit key."""
    for volume in pod.volumes:
        if volume.claim is None:
            continue
        if volume.claim == "":
            if new_pod:
                raise _NotFound(NO_NAME, ERROR)
            continue
        claim = storage.claim(pod.namespace, volume.claim)
        if claim is None:
            if new_pod:
                raise _NotFound(
                    f"looking up PVC {pod.namespace}/{volume.claim}: "
                    f'persistentvolumeclaim "{volume.claim}" not found'
                )
            continue
        if volume.ephemeral and claim.controller_uid != pod.uid:
            if new_pod:
                raise _NotFound(
                    f"PVC {claim.namespace}/{claim.name} was not created for pod "
                    f"{pod.namespace}/{pod.name} (pod is not owner)",
                    ERROR,
                )
            continue
        driver, handle = "", ""
        pv = storage.volume(claim.volume_name) if claim.volume_name else None
        if pv is not None:
            if pv.csi is None:
                continue
            driver, handle = pv.csi
        elif claim.class_name:
            cls = storage.classes.get(claim.class_name)
            if cls is not None:
                driver, handle = cls.provisioner, f"claim-{claim.namespace}/{claim.name}"
        if driver and handle:
            into[f"{driver}/{handle}"] = attach_limit_key(driver)


def attached_by_attachments(
    attachments: Iterable[VolumeAttachment], storage: StorageState, into: dict[str, str]
) -> None:
    """kube's getNodeVolumeAttachmentInfo: the CSI volumes a node's VolumeAttachments hold
    (one with no attacher, no PV name, an unknown PV or a non-CSI PV is skipped)."""
    for va in attachments:
        if not va.attacher or va.pv_name is None:
            continue
        pv = storage.volume(va.pv_name)
        if pv is None or pv.csi is None:
            continue
        into.setdefault(f"{va.attacher}/{pv.csi[1]}", attach_limit_key(va.attacher))


def volume_limits(node: NodeInfo, csi_node: CSINode | None) -> dict[str, int]:
    """kube's getVolumeLimits: node allocatable attach limits, overridden by CSINode's."""
    limits = {k: v for k, v in node.allocatable.items() if k.startswith("attachable-volumes-")}
    if csi_node is not None:
        for driver, count in csi_node.limits.items():
            limits[attach_limit_key(driver)] = count
    return limits


def exceeds(
    new: Mapping[str, str],
    pods: Iterable[PodInfo],
    storage: StorageState,
    limits: dict[str, int],
    attachments: Iterable[VolumeAttachment] = (),
) -> bool:
    attached: dict[str, str] = {}
    for other in pods:
        attachable_volumes(other, storage, False, attached)
    attached_by_attachments(attachments, storage, attached)
    fresh = {name: key for name, key in new.items() if name not in attached}
    used: dict[str, int] = {}
    for key in attached.values():
        used[key] = used.get(key, 0) + 1
    wanted: dict[str, int] = {}
    for key in fresh.values():
        wanted[key] = wanted.get(key, 0) + 1
    return any(
        key in limits and used.get(key, 0) + count > limits[key] for key, count in wanted.items()
    )


class NodeVolumeLimits:
    name = NAME

    def pre_filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot
    ) -> PreFilterResult | None:
        # kube's: only pods with claims are checked; a missing claim fails in Filter
        return None if any(v.claim is not None for v in pod.volumes) else SKIP

    def filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: BoolArray
    ) -> ReasonMasks:
        storage = snapshot.storage
        new: dict[str, str] = {}
        try:
            attachable_volumes(pod, storage, True, new)
        except _NotFound as exc:  # every node: the pod cannot run without its claim
            return [(str(exc), candidates.copy())]
        if not new:
            return []

        by_node: dict[str, list[VolumeAttachment]] = {}
        for va in storage.attachments.values():
            by_node.setdefault(va.node_name, []).append(va)

        def over(node: NodeInfo) -> bool:
            limits = volume_limits(node, storage.csi_nodes.get(node.name))
            pods = snapshot.pods[snapshot.index[node.name]].values()
            return bool(limits) and exceeds(new, pods, storage, limits, by_node.get(node.name, ()))

        return [(REASON, node_mask(snapshot, candidates, over))]


def new(args: Mapping[str, Any] | None, path: str) -> NodeVolumeLimits:
    strict_mapping(args, path, set())
    return NodeVolumeLimits()
