"""List+watch of one resource into a handler, like client-go's reflector.

Lists once (from the API server's watch cache, in pages of `LIST_PAGE_SIZE`), then watches
from the list's resourceVersion with bookmarks, resuming from the last seen resourceVersion
when a stream ends or drops. On
`410 Gone` (the version left the server's window) it lists again and reports objects that
disappeared meanwhile as deleted, so no ghost survives a re-list. Reconnects back off
exponentially with jitter. `synced` is set after the first complete list has been delivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from scheduler.kube.client import ApiError, KubeClient

Obj = dict[str, Any]
log = structlog.get_logger("topo_scheduler.informer")

LIST_PAGE_SIZE = 500  # client-go's pager: the objects a list asks for per page


class Handler(Protocol):
    """Receives every change; `old` is the previous version seen (None when new)."""

    def on_upsert(self, obj: Obj, old: Obj | None) -> None: ...

    def on_delete(self, obj: Obj) -> None: ...


@dataclass
class Backoff:
    """Exponential backoff with jitter for reconnects (client-go: 800 ms .. 30 s)."""

    initial: float = 0.8
    maximum: float = 30.0
    factor: float = 2.0
    jitter: float = 1.0  # up to +100 %

    def delay(self, failures: int, rng: random.Random) -> float:
        # the exponent is capped: factor**62 is past any maximum, and never overflows a float
        exponent = min(max(0, failures - 1), 62)
        base = min(self.maximum, self.initial * self.factor**exponent)
        return base * (1.0 + rng.random() * self.jitter)


def object_key(obj: Obj) -> str:
    md = obj.get("metadata") or {}
    ns = md.get("namespace")
    return f"{ns}/{md.get('name')}" if ns else str(md.get("name"))


def _trim(obj: Obj) -> Obj:
    """Drop what no handler reads and would only be kept in memory: metadata.managedFields.

    Server-side apply bookkeeping is often the largest part of an object (client-go's
    informers are usually given a transform that strips it, as here).
    """
    md = obj.get("metadata")
    if isinstance(md, dict):
        md.pop("managedFields", None)
    return obj


def _rv(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _uid(obj: Obj) -> Any:
    return (obj.get("metadata") or {}).get("uid")


class Reflector:
    """Keeps `handler` in step with the objects under `path` (optionally field-selected)."""

    def __init__(
        self,
        client: KubeClient,
        path: str,
        handler: Handler,
        *,
        name: str,
        field_selector: str = "",
        watch_timeout: int = 300,
        backoff: Backoff | None = None,
        rng: random.Random | None = None,
        on_relist: Callable[[str], None] | None = None,
        when_unserved: str = "",
    ) -> None:
        self.client = client
        self.path = path
        self.when_unserved = when_unserved  # what is off while the server lacks this API
        self.handler = handler
        self.name = name
        self.field_selector = field_selector
        self.watch_timeout = watch_timeout
        self.backoff = backoff or Backoff()
        self.rng = rng or random.Random()
        self.on_relist = on_relist
        self.known: dict[str, Obj] = {}
        self.resource_version = ""
        self.synced = asyncio.Event()
        self.progress = False  # the current watch stream delivered something
        self.unserved = False  # the server answered 404 for the list: an API it lacks
        self.lists = 0  # completed lists (the first one and each re-list)
        # set: the first list is asked for at once but handed to the handler only once this
        # is set (the pods after the nodes, their list prepared by the server meanwhile)
        self.hold: asyncio.Event | None = None
        self.watches = 0  # watch streams opened

    def _query(self) -> dict[str, str]:
        return {"fieldSelector": self.field_selector} if self.field_selector else {}

    async def list_once(self) -> None:
        """List everything and reconcile: upsert what is there, delete what is gone.

        The first list asks for `resourceVersion=0`, as client-go's reflector does: the API
        server answers from its watch cache instead of a quorum read of every object from
        etcd, and the watch from that version catches up. A re-list (after 410) reads from
        etcd: the cache may be older than what was already seen.

        Pages of `LIST_PAGE_SIZE` objects are asked for, as client-go's pager asks (`limit`,
        then `continue` with the token of the page before, no resourceVersion); a server that
        does not page (older ones from the watch cache) answers with everything at once. The
        first list hands each page to the handler as it arrives (nothing is scheduled before
        `synced`); a re-list hands them over once all have arrived, so a cycle never sees a
        list half applied. A continue token that expired (410) is answered with one whole
        list, as client-go's pager does.
        """
        query = self._query()
        if self.lists == 0:
            query["resourceVersion"] = "0"
        incremental = self.lists == 0
        seen: set[str] = set()
        held: list[Obj] = []
        body = await self.client.get(self.path, {**query, "limit": str(LIST_PAGE_SIZE)})
        while True:
            items = body.get("items") or []
            if incremental and self.hold is not None and not self.hold.is_set():
                await self.hold.wait()
            if incremental:
                self._upsert_listed(items, seen)
            else:
                held.extend(items)
            token = (body.get("metadata") or {}).get("continue")
            if not token:
                break
            try:
                body = await self.client.get(
                    self.path,
                    {**self._query(), "limit": str(LIST_PAGE_SIZE), "continue": str(token)},
                )
            except ApiError as exc:
                if exc.status != 410:
                    raise
                # the token expired: one whole list instead, reconciled from scratch
                seen.clear()
                held.clear()
                body = await self.client.get(self.path, query)
        if not incremental:
            self._upsert_listed(held, seen)
        for key in [k for k in self.known if k not in seen]:
            self.handler.on_delete(self.known.pop(key))
        self.resource_version = str((body.get("metadata") or {}).get("resourceVersion") or "")
        self.lists += 1
        if self.on_relist is not None and self.lists > 1:
            self.on_relist(self.name)
        self.synced.set()

    def _upsert_listed(self, items: list[Obj], seen: set[str]) -> None:
        for obj in items:
            obj = _trim(obj)
            key = object_key(obj)
            seen.add(key)
            old = self.known.get(key)
            if old is not None and _rv(old) == _rv(obj):
                continue
            self._upsert(key, obj)

    def _upsert(self, key: str, obj: Obj) -> None:
        old = self.known.get(key)
        if old is not None and _uid(old) != _uid(obj):
            # deleted and made again under the same name while unwatched (a re-list sees
            # only the new one): the old one is deleted first, as kube-scheduler does for a pod
            self.known.pop(key)
            self.handler.on_delete(old)
            old = None
        self.known[key] = obj
        self.handler.on_upsert(obj, old)

    def _apply(self, kind: str, obj: Obj) -> None:
        obj = _trim(obj)
        key = object_key(obj)
        if kind == "DELETED":
            self.known.pop(key, None)
            self.handler.on_delete(obj)
        else:
            self._upsert(key, obj)

    async def watch_once(self) -> bool:
        """One watch stream from the current version; False when a re-list is needed."""
        query = {
            **self._query(),
            "resourceVersion": self.resource_version,
            "allowWatchBookmarks": "true",
        }
        timeout = int(self.watch_timeout * (1.0 + self.rng.random()))  # spread reconnects
        self.watches += 1
        self.progress = False
        async for event in self.client.watch(self.path, query, timeout):
            self.progress = True
            kind = event.get("type")
            obj = event.get("object") or {}
            if kind == "ERROR":
                code = obj.get("code")
                log.info("watch error", informer=self.name, code=code, message=obj.get("message"))
                if code == 410:
                    return False
                raise ApiError(int(code or 0), str(obj.get("message") or ""), "WatchError")
            rv = _rv(obj)
            if kind == "BOOKMARK":
                if rv:
                    self.resource_version = rv
                continue
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                self._apply(kind, obj)
                if rv:
                    self.resource_version = rv
        return True

    def mark_unserved(self) -> None:
        """The server lacks this API (discovery says so, or the list answered 404): synced as
        empty, looked for again at the longest backoff; logged once with what is off."""
        if not self.unserved:
            log.info(
                "API not served: treated as empty, looked for again every "
                f"{self.backoff.maximum:g} s",
                informer=self.name,
                path=self.path,
                off=self.when_unserved or None,
            )
            self.unserved = True
            self.synced.set()

    async def run(self) -> None:
        """List, then watch forever; cancel the task to stop."""
        failures = 0
        need_list = True
        if self.unserved:
            await asyncio.sleep(self.backoff.maximum)
        while True:
            try:
                if need_list:
                    await self.list_once()
                    need_list = False
                    if self.unserved:
                        log.info("API now served", informer=self.name)
                        self.unserved = False
                started = time.monotonic()
                need_list = not await self.watch_once()
                if need_list or self.progress or time.monotonic() - started >= 1.0:
                    failures = 0
                    continue
                # the server ended an empty stream at once: do not spin on reconnects
                failures += 1
                error = "watch closed immediately"
            except ApiError as exc:
                if exc.status == 410:
                    need_list = True
                    continue
                if exc.status == 404 and need_list and (self.unserved or not self.synced.is_set()):
                    # an API this server does not serve (an older Kubernetes, a CRD not
                    # installed): nothing to read, and what depends on it is off; looked for
                    # again, quietly, at the longest backoff, in case it is installed later
                    self.mark_unserved()
                    await asyncio.sleep(self.backoff.maximum)
                    continue
                # a stream that delivered events before it broke was progress: retry soon
                failures = 1 if self.progress else failures + 1
                self.progress = False
                error = str(exc)
            except (ValueError, TypeError, AttributeError) as exc:
                # a garbled stream (not JSON, not an object): drop the stream, resume from RV
                failures += 1
                error = f"{type(exc).__name__}: {exc}"
            delay = self.backoff.delay(failures, self.rng)
            log.warning(
                "list/watch failed", informer=self.name, error=error, retry_in=round(delay, 3)
            )
            await asyncio.sleep(delay)


async def run_tasks(tasks: list[asyncio.Task[Any]]) -> None:
    """Await the informers' tasks until they end or this is cancelled; then cancel each one
    left and wait for it, so none outlives its owner."""
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
