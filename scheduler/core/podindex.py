"""Indexes of the pods on the snapshot's slots, for the plugins that look at other pods
(InterPodAffinity, PodTopologySpread). Kept incrementally by the snapshot as pods come and go,
so a scheduling cycle reads counts instead of walking every pod.

- `LabelSetIndex`: pods grouped by label set (namespace, labels, terminating), each set with
  its count per slot, and an inverted index from label (key, value) and key to sets. A selector
  is matched once per distinct label set, not once per pod; replicas share their labels, so a
  cluster of 10,000 pods has far fewer sets. `counts(...)` gives the per-slot count of the
  pods a selector matches as a numpy column. (Not the pod groups of gang scheduling.)
- `TermIndex`: the affinity terms that bound pods carry (kube's PodsWithAffinity and
  PodsWithRequiredAntiAffinity), by term, with the slots that carry it. Pods of one job carry
  the same terms, so a cycle visits each distinct term once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from scheduler.core.model import PodInfo
from scheduler.core.podaffinity import (
    AffinityTerm,
    LabelSelector,
    NamespaceSet,
    WeightedTerm,
    namespace_in,
)

__all__ = ["LabelSetIndex", "LabelSetKey", "TermIndex", "TermKind"]

IntArray = npt.NDArray[np.int64]
LabelSetKey = tuple[str, frozenset[tuple[str, str]], bool]
_MEMO_LIMIT = 4096
K = TypeVar("K")


@dataclass(slots=True)
class _LabelSet:
    namespace: str
    labels: dict[str, str]
    terminating: bool
    slots: Counter[int] = field(default_factory=Counter)
    total: int = 0
    _arrays: tuple[IntArray, IntArray] | None = None

    def arrays(self) -> tuple[IntArray, IntArray]:
        """(slots, counts) of the group, cached until it changes."""
        if self._arrays is None:
            n = len(self.slots)
            self._arrays = (
                np.fromiter(self.slots.keys(), np.int64, n),
                np.fromiter(self.slots.values(), np.int64, n),
            )
        return self._arrays


class LabelSetIndex:
    """Pods on slots grouped by label set: namespace, labels and whether they are
    terminating."""

    def __init__(self) -> None:
        self._ids: dict[LabelSetKey, int] = {}
        self._sets: dict[int, _LabelSet] = {}
        self._next = 0
        self._by_label: dict[tuple[str, str], set[int]] = {}
        self._by_key: dict[str, set[int]] = {}
        self.version = 0  # bumped when a group appears or disappears
        self._memo: dict[tuple[object, ...], list[int]] = {}
        self._memo_version = -1

    def add(self, slot: int, pod: PodInfo, sign: int) -> None:
        key: LabelSetKey = (
            pod.namespace,
            frozenset(pod.labels.items()),
            pod.deletion_timestamp is not None,
        )
        gid = self._ids.get(key)
        if gid is None:
            if sign < 0:
                return
            gid = self._next
            self._next += 1
            self._ids[key] = gid
            self._sets[gid] = _LabelSet(key[0], dict(pod.labels), key[2])
            for item in key[1]:
                self._by_label.setdefault(item, set()).add(gid)
                self._by_key.setdefault(item[0], set()).add(gid)
            self.version += 1
        group = self._sets[gid]
        group.slots[slot] += sign
        group.total += sign
        if group.slots[slot] <= 0:
            del group.slots[slot]
        group._arrays = None
        if group.total <= 0:
            del self._sets[gid]
            del self._ids[key]
            for item in key[1]:
                self._discard(self._by_label, item, gid)
                self._discard(self._by_key, item[0], gid)
            self.version += 1

    @staticmethod
    def _discard(index: dict[K, set[int]], k: K, gid: int) -> None:
        ids = index.get(k)
        if ids is not None:
            ids.discard(gid)
            if not ids:
                del index[k]

    def _candidates(self, selector: LabelSelector) -> set[int] | None:
        """Groups that can match: narrowed by the selector's In and Exists requirements
        (None: every group is a candidate)."""
        narrowed: set[int] | None = None
        for req in selector.requirements or ():
            if req.operator == "In":
                ids: set[int] = set()
                for value in req.values:
                    ids |= self._by_label.get((req.key, value), set())
            elif req.operator == "Exists":
                ids = self._by_key.get(req.key, set())
            else:
                continue
            narrowed = set(ids) if narrowed is None else narrowed & ids
            if not narrowed:
                return narrowed
        return narrowed

    def matching(
        self, selector: LabelSelector, allowed: NamespaceSet, *, skip_terminating: bool
    ) -> list[int]:
        """Ids of the label sets whose pods the selector matches in the namespaces allowed;
        memoized until a group appears or disappears."""
        if self._memo_version != self.version:
            self._memo.clear()
            self._memo_version = self.version
        key = (selector, allowed, skip_terminating)
        found = self._memo.get(key)
        if found is not None:
            return found
        if selector.nothing:
            found = []
        else:
            candidates = self._candidates(selector)
            ids = self._sets.keys() if candidates is None else candidates
            found = []
            for gid in sorted(ids):
                g = self._sets[gid]
                if skip_terminating and g.terminating:
                    continue
                if namespace_in(g.namespace, allowed) and selector.matches(g.labels):
                    found.append(gid)
        if len(self._memo) >= _MEMO_LIMIT:
            self._memo.clear()
        self._memo[key] = found
        return found

    def counts(self, group_ids: list[int], capacity: int) -> IntArray:
        """Per-slot count of the pods in the given label sets."""
        out = np.zeros(capacity, np.int64)
        for gid in group_ids:
            slots, counts = self._sets[gid].arrays()
            np.add.at(out, slots, counts)
        return out


TermKind = str
REQUIRED = "required"  # a pod's required affinity term (hard weight at score)
REQUIRED_ANTI = "required_anti"  # a pod's required anti-affinity term (filter symmetry)
PREFERRED = "preferred"
PREFERRED_ANTI = "preferred_anti"


Entry = AffinityTerm | WeightedTerm


def _anchor(entry: Entry) -> tuple[str, frozenset[str]] | None:
    """A label the matched pod must carry for the term to match it: the key and values of
    the selector's first In requirement (None: the term has no such requirement)."""
    term = entry.term if isinstance(entry, WeightedTerm) else entry
    for req in term.selector.requirements or ():
        if req.operator == "In":
            return req.key, req.values
    return None


class TermIndex:
    """The affinity terms bound pods carry, each with the slots (and pod counts) carrying it.

    Terms are also indexed by a label the pod they match must carry (`_anchor`), so finding
    the terms that may match an incoming pod visits the pod's labels, not every term."""

    def __init__(self) -> None:
        kinds = (REQUIRED, REQUIRED_ANTI, PREFERRED, PREFERRED_ANTI)
        self._terms: dict[TermKind, dict[Entry, Counter[int]]] = {k: {} for k in kinds}
        self._anchored: dict[TermKind, dict[tuple[str, str], set[Entry]]] = {k: {} for k in kinds}
        self._loose: dict[TermKind, set[Entry]] = {k: set() for k in kinds}

    def add(self, slot: int, pod: PodInfo, sign: int) -> None:
        aff = pod.pod_affinity
        if not aff.any:
            return
        groups: tuple[tuple[TermKind, tuple[Entry, ...]], ...] = (
            (REQUIRED, aff.required),
            (REQUIRED_ANTI, aff.required_anti),
            (PREFERRED, aff.preferred),
            (PREFERRED_ANTI, aff.preferred_anti),
        )
        for kind, terms in groups:
            index = self._terms[kind]
            for term in terms:
                slots = index.get(term)
                if slots is None:
                    if sign < 0:
                        continue
                    slots = index[term] = Counter()
                    self._link(kind, term, True)
                slots[slot] += sign
                if slots[slot] <= 0:
                    del slots[slot]
                if not slots:
                    del index[term]
                    self._link(kind, term, False)

    def _link(self, kind: TermKind, term: Entry, add: bool) -> None:
        anchor = _anchor(term)
        if anchor is None:
            if add:
                self._loose[kind].add(term)
            else:
                self._loose[kind].discard(term)
            return
        anchored = self._anchored[kind]
        for value in anchor[1]:
            label = (anchor[0], value)
            if add:
                anchored.setdefault(label, set()).add(term)
            else:
                terms = anchored.get(label)
                if terms is not None:
                    terms.discard(term)
                    if not terms:
                        del anchored[label]

    def candidates(
        self, kind: TermKind, labels: Mapping[str, str]
    ) -> Iterator[tuple[Entry, Counter[int]]]:
        """The terms of a kind that may match a pod with these labels, with their slots."""
        index = self._terms[kind]
        anchored = self._anchored[kind]
        seen: set[Entry] = set()
        for item in labels.items():
            for term in anchored.get(item, ()):
                if term not in seen:
                    seen.add(term)
                    yield term, index[term]
        for term in self._loose[kind]:
            yield term, index[term]

    def has(self, kind: TermKind) -> bool:
        return bool(self._terms[kind])

    def __bool__(self) -> bool:
        return any(self._terms.values())
