"""VolumeZone: a node must be in the zone (and region) of every bound volume of the pod.

As kube-scheduler 1.33's (`volumezone`): PreFilter collects the topology labels of the PVs
bound to the pod's `persistentVolumeClaim` volumes (not generic ephemeral ones: kube's
plugin looks only at `spec.volumes[].persistentVolumeClaim`): the labels
`failure-domain.beta.kubernetes.io/zone|region` and `topology.kubernetes.io/zone|region` (a
value may list zones joined by `__`; one with an empty zone in it is ignored), skipping unbound
claims of `WaitForFirstConsumer` classes; Filter rejects a node that carries any topology label
but not a listed value (`node(s) had no available volume zone`). A node without topology
labels fits (single-zone clusters). Every rejection, PreFilter's and Filter's, is
UnschedulableAndUnresolvable.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plugins._volumes import UNRESOLVABLE, node_mask
from scheduler.core.config import strict_mapping
from scheduler.core.framework import SKIP, CycleState, PreFilterResult, ReasonMasks
from scheduler.core.model import PodInfo
from scheduler.core.snapshot import BoolArray, Snapshot
from scheduler.core.storage import PersistentVolume, StorageState

NAME = "VolumeZone"
REASON = "node(s) had no available volume zone"
BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
TOPOLOGY_LABELS = (BETA_ZONE, BETA_REGION, ZONE, REGION)
_GA = {BETA_ZONE: ZONE, BETA_REGION: REGION}
_STATE = f"{NAME}/topologies"
CODES: dict[str, str] = {REASON: UNRESOLVABLE}
"""kube's status code per reason; PreFilter's claim/PV/class messages: UNRESOLVABLE too."""
PREFILTER_CODE = UNRESOLVABLE

Topology = tuple[str, frozenset[str]]  # (label key, allowed values)


def pv_topologies(pv: PersistentVolume) -> list[Topology]:
    """kube's getPVTopologies; a value with an empty zone in it is ignored, as kube logs it."""
    out = []
    for key in TOPOLOGY_LABELS:
        value = pv.labels.get(key)
        if value is None:
            continue
        zones = value.split("__")
        if all(z.strip() for z in zones):
            out.append((key, frozenset(z.strip() for z in zones)))
    return out


class _Unschedulable(Exception):
    pass


def pod_topologies(pod: PodInfo, storage: StorageState) -> list[Topology]:
    """kube's getPVbyPod."""
    out: list[Topology] = []
    for volume in pod.volumes:
        if volume.claim is None or volume.ephemeral:
            continue
        if volume.claim == "":
            raise _Unschedulable("PersistentVolumeClaim had no name")
        claim = storage.claim(pod.namespace, volume.claim)
        if claim is None:
            raise _Unschedulable(f'persistentvolumeclaim "{volume.claim}" not found')
        if not claim.volume_name:
            class_name = claim.class_name
            if not class_name:
                raise _Unschedulable("PersistentVolumeClaim had no pv name and storageClass name")
            cls = storage.classes.get(class_name)
            if cls is None:
                raise _Unschedulable(f'storageclass.storage.k8s.io "{class_name}" not found')
            if cls.binding_mode is None:
                raise _Unschedulable(f'VolumeBindingMode not set for StorageClass "{class_name}"')
            if cls.wait_for_first_consumer:
                continue
            raise _Unschedulable("PersistentVolume had no name")
        pv = storage.volume(claim.volume_name)
        if pv is None:
            raise _Unschedulable(f'persistentvolume "{claim.volume_name}" not found')
        out.extend(pv_topologies(pv))
    return out


def node_fits(labels: Mapping[str, str], topologies: list[Topology]) -> bool:
    if not any(key in labels for key in TOPOLOGY_LABELS):
        return True
    for key, values in topologies:
        value = labels.get(key)
        if value is None:
            value = labels.get(_GA.get(key, key))
        if value is None or value not in values:
            return False
    return True


class VolumeZone:
    name = NAME

    def pre_filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot
    ) -> PreFilterResult | None:
        try:
            topologies = pod_topologies(pod, snapshot.storage)
        except _Unschedulable as exc:
            return PreFilterResult(unschedulable=str(exc))
        if not topologies:
            return SKIP
        state.write(_STATE, topologies)
        return None

    def filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: BoolArray
    ) -> ReasonMasks:
        topologies: list[Topology] = state.read(_STATE)
        return [
            (REASON, node_mask(snapshot, candidates, lambda n: not node_fits(n.labels, topologies)))
        ]


def new(args: Mapping[str, Any] | None, path: str) -> VolumeZone:
    strict_mapping(args, path, set())
    return VolumeZone()
