"""kube-scheduler 1.33's volume plugin cases (volumebinding, volumezone, volumerestrictions,
nodevolumelimits test tables), run through the whole default profile as `explain` runs it:
each case gives nodes, storage objects and pods already placed, and expects the per-node
reasons (empty: fits) or the pod-level PreFilter message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from scheduler.core.cache import Cache
from scheduler.core.framework import CycleState, ScheduleResult
from scheduler.core.model import ModelError, NodeInfo, PodInfo
from scheduler.core.storage import STORAGE_KINDS, attach_limit_key
from tests.builders import node, pod
from tests.core.core_support import framework

from .objects import (
    HOSTNAME,
    capacity,
    claim_volume,
    csi_driver,
    csi_node,
    ephemeral_volume,
    pv,
    pvc,
    resource_claim,
    storage_class,
    volume_attachment,
)

Obj = dict[str, Any]
ZONE = "topology.kubernetes.io/zone"
BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"
REGION = "topology.kubernetes.io/region"

R_BIND = "node(s) didn't find available persistent volumes to bind"
R_AFFINITY = "node(s) had volume node affinity conflict"
R_SPACE = "node(s) did not have enough free storage"
R_NO_PV = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
R_ZONE = "node(s) had no available volume zone"
R_DISK = "node(s) had no available disk"
R_RWOP = (
    "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode"
)
R_LIMIT = "node(s) exceed max volume count"


def with_volumes(name: str, volumes: list[Obj], **kw: Any) -> Obj:
    return pod(name, {"cpu": "100m"}, spec={"volumes": volumes}, **kw)


def cluster(nodes: list[Obj], objects: list[Obj], placed: list[Obj] = ()) -> Cache:  # type: ignore[assignment]
    cache = Cache()
    for n in nodes:
        cache.add_node(NodeInfo.from_object(n))
    for obj in objects:
        cache.snapshot.storage.add(STORAGE_KINDS[obj["kind"]].from_object(obj))
    for p in placed:
        cache.add_pod(PodInfo.from_object(p))
    return cache


def decide(
    cache: Cache, p: Obj, disabled: tuple[str, ...] = ()
) -> tuple[ScheduleResult, dict[str, list[str]]]:
    plugins = {"multiPoint": {"disabled": [{"name": n} for n in disabled]}} if disabled else None
    result = framework(plugins).schedule(PodInfo.from_object(p), cache.snapshot, CycleState())
    snap = cache.snapshot
    reasons = {str(snap.names[s]): result.node_reasons(s) for s in snap.live_slots()}
    return result, reasons


@dataclass
class Case:
    id: str
    pod: Obj
    objects: list[Obj]
    want: dict[str, list[str]] = field(default_factory=dict)  # node -> reasons
    message: str | None = None  # the PreFilter rejection, for every node
    nodes: list[Obj] = field(
        default_factory=lambda: [
            node("node-a", labels={HOSTNAME: "node-a", ZONE: "zone-a", "rack": "r1"}),
            node("node-b", labels={HOSTNAME: "node-b", ZONE: "zone-b", "rack": "r2"}),
        ]
    )
    placed: list[Obj] = field(default_factory=list)
    disabled: tuple[str, ...] = ()  # plugins off, to see a later plugin's verdict


def _pod(*claims: str, name: str = "p") -> Obj:
    return with_volumes(name, [claim_volume(f"v{i}", c) for i, c in enumerate(claims)])


WFFC = storage_class("wait")
IMMEDIATE = storage_class("immediate", wait=False)
CSI_CLASS = storage_class("csi", provisioner="ebs.csi.example")

VOLUME_BINDING = [
    Case("pod has no pvcs", pod("p", {"cpu": "100m"}), [], {"node-a": [], "node-b": []}),
    Case(
        "all bound",
        _pod("c1"),
        [pvc("c1", volume="pv1", bound=True), pv("pv1", claim=("default", "c1"), phase="Bound")],
        {"node-a": [], "node-b": []},
    ),
    Case(  # kube >= 1.32 no longer narrows the nodes in PreFilter for a bound local PV
        "all bound with a local volume: the other node fails Filter",
        _pod("c1"),
        [
            pvc("c1", volume="pv1", bound=True),
            pv("pv1", claim=("default", "c1"), phase="Bound", hosts=("node-a",)),
        ],
        {"node-a": [], "node-b": [R_AFFINITY]},
    ),
    Case(
        "PVC does not exist",
        _pod("missing"),
        [],
        message='persistentvolumeclaim "missing" not found',
    ),
    Case(
        "part of PVCs do not exist",
        _pod("c1", "missing"),
        [pvc("c1", volume="pv1", bound=True), pv("pv1", claim=("default", "c1"))],
        message='persistentvolumeclaim "missing" not found',
    ),
    Case(
        "immediate claims not bound",
        _pod("c1"),
        [IMMEDIATE, pvc("c1", class_name="immediate")],
        message="pod has unbound immediate PersistentVolumeClaims",
    ),
    Case(
        "prebound claim counts as unbound immediate",
        _pod("c1"),
        [WFFC, pvc("c1", class_name="wait", volume="pv1")],
        message="pod has unbound immediate PersistentVolumeClaims",
    ),
    Case(
        "unbound claims no matches",
        _pod("c1"),
        [WFFC, pvc("c1", class_name="wait")],
        {"node-a": [R_BIND], "node-b": [R_BIND]},
    ),
    Case(
        "bound and unbound unsatisfied",
        _pod("c1", "c2"),
        [
            WFFC,
            pvc("c1", volume="pv1", bound=True),
            pv(
                "pv1",
                claim=("default", "c1"),
                affinity=[
                    {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r9"]}]}
                ],
            ),
            pvc("c2", class_name="wait"),
        ],
        {"node-a": [R_AFFINITY, R_BIND], "node-b": [R_AFFINITY, R_BIND]},
    ),
    Case(
        "pvc bound to a pv that does not exist",
        _pod("c1"),
        [pvc("c1", volume="gone", bound=True)],
        {"node-a": [R_NO_PV], "node-b": [R_NO_PV]},
        disabled=("VolumeZone",),
    ),
    Case(  # in the whole profile VolumeZone's PreFilter looks the PV up first, as in kube
        "pvc bound to a pv that does not exist, whole profile",
        _pod("c1"),
        [pvc("c1", volume="gone", bound=True)],
        message='persistentvolume "gone" not found',
    ),
    Case(
        "available local pv matches on its node only",
        _pod("c1"),
        [WFFC, pvc("c1", class_name="wait"), pv("pv1", class_name="wait", hosts=("node-b",))],
        {"node-a": [R_BIND], "node-b": []},
    ),
    Case(
        "pv too small, wrong class or wrong access mode does not match",
        _pod("c1"),
        [
            WFFC,
            pvc("c1", class_name="wait", size="5Gi", modes=("ReadWriteMany",)),
            pv("small", class_name="wait", size="1Gi", modes=("ReadWriteMany",)),
            pv("other-class", class_name="other", size="10Gi", modes=("ReadWriteMany",)),
            pv("rwo", class_name="wait", size="10Gi"),
        ],
        {"node-a": [R_BIND], "node-b": [R_BIND]},
    ),
    Case(
        "provisioning allowed by the class topology",
        _pod("c1"),
        [
            storage_class(
                "zonal",
                provisioner="ebs.csi.example",
                topologies=[{"matchLabelExpressions": [{"key": ZONE, "values": ["zone-a"]}]}],
            ),
            pvc("c1", class_name="zonal"),
        ],
        {"node-a": [], "node-b": [R_BIND]},
    ),
    Case(
        "selected-node annotation keeps the claim on its node",
        _pod("c1"),
        [
            CSI_CLASS,
            pvc(
                "c1", class_name="csi", annotations={"volume.kubernetes.io/selected-node": "node-b"}
            ),
        ],
        {"node-a": [R_BIND], "node-b": []},
    ),
    Case(
        "storage capacity: not enough on either node",
        _pod("c1"),
        [
            CSI_CLASS,
            csi_driver("ebs.csi.example"),
            pvc("c1", class_name="csi", size="10Gi"),
            capacity("cap-a", "csi", "5Gi", {ZONE: "zone-a"}),
            capacity("cap-b", "csi", "100Gi", {ZONE: "zone-b"}, max_size="1Gi"),
        ],
        {"node-a": [R_SPACE], "node-b": [R_SPACE]},
    ),
    Case(
        "storage capacity: enough on one node",
        _pod("c1"),
        [
            CSI_CLASS,
            csi_driver("ebs.csi.example"),
            pvc("c1", class_name="csi", size="10Gi"),
            capacity("cap-a", "csi", "50Gi", {ZONE: "zone-a"}),
            capacity("cap-other", "other", "50Gi", {ZONE: "zone-b"}),
        ],
        {"node-a": [], "node-b": [R_SPACE]},
    ),
    Case(  # the one-label lookup and the general matcher agree on the same topology
        "storage capacity: topology as an expression, as a label, and as a NotIn",
        _pod("c1"),
        [
            CSI_CLASS,
            csi_driver("ebs.csi.example"),
            pvc("c1", class_name="csi", size="10Gi"),
            capacity("cap-a", "csi", "50Gi", None)
            | {
                "nodeTopology": {
                    "matchExpressions": [{"key": ZONE, "operator": "In", "values": ["zone-a"]}]
                }
            },
            capacity("cap-b", "csi", "5Gi", {ZONE: "zone-b"}),
            capacity("cap-c", "csi", "50Gi", None)
            | {
                "nodeTopology": {
                    "matchExpressions": [
                        {"key": ZONE, "operator": "NotIn", "values": ["zone-a", "zone-b"]}
                    ]
                }
            },
        ],
        {"node-a": [], "node-b": [R_SPACE]},
    ),
    Case(
        "storage capacity ignored for a driver without storageCapacity",
        _pod("c1"),
        [CSI_CLASS, csi_driver("ebs.csi.example", capacity=False), pvc("c1", class_name="csi")],
        {"node-a": [], "node-b": []},
    ),
    Case(
        "claim being deleted",
        _pod("c1"),
        [pvc("c1", volume="pv1", bound=True) | {}],
        {},
    ),
]
# a claim with a deletionTimestamp
VOLUME_BINDING[-1].objects[0]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
VOLUME_BINDING[-1].message = 'persistentvolumeclaim "c1" is being deleted'

NO_MODE = storage_class("nomode", wait=None)

VOLUME_BINDING += [
    Case(  # podHasPVCs: a Lost claim, before anything about its binding
        "claim lost: bound to a PV that is gone",
        _pod("c1"),
        [pvc("c1", volume="gone", bound=True, phase="Lost")],
        message='persistentvolumeclaim "c1" bound to non-existent persistentvolume "gone"',
    ),
    Case(
        "generic ephemeral claim not created yet",
        with_volumes("p", [ephemeral_volume("scratch")]),
        [WFFC],
        message="waiting for ephemeral volume controller to create the persistentvolumeclaim "
        '"p-scratch"',
    ),
    Case(
        "generic ephemeral claim owned by another pod",
        with_volumes("p", [ephemeral_volume("scratch")]),
        [WFFC, pvc("p-scratch", class_name="wait", owner_uid="someone-else")],
        message="PVC default/p-scratch was not created for pod default/p (pod is not owner)",
    ),
    Case(
        "generic ephemeral claim of the pod is provisioned like any other",
        with_volumes("p", [ephemeral_volume("scratch", "csi")]),
        [CSI_CLASS, pvc("p-scratch", class_name="csi", owner_uid="uid-default-p")],
        {"node-a": [], "node-b": []},
    ),
    Case(  # every claim is looked up before any binding mode is read
        "missing claim reported before a class without volumeBindingMode",
        _pod("c1", "missing"),
        [NO_MODE, pvc("c1", class_name="nomode")],
        message='persistentvolumeclaim "missing" not found',
        disabled=("VolumeRestrictions",),  # it looks the claims up first in the profile
    ),
    Case(
        "class without volumeBindingMode",
        _pod("c1"),
        [NO_MODE, pvc("c1", class_name="nomode")],
        message='VolumeBindingMode not set for StorageClass "nomode"',
    ),
    Case(
        "unbound claim of a class that does not exist waits like an immediate one",
        _pod("c1"),
        [pvc("c1", class_name="gone")],
        message="pod has unbound immediate PersistentVolumeClaims",
    ),
    Case(
        "PV pre-bound to the claim is used only where its affinity allows",
        _pod("c1"),
        [
            WFFC,
            pvc("c1", class_name="wait"),
            pv("pv1", class_name="wait", claim=("default", "c1"), hosts=("node-b",)),
        ],
        {"node-a": [R_BIND], "node-b": []},
    ),
    Case(
        "PV pre-bound to another claim is never matched",
        _pod("c1"),
        [WFFC, pvc("c1", class_name="wait"), pv("pv1", class_name="wait", claim=("default", "x"))],
        {"node-a": [R_BIND], "node-b": [R_BIND]},
    ),
    Case(
        "only Available PVs match a claim that is not pre-bound",
        _pod("c1"),
        [WFFC, pvc("c1", class_name="wait"), pv("pv1", class_name="wait", phase="Released")],
        {"node-a": [R_BIND], "node-b": [R_BIND]},
    ),
    Case(
        "claim selector must match the PV labels",
        _pod("c1"),
        [
            WFFC,
            pvc("c1", class_name="wait", selector={"tier": "fast"}),
            pv("slow", class_name="wait", labels={"tier": "slow"}, hosts=("node-a",)),
            pv("fast", class_name="wait", labels={"tier": "fast"}, hosts=("node-b",)),
        ],
        {"node-a": [R_BIND], "node-b": []},
    ),
    Case(  # FindMatchingVolume with the VolumeAttributesClass feature off (1.33's default)
        "claim naming a VolumeAttributesClass matches no PV",
        _pod("c1"),
        [WFFC, pvc("c1", class_name="wait", attributes_class="gold"), pv("pv1", class_name="wait")],
        {"node-a": [R_BIND], "node-b": [R_BIND]},
    ),
    Case(
        "two claims cannot take the same PV",
        _pod("c1", "c2"),
        [
            WFFC,
            pvc("c1", class_name="wait"),
            pvc("c2", class_name="wait"),
            pv("pv-a", class_name="wait", hosts=("node-a",)),
            pv("pv-b1", class_name="wait", hosts=("node-b",)),
            pv("pv-b2", class_name="wait", hosts=("node-b",)),
        ],
        {"node-a": [R_BIND], "node-b": []},
    ),
    Case(  # kube's reason order: node conflict, bind conflict, space, missing PV
        "bound claim on a missing PV and an unbound claim without a match",
        _pod("c1", "c2"),
        [WFFC, pvc("c1", volume="gone", bound=True), pvc("c2", class_name="wait")],
        {"node-a": [R_BIND, R_NO_PV], "node-b": [R_BIND, R_NO_PV]},
        disabled=("VolumeZone",),
    ),
    Case(
        "selected-node annotation for another node fails before the bound check",
        _pod("c1", "c2"),
        [
            CSI_CLASS,
            pvc("c1", volume="pv1", bound=True),
            pv("pv1", claim=("default", "c1"), phase="Bound", hosts=("node-b",)),
            pvc(
                "c2", class_name="csi", annotations={"volume.kubernetes.io/selected-node": "node-b"}
            ),
        ],
        {"node-a": [R_AFFINITY, R_BIND], "node-b": []},
    ),
    Case(
        "storage capacity not checked when the driver has no CSIDriver object",
        _pod("c1"),
        [
            CSI_CLASS,
            pvc("c1", class_name="csi", size="10Gi"),
            capacity("c", "csi", "1Gi", {ZONE: "zone-a"}),
        ],
        {"node-a": [], "node-b": []},
    ),
    Case(
        "CSIStorageCapacity without a node topology reaches no node",
        _pod("c1"),
        [
            CSI_CLASS,
            csi_driver("ebs.csi.example"),
            pvc("c1", class_name="csi"),
            capacity("c", "csi", "9Gi", None),
        ],
        {"node-a": [R_SPACE], "node-b": [R_SPACE]},
    ),
    Case(  # kube's MatchTopologySelectorTerms: an empty term selects nothing
        "allowedTopologies with an empty term allows no node",
        _pod("c1"),
        [
            storage_class("t", provisioner="ebs.csi.example", topologies=[{}]),
            pvc("c1", class_name="t"),
        ],
        {"node-a": [R_BIND], "node-b": [R_BIND]},
    ),
    Case(  # CheckNodeAffinity sees a node with labels only: its name is empty
        "PV affinity on metadata.name: In never matches, NotIn always does",
        _pod("c1", "c2"),
        [
            pvc("c1", volume="pv1", bound=True),
            pv(
                "pv1",
                claim=("default", "c1"),
                phase="Bound",
                affinity=[
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "NotIn", "values": ["x"]}
                        ]
                    }
                ],
            ),
            pvc("c2", volume="pv2", bound=True),
            pv(
                "pv2",
                claim=("default", "c2"),
                phase="Bound",
                affinity=[
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": ["node-a"]}
                        ]
                    },
                    {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r2"]}]},
                ],
            ),
        ],
        {"node-a": [R_AFFINITY], "node-b": []},
    ),
    Case(  # provisioning fails on the class before capacity is looked at
        "class that cannot provision: bind conflict, not a space one",
        _pod("c1"),
        [WFFC, csi_driver("kubernetes.io/no-provisioner"), pvc("c1", class_name="wait")],
        {"node-a": [R_BIND], "node-b": [R_BIND]},
    ),
]


def _zone_pod(*claims: str) -> Obj:
    return _pod(*claims)


def _zoned_nodes() -> list[Obj]:
    return [
        node("beta", labels={BETA_ZONE: "us-west1-a", BETA_REGION: "us-west1"}),
        node("ga", labels={ZONE: "us-west1-b"}),
        node("plain", labels={}),
    ]


def _bound(claim: str, pv_name: str, labels: dict[str, str]) -> list[Obj]:
    return [
        pvc(claim, volume=pv_name, bound=True),
        pv(pv_name, claim=("default", claim), phase="Bound", labels=labels),
    ]


VOLUME_ZONE = [
    Case(
        "pod without volume",
        pod("p", {"cpu": "100m"}),
        [],
        {"beta": [], "ga": [], "plain": []},
        nodes=_zoned_nodes(),
    ),
    Case(
        "beta zone label matched; node without labels fits",
        _zone_pod("c1"),
        _bound("c1", "pv1", {BETA_ZONE: "us-west1-a"}),
        {"beta": [], "ga": [R_ZONE], "plain": []},
        nodes=_zoned_nodes(),
    ),
    Case(
        "beta pv label matched against the node's GA label",
        _zone_pod("c1"),
        _bound("c1", "pv1", {BETA_ZONE: "us-west1-b"}),
        {"beta": [R_ZONE], "ga": [], "plain": []},
        nodes=_zoned_nodes(),
    ),
    Case(
        "multi-zone label",
        _zone_pod("c1"),
        _bound("c1", "pv1", {ZONE: "us-west1-a__us-west1-b"}),
        {"beta": [R_ZONE], "ga": [], "plain": []},
        nodes=_zoned_nodes(),
    ),
    Case(
        "region label mismatch",
        _zone_pod("c1"),
        _bound("c1", "pv1", {BETA_REGION: "us-east1"}),
        {"beta": [R_ZONE], "ga": [R_ZONE], "plain": []},
        nodes=_zoned_nodes(),
    ),
    Case(
        "unbound WaitForFirstConsumer claim is skipped",
        _zone_pod("c1"),
        [storage_class("wait", provisioner="ebs.csi.example"), pvc("c1", class_name="wait")],
        {"beta": [], "ga": [], "plain": []},
        nodes=_zoned_nodes(),
    ),
]

VOLUME_ZONE += [
    Case(
        "zone and region must both match",
        _zone_pod("c1"),
        _bound("c1", "pv1", {BETA_ZONE: "us-west1-a", BETA_REGION: "us-east1"}),
        {"beta": [R_ZONE], "ga": [R_ZONE], "plain": []},
        nodes=_zoned_nodes(),
    ),
    Case(
        "node with a region label only has no zone for a zonal PV",
        _zone_pod("c1"),
        _bound("c1", "pv1", {ZONE: "us-west1-a"}),
        {"region-only": [R_ZONE], "plain": []},
        nodes=[node("region-only", labels={REGION: "us-west1"}), node("plain")],
    ),
    Case(
        "a label value with an empty zone is ignored",
        _zone_pod("c1"),
        _bound("c1", "pv1", {ZONE: "us-west1-a__"}),
        {"beta": [], "ga": [], "plain": []},
        nodes=_zoned_nodes(),
    ),
    Case(
        "several bound claims: every PV's zone applies",
        _zone_pod("c1", "c2"),
        [
            *_bound("c1", "pv1", {ZONE: "us-west1-a__us-west1-b"}),
            *_bound("c2", "pv2", {BETA_ZONE: "us-west1-b"}),
        ],
        {"beta": [R_ZONE], "ga": [], "plain": []},
        nodes=_zoned_nodes(),
    ),
    Case(  # kube's VolumeZone reads only spec.volumes[].persistentVolumeClaim
        "generic ephemeral volume's PV zone is not checked",
        with_volumes("p", [ephemeral_volume("scratch")]),
        [
            pvc("p-scratch", volume="pv1", bound=True, owner_uid="uid-default-p"),
            pv("pv1", claim=("default", "p-scratch"), phase="Bound", labels={ZONE: "elsewhere"}),
        ],
        {"beta": [], "ga": [], "plain": []},
        nodes=_zoned_nodes(),
    ),
    Case(
        "unbound claim whose class does not exist",
        _zone_pod("c1"),
        [pvc("c1", class_name="gone")],
        message='storageclass.storage.k8s.io "gone" not found',
        nodes=_zoned_nodes(),
        disabled=("VolumeBinding",),
    ),
    Case(
        "unbound claim without a class",
        _zone_pod("c1"),
        [pvc("c1")],
        message="PersistentVolumeClaim had no pv name and storageClass name",
        nodes=_zoned_nodes(),
        disabled=("VolumeBinding",),
    ),
    Case(
        "unbound claim of an Immediate class",
        _zone_pod("c1"),
        [IMMEDIATE, pvc("c1", class_name="immediate")],
        message="PersistentVolume had no name",
        nodes=_zoned_nodes(),
        disabled=("VolumeBinding",),
    ),
    Case(
        "unbound claim of a class without volumeBindingMode",
        _zone_pod("c1"),
        [NO_MODE, pvc("c1", class_name="nomode")],
        message='VolumeBindingMode not set for StorageClass "nomode"',
        nodes=_zoned_nodes(),
        disabled=("VolumeBinding",),
    ),
]

GCE = {"name": "d", "gcePersistentDisk": {"pdName": "disk-1"}}
GCE_RO = {"name": "d", "gcePersistentDisk": {"pdName": "disk-1", "readOnly": True}}
EBS = {"name": "d", "awsElasticBlockStore": {"volumeID": "vol-1"}}
EBS_OTHER = {"name": "d", "awsElasticBlockStore": {"volumeID": "vol-2"}}
RBD = {"name": "d", "rbd": {"monitors": ["a", "b"], "pool": "foo", "image": "bar"}}
RBD_OVERLAP = {"name": "d", "rbd": {"monitors": ["b", "c"], "pool": "foo", "image": "bar"}}
RBD_OTHER_IMAGE = {"name": "d", "rbd": {"monitors": ["a"], "pool": "foo", "image": "baz"}}
ISCSI = {
    "name": "d",
    "iscsi": {"targetPortal": "127.0.0.1:3260", "iqn": "iqn.2016-12.server:a", "lun": 0},
}


def _restriction(new: Obj, existing: Obj, conflict: bool, id: str) -> Case:
    placed = [with_volumes("old", [existing], node_name="node-a")]
    want = {"node-a": [R_DISK] if conflict else [], "node-b": []}
    return Case(id, with_volumes("p", [new]), [], want, placed=placed)


VOLUME_RESTRICTIONS = [
    _restriction(GCE, GCE, True, "same GCE PD"),
    _restriction(GCE_RO, GCE_RO, False, "same GCE PD, both read-only"),
    _restriction(GCE_RO, GCE, True, "same GCE PD, one read-write"),
    _restriction(EBS, EBS, True, "same AWS EBS volume"),
    _restriction(EBS, EBS_OTHER, False, "different AWS EBS volumes"),
    _restriction(RBD, RBD_OVERLAP, True, "RBD image with an overlapping monitor"),
    _restriction(RBD, RBD_OTHER_IMAGE, False, "different RBD images"),
    _restriction(ISCSI, ISCSI, True, "same ISCSI IQN"),
    Case(
        "ReadWriteOncePod claim in use by a pod on another node",
        _pod("rwop"),
        [
            pvc("rwop", volume="pv1", bound=True, modes=("ReadWriteOncePod",)),
            pv("pv1", claim=("default", "rwop")),
        ],
        {"node-a": [R_RWOP], "node-b": [R_RWOP]},
        placed=[_pod("rwop", name="old") | {"spec": _pod("rwop")["spec"] | {"nodeName": "node-b"}}],
    ),
    Case(
        "ReadWriteOncePod claim not in use",
        _pod("rwop"),
        [
            pvc("rwop", volume="pv1", bound=True, modes=("ReadWriteOncePod",)),
            pv("pv1", claim=("default", "rwop")),
        ],
        {"node-a": [], "node-b": []},
    ),
]

ISCSI_RO = {"name": "d", "iscsi": ISCSI["iscsi"] | {"readOnly": True}}
RBD_RO = {"name": "d", "rbd": RBD["rbd"] | {"readOnly": True}}
RBD_DEFAULT_POOL = {"name": "d", "rbd": {"monitors": ["a"], "image": "img"}}
RBD_EXPLICIT_POOL = {"name": "d", "rbd": {"monitors": ["a"], "pool": "rbd", "image": "img"}}
EBS_RO = {"name": "d", "awsElasticBlockStore": {"volumeID": "vol-1", "readOnly": True}}
GCE_OTHER = {"name": "d", "gcePersistentDisk": {"pdName": "disk-2"}}
RWOP = ("ReadWriteOncePod",)


def _rwop_claims(*names: str, modes: tuple[str, ...] = RWOP) -> list[Obj]:
    return [pvc(n, volume=f"pv-{n}", bound=True, modes=modes) for n in names]


def _placed(name: str, *claims: str, node_name: str = "node-a") -> Obj:
    return with_volumes(
        name, [claim_volume(f"v{i}", c) for i, c in enumerate(claims)], node_name=node_name
    )


VOLUME_RESTRICTIONS += [
    _restriction(GCE, GCE_OTHER, False, "different GCE PDs"),
    _restriction(EBS_RO, EBS_RO, True, "same AWS EBS volume, even both read-only"),
    _restriction(ISCSI_RO, ISCSI_RO, False, "same ISCSI IQN, both read-only"),
    _restriction(RBD_RO, RBD_RO, False, "same RBD image, both read-only"),
    _restriction(RBD_DEFAULT_POOL, RBD_EXPLICIT_POOL, True, "RBD pool defaults to rbd"),
    _restriction(GCE, EBS, False, "different volume types never conflict"),
    Case(
        "missing claim rejects the pod in PreFilter",
        _pod("absent"),
        [],
        message='persistentvolumeclaim "absent" not found',
    ),
    Case(
        "no conflict with a ReadWriteMany claim in use",
        _pod("rwop", "rwx"),
        [*_rwop_claims("rwop"), *_rwop_claims("rwx", modes=("ReadWriteMany",))],
        {"node-a": [], "node-b": []},
        placed=[_placed("old", "rwx")],
        disabled=("VolumeBinding", "VolumeZone"),
    ),
    Case(
        "two ReadWriteOncePod claims in use by one pod",
        _pod("rwop-1", "rwop-2"),
        _rwop_claims("rwop-1", "rwop-2"),
        {"node-a": [R_RWOP], "node-b": [R_RWOP]},
        placed=[_placed("old", "rwop-1", "rwop-2", node_name="node-b")],
        disabled=("VolumeBinding", "VolumeZone"),
    ),
    Case(  # the disk check comes first on a node; the claim check applies everywhere else
        "disk conflict and ReadWriteOncePod conflict together",
        with_volumes("p", [GCE, claim_volume("c", "rwop")]),
        _rwop_claims("rwop"),
        {"node-a": [R_DISK], "node-b": [R_RWOP]},
        placed=[
            with_volumes("old", [GCE], node_name="node-a"),
            _placed("old2", "rwop", node_name="node-b"),
        ],
        disabled=("VolumeBinding", "VolumeZone"),
    ),
]

DRIVER = "ebs.csi.example"
_LOOKUP_ABSENT = 'looking up PVC default/absent: persistentvolumeclaim "absent" not found'
_NOT_OWNER = "PVC default/p-scratch was not created for pod default/p (pod is not owner)"


def _csi_claims(*names: str) -> list[Obj]:
    out: list[Obj] = []
    for name in names:
        out.append(pvc(name, volume=f"pv-{name}", bound=True))
        out.append(
            pv(f"pv-{name}", claim=("default", name), phase="Bound", csi=(DRIVER, f"h-{name}"))
        )
    return out


NODE_VOLUME_LIMITS = [
    Case(
        "limit reached by pods on the node",
        _pod("new"),
        [
            *_csi_claims("a", "b", "new"),
            csi_node("node-a", {DRIVER: 2}),
            csi_node("node-b", {DRIVER: 3}),
        ],
        {"node-a": [R_LIMIT], "node-b": []},
        placed=[
            with_volumes(
                "old", [claim_volume("x", "a"), claim_volume("y", "b")], node_name="node-a"
            ),
            with_volumes(
                "old2", [claim_volume("x", "a"), claim_volume("y", "b")], node_name="node-b"
            ),
        ],
    ),
    Case(
        "a volume already attached is not counted twice",
        _pod("a"),
        [*_csi_claims("a", "b"), csi_node("node-a", {DRIVER: 2})],
        {"node-a": [], "node-b": []},
        placed=[
            with_volumes(
                "old", [claim_volume("x", "a"), claim_volume("y", "b")], node_name="node-a"
            )
        ],
    ),
    Case(
        "unbound claim counted through its class's provisioner",
        _pod("u"),
        [*_csi_claims("a"), CSI_CLASS, pvc("u", class_name="csi"), csi_node("node-a", {DRIVER: 1})],
        {"node-a": [R_LIMIT], "node-b": []},
        placed=[with_volumes("old", [claim_volume("x", "a")], node_name="node-a")],
    ),
    Case(
        "a node without CSINode has no limit",
        _pod("new"),
        [*_csi_claims("a", "new")],
        {"node-a": [], "node-b": []},
        placed=[with_volumes("old", [claim_volume("x", "a")], node_name="node-a")],
    ),
]


NODE_VOLUME_LIMITS += [
    Case(
        "missing claim rejects every node",
        _pod("absent"),
        [csi_node("node-a", {DRIVER: 1})],
        {"node-a": [_LOOKUP_ABSENT], "node-b": [_LOOKUP_ABSENT]},
        disabled=("VolumeRestrictions", "VolumeBinding", "VolumeZone"),
    ),
    Case(
        "generic ephemeral claim owned by another pod",
        with_volumes("p", [ephemeral_volume("scratch")]),
        [pvc("p-scratch", owner_uid="someone-else")],
        {"node-a": [_NOT_OWNER], "node-b": [_NOT_OWNER]},
        disabled=("VolumeBinding",),
    ),
    Case(
        "generic ephemeral claim counts like any claim",
        with_volumes("p", [ephemeral_volume("scratch", "csi")]),
        [
            *_csi_claims("a"),
            CSI_CLASS,
            pvc("p-scratch", class_name="csi", owner_uid="uid-default-p"),
            csi_node("node-a", {DRIVER: 1}),
            csi_node("node-b", {DRIVER: 2}),
        ],
        {"node-a": [R_LIMIT], "node-b": []},
        placed=[_placed("old", "a"), _placed("old2", "a", node_name="node-b")],
    ),
    Case(
        "claim whose PV is missing counts through its class",
        _pod("new"),
        [
            *_csi_claims("a"),
            CSI_CLASS,
            pvc("ghost", class_name="csi", volume="gone", bound=True),
            *_csi_claims("new"),
            csi_node("node-a", {DRIVER: 2}),
        ],
        {"node-a": [R_LIMIT], "node-b": []},
        placed=[_placed("old", "a", "ghost")],
        disabled=("VolumeZone",),
    ),
    Case(
        "claim without a PV or a class is not counted",
        _pod("new"),
        [*_csi_claims("a", "new"), pvc("classless"), csi_node("node-a", {DRIVER: 2})],
        {"node-a": [], "node-b": []},
        placed=[_placed("old", "a", "classless")],
    ),
    Case(
        "a pending claim shared by two pods counts once",
        _pod("new"),
        [
            *_csi_claims("new"),
            CSI_CLASS,
            pvc("shared", class_name="csi"),
            csi_node("node-a", {DRIVER: 2}),
        ],
        {"node-a": [], "node-b": []},
        placed=[_placed("old", "shared"), _placed("old2", "shared")],
    ),
    Case(
        "another driver's volumes do not count",
        _pod("new"),
        [
            *_csi_claims("new"),
            pvc("g", volume="pv-g", bound=True),
            pv("pv-g", claim=("default", "g"), phase="Bound", csi=("pd.csi.example", "h-g")),
            csi_node("node-a", {DRIVER: 1, "pd.csi.example": 1}),
        ],
        {"node-a": [], "node-b": []},
        placed=[_placed("old", "g")],
    ),
    Case(
        "without a CSINode the node's attachable-volumes allocatable is the limit",
        _pod("new"),
        [*_csi_claims("a", "new")],
        {"node-a": [R_LIMIT], "node-b": []},
        nodes=[
            node("node-a", extra={attach_limit_key(DRIVER): "1"}),
            node("node-b", extra={attach_limit_key(DRIVER): "2"}),
        ],
        placed=[_placed("old", "a"), _placed("old2", "a", node_name="node-b")],
    ),
    Case(
        "CSINode's count overrides the node's allocatable",
        _pod("new"),
        [*_csi_claims("a", "new"), csi_node("node-a", {DRIVER: 2})],
        {"node-a": [], "node-b": []},
        nodes=[node("node-a", extra={attach_limit_key(DRIVER): "1"}), node("node-b")],
        placed=[_placed("old", "a")],
    ),
]


NODE_VOLUME_LIMITS += [
    Case(  # a volume stays attached after its pod is gone (kube counts VolumeAttachments)
        "VolumeAttachments of volumes no pod uses count towards the limit",
        _pod("new"),
        [
            *_csi_claims("a", "b", "new"),
            volume_attachment("va-a", "node-a", DRIVER, "pv-a"),
            volume_attachment("va-b", "node-a", DRIVER, "pv-b"),
            volume_attachment("va-b2", "node-b", DRIVER, "pv-b"),
            csi_node("node-a", {DRIVER: 2}),
            csi_node("node-b", {DRIVER: 2}),
        ],
        {"node-a": [R_LIMIT], "node-b": []},
    ),
    Case(
        "a VolumeAttachment of a volume a pod on the node uses counts once",
        _pod("new"),
        [
            *_csi_claims("a", "new"),
            volume_attachment("va-a", "node-a", DRIVER, "pv-a"),
            csi_node("node-a", {DRIVER: 2}),
        ],
        {"node-a": [], "node-b": []},
        placed=[_placed("old", "a")],
    ),
    Case(
        "VolumeAttachments without a PV, of an unknown PV or without an attacher do not count",
        _pod("new"),
        [
            *_csi_claims("new"),
            volume_attachment("va-inline", "node-a", DRIVER, None),
            volume_attachment("va-gone", "node-a", DRIVER, "pv-gone"),
            volume_attachment("va-none", "node-a", "", "pv-new"),
            csi_node("node-a", {DRIVER: 1}),
        ],
        {"node-a": [], "node-b": []},
    ),
]


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, id=f"{group}: {c.id}")
        for group, cases in (
            ("VolumeBinding", VOLUME_BINDING),
            ("VolumeZone", VOLUME_ZONE),
            ("VolumeRestrictions", VOLUME_RESTRICTIONS),
            ("NodeVolumeLimits", NODE_VOLUME_LIMITS),
        )
        for c in cases
    ],
)
def test_upstream_cases(case: Case) -> None:
    cache = cluster(case.nodes, case.objects, case.placed)
    result, reasons = decide(cache, case.pod, case.disabled)
    if case.message is not None:
        assert result.node is None
        assert result.message == f"0/{len(case.nodes)} nodes are available: {case.message}."
        assert all(r == [case.message] for r in reasons.values())
        return
    assert reasons == case.want
    feasible = {n for n, r in case.want.items() if not r}
    assert (result.node in feasible) if feasible else result.node is None


def test_fit_error_message_counts_volume_reasons() -> None:
    cache = cluster(
        [node("a", labels={"rack": "r1"}), node("b", labels={"rack": "r2"}), node("c")],
        [
            WFFC,
            pvc("c1", volume="pv1", bound=True),
            pv(
                "pv1",
                claim=("default", "c1"),
                affinity=[
                    {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}
                ],
            ),
            pvc("c2", class_name="wait"),
            pv(
                "pv2",
                class_name="wait",
                affinity=[{"matchExpressions": [{"key": "rack", "operator": "Exists"}]}],
            ),
        ],
    )
    result, reasons = decide(cache, _pod("c1", "c2"))
    assert reasons == {"a": [], "b": [R_AFFINITY], "c": [R_AFFINITY, R_BIND]}
    assert result.node == "a"


def test_attach_limit_key_hashes_long_driver_names() -> None:
    assert attach_limit_key("ebs.csi.aws.com") == "attachable-volumes-csi-ebs.csi.aws.com"
    long = "a-very-long-csi-driver-name.storage.example.com"
    key = attach_limit_key(long)
    assert (
        key.startswith("attachable-volumes-csi-a-very-long-csi-driv") and len(key) == 23 + 23 + 16
    )


# ---------------------------------------------------------------------------- DRA


def _dra_pod(uid: str = "uid-p") -> Obj:
    return pod(
        "p",
        {"cpu": "100m"},
        uid=uid,
        spec={"resourceClaims": [{"name": "gpu", "resourceClaimName": "rc"}]},
    )


@pytest.mark.parametrize(
    ("claim", "want"),
    [
        (None, "missing"),
        (resource_claim("rc", allocated=False), None),  # no requests: allocated empty
        (resource_claim("rc", allocated=True, reserved_for="someone-else"), None),  # shared
        (resource_claim("rc", allocated=True, reserved_for="uid-p"), None),
        (resource_claim("rc", allocated=True, reserved_for="uid-p", node="node-b"), "node-b only"),
    ],
)
def test_dra_claims_as_kube_reads_them(claim: Obj | None, want: str | None) -> None:
    nodes = [node("node-a"), node("node-b")]
    cache = cluster(nodes, [claim] if claim else [])
    result, reasons = decide(cache, _dra_pod())
    if want == "missing":
        message = 'resourceclaim.resource.k8s.io "rc" not found'
        assert result.node is None and result.message == f"0/2 nodes are available: {message}."
    elif want == "node-b only":
        assert reasons == {"node-a": ["resourceclaim not available on the node"], "node-b": []}
        assert result.node == "node-b"
    else:
        assert result.node == "node-a"


def test_dra_claim_from_a_template_not_created_yet() -> None:
    p = pod(
        "p",
        {"cpu": "100m"},
        spec={"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}]},
    )
    result, _ = decide(cluster([node("a")], []), p)
    assert result.message == (
        '0/1 nodes are available: pod "default/p": ResourceClaim not created yet.'
    )
    p["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": "p-gpu-x"}]
    claim = resource_claim("p-gpu-x", allocated=True, reserved_for="uid-default-p")
    result, _ = decide(cluster([node("a")], [claim]), p)
    assert result.message == (
        "0/1 nodes are available: ResourceClaim default/p-gpu-x was not created for pod "
        "default/p (pod is not owner)."
    )
    claim = resource_claim(
        "p-gpu-x", allocated=True, reserved_for="uid-default-p", owner="uid-default-p"
    )
    result, _ = decide(cluster([node("a")], [claim]), p)
    assert result.node == "a"


# ---------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("obj", "error"),
    [
        (
            pvc("c") | {"spec": {"accessModes": ["ReadWriteSometimes"]}},
            "PersistentVolumeClaim default/c: spec.accessModes[0]: "
            'Unsupported value: "ReadWriteSometimes"',
        ),
        (
            pvc("c") | {"spec": {"resources": {"requests": {"storage": "lots"}}}},
            "PersistentVolumeClaim default/c: spec.resources.requests.storage:",
        ),
        (
            pv("v") | {"spec": {"claimRef": "c"}},
            "PersistentVolume v: spec.claimRef: must be a mapping",
        ),
        (
            storage_class("s") | {"volumeBindingMode": "Later"},
            'StorageClass s: volumeBindingMode: Unsupported value: "Later"',
        ),
        (
            csi_node("n", {})
            | {"spec": {"drivers": [{"name": "d", "allocatable": {"count": "2"}}]}},
            "CSINode n: spec.drivers[0].allocatable.count: must be an integer",
        ),
        (
            capacity("c", "s", "1Gi", None)
            | {"nodeTopology": {"matchExpressions": [{"key": "k", "operator": "Gt"}]}},
            "CSIStorageCapacity kube-system/c: nodeTopology.matchExpressions[0].operator: "
            'Unsupported value: "Gt"',
        ),
        (
            pvc("c")
            | {"spec": {"selector": {"matchExpressions": [{"key": "tier", "operator": "In"}]}}},
            "PersistentVolumeClaim default/c: spec.selector.matchExpressions[0].values: must be "
            "specified when `operator` is 'In'",
        ),
        ({"kind": "CSIDriver", "metadata": {}}, "CSIDriver: metadata.name: is required"),
    ],
)
def test_parse_errors_name_the_object_and_field(obj: Obj, error: str) -> None:
    with pytest.raises(ModelError) as info:
        STORAGE_KINDS[obj["kind"]].from_object(obj)
    assert str(info.value).startswith(error)
    assert "\n" not in str(info.value)


def test_pod_volume_errors_name_the_pod_field() -> None:
    bad = with_volumes("p", [{"name": "d", "persistentVolumeClaim": {"claimName": 3}}])
    with pytest.raises(
        ModelError,
        match=r"^Pod default/p: spec.volumes\[0\].persistentVolumeClaim.claimName: must be a str",
    ):
        PodInfo.from_object(bad)


# ---------------------------------------------------------------------------- status codes


def test_status_codes_per_reason_match_kube() -> None:
    """Which rejections preemption may resolve (Unschedulable) and which not."""
    from plugins import dynamic_resources, node_volume_limits, volume_restrictions, volume_zone
    from plugins import volume_binding as vb
    from plugins._volumes import ERROR, UNRESOLVABLE, UNSCHEDULABLE

    assert vb.CODES == {
        R_BIND: UNRESOLVABLE,
        R_AFFINITY: UNRESOLVABLE,
        R_SPACE: UNRESOLVABLE,
        R_NO_PV: UNRESOLVABLE,
        "pod has unbound immediate PersistentVolumeClaims": UNRESOLVABLE,
    }
    assert volume_zone.CODES == {R_ZONE: UNRESOLVABLE}
    assert volume_zone.PREFILTER_CODE == UNRESOLVABLE
    assert volume_restrictions.CODES == {R_DISK: UNSCHEDULABLE, R_RWOP: UNSCHEDULABLE}
    assert volume_restrictions.PREFILTER_CODE == UNRESOLVABLE
    assert node_volume_limits.CODES == {
        R_LIMIT: UNSCHEDULABLE,
        "PersistentVolumeClaim had no name": ERROR,
    }
    assert dynamic_resources.CODES == {
        "resourceclaim not available on the node": UNRESOLVABLE,
        "cannot allocate all claims": UNRESOLVABLE,
    }


@pytest.mark.parametrize(
    ("objects", "claim", "code"),
    [
        ([], "c1", "UnschedulableAndUnresolvable"),  # not found
        (
            [pvc("c1", volume="gone", bound=True, phase="Lost")],
            "c1",
            "UnschedulableAndUnresolvable",
        ),
        ([IMMEDIATE, pvc("c1", class_name="immediate")], "c1", "UnschedulableAndUnresolvable"),
        ([NO_MODE, pvc("c1", class_name="nomode")], "c1", "Error"),
    ],
)
def test_volume_binding_prefilter_records_the_status_code(
    objects: list[Obj], claim: str, code: str
) -> None:
    from plugins.volume_binding import CODE_KEY, VolumeBinding

    cache = cluster([node("n")], objects)
    state = CycleState()
    result = VolumeBinding().pre_filter(state, PodInfo.from_object(_pod(claim)), cache.snapshot)
    assert result is not None and result.unschedulable is not None
    assert state.get(CODE_KEY) == code


def test_node_volume_limits_lookup_failures_carry_their_code() -> None:
    from plugins.node_volume_limits import _NotFound, attachable_volumes

    cache = cluster([node("n")], [pvc("p-scratch", owner_uid="someone-else")])
    storage = cache.snapshot.storage
    for p, code in (
        (_pod("absent"), "UnschedulableAndUnresolvable"),
        (with_volumes("p", [ephemeral_volume("scratch")]), "Error"),
        (_pod(""), "Error"),
    ):
        with pytest.raises(_NotFound) as info:
            attachable_volumes(PodInfo.from_object(p), storage, True, {})
        assert info.value.code == code


# ---------------------------------------------------------------------------- PreBind's checks


class _Writer:
    def __init__(self, pod_exists: bool = True) -> None:
        self.exists = pod_exists

    def pod_exists(self, namespace: str, name: str, uid: str) -> bool:
        return self.exists


@pytest.mark.parametrize(
    ("claim_ref_uid", "rack", "pod_exists", "error"),
    [
        ("", "r1", True, 'binding volumes: ClaimRef got reset for pv "pv1"'),
        # the node affinity is checked before the claimRef, as kube's checkBindings does
        (
            "",
            "r2",
            True,
            'binding volumes: pv "pv1" node affinity doesn\'t match node "node-a": '
            "no matching NodeSelectorTerms",
        ),
        ("u", "r1", False, 'binding volumes: pod does not exist any more: pod "p" not found'),
        ("u", "r1", True, None),
    ],
)
def test_bindings_check_order_and_messages(
    claim_ref_uid: str, rack: str, pod_exists: bool, error: str | None
) -> None:
    from plugins.volume_binding import PodVolumes, VolumeBinding, VolumeError, _State

    affinity = [{"matchExpressions": [{"key": "rack", "operator": "In", "values": [rack]}]}]
    volume = pv("pv1", class_name="wait", claim=("default", "c1"), affinity=affinity)
    volume["spec"]["claimRef"]["uid"] = claim_ref_uid
    cache = cluster(
        [node("node-a", labels={"rack": "r1"})],
        [pvc("c1", class_name="wait", volume="pv1", bound=True), volume],
    )
    storage = cache.snapshot.storage
    data = _State(cache.snapshot, storage)
    claim = storage.claims["default/c1"]
    volumes = PodVolumes(static=[(storage.volumes["pv1"], claim)])
    p = PodInfo.from_object(_pod("c1"))
    check = VolumeBinding()._bound
    if error is None:
        assert check(_Writer(pod_exists), data, p, "node-a", volumes)  # type: ignore[arg-type]
        return
    with pytest.raises(VolumeError, match="^" + error.replace("(", r"\(") + "$"):
        check(_Writer(pod_exists), data, p, "node-a", volumes)  # type: ignore[arg-type]
