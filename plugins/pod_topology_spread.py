"""PodTopologySpread: `topologySpreadConstraints`, as kube-scheduler 1.33's plugin.

Filter (the `DoNotSchedule` constraints): for each constraint, the pods matching its selector
(in the pod's namespace, not terminating) are counted per domain of its topology key, over the
nodes that have every constraint's key and pass the constraint's node inclusion policies
(`nodeAffinityPolicy` Honor: the pod's nodeSelector and required node affinity;
`nodeTaintsPolicy` Honor: its tolerations). A node fails when it lacks a key
(`... (missing required label)`) or when placing the pod would make
`count(domain) + self-match - global minimum > maxSkew`; the global minimum is 0 while fewer
domains than `minDomains` exist.

Score (the `ScheduleAnyway` constraints): a feasible node's raw score is the sum over
constraints of `count(domain) * log(domains + 2) + (maxSkew - 1)`, rounded; normalized so
the fewest matching pods score 100 (`100 * (max + min - score) / max`); feasible nodes that
lack a key score 0.

A pod without constraints gets the default ones (`defaultingType: System`: hostname maxSkew 3
and zone maxSkew 5, both ScheduleAnyway; `List`: `defaultConstraints`), with kube's
DefaultSelector: the selectors of the Services that select the pod and of its controlling
ReplicationController, ReplicaSet or StatefulSet, as the cache holds them (explain reads them
from the snapshot file, the in-cluster scheduler watches them). Under System defaulting nodes
without a zone label still get hostname spreading.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from plugins._pod_relations import Domains, domain_totals, topology_domains
from plugins.node_affinity import required_matches
from plugins.taint_toleration import untolerated_reason
from scheduler.core.config import FIELDS, ConfigError, strict_mapping
from scheduler.core.framework import SKIP, CycleState, PreFilterResult, ReasonMasks
from scheduler.core.model import PodInfo, WorkloadInfo, parse_spread_constraint
from scheduler.core.podaffinity import (
    LabelRequirement,
    LabelSelector,
    SpreadConstraint,
    effective_selector,
)
from scheduler.core.reference import Cluster
from scheduler.core.snapshot import BoolArray, IntArray, NodeState, Snapshot

NAME = "PodTopologySpread"
REASON = "node(s) didn't match pod topology spread constraints"
REASON_MISSING_LABEL = f"{REASON} (missing required label)"
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
_FILTER_KEY = f"{NAME}/filter"
_SCORE_KEY = f"{NAME}/score"

SYSTEM_DEFAULT_CONSTRAINTS = (
    SpreadConstraint(3, HOSTNAME, SCHEDULE_ANYWAY, LabelSelector(()), has_selector=False),
    SpreadConstraint(5, ZONE, SCHEDULE_ANYWAY, LabelSelector(()), has_selector=False),
)


@dataclass(frozen=True, slots=True)
class PodTopologySpreadArgs:
    default_constraints: tuple[SpreadConstraint, ...] = ()
    defaulting_type: str = "System"

    @property
    def system_defaulted(self) -> bool:
        return self.defaulting_type == "System"


def parse_args(raw: Mapping[str, Any] | None, path: str) -> PodTopologySpreadArgs:
    """PodTopologySpreadArgs, defaulted and validated as kube's v1 defaults and
    ValidatePodTopologySpreadArgs (errors name the field)."""
    data = strict_mapping(raw, path, {"apiVersion", "kind", "defaultConstraints",
                                      "defaultingType"})  # fmt: skip
    defaulting = data.get("defaultingType") or "System"
    raw_constraints = data.get("defaultConstraints") or []
    if not isinstance(raw_constraints, list):
        raise ConfigError(f"{path}.defaultConstraints: must be a list")
    if defaulting not in ("System", "List"):
        raise ConfigError(
            f'{path}.defaultingType: Unsupported value: "{defaulting}": supported values: '
            '"List", "System"'
        )
    if defaulting == "System" and raw_constraints:
        raise ConfigError(
            f'{path}.defaultingType: Invalid value: "System": when .defaultConstraints are '
            "not empty"
        )

    constraints: list[SpreadConstraint] = []
    for i, item in enumerate(raw_constraints):
        p = f"{path}.defaultConstraints[{i}]"
        if isinstance(item, Mapping) and item.get("labelSelector") is not None:
            raise ConfigError(
                f"{p}.labelSelector: Forbidden: constraint must not define a selector, as "
                "they deduced for each pod"
            )
        c = parse_spread_constraint(item, FIELDS, p)
        for j, other in enumerate(constraints):
            if (other.topology_key, other.when_unsatisfiable) == (
                c.topology_key,
                c.when_unsatisfiable,
            ):
                raise ConfigError(
                    f"{path}.defaultConstraints[{i}]: Duplicate value: "
                    f'"{{{c.topology_key}, {c.when_unsatisfiable}}}" (as [{j}])'
                )
        constraints.append(c)
    return PodTopologySpreadArgs(tuple(constraints), defaulting)


@dataclass(frozen=True, slots=True)
class _Constraint:
    """A constraint of the pod being scheduled, with its selector merged for that pod."""

    max_skew: int
    key: str
    selector: LabelSelector
    min_domains: int
    honor_affinity: bool
    honor_taints: bool


_CONTROLLERS = {
    ("", "ReplicationController"),
    ("apps", "ReplicaSet"),
    ("apps", "StatefulSet"),
}


def default_selector(
    pod: PodInfo,
    workloads: Mapping[tuple[str, str, str], WorkloadInfo],
    services: Iterable[WorkloadInfo] | None = None,
) -> LabelSelector:
    """kube's helper.DefaultSelector: the label maps of the Services selecting the pod,
    merged; then its controlling ReplicationController's map merged in, or its ReplicaSet's
    or StatefulSet's selector requirements added. `services`: those of the pod's namespace
    when the caller has them indexed (else they are found in `workloads`)."""
    if services is None:
        services = [
            w for (kind, ns, _), w in workloads.items() if kind == "Service" and ns == pod.namespace
        ]
    merged: dict[str, str] = {}
    for w in services:
        if w.labels is not None and w.selector.matches(pod.labels):
            merged.update(w.labels)

    def from_set(labels: Mapping[str, str]) -> LabelSelector:
        return LabelSelector(
            tuple(LabelRequirement(k, "In", frozenset((v,))) for k, v in sorted(labels.items()))
        )

    selector = from_set(merged)
    owner = pod.controller
    if owner is None or (owner[0], owner[1]) not in _CONTROLLERS:
        return selector
    found = workloads.get((owner[1], pod.namespace, owner[2]))
    if found is None:
        return selector
    if owner[1] == "ReplicationController":
        return from_set({**merged, **(found.labels or {})})
    if found.selector.requirements is None:
        return selector
    return LabelSelector((selector.requirements or ()) + found.selector.requirements)


def go_round(x: float) -> int:
    """Go's math.Round (half away from zero) for non-negative x, exactly."""
    f = math.floor(x)
    return int(f) + (1 if x - f >= 0.5 else 0)


class PodTopologySpread:
    name = NAME

    def __init__(self, args: PodTopologySpreadArgs | None = None) -> None:
        self.args = args or PodTopologySpreadArgs()

    def constraints(
        self,
        pod: PodInfo,
        action: str,
        workloads: Mapping[tuple[str, str, str], WorkloadInfo],
        services: Iterable[WorkloadInfo] | None = None,
    ) -> list[_Constraint]:
        """kube's getConstraints: the pod's own constraints with `action`; a pod without any
        gets the default constraints with the selector of the workloads that select it
        (none when no workload does)."""
        if pod.spread_constraints:
            chosen = [c for c in pod.spread_constraints if c.when_unsatisfiable == action]
            selectors = [effective_selector(c, pod.labels) for c in chosen]
        else:
            defaults = (
                SYSTEM_DEFAULT_CONSTRAINTS
                if self.args.system_defaulted
                else self.args.default_constraints
            )
            chosen = [c for c in defaults if c.when_unsatisfiable == action]
            if not chosen:
                return []
            selector = default_selector(pod, workloads, services)
            if selector.empty:
                return []
            selectors = [selector] * len(chosen)
        return [
            _Constraint(
                c.max_skew,
                c.topology_key,
                selector,
                c.min_domains,
                c.node_affinity_policy == "Honor",
                c.node_taints_policy == "Honor",
            )
            for c, selector in zip(chosen, selectors, strict=True)
        ]

    # ------------------------------------------------------------------ vector form

    def _included(self, pod: PodInfo, snapshot: Snapshot, c: _Constraint) -> BoolArray:
        """Live slots passing the constraint's node inclusion policies."""
        mask = snapshot.live.copy()
        if c.honor_affinity and (pod.node_selector or pod.required_affinity is not None):

            def affinity() -> BoolArray:
                m = np.zeros(snapshot.capacity, np.bool_)
                for slot in snapshot.live_slots():
                    info = snapshot.nodes[slot]
                    m[slot] = info is not None and required_matches(pod, info)
                return m

            mask &= snapshot.derived(
                (NAME, "affinity", pod.node_selector, pod.required_affinity), affinity
            )
        if c.honor_taints and snapshot.tainted:

            def tolerated() -> BoolArray:
                m = np.ones(snapshot.capacity, np.bool_)
                for slot in snapshot.tainted:
                    info = snapshot.nodes[slot]
                    if info is not None and untolerated_reason(info.taints, pod.tolerations):
                        m[slot] = False
                return m

            mask &= snapshot.derived((NAME, "taints", pod.tolerations), tolerated)
        return mask

    def _counts(self, pod: PodInfo, snapshot: Snapshot, selector: LabelSelector) -> IntArray:
        """countPodsMatchSelector per slot: the pod's namespace, not terminating; an empty
        selector counts nothing."""
        if selector.empty:
            return np.zeros(snapshot.capacity, np.int64)
        label_sets = snapshot.label_sets
        ids = label_sets.matching(selector, frozenset((pod.namespace,)), skip_terminating=True)
        return label_sets.counts(ids, snapshot.capacity)

    def pre_filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot
    ) -> PreFilterResult | None:
        constraints = self.constraints(
            pod, DO_NOT_SCHEDULE, snapshot.workloads, _services(snapshot, pod)
        )
        if not constraints:
            return SKIP
        domains = [topology_domains(snapshot, c.key) for c in constraints]
        has_all = snapshot.live.copy()
        for d in domains:
            has_all &= d.present
        missing = np.zeros(snapshot.capacity, np.bool_)
        skewed = np.zeros(snapshot.capacity, np.bool_)
        undecided = np.ones(snapshot.capacity, np.bool_)
        for c, d in zip(constraints, domains, strict=True):
            eligible = has_all & self._included(pod, snapshot, c)
            counts = self._counts(pod, snapshot, c.selector)
            totals = domain_totals(d, counts, eligible)
            present = np.zeros(len(d.values), np.bool_)
            present[d.ids[eligible]] = True
            domain_count = int(np.count_nonzero(present))
            minimum = int(totals[present].min()) if domain_count else 0
            if domain_count < c.min_domains:
                minimum = 0
            self_match = 1 if c.selector.matches(pod.labels) else 0
            lacking = undecided & ~d.present
            missing |= lacking
            undecided &= d.present
            skew = d.per_slot(totals) + self_match - minimum
            bad = undecided & (skew > c.max_skew)
            skewed |= bad
            undecided &= ~bad
        state.write(_FILTER_KEY, (missing, skewed))
        return None

    def filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: BoolArray
    ) -> ReasonMasks:
        missing, skewed = state.read(_FILTER_KEY)
        return [(REASON_MISSING_LABEL, missing), (REASON, skewed)]

    def pre_score(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, feasible: BoolArray
    ) -> bool:
        constraints = self.constraints(
            pod, SCHEDULE_ANYWAY, snapshot.workloads, _services(snapshot, pod)
        )
        if not constraints:
            return False
        require_all = bool(pod.spread_constraints) or not self.args.system_defaulted
        domains = [topology_domains(snapshot, c.key) for c in constraints]
        has_all = snapshot.live.copy()
        for d in domains:
            has_all &= d.present
        ignored = feasible & ~has_all if require_all else np.zeros_like(feasible)
        scored = feasible & ~ignored
        total = np.zeros(snapshot.capacity, np.float64)
        for c, d in zip(constraints, domains, strict=True):
            counts = self._counts(pod, snapshot, c.selector)
            if c.key == HOSTNAME:
                weight = math.log(int(np.count_nonzero(scored)) + 2)
                cnt = counts
            else:
                ids = _with_empty(d, snapshot.live)
                size = len(d.values) + 1
                present = np.zeros(size, np.bool_)
                present[ids[scored]] = True
                weight = math.log(int(np.count_nonzero(present)) + 2)
                eligible = snapshot.live & self._included(pod, snapshot, c)
                if require_all:
                    eligible &= has_all
                totals = np.bincount(ids[eligible], weights=counts[eligible], minlength=size)
                cnt = np.append(totals.astype(np.int64), 0)[ids]
            term = cnt.astype(np.float64) * weight + float(c.max_skew - 1)
            total += np.where(d.present, term, 0.0)
        floor = np.floor(total)
        raw = floor.astype(np.int64) + (total - floor >= 0.5)
        state.write(_SCORE_KEY, (np.where(scored, raw, 0), ignored))
        return True

    def score(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, feasible: BoolArray
    ) -> IntArray | None:
        saved = state.get(_SCORE_KEY)
        if saved is None:
            return None
        raw: IntArray = saved[0]
        return raw

    def normalize(self, state: CycleState, scores: IntArray, feasible: BoolArray) -> IntArray:
        ignored: BoolArray = state.read(_SCORE_KEY)[1]
        scored = feasible & ~ignored
        if not scored.any():
            return np.zeros_like(scores)
        low = int(scores[scored].min())
        high = max(int(scores[scored].max()), 0)
        if high == 0:
            return np.where(scored, 100, 0).astype(np.int64)
        out: IntArray = np.where(scored, 100 * (high + low - scores) // high, 0)
        return out

    # ------------------------------------------------------------------ reference form

    def _eligible_ref(self, pod: PodInfo, node: NodeState, c: _Constraint) -> bool:
        if c.honor_affinity and not required_matches(pod, node.info):
            return False
        return not (c.honor_taints and untolerated_reason(node.info.taints, pod.tolerations))

    @staticmethod
    def _count_ref(pod: PodInfo, node: NodeState, selector: LabelSelector) -> int:
        if selector.empty:
            return 0
        return sum(
            1
            for p in node.pods
            if p.deletion_timestamp is None
            and p.namespace == pod.namespace
            and selector.matches(p.labels)
        )

    def filter_cluster(self, pod: PodInfo, cluster: Cluster) -> list[list[str]]:
        """kube's calPreFilterState and Filter, node by node."""
        constraints = self.constraints(pod, DO_NOT_SCHEDULE, cluster.workloads)
        if not constraints:
            return [[] for _ in cluster.nodes]
        matched: list[dict[str, int]] = [{} for _ in constraints]
        for node in cluster.nodes:
            labels = node.info.labels
            if not all(c.key in labels for c in constraints):
                continue
            for i, c in enumerate(constraints):
                if not self._eligible_ref(pod, node, c):
                    continue
                value = labels[c.key]
                matched[i][value] = matched[i].get(value, 0) + self._count_ref(
                    pod, node, c.selector
                )
        out: list[list[str]] = []
        for node in cluster.nodes:
            labels = node.info.labels
            reasons: list[str] = []
            for i, c in enumerate(constraints):
                if c.key not in labels:
                    reasons = [REASON_MISSING_LABEL]
                    break
                minimum = min(matched[i].values()) if matched[i] else 0
                if len(matched[i]) < c.min_domains:
                    minimum = 0
                self_match = 1 if c.selector.matches(pod.labels) else 0
                if matched[i].get(labels[c.key], 0) + self_match - minimum > c.max_skew:
                    reasons = [REASON]
                    break
            out.append(reasons)
        return out

    def score_cluster(
        self, pod: PodInfo, feasible: Sequence[NodeState], cluster: Cluster
    ) -> list[int] | None:
        """kube's PreScore, Score and NormalizeScore, node by node."""
        constraints = self.constraints(pod, SCHEDULE_ANYWAY, cluster.workloads)
        if not constraints:
            return None
        require_all = bool(pod.spread_constraints) or not self.args.system_defaulted
        ignored: set[str] = set()
        counts: list[dict[str, int]] = [{} for _ in constraints]
        for node in feasible:
            labels = node.info.labels
            if require_all and not all(c.key in labels for c in constraints):
                ignored.add(node.info.name)
                continue
            for i, c in enumerate(constraints):
                if c.key != HOSTNAME:
                    counts[i].setdefault(labels.get(c.key, ""), 0)
        weights = []
        for i, c in enumerate(constraints):
            size = len(feasible) - len(ignored) if c.key == HOSTNAME else len(counts[i])
            weights.append(math.log(size + 2))
        for node in cluster.nodes:
            labels = node.info.labels
            if require_all and not all(c.key in labels for c in constraints):
                continue
            for i, c in enumerate(constraints):
                if not self._eligible_ref(pod, node, c):
                    continue
                value = labels.get(c.key, "")
                if value in counts[i]:
                    counts[i][value] += self._count_ref(pod, node, c.selector)
        raw: list[int] = []
        for node in feasible:
            labels = node.info.labels
            if node.info.name in ignored:
                raw.append(0)
                continue
            score = 0.0
            for i, c in enumerate(constraints):
                if c.key in labels:
                    if c.key == HOSTNAME:
                        cnt = self._count_ref(pod, node, c.selector)
                    else:
                        cnt = counts[i][labels[c.key]]
                    score += float(cnt) * weights[i] + float(c.max_skew - 1)
            raw.append(go_round(score))
        kept = [s for n, s in zip(feasible, raw, strict=True) if n.info.name not in ignored]
        low = min(kept, default=0)
        high = max([0, *kept])
        out = []
        for n, s in zip(feasible, raw, strict=True):
            if n.info.name in ignored:
                out.append(0)
            elif high == 0:
                out.append(100)
            else:
                out.append(100 * (high + low - s) // high)
        return out


def _services(snapshot: Snapshot, pod: PodInfo) -> Iterable[WorkloadInfo]:
    return snapshot.services.get(pod.namespace, {}).values()


def _with_empty(d: Domains, live: BoolArray) -> IntArray:
    """Domain ids where a live node without the key reads as the value "" (Go's zero value
    for a missing map key), as kube's scoring does for system-default constraints."""
    ids = d.ids.copy()
    empty = d.values.index("") if "" in d.values else len(d.values)
    ids[live & (ids < 0)] = empty
    return ids


def new(args: Mapping[str, Any] | None, path: str) -> PodTopologySpread:
    return PodTopologySpread(parse_args(args, path))


__all__ = [
    "NAME",
    "REASON",
    "REASON_MISSING_LABEL",
    "SYSTEM_DEFAULT_CONSTRAINTS",
    "PodTopologySpread",
    "PodTopologySpreadArgs",
    "new",
    "parse_args",
]
