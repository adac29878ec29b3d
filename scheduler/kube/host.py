"""What the in-cluster scheduler's parts may ask of it: the narrow interface its helpers get.

`KubeScheduler` is assembled from parts that each receive only what they use, never the
scheduler itself: `handlers.ClusterHandlers` (watch events into the cache and the queue),
`reporter.Reporter` and `reporter.PodGroupStatus` (Events, conditions, PodGroup status),
`binder.KubeBinder` (pods/binding, ResourceClaim status), `groups.KubeGroups` (PodGroup
watches), `volumes.StorageWatches` (storage watches), `dra.DraWatches` (resource.k8s.io/v1
watches) and `quotas.QuotaWatches` (ElasticQuotas). These, and the reporter, get a `Host`: the
API client, which APIs the server serves, informers built with the scheduler's watch options,
a way to wake the scheduling loop or send unschedulable pods back to the queue, background
tasks, and the queue's backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

from scheduler.core.queue import ClusterEvent
from scheduler.kube.client import KubeClient
from scheduler.kube.discovery import ServerAPIs
from scheduler.kube.events import EVENT_POSTS
from scheduler.kube.informer import Backoff, Handler, Reflector


@dataclass
class Options:
    """Timings and limits; tests shorten them."""

    # None: the configuration's podInitialBackoffSeconds / podMaxBackoffSeconds (1 s, 10 s)
    initial_backoff: float | None = None
    max_backoff: float | None = None
    max_unschedulable: float = 300.0
    watch_timeout: int = 300
    reflector_backoff: Backoff = field(default_factory=Backoff)
    max_bindings_in_flight: int = 512
    # Event posts in flight at once (the event client's own rate limit paces them)
    event_workers: int = EVENT_POSTS
    shutdown_grace: float = 30.0
    clock: Callable[[], float] = time.monotonic


class AdapterHost(Protocol):
    """The scheduler as its helpers see it."""

    @property
    def client(self) -> KubeClient: ...

    @property
    def apis(self) -> ServerAPIs: ...

    def reflector(
        self,
        path: str,
        handler: Handler,
        *,
        name: str,
        when_unserved: str = "",
        count_relists: bool = True,
        check_served: bool = False,
        field_selector: str = "",
    ) -> Reflector:
        """A list+watch of `path` with the scheduler's watch options (not started);
        `check_served`: synced empty at once when discovery says the API is not served."""
        ...

    def wake(self) -> None:
        """Something changed: the scheduling loop looks at the queue again."""
        ...

    def retry_unschedulable(self, event: ClusterEvent) -> None:
        """A cluster event that can make waiting pods schedulable: move them, wake the loop."""
        ...

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        """Run a background task (cancelled when the scheduler closes)."""
        ...

    def backoff(self, attempts: int) -> float:
        """The queue's backoff after `attempts` failures (podInitial/MaxBackoffSeconds)."""
        ...


class Host:
    """The one `AdapterHost` of a `KubeScheduler`: its client, APIs, options, wake-up event
    and background tasks."""

    def __init__(
        self,
        client: KubeClient,
        apis: ServerAPIs,
        options: Options,
        relisted: Callable[[str], None],
    ) -> None:
        self._client = client
        self._apis = apis
        self.options = options
        self._relisted = relisted
        self.wakeup = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []
        # set once the queue exists (the assembly needs the binder, which needs the host)
        self.queue_backoff: Callable[[int], float] = lambda attempts: 1.0
        self.move_all: Callable[[ClusterEvent], object] = lambda event: None

    @property
    def client(self) -> KubeClient:
        return self._client

    @property
    def apis(self) -> ServerAPIs:
        return self._apis

    def reflector(
        self,
        path: str,
        handler: Handler,
        *,
        name: str,
        when_unserved: str = "",
        count_relists: bool = True,
        check_served: bool = False,
        field_selector: str = "",
    ) -> Reflector:
        reflector = Reflector(
            self._client,
            path,
            handler,
            name=name,
            field_selector=field_selector,
            watch_timeout=self.options.watch_timeout,
            backoff=self.options.reflector_backoff,
            on_relist=self._relisted if count_relists else None,
            when_unserved=when_unserved,
        )
        if check_served and not self._apis.serves_path(path):
            reflector.mark_unserved()
        return reflector

    def wake(self) -> None:
        self.wakeup.set()

    def retry_unschedulable(self, event: ClusterEvent) -> None:
        self.move_all(event)
        self.wakeup.set()

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.create_task(coroutine)
        self.tasks.append(task)
        task.add_done_callback(self._forget_task)

    def _forget_task(self, task: asyncio.Task[None]) -> None:
        with contextlib.suppress(ValueError):
            self.tasks.remove(task)

    def backoff(self, attempts: int) -> float:
        return self.queue_backoff(attempts)
