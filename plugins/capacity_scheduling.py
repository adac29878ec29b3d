"""CapacityScheduling (PreFilter, Reserve): ElasticQuotas as scheduler-plugins'
plugin of that name enforces them (`docs/quotas.md`).

Without any ElasticQuota in the cluster every point is a no-op. With them:

- **PreFilter** rejects a pod of a namespace with a quota when the namespace's usage, the pod
  and the pods of its namespace nominated with at least its priority exceed `max`
  (``Pod ns/p is rejected in PreFilter because ElasticQuota ns is more than Max``), or when
  the usage of all quotas together, the pod and the nominated pods that count exceed the
  total guaranteed quota, the sum of the mins (``... because total ElasticQuota used is more
  than min``). Such a rejection is one eviction may cure: PostFilter looks at every node.
- **Reserve / Unreserve** count the pod in its namespace's usage and take it out (the cache
  counts it from the moment it is assumed; both are idempotent by pod key).
- **Reclaim** is DefaultPreemption's PostFilter, the one preemption
  (`scheduler.core.preemption`), with the `VictimPolicy` this plugin writes in the cycle
  state at PreFilter: a pod whose namespace
  stays within its min with the pod may evict pods of other namespaces that are above their
  min (borrowers), whatever their priority, least important first and only while their
  namespace is still above its min; a pod whose namespace goes above its min evicts only pods
  of its own namespace of lower priority; a pod of a namespace without a quota evicts only
  lower-priority pods of namespaces without one. The quota must hold once the victims are
  gone (``global quota max exceeded`` otherwise), and victims are reprieved, most important
  first, while the pod still fits and the quota holds. A gang preemptor is judged whole: each
  member with the members placed before it counted and their victims gone
  (`QuotaPolicy.for_member`). This plugin has no PostFilter of its
  own (scheduler-plugins' configuration puts CapacityScheduling at postFilter in place of
  DefaultPreemption; here DefaultPreemption stays and applies the policy, and a profile
  without DefaultPreemption preempts nothing, as before).

Args: none (scheduler-plugins' `kubeConfigPath` is not needed: objects come from the cache).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.core.config import strict_mapping
from scheduler.core.framework import CycleState, PreFilterResult
from scheduler.core.model import PodInfo
from scheduler.core.preemption import VICTIM_POLICY_KEY
from scheduler.core.quota import (
    QuotaInfo,
    QuotaState,
    aggregated_used_over_min_with,
    pod_request,
)
from scheduler.core.snapshot import Snapshot

__all__ = ["NAME", "CapacityScheduling", "QuotaPolicy", "new", "pre_filter_state"]

NAME = "CapacityScheduling"
QUOTAS_KEY = "CapacityScheduling/quotas"
"""CycleState key of the snapshot's QuotaState (Reserve and Unreserve write usage there)."""
GLOBAL_MAX_EXCEEDED = "global quota max exceeded"


def _sum(*parts: Mapping[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in parts:
        for name, amount in part.items():
            out[name] = out.get(name, 0) + amount
    return out


def over_max_message(pod: PodInfo) -> str:
    return (
        f"Pod {pod.namespace}/{pod.name} is rejected in PreFilter because ElasticQuota "
        f"{pod.namespace} is more than Max"
    )


def over_min_message(pod: PodInfo) -> str:
    return (
        f"Pod {pod.namespace}/{pod.name} is rejected in PreFilter because total ElasticQuota "
        "used is more than min"
    )


@dataclass(frozen=True, slots=True)
class QuotaPolicy:
    """scheduler-plugins' PreFilterState and ElasticQuotaSnapshotState for one pod, and the
    victim policy preemption reads (`scheduler.core.preemption.VictimPolicy`)."""

    infos: Mapping[str, QuotaInfo]
    pod_req: Mapping[str, int]
    # the pod with the nominated pods of its namespace of at least its priority
    in_eq_with_pod_req: Mapping[str, int] = field(default_factory=dict)
    # ... and the nominated pods of other namespaces whose quota is not above its min
    all_with_pod_req: Mapping[str, int] = field(default_factory=dict)
    rejected: bool = False
    nominated: tuple[PodInfo, ...] = ()  # every pod nominated at PreFilter (counted apart)
    gone: frozenset[str] = frozenset()  # pods already out of `infos` (a gang's earlier victims)

    def _more_than_min(self, preemptor: PodInfo) -> bool:
        mine = self.infos.get(preemptor.namespace)
        return mine is None or mine.used_over_min_with(self.in_eq_with_pod_req)

    def _takes(
        self, preemptor: PodInfo, pod: PodInfo, infos: Mapping[str, QuotaInfo], more: bool
    ) -> bool:
        info = infos.get(pod.namespace)
        if preemptor.namespace not in infos:
            return info is None and pod.priority < preemptor.priority
        if info is None:
            return False
        if more:  # above its min: only its own namespace, by priority
            return pod.namespace == preemptor.namespace and pod.priority < preemptor.priority
        # within its min: borrowers, while they are above their min
        return pod.namespace != preemptor.namespace and info.used_over_min()

    def potential(
        self,
        preemptor: PodInfo,
        pods: Sequence[PodInfo],
        together: Callable[[PodInfo], Sequence[PodInfo]],
    ) -> set[str]:
        infos = dict(self.infos)
        more = self._more_than_min(preemptor)
        chosen: set[str] = set()
        freed: set[str] = set(self.gone)
        for pod in pods:  # least important first; each taken frees its namespace's usage
            if pod.key not in freed and not self._takes(preemptor, pod, infos, more):
                continue
            chosen.add(pod.key)
            for gone in together(pod):  # a group member frees its whole group's usage
                info = infos.get(gone.namespace)
                if gone.key not in freed and info is not None:
                    infos[gone.namespace] = info.without([pod_request(gone)])
                freed.add(gone.key)
        return chosen

    def may_evict(self, preemptor: PodInfo, pod: PodInfo) -> bool:
        return self._takes(preemptor, pod, self.infos, self._more_than_min(preemptor))

    def admits(self, preemptor: PodInfo, removed: Sequence[PodInfo], nominated: bool) -> bool:
        mine = self.infos.get(preemptor.namespace)
        if mine is None:
            return True
        gone: dict[str, list[dict[str, int]]] = {}
        for pod in removed:
            if pod.key not in self.gone:
                gone.setdefault(pod.namespace, []).append(pod_request(pod))
        infos = {ns: info.without(gone.get(ns, ())) for ns, info in self.infos.items()}
        own = self.in_eq_with_pod_req if nominated else self.pod_req
        total = self.all_with_pod_req if nominated else self.pod_req
        return not (
            infos[preemptor.namespace].used_over_max_with(own)
            or aggregated_used_over_min_with(infos.values(), total)
        )

    def for_member(
        self, member: PodInfo, placed: Sequence[PodInfo], evicted: Sequence[PodInfo]
    ) -> QuotaPolicy:
        """PreFilter's policy for the next member of a gang preemptor: the members placed
        before it counted in their namespace's usage, the victims chosen for them gone. The
        group's own nominations no longer hold room: its members are counted as placed."""
        infos = {
            ns: info.without(pod_request(p) for p in evicted if p.namespace == ns).plus(
                pod_request(p) for p in placed if p.namespace == ns
            )
            for ns, info in self.infos.items()
        }
        group = member.pod_group.key if member.pod_group is not None else None
        nominated = tuple(
            p for p in self.nominated if p.pod_group is None or p.pod_group.key != group
        )
        policy = _policy(member, infos, nominated)[0]
        return dataclasses.replace(policy, gone=frozenset(p.key for p in evicted))

    def terminating(self, preemptor: PodInfo, pods: Sequence[PodInfo]) -> bool:
        """scheduler-plugins' PodEligibleToPreemptOthers on the nominated node."""
        mine = self.infos.get(preemptor.namespace)
        if mine is None:
            return any(
                p.deletion_timestamp is not None
                and p.namespace not in self.infos
                and p.priority < preemptor.priority
                for p in pods
            )
        more = mine.used_over_min_with(self.in_eq_with_pod_req)
        for p in pods:
            info = self.infos.get(p.namespace)
            if p.deletion_timestamp is None or info is None:
                continue
            if p.namespace == preemptor.namespace and p.priority < preemptor.priority:
                return True
            if p.namespace != preemptor.namespace and not more and info.used_over_min():
                return True
        return False

    def no_victims(self, node: str, preemptor: PodInfo) -> str:
        return f"No victims found on node {node} for preemptor pod {preemptor.name}"

    def not_admitted(self) -> str:
        return GLOBAL_MAX_EXCEEDED


def pre_filter_state(pod: PodInfo, quotas: QuotaState) -> tuple[QuotaPolicy, str | None]:
    """CapacityScheduling's PreFilter on a quota state: the policy and the rejection."""
    return _policy(pod, quotas.infos(), quotas.nominated)


def _policy(
    pod: PodInfo, infos: Mapping[str, QuotaInfo], nominated: tuple[PodInfo, ...]
) -> tuple[QuotaPolicy, str | None]:
    request = pod_request(pod)
    mine = infos.get(pod.namespace)
    if mine is None:
        return QuotaPolicy(infos, request, request, request, nominated=nominated), None
    in_eq: list[Mapping[str, int]] = [request]
    everyone: list[Mapping[str, int]] = [request]
    for other in nominated:
        info = infos.get(other.namespace)
        if other.key == pod.key or info is None:
            continue
        if other.namespace == pod.namespace and other.priority >= pod.priority:
            in_eq.append(pod_request(other))
            everyone.append(pod_request(other))
        elif other.namespace != pod.namespace and not info.used_over_min():
            everyone.append(pod_request(other))
    in_eq_req, all_req = _sum(*in_eq), _sum(*everyone)
    message = None
    if mine.used_over_max_with(in_eq_req):
        message = over_max_message(pod)
    elif aggregated_used_over_min_with(infos.values(), all_req):
        message = over_min_message(pod)
    policy = QuotaPolicy(infos, request, in_eq_req, all_req, message is not None, nominated)
    return policy, message


class CapacityScheduling:
    name = NAME

    def pre_filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot
    ) -> PreFilterResult | None:
        quotas = snapshot.quotas
        if not quotas.active:
            return None
        state.write(QUOTAS_KEY, quotas)
        policy, message = pre_filter_state(pod, quotas)
        state.write(VICTIM_POLICY_KEY, policy)
        return PreFilterResult(unschedulable=message) if message is not None else None

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> str | None:
        quotas: QuotaState | None = state.get(QUOTAS_KEY)
        if quotas is not None:
            quotas.add_pod(pod)
        return None

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        quotas: QuotaState | None = state.get(QUOTAS_KEY)
        if quotas is not None:
            quotas.remove_pod(pod)


def new(args: Mapping[str, Any] | None, path: str) -> CapacityScheduling:
    strict_mapping(args, path, {"kubeConfigPath"})
    return CapacityScheduling()
