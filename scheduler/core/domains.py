"""Network domains: nodes grouped by the value of a topology label, and a pod group's room in
each.

A level is a node label key (`topologyLevels` of the GPUTopology args, widest first: e.g.
`network.topology.nvidia.com/spine`, then `.../leaf`); a domain is one value of it (one spine,
one leaf). `nvidia.com/gpu.clique` (set by NVIDIA's GPU feature discovery on GB200 NVL72 and
similar systems) is a multi-node NVLink domain, always the narrowest level when listed.

A domain's free capacity is counted in the group's own terms: how many more of its members fit
there (per node, the member's requests divided into what is free, on the nodes its filters
pass), so a leaf that holds exactly the group is preferred to one that holds it twice over
(bin packing, as KAI and Kueue's topology-aware scheduling do).

A pod group whose members' ResourceClaims name a ComputeDomain (NVIDIA's DRA driver,
`resource.nvidia.com/v1beta1`) needs one NVLink domain: the IMEX channels of a ComputeDomain
connect GPUs of one clique only. The driver's controller makes a ResourceClaimTemplate per
ComputeDomain whose request has the device class `compute-domain-default-channel.nvidia.com`
(the daemon's: `compute-domain-daemon.nvidia.com`) and whose `spec.devices.config` carries an
opaque configuration of driver `compute-domain.nvidia.com` with `domainID` (the
ComputeDomain's uid); the claim made from it for each pod keeps that spec, so the claim names
its ComputeDomain by `domainID` (`compute_domain`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from scheduler.core.framework import CycleState, ReasonMasks
from scheduler.core.model import PodInfo
from scheduler.core.snapshot import BoolArray, IntArray, Snapshot

__all__ = [
    "COMPUTE_DOMAIN_DRIVER",
    "NVLINK_CLIQUE",
    "DomainFilter",
    "DomainIndex",
    "Room",
    "compute_domain",
    "domain_index",
    "member_room",
    "walk_levels",
]

NVLINK_CLIQUE = "nvidia.com/gpu.clique"
"""A multi-node NVLink domain (GB200 NVL72): the narrowest level when present."""

COMPUTE_DOMAIN_DRIVER = "compute-domain.nvidia.com"
"""The driver of a ComputeDomain's channel and daemon claims (their opaque configuration)."""

_NO_LIMIT = np.iinfo(np.int64).max // 4


def compute_domain(pods: Iterable[PodInfo], dra: Any) -> str | None:
    """The ComputeDomain (its uid, the `domainID` of the claims' configuration) named by the
    first of `pods` whose existing ResourceClaims name one; None when none does. `dra`: the
    cache's `DraState`."""
    for pod in pods:
        for entry in pod.resource_claims:
            claim = dra.claim(pod.namespace, entry.claim) if entry.claim else None
            for config in claim.config if claim is not None else ():
                opaque = config.get("opaque")
                if not isinstance(opaque, Mapping):
                    continue
                if opaque.get("driver") != COMPUTE_DOMAIN_DRIVER:
                    continue
                parameters = opaque.get("parameters")
                domain = parameters.get("domainID") if isinstance(parameters, Mapping) else None
                if isinstance(domain, str) and domain:
                    return domain
    return None


@dataclass(frozen=True, slots=True)
class DomainIndex:
    """The domains of one level: each slot's domain id (-1: not a live node, or the node has
    no such label) and each id's label value."""

    key: str
    ids: IntArray
    values: tuple[str, ...]

    def mask(self, domain: int) -> BoolArray:
        return self.ids == domain  # type: ignore[no-any-return]

    def of_slot(self, slot: int) -> int:
        return int(self.ids[slot]) if slot < self.ids.size else -1


class DomainFilter:
    """The Filter a pod group's placement adds in front of the profile's: nodes outside the
    domain the group is being placed in (one value of a topology level) are rejected."""

    name = "PodGroup"

    def __init__(self, index: DomainIndex, domain: int) -> None:
        self.value = index.values[domain]
        self.reason = f"node(s) outside the pod group's {index.key}={self.value}"
        self.outside = ~index.mask(domain)

    def filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: BoolArray
    ) -> ReasonMasks:
        return [(self.reason, self.outside[: snapshot.capacity])]


def domain_index(snapshot: Snapshot, key: str) -> DomainIndex:
    """The domains of level `key` in the snapshot (kept until labels or nodes change)."""

    def compute() -> DomainIndex:
        ids = np.full(snapshot.capacity, -1, np.int64)
        values: dict[str, int] = {}
        for slot in np.flatnonzero(snapshot.live):
            node = snapshot.nodes[int(slot)]
            value = node.labels.get(key) if node is not None else None
            if value:
                ids[slot] = values.setdefault(value, len(values))
        return DomainIndex(key, ids, tuple(values))

    return snapshot.derived(("network-domains", key), compute)


def walk_levels(levels: Sequence[str], asked: str) -> list[str]:
    """A preferred request's walk: every level narrowest first, the asked key among them
    (placed at the narrow end when it is not a configured level), the NVLink domain first."""
    ordered = list(reversed(levels))
    if asked not in ordered:
        ordered.insert(0, asked)
    if NVLINK_CLIQUE in ordered:
        ordered.remove(NVLINK_CLIQUE)
        ordered.insert(0, NVLINK_CLIQUE)
    return ordered


def level_name(key: str) -> str:
    return "NVLink domain" if key == NVLINK_CLIQUE else key


def member_room(snapshot: Snapshot, pod: PodInfo, feasible: BoolArray) -> IntArray:
    """Per slot, how many more pods shaped like `pod` fit (0 where its filters fail)."""
    n = snapshot.capacity
    room = np.full(n, _NO_LIMIT, np.int64)
    free = snapshot.allocatable - snapshot.requested
    for resource, amount in pod.requests.items():
        if amount <= 0:
            continue
        row = snapshot.row.get(resource)
        if row is None:
            return np.zeros(n, np.int64)
        np.minimum(room, free[row] // amount, out=room)
    pods_row = snapshot.row.get("pods")
    if pods_row is not None:
        np.minimum(room, snapshot.allocatable[pods_row] - snapshot.pod_count, out=room)
    on = feasible[:n]
    room = np.where(on, np.maximum(room, 1), 0)
    return np.minimum(room, 1 << 20)


@dataclass(frozen=True, slots=True)
class Room:
    """One domain's room for a group: members of each shape that fit, and the best scores."""

    domain: int
    value: str
    free: int  # members that fit, all shapes together
    holds: int  # members of the group this domain can take (by shape, capped at the need)
    score: int  # sum of the best node totals for the group's members inside the domain


def rooms(
    index: DomainIndex,
    shapes: Sequence[tuple[int, IntArray, IntArray]],
) -> list[Room]:
    """Every domain's room for a group: `shapes` is (members of that shape, room per slot,
    node totals per slot) per distinct member shape."""
    count = len(index.values)
    if count == 0:
        return []
    inside = index.ids >= 0
    ids = index.ids[inside]
    free = np.zeros(count, np.int64)
    holds = np.zeros(count, np.int64)
    for wanted, room, _ in shapes:
        per = np.bincount(ids, weights=room[: index.ids.size][inside], minlength=count)
        per = per.astype(np.int64)
        free += per
        holds += np.minimum(per, wanted)
    out = []
    for domain in range(count):
        if holds[domain] == 0:
            continue
        score = 0
        mask = index.ids == domain
        for wanted, room, totals in shapes:
            slots = np.flatnonzero(mask & (room[: mask.size] > 0))
            if slots.size == 0:
                continue
            best = np.repeat(totals[slots], np.minimum(room[slots], wanted))
            score += int(np.sort(best)[::-1][:wanted].sum())
        out.append(Room(domain, index.values[domain], int(free[domain]), int(holds[domain]), score))
    return out
