"""Per-node verdicts of the allocator without running it on every node.

kube's Filter runs the allocator on every node; what Filter needs from most nodes is only
the verdict (an allocation exists, none does, or the node's pools are invalid). The
verdict is a function of few things, so nodes that share them share it:

- the claims' shape (`spec`): every request (class and request selectors, mode, count,
  admin access, tolerations, subrequests) and constraint, the classes' selectors and the
  allocator's features. Claim names only appear in error messages;
- per candidate device (in the node's search order): its **signature** for that shape,
  whether it passes each distinct selector set (evaluated as the allocator does: class
  selectors, then request selectors, stopping at the first false; a device with binding
  conditions passes none), whether its taints stop each distinct toleration set, and, for
  each attribute a constraint matches on, its value; and whether it is allocated already;
- whether one of the node's pools is incomplete, or invalid.

The search is exhaustive, so whether it finds an allocation does not depend on the order in
which it tries devices, as long as nothing raises on the way. Then the verdict depends on
the multiset of (signature, allocated) over the candidates; with `matchAttribute`
constraints the values are compared across devices, so the key keeps the devices' order
and numbers each value by its first appearance. Nodes are not keyed (the allocator runs)
when a device's selector fails with an error (kube reports it from the node the search
meets it on), when the node's pools have shared counters, per-device node selection or a
node selector of several terms (`NodeView.plain`), and, where the NVLink order applies,
for claims whose `All` requests carry constraints (there a constraint that fails is an
error, met or not depending on the order).

`NodeVerdicts` keeps the verdicts by key (`VerdictCache`, kept by the plugin across cycles:
a verdict depends on its key alone) and runs the allocator for the first node of each key
and for every node that cannot be keyed, in the order Filter visits nodes, so the first
error is the one the plain loop meets. The allocation itself is only computed for the
nodes that need it (the chosen node at Reserve, every feasible node for explain), by the
same allocator, on the same view.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from scheduler.core.dra.allocator import (
    CANNOT_ALLOCATE,
    AllocationError,
    Allocator,
    Features,
    NodeLike,
    NodeView,
    _tainted,
)
from scheduler.core.dra.cel import CelError
from scheduler.core.dra.types import (
    ALLOCATION_MODE_ALL,
    AllocationResult,
    DeviceClass,
    DeviceToleration,
    ResourceClaim,
    Selector,
)
from scheduler.core.topology.schema import Topology

__all__ = ["FEASIBLE", "NodeVerdicts", "VerdictCache", "claim_shape"]

FEASIBLE = ""
"""The verdict of a node where an allocation exists; any other verdict is the reason."""

_MISSING = object()
_SPEC_IDS: dict[Hashable, int] = {}
_NEXT_ID = itertools.count(1)
_MAX_SPECS = 4096
_MAX_DERIVED = 8


def _spec_id(key: Hashable) -> int:
    """A small number per claim shape for this process (never reused)."""
    found = _SPEC_IDS.get(key)
    if found is None:
        if len(_SPEC_IDS) >= _MAX_SPECS:
            _SPEC_IDS.clear()
        found = _SPEC_IDS[key] = next(_NEXT_ID)
    return found


class _Spec:
    """The shape of a pod's claims, as the verdict sees it (see the module doc)."""

    def __init__(
        self,
        key: Hashable,
        selector_sets: list[tuple[tuple[str | None, ...], tuple[str | None, ...]]],
        toleration_sets: list[tuple[DeviceToleration, ...]],
        attributes: list[str],
        constrained: bool,
        all_with_constraints: bool,
        features: Features,
    ) -> None:
        self.id = _spec_id(key)
        self.selector_sets = selector_sets
        self.toleration_sets = toleration_sets
        self.attributes = attributes
        self.constrained = constrained
        self.all_with_constraints = all_with_constraints
        self.features = features


def claim_shape(
    claims: Sequence[ResourceClaim], classes: Mapping[str, DeviceClass], features: Features
) -> _Spec | None:
    """The claims' shape, or None when a request names no class or a missing one (the
    allocator then reports its error on the first node)."""
    selector_sets: dict[tuple[tuple[str | None, ...], tuple[str | None, ...]], None] = {}
    toleration_sets: dict[tuple[DeviceToleration, ...], None] = {}
    attributes: dict[str, None] = {}
    class_selectors: dict[str, tuple[str | None, ...]] = {}
    has_all = False
    for claim in claims:
        parts: list[tuple[str, tuple[Selector, ...], str, tuple[DeviceToleration, ...]]] = []
        for request in claim.requests:
            if request.first_available:
                parts.extend(
                    (s.device_class_name, s.selectors, s.allocation_mode, s.tolerations)
                    for s in request.first_available
                )
            elif request.exactly is not None:
                e = request.exactly
                parts.append((e.device_class_name, e.selectors, e.allocation_mode, e.tolerations))
        for class_name, selectors, mode, tolerations in parts:
            device_class = classes.get(class_name) if class_name else None
            if device_class is None:
                return None
            own = class_selectors.setdefault(
                class_name, tuple(s.expression for s in device_class.selectors)
            )
            selector_sets[(own, tuple(s.expression for s in selectors))] = None
            toleration_sets[tolerations] = None
            has_all = has_all or mode == ALLOCATION_MODE_ALL
        for constraint in claim.constraints:
            if constraint.match_attribute is not None:
                attributes[constraint.match_attribute] = None
    constrained = any(c.constraints for c in claims)
    key = (
        features,
        tuple((c.requests, c.constraints) for c in claims),
        tuple(sorted(class_selectors.items())),
    )
    return _Spec(
        key,
        list(selector_sets),
        list(toleration_sets),
        list(attributes),
        constrained,
        has_all and constrained,
        features,
    )


class VerdictCache:
    """Verdicts by key (claim shape and node key), bounded; a verdict depends on its key
    alone, so the cache outlives cycles and slice changes."""

    def __init__(self, max_entries: int = 65536) -> None:
        self._verdicts: dict[Hashable, str] = {}
        self._max = max_entries
        self.hits = 0
        self.runs = 0

    def get(self, key: Hashable) -> str | None:
        return self._verdicts.get(key)

    def put(self, key: Hashable, verdict: str) -> None:
        if len(self._verdicts) >= self._max:
            self._verdicts.clear()
        self._verdicts[key] = verdict


class NodeVerdicts:
    """The verdicts of one allocator for one pod's unallocated claims, node by node."""

    def __init__(
        self,
        allocator: Allocator,
        claims: Sequence[ResourceClaim],
        cache: VerdictCache | None = None,
        *,
        reuse: bool = True,
    ) -> None:
        """`reuse` False: the allocator runs on every node (the plain form)."""
        self.allocator = allocator
        self.claims = claims
        self.cache = cache if cache is not None else VerdictCache()
        self.spec = claim_shape(claims, allocator.classes, allocator.features) if reuse else None

    def decide(
        self, node: NodeLike, topology: Topology | None
    ) -> tuple[str, list[AllocationResult] | None]:
        """The node's verdict (FEASIBLE or the reason), with the allocation when the
        allocator ran (None when the verdict was reused); AllocationError as the
        allocator's errors that are not the node's own."""
        view = self.allocator.view(node)
        key = self.key(view, topology)
        if key is not None:
            found = self.cache.get(key)
            if found is not None:
                self.cache.hits += 1
                return found, None
        self.cache.runs += 1
        try:
            results = self.allocator.allocate(node, self.claims, topology=topology)
        except AllocationError as exc:
            if not exc.on_node:
                raise
            verdict, results = str(exc), None
        else:
            verdict = FEASIBLE if results is not None else CANNOT_ALLOCATE
        if key is not None:
            self.cache.put(key, verdict)
        return verdict, results

    def key(self, view: NodeView, topology: Topology | None) -> Hashable | None:
        """The node's key, or None when only the allocator can decide (module doc)."""
        spec = self.spec
        if spec is None or view.plain:
            return None
        if (
            spec.all_with_constraints
            and topology is not None
            and self.allocator.gpu_selector is not None
        ):
            return None
        derived = view.derived.get(spec.id, _MISSING)
        if derived is _MISSING:
            if len(view.derived) >= _MAX_DERIVED:
                view.derived.clear()
            derived = view.derived[spec.id] = self._derive(view)
        if derived is None:
            return None
        signatures, free = derived
        allocated = self.allocator.allocated
        if allocated.isdisjoint(view.ids):
            node_key = free
        else:
            used = tuple(c.id in allocated for c in view.candidates)
            node_key = _node_key(spec, signatures, used)
        return (spec.id, view.incomplete, view.invalid, node_key)

    def _derive(self, view: NodeView) -> tuple[tuple[Any, ...], frozenset[Any]] | None:
        """The candidates' signatures (values of constraint attributes numbered by first
        appearance) and the key of the node with none of them allocated; None when a
        selector fails on one of them."""
        spec = self.spec
        assert spec is not None
        cel = self.allocator.cel
        taints = spec.features.device_taints
        numbering: list[dict[Any, int]] = [{} for _ in spec.attributes]
        signatures = []
        for c in view.candidates:
            device, driver = c.device, c.id.driver
            passes = []
            for own, requested in spec.selector_sets:
                if device.binding_conditions:
                    passes.append(False)
                    continue
                ok = True
                for expression in (*own, *requested):
                    if expression is None:
                        return None
                    compiled = cel.get(expression)
                    if compiled.error is not None:
                        return None
                    try:
                        if not compiled.matches(device, driver):
                            ok = False
                            break
                    except CelError:
                        return None
                passes.append(ok)
            stopped = tuple(
                bool(taints and device.taints and _tainted(device, tolerations))
                for tolerations in spec.toleration_sets
            )
            values = []
            for attribute, numbers in zip(spec.attributes, numbering, strict=True):
                found = device.attribute(driver, attribute)
                if found is None:
                    values.append(-1)
                else:
                    values.append(numbers.setdefault((found.kind, found.value), len(numbers)))
            signatures.append((tuple(passes), stopped, tuple(values)))
        frozen = tuple(signatures)
        return frozen, _node_key(spec, frozen, (False,) * len(frozen))


def _node_key(spec: _Spec, signatures: tuple[Any, ...], used: tuple[bool, ...]) -> frozenset[Any]:
    """Positional with constraints, a multiset without (a frozenset: its hash is kept)."""
    if spec.constrained:
        return frozenset(((signatures, used),))
    return frozenset(Counter(zip(signatures, used, strict=True)).items())
