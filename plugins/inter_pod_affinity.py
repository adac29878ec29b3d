"""InterPodAffinity: what a pod says about the pods it should (not) run next to, and what the
pods already running say about it, as kube-scheduler 1.33's plugin.

Filter, in kube's order, with kube's reasons:
1. the incoming pod's required affinity: every term's topology key on the node, and in the
   node's domain of each key a pod matching *all* terms; unless no such pod exists anywhere
   and the pod matches its own terms (the first pod of a group);
2. its required anti-affinity: no pod matching a term in the node's domain of the term's key
   (a node without the key passes);
3. the existing pods' required anti-affinity (symmetry): no pod whose anti-affinity term
   matches the incoming pod in a domain the node belongs to.

Score: preferred terms of the incoming pod (+/- weight per matching pod in the domain), and of
the existing pods that match it (their preferred terms, and their required affinity terms at
`hardPodAffinityWeight`), unless `ignorePreferredTermsOfExistingPods`; min-max normalized to
0..100 over the feasible nodes.

The vector form reads the snapshot's indexes (`scheduler.core.podindex`): per-slot counts of
the pods a selector matches come from pod groups (one per namespace and label set) and the
existing pods' terms are visited once per distinct term, so a cycle costs a pass over the
nodes and the terms, not over every pod. The reference form walks the pods as kube does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from plugins._pod_relations import Domains, bool_arg, domain_totals, topology_domains
from scheduler.core.config import ConfigError, strict_mapping
from scheduler.core.framework import SKIP, CycleState, PreFilterResult, ReasonMasks
from scheduler.core.model import PodInfo
from scheduler.core.podaffinity import (
    AffinityTerm,
    NamespaceSet,
    WeightedTerm,
    namespace_in,
)
from scheduler.core.podindex import PREFERRED, PREFERRED_ANTI, REQUIRED, REQUIRED_ANTI
from scheduler.core.reference import Cluster
from scheduler.core.snapshot import BoolArray, IntArray, NodeState, Snapshot

NAME = "InterPodAffinity"
REASON_AFFINITY = "node(s) didn't match pod affinity rules"
REASON_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
REASON_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
DEFAULT_HARD_POD_AFFINITY_WEIGHT = 1
_FILTER_KEY = f"{NAME}/filter"
_SCORE_KEY = f"{NAME}/score"


@dataclass(frozen=True, slots=True)
class InterPodAffinityArgs:
    hard_pod_affinity_weight: int = DEFAULT_HARD_POD_AFFINITY_WEIGHT
    ignore_preferred_terms_of_existing_pods: bool = False


def parse_args(raw: Mapping[str, Any] | None, path: str) -> InterPodAffinityArgs:
    """InterPodAffinityArgs, validated as kube's ValidateInterPodAffinityArgs."""
    data = strict_mapping(
        raw, path, {"apiVersion", "kind", "hardPodAffinityWeight",
                    "ignorePreferredTermsOfExistingPods"}
    )  # fmt: skip
    weight = data.get("hardPodAffinityWeight", DEFAULT_HARD_POD_AFFINITY_WEIGHT)
    if isinstance(weight, bool) or not isinstance(weight, int):
        raise ConfigError(f"{path}.hardPodAffinityWeight: must be an integer, got {weight!r}")
    if not 0 <= weight <= 100:
        raise ConfigError(
            f"{path}.hardPodAffinityWeight: Invalid value: {weight}: not in valid range [0-100]"
        )
    ignore = bool_arg(data, "ignorePreferredTermsOfExistingPods", path, False)
    return InterPodAffinityArgs(weight, ignore)


def _resolved(term: AffinityTerm, namespaces: Mapping[str, Mapping[str, str]]) -> NamespaceSet:
    return term.resolve_namespaces(namespaces)


@dataclass(frozen=True, slots=True)
class _FilterState:
    affinity: BoolArray
    anti: BoolArray
    existing: BoolArray


class InterPodAffinity:
    name = NAME

    def __init__(self, args: InterPodAffinityArgs | None = None) -> None:
        self.args = args or InterPodAffinityArgs()

    # ------------------------------------------------------------------ vector form

    def _counts(
        self,
        snapshot: Snapshot,
        terms: Sequence[AffinityTerm],
        namespaces: Sequence[NamespaceSet],
    ) -> IntArray:
        """Per-slot count of the pods matching every one of `terms` (namespace and labels)."""
        label_sets = snapshot.label_sets
        found: list[int] | None = None
        for term, allowed in zip(terms, namespaces, strict=True):
            ids = label_sets.matching(term.selector, allowed, skip_terminating=False)
            if found is None:
                found = ids
            else:
                keep = set(ids)
                found = [g for g in found if g in keep]
        return label_sets.counts(found or [], snapshot.capacity)

    def pre_filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot
    ) -> PreFilterResult | None:
        aff = pod.pod_affinity
        existing = self._existing_anti_mask(pod, snapshot)
        if existing is None and not aff.required and not aff.required_anti:
            return SKIP
        n = snapshot.capacity
        nothing = np.zeros(n, np.bool_)
        affinity = nothing
        if aff.required:
            affinity = self._affinity_mask(pod, snapshot)
        anti = nothing.copy()
        for term in aff.required_anti:
            allowed = _resolved(term, snapshot.namespaces)
            counts = self._counts(snapshot, [term], [allowed])
            if not counts.any():
                continue
            domains = topology_domains(snapshot, term.topology_key)
            totals = domain_totals(domains, counts)
            anti |= domains.present & (domains.per_slot(totals) > 0)
        existing_mask = existing if existing is not None else nothing
        state.write(_FILTER_KEY, _FilterState(affinity, anti, existing_mask))
        return None

    def _affinity_mask(self, pod: PodInfo, snapshot: Snapshot) -> BoolArray:
        terms = pod.pod_affinity.required
        allowed = [_resolved(t, snapshot.namespaces) for t in terms]
        counts = self._counts(snapshot, terms, allowed)
        missing = np.zeros(snapshot.capacity, np.bool_)
        all_exist = np.ones(snapshot.capacity, np.bool_)
        any_counted = False
        for term in terms:
            domains = topology_domains(snapshot, term.topology_key)
            totals = domain_totals(domains, counts)
            if totals.any():
                any_counted = True
            missing |= ~domains.present
            all_exist &= domains.present & (domains.per_slot(totals) > 0)
        # The first pod of a group: no pod matches anywhere and the pod matches its own terms.
        first = not any_counted and all(t.matches(pod.namespace, pod.labels, None) for t in terms)
        if first:
            return missing
        failed: BoolArray = missing | ~all_exist
        return failed

    def _existing_anti_mask(self, pod: PodInfo, snapshot: Snapshot) -> BoolArray | None:
        """Slots in a domain where an existing pod's required anti-affinity term matches the
        incoming pod; None when there is none."""
        index = snapshot.pod_terms
        if not index.has(REQUIRED_ANTI):
            return None
        ns_labels = snapshot.namespaces.get(pod.namespace)
        values: dict[str, set[int]] = {}
        for term, slots in index.candidates(REQUIRED_ANTI, pod.labels):
            assert isinstance(term, AffinityTerm)
            if not term.matches(pod.namespace, pod.labels, ns_labels):
                continue
            ids = topology_domains(snapshot, term.topology_key).ids
            hit = values.setdefault(term.topology_key, set())
            hit.update(int(ids[s]) for s in slots if ids[s] >= 0)
        mask = np.zeros(snapshot.capacity, np.bool_)
        found = False
        for key, ids_hit in values.items():
            if ids_hit:
                found = True
                ids = topology_domains(snapshot, key).ids
                mask |= np.isin(ids, np.fromiter(ids_hit, np.int64, len(ids_hit)))
        return mask if found else None

    def filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: BoolArray
    ) -> ReasonMasks:
        s: _FilterState = state.read(_FILTER_KEY)
        return [
            (REASON_AFFINITY, s.affinity),
            (REASON_ANTI_AFFINITY, s.anti & ~s.affinity),
            (REASON_EXISTING_ANTI_AFFINITY, s.existing & ~s.affinity & ~s.anti),
        ]

    def pre_score(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, feasible: BoolArray
    ) -> bool:
        aff = pod.pod_affinity
        has_constraints = bool(aff.preferred or aff.preferred_anti)
        if self.args.ignore_preferred_terms_of_existing_pods and not has_constraints:
            return False
        by_key: dict[str, IntArray] = {}
        touched = False

        def add(domains: Domains, key: str, totals: IntArray) -> None:
            current = by_key.get(key)
            by_key[key] = totals if current is None else current + totals

        for terms, sign in ((aff.preferred, 1), (aff.preferred_anti, -1)):
            for wt in terms:
                allowed = _resolved(wt.term, snapshot.namespaces)
                counts = self._counts(snapshot, [wt.term], [allowed])
                domains = topology_domains(snapshot, wt.term.topology_key)
                if not (counts[domains.present] > 0).any():
                    continue
                touched = True
                add(
                    domains, wt.term.topology_key, sign * wt.weight * domain_totals(domains, counts)
                )
        ns_labels = snapshot.namespaces.get(pod.namespace)
        index = snapshot.pod_terms
        kinds: list[tuple[str, int]] = [(PREFERRED, 1), (PREFERRED_ANTI, -1)]
        if self.args.hard_pod_affinity_weight > 0:
            kinds.insert(0, (REQUIRED, 1))
        for kind, sign in kinds:
            for entry, slots in index.candidates(kind, pod.labels):
                if isinstance(entry, WeightedTerm):
                    term, weight = entry.term, entry.weight
                else:
                    term, weight = entry, self.args.hard_pod_affinity_weight
                if not term.matches(pod.namespace, pod.labels, ns_labels):
                    continue
                domains = topology_domains(snapshot, term.topology_key)
                totals = np.zeros(len(domains.values), np.int64)
                for slot, count in slots.items():
                    if domains.ids[slot] >= 0:
                        totals[domains.ids[slot]] += sign * weight * count
                        touched = True
                add(domains, term.topology_key, totals)
        if not touched:
            return False
        scores = np.zeros(snapshot.capacity, np.int64)
        for key, totals in by_key.items():
            domains = topology_domains(snapshot, key)
            scores += domains.per_slot(totals)
        state.write(_SCORE_KEY, scores)
        return True

    def score(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, feasible: BoolArray
    ) -> IntArray | None:
        scores: IntArray | None = state.get(_SCORE_KEY)
        return scores

    def normalize(self, state: CycleState, scores: IntArray, feasible: BoolArray) -> IntArray:
        """kube's min-max normalization over the feasible nodes, truncated to integers."""
        if not feasible.any():
            return scores
        low = int(scores[feasible].min())
        high = int(scores[feasible].max())
        if high - low <= 0:
            return np.zeros_like(scores)
        scaled = 100.0 * ((scores - low).astype(np.float64) / float(high - low))
        out: IntArray = np.where(feasible, scaled, 0).astype(np.int64)
        return out

    # ------------------------------------------------------------------ reference form

    def filter_cluster(self, pod: PodInfo, cluster: Cluster) -> list[list[str]]:
        """kube's PreFilter and Filter, pod by pod."""
        aff = pod.pod_affinity
        namespaces = cluster.namespaces
        ns_labels = namespaces.get(pod.namespace)
        required = [(t, _resolved(t, namespaces)) for t in aff.required]
        required_anti = [(t, _resolved(t, namespaces)) for t in aff.required_anti]

        def matches(term: AffinityTerm, allowed: NamespaceSet, other: PodInfo) -> bool:
            return namespace_in(other.namespace, allowed) and term.selector.matches(other.labels)

        existing: set[tuple[str, str]] = set()
        affinity_counts: dict[tuple[str, str], int] = {}
        anti_counts: dict[tuple[str, str], int] = {}
        for node in cluster.nodes:
            labels = node.info.labels
            for other in node.pods:
                for term in other.pod_affinity.required_anti:
                    if term.topology_key in labels and term.matches(
                        pod.namespace, pod.labels, ns_labels
                    ):
                        existing.add((term.topology_key, labels[term.topology_key]))
                if required and all(matches(t, a, other) for t, a in required):
                    for t, _ in required:
                        if t.topology_key in labels:
                            pair = (t.topology_key, labels[t.topology_key])
                            affinity_counts[pair] = affinity_counts.get(pair, 0) + 1
                for t, a in required_anti:
                    if t.topology_key in labels and matches(t, a, other):
                        pair = (t.topology_key, labels[t.topology_key])
                        anti_counts[pair] = anti_counts.get(pair, 0) + 1
        if not existing and not aff.required and not aff.required_anti:
            return [[] for _ in cluster.nodes]
        self_match = bool(required) and all(
            t.matches(pod.namespace, pod.labels, None) for t in aff.required
        )
        out: list[list[str]] = []
        for node in cluster.nodes:
            labels = node.info.labels
            ok = True
            pods_exist = True
            for t, _ in required:
                if t.topology_key not in labels:
                    ok = False
                    break
                if affinity_counts.get((t.topology_key, labels[t.topology_key]), 0) <= 0:
                    pods_exist = False
            if ok and not pods_exist:
                ok = not affinity_counts and self_match
            if not ok:
                out.append([REASON_AFFINITY])
            elif any(
                t.topology_key in labels
                and anti_counts.get((t.topology_key, labels[t.topology_key]), 0) > 0
                for t, _ in required_anti
            ):
                out.append([REASON_ANTI_AFFINITY])
            elif any((k, v) in existing for k, v in labels.items()):
                out.append([REASON_EXISTING_ANTI_AFFINITY])
            else:
                out.append([])
        return out

    def score_cluster(
        self, pod: PodInfo, feasible: Sequence[NodeState], cluster: Cluster
    ) -> list[int] | None:
        """kube's PreScore, Score and NormalizeScore, pod by pod."""
        aff = pod.pod_affinity
        if self.args.ignore_preferred_terms_of_existing_pods and not (
            aff.preferred or aff.preferred_anti
        ):
            return None
        namespaces = cluster.namespaces
        ns_labels = namespaces.get(pod.namespace)
        preferred = [(wt, _resolved(wt.term, namespaces)) for wt in aff.preferred]
        preferred_anti = [(wt, _resolved(wt.term, namespaces)) for wt in aff.preferred_anti]
        topology: dict[str, dict[str, int]] = {}

        def credit(key: str, labels: Mapping[str, str], amount: int) -> None:
            if key in labels:
                values = topology.setdefault(key, {})
                values[labels[key]] = values.get(labels[key], 0) + amount

        for node in cluster.nodes:
            labels = node.info.labels
            if not labels:
                continue
            for other in node.pods:
                for terms, sign in ((preferred, 1), (preferred_anti, -1)):
                    for wt, allowed in terms:
                        if namespace_in(other.namespace, allowed) and wt.term.selector.matches(
                            other.labels
                        ):
                            credit(wt.term.topology_key, labels, sign * wt.weight)
                theirs = other.pod_affinity
                hard = self.args.hard_pod_affinity_weight
                if hard > 0:
                    for t in theirs.required:
                        if t.matches(pod.namespace, pod.labels, ns_labels):
                            credit(t.topology_key, labels, hard)
                for wts, sign in ((theirs.preferred, 1), (theirs.preferred_anti, -1)):
                    for wt in wts:
                        if wt.term.matches(pod.namespace, pod.labels, ns_labels):
                            credit(wt.term.topology_key, labels, sign * wt.weight)
        if not topology:
            return None
        raw = [
            sum(values.get(n.info.labels[k], 0) for k, values in topology.items()
                if k in n.info.labels)
            for n in feasible
        ]  # fmt: skip
        low, high = min(raw), max(raw)
        if high - low <= 0:
            return [0 for _ in raw]
        return [int(100.0 * (float(s - low) / float(high - low))) for s in raw]


def new(args: Mapping[str, Any] | None, path: str) -> InterPodAffinity:
    return InterPodAffinity(parse_args(args, path))


__all__ = [
    "NAME",
    "REASON_AFFINITY",
    "REASON_ANTI_AFFINITY",
    "REASON_EXISTING_ANTI_AFFINITY",
    "InterPodAffinity",
    "InterPodAffinityArgs",
    "new",
    "parse_args",
]
