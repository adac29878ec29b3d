"""What the API server serves, read once at startup, and what that turns off.

topo-scheduler needs the core API (pods, pods/binding, pods/status, nodes, configmaps) of any
supported Kubernetes. Two groups it uses came later: `events.k8s.io/v1` (1.19) and
`coordination.k8s.io/v1` Leases (1.14). Without the first, Events are written as core/v1
Events (kube's event broadcaster adapter does the same); without the second, leader election
cannot run and startup fails with a message saying so. A server whose discovery cannot be read
(forbidden, or a test server without it) is taken to serve both. The informers of APIs the
server does not list (PodDisruptionBudgets `policy/v1` before 1.21, ResourceClaims, PodGroup
CRDs) start empty without asking, and say what is off.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from scheduler.kube.client import ApiError, KubeClient

log = structlog.get_logger("topo_scheduler")

EVENTS_V1 = "events.k8s.io/v1"
LEASES_V1 = "coordination.k8s.io/v1"


@dataclass(frozen=True)
class ServerAPIs:
    version: str = ""  # gitVersion from /version, "" when unknown
    # the group/versions /apis lists; None when discovery could not be read (all assumed)
    group_versions: frozenset[str] | None = None

    def serves(self, group_version: str) -> bool:
        """Whether the server serves `group/version` (True when unknown: then the informers
        find out from their own first list)."""
        return self.group_versions is None or group_version in self.group_versions

    def serves_path(self, path: str) -> bool:
        """Whether the group/version of a list path (`/apis/GROUP/VERSION/...`) is served;
        the core API (`/api/v1/...`) always is."""
        if not path.startswith("/apis/"):
            return True
        group, version = path.removeprefix("/apis/").split("/")[:2]
        return self.serves(f"{group}/{version}")

    @property
    def events_v1(self) -> bool:
        return self.serves(EVENTS_V1)

    @property
    def leases_v1(self) -> bool:
        return self.serves(LEASES_V1)


async def discover(client: KubeClient, version: Mapping[str, Any] | None = None) -> ServerAPIs:
    """Read /version (unless its answer is given) and /apis; never raises for an unreadable
    discovery."""
    if version is None:
        version_answer, groups_answer = await asyncio.gather(
            client.get("/version"), client.get("/apis"), return_exceptions=True
        )
        version = version_answer if isinstance(version_answer, dict) else {}
    else:
        groups_answer = await _answer(client.get("/apis"))
    git_version = str(version.get("gitVersion") or "")
    if isinstance(groups_answer, BaseException):
        if not isinstance(groups_answer, ApiError):
            raise groups_answer
        log.info(
            "API discovery unavailable, assuming every API is served", error=str(groups_answer)
        )
        return ServerAPIs(git_version)
    served = frozenset(
        str(v.get("groupVersion"))
        for g in groups_answer.get("groups") or []
        if isinstance(g, dict)
        for v in g.get("versions") or []
        if isinstance(v, dict)
    )
    apis = ServerAPIs(git_version, served)
    if not apis.events_v1:
        log.warning(
            f"API server {git_version or '(unknown version)'} does not serve {EVENTS_V1} "
            "(Kubernetes < 1.19): Events are written as core/v1 Events"
        )
    if not apis.leases_v1:
        log.warning(
            f"API server {git_version or '(unknown version)'} does not serve {LEASES_V1} "
            "(Kubernetes < 1.14): leader election is unavailable"
        )
    return apis


async def _answer(call: Awaitable[dict[str, Any]]) -> dict[str, Any] | BaseException:
    try:
        return await call
    except ApiError as exc:
        return exc
