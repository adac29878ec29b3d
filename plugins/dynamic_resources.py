"""DynamicResources: kube-scheduler's DRA plugin (structured parameters, resource.k8s.io/v1),
with the devices of a claim chosen by NVLink bandwidth where the node's GPU graph is known.

- **PreFilter** gathers the pod's claims (`spec.resourceClaims` by name, or the claim made
  from a template, found through `status.resourceClaimStatuses`; a template's claim must be
  controlled by the pod). A claim not created yet, missing, being deleted, reserved for
  others up to the limit, or still being allocated for another pod, and a request whose
  DeviceClass does not exist, make the pod wait with kube's message. The unallocated claims
  get one allocator for the cycle over the cache's DeviceClasses, ResourceSlices and the
  devices already allocated (to other claims, and in flight for pods between Reserve and
  PreBind).
- **Filter**: an allocated claim restricts the pod to its allocation's node selector
  (`resourceclaim not available on the node`); the allocator looks for devices for every
  unallocated claim on each node (`cannot allocate all claims`), once per kind of node:
  nodes with the same key share its verdict (`scheduler.core.dra.verdicts`), and the
  allocation on a node is computed when needed (Reserve, explain). An allocator error (a
  selector failing on a device, ...) fails the cycle, as kube's Error status; an invalid
  pool rejects only that node.
- **Reserve** holds the node's allocation in the cache (in flight: no other pod gets those
  devices); **Unreserve** releases it.
- **PreBind** writes, through the binder (`ClaimStatusWriter`), `status.allocation` and
  the pod in `status.reservedFor` of each claim not yet reserved for it; the written claim
  is assumed in the cache until the watch catches up. A claim shared by several pods is
  allocated once: the next pod finds it allocated and is only added to `reservedFor`.

Every rejection is UnschedulableAndUnresolvable, as kube's (preemption does not free
devices). **PostFilter** deallocates an allocated claim that kept the pod off a node and is
reserved for no other pod (kube's); **Unreserve** after PreBind removes the pod from the
claims' `reservedFor` (`ClaimStatusEditor` of the binder).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from plugins._volumes import UNRESOLVABLE
from scheduler.core.config import strict_mapping
from scheduler.core.cycle import drive
from scheduler.core.dra import (
    CANNOT_ALLOCATE,
    NOT_AVAILABLE,
    AllocationError,
    AllocationResult,
    Allocator,
    CelCache,
    ResourceClaim,
    node_selector_matches,
)
from scheduler.core.dra.state import (
    NODE_CHOICES_KEY,
    RESERVED_FOR_MAX_SIZE,
    ClaimWriteError,
    DraState,
    NodeChoice,
    NodeChoices,
)
from scheduler.core.dra.verdicts import NodeVerdicts, VerdictCache
from scheduler.core.framework import (
    BINDER_KEY,
    SKIP,
    ClaimStatusEditor,
    ClaimStatusWriter,
    CycleState,
    PostFilterResult,
    PreFilterResult,
    ReasonMasks,
    ScheduleResult,
)
from scheduler.core.model import PodInfo
from scheduler.core.selectors import NodeSelector
from scheduler.core.snapshot import BoolArray, Snapshot

__all__ = ["NAME", "DynamicResources", "new"]

NAME = "DynamicResources"
REASON_NODE = NOT_AVAILABLE
CODES: dict[str, str] = {NOT_AVAILABLE: UNRESOLVABLE, CANNOT_ALLOCATE: UNRESOLVABLE}
"""kube's status code per reason (its statusUnschedulable is UnschedulableAndUnresolvable);
the PreFilter refusals are UnschedulableAndUnresolvable too."""
PREFILTER_CODE = UNRESOLVABLE
_STATE = f"{NAME}/state"
DEALLOCATED = "deallocation of ResourceClaim completed"
STILL_UNSCHEDULABLE = "still not schedulable"
NO_CLAIMS = "no new claims to deallocate"
"""kube's PostFilter messages (Unschedulable; joined before preemption's)."""
_log = logging.getLogger(__name__)
_WRITES: set[asyncio.Task[Any]] = set()  # claim writes running on the event loop


class DraError(Exception):
    """kube's statusError: the cycle fails and the pod backs off."""


@dataclass
class _State:
    claims: list[ResourceClaim]  # 1:1 with the pod's claims that exist
    selectors: list[tuple[int, NodeSelector]]  # of the allocated claims, by claim index
    to_allocate: list[int]  # indices into claims
    allocator: Allocator | None
    verdicts: NodeVerdicts | None
    dra: DraState
    choices: NodeChoices  # node -> the allocation on each node Filter found feasible
    allocations: dict[int, AllocationResult] = field(default_factory=dict)  # Reserve's
    pending: list[str] = field(default_factory=list)  # claim uids in flight (Reserve)
    unavailable: set[int] = field(default_factory=set)  # allocated claims a node refused


def _controlled_by(claim: ResourceClaim, pod: PodInfo) -> bool:
    """metav1.IsControlledBy: an owner reference with controller: true and the pod's uid."""
    meta = claim.raw.get("metadata") if isinstance(claim.raw, Mapping) else None
    refs = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
    for ref in refs if isinstance(refs, list) else ():
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return str(ref.get("uid") or "") == pod.uid
    return False


class DynamicResources:
    name = NAME

    def __init__(self, *, reuse_verdicts: bool = True) -> None:
        self.cel = CelCache()  # compiled selectors, for the scheduler's lifetime
        self.verdict_cache = VerdictCache()  # per-node verdicts by key, across cycles
        self.reuse_verdicts = reuse_verdicts  # False: the allocator runs on every node

    # -- PreFilter ------------------------------------------------------------------------

    def _claims(self, pod: PodInfo, snapshot: Snapshot) -> list[ResourceClaim] | str:
        """kube's foreachPodResourceClaim: the claims, or why the pod must wait."""
        dra = snapshot.storage.dra
        claims = []
        for entry in pod.resource_claims:
            if entry.unsupported:
                return (
                    f'pod "{pod.namespace}/{pod.name}", spec.resourceClaim "{entry.name}": '
                    "none of the supported fields are set"
                )
            if entry.claim is None:
                return f'pod "{pod.namespace}/{pod.name}": ResourceClaim not created yet'
            if entry.claim == "":
                continue  # no claim was needed for this entry
            claim = dra.claim(pod.namespace, entry.claim)
            if claim is None:
                return f'resourceclaim.resource.k8s.io "{entry.claim}" not found'
            if claim.deleting:
                return f'resourceclaim "{claim.name}" is being deleted'
            if entry.template and not _controlled_by(claim, pod):
                return (
                    f"ResourceClaim {claim.key} was not created for pod "
                    f"{pod.namespace}/{pod.name} (pod is not owner)"
                )
            claims.append(claim)
        return claims

    def pre_filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot
    ) -> PreFilterResult | None:
        if not pod.resource_claims:
            return SKIP
        found = self._claims(pod, snapshot)
        if isinstance(found, str):
            return PreFilterResult(unschedulable=found)
        if not found:
            return SKIP
        dra = snapshot.storage.dra
        selectors: list[tuple[int, NodeSelector]] = []
        to_allocate: list[int] = []
        for index, claim in enumerate(found):
            if claim.allocation is not None:
                if len(claim.reserved_for) >= RESERVED_FOR_MAX_SIZE and not (
                    claim.reserved_for_pod(pod.uid)
                ):
                    return PreFilterResult(unschedulable="resourceclaim in use")
                if claim.allocation.node_selector is not None:
                    selectors.append((index, claim.allocation.node_selector))
                continue
            to_allocate.append(index)
            if dra.has_pending(claim.uid):
                return PreFilterResult(
                    unschedulable=f"resource claim {claim.key} is in the process of being allocated"
                )
            for request in claim.requests:
                if request.first_available:
                    checks = [
                        (s.device_class_name, f"{request.name}/{s.name}")
                        for s in request.first_available
                    ]
                else:
                    assert request.exactly is not None
                    checks = [(request.exactly.device_class_name, request.name)]
                for class_name, shown in checks:
                    if not class_name:
                        raise DraError(f"request {shown}: unsupported request type")
                    if class_name not in dra.classes:
                        return PreFilterResult(
                            unschedulable=f"request {shown}: device class {class_name} "
                            "does not exist"
                        )
        allocator = verdicts = None
        if to_allocate:
            allocator = Allocator(
                dra.classes,
                (),
                dra.allocated_devices(),
                cel=self.cel,
                gpu_selector=snapshot.gpus.selector,
                slices_for=dra.slices_for,
                views=dra.views,
            )
            verdicts = NodeVerdicts(
                allocator,
                [found[i] for i in to_allocate],
                self.verdict_cache,
                reuse=self.reuse_verdicts,
            )
        choices = NodeChoices(self._allocation_for(verdicts))
        state.write(
            _STATE, _State(found, selectors, to_allocate, allocator, verdicts, dra, choices)
        )
        if allocator is not None:
            state.write(NODE_CHOICES_KEY, choices)
        return None

    @staticmethod
    def _allocation_for(verdicts: NodeVerdicts | None) -> Any:
        def compute(node: Any, topology: Any) -> NodeChoice:
            """The allocation on a node whose verdict Filter reused."""
            assert verdicts is not None
            try:
                results = verdicts.allocator.allocate(node, verdicts.claims, topology=topology)
            except AllocationError as exc:
                raise DraError(str(exc)) from None
            if results is None:
                raise DraError("claim allocation not found for node")
            return _choice(verdicts, results, topology)

        return compute

    # -- Filter ---------------------------------------------------------------------------

    def filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: BoolArray
    ) -> ReasonMasks:
        st: _State = state.read(_STATE)
        reasons: dict[str, BoolArray] = {}

        def reject(slot: int, reason: str) -> None:
            mask = reasons.get(reason)
            if mask is None:
                mask = reasons[reason] = np.zeros(snapshot.capacity, np.bool_)
            mask[slot] = True

        verdicts = st.verdicts
        for raw_slot in np.flatnonzero(candidates):
            slot = int(raw_slot)
            node = snapshot.nodes[slot]
            if node is None:
                continue
            if st.selectors:
                labels = node.labels
                refused = [
                    i for i, s in st.selectors if not node_selector_matches(s, node.name, labels)
                ]
                if refused:
                    st.unavailable.update(refused)
                    reject(slot, NOT_AVAILABLE)
                    continue
            if verdicts is None:
                continue
            topology = snapshot.gpus.topology[slot]
            try:
                verdict, results = verdicts.decide(node, topology)
            except AllocationError as exc:
                raise DraError(str(exc)) from None
            if verdict:
                reject(slot, verdict)
            elif results is not None:
                st.choices.add(node.name, _choice(verdicts, results, topology))
            else:
                st.choices.defer(node.name, node, topology)
        return list(reasons.items())

    def unresolvable(
        self, pod: PodInfo, snapshot: Snapshot, reason: str, rejected: BoolArray
    ) -> BoolArray:
        """Every rejection is UnschedulableAndUnresolvable (kube's statusUnschedulable)."""
        return rejected.copy()

    # -- PostFilter -----------------------------------------------------------------------

    @staticmethod
    def post_filter_applies(pod: PodInfo) -> bool:
        """kube's PostFilter returns at once for a pod without claims."""
        return bool(pod.resource_claims)

    def post_filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, result: ScheduleResult
    ) -> PostFilterResult | None:
        """kube's PostFilter: an allocated claim that kept the pod off a node and is
        reserved for no pod (or for this pod alone) is deallocated, so that it can be
        allocated elsewhere; the first such claim in the pod's order (kube picks one at
        random). The pod stays unschedulable either way."""
        if not pod.resource_claims:
            return None
        st: _State | None = state.get(_STATE)
        if st is None or not st.claims:
            return PostFilterResult(message=NO_CLAIMS)
        for index in sorted(st.unavailable):
            claim = st.claims[index]
            reserved = claim.reserved_for
            if reserved and not (len(reserved) == 1 and reserved[0].uid == pod.uid):
                continue
            binder = state.get(BINDER_KEY)
            if not isinstance(binder, ClaimStatusEditor):
                return PostFilterResult(
                    message=f"claim {claim.key}: the binder cannot write ResourceClaim status"
                )
            try:
                _write(st.dra, binder.deallocate_claim(claim))
            except ClaimWriteError as exc:
                return PostFilterResult(message=str(exc))
            return PostFilterResult(message=DEALLOCATED)
        return PostFilterResult(message=STILL_UNSCHEDULABLE)

    # -- Reserve / Unreserve --------------------------------------------------------------

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> str | None:
        st: _State | None = state.get(_STATE)
        if st is None or not st.to_allocate:
            return None
        choice = st.choices.get(node)
        if choice is None:
            raise DraError("claim allocation not found for node")
        dra = st.dra
        for index, allocation in zip(st.to_allocate, choice.results, strict=True):
            claim = st.claims[index]
            st.allocations[index] = allocation
            dra.signal_pending(replace(claim, allocation=allocation))
            st.pending.append(claim.uid)
        return None

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        """kube's Unreserve: an allocation in flight is dropped (the claim as it was before);
        a claim PreBind already reserved for the pod loses the pod from `reservedFor` (its
        allocation stays, as kube leaves it: the resourceclaim controller or a later
        PostFilter deallocates it). A failed write is logged; the next attempt retries."""
        st: _State | None = state.get(_STATE)
        if st is None:
            return
        dra = st.dra
        for index in st.to_allocate:
            claim = st.claims[index]
            if claim.uid in st.pending and dra.remove_pending(claim.uid):
                dra.restore_claim(claim.key)
        st.pending.clear()
        st.allocations.clear()
        binder = state.get(BINDER_KEY)
        for claim in st.claims:
            if claim.allocation is None or not claim.reserved_for_pod(pod.uid):
                continue
            if not isinstance(binder, ClaimStatusEditor):
                _log.warning("claim %s: the binder cannot remove pod %s from reservedFor",
                             claim.key, pod.key)  # fmt: skip
                continue
            try:
                _write(dra, binder.unreserve_claim(claim, pod))
            except ClaimWriteError as exc:
                _log.warning("claim %s: unreserve pod %s: %s", claim.key, pod.key, exc)

    # -- PreBind --------------------------------------------------------------------------

    async def pre_bind(self, state: CycleState, pod: PodInfo, node: str) -> str | None:
        st: _State | None = state.get(_STATE)
        if st is None or not st.claims:
            return None
        binder = state.get(BINDER_KEY)
        dra = st.dra
        for index, claim in enumerate(st.claims):
            if claim.reserved_for_pod(pod.uid):
                continue
            if not isinstance(binder, ClaimStatusWriter):
                return f"claim {claim.key}: the binder cannot write ResourceClaim status"
            allocation = st.allocations.get(index)
            try:
                written = await binder.write_claim_status(claim, allocation, pod)
            except ClaimWriteError as exc:
                if allocation is not None and dra.remove_pending(claim.uid):
                    st.pending.remove(claim.uid)
                return str(exc)
            if written is not None:
                dra.assume_claim(written)
                st.claims[index] = written
            if allocation is not None and dra.remove_pending(claim.uid):
                st.pending.remove(claim.uid)
        return None


def _write(dra: DraState, write: Coroutine[Any, Any, ResourceClaim | None]) -> None:
    """Run a claim write from a synchronous extension point: at once when no event loop
    runs (the in-memory and dry-run binders never wait), else as a task on the loop. The
    written claim is assumed in the cache until the watch delivers it."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        written = drive(write)
        if written is not None:
            dra.assume_claim(written)
        return

    def done(task: asyncio.Task[ResourceClaim | None]) -> None:
        _WRITES.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            _log.warning("ResourceClaim status write failed: %s", error)
            return
        written = task.result()
        if written is not None:
            dra.assume_claim(written)

    task = loop.create_task(write)
    _WRITES.add(task)
    task.add_done_callback(done)


def _choice(verdicts: NodeVerdicts, results: list[AllocationResult], topology: Any) -> NodeChoice:
    """The allocator's last call as a NodeChoice (its NVLink choices are the last call's)."""
    return NodeChoice(
        tuple(c.key for c in verdicts.claims),
        tuple(results),
        tuple(verdicts.allocator.preferences),
        topology,
    )


def new(args: Mapping[str, Any] | None, path: str) -> DynamicResources:
    strict_mapping(args, path, set())
    return DynamicResources()
