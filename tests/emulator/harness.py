"""Run `topo-scheduler run` processes (as coroutines) against the emulator in tests.

Short timings everywhere (backoffs, lease) keep scenario tests fast; `wait_for` polls a
condition on the emulator from the scheduler's event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scheduler.kube.cli import Settings, serve
from scheduler.kube.client import ClientOptions
from scheduler.kube.informer import Backoff
from scheduler.kube.leader import LeaseTiming
from scheduler.kube.scheduler import KubeScheduler, Options
from scheduler.kube.server import ServingOptions, StatusServer

from . import Emulator


def fast_settings(emu: Emulator, **overrides: Any) -> Settings:
    """Settings for a test replica: emulator URL, short backoffs, ephemeral HTTP port.

    The endpoints are plain HTTP without authentication (the development mode) unless
    `serving` is overridden; tests of the secure port pass their own.
    """
    options = Options(
        initial_backoff=0.05,
        max_backoff=0.2,
        max_unschedulable=5.0,
        watch_timeout=30,
        reflector_backoff=Backoff(initial=0.02, maximum=0.2, jitter=0.5),
        shutdown_grace=5.0,
    )
    settings = Settings(
        url=emu.url,
        bind_address="127.0.0.1:0",
        client=ClientOptions(qps=5000, burst=5000, timeout=3.0, max_retry_after=0.2),
        options=options,
        lease_namespace="kube-system",
        lease_timing=LeaseTiming(lease_duration=1.5, renew_deadline=1.0, retry_period=0.2),
        serving=ServingOptions(plain_http=True),
        startup_timeout=5.0,
    )
    for key, value in overrides.items():
        setattr(settings, key, value)
    return settings


@dataclass
class Replica:
    """One running scheduler process inside the test's event loop."""

    settings: Settings
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[int] | None = None
    sched: KubeScheduler | None = None
    server: StatusServer | None = None

    def start(self) -> Replica:
        def ready(sched: KubeScheduler, server: StatusServer) -> None:
            self.sched, self.server = sched, server

        self.settings.on_ready = ready
        self.task = asyncio.create_task(serve(self.settings, self.stop))
        return self

    async def shutdown(self, timeout: float = 10.0) -> int:
        """SIGTERM equivalent; returns the exit code."""
        self.stop.set()
        assert self.task is not None
        return await asyncio.wait_for(self.task, timeout)


async def wait_for(
    cond: Callable[[], bool], timeout: float = 20.0, what: str = "condition"
) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def all_bound_once(emu: Emulator, keys: list[str]) -> bool:
    """Every pod in `keys` exists, has a node, and got exactly one successful binding."""
    bindings = emu.bindings()
    pods = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in emu.pods()}
    return all(
        k in pods and pods[k]["spec"].get("nodeName") and len(bindings.get(k, [])) == 1
        for k in keys
    )
