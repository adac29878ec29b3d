"""The scheduler's HTTP endpoints: /healthz, /readyz and /metrics (kube-scheduler's paths).

Served as kube-scheduler serves its secure port: HTTPS (a self-signed certificate made at
start unless certificate files are given), `/healthz`, `/livez` and `/readyz` open to anyone,
`/metrics` only for a bearer token that a TokenReview authenticates and a SubjectAccessReview
authorizes (`get` on the non-resource path `/metrics`); both answers are cached for a few
seconds as kube's delegating authenticator and authorizer do. Plain HTTP without
authentication is a development option only.

A connection must deliver each request's headers within a deadline (from when it opened or
from the previous answer), and a TLS handshake must finish in time, so slow partial requests
cannot hold connections open.

/readyz lists each check like kube's `?verbose` output; a check is a name and a callable
returning (ok, detail). /metrics serves one process's own CollectorRegistry.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import ipaddress
import json
import os
import socket
import ssl
import tempfile
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from scheduler.core.decode import parse_host_port

Check = Callable[[], tuple[bool, str]]
Obj = dict[str, Any]
log = structlog.get_logger("topo_scheduler.server")

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


class ServingError(ValueError):
    """A serving flag or file that cannot be used; the message names it (exit 2)."""


@dataclass(frozen=True)
class ServingOptions:
    """How the endpoints are served; tests shorten the timeouts."""

    plain_http: bool = False  # development only: no TLS, no authentication
    cert_file: str | None = None
    key_file: str | None = None
    header_timeout: float = 10.0  # each request's headers, from connect or previous answer
    handshake_timeout: float = 10.0
    auth_cache_ttl: float = 10.0  # kube's delegating authn/authz cache TTL


def parse_bind_address(text: str) -> tuple[str, int]:
    """`HOST:PORT` (IPv6 as `[::1]:10259`) -> (host, port); ServingError names the flag."""
    try:
        return parse_host_port(text, "--bind-address")
    except ValueError as exc:
        raise ServingError(str(exc)) from None


def listen(bind_address: str) -> socket.socket:
    """Bind the serving socket now, so a bad address or a port in use fails at startup."""
    host, port = parse_bind_address(bind_address)
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        return socket.create_server((host, port), family=family, backlog=128, reuse_port=False)
    except OSError as exc:
        detail = os.strerror(exc.errno) if exc.errno else str(exc)
        raise ServingError(f"--bind-address {bind_address}: {detail}") from None


# -- TLS ------------------------------------------------------------------------------------


def self_signed_pem(hostname: str) -> tuple[bytes, bytes]:
    """(certificate, key) PEM: ECDSA P-256, valid one year, for the host name and loopback.

    kube-scheduler makes the same kind of certificate when none is given; clients that scrape
    it (Prometheus) skip verification or pin it.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    if not hostname.isascii() or not hostname:
        hostname = "localhost"  # a DNS name must be ASCII
    # kube's "host@timestamp"; a common name holds at most 64 characters
    common_name = f"{hostname[:50]}@{int(now.timestamp())}"
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    sans: list[x509.GeneralName] = [x509.DNSName(hostname)]
    if hostname != "localhost":
        sans.append(x509.DNSName("localhost"))
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in ("127.0.0.1", "::1")]
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def tls_context(options: ServingOptions) -> ssl.SSLContext:
    """Server TLS context from the given files, or a self-signed certificate."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if bool(options.cert_file) != bool(options.key_file):
        raise ServingError("--tls-cert-file and --tls-private-key-file must be given together")
    if options.cert_file and options.key_file:
        for flag, path in (
            ("--tls-cert-file", options.cert_file),
            ("--tls-private-key-file", options.key_file),
        ):
            if not os.path.isfile(path):
                raise ServingError(f"{flag} {path}: no such file")
        try:
            ctx.load_cert_chain(options.cert_file, options.key_file)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise ServingError(
                f"--tls-cert-file {options.cert_file} / --tls-private-key-file "
                f"{options.key_file}: not a matching PEM certificate and key ({exc})"
            ) from None
        return ctx
    cert, key = self_signed_pem(socket.gethostname())
    # ssl loads a chain only from files: write them to a private directory, load, remove
    with tempfile.TemporaryDirectory(prefix="topo-scheduler-tls-") as tmp:
        cert_path, key_path = os.path.join(tmp, "tls.crt"), os.path.join(tmp, "tls.key")
        for path, data in ((cert_path, cert), (key_path, key)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        ctx.load_cert_chain(cert_path, key_path)
    return ctx


# -- delegated authentication and authorization ---------------------------------------------


class ReviewClient(Protocol):
    """What the authenticator needs of the API client: one POST."""

    async def post(self, path: str, body: Obj) -> Obj: ...


@dataclass(frozen=True)
class UserInfo:
    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


class _TTLCache:
    """A small LRU cache whose entries expire; bounds memory whatever tokens are sent."""

    def __init__(self, ttl: float, size: int = 1024, clock: Callable[[], float] = time.monotonic):
        self.ttl, self.size, self.clock = ttl, size, clock
        self._items: OrderedDict[str, tuple[float, Any]] = OrderedDict()

    def get(self, key: str) -> Any:
        hit = self._items.get(key)
        if hit is None or hit[0] < self.clock():
            self._items.pop(key, None)
            return None
        self._items.move_to_end(key)
        return hit[1]

    def put(self, key: str, value: Any) -> None:
        self._items[key] = (self.clock() + self.ttl, value)
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)


def _string_list(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


class DelegatedAuth:
    """Bearer tokens checked by TokenReview, requests by SubjectAccessReview (cached)."""

    def __init__(
        self, client: ReviewClient, ttl: float = 10.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.client = client
        self._users = _TTLCache(ttl, clock=clock)
        self._decisions = _TTLCache(ttl, clock=clock)

    async def authenticate(self, token: str) -> UserInfo | None:
        """The token's user, or None when the API server does not authenticate it."""
        key = hashlib.sha256(token.encode()).hexdigest()
        cached = self._users.get(key)
        if cached is not None:
            return cached or None  # False: rejected recently
        review = await self.client.post(
            TOKEN_REVIEWS,
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": token},
            },
        )
        status = review.get("status") or {}
        user = status.get("user") or {}
        info: UserInfo | None = None
        if status.get("authenticated") is True and user.get("username"):
            extra = user.get("extra") or {}
            info = UserInfo(
                username=str(user["username"]),
                uid=str(user.get("uid") or ""),
                groups=_string_list(user.get("groups")),
                extra={str(k): _string_list(v) for k, v in extra.items()}
                if isinstance(extra, dict)
                else {},
            )
        self._users.put(key, info or False)
        return info

    async def authorize(self, user: UserInfo, verb: str, path: str) -> tuple[bool, str]:
        """(allowed, reason) for a non-resource request."""
        key = json.dumps(
            [user.username, user.uid, user.groups, sorted(user.extra.items()), verb, path]
        )
        cached = self._decisions.get(key)
        if cached is not None:
            allowed, reason = cached
            return bool(allowed), str(reason)
        spec: Obj = {
            "user": user.username,
            "groups": list(user.groups),
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra.items()}
        review = await self.client.post(
            ACCESS_REVIEWS,
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": spec,
            },
        )
        status = review.get("status") or {}
        decision = (status.get("allowed") is True, str(status.get("reason") or ""))
        self._decisions.put(key, decision)
        return decision


def _status(code: int, reason: str, message: str) -> web.Response:
    """A kube-style `Status` answer, as the API server and kube-scheduler write them."""
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return web.json_response(body, status=code)


# -- the server -----------------------------------------------------------------------------


def _report(checks: Mapping[str, Check]) -> tuple[bool, str]:
    lines, healthy = [], True
    for name, check in checks.items():
        ok, detail = check()
        healthy &= ok
        suffix = f": {detail}" if detail else ""
        lines.append(f"[{'+' if ok else '-'}]{name} {'ok' if ok else 'failed'}{suffix}")
    verdict = "ok" if healthy else "failed"
    lines.append(f"{'readyz' if checks else 'healthz'} check {verdict}")
    return healthy, "\n".join(lines) + "\n"


class _DeadlineHandler(web.RequestHandler):
    """aiohttp's connection handler with a deadline for each request's headers.

    The deadline starts when the connection opens and again after each answer; it is off
    while a request is being handled. A client that trickles a partial request is cut.
    """

    def __init__(self, manager: web.Server, *, header_timeout: float, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self.header_timeout = header_timeout
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.arm()

    def connection_lost(self, exc: BaseException | None) -> None:
        self.disarm()
        super().connection_lost(exc)

    def arm(self) -> None:
        self.disarm()
        self._deadline = asyncio.get_running_loop().call_later(
            self.header_timeout, self.force_close
        )

    def disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class StatusServer:
    """aiohttp server for probes and metrics, started on the scheduler's event loop.

    `auth` None serves /metrics to anyone (plain-HTTP development mode or tests).
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        ready_checks: Mapping[str, Check],
        live_checks: Mapping[str, Check] | None = None,
        *,
        auth: DelegatedAuth | None = None,
        tls: ssl.SSLContext | None = None,
        options: ServingOptions | None = None,
    ) -> None:
        self.registry = registry
        self.ready_checks = ready_checks
        self.live_checks = live_checks or {}
        self.auth = auth
        self.tls = tls
        self.options = options or ServingOptions(plain_http=tls is None)
        self._runner: web.AppRunner | None = None
        self._server: asyncio.Server | None = None
        self.port = 0

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._deadline_middleware])
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/livez", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        return app

    @web.middleware
    async def _deadline_middleware(
        self, request: web.Request, handler: Handler
    ) -> web.StreamResponse:
        proto = request.protocol
        if isinstance(proto, _DeadlineHandler):
            proto.disarm()
        try:
            return await handler(request)
        finally:
            if isinstance(proto, _DeadlineHandler) and proto.transport is not None:
                proto.arm()

    async def _healthz(self, request: web.Request) -> web.Response:
        ok, text = _report(self.live_checks)
        return web.Response(text=text if self.live_checks else "ok", status=200 if ok else 500)

    async def _readyz(self, request: web.Request) -> web.Response:
        ok, text = _report(self.ready_checks)
        return web.Response(text=text, status=200 if ok else 503)

    async def _metrics(self, request: web.Request) -> web.Response:
        denied = await self._check_access(request)
        if denied is not None:
            return denied
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _check_access(self, request: web.Request) -> web.Response | None:
        """None when the request may proceed, else the 401/403/500 answer (kube's texts)."""
        if self.auth is None:
            return None
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return _status(401, "Unauthorized", "Unauthorized")
        try:
            user = await self.auth.authenticate(token)
        except Exception as exc:  # the API server's answer, whatever it is: not authenticated
            log.warning("token review failed", error=str(exc))
            user = None
        if user is None:
            return _status(401, "Unauthorized", "Unauthorized")
        try:
            allowed, reason = await self.auth.authorize(user, "get", request.path)
        except Exception as exc:
            log.warning("subject access review failed", error=str(exc), user=user.username)
            return _status(500, "InternalError", "Internal Server Error: authorization failed")
        if not allowed:
            message = f'forbidden: User "{user.username}" cannot get path "{request.path}"'
            return _status(403, "Forbidden", message + (f": {reason}" if reason else ""))
        return None

    async def start(
        self, host: str = "127.0.0.1", port: int = 0, sock: socket.socket | None = None
    ) -> int:
        """Listen on `sock` (already bound) or on host:port; returns the bound port."""
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        manager = self._runner.server
        assert manager is not None
        loop = asyncio.get_running_loop()
        header_timeout = self.options.header_timeout

        def handler() -> web.RequestHandler:
            return _DeadlineHandler(
                manager, loop=loop, access_log=None, header_timeout=header_timeout
            )

        tls_kw: dict[str, Any] = {}
        if self.tls is not None:
            tls_kw = {"ssl": self.tls, "ssl_handshake_timeout": self.options.handshake_timeout}
        if sock is not None:
            self._server = await loop.create_server(handler, sock=sock, **tls_kw)
        else:
            self._server = await loop.create_server(
                handler, host, port, reuse_address=True, **tls_kw
            )
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
