"""HTTP front of the API-server emulator: kube's REST paths, watch streams and faults.

Serves on 127.0.0.1 from a background thread with its own event loop so that both the sync
`kubernetes.client` and `kubernetes.aio` talk to it over real HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiohttp import web

from .store import (
    OPTIONAL_RESOURCES,
    RESOURCES,
    ApiError,
    Change,
    Obj,
    Resource,
    Store,
    Watcher,
    field_match,
    label_match,
    parse_selector,
    status_object,
)

T = TypeVar("T")

_BY_PATH: dict[tuple[str, str], Resource] = {
    (r.api_version, r.plural): r for r in (*RESOURCES, *OPTIONAL_RESOURCES)
}


@dataclass
class Fault:
    """Answer the next `count` matching requests with `status` (and Retry-After if set)."""

    status: int
    count: int
    method: str | None = None
    path_contains: str | None = None
    retry_after: float | None = None
    seen: int = 0


@dataclass
class Faults:
    """Fault injection knobs, set from the test thread, read by the server loop."""

    rules: list[Fault] = field(default_factory=list)
    latency: float = 0.0  # seconds added before every non-watch answer
    watch_drop_after: int | None = None  # close each watch after this many events
    bookmark_interval: float = 1.0

    def take(self, method: str, path: str) -> Fault | None:
        for rule in self.rules:
            if rule.count <= 0:
                continue
            if rule.method and rule.method != method:
                continue
            if rule.path_contains and rule.path_contains not in path:
                continue
            rule.count -= 1
            rule.seen += 1
            return rule
        return None


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=json.dumps(obj, separators=(",", ":")).encode(),
        status=status,
        content_type="application/json",
    )


def _token_review(server: EmulatorServer, body: Obj) -> Obj:
    """kube's TokenReview answer: the token's user, or authenticated false."""
    token = str((body.get("spec") or {}).get("token") or "")
    user = server.tokens.get(token)
    status: Obj = {"authenticated": True, "user": user} if user else {"authenticated": False}
    if not user:
        status["error"] = "invalid bearer token"
    return dict(body, status=status)


def _access_review(server: EmulatorServer, body: Obj) -> Obj:
    """kube's SubjectAccessReview answer for a non-resource request."""
    spec = body.get("spec") or {}
    attrs = spec.get("nonResourceAttributes") or {}
    allowed = (spec.get("user"), attrs.get("verb"), attrs.get("path")) in server.non_resource_grants
    status: Obj = {"allowed": allowed}
    if allowed:
        status["reason"] = "granted by the emulator"
    return dict(body, status=status)


_REVIEWS: dict[tuple[str, str], Callable[[EmulatorServer, Obj], Obj]] = {
    ("POST", "/apis/authentication.k8s.io/v1/tokenreviews"): _token_review,
    ("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews"): _access_review,
}


class EmulatorServer:
    """The aiohttp application plus its thread; `call` runs a function on its loop."""

    def __init__(self, history: int = 100_000) -> None:
        self.store = Store(history=history)
        self.faults = Faults()
        self.requests: list[tuple[str, str]] = []  # (method, path) of every request
        # TokenReview: token -> the user it authenticates (username, uid, groups, extra)
        self.tokens: dict[str, Obj] = {}
        # SubjectAccessReview on non-resource URLs: (user, verb, path) that are allowed
        self.non_resource_grants: set[tuple[str, str, str]] = set()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name="api-emulator", daemon=True)
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._streams: set[asyncio.Task[Any]] = set()
        self.port = 0

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> str:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("emulator did not start")
        return self.url

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._main())
        self.loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        app = web.Application(middlewares=[self._middleware], client_max_size=64 << 20)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._ready.set()
        await self._stop.wait()
        self.drop_watches_now()
        await runner.cleanup()

    def call(self, fn: Callable[[], T]) -> T:
        """Run `fn` on the server loop (the store's only thread) and return its result."""

        async def run() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(10)

    def call_async(self, fn: Callable[[], Awaitable[T]]) -> T:
        return asyncio.run_coroutine_threadsafe(fn(), self.loop).result(10)  # type: ignore[arg-type]

    def drop_watches_now(self) -> None:
        """Close every open watch stream mid-stream (on the loop)."""
        for w in list(self.store.watchers):
            w.queue.put_nowait(None)

    # -- HTTP -----------------------------------------------------------------------------

    @web.middleware
    async def _middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        self.requests.append((request.method, request.path))
        fault = self.faults.take(request.method, request.path_qs)
        if fault is not None:
            headers = {}
            reason, message = "InternalError", "Internal error occurred: injected fault"
            if fault.status == 429:
                reason, message = "TooManyRequests", "Too many requests, please try again later."
            if fault.retry_after is not None:
                headers["Retry-After"] = str(max(1, round(fault.retry_after)))
            resp = _json(status_object(fault.status, reason, message), fault.status)
            resp.headers.update(headers)
            return resp
        if self.faults.latency and request.query.get("watch") not in ("true", "1"):
            await asyncio.sleep(self.faults.latency)
        try:
            return await handler(request)
        except ApiError as e:
            return _json(e.status(), e.code)
        except json.JSONDecodeError as e:
            return _json(status_object(400, "BadRequest", f"invalid JSON: {e}"), 400)

    def _route(self, path: str) -> tuple[Resource, str | None, str, str]:
        """Path -> (resource, namespace or None, name or "", subresource or "")."""
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            gv, rest = "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            gv, rest = f"{parts[1]}/{parts[2]}", parts[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        res = _BY_PATH.get((gv, rest[0]))
        if res in OPTIONAL_RESOURCES and res not in self.store.served:
            res = None
        if res is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        return res, namespace, name, sub

    def _discovery(self, path: str) -> web.Response | None:
        """GET /apis/<group>/<version>: the APIResourceList of what is served there."""
        parts = [p for p in path.split("/") if p]
        if len(parts) != 3 or parts[0] != "apis":
            return None
        gv = f"{parts[1]}/{parts[2]}"
        served = [r for r in (*RESOURCES, *self.store.served) if r.api_version == gv]
        if not served:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        resources = [
            {
                "name": r.plural,
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
            }
            for r in served
        ]
        return _json(
            {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": gv,
                "resources": resources,
            }
        )

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        review = _REVIEWS.get((request.method, request.path))
        if review is not None:
            return _json(review(self, await request.json()), 201)
        if request.method == "GET" and request.path == "/version":
            return _json({"major": "1", "minor": "33", "gitVersion": "v1.33.0-emulator"})
        if request.method == "GET":
            listing = self._discovery(request.path)
            if listing is not None:
                return listing
        res, ns, name, sub = self._route(request.path)
        store = self.store
        method = request.method
        if not name:
            if method == "GET":
                if request.query.get("watch") in ("true", "1"):
                    return await self._watch(request, res, ns)
                return self._list(request, res, ns)
            if method == "POST":
                return _json(store.create(res, ns, await request.json()), 201)
            raise ApiError(405, "MethodNotAllowed", f"method {method} not allowed")
        nskey = ns or ""
        if sub == "binding" and res.kind == "Pod" and method == "POST":
            store.bind(nskey, name, await request.json())
            return _json(status_object(201, "", ""), 201)
        if sub not in ("", "status"):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if method == "GET":
            return _json(store.get(res, nskey, name))
        if method == "PUT":
            body = await request.json()
            if sub == "status":
                current = store.get(res, nskey, name)
                body = dict(current, status=body.get("status"), metadata=body.get("metadata"))
            return _json(store.replace(res, nskey, name, body))
        if method == "PATCH":
            ctype = request.content_type
            if ctype not in (
                "application/merge-patch+json",
                "application/strategic-merge-patch+json",
            ):
                raise ApiError(
                    415,
                    "UnsupportedMediaType",
                    "the body of the request was in an unknown format - accepted media types "
                    "include: application/merge-patch+json, "
                    f"application/strategic-merge-patch+json (got {ctype})",
                )
            patch = await request.json()
            strategic = ctype == "application/strategic-merge-patch+json"
            return _json(store.patch(res, nskey, name, patch, strategic, sub))
        if method == "DELETE":
            return _json(store.delete(res, nskey, name))
        raise ApiError(405, "MethodNotAllowed", f"method {method} not allowed")

    def _list(self, request: web.Request, res: Resource, ns: str | None) -> web.Response:
        items = self.store.list(
            res,
            ns,
            parse_selector(request.query.get("fieldSelector"), res),
            parse_selector(request.query.get("labelSelector")),
        )
        body = {
            "kind": f"{res.kind}List",
            "apiVersion": res.api_version,
            "metadata": {"resourceVersion": str(self.store.rv)},
            "items": items,
        }
        return _json(body)

    async def _watch(
        self, request: web.Request, res: Resource, ns: str | None
    ) -> web.StreamResponse:
        q = request.query
        # a watch with a field selector sees an object that stops matching as DELETED and
        # one that starts matching as ADDED (kube's filterWatcher), see emit() below
        fields = parse_selector(q.get("fieldSelector"), res)
        labels = parse_selector(q.get("labelSelector"))
        bookmarks = q.get("allowWatchBookmarks") in ("true", "1")
        timeout = float(q.get("timeoutSeconds") or 1800)
        rv_text = q.get("resourceVersion") or ""
        store = self.store
        resp = web.StreamResponse(status=200)
        resp.content_type = "application/json"
        await resp.prepare(request)
        watcher = Watcher(res, ns, fields, labels)

        def matches(obj: Obj | None) -> bool:
            if obj is None:
                return False
            if ns is not None and obj["metadata"].get("namespace") != ns:
                return False
            return field_match(obj, fields) and label_match(obj, labels)

        async def send(kind: str, obj: Obj) -> None:
            line = json.dumps({"type": kind, "object": obj}, separators=(",", ":"))
            await resp.write(line.encode() + b"\n")

        sent = 0

        def cut() -> bool:
            """Fault: close the connection once `watch_drop_after` events went out."""
            drop_after = self.faults.watch_drop_after
            if drop_after is None or sent < drop_after:
                return False
            resp.force_close()
            if request.transport is not None:
                request.transport.close()
            return True

        async def emit(change: Change) -> None:
            nonlocal sent
            now, before = matches(change.obj), matches(change.old)
            if change.type == "MODIFIED":
                if now and before:
                    await send("MODIFIED", change.obj)
                elif now:
                    await send("ADDED", change.obj)
                elif before:
                    await send("DELETED", change.obj)
                else:
                    return
            elif now:
                await send(change.type, change.obj)
            else:
                return
            sent += 1

        try:
            start_rv = int(rv_text) if rv_text not in ("", "0") else None
        except ValueError:
            raise ApiError(400, "BadRequest", f'invalid resource version "{rv_text}"') from None
        store.watchers.append(watcher)
        # changes up to `last` are replayed below; later ones arrive through the queue
        last = start_rv if start_rv is not None else store.rv
        try:
            if start_rv is None:
                for obj in store.list(res, ns, fields, labels):
                    await send("ADDED", obj)
            elif start_rv < store.compacted:
                oldest = store.history[0].rv if store.history else store.rv
                msg = f"too old resource version: {start_rv} ({oldest})"
                await send("ERROR", status_object(410, "Expired", msg))
                return resp
            else:
                for change in list(store.history):
                    if change.rv > start_rv and change.res is res:
                        await emit(change)
                        if cut():
                            return resp
            deadline = time.monotonic() + timeout
            last_bookmark = time.monotonic()
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                wait = min(left, self.faults.bookmark_interval) if bookmarks else left
                try:
                    change = await asyncio.wait_for(watcher.queue.get(), wait)
                except TimeoutError:
                    change = False  # type: ignore[assignment]
                if change is None:
                    with contextlib.suppress(Exception):
                        resp.force_close()
                        if request.transport is not None:
                            request.transport.close()
                    return resp
                if change:
                    if change.rv <= last:
                        continue
                    last = change.rv
                    await emit(change)
                    if cut():
                        return resp
                if bookmarks and time.monotonic() - last_bookmark >= self.faults.bookmark_interval:
                    last_bookmark = time.monotonic()
                    # with nothing queued, every change of this resource up to store.rv is sent
                    bookmark_rv = store.rv if watcher.queue.empty() else last
                    await send(
                        "BOOKMARK",
                        {
                            "kind": res.kind,
                            "apiVersion": res.api_version,
                            "metadata": {"resourceVersion": str(bookmark_rv)},
                        },
                    )
            await resp.write_eof()
            return resp
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        finally:
            if watcher in store.watchers:
                store.watchers.remove(watcher)
