"""The scheduler's HTTP endpoints: /healthz, /readyz and /metrics (kube-scheduler's paths).

/readyz lists each check like kube's `?verbose` output; a check is a name and a callable
returning (ok, detail). /metrics serves one process's own CollectorRegistry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

Check = Callable[[], tuple[bool, str]]


def parse_bind_address(text: str) -> tuple[str, int]:
    """`HOST:PORT` (IPv6 as `[::1]:10259`) -> (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"--bind-address: must be HOST:PORT, got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


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


class StatusServer:
    """aiohttp server for probes and metrics, started on the scheduler's event loop."""

    def __init__(
        self,
        registry: CollectorRegistry,
        ready_checks: Mapping[str, Check],
        live_checks: Mapping[str, Check] | None = None,
    ) -> None:
        self.registry = registry
        self.ready_checks = ready_checks
        self.live_checks = live_checks or {}
        self._runner: web.AppRunner | None = None
        self.port = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/livez", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        return app

    async def _healthz(self, request: web.Request) -> web.Response:
        ok, text = _report(self.live_checks)
        return web.Response(text=text if self.live_checks else "ok", status=200 if ok else 500)

    async def _readyz(self, request: web.Request) -> web.Response:
        ok, text = _report(self.ready_checks)
        return web.Response(text=text, status=200 if ok else 503)

    async def _metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def start(self, host: str, port: int) -> int:
        """Listen; returns the bound port (useful with port 0)."""
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.port = int(sockets[0].getsockname()[1]) if sockets else port
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
