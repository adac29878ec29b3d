"""The structured-parameters allocator: kube's semantics for one node, pure.

`Allocator.allocate(node, claims)` finds devices for all of a pod's unallocated claims from
the ResourceSlices that reach the node, the way kube-scheduler's DynamicResources plugin does
(`dynamic-resource-allocation/structured`, the stable allocator with the prioritized list,
admin access, partitionable devices and device taints): pools are gathered per node (a
slice by `nodeName`, `nodeSelector`, `allNodes` or per device; the newest generation of a
pool; a pool with missing slices is incomplete and not allocated from; duplicate device
names make it invalid), then a depth-first search takes claim after claim, request after
request, device after device, in pool order (driver, pool name), slice order and device
order, and the first complete solution wins. Class and request selectors (CEL), ExactCount
and All, firstAvailable, matchAttribute constraints, devices already allocated (passed in)
and those chosen earlier in the same call, taints against tolerations, shared counters and
admin access are kube's.

The one departure is the NVLink-aware order: given the node's GPU topology and a
`GpuSelector`, a request whose free candidate devices all are GPUs of the topology tries the
best-connected set (`GpuSelector.best_set`: highest ring bandwidth) first. The search stays
exhaustive, so feasibility is kube's; only which solution comes first changes.

Results: a list with one `AllocationResult` per claim, None when no allocation exists on the
node (kube's plugin: "cannot allocate all claims"), or `AllocationError` for what kube's
plugin reports as an error (a missing class, a selector that does not compile or fails on a
device, ...); `AllocationError.on_node` marks the error kube reports only for this node
(invalid pools).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Protocol

from scheduler.core.dra.cel import CelCache, CelError
from scheduler.core.dra.nvlink import GpuMap, Preference, prefer_best_set, reorder
from scheduler.core.dra.types import (
    ALLOCATION_MODE_ALL,
    ALLOCATION_MODE_EXACT_COUNT,
    AllocationResult,
    Device,
    DeviceClass,
    DeviceID,
    DeviceResult,
    DeviceToleration,
    ResourceClaim,
    ResourceSlice,
    Selector,
)
from scheduler.core.selectors import NodeSelector, NodeSelectorRequirement, NodeSelectorTerm
from scheduler.core.topology.schema import Topology
from scheduler.core.topology.select import GpuSelector

__all__ = [
    "ALLOCATION_RESULTS_MAX_SIZE",
    "CANNOT_ALLOCATE",
    "NOT_AVAILABLE",
    "AllocationError",
    "Allocator",
    "Features",
    "NodeLike",
    "NodeView",
    "NodeViews",
    "Pool",
    "gather_pools",
    "node_selector_matches",
]

ALLOCATION_RESULTS_MAX_SIZE = 32
"""resourceapi.AllocationResultsMaxSize: devices per claim."""
CANNOT_ALLOCATE = "cannot allocate all claims"
"""kube's Filter reason when no allocation exists on the node (Unschedulable)."""
NOT_AVAILABLE = "resourceclaim not available on the node"
"""kube's Filter reason for an allocated claim whose node selector excludes the node."""
_NAME_FIELD = "metadata.name"


class AllocationError(Exception):
    """What kube's allocator returns as an error (the plugin's Filter reports an error
    status); `on_node`: kube's ErrFailedAllocationOnNode (unschedulable on this node)."""

    def __init__(self, message: str, *, on_node: bool = False) -> None:
        super().__init__(message)
        self.on_node = on_node


@dataclass(frozen=True, slots=True)
class Features:
    """The DRA features the allocator honours (kube's feature gates of the same names)."""

    admin_access: bool = True  # DRAAdminAccess
    prioritized_list: bool = True  # DRAPrioritizedList
    partitionable_devices: bool = True  # DRAPartitionableDevices
    device_taints: bool = True  # DRADeviceTaints


class NodeLike(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def labels(self) -> Mapping[str, str]: ...


def node_selector_matches(selector: NodeSelector, name: str, labels: Mapping[str, str]) -> bool:
    """component-helpers' nodeaffinity: terms ORed; in a term, label expressions and
    `metadata.name` fields ANDed; an empty term matches nothing."""
    fields = {_NAME_FIELD: name}
    for term in selector.terms:
        if not term.match_expressions and not term.match_fields:
            continue
        if all(r.matches(labels) for r in term.match_expressions) and all(
            r.key == _NAME_FIELD and r.operator in ("In", "NotIn") and r.matches(fields)
            for r in term.match_fields
        ):
            return True
    return False


def _node_matches(
    node: NodeLike, node_name: str | None, all_nodes: bool, selector: NodeSelector | None
) -> bool:
    if node_name:
        return node.name == node_name
    if all_nodes:
        return True
    if selector is not None:
        return node_selector_matches(selector, node.name, node.labels)
    return False


# ---------------------------------------------------------------------------- pools


@dataclass
class Pool:
    driver: str
    name: str
    incomplete: bool = False
    invalid: bool = False
    invalid_reason: str = ""
    slices: list[ResourceSlice] = field(default_factory=list)  # with devices for the node
    other_slices: list[ResourceSlice] = field(default_factory=list)  # the rest of the pool
    counter_sets: dict[str, Mapping[str, Fraction]] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.driver}/{self.name}"


def gather_pools(
    slices: Sequence[ResourceSlice], node: NodeLike, features: Features = Features()
) -> list[Pool]:
    """kube's GatherPools, ordered by (driver, pool name) for a deterministic search."""
    found: dict[tuple[str, str], list[ResourceSlice]] = {}

    def add(s: ResourceSlice) -> None:
        key = (s.driver, s.pool)
        current = found.get(key)
        if current is None or s.generation > current[0].generation:
            found[key] = [s]
        elif s.generation == current[0].generation:
            current.append(s)

    for s in slices:
        if not features.partitionable_devices and (
            s.per_device_node_selection or s.shared_counters
        ):
            continue
        if s.shared_counters:
            add(s)
        elif s.node_name or s.all_nodes or s.node_selector is not None:
            if _node_matches(node, s.node_name, s.all_nodes, s.node_selector):
                add(s)
        elif s.per_device_node_selection and any(
            _node_matches(node, d.node_name, d.all_nodes, d.node_selector) for d in s.devices
        ):
            add(s)
    pools = []
    for (driver, name), members in sorted(found.items()):
        generation, count = members[0].generation, members[0].resource_slice_count
        everything = members
        if len(members) != count:
            # Slices of the pool that do not reach the node count towards completeness.
            same = [s for s in slices if (s.driver, s.pool) == (driver, name)]
            if any(s.generation > generation for s in same):
                continue  # a newer generation is being published: the pool is obsolete
            everything = [s for s in same if s.generation == generation]
            if len(everything) != count:
                pools.append(Pool(driver, name, incomplete=True))
                continue
        pools.append(_build_pool(driver, name, members, everything, features))
    return pools


def _build_pool(
    driver: str,
    name: str,
    members: list[ResourceSlice],
    everything: list[ResourceSlice],
    features: Features,
) -> Pool:
    pool = Pool(driver, name)
    if features.partitionable_devices:
        device_slices = [s for s in members if not s.shared_counters]
        counter_slices = [s for s in members if s.shared_counters]
    else:
        device_slices, counter_slices = members, []
    seen: set[str] = set()
    for s in device_slices:
        for d in s.devices:
            if d.name in seen:
                return Pool(
                    driver, name, invalid=True, invalid_reason=f"duplicate device name {d.name}"
                )
            seen.add(d.name)
    pool.slices = device_slices
    if not features.partitionable_devices:
        return pool
    for s in counter_slices:
        for c in s.shared_counters:
            if c.name in pool.counter_sets:
                return Pool(
                    driver,
                    name,
                    invalid=True,
                    invalid_reason=f"duplicate counter set name {c.name}",
                )
            pool.counter_sets[c.name] = c.counters
    included = {id(s) for s in members}
    pool.other_slices = [s for s in everything if id(s) not in included and not s.shared_counters]
    for s in [*pool.slices, *pool.other_slices]:
        for d in s.devices:
            for consumption in d.consumes_counters:
                counters = pool.counter_sets.get(consumption.counter_set)
                if counters is None:
                    reason = f"counter set {consumption.counter_set} not found"
                    return Pool(driver, name, invalid=True, invalid_reason=reason)
                for counter in consumption.counters:
                    if counter not in counters:
                        reason = (
                            f"counter {counter} not found in counter set {consumption.counter_set}"
                        )
                        return Pool(driver, name, invalid=True, invalid_reason=reason)
    return pool


# ---------------------------------------------------------------------------- requests


@dataclass
class _Request:
    """A request (or one subrequest) of a claim as the search sees it."""

    name: str
    parent: str | None
    class_: DeviceClass
    mode: str
    count: int
    admin: bool
    selectors: tuple[Selector, ...]
    tolerations: tuple[DeviceToleration, ...]
    num_devices: int = 0
    all_devices: list[_Candidate] = field(default_factory=list)
    selected_sub: int = 0

    @property
    def full_name(self) -> str:
        return self.name if self.parent is None else f"{self.parent}/{self.name}"


@dataclass(frozen=True, eq=False)
class _Candidate:
    id: DeviceID
    device: Device
    slice: ResourceSlice
    pool: Pool


@dataclass(eq=False)
class NodeView:
    """What the allocator looks at on one node: the pools gathered for it and the candidate
    devices in search order (complete, valid pools only), with what verdict reuse needs:
    the candidates' ids, whether a pool is incomplete or invalid, and `plain` when only the
    allocator itself can decide on the node (shared counters, per-device node selection,
    node selectors of several terms). `labels`: the node's labels when the pools depend on
    them (a slice not published by `nodeName`), else None. `derived` holds what
    `NodeVerdicts` computed from the view, per claim shape."""

    pools: list[Pool]
    candidates: list[_Candidate]
    ids: frozenset[DeviceID]
    labels: Mapping[str, str] | None
    incomplete: bool
    invalid: bool
    plain: bool
    derived: dict[int, Any] = field(default_factory=dict)


def node_view(
    slices: Sequence[ResourceSlice], node: NodeLike, features: Features = Features()
) -> NodeView:
    pools = gather_pools(slices, node, features)
    candidates = [
        _Candidate(DeviceID(p.driver, p.name, d.name), d, s, p)
        for p in pools
        if not p.incomplete and not p.invalid
        for s in p.slices
        for d in s.devices
    ]
    plain = any(p.counter_sets for p in pools) or any(
        c.slice.per_device_node_selection
        or c.device.consumes_counters
        or (c.slice.node_selector is not None and len(c.slice.node_selector.terms) > 1)
        for c in candidates
    )
    return NodeView(
        pools=pools,
        candidates=candidates,
        ids=frozenset(c.id for c in candidates),
        labels=None if all(s.node_name for s in slices) else dict(node.labels),
        incomplete=any(p.incomplete for p in pools),
        invalid=any(p.invalid for p in pools),
        plain=plain,
    )


class NodeViews:
    """Node views by node name (and features), kept until the slices change (the owner
    clears them); a view that depends on node labels is rebuilt when they change."""

    def __init__(self) -> None:
        self._views: dict[tuple[str, Features], NodeView] = {}

    def get(self, node: NodeLike, features: Features) -> NodeView | None:
        found = self._views.get((node.name, features))
        if found is None or (found.labels is not None and found.labels != node.labels):
            return None
        return found

    def put(self, node: NodeLike, features: Features, view: NodeView) -> None:
        self._views[(node.name, features)] = view

    def clear(self) -> None:
        self._views.clear()


@dataclass
class _Chosen:
    candidate: _Candidate
    request: _Request


class _MaxSize(Exception):
    """errAllocationResultMaxSizeExceeded: backtrack further."""


def _kobj(claim: ResourceClaim) -> str:
    return f"{claim.namespace}/{claim.name}" if claim.namespace else claim.name


class _Constraint:
    """matchAttribute: every device of the named requests (all requests when none are
    named) has the attribute, with one value."""

    def __init__(self, requests: tuple[str, ...], attribute: str) -> None:
        self.requests = set(requests)
        self.attribute = attribute
        self.value: Any = None
        self.count = 0

    def applies(self, request: _Request) -> bool:
        if not self.requests:
            return True
        if request.parent is None:
            return request.name in self.requests
        return request.parent in self.requests or request.full_name in self.requests

    def add(self, request: _Request, candidate: _Candidate) -> bool:
        if not self.applies(request):
            return True
        found = candidate.device.attribute(candidate.id.driver, self.attribute)
        if found is None:
            return False
        if self.count == 0:
            self.value = found
            self.count = 1
            return True
        if found.kind != self.value.kind or found.value != self.value.value:
            return False
        self.count += 1
        return True

    def remove(self, request: _Request) -> None:
        if self.applies(request):
            self.count -= 1


# ---------------------------------------------------------------------------- allocator


class Allocator:
    """Allocation against one view of the cluster: the classes, the slices and the devices
    already allocated (to claims other than those being allocated). Reusable across nodes;
    `allocate` is for one node."""

    def __init__(
        self,
        classes: Mapping[str, DeviceClass],
        slices: Sequence[ResourceSlice],
        allocated: Set[DeviceID] = frozenset(),
        *,
        features: Features = Features(),
        cel: CelCache | None = None,
        gpu_selector: GpuSelector | None = None,
        slices_for: Callable[[str], Sequence[ResourceSlice]] | None = None,
        views: NodeViews | None = None,
    ) -> None:
        """`slices_for(node name)`: the slices that may reach a node, whole pools (an index
        the cache keeps); without it every call looks at `slices`. `views`: node views kept
        across calls (valid while the slices stay as they are)."""
        self.classes = classes
        self.slices = slices
        self.slices_for = slices_for
        self.views = views
        self.allocated = allocated
        self.features = features
        self.cel = cel if cel is not None else CelCache()
        self.gpu_selector = gpu_selector
        self.steps = 0  # allocateOne invocations of the last call (kube's Stats)
        self.preferences: list[Preference] = []  # NVLink choices made by the last call

    def allocate(
        self,
        node: NodeLike,
        claims: Sequence[ResourceClaim],
        *,
        topology: Topology | None = None,
    ) -> list[AllocationResult] | None:
        """One AllocationResult per claim (in order), None when there is none on this node;
        AllocationError as kube's allocator errors."""
        run = _Run(self, node, claims, topology, self.view(node))
        try:
            return run.allocate()
        finally:
            self.steps = run.steps
            self.preferences = run.preferences

    def view(self, node: NodeLike) -> NodeView:
        """The node's pools and candidate devices (kept in `views` when given)."""
        if self.views is not None:
            found = self.views.get(node, self.features)
            if found is not None:
                return found
        slices = self.slices_for(node.name) if self.slices_for is not None else self.slices
        view = node_view(slices, node, self.features)
        if self.views is not None:
            self.views.put(node, self.features, view)
        return view


class _Run:
    def __init__(
        self,
        owner: Allocator,
        node: NodeLike,
        claims: Sequence[ResourceClaim],
        topology: Topology | None,
        view: NodeView,
    ) -> None:
        self.a = owner
        self.node = node
        self.claims = claims
        self.features = owner.features
        self.requests: dict[tuple[int, int, int], _Request] = {}
        self.constraints: list[list[_Constraint]] = []
        self.results: list[list[_Chosen]] = [[] for _ in claims]
        self.allocating: dict[DeviceID, set[int]] = {}
        self.matches: dict[tuple[DeviceID, tuple[int, int, int]], bool] = {}
        self.available: dict[str, dict[str, dict[str, Fraction]]] = {}
        self.consumed: dict[str, dict[str, dict[str, Fraction]]] = {}
        self.order: dict[tuple[int, int, int], list[_Candidate]] = {}
        self.steps = 0
        self.preferences: list[Preference] = []
        self.gpus = (
            GpuMap(topology) if topology is not None and owner.gpu_selector is not None else None
        )
        self.pools: list[Pool] = view.pools
        self.candidates: list[_Candidate] = view.candidates

    # -- setup ---------------------------------------------------------------------------

    def allocate(self) -> list[AllocationResult] | None:
        for ci, claim in enumerate(self.claims):
            minimum = 0
            for ri, request in enumerate(claim.requests):
                if request.first_available:
                    if not self.features.prioritized_list:
                        raise AllocationError(
                            f"claim {_kobj(claim)}, request {request.name}: has subrequests, "
                            "but the DRAPrioritizedList feature is disabled"
                        )
                    smallest = None
                    for si, sub in enumerate(request.first_available):
                        data = self._validate(
                            claim, sub.name, request.name, sub.device_class_name, sub.selectors,
                            sub.allocation_mode, sub.count, None, sub.tolerations, (ci, ri, si),
                        )  # fmt: skip
                        self.requests[(ci, ri, si)] = data
                        smallest = (
                            data.num_devices
                            if smallest is None
                            else min(smallest, data.num_devices)
                        )
                    minimum += smallest or 0
                else:
                    e = request.exactly
                    assert e is not None  # parsing guarantees one of the two
                    data = self._validate(
                        claim, request.name, None, e.device_class_name, e.selectors,
                        e.allocation_mode, e.count, e.admin_access, e.tolerations, (ci, ri, 0),
                    )  # fmt: skip
                    self.requests[(ci, ri, 0)] = data
                    minimum += data.num_devices
            if minimum > ALLOCATION_RESULTS_MAX_SIZE:
                raise AllocationError(
                    f"claim {_kobj(claim)}: number of requested devices {minimum} exceeds "
                    f"the claim limit of {ALLOCATION_RESULTS_MAX_SIZE}"
                )
            constraints = []
            for i, c in enumerate(claim.constraints):
                if c.match_attribute is None:
                    raise AllocationError(
                        f"claim {_kobj(claim)}, constraint #{i}: empty constraint "
                        "(unsupported constraint type?)"
                    )
                constraints.append(_Constraint(c.requests, c.match_attribute))
            self.constraints.append(constraints)
        try:
            done = self._allocate_one(0, 0, 0, 0, False)
        except _MaxSize:
            done = False
        if not done:
            if any(p.invalid for p in self.pools):
                raise AllocationError("invalid resource pools were encountered", on_node=True)
            return None
        return [self._result(ci, claim) for ci, claim in enumerate(self.claims)]

    def _validate(
        self,
        claim: ResourceClaim,
        name: str,
        parent: str | None,
        class_name: str,
        selectors: tuple[Selector, ...],
        mode: str,
        count: int,
        admin: bool | None,
        tolerations: tuple[DeviceToleration, ...],
        key: tuple[int, int, int],
    ) -> _Request:
        shown = name  # kube names the (sub)request by its own name here
        for i, s in enumerate(selectors):
            if s.expression is None:
                raise AllocationError(
                    f"claim {_kobj(claim)}, request {shown}, selector #{i}: CEL expression "
                    "empty (unsupported selector type?)"
                )
        if not self.features.admin_access and admin is not None:
            raise AllocationError(
                f"claim {_kobj(claim)}, request {shown}: admin access is requested, but the "
                "feature is disabled"
            )
        if not class_name:
            raise AllocationError(
                f"claim {_kobj(claim)}, request {shown}: missing device class name "
                "(unsupported request type?)"
            )
        device_class = self.a.classes.get(class_name)
        if device_class is None:
            raise AllocationError(
                f"claim {_kobj(claim)}, request {shown}: could not retrieve device class "
                f'{class_name}: deviceclass.resource.k8s.io "{class_name}" not found'
            )
        data = _Request(
            name, parent, device_class, mode, count, bool(admin), selectors, tolerations
        )
        if mode == ALLOCATION_MODE_EXACT_COUNT:
            data.num_devices = count
        elif mode == ALLOCATION_MODE_ALL:
            for pool in self.pools:
                if pool.incomplete:
                    raise AllocationError(
                        f"claim {_kobj(claim)}, request {shown}: asks for all devices, but "
                        f"resource pool {pool.id} is currently being updated"
                    )
                if pool.invalid:
                    raise AllocationError(
                        f"claim {_kobj(claim)}, request {shown}: asks for all devices, but "
                        f"resource pool {pool.id} is currently invalid"
                    )
            data.all_devices = [c for c in self.candidates if self._selectable(key, data, c)]
            data.num_devices = len(data.all_devices)
        else:
            raise AllocationError(
                f"claim {_kobj(claim)}, request {shown}: unsupported count mode {mode}"
            )
        return data

    # -- the search ----------------------------------------------------------------------

    def _in_use(self, device_id: DeviceID) -> bool:
        return device_id in self.a.allocated or bool(self.allocating.get(device_id))

    def _allocate_one(self, ci: int, ri: int, si: int, di: int, sub: bool) -> bool:
        self.steps += 1
        if ci >= len(self.claims):
            return True
        claim = self.claims[ci]
        if ri >= len(claim.requests):
            try:
                return self._allocate_one(ci + 1, 0, 0, 0, False)
            except _MaxSize:
                return False
        key = (ci, ri, si)
        data = self.requests[key]
        if not sub and data.parent is not None:
            all_exceeded = True
            index = 0
            while (ci, ri, index) in self.requests:
                try:
                    ok = self._allocate_one(ci, ri, index, di, True)
                except _MaxSize:
                    index += 1
                    continue
                all_exceeded = False
                if ok:
                    self.requests[(ci, ri, 0)].selected_sub = index
                    return True
                index += 1
            if all_exceeded:
                raise _MaxSize
            return False
        do_all = data.mode == ALLOCATION_MODE_ALL
        if do_all and not data.all_devices:
            return False
        if di >= data.num_devices:
            return self._allocate_one(ci, ri + 1, 0, 0, False)
        if len(self.results[ci]) + data.num_devices - di > ALLOCATION_RESULTS_MAX_SIZE:
            raise _MaxSize
        if do_all:
            candidate = data.all_devices[di]
            undo = self._allocate_device(ci, data, candidate, must=True)
            if undo is None:
                return False
            try:
                done = self._allocate_one(ci, ri, si, di + 1, sub)
            except BaseException:
                undo()
                raise
            if not done:
                undo()
            return done
        if di == 0:
            self.order[key] = self._preferred_order(ci, key, data)
        for candidate in self.order.get(key, self.candidates):
            if data.admin:
                if ci in self.allocating.get(candidate.id, ()):
                    continue
            elif self._in_use(candidate.id):
                continue
            if not self._selectable(key, data, candidate):
                continue
            undo = self._allocate_device(ci, data, candidate, must=False)
            if undo is None:
                continue
            try:
                done = self._allocate_one(ci, ri, si, di + 1, sub)
            except BaseException:
                undo()
                raise
            if done:
                return True
            undo()
        return False

    def _preferred_order(
        self, ci: int, key: tuple[int, int, int], data: _Request
    ) -> list[_Candidate]:
        """kube's order, or the best-connected GPU set first (see the module doc)."""
        if self.gpus is None or self.a.gpu_selector is None or data.admin:
            return self.candidates
        free = [
            c
            for c in self.candidates
            if not self._in_use(c.id)
            and self._selectable(key, data, c)
            and not (self.features.device_taints and _tainted(c.device, data.tolerations))
        ]
        preference = prefer_best_set(
            self.a.gpu_selector, self.gpus, [(c.id, c.device) for c in free], data.num_devices
        )
        if preference is None:
            return self.candidates
        self.preferences.append(preference)
        by_id = {c.id: c for c in self.candidates}
        return [by_id[i] for i in reorder((c.id for c in self.candidates), preference.devices)]

    def _selectable(self, key: tuple[int, int, int], data: _Request, c: _Candidate) -> bool:
        cached = self.matches.get((c.id, key))
        if cached is not None:
            return cached
        result = self._check_selectable(key, data, c)
        self.matches[(c.id, key)] = result
        return result

    def _check_selectable(self, key: tuple[int, int, int], data: _Request, c: _Candidate) -> bool:
        if c.device.binding_conditions:
            return False  # DRADeviceBindingConditions is not supported
        claim = self.claims[key[0]]
        for owner, selectors in ((data.class_, data.class_.selectors), (None, data.selectors)):
            for i, s in enumerate(selectors):
                where = f"class {owner.name}" if owner is not None else f"claim {_kobj(claim)}"
                if s.expression is None:
                    raise AllocationError(
                        f"{where}: selector #{i}: CEL expression empty (unsupported selector type?)"
                    )
                compiled = self.a.cel.get(s.expression)
                if compiled.error is not None:
                    raise AllocationError(
                        f"{where}: selector #{i}: CEL compile error: {compiled.error}"
                    )
                try:
                    ok = compiled.matches(c.device, c.id.driver)
                except CelError as exc:
                    raise AllocationError(
                        f"{where}: selector #{i} on device {c.id}: CEL runtime error: {exc}"
                    ) from None
                if not ok:
                    return False
        if c.slice.per_device_node_selection:
            d = c.device
            return _node_matches(self.node, d.node_name, d.all_nodes, d.node_selector)
        return True

    def _allocate_device(self, ci: int, data: _Request, c: _Candidate, *, must: bool) -> Any:
        """kube's allocateDevice: the undo function, or None when the device cannot be
        taken (AllocationError when `must` and a constraint refuses it)."""
        if data.admin:
            if ci in self.allocating.get(c.id, ()):
                return None
        elif self._in_use(c.id):
            return None
        if c.device.consumes_counters and (
            not self.features.partitionable_devices or not self._take_counters(c)
        ):
            return None
        if self.features.device_taints and _tainted(c.device, data.tolerations):
            if c.device.consumes_counters:
                self._release_counters(c)
            return None
        constraints = self.constraints[ci]
        for i, constraint in enumerate(constraints):
            if not constraint.add(data, c):
                for earlier in constraints[:i]:
                    earlier.remove(data)
                if c.device.consumes_counters:
                    self._release_counters(c)
                if must:
                    raise AllocationError(
                        f"claim {_kobj(self.claims[ci])}, request {data.name}: cannot add "
                        f"device {c.id} because a claim constraint would not be satisfied"
                    )
                return None
        self.allocating.setdefault(c.id, set()).add(ci)
        self.results[ci].append(_Chosen(c, data))
        size = len(self.results[ci]) - 1

        def undo() -> None:
            for constraint in constraints:
                constraint.remove(data)
            self.allocating[c.id].discard(ci)
            if c.device.consumes_counters:
                self._release_counters(c)
            del self.results[ci][size:]

        return undo

    # -- counters ------------------------------------------------------------------------

    def _available(self, pool: Pool) -> dict[str, dict[str, Fraction]]:
        found = self.available.get(pool.id)
        if found is not None:
            return found
        available = {name: dict(counters) for name, counters in pool.counter_sets.items()}
        for s in [*pool.slices, *pool.other_slices]:
            for d in s.devices:
                if DeviceID(s.driver, s.pool, d.name) not in self.a.allocated:
                    continue
                for consumption in d.consumes_counters:
                    counters = available.get(consumption.counter_set, {})
                    for name, amount in consumption.counters.items():
                        if name in counters:
                            counters[name] -= amount
        self.available[pool.id] = available
        return available

    def _take_counters(self, c: _Candidate) -> bool:
        available = self._available(c.pool)
        consumed = self.consumed.setdefault(c.pool.id, {})
        for consumption in c.device.consumes_counters:
            counters = consumed.setdefault(consumption.counter_set, {})
            for name, amount in consumption.counters.items():
                counters[name] = counters.get(name, Fraction(0)) + amount
        for set_name, counters in available.items():
            used = consumed.get(set_name, {})
            for name, amount in counters.items():
                if amount < used.get(name, 0):
                    self._release_counters(c)
                    return False
        return True

    def _release_counters(self, c: _Candidate) -> None:
        consumed = self.consumed[c.pool.id]
        for consumption in c.device.consumes_counters:
            counters = consumed[consumption.counter_set]
            for name, amount in consumption.counters.items():
                counters[name] -= amount

    # -- results -------------------------------------------------------------------------

    def _result(self, ci: int, claim: ResourceClaim) -> AllocationResult:
        devices = tuple(
            DeviceResult(
                request=chosen.request.full_name,
                driver=chosen.candidate.id.driver,
                pool=chosen.candidate.id.pool,
                device=chosen.candidate.id.device,
                admin_access=True if chosen.request.admin else None,
                tolerations=chosen.request.tolerations,
            )
            for chosen in self.results[ci]
        )
        return AllocationResult(
            devices=devices,
            config=self._config(ci, claim),
            node_selector=self._node_selector(self.results[ci]),
        )

    def _config(self, ci: int, claim: ResourceClaim) -> tuple[Mapping[str, Any], ...]:
        config: list[dict[str, Any]] = []
        by_class: dict[str, tuple[int, int]] = {}
        for ri in range(len(claim.requests)):
            data = self.requests[(ci, ri, 0)]
            if data.parent is not None:
                data = self.requests[(ci, ri, data.selected_sub)]
            name = data.class_.name
            if name in by_class:
                start, end = by_class[name]
                for entry in config[start:end]:
                    entry["requests"].append(data.full_name)
                continue
            start = len(config)
            for item in data.class_.config:
                config.append({"source": "FromClass", "requests": [data.full_name], **_plain(item)})
            by_class[name] = (start, len(config))
        for item in claim.config:
            requests = [str(r) for r in item.get("requests") or ()]
            body = {k: v for k, v in _plain(item).items() if k != "requests"}
            if not requests:
                config.append({"source": "FromClaim", "requests": [], **body})
                continue
            for ri, request in enumerate(claim.requests):
                if request.name in requests:
                    config.append({"source": "FromClaim", "requests": requests, **body})
                    continue
                data = self.requests[(ci, ri, 0)]
                if data.parent is None:
                    continue
                chosen = self.requests[(ci, ri, data.selected_sub)]
                if chosen.full_name in requests:
                    config.append({"source": "FromClaim", "requests": requests, **body})
        for entry in config:
            if len(entry["requests"]) == len(claim.requests) or not entry["requests"]:
                entry.pop("requests")
        return tuple(config)

    def _node_selector(self, chosen: list[_Chosen]) -> NodeSelector | None:
        fields: list[NodeSelectorRequirement] = []
        expressions: list[NodeSelectorRequirement] = []
        for item in chosen:
            s, d = item.candidate.slice, item.candidate.device
            name, selector = (
                (d.node_name, d.node_selector)
                if s.per_device_node_selection
                else (s.node_name, s.node_selector)
            )
            if name:
                term = NodeSelectorTerm(
                    match_fields=(NodeSelectorRequirement(_NAME_FIELD, "In", (name,)),)
                )
                return NodeSelector((term,))
            if selector is not None and selector.terms:
                if len(selector.terms) > 1:
                    raise AllocationError(
                        f"create NodeSelector for claim: unsupported ResourceSlice.NodeSelector "
                        f"with {len(selector.terms)} terms"
                    )
                term = selector.terms[0]
                _add_new(term.match_fields, fields)
                _add_new(term.match_expressions, expressions)
        if fields or expressions:
            return NodeSelector(
                (
                    NodeSelectorTerm(
                        match_expressions=tuple(expressions), match_fields=tuple(fields)
                    ),
                )
            )
        return None


def _add_new(
    source: Sequence[NodeSelectorRequirement], into: list[NodeSelectorRequirement]
) -> None:
    for r in source:
        if not any(
            e.key == r.key and e.operator == r.operator and set(e.values) == set(r.values)
            for e in into
        ):
            into.append(r)


def _tainted(device: Device, tolerations: tuple[DeviceToleration, ...]) -> bool:
    """kube's taintPreventsAllocation: a NoSchedule or NoExecute taint not tolerated."""
    return any(
        taint.effect in ("NoSchedule", "NoExecute")
        and not any(t.tolerates(taint) for t in tolerations)
        for taint in device.taints
    )


def _plain(item: Mapping[str, Any]) -> dict[str, Any]:
    import copy

    return copy.deepcopy(dict(item))
