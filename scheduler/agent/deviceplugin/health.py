"""The plugin's devices and their health, from NVML.

Devices are the node's whole GPUs that are not in MIG mode, each under its UUID with its
NUMA node. A GPU turns Unhealthy when

- NVML reports a critical XID error for it, except the XIDs NVIDIA's device plugin also
  skips because they are caused by applications, not the GPU (`SKIPPED_XIDS`): 13 graphics
  engine exception, 31 GPU memory page fault, 43 GPU stopped processing, 45 preemptive
  cleanup, 68 video processor exception, 109 context switch timeout;
- NVML reports a double-bit (uncorrectable) ECC error for it (single-bit errors are
  corrected by the hardware and only logged);
- its NVML calls fail (probed every `probe_interval` seconds; a GPU that fell off the bus,
  XID 79, fails them). A GPU whose calls succeed again turns Healthy again; one marked by an
  XID or ECC event stays Unhealthy until the plugin restarts, as with NVIDIA's plugin.

An event naming no device, or one whose device cannot be identified, or a failing event
wait, marks every GPU Unhealthy (NVIDIA's plugin does the same: it cannot tell which).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

from scheduler.core.topology.schema import Topology

log = logging.getLogger("topo_scheduler.device_plugin")

SKIPPED_XIDS = frozenset({13, 31, 43, 45, 68, 109})
"""Application-caused XIDs that do not make a GPU unhealthy (as in NVIDIA's plugin)."""


@dataclass(frozen=True)
class Gpu:
    """One advertised device."""

    index: int
    uuid: str
    numa_node: int | None
    healthy: bool


class Inventory:
    """The devices and their health; `changed` wakes the ListAndWatch streams."""

    def __init__(self, topology: Topology) -> None:
        self._topology = topology
        self._lock = threading.Condition()
        self._version = 0
        self._event_failed: set[int] = set()
        self._probe_failed: set[int] = {g.index for g in topology.gpus if not g.healthy}
        self._gpus = tuple(
            Gpu(g.index, g.uuid, g.numa_node, g.healthy)
            for g in topology.gpus
            if g.uuid and not g.mig_enabled
        )
        self.by_uuid = {g.uuid: g.index for g in self._gpus}
        self.by_index = {g.index: g.uuid for g in self._gpus}

    @property
    def version(self) -> int:
        with self._lock:
            return self._version

    def devices(self) -> tuple[Gpu, ...]:
        """The devices as they are now."""
        with self._lock:
            bad = self._event_failed | self._probe_failed
            return tuple(replace(g, healthy=g.index not in bad) for g in self._gpus)

    def topology(self) -> Topology:
        """The node's topology with the current health, for GPU set selection."""
        with self._lock:
            bad = self._event_failed | self._probe_failed
        gpus = tuple(replace(g, healthy=g.index not in bad) for g in self._topology.gpus)
        return replace(self._topology, gpus=gpus)

    def _set(self, failed: set[int], index: int, bad: bool, why: str) -> None:
        with self._lock:
            before = index in self._event_failed | self._probe_failed
            if bad:
                failed.add(index)
            else:
                failed.discard(index)
            after = index in self._event_failed | self._probe_failed
            if before != after:
                self._version += 1
                self._lock.notify_all()
        if before != after:
            state = "Unhealthy" if after else "Healthy"
            log.warning("GPU %s (%s) is %s: %s", index, self.by_index.get(index), state, why)

    def mark_event(self, index: int, why: str) -> None:
        """An XID/ECC event: Unhealthy until restart."""
        self._set(self._event_failed, index, True, why)

    def mark_probe(self, index: int, ok: bool, why: str) -> None:
        """The result of probing the GPU's NVML calls."""
        self._set(self._probe_failed, index, not ok, why)

    def wait_changed(self, seen: int, timeout: float) -> int:
        """Block until the version differs from `seen` (or timeout); the version now."""
        with self._lock:
            self._lock.wait_for(lambda: self._version != seen, timeout)
            return self._version

    def wake(self) -> None:
        """Wake every waiter (shutdown)."""
        with self._lock:
            self._version += 1
            self._lock.notify_all()


class HealthMonitor:
    """Watches NVML events and probes each GPU; runs until `stop` is set."""

    def __init__(
        self,
        nvml: Any,
        inventory: Inventory,
        stop: threading.Event,
        *,
        probe_interval: float = 10.0,
        wait_ms: int = 1000,
    ) -> None:
        self._nvml = nvml
        self._inventory = inventory
        self._stop = stop
        self._probe_interval = probe_interval
        self._wait_ms = wait_ms
        self._thread = threading.Thread(target=self._run, name="gpu-health", daemon=True)

    def start(self) -> HealthMonitor:
        self._thread.start()
        return self

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def probe(self) -> None:
        """Call NVML on every GPU; mark the ones whose calls fail."""
        nvml = self._nvml
        for gpu in self._inventory.devices():
            try:
                handle = nvml.nvmlDeviceGetHandleByUUID(gpu.uuid)
                nvml.nvmlDeviceGetMemoryInfo(handle)
            except nvml.NVMLError as exc:
                self._inventory.mark_probe(gpu.index, False, f"NVML call failed: {exc}")
            else:
                self._inventory.mark_probe(gpu.index, True, "NVML calls succeed again")

    def _register(self) -> Any:
        nvml = self._nvml
        mask = (
            nvml.nvmlEventTypeXidCriticalError
            | nvml.nvmlEventTypeDoubleBitEccError
            | nvml.nvmlEventTypeSingleBitEccError
        )
        try:
            event_set = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as exc:
            log.warning("NVML events unavailable (%s); health from probes only", exc)
            return None
        for gpu in self._inventory.devices():
            try:
                handle = nvml.nvmlDeviceGetHandleByUUID(gpu.uuid)
                nvml.nvmlDeviceRegisterEvents(handle, mask, event_set)
            except nvml.NVMLError as exc:
                log.warning("GPU %s: NVML events not registered (%s)", gpu.index, exc)
        return event_set

    def _all_unhealthy(self, why: str) -> None:
        for gpu in self._inventory.devices():
            self._inventory.mark_event(gpu.index, why)

    def handle_event(self, event: Any) -> None:
        """Apply one NVML event to the inventory."""
        nvml = self._nvml
        kind = int(event.eventType)
        if kind == nvml.nvmlEventTypeSingleBitEccError:
            log.info("corrected single-bit ECC error reported; GPU stays healthy")
            return
        xid = int(event.eventData)
        if kind == nvml.nvmlEventTypeXidCriticalError and xid in SKIPPED_XIDS:
            log.info("XID %s is caused by an application; GPU stays healthy", xid)
            return
        why = f"XID {xid}" if kind == nvml.nvmlEventTypeXidCriticalError else "double-bit ECC error"
        if event.device is None:
            self._all_unhealthy(f"{why} on an unnamed device")
            return
        try:
            uuid = nvml.nvmlDeviceGetUUID(event.device)
        except nvml.NVMLError:
            self._all_unhealthy(f"{why} on a device that cannot be identified")
            return
        text = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
        index = self._inventory.by_uuid.get(text)
        if index is None:
            log.info("%s on GPU %s, which this plugin does not advertise", why, text)
            return
        self._inventory.mark_event(index, why)

    def _run(self) -> None:
        nvml = self._nvml
        event_set = self._register()
        next_probe = 0.0
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                if now >= next_probe:
                    self.probe()
                    next_probe = now + self._probe_interval
                if event_set is None:
                    self._stop.wait(min(self._probe_interval, 1.0))
                    continue
                try:
                    event = nvml.nvmlEventSetWait_v2(event_set, self._wait_ms)
                except nvml.NVMLError_Timeout:
                    continue
                except nvml.NVMLError as exc:
                    self._all_unhealthy(f"waiting for NVML events failed: {exc}")
                    self._stop.wait(1.0)
                    continue
                self.handle_event(event)
        finally:
            if event_set is not None:
                with contextlib.suppress(nvml.NVMLError):
                    nvml.nvmlEventSetFree(event_set)
