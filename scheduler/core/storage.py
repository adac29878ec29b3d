"""Storage objects as the volume plugins see them, and the cache that holds them.

PersistentVolumeClaims, PersistentVolumes, StorageClasses, CSINodes, CSIDrivers,
CSIStorageCapacities and ResourceClaims are parsed once, at the edge (a watch, a snapshot
file), into typed values; every error names the object and the field. `StorageState` holds
them for the plugins (it hangs off the snapshot as `snapshot.storage`) with kube's *assume
cache* for claims and volumes: VolumeBinding's Reserve records the volume choices it made
(a PV's claimRef, a claim's selected-node annotation) before the API knows them, so the next
cycle does not hand the same PV to another pod; Unreserve restores the API's version, and a
newer version from the watch replaces the assumption.

The API writes of VolumeBinding's PreBind go through the `VolumeWriter` protocol, which the
in-cluster adapter implements; without a writer (explain's dry run, the simulator) nothing is
written anywhere.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from scheduler.core.decode import Fields
from scheduler.core.dra.state import DRA_KINDS, DraState
from scheduler.core.dra.types import ResourceClaim
from scheduler.core.podaffinity import LabelSelector
from scheduler.core.quantity import QuantityError, parse_quantity, to_units
from scheduler.core.selectors import (
    ModelError,
    NodeSelector,
    parse_label_selector,
    parse_node_selector,
)

__all__ = [
    "ANN_BIND_COMPLETED",
    "ANN_BOUND_BY_CONTROLLER",
    "ANN_SELECTED_NODE",
    "ANN_STORAGE_CLASS",
    "NOT_SUPPORTED_PROVISIONER",
    "STORAGE_KINDS",
    "AssumeError",
    "CSIDriver",
    "CSINode",
    "CSIStorageCapacity",
    "ClaimRef",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "PodResourceClaim",
    "PodVolume",
    "ResourceClaim",
    "StorageClass",
    "StorageState",
    "VolumeAttachment",
    "VolumeWriter",
    "attach_limit_key",
    "node_selector_matches_labels",
    "parse_pod_storage",
]

ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"
ANN_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
ANN_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
ANN_STORAGE_CLASS = "volume.beta.kubernetes.io/storage-class"
NOT_SUPPORTED_PROVISIONER = "kubernetes.io/no-provisioner"
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
_ACCESS_MODES = ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod")
_CSI_LIMIT_PREFIX = "attachable-volumes-csi-"


# ---------------------------------------------------------------------------- decoding


@dataclass(frozen=True, slots=True)
class _Where(Fields):
    """The project's decoder for one storage object (errors read ``PersistentVolumeClaim
    ml/data: spec...``), with the object's namespace and the storage-specific fields."""

    namespace: str = "default"

    @classmethod
    def of(cls, kind: str, obj: Any, namespaced: bool) -> _Where:
        if not isinstance(obj, Mapping):
            raise ModelError(f"{kind}: must be a mapping, got {type(obj).__name__}")
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        name, ns = meta.get("name"), meta.get("namespace")
        namespace = ns if isinstance(ns, str) and ns else "default"
        label = name if isinstance(name, str) else ""
        if namespaced and label:
            label = f"{namespace}/{label}"
        return cls(ModelError, f"{kind} {label}: " if label else f"{kind}: ", namespace=namespace)

    def opt_str(self, value: Any, path: str) -> str | None:
        return None if value is None else self.string(value, path)

    def quantity(self, value: Any, path: str) -> int | None:
        if value is None:
            return None
        try:
            amount = parse_quantity(value)
        except QuantityError as exc:
            raise self.fail(path, str(exc)) from None
        if amount < 0:
            raise self.fail(path, "must be greater than or equal to 0")
        return to_units("storage", amount)

    def meta(self, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        meta = self.mapping(obj.get("metadata"), "metadata")
        if not self.string(meta.get("name"), "metadata.name", ""):
            raise self.fail("metadata.name", "is required")
        return meta

    def access_modes(self, value: Any, path: str) -> tuple[str, ...]:
        modes = self.string_list(value, path)
        for i, mode in enumerate(modes):
            if mode not in _ACCESS_MODES:
                supported = ", ".join(f'"{m}"' for m in _ACCESS_MODES)
                raise self.fail(
                    f"{path}[{i}]", f'Unsupported value: "{mode}": supported values: {supported}'
                )
        return modes

    def node_selector(self, value: Any, path: str) -> NodeSelector | None:
        return None if value is None else parse_node_selector(value, self, path)

    def label_selector(self, value: Any, path: str) -> LabelSelector | None:
        """A selector, or None when unset (a claim without one takes any PV; a capacity
        without a node topology reaches no node)."""
        return None if value is None else parse_label_selector(value, self, path)


# ---------------------------------------------------------------------------- matching


def node_selector_matches_labels(selector: NodeSelector, labels: Mapping[str, str]) -> bool:
    """kube's volume CheckNodeAffinity: the terms against a node known by its labels only,
    so with an empty name (`metadata.name In` never matches, `NotIn` always does; another
    field is invalid and its term skipped); an empty term matches nothing."""
    for term in selector.terms:
        if not term.match_fields and not term.match_expressions:
            continue
        if all(r.matches(labels) for r in term.match_expressions) and all(
            r.key == "metadata.name" and r.operator in ("In", "NotIn") and r.matches(_NAMELESS)
            for r in term.match_fields
        ):
            return True
    return False


_NAMELESS = {"metadata.name": ""}


def attach_limit_key(driver: str) -> str:
    """kube's GetCSIAttachLimitKey: the node resource name of a CSI driver's attach limit."""
    if len(_CSI_LIMIT_PREFIX) + len(driver) >= 63:
        digest = hashlib.sha1(driver.encode()).hexdigest()[:16]
        return _CSI_LIMIT_PREFIX + driver[:23] + digest
    return _CSI_LIMIT_PREFIX + driver


# ---------------------------------------------------------------------------- objects


@dataclass(frozen=True, slots=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str = ""


def _class_of(annotations: Mapping[str, str], spec_class: str | None) -> str:
    """kube's GetPersistentVolume(Claim)Class: the beta annotation wins over the field."""
    if ANN_STORAGE_CLASS in annotations:
        return annotations[ANN_STORAGE_CLASS]
    return spec_class or ""


def _version(rv: str) -> int:
    return int(rv) if rv.isdigit() else 0


def _api_object(
    raw: Mapping[str, Any], annotations: Mapping[str, str], resource_version: str
) -> dict[str, Any]:
    """A copy of the object as the API sent it, with the annotations (and version) given."""
    obj = copy.deepcopy(dict(raw))
    meta = obj.setdefault("metadata", {})
    meta["annotations"] = dict(annotations)
    if resource_version:
        meta["resourceVersion"] = resource_version
    return obj


@dataclass(frozen=True, slots=True)
class PersistentVolumeClaim:
    namespace: str
    name: str
    uid: str
    annotations: Mapping[str, str] = field(hash=False)
    storage_class_name: str | None = None
    volume_name: str = ""
    access_modes: tuple[str, ...] = ()
    volume_mode: str = "Filesystem"
    request: int | None = None  # spec.resources.requests.storage, bytes
    selector: LabelSelector | None = None
    deleting: bool = False
    controller_uid: str = ""  # the uid of its controller owner (ephemeral volumes)
    resource_version: str = ""
    phase: str = ""  # status.phase: Pending, Bound or Lost
    attributes_class: str = ""  # spec.volumeAttributesClassName
    raw: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False, repr=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def class_name(self) -> str:
        return _class_of(self.annotations, self.storage_class_name)

    @property
    def fully_bound(self) -> bool:
        """kube's isPVCFullyBound: a volume name and the bind-completed annotation."""
        return bool(self.volume_name) and ANN_BIND_COMPLETED in self.annotations

    @classmethod
    def from_object(cls, obj: Any) -> PersistentVolumeClaim:
        w = _Where.of("PersistentVolumeClaim", obj, namespaced=True)
        meta = w.meta(obj)
        spec = w.mapping(obj.get("spec"), "spec")
        resources = w.mapping(spec.get("resources"), "spec.resources")
        requests = w.mapping(resources.get("requests"), "spec.resources.requests")
        controller = ""
        refs = w.list(meta.get("ownerReferences"), "metadata.ownerReferences")
        for i, ref in enumerate(refs):
            item = w.mapping(ref, f"metadata.ownerReferences[{i}]")
            if w.boolean(
                item.get("controller"), f"metadata.ownerReferences[{i}].controller", False
            ):
                controller = w.string(item.get("uid"), f"metadata.ownerReferences[{i}].uid", "")
        return cls(
            namespace=w.namespace,
            name=w.string(meta.get("name"), "metadata.name", ""),
            uid=w.string(meta.get("uid"), "metadata.uid", ""),
            annotations=w.string_map(meta.get("annotations"), "metadata.annotations"),
            storage_class_name=w.opt_str(spec.get("storageClassName"), "spec.storageClassName"),
            volume_name=w.string(spec.get("volumeName"), "spec.volumeName", ""),
            access_modes=w.access_modes(spec.get("accessModes"), "spec.accessModes"),
            volume_mode=w.string(spec.get("volumeMode"), "spec.volumeMode", "") or "Filesystem",
            request=w.quantity(requests.get("storage"), "spec.resources.requests.storage"),
            selector=w.label_selector(spec.get("selector"), "spec.selector"),
            deleting=meta.get("deletionTimestamp") is not None,
            controller_uid=controller,
            resource_version=str(meta.get("resourceVersion") or ""),
            phase=w.string(w.mapping(obj.get("status"), "status").get("phase"), "status.phase", ""),
            attributes_class=w.string(
                spec.get("volumeAttributesClassName"), "spec.volumeAttributesClassName", ""
            ),
            raw=obj,
        )

    @property
    def lost(self) -> bool:
        """status.phase Lost: the claim's PV is gone (kube's ClaimLost)."""
        return self.phase == "Lost"

    def to_object(self) -> dict[str, Any]:
        """The API object with this value's annotations (what PreBind writes)."""
        return _api_object(self.raw, self.annotations, self.resource_version)


@dataclass(frozen=True, slots=True)
class PersistentVolume:
    name: str
    labels: Mapping[str, str] = field(hash=False)
    annotations: Mapping[str, str] = field(hash=False)
    storage_class_name: str | None = None
    capacity: int = 0  # spec.capacity.storage, bytes
    access_modes: tuple[str, ...] = ()
    volume_mode: str = "Filesystem"
    claim_ref: ClaimRef | None = None
    node_affinity: NodeSelector | None = None
    phase: str = ""
    deleting: bool = False
    csi: tuple[str, str] | None = None  # (driver, volumeHandle)
    resource_version: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False, repr=False)

    @property
    def class_name(self) -> str:
        return _class_of(self.annotations, self.storage_class_name)

    def bound_to(self, claim: PersistentVolumeClaim) -> bool:
        """kube's IsVolumeBoundToClaim."""
        ref = self.claim_ref
        return (
            ref is not None
            and ref.name == claim.name
            and ref.namespace == claim.namespace
            and (not ref.uid or ref.uid == claim.uid)
        )

    def node_affinity_matches(self, labels: Mapping[str, str]) -> bool:
        """kube's CheckNodeAffinity: no required affinity matches every node."""
        if self.node_affinity is None:
            return True
        return node_selector_matches_labels(self.node_affinity, labels)

    @classmethod
    def from_object(cls, obj: Any) -> PersistentVolume:
        w = _Where.of("PersistentVolume", obj, namespaced=False)
        meta = w.meta(obj)
        spec = w.mapping(obj.get("spec"), "spec")
        status = w.mapping(obj.get("status"), "status")
        capacity = w.mapping(spec.get("capacity"), "spec.capacity")
        ref_raw = spec.get("claimRef")
        claim_ref = None
        if ref_raw is not None:
            ref = w.mapping(ref_raw, "spec.claimRef")
            claim_ref = ClaimRef(
                namespace=w.string(ref.get("namespace"), "spec.claimRef.namespace", ""),
                name=w.string(ref.get("name"), "spec.claimRef.name", ""),
                uid=w.string(ref.get("uid"), "spec.claimRef.uid", ""),
            )
        affinity = w.mapping(spec.get("nodeAffinity"), "spec.nodeAffinity")
        csi = None
        if spec.get("csi") is not None:
            source = w.mapping(spec.get("csi"), "spec.csi")
            csi = (
                w.string(source.get("driver"), "spec.csi.driver", ""),
                w.string(source.get("volumeHandle"), "spec.csi.volumeHandle", ""),
            )
        return cls(
            name=w.string(meta.get("name"), "metadata.name", ""),
            labels=w.string_map(meta.get("labels"), "metadata.labels"),
            annotations=w.string_map(meta.get("annotations"), "metadata.annotations"),
            storage_class_name=w.opt_str(spec.get("storageClassName"), "spec.storageClassName"),
            capacity=w.quantity(capacity.get("storage"), "spec.capacity.storage") or 0,
            access_modes=w.access_modes(spec.get("accessModes"), "spec.accessModes"),
            volume_mode=w.string(spec.get("volumeMode"), "spec.volumeMode", "") or "Filesystem",
            claim_ref=claim_ref,
            node_affinity=w.node_selector(affinity.get("required"), "spec.nodeAffinity.required"),
            phase=w.string(status.get("phase"), "status.phase", ""),
            deleting=meta.get("deletionTimestamp") is not None,
            csi=csi,
            resource_version=str(meta.get("resourceVersion") or ""),
            raw=obj,
        )

    def to_object(self) -> dict[str, Any]:
        """The API object with this value's claimRef and annotations (what PreBind writes)."""
        obj = _api_object(self.raw, self.annotations, self.resource_version)
        spec = obj.setdefault("spec", {})
        if self.claim_ref is None:
            spec.pop("claimRef", None)
        else:
            spec["claimRef"] = {
                "kind": "PersistentVolumeClaim",
                "apiVersion": "v1",
                "namespace": self.claim_ref.namespace,
                "name": self.claim_ref.name,
                "uid": self.claim_ref.uid,
            }
        return obj

    def bind_to(self, claim: PersistentVolumeClaim) -> PersistentVolume:
        """kube's GetBindVolumeToClaim: the volume with the claim's reference set (and
        bound-by-controller, when it was not pre-bound to the claim)."""
        annotations = dict(self.annotations)
        if not self.bound_to(claim):
            annotations.setdefault(ANN_BOUND_BY_CONTROLLER, "yes")
        ref = ClaimRef(claim.namespace, claim.name, claim.uid)
        return replace(self, claim_ref=ref, annotations=annotations)


@dataclass(frozen=True, slots=True)
class StorageClass:
    name: str
    provisioner: str
    binding_mode: str | None  # None: not set (kube's API server defaults it to Immediate)
    allowed_topologies: tuple[tuple[tuple[str, tuple[str, ...]], ...], ...] = ()

    @property
    def wait_for_first_consumer(self) -> bool:
        return self.binding_mode == WAIT_FOR_FIRST_CONSUMER

    def topology_allows(self, labels: Mapping[str, str]) -> bool:
        """kube's MatchTopologySelectorTerms: no terms allow every node."""
        if not self.allowed_topologies:
            return True
        return any(  # an empty term selects no node
            term and all(labels.get(key) in values for key, values in term)
            for term in self.allowed_topologies
        )

    @classmethod
    def from_object(cls, obj: Any) -> StorageClass:
        w = _Where.of("StorageClass", obj, namespaced=False)
        meta = w.meta(obj)
        mode = w.opt_str(obj.get("volumeBindingMode"), "volumeBindingMode")
        if mode is not None and mode not in ("Immediate", WAIT_FOR_FIRST_CONSUMER):
            raise w.fail(
                "volumeBindingMode",
                f'Unsupported value: "{mode}": supported values: '
                '"Immediate", "WaitForFirstConsumer"',
            )
        terms = []
        for i, t in enumerate(w.list(obj.get("allowedTopologies"), "allowedTopologies")):
            path = f"allowedTopologies[{i}].matchLabelExpressions"
            exprs = w.list(
                w.mapping(t, f"allowedTopologies[{i}]").get("matchLabelExpressions"), path
            )
            term = []
            for j, e in enumerate(exprs):
                item = w.mapping(e, f"{path}[{j}]")
                term.append(
                    (
                        w.string(item.get("key"), f"{path}[{j}].key", ""),
                        w.string_list(item.get("values"), f"{path}[{j}].values"),
                    )
                )
            terms.append(tuple(term))
        return cls(
            name=w.string(meta.get("name"), "metadata.name", ""),
            provisioner=w.string(obj.get("provisioner"), "provisioner", ""),
            binding_mode=mode,
            allowed_topologies=tuple(terms),
        )


@dataclass(frozen=True, slots=True)
class CSINode:
    name: str
    limits: Mapping[str, int] = field(hash=False)  # driver -> allocatable.count

    @classmethod
    def from_object(cls, obj: Any) -> CSINode:
        w = _Where.of("CSINode", obj, namespaced=False)
        meta = w.meta(obj)
        spec = w.mapping(obj.get("spec"), "spec")
        limits: dict[str, int] = {}
        for i, d in enumerate(w.list(spec.get("drivers"), "spec.drivers")):
            item = w.mapping(d, f"spec.drivers[{i}]")
            name = w.string(item.get("name"), f"spec.drivers[{i}].name", "")
            alloc = w.mapping(item.get("allocatable"), f"spec.drivers[{i}].allocatable")
            count = w.optional_integer(alloc.get("count"), f"spec.drivers[{i}].allocatable.count")
            if count is not None:
                if count < 0:
                    raise w.fail(
                        f"spec.drivers[{i}].allocatable.count", "must be greater than or equal to 0"
                    )
                limits[name] = count
        return cls(name=w.string(meta.get("name"), "metadata.name", ""), limits=limits)


@dataclass(frozen=True, slots=True)
class CSIDriver:
    name: str
    storage_capacity: bool = False

    @classmethod
    def from_object(cls, obj: Any) -> CSIDriver:
        w = _Where.of("CSIDriver", obj, namespaced=False)
        meta = w.meta(obj)
        spec = w.mapping(obj.get("spec"), "spec")
        return cls(
            name=w.string(meta.get("name"), "metadata.name", ""),
            storage_capacity=w.boolean(spec.get("storageCapacity"), "spec.storageCapacity", False),
        )


@dataclass(frozen=True, slots=True)
class CSIStorageCapacity:
    namespace: str
    name: str
    storage_class_name: str
    capacity: int | None
    maximum_volume_size: int | None
    node_topology: LabelSelector | None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def sufficient(self, size: int) -> bool:
        """kube's capacitySufficient: maximumVolumeSize, when set, is the more precise."""
        limit = self.maximum_volume_size if self.maximum_volume_size is not None else self.capacity
        return limit is not None and limit >= size

    def reaches(self, labels: Mapping[str, str]) -> bool:
        """kube's nodeHasAccess: only a node topology selector matching the labels."""
        return self.node_topology is not None and self.node_topology.matches(labels)

    @classmethod
    def from_object(cls, obj: Any) -> CSIStorageCapacity:
        w = _Where.of("CSIStorageCapacity", obj, namespaced=True)
        meta = w.meta(obj)
        return cls(
            namespace=w.namespace,
            name=w.string(meta.get("name"), "metadata.name", ""),
            storage_class_name=w.string(obj.get("storageClassName"), "storageClassName", ""),
            capacity=w.quantity(obj.get("capacity"), "capacity"),
            maximum_volume_size=w.quantity(obj.get("maximumVolumeSize"), "maximumVolumeSize"),
            node_topology=w.label_selector(obj.get("nodeTopology"), "nodeTopology"),
        )


@dataclass(frozen=True, slots=True)
class VolumeAttachment:
    """A CSI attachment of a PV to a node (NodeVolumeLimits counts them: a volume stays
    attached for a while after its pod is gone)."""

    name: str
    attacher: str
    node_name: str
    pv_name: str | None  # spec.source.persistentVolumeName (None: an inline volume)

    @classmethod
    def from_object(cls, obj: Any) -> VolumeAttachment:
        w = _Where.of("VolumeAttachment", obj, namespaced=False)
        meta = w.meta(obj)
        spec = w.mapping(obj.get("spec"), "spec")
        source = w.mapping(spec.get("source"), "spec.source")
        return cls(
            name=w.string(meta.get("name"), "metadata.name", ""),
            attacher=w.string(spec.get("attacher"), "spec.attacher", ""),
            node_name=w.string(spec.get("nodeName"), "spec.nodeName", ""),
            pv_name=w.opt_str(
                source.get("persistentVolumeName"), "spec.source.persistentVolumeName"
            ),
        )


STORAGE_KINDS: dict[str, Any] = {
    "PersistentVolumeClaim": PersistentVolumeClaim,
    "PersistentVolume": PersistentVolume,
    "StorageClass": StorageClass,
    "CSINode": CSINode,
    "CSIDriver": CSIDriver,
    "CSIStorageCapacity": CSIStorageCapacity,
    "VolumeAttachment": VolumeAttachment,
    **DRA_KINDS,
}
"""The storage kinds by API kind: each has `from_object` (a typed value, or ModelError).
The resource.k8s.io/v1 kinds (DeviceClass, ResourceClaim, ResourceClaimTemplate,
ResourceSlice) are held by `StorageState.dra`."""


# ---------------------------------------------------------------------------- pod side


@dataclass(frozen=True, slots=True)
class PodVolume:
    """A pod volume as the volume plugins see it: the claim it uses (a PVC, or the PVC of a
    generic ephemeral volume, named ``<pod>-<volume>``) or the legacy disk it mounts."""

    name: str
    claim: str | None = None
    ephemeral: bool = False
    disk: tuple[str, str] | None = None  # ("gce" | "aws" | "iscsi", pdName | volumeID | iqn)
    rbd: tuple[tuple[str, ...], str, str] | None = None  # (monitors, pool, image)
    read_only: bool = False
    needs_restrictions_check: bool = False


@dataclass(frozen=True, slots=True)
class PodResourceClaim:
    """An entry of spec.resourceClaims with the ResourceClaim it names (None: its template's
    claim is not created yet, or neither source is set); `template`: made from a
    ResourceClaimTemplate (the claim must be owned by the pod)."""

    name: str
    claim: str | None
    template: bool = False
    unsupported: bool = False  # neither resourceClaimName nor resourceClaimTemplateName


def _pod_volume(w: _Where, pod_name: str, raw: Any, path: str) -> PodVolume:
    item = w.mapping(raw, path)
    name = w.string(item.get("name"), f"{path}.name", "")
    if item.get("persistentVolumeClaim") is not None:
        src = w.mapping(item.get("persistentVolumeClaim"), f"{path}.persistentVolumeClaim")
        return PodVolume(
            name,
            claim=w.string(src.get("claimName"), f"{path}.persistentVolumeClaim.claimName", ""),
        )
    if item.get("ephemeral") is not None:
        return PodVolume(name, claim=f"{pod_name}-{name}", ephemeral=True)
    disks = (
        ("gcePersistentDisk", "gce", "pdName"),
        ("awsElasticBlockStore", "aws", "volumeID"),
        ("iscsi", "iscsi", "iqn"),
    )
    for source, kind, key in disks:
        if item.get(source) is not None:
            src = w.mapping(item.get(source), f"{path}.{source}")
            ident = w.string(src.get(key), f"{path}.{source}.{key}", "")
            read_only = w.boolean(src.get("readOnly"), f"{path}.{source}.readOnly", False)
            return PodVolume(
                name, disk=(kind, ident), read_only=read_only, needs_restrictions_check=True
            )
    if item.get("rbd") is not None:
        src = w.mapping(item.get("rbd"), f"{path}.rbd")
        rbd = (
            w.string_list(src.get("monitors"), f"{path}.rbd.monitors"),
            w.string(src.get("pool"), f"{path}.rbd.pool", "") or "rbd",  # the API's default
            w.string(src.get("image"), f"{path}.rbd.image", ""),
        )
        read_only = w.boolean(src.get("readOnly"), f"{path}.rbd.readOnly", False)
        return PodVolume(name, rbd=rbd, read_only=read_only, needs_restrictions_check=True)
    return PodVolume(name)


def parse_pod_storage(
    obj: Mapping[str, Any],
) -> tuple[tuple[PodVolume, ...], tuple[PodResourceClaim, ...]]:
    """A Pod's volumes (spec.volumes) and ResourceClaims (spec.resourceClaims, resolved with
    status.resourceClaimStatuses for claims made from a template)."""
    w = _Where.of("Pod", obj, namespaced=True)
    meta = w.mapping(obj.get("metadata"), "metadata")
    pod_name = w.string(meta.get("name"), "metadata.name", "")
    spec = w.mapping(obj.get("spec"), "spec")
    volumes = tuple(
        _pod_volume(w, pod_name, v, f"spec.volumes[{i}]")
        for i, v in enumerate(w.list(spec.get("volumes"), "spec.volumes"))
    )
    status = w.mapping(obj.get("status"), "status")
    generated: dict[str, str] = {}
    statuses = w.list(status.get("resourceClaimStatuses"), "status.resourceClaimStatuses")
    for i, s in enumerate(statuses):
        item = w.mapping(s, f"status.resourceClaimStatuses[{i}]")
        claim = item.get("resourceClaimName")
        name = w.string(item.get("name"), f"status.resourceClaimStatuses[{i}].name", "")
        # "" (no name in the status): no claim was needed for this entry (kube skips it)
        generated[name] = w.string(
            claim, f"status.resourceClaimStatuses[{i}].resourceClaimName", ""
        )
    claims = []
    for i, c in enumerate(w.list(spec.get("resourceClaims"), "spec.resourceClaims")):
        item = w.mapping(c, f"spec.resourceClaims[{i}]")
        name = w.string(item.get("name"), f"spec.resourceClaims[{i}].name", "")
        direct = w.opt_str(
            item.get("resourceClaimName"), f"spec.resourceClaims[{i}].resourceClaimName"
        )
        template = w.opt_str(
            item.get("resourceClaimTemplateName"),
            f"spec.resourceClaims[{i}].resourceClaimTemplateName",
        )
        if direct:
            claims.append(PodResourceClaim(name, direct))
        elif template:
            claims.append(PodResourceClaim(name, generated.get(name), template=True))
        else:
            claims.append(PodResourceClaim(name, None, unsupported=True))
    return volumes, tuple(claims)


# ---------------------------------------------------------------------------- the cache


class VolumeWriter(Protocol):
    """Where VolumeBinding's PreBind writes (the API server, through the kube adapter)."""

    def write_claim(self, claim: PersistentVolumeClaim) -> Awaitable[PersistentVolumeClaim]:
        """Update the claim (its selected-node annotation); the API's answer."""
        ...

    def write_volume(self, volume: PersistentVolume) -> Awaitable[PersistentVolume]:
        """Update the volume (its claimRef); the API's answer."""
        ...

    def pod_exists(self, namespace: str, name: str, uid: str) -> bool:
        """Whether the pod is still there (binding stops for a deleted pod)."""
        ...

    def changed(self, timeout: float) -> Awaitable[None]:
        """Return after the next storage change the adapter observed, or `timeout` seconds."""
        ...


class AssumeError(Exception):
    """An assumption on an object the cache does not hold, or on an outdated version."""


_DRA_TYPES = frozenset(DRA_KINDS.values())


class StorageState:
    """The storage objects of the cluster, with VolumeBinding's assumptions on top."""

    def __init__(self) -> None:
        self.claims: dict[str, PersistentVolumeClaim] = {}  # as the API reported them
        self.volumes: dict[str, PersistentVolume] = {}
        self.classes: dict[str, StorageClass] = {}
        self.csi_nodes: dict[str, CSINode] = {}
        self.csi_drivers: dict[str, CSIDriver] = {}
        self.capacities: dict[str, CSIStorageCapacity] = {}
        self.dra = DraState()  # DeviceClasses, ResourceClaims, templates, ResourceSlices
        self.attachments: dict[str, VolumeAttachment] = {}
        self._assumed_claims: dict[str, PersistentVolumeClaim] = {}
        self._assumed_volumes: dict[str, PersistentVolume] = {}
        self._claim_users: dict[str, int] = {}  # claim key -> pods on nodes that use it
        self.writer: VolumeWriter | None = None
        self.generation = 0  # bumped on every change

    # -- reading (assumptions first) -------------------------------------------------------

    def claim(self, namespace: str, name: str) -> PersistentVolumeClaim | None:
        key = f"{namespace}/{name}"
        return self._assumed_claims.get(key) or self.claims.get(key)

    def volume(self, name: str) -> PersistentVolume | None:
        return self._assumed_volumes.get(name) or self.volumes.get(name)

    def volumes_of_class(self, class_name: str) -> list[PersistentVolume]:
        return [
            v
            for name in sorted(self.volumes)
            if (v := self.volume(name)) is not None and v.class_name == class_name
        ]

    def shared(self) -> StorageState:
        """The same objects and assumptions (shared: read, never written, by the copy) with a
        copy of the pod counts, for a snapshot that adds and removes pods of its own."""
        view = copy.copy(self)
        view._claim_users = dict(self._claim_users)
        return view

    def claim_in_use(self, key: str) -> bool:
        """kube's IsPVCUsedByPods: some pod on a node (bound or assumed) uses the claim."""
        return self._claim_users.get(key, 0) > 0

    def is_assumed_volume(self, name: str) -> bool:
        return name in self._assumed_volumes

    def is_assumed_claim(self, key: str) -> bool:
        return key in self._assumed_claims

    # -- the watch (or a snapshot file) ----------------------------------------------------

    def _from_api(
        self, store: dict[str, Any], assumed: dict[str, Any], key: str, value: Any
    ) -> None:
        """An object from the watch; it replaces an assumption it is not older than."""
        mine = assumed.get(key)
        if mine is not None and _version(value.resource_version) >= _version(mine.resource_version):
            del assumed[key]  # the API caught up
        store[key] = value
        self.generation += 1

    def _assume(
        self, store: dict[str, Any], assumed: dict[str, Any], kind: str, key: str, value: Any
    ) -> None:
        stored = store.get(key)
        if stored is None:
            raise AssumeError(f'{kind} "{key}" not found')
        if _version(value.resource_version) < _version(stored.resource_version):
            raise AssumeError(
                f'couldn\'t assume {kind} "{key}": version '
                f"{value.resource_version} is older than {stored.resource_version}"
            )
        assumed[key] = value
        self.generation += 1

    def set_claim(self, claim: PersistentVolumeClaim) -> None:
        self._from_api(self.claims, self._assumed_claims, claim.key, claim)

    def remove_claim(self, key: str) -> None:
        self.claims.pop(key, None)
        self._assumed_claims.pop(key, None)
        self.generation += 1

    def set_volume(self, volume: PersistentVolume) -> None:
        self._from_api(self.volumes, self._assumed_volumes, volume.name, volume)

    def remove_volume(self, name: str) -> None:
        self.volumes.pop(name, None)
        self._assumed_volumes.pop(name, None)
        self.generation += 1

    def set_class(self, value: StorageClass) -> None:
        self.classes[value.name] = value
        self.generation += 1

    def set_csi_node(self, value: CSINode) -> None:
        self.csi_nodes[value.name] = value
        self.generation += 1

    def set_csi_driver(self, value: CSIDriver) -> None:
        self.csi_drivers[value.name] = value
        self.generation += 1

    def set_capacity(self, value: CSIStorageCapacity) -> None:
        self.capacities[value.key] = value
        self.generation += 1

    def set_attachment(self, value: VolumeAttachment) -> None:
        self.attachments[value.name] = value
        self.generation += 1

    def remove(self, kind: type, key: str) -> None:
        """Forget an object deleted from the API (by type and its cache key)."""
        if kind in _DRA_TYPES:
            self.dra.remove(kind, key)
            self.generation += 1
        elif kind is PersistentVolumeClaim:
            self.remove_claim(key)
        elif kind is PersistentVolume:
            self.remove_volume(key)
        else:
            stores: dict[type, dict[str, Any]] = {
                StorageClass: self.classes,
                CSINode: self.csi_nodes,
                CSIDriver: self.csi_drivers,
                CSIStorageCapacity: self.capacities,
                VolumeAttachment: self.attachments,
            }
            stores[kind].pop(key, None)
            self.generation += 1

    def add(self, value: Any) -> None:
        """Store any parsed storage object (explain's snapshot loading, the watches)."""
        if type(value) in _DRA_TYPES:
            self.dra.add(value)
            self.generation += 1
            return
        setters: dict[type, Callable[[Any], None]] = {
            PersistentVolumeClaim: self.set_claim,
            PersistentVolume: self.set_volume,
            StorageClass: self.set_class,
            CSINode: self.set_csi_node,
            CSIDriver: self.set_csi_driver,
            CSIStorageCapacity: self.set_capacity,
            VolumeAttachment: self.set_attachment,
        }
        setters[type(value)](value)

    # -- pods on nodes (kept by the snapshot) ----------------------------------------------

    def count_pod(self, namespace: str, volumes: Iterable[PodVolume], sign: int) -> None:
        for v in volumes:
            if v.claim is not None and not v.ephemeral:
                key = f"{namespace}/{v.claim}"
                count = self._claim_users.get(key, 0) + sign
                if count > 0:
                    self._claim_users[key] = count
                else:
                    self._claim_users.pop(key, None)

    # -- assumptions -----------------------------------------------------------------------

    def assume_volume(self, volume: PersistentVolume) -> None:
        self._assume(self.volumes, self._assumed_volumes, "persistentvolume", volume.name, volume)

    def assume_claim(self, claim: PersistentVolumeClaim) -> None:
        self._assume(self.claims, self._assumed_claims, "persistentvolumeclaim", claim.key, claim)

    def restore_volume(self, name: str) -> None:
        if self._assumed_volumes.pop(name, None) is not None:
            self.generation += 1

    def restore_claim(self, key: str) -> None:
        if self._assumed_claims.pop(key, None) is not None:
            self.generation += 1
