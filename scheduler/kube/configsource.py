"""The scheduler configuration from a ConfigMap (key `config.yaml`), watched and applied live.

A valid change is applied from the next cycle, logged and counted; an invalid one is logged,
counted, reported as a Warning Event on the ConfigMap, and the last good configuration stays.
At startup an invalid or missing ConfigMap is an error (the process fails fast).

Whatever the text holds (nesting 50,000 levels deep, a 5,001-digit integer, `2020-02-30`),
it goes through that rejection path, never out of the watch. The watch itself is supervised:
if it ever stops it is restarted with backoff, and `health()` (the `/readyz` `config` check)
fails while it is not running.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Any

import structlog

from scheduler.core.config import ConfigError, SchedulerConfiguration, load_config
from scheduler.core.framework import Framework
from scheduler.core.safeload import with_origin
from scheduler.kube.client import KubeClient
from scheduler.kube.events import EventRecorder, ObjectRef
from scheduler.kube.informer import Backoff, Reflector
from scheduler.kube.metrics import Metrics

Obj = dict[str, Any]
Builder = Callable[[SchedulerConfiguration], dict[str, Framework]]
Apply = Callable[[SchedulerConfiguration, dict[str, Framework]], None]
log = structlog.get_logger("topo_scheduler.core.config")

CONFIG_KEY = "config.yaml"


def load_and_build(
    text: str, origin: str, builder: Builder, field: str = ""
) -> tuple[SchedulerConfiguration, dict[str, Framework]]:
    """Validated configuration and its frameworks; any failure is a ConfigError naming
    `origin` (and `field`, the place of the text in it), never another exception."""
    where = f"{origin}: {field}: " if field else f"{origin}: "
    try:
        config = load_config(text, origin=where[:-2])
        return config, builder(config)
    except ConfigError as exc:
        raise ConfigError(with_origin(where[:-2], str(exc))) from None
    except RecursionError:
        raise ConfigError(f"{where}nesting too deep") from None
    except Exception as exc:  # a YAML scalar Python refuses (huge integer, impossible date)
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if "digits" in detail:
            detail = f"integer too long ({detail.partition(':')[0].lower()})"
        raise ConfigError(f"{where}invalid value: {detail}") from None


def parse_config_map(
    obj: Obj, builder: Builder
) -> tuple[SchedulerConfiguration, dict[str, Framework]]:
    """ConfigMap -> validated configuration and its frameworks; ConfigError names the field."""
    md = obj.get("metadata") or {}
    origin = f"configmap {md.get('namespace')}/{md.get('name')}"
    data = obj.get("data") or {}
    text = data.get(CONFIG_KEY)
    if text is None:
        raise ConfigError(f"{origin}: data.{CONFIG_KEY}: Required value")
    return load_and_build(str(text), origin, builder, f"data.{CONFIG_KEY}")


class ConfigMapSource:
    """Reflector handler for one ConfigMap; calls `apply` with each valid new configuration."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        name: str,
        builder: Builder,
        apply: Apply,
        recorder: EventRecorder,
        metrics: Metrics,
        backoff: Backoff | None = None,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.builder = builder
        self.apply = apply
        self.recorder = recorder
        self.metrics = metrics
        self.last_text: str | None = None
        self.last_error: str | None = None
        self.backoff = backoff or Backoff()
        self.task: asyncio.Task[None] | None = None
        self.watching = False
        self.watch_error: str | None = None
        self.reflector = Reflector(
            client,
            f"/api/v1/namespaces/{namespace}/configmaps",
            self,
            name=f"configmap/{namespace}/{name}",
            field_selector=f"metadata.name={name}",
            backoff=backoff,
        )

    async def load_initial(self) -> tuple[SchedulerConfiguration, dict[str, Framework]]:
        """Read the ConfigMap once; raises ApiError (e.g. 404) or ConfigError."""
        obj = await self.client.get(f"/api/v1/namespaces/{self.namespace}/configmaps/{self.name}")
        config, frameworks = parse_config_map(obj, self.builder)
        self.last_text = str((obj.get("data") or {}).get(CONFIG_KEY))
        return config, frameworks

    def start(self) -> asyncio.Task[None]:
        self.task = asyncio.create_task(self.run(), name="config-informer")
        return self.task

    async def run(self) -> None:
        """Watch until cancelled; a watch that stops is logged and restarted with backoff."""
        rng = random.Random()
        failures = 0
        while True:
            started = time.monotonic()
            self.watching = True
            try:
                await self.reflector.run()
                error = "watch returned"
            except Exception as exc:  # a bug must not end config reloads silently
                error = f"{type(exc).__name__}: {exc}"
            finally:
                self.watching = False
            failures = 1 if time.monotonic() - started > 60 else failures + 1
            self.watch_error = error
            delay = self.backoff.delay(failures, rng)
            log.error(
                "configuration watch stopped, restarting",
                configmap=f"{self.namespace}/{self.name}",
                error=error,
                retry_in=round(delay, 3),
            )
            await asyncio.sleep(delay)

    def health(self) -> tuple[bool, str]:
        """The `/readyz` `config` check: the watch runs; a rejected change is only shown."""
        if self.task is not None and self.task.done():
            return False, "configuration watch stopped"
        if self.task is not None and not self.watching:
            return False, f"configuration watch restarting after: {self.watch_error}"
        # the last good configuration is in use; a rejected change is reported, not fatal
        return True, f"last change rejected: {self.last_error}" if self.last_error else ""

    def on_upsert(self, obj: Obj, old: Obj | None) -> None:
        text = (obj.get("data") or {}).get(CONFIG_KEY)
        if text is not None and str(text) == self.last_text:
            return  # unchanged (or the initial version, already applied)
        self.last_text = None if text is None else str(text)
        md = obj.get("metadata") or {}
        try:
            config, frameworks = parse_config_map(obj, self.builder)
        except ConfigError as exc:
            self.last_error = str(exc)
            self.metrics.config_reloads.labels("failure").inc()
            log.error(
                "configuration rejected, keeping the last good one",
                error=str(exc),
                configmap=f"{self.namespace}/{self.name}",
                resource_version=md.get("resourceVersion"),
            )
            ref = ObjectRef("ConfigMap", self.namespace, self.name, str(md.get("uid") or ""))
            self.recorder.record(ref, "Warning", "InvalidConfiguration", "Reload", str(exc))
            return
        self.last_error = None
        try:
            self.apply(config, frameworks)
        except Exception as exc:  # a bug: keep watching, retry this text on its next delivery
            self.last_text = None
            self.metrics.config_reloads.labels("failure").inc()
            log.exception("applying the configuration failed", error=str(exc))
            return
        self.metrics.config_reloads.labels("success").inc()
        log.info(
            "configuration applied",
            configmap=f"{self.namespace}/{self.name}",
            resource_version=md.get("resourceVersion"),
            profiles=[p.scheduler_name for p in config.profiles],
        )

    def on_delete(self, obj: Obj) -> None:
        self.last_text = None
        log.warning(
            "configuration ConfigMap deleted, keeping the last good configuration",
            configmap=f"{self.namespace}/{self.name}",
        )
