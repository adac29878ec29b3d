"""DynamicResources' claim writes against the API server, through the status subresource:
PreBind's allocation and reservation (kube's bindClaim), PostFilter's deallocation and
Unreserve's removal of the pod from `reservedFor`.

`write_claim_status(client, claim, allocation, pod)` is what the Kubernetes binder's
`write_claim_status` (`ClaimStatusWriter` of the core) delegates to: the finalizer
`resource.kubernetes.io/delete-protection` is added first with a plain update when
allocating, then the status is PUT to `.../resourceclaims/<name>/status`; on a 409 conflict
the claim is read again and the write retried (client-go's retry.DefaultRetry: five tries,
10 ms apart).

`deallocate_claim(client, claim)` writes the version PreFilter saw with allocation and
reservedFor cleared: a conflict means the claim changed since, and is the answer (kube's
PostFilter returns that error). `unreserve_claim(client, claim, pod)` removes the pod's
entries from `reservedFor` of the latest version (kube patches with `$patch: delete`; here a
write of the latest version, read again on a conflict, which needs no strategic-merge
directive).
"""

from __future__ import annotations

import asyncio
from typing import Any

from scheduler.core.dra.state import (
    FINALIZER,
    ClaimWriteError,
    claim_with_status,
    deallocated,
    unreserved,
)
from scheduler.core.dra.types import AllocationResult, ResourceClaim
from scheduler.core.model import PodInfo
from scheduler.kube.client import ApiError, KubeClient
from scheduler.kube.ratelimit import Priority

__all__ = ["RESOURCE_CLAIMS_V1", "deallocate_claim", "unreserve_claim", "write_claim_status"]

RESOURCE_CLAIMS_V1 = "/apis/resource.k8s.io/v1"
_TRIES = 5
_DELAY = 0.01


def _path(claim: ResourceClaim) -> str:
    return f"{RESOURCE_CLAIMS_V1}/namespaces/{claim.namespace}/resourceclaims/{claim.name}"


async def write_claim_status(
    client: KubeClient,
    claim: ResourceClaim,
    allocation: AllocationResult | None,
    pod: PodInfo,
) -> ResourceClaim:
    """The claim as the API server stored it; ClaimWriteError with kube's message."""
    current: dict[str, Any] = dict(claim.raw)
    for attempt in range(_TRIES):
        if attempt:
            await asyncio.sleep(_DELAY)
            try:
                current = await client.get(_path(claim), priority=Priority.BIND)
            except ApiError as exc:
                raise ClaimWriteError(
                    f"get updated claim {claim.key} after conflict: {exc}"
                ) from None
        try:
            if allocation is not None:
                meta = current.get("metadata") or {}
                if (
                    meta.get("deletionTimestamp") is None
                    and current.get("status", {}).get("allocation") is None
                    and FINALIZER not in (meta.get("finalizers") or [])
                ):
                    with_finalizer = dict(current)
                    with_finalizer["metadata"] = dict(meta)
                    with_finalizer["metadata"]["finalizers"] = [
                        *(meta.get("finalizers") or []),
                        FINALIZER,
                    ]
                    try:
                        current = await client.put(
                            _path(claim), with_finalizer, priority=Priority.BIND
                        )
                    except ApiError as exc:
                        if exc.status == 409:
                            continue
                        raise ClaimWriteError(
                            f"add finalizer to claim {claim.key}: {exc}"
                        ) from None
            body = claim_with_status(current, allocation, pod.name, pod.uid)
            written = await client.put(f"{_path(claim)}/status", body, priority=Priority.BIND)
        except ApiError as exc:
            if exc.status == 409:
                continue
            what = "add allocation and reservation to" if allocation else "add reservation to"
            raise ClaimWriteError(f"{what} claim {claim.key}: {exc}") from None
        return ResourceClaim.from_object(written)
    raise ClaimWriteError(
        f"claim {claim.key}: the object has been modified; gave up after {_TRIES} conflicts"
    )


async def deallocate_claim(client: KubeClient, claim: ResourceClaim) -> ResourceClaim:
    """The claim as stored with no allocation; ClaimWriteError (a conflict included)."""
    try:
        written = await client.put(
            f"{_path(claim)}/status", deallocated(claim.raw), priority=Priority.BIND
        )
    except ApiError as exc:
        raise ClaimWriteError(f"deallocate claim {claim.key}: {exc}") from None
    return ResourceClaim.from_object(written)


async def unreserve_claim(client: KubeClient, claim: ResourceClaim, pod: PodInfo) -> ResourceClaim:
    """The claim as stored without the pod in `reservedFor`; ClaimWriteError on failure."""
    current: dict[str, Any] = dict(claim.raw)
    for attempt in range(_TRIES):
        try:
            if attempt:
                await asyncio.sleep(_DELAY)
                current = await client.get(_path(claim), priority=Priority.BIND)
            written = await client.put(
                f"{_path(claim)}/status", unreserved(current, pod.uid), priority=Priority.BIND
            )
        except ApiError as exc:
            if exc.status == 409:
                continue
            raise ClaimWriteError(f"remove {pod.key} from claim {claim.key}: {exc}") from None
        return ResourceClaim.from_object(written)
    raise ClaimWriteError(
        f"claim {claim.key}: the object has been modified; gave up after {_TRIES} conflicts"
    )
