"""Quotas: scheduler-plugins' ElasticQuota (`scheduling.x-k8s.io/v1alpha1`) and its arithmetic.

An ElasticQuota gives a namespace a guaranteed `spec.min` and a ceiling `spec.max` (resource
lists); `status.used` is what the namespace's pods on nodes (bound, or assumed by us) request.
The CapacityScheduling plugin (`plugins/capacity_scheduling.py`) enforces them as
scheduler-plugins' plugin of that name does; this module holds the values, the comparisons
(scheduler-plugins' `elasticquota.go`, exactly) and the state the cache keeps:

- **Bounds.** A resource list that is given compares every one of cpu, memory,
  ephemeral-storage and pods, the ones it does not list at 0; an extended resource it does
  not list is unbounded in `max` and 0 in `min`. A `min` or `max` left out entirely is 0 /
  unbounded for every resource.
- **Over** (`cmp2`): `used + request` is over a bound when cpu, memory, ephemeral-storage or
  pods exceed it, or any other resource the left side names does.
- **Usage** is kept by `QuotaState` (held by the snapshot, written by the cache like every
  node's usage): every pod on a node of a namespace that has a quota, counted once by its key;
  pods nominated to a node are not usage (CapacityScheduling counts them apart).

A malformed ElasticQuota raises `ModelError` naming the object and the field; the cache keeps
the last good version meanwhile (`Cache.set_unreadable_quota`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.core.model import PodInfo, _resources, object_identity

__all__ = [
    "BASE_RESOURCES",
    "KIND",
    "LOWER_BOUND_OF_MIN",
    "UPPER_BOUND_OF_MAX",
    "ElasticQuota",
    "QuotaInfo",
    "QuotaState",
    "aggregated_used_over_min_with",
    "pod_request",
]

KIND = "ElasticQuota"
API_GROUP = "scheduling.x-k8s.io"
UPPER_BOUND_OF_MAX = 2**63 - 1  # scheduler-plugins' UpperBoundOfMax (math.MaxInt64)
LOWER_BOUND_OF_MIN = 0
# framework.Resource's own fields: always compared, at 0 when a given list omits them
BASE_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pods")
# what a left-out min or max becomes (makeResourceListForBound: pods stays 0)
_BOUNDED = ("cpu", "memory", "ephemeral-storage")

Amounts = Mapping[str, int]


def pod_request(pod: PodInfo) -> dict[str, int]:
    """What a pod counts against its quota: its effective requests (the scheduler's, kube's
    PodRequests), without `pods` (scheduler-plugins never counts a pod as a pod)."""
    return {name: amount for name, amount in pod.requests.items() if name != "pods"}


def _add(into: dict[str, int], other: Amounts, sign: int = 1) -> None:
    for name, amount in other.items():
        into[name] = into.get(name, 0) + sign * amount


def _total(requests: Iterable[Amounts]) -> dict[str, int]:
    out: dict[str, int] = {}
    for request in requests:
        _add(out, request)
    return out


def _bound(limits: Amounts | None, name: str, bound: int) -> int:
    """The bound on one resource: listed, else 0 for framework.Resource's own fields, else
    `bound` (for a list left out entirely: `bound` for cpu, memory, ephemeral-storage)."""
    if limits is None:
        return bound if name in _BOUNDED or name not in BASE_RESOURCES else 0
    if name in limits:
        return limits[name]
    return 0 if name in BASE_RESOURCES else bound


def _over(x1: Amounts, x2: Amounts, y: Amounts | None, bound: int) -> bool:
    """scheduler-plugins' cmp2: x1 + x2 exceeds y in a base resource or in a resource of x1."""
    for name in BASE_RESOURCES:
        if x1.get(name, 0) + x2.get(name, 0) > _bound(y, name, bound):
            return True
    for name, amount in x1.items():
        if name not in BASE_RESOURCES and amount + x2.get(name, 0) > _bound(y, name, bound):
            return True
    return False


# ---------------------------------------------------------------------------- the object


@dataclass(frozen=True, slots=True)
class ElasticQuota:
    """One ElasticQuota: the namespace's guaranteed `min` and ceiling `max` (None: not set),
    in kube's units (milli-CPU, bytes, counts)."""

    namespace: str
    name: str
    min: Amounts | None = field(default=None, hash=False)
    max: Amounts | None = field(default=None, hash=False)
    uid: str = ""
    resource_version: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def from_object(cls, obj: Any) -> ElasticQuota:
        where, meta, name, namespace = object_identity(obj, KIND, namespaced=True)
        spec = where.mapping(obj.get("spec"), "spec")
        limits: list[Amounts | None] = []
        for part in ("min", "max"):
            raw = spec.get(part)
            limits.append(None if raw is None else _resources(raw, where, f"spec.{part}"))
        return cls(
            namespace,
            name,
            limits[0],
            limits[1],
            where.string(meta.get("uid"), "metadata.uid", ""),
            where.string(meta.get("resourceVersion"), "metadata.resourceVersion", ""),
        )


# ---------------------------------------------------------------------------- the arithmetic


@dataclass(frozen=True, slots=True)
class QuotaInfo:
    """A namespace's quota with its usage (scheduler-plugins' ElasticQuotaInfo)."""

    namespace: str
    min: Amounts | None
    max: Amounts | None
    used: Amounts = field(default_factory=dict)
    name: str = ""

    def used_over_min_with(self, request: Amounts) -> bool:
        return _over(request, self.used, self.min, LOWER_BOUND_OF_MIN)

    def used_over_max_with(self, request: Amounts) -> bool:
        return _over(request, self.used, self.max, UPPER_BOUND_OF_MAX)

    def used_over_min(self) -> bool:
        return _over(self.used, {}, self.min, LOWER_BOUND_OF_MIN)

    def min_of(self, name: str) -> int:
        return _bound(self.min, name, LOWER_BOUND_OF_MIN)

    def without(self, requests: Iterable[Amounts]) -> QuotaInfo:
        """The same quota with `requests` no longer used (pods removed)."""
        return self._moved(requests, -1)

    def plus(self, requests: Iterable[Amounts]) -> QuotaInfo:
        """The same quota with `requests` used as well (pods placed)."""
        return self._moved(requests, 1)

    def _moved(self, requests: Iterable[Amounts], sign: int) -> QuotaInfo:
        used = dict(self.used)
        for request in requests:
            _add(used, request, sign)
        return dataclasses.replace(self, used=used)

    def dominant_share(self) -> float:
        """The largest used / min over the resources the quota names (in `min` or `max`):
        0 when nothing is used, infinite when a resource is used with no guarantee."""
        names = set(self.min or ()) | set(self.max or ())
        share = 0.0
        for name in names:
            used = self.used.get(name, 0)
            if used <= 0:
                continue
            guaranteed = self.min_of(name)
            share = max(share, used / guaranteed if guaranteed > 0 else math.inf)
        return share


def aggregated_used_over_min_with(infos: Iterable[QuotaInfo], request: Amounts) -> bool:
    """The quotas' usage together, with `request`, over their mins together."""
    infos = list(infos)
    used = _total(info.used for info in infos)
    # every bound of a min is 0 where it lists nothing (LowerBoundOfMin): the sum of the lists
    minimum = _total(info.min or {} for info in infos)
    _add(used, request)
    return _over(used, {}, minimum, LOWER_BOUND_OF_MIN)


# ---------------------------------------------------------------------------- the state


class QuotaState:
    """The ElasticQuotas of the cluster and their namespaces' usage (held by the snapshot;
    written by the cache). One quota per namespace: the first one seen; another in the same
    namespace is kept aside (scheduler-plugins supports one) and takes over when it goes."""

    def __init__(self) -> None:
        self.objects: dict[str, ElasticQuota] = {}  # every ElasticQuota by ns/name, in order
        self.quotas: dict[str, ElasticQuota] = {}  # the one in force per namespace
        self.used: dict[str, dict[str, int]] = {}  # per namespace with a quota
        self._pods: dict[str, dict[str, dict[str, int]]] = {}  # ns -> pod key -> request
        self.unreadable: dict[str, str] = {}  # ns/name -> why its latest version is refused
        # the nominated pods counted for the decision under way (Cache.nominated)
        self.nominated: tuple[PodInfo, ...] = ()
        self.generation = 0

    @property
    def active(self) -> bool:
        """Whether any namespace has a quota (without one, quotas change nothing)."""
        return bool(self.quotas)

    # -- objects ---------------------------------------------------------------------------

    def set_quota(self, quota: ElasticQuota, pods: Iterable[PodInfo] = ()) -> None:
        """A quota added or changed. `pods`: every pod on a node (only read when its
        namespace had no quota: its usage is counted then)."""
        self.objects[quota.key] = quota
        self.unreadable.pop(quota.key, None)
        self._elect(quota.namespace, pods)
        self.generation += 1

    def remove_quota(self, namespace: str, name: str, pods: Iterable[PodInfo] = ()) -> None:
        self.objects.pop(f"{namespace}/{name}", None)
        self.unreadable.pop(f"{namespace}/{name}", None)
        self._elect(namespace, pods)
        self.generation += 1

    def set_unreadable(self, namespace: str, name: str, problem: str) -> bool:
        """The latest version of a quota cannot be read: the last good one stays in force.
        True when the problem is new (to be reported)."""
        key = f"{namespace}/{name}"
        new = self.unreadable.get(key) != problem
        self.unreadable[key] = problem
        return new

    def _elect(self, namespace: str, pods: Iterable[PodInfo]) -> None:
        chosen = next((q for q in self.objects.values() if q.namespace == namespace), None)
        if chosen is None:
            self.quotas.pop(namespace, None)
            self.used.pop(namespace, None)
            self._pods.pop(namespace, None)
            return
        had = namespace in self.quotas
        self.quotas[namespace] = chosen
        if not had:
            self.used[namespace] = {}
            self._pods[namespace] = {}
            for pod in pods:
                if pod.namespace == namespace:
                    self.add_pod(pod)

    # -- usage -----------------------------------------------------------------------------

    def add_pod(self, pod: PodInfo) -> None:
        """A pod on a node (bound or assumed): counted once, if its namespace has a quota."""
        pods = self._pods.get(pod.namespace)
        if pods is None or pod.key in pods:
            return
        request = pod_request(pod)
        pods[pod.key] = request
        _add(self.used[pod.namespace], request)
        self.generation += 1

    def remove_pod(self, pod: PodInfo) -> None:
        pods = self._pods.get(pod.namespace)
        if pods is None:
            return
        request = pods.pop(pod.key, None)
        if request is not None:
            _add(self.used[pod.namespace], request, -1)
            self.generation += 1

    def counts(self, key: str, namespace: str) -> bool:
        """Whether a pod is counted in its namespace's usage."""
        return key in self._pods.get(namespace, {})

    # -- reading ---------------------------------------------------------------------------

    def info(self, namespace: str) -> QuotaInfo | None:
        quota = self.quotas.get(namespace)
        if quota is None:
            return None
        used = {k: v for k, v in self.used[namespace].items() if v}
        return QuotaInfo(namespace, quota.min, quota.max, used, quota.name)

    def infos(self) -> dict[str, QuotaInfo]:
        """Every namespace's quota with its usage (a snapshot: later changes do not show)."""
        return {ns: info for ns in self.quotas if (info := self.info(ns)) is not None}

    def dominant_share(self, namespace: str) -> float:
        """The namespace's dominant share (0 for a namespace without a quota)."""
        info = self.info(namespace)
        return info.dominant_share() if info is not None else 0.0

    def shared(self) -> QuotaState:
        """A copy whose usage can change apart (the objects are shared, read only)."""
        view = QuotaState()
        view.objects = self.objects
        view.quotas = self.quotas
        view.used = {ns: dict(used) for ns, used in self.used.items()}
        view._pods = {ns: dict(pods) for ns, pods in self._pods.items()}
        view.unreadable = self.unreadable
        return view

    # -- pod groups ------------------------------------------------------------------------

    def check_group(self, pods: Sequence[PodInfo]) -> str | None:
        """Whether a pod group fits its namespace's quota as a whole: the members not yet
        counted (pending) together against `max`, and against the total guaranteed quota,
        as CapacityScheduling's PreFilter checks one pod. None when it fits (or has no
        quota), else the message, in scheduler-plugins' wording."""
        pending = [p for p in pods if not self.counts(p.key, p.namespace)]
        if not pending or not self.active:
            return None
        namespace = pending[0].namespace
        info = self.info(namespace)
        if info is None:
            return None
        group = pending[0].pod_group
        label = f"PodGroup {group.key}" if group is not None else f"Pods of {namespace}"
        request = _total(pod_request(p) for p in pending)
        count = f"({len(pending)} pending pods)"
        if info.used_over_max_with(request):
            return (
                f"{label} {count} is rejected in PreFilter because ElasticQuota "
                f"{namespace} is more than Max"
            )
        if aggregated_used_over_min_with(self.infos().values(), request):
            return (
                f"{label} {count} is rejected in PreFilter because total ElasticQuota used "
                "is more than min"
            )
        return None
