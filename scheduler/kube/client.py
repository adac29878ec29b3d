"""Raw JSON access to the API server over one aiohttp connection pool per client.

Bodies stay dicts and callers check the status code: the official client's generated models
are slow to build, some answers do not decode (a Binding is answered with a Status), and its
request layers cost a third more CPU per call than the call itself. Where the server is and how
to authenticate is an `Endpoint` (`credentials.py`: service account, kubeconfig, test URL).
Each call but a watch passes the token bucket (served by priority: bindings before status
patches; watches are not rate-limited, as in client-go), and honours `429 Too Many Requests`
with `Retry-After`. Like client-go, a request's timeout starts when it is sent: the wait for a
rate-limit token is not under it, so a queued request never expires before it is tried.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import urllib.parse
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from scheduler.kube.credentials import Endpoint
from scheduler.kube.ratelimit import Priority, TokenBucket

Obj = dict[str, Any]

_PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")
_WATCH_CONNECTIONS = 16
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"


class ApiError(Exception):
    """A non-2xx answer (or a transport failure, status 0) from the API server."""

    def __init__(self, status: int, message: str, reason: str = "", body: Obj | None = None):
        super().__init__(f"{status} {reason}: {message}" if reason else f"{status}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body or {}


@dataclass
class ClientOptions:
    """Rate limit and timeouts; tests shorten them."""

    qps: float = 50.0
    burst: int = 100
    timeout: float = 10.0  # every non-watch call, from when it is sent
    max_retry_after: float = 10.0  # longest Retry-After honoured per attempt
    retries_on_429: int = 10  # client-go's default for Retry-After answers
    # requests on the wire at once (watches aside): fewer connections, fewer TLS handshakes
    # for the API server; a request waits for its turn before its deadline starts
    max_in_flight: int = 32
    user_agent: str = "topo-scheduler"
    extra_headers: dict[str, str] = field(default_factory=dict)


class Abandoned(Exception):
    """A request its caller gave up before it was sent (see `still_wanted`)."""


def _error(status: int, data: bytes) -> ApiError:
    try:
        body = json.loads(data) if data else {}
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    message = str(body.get("message") or data[:200].decode(errors="replace"))
    return ApiError(status, message, str(body.get("reason") or ""), body)


class KubeClient:
    """One API server connection pool with a shared rate limit."""

    def __init__(self, endpoint: Endpoint, options: ClientOptions | None = None) -> None:
        self.endpoint = endpoint
        self.options = options or ClientOptions()
        self.limiter = TokenBucket(self.options.qps, self.options.burst)
        self._in_flight = asyncio.Semaphore(self.options.max_in_flight)
        self._pool: aiohttp.ClientSession | None = None
        self.timeouts = 0  # requests that were sent and got no answer in time
        self.on_timeout: Callable[[], None] | None = None

    def sibling(self, options: ClientOptions) -> KubeClient:
        """Another client on the same credentials with its own rate limit and connections
        (kube-scheduler's event client)."""
        return KubeClient(self.endpoint, options)

    @classmethod
    async def connect(
        cls, kubeconfig: str | None = None, options: ClientOptions | None = None
    ) -> KubeClient:
        """In-cluster service-account credentials unless a kubeconfig path is given."""
        if kubeconfig:
            return cls(await Endpoint.from_kubeconfig(kubeconfig), options)
        return cls(Endpoint.in_cluster(), options)

    @classmethod
    def for_url(cls, url: str, options: ClientOptions | None = None) -> KubeClient:
        """An unauthenticated client for a plain-HTTP server (the test emulator)."""
        return cls(Endpoint.plain(url), options)

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    def _session(self) -> aiohttp.ClientSession:
        """The connection pool, opened on first use (inside the running event loop)."""
        if self._pool is None:
            connector = aiohttp.TCPConnector(
                # the requests plus room for long-lived watches
                limit=self.options.max_in_flight + _WATCH_CONNECTIONS,
                ssl=self.endpoint.tls if self.endpoint.tls is not None else True,
            )
            self._pool = aiohttp.ClientSession(
                connector=connector,
                # aiohttp's trust_env re-reads proxy settings and ~/.netrc on every request
                # (~2 ms); keep it only when a proxy is actually configured in the environment
                trust_env=any(os.environ.get(v) for v in _PROXY_VARS),
                read_bufsize=2**21,  # watch events can exceed aiohttp's default buffer
            )
        return self._pool

    async def _headers(self, content_type: str | None) -> dict[str, str]:
        """Accept, User-Agent and credentials, asked per request so a refreshed token is
        used."""
        headers = {"Accept": "application/json", "User-Agent": self.options.user_agent}
        headers.update(self.options.extra_headers)
        if content_type:
            headers["Content-Type"] = content_type
        headers.update(await self.endpoint.auth_headers())
        return headers

    async def _send(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, str]] | None,
        body: Any,
        content_type: str | None,
        timeout: float | aiohttp.ClientTimeout,
        priority: int,
        stream: bool,
        still_wanted: Callable[[], bool] | None = None,
    ) -> tuple[aiohttp.ClientResponse, bytes]:
        """Wait for a token (no deadline), then send under `timeout`; retry 429s.

        A `stream` (a watch) takes no token and no place among the requests in flight, and
        its body is left to the caller: client-go does not rate-limit watches either (one
        long-lived request, nothing per event).

        `still_wanted`, asked right before the request goes out (after the waits for a token
        and a connection slot): False abandons it (`Abandoned`), e.g. a binding to a node
        deleted meanwhile.

        Returns the response and, unless `stream`, its body (read under the same deadline).
        """
        url = self.endpoint.host + path
        if query:
            url += "?" + urllib.parse.urlencode(list(query))
        data = json.dumps(body) if body is not None else None
        endpoint = self.endpoint
        extra: dict[str, Any] = {}
        if endpoint.proxy:
            extra["proxy"] = endpoint.proxy
            if endpoint.proxy_headers:
                extra["proxy_headers"] = dict(endpoint.proxy_headers)
        if endpoint.server_hostname:
            extra["server_hostname"] = endpoint.server_hostname
        if isinstance(timeout, aiohttp.ClientTimeout):
            client_timeout, deadline = timeout, None
        else:
            client_timeout, deadline = aiohttp.ClientTimeout(total=timeout), float(timeout)
        for attempt in range(self.options.retries_on_429 + 1):
            if not stream:
                await self.limiter.acquire(priority)
            try:
                async with self._slot(not stream), asyncio.timeout(deadline):
                    if still_wanted is not None and not still_wanted():
                        raise Abandoned(f"{method} {path}: no longer wanted")
                    resp = await self._session().request(
                        method,
                        url,
                        headers=await self._headers(content_type),
                        data=data,
                        timeout=client_timeout,
                        **extra,
                    )
                    payload = b"" if stream else await resp.read()
            except TimeoutError as exc:
                self.timeouts += 1
                if self.on_timeout is not None:
                    self.on_timeout()
                raise ApiError(
                    0, f"{method} {path}: timed out after {deadline or timeout}s", "Timeout"
                ) from exc
            except aiohttp.ClientError as exc:
                raise ApiError(0, f"{type(exc).__name__}: {exc}", "Transport") from exc
            if resp.status == 429 or (resp.status >= 500 and "Retry-After" in resp.headers):
                retry_after = resp.headers.get("Retry-After")
                resp.release()
                if attempt < self.options.retries_on_429 and retry_after is not None:
                    try:
                        delay = float(retry_after)
                    except ValueError:
                        delay = 1.0
                    await asyncio.sleep(min(max(delay, 0.0), self.options.max_retry_after))
                    continue
                raise ApiError(resp.status, "Too many requests", "TooManyRequests")
            return resp, payload
        raise AssertionError("unreachable")

    def _slot(self, counted: bool) -> contextlib.AbstractAsyncContextManager[Any]:
        """A place among the requests in flight (watches, `counted=False`, take none)."""
        return self._in_flight if counted else contextlib.nullcontext()

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: float | None = None,
        priority: int = Priority.DEFAULT,
        still_wanted: Callable[[], bool] | None = None,
    ) -> Obj:
        """One call; the decoded JSON answer on 2xx, `ApiError` otherwise.

        `timeout` (default the client's) runs from when the request is sent.
        """
        t = float(timeout or self.options.timeout)
        if body is not None and content_type is None:
            content_type = "application/json"
        resp, data = await self._send(
            method, path, query, body, content_type, t, priority, False, still_wanted
        )
        if not 200 <= resp.status < 300:
            raise _error(resp.status, data)
        out = json.loads(data) if data else {}
        return out if isinstance(out, dict) else {"value": out}

    async def get(
        self,
        path: str,
        query: Mapping[str, str] | None = None,
        priority: int = Priority.DEFAULT,
    ) -> Obj:
        return await self.request("GET", path, query=list((query or {}).items()), priority=priority)

    async def get_bytes(self, path: str) -> bytes:
        """A non-JSON answer (e.g. the API server's /metrics) as bytes; `ApiError` unless 2xx."""
        resp, data = await self._send(
            "GET", path, None, None, None, self.options.timeout, Priority.DEFAULT, stream=False
        )
        if not 200 <= resp.status < 300:
            raise _error(resp.status, data)
        return data

    async def post(
        self,
        path: str,
        body: Obj,
        priority: int = Priority.DEFAULT,
        still_wanted: Callable[[], bool] | None = None,
    ) -> Obj:
        return await self.request(
            "POST", path, body=body, priority=priority, still_wanted=still_wanted
        )

    async def put(self, path: str, body: Obj, priority: int = Priority.DEFAULT) -> Obj:
        return await self.request("PUT", path, body=body, priority=priority)

    async def patch(
        self,
        path: str,
        body: Obj,
        content_type: str = MERGE_PATCH,
        priority: int = Priority.DEFAULT,
    ) -> Obj:
        return await self.request(
            "PATCH", path, body=body, content_type=content_type, priority=priority
        )

    async def delete(self, path: str, priority: int = Priority.DEFAULT) -> Obj:
        return await self.request("DELETE", path, priority=priority)

    async def watch(
        self, path: str, query: Mapping[str, str], timeout_seconds: int
    ) -> AsyncIterator[Obj]:
        """Stream watch events (decoded lines) until the server ends the stream.

        The connection is cut if no byte arrives for the whole window, so a silent dead
        connection cannot stall the informer.
        """
        q = {**query, "watch": "true", "timeoutSeconds": str(timeout_seconds)}
        total = aiohttp.ClientTimeout(total=timeout_seconds + 30, sock_read=timeout_seconds + 15)
        resp, _ = await self._send(
            "GET", path, list(q.items()), None, None, total, Priority.DEFAULT, stream=True
        )
        if resp.status != 200:
            raise _error(resp.status, await resp.read())
        content = resp.content
        try:
            while True:
                try:
                    line = await content.readline()
                except (aiohttp.ClientError, TimeoutError) as exc:
                    raise ApiError(0, f"watch {path}: {type(exc).__name__}", "Transport") from exc
                if not line:
                    return
                if line.strip():
                    event = json.loads(line)
                    if isinstance(event, dict):
                        yield event
        finally:
            resp.release()
