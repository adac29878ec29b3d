"""The DRA objects of the cluster as the DynamicResources plugin sees them, with kube's
assume cache for claims and its in-flight allocations.

`DraState` hangs off the storage state (`snapshot.storage.dra`) and is fed the same way as
every storage object: the watches (or a snapshot file) hand parsed DeviceClasses,
ResourceClaims, ResourceClaimTemplates and ResourceSlices to `StorageState.add` / `remove`.

On top of the API's claims, as kube-scheduler's DRA manager:

- **in flight** (`signal_pending` .. `remove_pending`): the allocation Reserve chose for a
  claim, until PreBind has written it (or Unreserve dropped it). Its devices count as
  allocated for every other pod, and a pod needing the same unallocated claim waits;
- **assumed** (`assume_claim`): the claim as our PreBind wrote it, until the watch delivers
  that version (or a newer one), so the next cycle sees the allocation at once.

`allocated_devices()` is every device held by an allocated claim (assumed or API version)
or an in-flight allocation, except devices allocated with admin access (kube's
ListAllAllocatedDevices); the devices are counted per holder as claims change, and the set
is memoized until they do.

Slices are indexed per node (`slices_for(name)`), and what the allocator gathers from them
for a node (`views`) is kept until the slices change: a slice published for one node by
`nodeName` goes to that node only; every other slice (node selector, all nodes, per-device
selection, shared counters) is offered to every node and the allocator's `gather_pools`
decides. Every slice of a pool touched is included, so completeness is judged on the whole
pool.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scheduler.core.dra.allocator import NodeViews
from scheduler.core.dra.types import (
    AllocationResult,
    DeviceClass,
    DeviceID,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)

if TYPE_CHECKING:
    from scheduler.core.dra.nvlink import Preference
    from scheduler.core.topology.schema import Topology

__all__ = [
    "DRA_KINDS",
    "FINALIZER",
    "NODE_CHOICES_KEY",
    "RESERVED_FOR_MAX_SIZE",
    "ClaimWriteError",
    "DraState",
    "NodeChoice",
    "NodeChoices",
    "claim_with_status",
    "deallocate_claim_in_memory",
    "deallocated",
    "unreserve_claim_in_memory",
    "unreserved",
    "write_claim_in_memory",
]

FINALIZER = "resource.kubernetes.io/delete-protection"
"""resourceapi.Finalizer: added by the scheduler before it allocates a claim."""

RESERVED_FOR_MAX_SIZE = 256
"""resourceapi.ResourceClaimReservedForMaxSize: consumers a claim may be reserved for."""

DRA_KINDS: dict[str, Any] = {
    "DeviceClass": DeviceClass,
    "ResourceClaim": ResourceClaim,
    "ResourceClaimTemplate": ResourceClaimTemplate,
    "ResourceSlice": ResourceSlice,
}
"""The resource.k8s.io/v1 kinds by API kind (each has `from_object`)."""


NODE_CHOICES_KEY = "DynamicResources/nodeChoices"
"""CycleState key: node name -> `NodeChoice`, what DynamicResources' Filter found on each
feasible node (explain shows it)."""


@dataclass(frozen=True)
class NodeChoice:
    """The allocation of a pod's unallocated claims on one node: per claim (`claims`: keys)
    its result; the NVLink choices the allocator made (`preferences`), and the node's GPU
    topology they refer to."""

    claims: tuple[str, ...]
    results: tuple[AllocationResult, ...]
    preferences: tuple[Preference, ...]
    topology: Topology | None


class NodeChoices(Mapping[str, NodeChoice]):
    """Node name -> `NodeChoice` for the nodes Filter found feasible. Where Filter reused a
    verdict the allocation is computed when first read (`compute(node, topology)`, by the
    same allocator on the same view), so only the nodes that need it pay for it: the chosen
    node at Reserve, and every feasible node when explain shows them."""

    def __init__(self, compute: Callable[[Any, Topology | None], NodeChoice]) -> None:
        self._compute = compute
        self._done: dict[str, NodeChoice] = {}
        self._todo: dict[str, tuple[Any, Topology | None]] = {}

    def add(self, name: str, choice: NodeChoice) -> None:
        self._todo.pop(name, None)
        self._done[name] = choice

    def defer(self, name: str, node: Any, topology: Topology | None) -> None:
        if name not in self._done:
            self._todo[name] = (node, topology)

    def __getitem__(self, name: str) -> NodeChoice:
        found = self._done.get(name)
        if found is not None:
            return found
        node, topology = self._todo[name]
        choice = self._compute(node, topology)
        del self._todo[name]
        self._done[name] = choice
        return choice

    def __contains__(self, name: object) -> bool:
        return name in self._done or name in self._todo

    def __iter__(self) -> Iterator[str]:
        return iter([*self._done, *self._todo])

    def __len__(self) -> int:
        return len(self._done) + len(self._todo)


def _version(rv: str) -> int:
    return int(rv) if rv.isdigit() else 0


class DraState:
    """DeviceClasses, ResourceClaims (with assumptions and in-flight allocations),
    ResourceClaimTemplates and ResourceSlices."""

    def __init__(self) -> None:
        self.classes: dict[str, DeviceClass] = {}
        self.claims: dict[str, ResourceClaim] = {}  # as the API reported them, by key
        self.templates: dict[str, ResourceClaimTemplate] = {}
        self.slices: dict[str, ResourceSlice] = {}  # by name
        self._assumed: dict[str, ResourceClaim] = {}  # by key
        self._pending: dict[str, ResourceClaim] = {}  # by claim uid: claim + its allocation
        self.generation = 0  # bumped on every change of classes, claims or slices
        self._devices: tuple[int, frozenset[DeviceID]] | None = None
        # Devices held, counted per holder (a claim by key, an in-flight allocation by uid).
        self._held: dict[DeviceID, int] = {}
        self._holders: dict[tuple[str, str], tuple[DeviceID, ...]] = {}
        self._index: tuple[int, dict[str, list[ResourceSlice]], list[ResourceSlice]] | None = None
        self._slice_generation = 0
        self.views = NodeViews()  # per node: pools and candidate devices, until slices change

    @property
    def empty(self) -> bool:
        return not (self.classes or self.claims or self.slices or self.templates)

    # -- reads ----------------------------------------------------------------------------

    def claim(self, namespace: str, name: str) -> ResourceClaim | None:
        """The claim as the scheduler knows it: our assumption, else the API's."""
        key = f"{namespace}/{name}"
        found = self._assumed.get(key)
        return found if found is not None else self.claims.get(key)

    def all_claims(self) -> Iterable[ResourceClaim]:
        for key, claim in self.claims.items():
            yield self._assumed.get(key, claim)
        for key, claim in self._assumed.items():
            if key not in self.claims:
                yield claim

    def has_pending(self, uid: str) -> bool:
        return uid in self._pending

    def pending(self, uid: str) -> ResourceClaim | None:
        return self._pending.get(uid)

    def is_assumed(self, key: str) -> bool:
        return key in self._assumed

    def allocated_devices(self) -> frozenset[DeviceID]:
        if self._devices is not None and self._devices[0] == self.generation:
            return self._devices[1]
        devices = frozenset(self._held)
        self._devices = (self.generation, devices)
        return devices

    def _hold(self, holder: tuple[str, str], claim: ResourceClaim | None) -> None:
        """Count what `claim` (None: nothing) holds for `holder`, instead of what it held."""
        held = self._held
        for device in self._holders.pop(holder, ()):
            left = held[device] - 1
            if left:
                held[device] = left
            else:
                del held[device]
        if claim is None or claim.allocation is None:
            return
        devices = tuple(d.id for d in claim.allocation.devices if not d.admin_access)
        if devices:
            self._holders[holder] = devices
            for device in devices:
                held[device] = held.get(device, 0) + 1

    def _claim_changed(self, key: str) -> None:
        found = self._assumed.get(key)
        self._hold(("claim", key), found if found is not None else self.claims.get(key))
        self._changed()

    def slices_for(self, node: str) -> Sequence[ResourceSlice]:
        """The slices that may reach `node`, whole pools (see the module docstring)."""
        by_node, others = self._slice_index()
        local = by_node.get(node, ())
        if not others:
            return local
        return [*local, *others]

    def _slice_index(self) -> tuple[dict[str, list[ResourceSlice]], list[ResourceSlice]]:
        if self._index is not None and self._index[0] == self._slice_generation:
            return self._index[1], self._index[2]
        by_pool: dict[tuple[str, str], list[ResourceSlice]] = {}
        for s in sorted(self.slices.values(), key=lambda s: s.name):
            by_pool.setdefault((s.driver, s.pool), []).append(s)
        by_node: dict[str, list[ResourceSlice]] = {}
        others: list[ResourceSlice] = []
        for members in by_pool.values():
            names = [s.node_name or "" for s in members]
            if all(names):  # each of its nodes sees the whole pool
                for name in sorted(set(names)):
                    by_node.setdefault(name, []).extend(members)
            else:
                others.extend(members)
        self._index = (self._slice_generation, by_node, others)
        return by_node, others

    # -- the watch (or a snapshot file) ---------------------------------------------------

    def _changed(self, slices: bool = False) -> None:
        self.generation += 1
        if slices:
            self._slice_generation += 1
            self.views.clear()

    def set_class(self, value: DeviceClass) -> None:
        self.classes[value.name] = value
        self._changed()

    def set_template(self, value: ResourceClaimTemplate) -> None:
        self.templates[value.key] = value
        self._changed()

    def set_slice(self, value: ResourceSlice) -> None:
        self.slices[value.name] = value
        self._changed(slices=True)

    def set_claim(self, value: ResourceClaim) -> None:
        """A claim from the API; it replaces our assumption when not older."""
        mine = self._assumed.get(value.key)
        if mine is not None and (
            _version(value.resource_version) >= _version(mine.resource_version)
            or mine.uid != value.uid
        ):
            del self._assumed[value.key]
        self.claims[value.key] = value
        self._claim_changed(value.key)

    def add(self, value: Any) -> None:
        if isinstance(value, ResourceClaim):
            self.set_claim(value)
        elif isinstance(value, ResourceSlice):
            self.set_slice(value)
        elif isinstance(value, DeviceClass):
            self.set_class(value)
        elif isinstance(value, ResourceClaimTemplate):
            self.set_template(value)
        else:
            raise TypeError(f"not a DRA object: {type(value).__name__}")

    def remove(self, kind: type, key: str) -> None:
        """Forget an object deleted from the API (by type and key: name, or ns/name)."""
        if kind is ResourceClaim:
            self.claims.pop(key, None)
            self._assumed.pop(key, None)
            self._claim_changed(key)
        elif kind is ResourceSlice:
            self.slices.pop(key, None)
            self._changed(slices=True)
        elif kind is DeviceClass:
            self.classes.pop(key, None)
            self._changed()
        elif kind is ResourceClaimTemplate:
            self.templates.pop(key, None)
            self._changed()
        else:
            raise TypeError(f"not a DRA kind: {kind.__name__}")

    # -- the scheduler's own changes --------------------------------------------------------

    def signal_pending(self, claim: ResourceClaim) -> None:
        """Reserve: `claim` (with the chosen allocation) is being allocated."""
        if claim.uid in self._pending:
            raise ValueError(f"claim {claim.key} already has an allocation in flight")
        self._pending[claim.uid] = claim
        self._hold(("pending", claim.uid), claim)
        self._changed()

    def remove_pending(self, uid: str) -> bool:
        """The in-flight allocation is done or dropped; whether there was one."""
        if self._pending.pop(uid, None) is None:
            return False
        self._hold(("pending", uid), None)
        self._changed()
        return True

    def assume_claim(self, claim: ResourceClaim) -> None:
        """The claim as our API call left it (kube's AssumeClaimAfterAPICall)."""
        stored = self.claims.get(claim.key)
        if stored is not None and _version(claim.resource_version) < _version(
            stored.resource_version
        ):
            return  # the watch already delivered something newer
        self._assumed[claim.key] = claim
        self._claim_changed(claim.key)

    def restore_claim(self, key: str) -> None:
        if self._assumed.pop(key, None) is not None:
            self._claim_changed(key)


# ---------------------------------------------------------------------------- writes


class ClaimWriteError(Exception):
    """A ResourceClaim status write that failed (kube's message: `claim ns/name got
    allocated elsewhere in the meantime`, ...); the binding fails and the pod is retried."""


def claim_with_status(
    current: Mapping[str, Any],
    allocation: AllocationResult | None,
    pod_name: str,
    pod_uid: str,
) -> dict[str, Any]:
    """The claim object PreBind writes (kube's bindClaim on the latest version): the
    finalizer and `status.allocation` when allocating, the pod appended to
    `status.reservedFor`. ClaimWriteError when the claim is being deleted or was allocated
    by someone else meanwhile."""
    obj = copy.deepcopy(dict(current))
    meta = obj.setdefault("metadata", {})
    shown = f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
    if meta.get("deletionTimestamp") is not None:
        raise ClaimWriteError(f"claim {shown} got deleted in the meantime")
    status = dict(obj.get("status") or {})
    if allocation is not None:
        if status.get("allocation") is not None:
            raise ClaimWriteError(f"claim {shown} got allocated elsewhere in the meantime")
        finalizers = list(meta.get("finalizers") or [])
        if FINALIZER not in finalizers:
            meta["finalizers"] = [*finalizers, FINALIZER]
        status["allocation"] = allocation.to_api()
    reserved = list(status.get("reservedFor") or [])
    reserved.append({"resource": "pods", "name": pod_name, "uid": pod_uid})
    status["reservedFor"] = reserved
    obj["status"] = status
    return obj


def write_claim_in_memory(
    dra: DraState,
    claim: ResourceClaim,
    allocation: AllocationResult | None,
    pod_name: str,
    pod_uid: str,
) -> ResourceClaim:
    """The in-memory API's answer to PreBind's claim write (the simulator's and the tests'
    binders): applied to the latest claim the state holds, stored as the API's new version
    (as the watch would deliver it) and returned."""
    latest = dra.claims.get(claim.key)
    if latest is None:
        raise ClaimWriteError(f'resourceclaims.resource.k8s.io "{claim.name}" not found')
    obj = claim_with_status(latest.raw, allocation, pod_name, pod_uid)
    obj["metadata"]["resourceVersion"] = str(_version(latest.resource_version) + 1)
    written = ResourceClaim.from_object(obj)
    dra.set_claim(written)
    return written


def deallocated(current: Mapping[str, Any]) -> dict[str, Any]:
    """The claim PostFilter writes to deallocate it (kube: allocation and reservedFor
    cleared on the version PreFilter saw)."""
    obj = copy.deepcopy(dict(current))
    status = dict(obj.get("status") or {})
    status.pop("allocation", None)
    status.pop("reservedFor", None)
    obj["status"] = status
    return obj


def unreserved(current: Mapping[str, Any], pod_uid: str) -> dict[str, Any]:
    """The claim without the pod's entries in `status.reservedFor` (Unreserve)."""
    obj = copy.deepcopy(dict(current))
    status = dict(obj.get("status") or {})
    reserved = [
        r
        for r in status.get("reservedFor") or []
        if not (isinstance(r, Mapping) and str(r.get("uid") or "") == pod_uid)
    ]
    if reserved:
        status["reservedFor"] = reserved
    else:
        status.pop("reservedFor", None)
    obj["status"] = status
    return obj


def deallocate_claim_in_memory(dra: DraState, claim: ResourceClaim) -> ResourceClaim:
    """The in-memory API's answer to PostFilter's deallocation (an UpdateStatus of the
    claim PreFilter saw): allocation and reservedFor cleared, stored as the API's new
    version; the API's conflict when the claim changed since."""
    latest = dra.claims.get(claim.key)
    if latest is None:
        raise ClaimWriteError(f'resourceclaims.resource.k8s.io "{claim.name}" not found')
    if latest.resource_version != claim.resource_version:
        raise ClaimWriteError(
            f'Operation cannot be fulfilled on resourceclaims.resource.k8s.io "{claim.name}": '
            "the object has been modified; please apply your changes to the latest version "
            "and try again"
        )
    obj = deallocated(latest.raw)
    obj.setdefault("metadata", {})["resourceVersion"] = str(_version(latest.resource_version) + 1)
    written = ResourceClaim.from_object(obj)
    dra.set_claim(written)
    return written


def unreserve_claim_in_memory(dra: DraState, claim: ResourceClaim, pod_uid: str) -> ResourceClaim:
    """The in-memory API's answer to Unreserve's patch: the pod's entries removed from
    `status.reservedFor` of the latest claim, stored as the API's new version."""
    latest = dra.claims.get(claim.key)
    if latest is None:
        raise ClaimWriteError(f'resourceclaims.resource.k8s.io "{claim.name}" not found')
    obj = unreserved(latest.raw, pod_uid)
    obj.setdefault("metadata", {})["resourceVersion"] = str(_version(latest.resource_version) + 1)
    written = ResourceClaim.from_object(obj)
    dra.set_claim(written)
    return written
