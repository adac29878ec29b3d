"""The device plugin's Prometheus metrics, in a registry of its own."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge

from scheduler.agent.deviceplugin.health import Inventory


class PluginMetrics:
    """`topo_scheduler_gpu_set_mismatches_total` and companions, served on /metrics."""

    def __init__(self, inventory: Inventory, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.mismatches = Counter(
            "topo_scheduler_gpu_set_mismatches_total",
            "Containers the kubelet gave other GPUs than the set recorded on their pod.",
            registry=self.registry,
        )
        self.allocations = Counter(
            "topo_scheduler_device_plugin_allocations_total",
            "Containers allocated, by where the preferred set came from "
            "(recorded, no-record, record-unavailable, no-pod, api-unreachable, "
            "kubelet-unreachable, bad-record).",
            ["source"],
            registry=self.registry,
        )
        devices = Gauge(
            "topo_scheduler_device_plugin_devices",
            "GPUs advertised to the kubelet, by health.",
            ["health"],
            registry=self.registry,
        )

        def counter(healthy: bool) -> Callable[[], float]:
            return lambda: float(sum(g.healthy == healthy for g in inventory.devices()))

        devices.labels("Healthy").set_function(counter(True))
        devices.labels("Unhealthy").set_function(counter(False))

    def mismatch(self) -> None:
        self.mismatches.inc()

    def allocation(self, source: str) -> None:
        self.allocations.labels(source).inc()
