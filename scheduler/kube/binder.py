"""The Kubernetes implementation of the core's `Binder`: one POST of pods/binding per pod.

Beside the simulator's in-memory binder and `explain`'s dry-run binder, this one talks to the
API server. It gets the client, the metrics and one question to ask right before a request
leaves (is this binding still wanted?), nothing else of the scheduler. It is also the core's
`ClaimStatusWriter`: DynamicResources' PreBind writes a ResourceClaim's allocation and
reservation through it (`claims.write_claim_status`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import structlog

from scheduler.core.dra.types import AllocationResult, ResourceClaim
from scheduler.core.framework import BindOutcome, BindResult
from scheduler.core.model import PodInfo
from scheduler.core.topology.schema import ANNOTATION_GPUS, format_gpu_indices
from scheduler.kube import claims
from scheduler.kube.client import Abandoned, ApiError, KubeClient
from scheduler.kube.metrics import Metrics
from scheduler.kube.ratelimit import Priority

Obj = dict[str, Any]
log = structlog.get_logger("topo_scheduler")


class KubeBinder:
    """The Binder of the in-cluster scheduler: one POST of pods/binding per pod, at most
    `max_in_flight` at a time.

    The GPU set travels as an annotation of the Binding: the API server merges a Binding's
    `metadata.annotations` into the pod's in the same write that sets `spec.nodeName`
    (registry/core/pod/storage), so one request annotates and binds, and a binding that fails
    leaves no annotation behind.

    `still_wanted(pod, node)` is asked before the request is built and again right before it
    leaves, after the client's rate-limit wait (a node deleted meanwhile must not receive the
    pod, a pod no longer assumed is not bound, nothing starts once leadership is lost).
    """

    def __init__(
        self,
        client: KubeClient,
        metrics: Metrics,
        still_wanted: Callable[[PodInfo, str], bool],
        *,
        max_in_flight: int,
    ) -> None:
        self.client = client
        self.metrics = metrics
        self.still_wanted = still_wanted
        self._slots = asyncio.Semaphore(max_in_flight)

    async def bind(self, pod: PodInfo, node: str, gpus: tuple[int, ...]) -> BindResult:
        async with self._slots:
            t0 = time.perf_counter()
            result = await self._post(pod, node, gpus)
            elapsed = time.perf_counter() - t0
        self.metrics.bind_results.labels(result.outcome.value).inc()
        self.metrics.binding_duration.labels(result.outcome.value).observe(elapsed)
        return result

    async def write_claim_status(
        self, claim: ResourceClaim, allocation: AllocationResult | None, pod: PodInfo
    ) -> ResourceClaim:
        """DynamicResources' PreBind (kube's bindClaim): the finalizer, then
        `status.allocation` (when given) and the pod in `status.reservedFor`, through the
        status subresource, retried on a conflict (`claims.write_claim_status`)."""
        return await claims.write_claim_status(self.client, claim, allocation, pod)

    async def deallocate_claim(self, claim: ResourceClaim) -> ResourceClaim:
        """DynamicResources' PostFilter: the claim's allocation cleared on the version
        PreFilter saw (`claims.deallocate_claim`)."""
        return await claims.deallocate_claim(self.client, claim)

    async def unreserve_claim(self, claim: ResourceClaim, pod: PodInfo) -> ResourceClaim:
        """DynamicResources' Unreserve: the pod out of `status.reservedFor`
        (`claims.unreserve_claim`)."""
        return await claims.unreserve_claim(self.client, claim, pod)

    async def _post(self, pod: PodInfo, node: str, gpus: tuple[int, ...]) -> BindResult:
        def still_wanted() -> bool:
            return self.still_wanted(pod, node)

        if not still_wanted():
            return BindResult(BindOutcome.ABORTED)
        metadata: Obj = {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid}
        if gpus:
            metadata["annotations"] = {ANNOTATION_GPUS: format_gpu_indices(gpus)}
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            # the answer is a Status, not a Pod: only the status code matters
            await self.client.post(
                f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/binding",
                binding,
                priority=Priority.BIND,
                still_wanted=still_wanted,
            )
        except Abandoned:
            return BindResult(BindOutcome.ABORTED)
        except ApiError as exc:
            if exc.status == 404:
                return BindResult(BindOutcome.GONE)
            if exc.status == 409:
                log.info("binding conflict", pod=pod.key, node=node, message=exc.message)
                return BindResult(BindOutcome.CONFLICT, str(exc))
            log.warning("binding failed", pod=pod.key, node=node, error=str(exc))
            return BindResult(BindOutcome.ERROR, str(exc))
        return BindResult(BindOutcome.BOUND)
