"""`topo-scheduler run`: wire client, config, cache, queue, leader election and HTTP together.

`run_scheduler(args)` is the command; `serve(settings, stop)` is the same process as a
coroutine so tests run several replicas against the emulator in one event loop.
Exit codes: 0 after SIGTERM (bindings finished, lease released); 2 when a flag or a file it
names is unusable (bad --bind-address, port in use, --kube-api-qps 0, a missing or garbage
kubeconfig, --config or certificate), with one line naming it; 1 when the cluster refuses to
start us (API server unreachable for --startup-timeout, invalid ConfigMap) or after losing
leadership (restart cleanly).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import math
import os
import signal
import socket
import ssl
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from scheduler.core.config import ConfigError, SchedulerConfiguration, default_config
from scheduler.core.framework import Framework
from scheduler.kube.client import ApiError, ClientOptions, KubeClient
from scheduler.kube.configsource import ConfigMapSource, load_and_build
from scheduler.kube.credentials import CredentialsError
from scheduler.kube.discovery import LEASES_V1, ServerAPIs, discover
from scheduler.kube.events import EventRecorder
from scheduler.kube.leader import LeaderElector, LeaseTiming
from scheduler.kube.metrics import Metrics
from scheduler.kube.scheduler import KubeScheduler, Options, collector_paused_until_synced
from scheduler.kube.server import (
    DelegatedAuth,
    ServingError,
    ServingOptions,
    StatusServer,
    listen,
    parse_bind_address,
    tls_context,
)

log = structlog.get_logger("topo_scheduler")
Builder = Callable[[SchedulerConfiguration], dict[str, Framework]]


def default_builder(config: SchedulerConfiguration) -> dict[str, Framework]:
    """Frameworks for every profile, from the shipped plugin registry."""
    from plugins import frameworks_for

    return frameworks_for(config)


@dataclass
class Settings:
    """Everything `serve` needs; built from the command line or by tests."""

    kubeconfig: str | None = None
    url: str | None = None  # plain-HTTP API server (tests); overrides kubeconfig
    config_file: str | None = None
    config_map: str | None = None  # NAMESPACE/NAME
    leader_elect: bool = False
    lease_namespace: str = "kube-system"
    lease_name: str = "topo-scheduler"
    lease_timing: LeaseTiming = field(default_factory=LeaseTiming)
    identity: str = field(default_factory=lambda: f"{socket.gethostname()}_{uuid.uuid4()}")
    bind_address: str | None = "0.0.0.0:10259"
    client: ClientOptions = field(default_factory=ClientOptions)
    # Events' own client (kube-scheduler's eventClient); None: the scheduling client's limits,
    # in a separate token bucket
    event_client: ClientOptions | None = None
    options: Options = field(default_factory=Options)
    builder: Builder = default_builder
    on_ready: Callable[[KubeScheduler, StatusServer], None] | None = None
    serving: ServingOptions = field(default_factory=ServingOptions)
    startup_timeout: float = 60.0  # how long to wait for the API server before exiting 1
    # prepared by run_scheduler before connecting, so that their errors exit 2 at once
    listener: socket.socket | None = None
    tls: ssl.SSLContext | None = None
    file_config: tuple[SchedulerConfiguration, dict[str, Framework]] | None = None


class UsageError(Exception):
    """A flag or a file it names is unusable: one line naming it, exit 2."""


class StartupError(Exception):
    """The cluster did not let us start (API server unreachable, credentials refused): exit 1."""


# The API client used to review /metrics tokens has its own rate limit, so that requests
# with random tokens cannot spend the scheduler's API budget.
AUTH_CLIENT = ClientOptions(qps=20.0, burst=40, user_agent="topo-scheduler/auth")


def _namespace() -> str:
    path = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
    with contextlib.suppress(OSError):
        return path.read_text().strip() or "kube-system"
    return "kube-system"


def settings_from_args(args: argparse.Namespace) -> Settings:
    return Settings(
        kubeconfig=args.kubeconfig,
        config_file=args.config,
        config_map=args.config_map,
        leader_elect=args.leader_elect,
        lease_namespace=args.leader_elect_namespace or _namespace(),
        lease_name=args.leader_elect_name,
        bind_address=args.bind_address,
        client=ClientOptions(qps=args.kube_api_qps, burst=args.kube_api_burst),
        event_client=event_client_options(args),
        serving=ServingOptions(
            plain_http=args.insecure_plain_http,
            cert_file=args.tls_cert_file,
            key_file=args.tls_private_key_file,
        ),
        startup_timeout=args.startup_timeout,
    )


def _positive(flag: str, value: float) -> None:
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"{flag}: must be a positive number, got {value}")


def validate_settings(settings: Settings) -> None:
    """Check the flags and the files they name; UsageError names the first bad one."""
    clients = [("--kube-api", settings.client)]
    if settings.event_client is not None:
        clients.append(("--events", settings.event_client))
    for prefix, client in clients:
        _positive(f"{prefix}-qps", client.qps)
        if client.burst < 1:
            raise UsageError(f"{prefix}-burst: must be at least 1, got {client.burst}")
    _positive("--startup-timeout", settings.startup_timeout)
    if settings.config_map:
        ns, _, name = settings.config_map.partition("/")
        if not ns or not name or "/" in name:
            raise UsageError(f"--config-map: must be NAMESPACE/NAME, got {settings.config_map!r}")
    if settings.kubeconfig is not None:
        path = Path(settings.kubeconfig)
        if not path.is_file():
            what = "is a directory" if path.is_dir() else "no such file"
            raise UsageError(f"--kubeconfig {settings.kubeconfig}: {what}")
        if not os.access(path, os.R_OK):
            raise UsageError(f"--kubeconfig {settings.kubeconfig}: permission denied")
    elif settings.url is None and not os.environ.get("KUBERNETES_SERVICE_HOST"):
        raise UsageError(
            "--kubeconfig: required outside a pod (no in-cluster service account: "
            "KUBERNETES_SERVICE_HOST is not set)"
        )


def prepare(settings: Settings) -> None:
    """Everything that can fail because of a flag, before any API call: UsageError."""
    validate_settings(settings)
    try:
        if settings.config_file and settings.file_config is None:
            text = _read_text("--config", settings.config_file)
            settings.file_config = load_and_build(text, settings.config_file, settings.builder)
        if settings.bind_address:
            parse_bind_address(settings.bind_address)
            if not settings.serving.plain_http and settings.tls is None:
                settings.tls = tls_context(settings.serving)
            if settings.listener is None:
                settings.listener = listen(settings.bind_address)
    except (ServingError, ConfigError) as exc:
        raise UsageError(str(exc)) from None


def _read_text(flag: str, path: str) -> str:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"{flag} {path}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{flag} {path}: not UTF-8 text (byte {exc.start})") from None


def event_client_options(args: argparse.Namespace) -> ClientOptions | None:
    """`--events-qps` / `--events-burst`, each defaulting to the scheduling client's value."""
    qps = getattr(args, "events_qps", None)
    burst = getattr(args, "events_burst", None)
    if qps is None and burst is None:
        return None
    return ClientOptions(
        qps=qps if qps is not None else args.kube_api_qps,
        burst=burst if burst is not None else args.kube_api_burst,
    )


def event_client_for(settings: Settings, client: KubeClient) -> KubeClient:
    """The event client: same credentials, its own rate limit, connections and user agent."""
    base = settings.event_client or settings.client
    options = dataclasses.replace(base, user_agent=f"{base.user_agent}-events")
    return client.sibling(options)


def count_timeouts(metrics: Metrics, **clients: KubeClient) -> None:
    for name, client in clients.items():
        client.on_timeout = metrics.client_timeouts.labels(name).inc


def run_scheduler(args: argparse.Namespace) -> int:
    """The `run` subcommand: serve until SIGTERM/SIGINT."""
    from scheduler.logs import configure

    configure()
    settings = settings_from_args(args)
    try:
        prepare(settings)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        return await serve(settings, stop)

    return asyncio.run(main())


async def _load_config(
    settings: Settings,
    client: KubeClient,
    metrics: Metrics,
    recorder: EventRecorder,
    apply: Callable[[SchedulerConfiguration, dict[str, Framework]], None],
) -> tuple[SchedulerConfiguration, dict[str, Framework], ConfigMapSource | None]:
    if settings.config_map:
        ns, _, name = settings.config_map.partition("/")  # checked by validate_settings
        source = ConfigMapSource(
            client,
            ns,
            name,
            settings.builder,
            apply,
            recorder,
            metrics,
            backoff=settings.options.reflector_backoff,
        )
        config, frameworks = await source.load_initial()
        return config, frameworks, source
    if settings.file_config is not None:  # read and checked by prepare()
        return *settings.file_config, None
    config = default_config()
    return config, settings.builder(config), None


async def _connect(settings: Settings, options: ClientOptions) -> KubeClient:
    """A client from --kubeconfig, the pod's service account or the test URL; UsageError."""
    if settings.url:
        return KubeClient.for_url(settings.url, options)
    try:
        return await KubeClient.connect(settings.kubeconfig, options)
    except CredentialsError as exc:  # in-cluster: not in a pod, or its service account unusable
        raise UsageError(f"in-cluster config: {exc}") from None
    except Exception as exc:  # the kubeconfig loader raises anything on a garbage file
        detail = "nesting too deep" if isinstance(exc, RecursionError) else str(exc)
        detail = detail.splitlines()[0] if detail else type(exc).__name__
        raise UsageError(
            f"--kubeconfig {settings.kubeconfig}: not a usable kubeconfig: {detail}"
        ) from None


async def wait_for_api(client: KubeClient, timeout: float) -> dict[str, Any]:
    """Wait until the API server answers (GET /version) and return that answer ({} when it
    refuses /version but answers); StartupError after `timeout`.

    Transport errors, timeouts, 5xx and 429 are retried with a backoff of 0.5 s doubling up
    to 5 s; a 401 means the credentials are refused and fails at once.
    """
    deadline = time.monotonic() + timeout
    delay = 0.5
    while True:
        left = deadline - time.monotonic()
        try:
            async with asyncio.timeout(max(left, 0.001)):
                return await client.request("GET", "/version", timeout=max(min(left, 10.0), 0.001))
        except TimeoutError:
            error = "timed out"
        except ApiError as exc:
            if exc.status == 401:
                raise StartupError(f"API server refused the credentials: {exc}") from None
            if exc.status and exc.status < 500 and exc.status != 429:
                return {}  # it answers (e.g. 403 or 404 on /version): reachable
            error = str(exc)
        left = deadline - time.monotonic()
        if left <= 0:
            raise StartupError(
                f"API server {client.endpoint.host} unreachable for {timeout:g}s "
                f"(--startup-timeout): {error}"
            )
        log.warning("waiting for the API server", error=error, retry_in=round(delay, 2))
        await asyncio.sleep(min(delay, left))
        delay = min(delay * 2, 5.0)


async def serve(settings: Settings, stop: asyncio.Event) -> int:
    """Run one scheduler process until `stop` is set or leadership is lost."""
    try:
        prepare(settings)
        client = await _connect(settings, settings.client)
    except UsageError as exc:
        log.error("cannot start", error=str(exc))
        print(f"error: {exc}", file=sys.stderr)
        _close_listener(settings)
        return 2
    events = event_client_for(settings, client)
    try:
        version = await wait_for_api(client, settings.startup_timeout)
        return await _serve(settings, stop, client, events, version)
    except (StartupError, UsageError) as exc:
        log.error("cannot start", error=str(exc))
        print(f"error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, UsageError) else 1
    finally:
        _close_listener(settings)
        await events.close()
        await client.close()


def _close_listener(settings: Settings) -> None:
    if settings.listener is not None:
        settings.listener.close()
        settings.listener = None


async def _status_server(
    settings: Settings,
    client: KubeClient,
    registry: Metrics,
    checks: dict[str, Callable[[], tuple[bool, str]]],
) -> tuple[StatusServer, KubeClient | None]:
    """The HTTPS (or development plain-HTTP) endpoints, listening on the prepared socket."""
    auth_client = None
    auth = None
    if settings.tls is not None:
        auth_client = client.sibling(AUTH_CLIENT)
        auth = DelegatedAuth(auth_client, ttl=settings.serving.auth_cache_ttl)
    server = StatusServer(
        registry.registry, checks, auth=auth, tls=settings.tls, options=settings.serving
    )
    if settings.listener is not None:
        await server.start(sock=settings.listener)
        settings.listener = None  # the server owns it now
    return server, auth_client


async def _serve(
    settings: Settings,
    stop: asyncio.Event,
    client: KubeClient,
    events: KubeClient,
    version: dict[str, Any],
) -> int:
    metrics = Metrics()
    count_timeouts(metrics, scheduling=client, events=events)
    recorder = EventRecorder(events, metrics=metrics)
    holder: list[KubeScheduler] = []

    def apply(config: SchedulerConfiguration, frameworks: dict[str, Framework]) -> None:
        holder[0].apply_config(config, frameworks)

    apis = await _check_server_apis(settings, client, recorder, version)
    if apis is None:
        return 1
    try:
        config, frameworks, source = await _load_config(settings, client, metrics, recorder, apply)
    except (ConfigError, ApiError, OSError) as exc:
        log.error("cannot start: invalid configuration", error=str(exc))
        print(f"error: {exc}", file=sys.stderr)
        return 1
    sched = KubeScheduler(
        client,
        config,
        frameworks,
        metrics=metrics,
        recorder=recorder,
        options=settings.options,
        apis=apis,
    )
    holder.append(sched)

    def informers_synced() -> tuple[bool, str]:
        return sched.synced, "" if sched.synced else "informers not synced"

    def config_valid() -> tuple[bool, str]:
        return source.health() if source is not None else (True, "")

    server, auth_client = await _status_server(
        settings, client, metrics, {"informer-sync": informers_synced, "config": config_valid}
    )
    tasks: list[asyncio.Task[None]] = [
        asyncio.create_task(collector_paused_until_synced(sched), name="gc-until-synced")
    ]
    await sched.start()
    if source is not None:
        tasks.append(source.start())
    if settings.on_ready is not None:
        settings.on_ready(sched, server)
    elector = None
    if settings.leader_elect:
        elector = LeaderElector(
            client,
            settings.lease_namespace,
            settings.lease_name,
            settings.identity,
            settings.lease_timing,
        )
    code = 0
    try:
        code = await _lead_and_schedule(sched, elector, stop, metrics, settings)
    finally:
        # one grace period for everything: bindings, the lease, then the queued Events
        grace_ends = time.monotonic() + settings.options.shutdown_grace
        sched.stop_scheduling()
        await sched.drain_bindings(settings.options.shutdown_grace)
        if elector is not None:
            await elector.release()
        await recorder.flush(grace_ends - time.monotonic())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await sched.close()
        await server.stop()
        if auth_client is not None:
            await auth_client.close()
        log.info("scheduler stopped", exit_code=code, bound=sched.scheduled)
    return code


async def _check_server_apis(
    settings: Settings, client: KubeClient, recorder: EventRecorder, version: dict[str, Any]
) -> ServerAPIs | None:
    """Discover the server's APIs; turn off what it lacks, None if the run cannot work."""
    apis = await discover(client, version)
    recorder.core_v1 = not apis.events_v1
    if settings.leader_elect and not apis.leases_v1:
        message = (
            f"--leader-elect needs {LEASES_V1} Leases (Kubernetes 1.14+), "
            f"not served by this API server {apis.version}".rstrip()
        )
        log.error("cannot start: " + message)
        print(f"error: {message}", file=sys.stderr)
        return None
    return apis


async def _first(*aws: asyncio.Task[None]) -> asyncio.Task[None]:
    done, _ = await asyncio.wait(aws, return_when=asyncio.FIRST_COMPLETED)
    return next(iter(done))


async def _lead_and_schedule(
    sched: KubeScheduler,
    elector: LeaderElector | None,
    stop: asyncio.Event,
    metrics: Metrics,
    settings: Settings,
) -> int:
    """Wait for leadership (if elected), then schedule until stop (0) or lost lease (1)."""

    async def wait_stop() -> None:
        await stop.wait()

    stopped = asyncio.create_task(wait_stop(), name="stop")
    hold: asyncio.Task[None] | None = None
    try:
        if elector is not None:
            metrics.is_leader.labels(settings.lease_name).set(0)
            acquire = asyncio.create_task(elector.acquire(), name="acquire")
            if await _first(acquire, stopped) is stopped:
                acquire.cancel()
                return 0
            metrics.is_leader.labels(settings.lease_name).set(1)
            # renew from now on, while the first lists are still coming in: a slow sync must
            # not let the Lease lapse (a standby would take it while we go on to schedule)
            hold = asyncio.create_task(elector.hold(), name="hold-lease")
        synced = asyncio.create_task(sched.wait_synced(), name="sync")
        first = await _first(synced, stopped, *([hold] if hold is not None else []))
        if first is not synced:
            synced.cancel()
            if first is hold:
                log.error("leadership lost before the informers synced")
                metrics.is_leader.labels(settings.lease_name).set(0)
                return 1
            return 0
        loop = asyncio.create_task(sched.schedule_loop(), name="schedule-loop")
        watchers = [loop, stopped]
        if hold is not None:
            watchers.append(hold)
        first = await _first(*watchers)
        if hold is not None and first is hold:
            # leadership lost: stop at once, start no new binding request, exit to restart
            sched.aborting = True
            sched.stop_scheduling()
            metrics.is_leader.labels(settings.lease_name).set(0)
            await loop
            return 1
        sched.stop_scheduling()
        if first is loop and loop.exception() is not None:
            log.error("scheduling loop failed", error=str(loop.exception()))
            return 1
        await loop
        return 0
    finally:
        stopped.cancel()
        if hold is not None and not hold.done():
            hold.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await hold
