"""Shared by InterPodAffinity and PodTopologySpread: topology domains as numpy columns and
an args helper."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from scheduler.core.config import ConfigError
from scheduler.core.snapshot import BoolArray, IntArray, Snapshot

__all__ = ["Domains", "bool_arg", "domain_totals", "topology_domains"]


@dataclass(frozen=True, slots=True)
class Domains:
    """A topology key over the slots: `ids[slot]` is the index of the slot's value in
    `values`, -1 where the slot has no live node or the node lacks the key."""

    ids: IntArray
    values: tuple[str, ...]

    @property
    def present(self) -> BoolArray:
        present: BoolArray = self.ids >= 0
        return present

    def per_slot(self, totals: IntArray) -> IntArray:
        """Each slot's domain total (0 where the slot has no domain)."""
        padded = np.append(totals, np.zeros(1, totals.dtype))  # id -1 reads the 0 appended
        out: IntArray = padded[self.ids]
        return out


def topology_domains(snapshot: Snapshot, key: str) -> Domains:
    """The domains of a topology key, cached until node labels or the node set change."""

    def compute() -> Domains:
        ids = np.full(snapshot.capacity, -1, np.int64)
        index: dict[str, int] = {}
        for slot in snapshot.live_slots():
            info = snapshot.nodes[slot]
            value = info.labels.get(key) if info is not None else None
            if value is not None:
                ids[slot] = index.setdefault(value, len(index))
        return Domains(ids, tuple(index))

    return snapshot.derived(("topology-domains", key), compute)


def domain_totals(domains: Domains, counts: IntArray, where: BoolArray | None = None) -> IntArray:
    """Sum of per-slot counts per domain, over the slots in `where` that have the key."""
    mask = domains.present if where is None else domains.present & where
    if not counts.any():
        return np.zeros(len(domains.values), np.int64)
    totals = np.bincount(domains.ids[mask], weights=counts[mask], minlength=len(domains.values))
    return totals.astype(np.int64)


def bool_arg(data: Mapping[str, Any], key: str, path: str, default: bool) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{path}.{key}: must be a boolean, got {value!r}")
    return value
