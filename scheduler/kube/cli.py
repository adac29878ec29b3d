"""`topo-scheduler run`: wire client, config, cache, queue, leader election and HTTP together.

`run_scheduler(args)` is the command; `serve(settings, stop)` is the same process as a
coroutine so tests run several replicas against the emulator in one event loop.
Exit codes: 0 after SIGTERM (bindings finished, lease released), 1 on a startup error
(bad configuration, unreachable API) or after losing leadership (restart cleanly).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import signal
import socket
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from scheduler.core.config import ConfigError, SchedulerConfiguration, default_config, load_config
from scheduler.core.framework import Framework
from scheduler.kube.client import ApiError, ClientOptions, KubeClient
from scheduler.kube.configsource import ConfigMapSource
from scheduler.kube.discovery import LEASES_V1, discover
from scheduler.kube.events import EventRecorder
from scheduler.kube.leader import LeaderElector, LeaseTiming
from scheduler.kube.metrics import Metrics
from scheduler.kube.scheduler import KubeScheduler, Options
from scheduler.kube.server import StatusServer, parse_bind_address

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
    )


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
        ns, _, name = settings.config_map.partition("/")
        if not ns or not name:
            raise ConfigError(f"--config-map: must be NAMESPACE/NAME, got {settings.config_map!r}")
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
    if settings.config_file:
        text = Path(settings.config_file).read_text()
        config = load_config(text, origin=settings.config_file)
    else:
        config = default_config()
    return config, settings.builder(config), None


async def serve(settings: Settings, stop: asyncio.Event) -> int:
    """Run one scheduler process until `stop` is set or leadership is lost."""
    if settings.url:
        client = KubeClient.for_url(settings.url, settings.client)
    else:
        client = await KubeClient.connect(settings.kubeconfig, settings.client)
    events = event_client_for(settings, client)
    try:
        return await _serve(settings, stop, client, events)
    finally:
        await events.close()
        await client.close()


async def _serve(
    settings: Settings, stop: asyncio.Event, client: KubeClient, events: KubeClient
) -> int:
    metrics = Metrics()
    count_timeouts(metrics, scheduling=client, events=events)
    recorder = EventRecorder(events, metrics=metrics)
    holder: list[KubeScheduler] = []

    def apply(config: SchedulerConfiguration, frameworks: dict[str, Framework]) -> None:
        holder[0].apply_config(config, frameworks)

    if not await _check_server_apis(settings, client, recorder):
        return 1
    try:
        config, frameworks, source = await _load_config(settings, client, metrics, recorder, apply)
    except (ConfigError, ApiError, OSError) as exc:
        log.error("cannot start: invalid configuration", error=str(exc))
        print(f"error: {exc}", file=sys.stderr)
        return 1
    sched = KubeScheduler(
        client, config, frameworks, metrics=metrics, recorder=recorder, options=settings.options
    )
    holder.append(sched)

    def informers_synced() -> tuple[bool, str]:
        return sched.synced, "" if sched.synced else "informers not synced"

    def config_valid() -> tuple[bool, str]:
        error = source.last_error if source is not None else None
        # the last good configuration is in use; a rejected change is reported, not fatal
        return True, f"last change rejected: {error}" if error else ""

    server = StatusServer(
        metrics.registry, {"informer-sync": informers_synced, "config": config_valid}
    )
    if settings.bind_address:
        host, port = parse_bind_address(settings.bind_address)
        await server.start(host, port)
    await sched.start()
    tasks: list[asyncio.Task[None]] = []
    if source is not None:
        tasks.append(asyncio.create_task(source.reflector.run(), name="config-informer"))
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
        log.info("scheduler stopped", exit_code=code, bound=sched.scheduled)
    return code


async def _check_server_apis(
    settings: Settings, client: KubeClient, recorder: EventRecorder
) -> bool:
    """Discover the server's APIs; turn off what it lacks, False if the run cannot work."""
    apis = await discover(client)
    recorder.core_v1 = not apis.events_v1
    if settings.leader_elect and not apis.leases_v1:
        message = (
            f"--leader-elect needs {LEASES_V1} Leases (Kubernetes 1.14+), "
            f"not served by this API server {apis.version}".rstrip()
        )
        log.error("cannot start: " + message)
        print(f"error: {message}", file=sys.stderr)
        return False
    return True


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
