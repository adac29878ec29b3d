"""What the API server serves, read once at startup, and what that turns off.

topo-scheduler needs the core API (pods, pods/binding, pods/status, nodes, configmaps) of any
supported Kubernetes. Two groups it uses came later: `events.k8s.io/v1` (1.19) and
`coordination.k8s.io/v1` Leases (1.14). Without the first, Events are written as core/v1
Events (kube's event broadcaster adapter does the same); without the second, leader election
cannot run and startup fails with a message saying so. A server whose discovery cannot be read
(forbidden, or a test server without it) is taken to serve both.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import structlog

from scheduler.kube.client import ApiError, KubeClient

log = structlog.get_logger("topo_scheduler")

EVENTS_V1 = "events.k8s.io/v1"
LEASES_V1 = "coordination.k8s.io/v1"


@dataclass(frozen=True)
class ServerAPIs:
    version: str = ""  # gitVersion from /version, "" when unknown
    events_v1: bool = True
    leases_v1: bool = True

    def missing(self) -> list[str]:
        return [
            gv for gv, ok in ((EVENTS_V1, self.events_v1), (LEASES_V1, self.leases_v1)) if not ok
        ]


async def discover(client: KubeClient) -> ServerAPIs:
    """Read /version and /apis; never raises for an unreadable discovery."""
    version_answer, groups_answer = await asyncio.gather(
        client.get("/version"), client.get("/apis"), return_exceptions=True
    )
    version = ""
    if isinstance(version_answer, dict):
        version = str(version_answer.get("gitVersion") or "")
    if isinstance(groups_answer, BaseException):
        if not isinstance(groups_answer, ApiError):
            raise groups_answer
        log.info(
            "API discovery unavailable, assuming every API is served", error=str(groups_answer)
        )
        return ServerAPIs(version)
    groups = groups_answer
    served = {
        str(v.get("groupVersion"))
        for g in groups.get("groups") or []
        if isinstance(g, dict)
        for v in g.get("versions") or []
        if isinstance(v, dict)
    }
    apis = ServerAPIs(version, EVENTS_V1 in served, LEASES_V1 in served)
    if not apis.events_v1:
        log.warning(
            f"API server {version or '(unknown version)'} does not serve {EVENTS_V1} "
            "(Kubernetes < 1.19): Events are written as core/v1 Events"
        )
    if not apis.leases_v1:
        log.warning(
            f"API server {version or '(unknown version)'} does not serve {LEASES_V1} "
            "(Kubernetes < 1.14): leader election is unavailable"
        )
    return apis
