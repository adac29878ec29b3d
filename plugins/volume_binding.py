"""VolumeBinding: a pod's PersistentVolumeClaims must be bound, or bindable, on the node.

As kube-scheduler 1.33's (`pkg/scheduler/framework/plugins/volumebinding`):

- PreFilter first checks every claim (kube's podHasPVCs): one that does not exist
  (`persistentvolumeclaim "NAME" not found`; for a generic ephemeral volume `waiting for
  ephemeral volume controller to create the persistentvolumeclaim "NAME"`), whose phase is
  Lost (`persistentvolumeclaim "NAME" bound to non-existent persistentvolume "PV"`), that is
  being deleted, or (generic ephemeral) that the pod does not own rejects the pod; then an
  unbound claim of an `Immediate` class, or of a class that does not exist, or a claim
  pre-bound to a PV but not bound yet (`pod has unbound immediate PersistentVolumeClaims`)
  waits for the PV controller. All are UnschedulableAndUnresolvable, except a class without
  volumeBindingMode (kube's Error status). PreFilter does not narrow the nodes (kube dropped
  the bound-local-PV shortcut in 1.32: a hostname label need not be the node's name).
- Filter: bound claims' PVs must accept the node (`node(s) had volume node affinity
  conflict`; a missing PV: `node(s) unavailable due to one or more pvc(s) bound to
  non-existent pv(s)`); unbound `WaitForFirstConsumer` claims need an available matching PV
  on the node or a class that can provision there (`node(s) didn't find available persistent
  volumes to bind`), with free storage where the CSI driver reports CSIStorageCapacity
  (`node(s) did not have enough free storage`). Every Filter reason is
  UnschedulableAndUnresolvable. A claim naming a VolumeAttributesClass matches no PV (that
  feature is off in 1.33): it can only be provisioned.
- No Score: kube 1.33 scores only with the StorageCapacityScoring feature gate, off by
  default (its PreScore always skips), so the plugin is not a scorer here.
- Reserve assumes the choices (PV claimRefs, the claims' selected-node annotation) in the
  storage cache; PreBind writes them through the `VolumeWriter` and waits, at most
  `bindTimeoutSeconds` (600), for the PV controller to bind every claim; Unreserve reverts.
  Without a writer (explain's dry run, the simulator) PreBind writes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from plugins._volumes import ERROR, UNRESOLVABLE
from scheduler.core.config import ConfigError, strict_mapping
from scheduler.core.framework import SKIP, CycleState, PreFilterResult, ReasonMasks
from scheduler.core.model import NodeInfo, PodInfo
from scheduler.core.snapshot import BoolArray, Snapshot
from scheduler.core.storage import (
    ANN_SELECTED_NODE,
    NOT_SUPPORTED_PROVISIONER,
    AssumeError,
    CSIStorageCapacity,
    PersistentVolume,
    PersistentVolumeClaim,
    StorageState,
    VolumeWriter,
)

NAME = "VolumeBinding"
REASON_BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
REASON_NODE_CONFLICT = "node(s) had volume node affinity conflict"
REASON_NOT_ENOUGH_SPACE = "node(s) did not have enough free storage"
REASON_PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
DEFAULT_BIND_TIMEOUT = 600
POLL_INTERVAL = 1.0  # kube polls the bindings every second
HOSTNAME_LABEL = "kubernetes.io/hostname"
_STATE = f"{NAME}/state"
CODE_KEY = f"{NAME}/code"
"""CycleState key of the status code of a PreFilter rejection (see `CODES`)."""

CODES: dict[str, str] = {
    REASON_BIND_CONFLICT: UNRESOLVABLE,
    REASON_NODE_CONFLICT: UNRESOLVABLE,
    REASON_NOT_ENOUGH_SPACE: UNRESOLVABLE,
    REASON_PV_NOT_EXIST: UNRESOLVABLE,
    UNBOUND_IMMEDIATE: UNRESOLVABLE,
}
"""kube's status code per fixed reason; a PreFilter claim message carries its code on
`VolumeError.code` (UnschedulableAndUnresolvable, `VolumeBindingMode not set`: Error)."""


class VolumeError(Exception):
    """A claim the pod cannot be scheduled with, with kube's status code for it."""

    def __init__(self, message: str, code: str = UNRESOLVABLE) -> None:
        super().__init__(message)
        self.code = code


def claim_of_volume(
    storage: StorageState, pod: PodInfo, claim_name: str, ephemeral: bool
) -> PersistentVolumeClaim:
    """The claim a pod volume uses, as kube's podHasPVCs checks it."""
    claim = storage.claim(pod.namespace, claim_name)
    if claim is None:
        if ephemeral:  # normal right after the pod is created
            raise VolumeError(
                "waiting for ephemeral volume controller to create the persistentvolumeclaim "
                f'"{claim_name}"'
            )
        raise VolumeError(f'persistentvolumeclaim "{claim_name}" not found')
    if claim.lost:
        raise VolumeError(
            f'persistentvolumeclaim "{claim_name}" bound to non-existent persistentvolume '
            f'"{claim.volume_name}"'
        )
    if claim.deleting:
        raise VolumeError(f'persistentvolumeclaim "{claim_name}" is being deleted')
    if ephemeral and claim.controller_uid != pod.uid:
        raise VolumeError(
            f"PVC {claim.namespace}/{claim.name} was not created for pod "
            f"{pod.namespace}/{pod.name} (pod is not owner)"
        )
    return claim


@dataclass(slots=True)
class PodVolumes:
    """The choices for one node: PVs to bind to claims, and claims to provision there."""

    static: list[tuple[PersistentVolume, PersistentVolumeClaim]] = field(default_factory=list)
    provision: list[PersistentVolumeClaim] = field(default_factory=list)


@dataclass(slots=True)
class _State:
    snapshot: Snapshot
    storage: StorageState
    bound: list[PersistentVolumeClaim] = field(default_factory=list)
    delayed: list[PersistentVolumeClaim] = field(default_factory=list)
    by_node: dict[str, PodVolumes] = field(default_factory=dict)
    candidates: dict[str, ClaimCandidates] = field(default_factory=dict)
    capacity: dict[str, _Capacity] = field(default_factory=dict)
    all_bound: bool = True


def _access_modes_fit(claim: PersistentVolumeClaim, pv: PersistentVolume) -> bool:
    return all(mode in pv.access_modes for mode in claim.access_modes)


@dataclass(slots=True)
class ClaimCandidates:
    """One unbound claim's PVs, with what does not depend on the node checked once per cycle
    (kube's FindMatchingVolume, split): the PV pre-bound to it, else the available PVs that
    fit it, smallest first; local PVs (node affinity on one hostname list) indexed by
    hostname, so a node looks only at its own and at the PVs with other affinities."""

    prebound: PersistentVolume | None = None
    general: list[PersistentVolume] = field(default_factory=list)
    by_host: dict[str, list[PersistentVolume]] = field(default_factory=dict)

    @classmethod
    def of(cls, claim: PersistentVolumeClaim, volumes: list[PersistentVolume]) -> ClaimCandidates:
        out = cls()
        if claim.attributes_class:  # FindMatchingVolume without VolumeAttributesClass
            return out
        requested = claim.request or 0
        for pv in volumes:
            if pv.claim_ref is not None and not pv.bound_to(claim):
                continue
            if pv.capacity < requested or pv.volume_mode != claim.volume_mode or pv.deleting:
                continue
            if pv.bound_to(claim):
                if out.prebound is None:
                    out.prebound = pv
                continue
            if pv.phase != "Available" or pv.class_name != claim.class_name:
                continue
            if claim.selector is not None and not claim.selector.matches(pv.labels):
                continue
            if not _access_modes_fit(claim, pv):
                continue
            hosts = _hostname_only(pv)
            if hosts is None:
                out.general.append(pv)
            for host in hosts or ():
                out.by_host.setdefault(host, []).append(pv)
        key = _size_order
        out.general.sort(key=key)
        for pvs in out.by_host.values():
            pvs.sort(key=key)
        return out

    def match(self, node: NodeInfo, excluded: set[str]) -> PersistentVolume | None:
        """The PV for the claim on `node`: the pre-bound one (if its affinity admits the
        node), else the smallest available one the node reaches."""
        if self.prebound is not None:
            return self.prebound if self.prebound.node_affinity_matches(node.labels) else None
        best = None
        for pv in self.general:
            if pv.name not in excluded and pv.node_affinity_matches(node.labels):
                best = pv
                break
        host = node.labels.get(HOSTNAME_LABEL)
        for pv in self.by_host.get(host, ()) if host is not None else ():
            if pv.name not in excluded:
                if best is None or _size_order(pv) < _size_order(best):
                    best = pv
                break
        return best


def _size_order(pv: PersistentVolume) -> tuple[int, str]:
    return pv.capacity, pv.name


def _hostname_only(pv: PersistentVolume) -> tuple[str, ...] | None:
    """The hostnames of a PV whose whole affinity is `kubernetes.io/hostname In [...]`."""
    terms = pv.node_affinity.terms if pv.node_affinity is not None else ()
    if len(terms) != 1 or terms[0].match_fields or len(terms[0].match_expressions) != 1:
        return None
    expr = terms[0].match_expressions[0]
    if expr.key != HOSTNAME_LABEL or expr.operator != "In":
        return None
    return expr.values


class VolumeBinding:
    name = NAME

    def __init__(self, bind_timeout: float = DEFAULT_BIND_TIMEOUT) -> None:
        self.bind_timeout = bind_timeout

    # -- PreFilter -------------------------------------------------------------------------

    def pre_filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot
    ) -> PreFilterResult | None:
        storage = snapshot.storage
        data = _State(snapshot, storage)
        state.write(_STATE, data)
        claims = [(v.claim, v.ephemeral) for v in pod.volumes if v.claim is not None]
        if not claims:
            return SKIP
        try:
            # kube's podHasPVCs: every claim first, then their binding modes
            found = [claim_of_volume(storage, pod, name, eph) for name, eph in claims]
            immediate = False
            for claim in found:
                if claim.fully_bound:
                    data.bound.append(claim)
                    continue
                cls = storage.classes.get(claim.class_name) if claim.class_name else None
                if cls is not None and cls.binding_mode is None:
                    raise VolumeError(
                        f'VolumeBindingMode not set for StorageClass "{claim.class_name}"', ERROR
                    )
                if cls is not None and cls.wait_for_first_consumer and not claim.volume_name:
                    data.delayed.append(claim)
                else:  # prebound claims count as unbound immediate ones, as in kube
                    immediate = True
        except VolumeError as exc:
            state.write(CODE_KEY, exc.code)
            return PreFilterResult(unschedulable=str(exc))
        if immediate:
            state.write(CODE_KEY, CODES[UNBOUND_IMMEDIATE])
            return PreFilterResult(unschedulable=UNBOUND_IMMEDIATE)
        for claim in data.delayed:
            if ANN_SELECTED_NODE not in claim.annotations:
                pvs = storage.volumes_of_class(claim.class_name)
                data.candidates[claim.key] = ClaimCandidates.of(claim, pvs)
        return None

    # -- Filter ----------------------------------------------------------------------------

    def filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: BoolArray
    ) -> ReasonMasks:
        data: _State = state.read(_STATE)
        masks = {
            r: np.zeros(snapshot.capacity, np.bool_)
            for r in (
                REASON_NODE_CONFLICT,
                REASON_BIND_CONFLICT,
                REASON_NOT_ENOUGH_SPACE,
                REASON_PV_NOT_EXIST,
            )
        }
        for slot in np.flatnonzero(candidates):
            node = snapshot.nodes[int(slot)]
            if node is None:
                continue
            reasons, volumes = self.find_pod_volumes(data, node)
            for reason in reasons:
                masks[reason][slot] = True
            if not reasons:
                data.by_node[node.name] = volumes
        return [(reason, mask) for reason, mask in masks.items()]

    def find_pod_volumes(self, data: _State, node: NodeInfo) -> tuple[list[str], PodVolumes]:
        """kube's FindPodVolumes for one node: the reasons it fails, or its choices."""
        storage = data.storage
        volumes = PodVolumes()
        bound_ok = found = unbound_ok = space_ok = True
        for claim in data.bound:
            pv = storage.volume(claim.volume_name)
            if pv is None:
                found = False
                break
            if not pv.node_affinity_matches(node.labels):
                bound_ok = False
                break
        if data.delayed:
            to_match: list[PersistentVolumeClaim] = []
            for claim in data.delayed:
                selected = claim.annotations.get(ANN_SELECTED_NODE)
                if selected is None:
                    to_match.append(claim)
                elif selected != node.name:
                    unbound_ok = False  # kube's fast path: only the selected node will do
                    return _reasons(bound_ok, unbound_ok, space_ok, found), volumes
                else:
                    volumes.provision.append(claim)
            chosen: set[str] = set()
            for claim in sorted(to_match, key=lambda c: c.request or 0):
                pv = data.candidates[claim.key].match(node, chosen)
                if pv is None:
                    volumes.provision.append(claim)
                    continue
                chosen.add(pv.name)
                volumes.static.append((pv, claim))
            if volumes.provision:
                unbound_ok, space_ok = self._check_provisions(data, volumes.provision, node)
        return _reasons(bound_ok, unbound_ok, space_ok, found), volumes

    def _check_provisions(
        self, data: _State, claims: list[PersistentVolumeClaim], node: NodeInfo
    ) -> tuple[bool, bool]:
        """kube's checkVolumeProvisions: (provisionable here, enough free storage)."""
        storage = data.storage
        for claim in claims:
            cls = storage.classes.get(claim.class_name)
            if cls is None:
                return False, True
            if cls.provisioner in ("", NOT_SUPPORTED_PROVISIONER):
                return False, True
            if not cls.topology_allows(node.labels):
                return False, True
            capacity = data.capacity.get(claim.key)
            if capacity is None:
                capacity = _Capacity.of(storage, claim, cls.name, cls.provisioner)
                data.capacity[claim.key] = capacity
            if not capacity.reaches(node.labels):
                return True, False
        return True, True

    # -- Reserve / Unreserve ---------------------------------------------------------------

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> str | None:
        data: _State | None = state.get(_STATE)
        if data is None:
            return None
        volumes = data.by_node.get(node)
        data.all_bound = volumes is None or (not volumes.static and not volumes.provision)
        if volumes is None or data.all_bound:
            return None
        storage = data.storage
        static, provision = [], []
        try:
            for pv, claim in volumes.static:
                bound = pv.bind_to(claim)
                if bound != pv:
                    storage.assume_volume(bound)
                static.append((bound, claim))
            for claim in volumes.provision:
                annotations = {**claim.annotations, ANN_SELECTED_NODE: node}
                assumed = replace(claim, annotations=annotations)
                storage.assume_claim(assumed)
                provision.append(assumed)
        except AssumeError as exc:
            for pv, _ in static:
                storage.restore_volume(pv.name)
            for claim in provision:
                storage.restore_claim(claim.key)
            return str(exc)
        volumes.static, volumes.provision = static, provision
        return None

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        data: _State | None = state.get(_STATE)
        volumes = data.by_node.get(node) if data is not None else None
        if data is None or volumes is None:
            return
        _revert(data.storage, volumes)

    # -- PreBind ---------------------------------------------------------------------------

    async def pre_bind(self, state: CycleState, pod: PodInfo, node: str) -> str | None:
        data: _State | None = state.get(_STATE)
        if data is None or data.all_bound:
            return None
        volumes = data.by_node.get(node)
        if volumes is None:
            return f'no pod volumes found for node "{node}"'
        writer = data.storage.writer
        if writer is None:  # a dry run: nothing is written, nothing stays assumed
            _revert(data.storage, volumes)
            return None
        try:
            await self._bind(writer, data, pod, node, volumes)
        except VolumeError as exc:
            _revert(data.storage, volumes)
            return str(exc)
        return None

    async def _bind(
        self,
        writer: VolumeWriter,
        data: _State,
        pod: PodInfo,
        node: str,
        volumes: PodVolumes,
    ) -> None:
        """kube's BindPodVolumes: the API updates, then wait for the PV controller."""
        storage = data.storage
        try:
            static = []
            for pv, claim in volumes.static:
                written = await writer.write_volume(pv)
                storage.set_volume(written)
                static.append((written, claim))
            provision = []
            for claim in volumes.provision:
                answer = await writer.write_claim(claim)
                storage.set_claim(answer)
                provision.append(answer)
        except Exception as exc:  # an API error: the pod retries, assumptions reverted
            raise VolumeError(str(exc) or type(exc).__name__) from None
        volumes.static, volumes.provision = static, provision
        deadline = time.monotonic() + self.bind_timeout
        while not self._bound(writer, data, pod, node, volumes):
            left = deadline - time.monotonic()
            if left <= 0:
                raise VolumeError("binding volumes: context deadline exceeded")
            await writer.changed(min(POLL_INTERVAL, left))

    def _bound(
        self,
        writer: VolumeWriter,
        data: _State,
        pod: PodInfo,
        node: str,
        volumes: PodVolumes,
    ) -> bool:
        """kube's checkBindings: True when every claim is fully bound; raises when binding
        can no longer succeed (pod deleted, claimRef reset, provisioning given up)."""
        storage = data.storage
        slot = data.snapshot.index.get(node)
        info = data.snapshot.nodes[slot] if slot is not None else None
        if info is None:
            raise VolumeError(
                f'binding volumes: failed to get node "{node}": node "{node}" not found'
            )
        if not writer.pod_exists(pod.namespace, pod.name, pod.uid):
            raise VolumeError(
                f'binding volumes: pod does not exist any more: pod "{pod.name}" not found'
            )
        labels = info.labels
        for pv, claim in volumes.static:
            api_pv = storage.volumes.get(pv.name)
            api_claim = storage.claims.get(claim.key)
            if api_pv is None or api_claim is None:
                raise VolumeError("binding volumes: failed to check binding: not found")
            if not api_pv.node_affinity_matches(labels):  # kube checks it before the claimRef
                raise VolumeError(_affinity_error(pv.name, node))
            if api_pv.claim_ref is None or not api_pv.claim_ref.uid:
                raise VolumeError(f'binding volumes: ClaimRef got reset for pv "{pv.name}"')
            if not api_claim.fully_bound:
                return False
        for claim in volumes.provision:
            api_claim = storage.claims.get(claim.key)
            if api_claim is None:
                raise VolumeError(
                    "binding volumes: failed to check provisioning pvc: "
                    f'persistentvolumeclaim "{claim.name}" not found'
                )
            if api_claim.annotations.get(ANN_SELECTED_NODE) != node:
                raise VolumeError(f'binding volumes: provisioning failed for PVC "{claim.name}"')
            if api_claim.volume_name:
                provisioned = storage.volumes.get(api_claim.volume_name)
                if provisioned is None:
                    return False  # not seen yet: check again on the next change
                if not provisioned.node_affinity_matches(labels):
                    raise VolumeError(_affinity_error(provisioned.name, node))
            if not api_claim.fully_bound:
                return False
        return True


def _affinity_error(pv: str, node: str) -> str:
    return (
        f'binding volumes: pv "{pv}" node affinity doesn\'t match node "{node}": '
        "no matching NodeSelectorTerms"
    )


def _revert(storage: StorageState, volumes: PodVolumes) -> None:
    for pv, _ in volumes.static:
        storage.restore_volume(pv.name)
    for claim in volumes.provision:
        storage.restore_claim(claim.key)


def _reasons(bound_ok: bool, unbound_ok: bool, space_ok: bool, found: bool) -> list[str]:
    reasons = []
    if not bound_ok:
        reasons.append(REASON_NODE_CONFLICT)
    if not unbound_ok:
        reasons.append(REASON_BIND_CONFLICT)
    if not space_ok:
        reasons.append(REASON_NOT_ENOUGH_SPACE)
    if not found:
        reasons.append(REASON_PV_NOT_EXIST)
    return reasons


@dataclass(slots=True)
class _Capacity:
    """kube's hasEnoughCapacity for one claim: the CSIStorageCapacities of its class with
    room for it, those selecting nodes by one label indexed by that label."""

    unchecked: bool = False  # no request, or a driver that does not report capacity
    by_label: dict[str, set[str]] = field(default_factory=dict)
    other: list[CSIStorageCapacity] = field(default_factory=list)

    @classmethod
    def of(
        cls, storage: StorageState, claim: PersistentVolumeClaim, class_name: str, driver: str
    ) -> _Capacity:
        csi = storage.csi_drivers.get(driver)
        if claim.request is None or csi is None or not csi.storage_capacity:
            return cls(unchecked=True)
        out = cls()
        for c in storage.capacities.values():
            if c.storage_class_name != class_name or not c.sufficient(claim.request):
                continue
            # the common form, one `key: value`, goes to a lookup table; anything else is
            # matched capacity by capacity
            requirements = c.node_topology.requirements if c.node_topology is not None else None
            if (
                requirements is not None
                and len(requirements) == 1
                and requirements[0].operator == "In"
                and len(requirements[0].values) == 1
            ):
                (value,) = requirements[0].values
                out.by_label.setdefault(requirements[0].key, set()).add(value)
            else:
                out.other.append(c)
        return out

    def reaches(self, labels: Mapping[str, str]) -> bool:
        if self.unchecked:
            return True
        if any(labels.get(key) in values for key, values in self.by_label.items()):
            return True
        return any(c.reaches(labels) for c in self.other)


def new(args: Mapping[str, Any] | None, path: str) -> VolumeBinding:
    entry = strict_mapping(args, path, {"bindTimeoutSeconds", "shape"})
    timeout = entry.get("bindTimeoutSeconds", DEFAULT_BIND_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 0:
        raise ConfigError(
            f"{path}.bindTimeoutSeconds: invalid BindTimeoutSeconds, should not be a negative value"
        )
    if entry.get("shape") is not None:
        raise ConfigError(
            f"{path}.shape: the StorageCapacityScoring feature is disabled (kube 1.33's default)"
        )
    return VolumeBinding(timeout)
