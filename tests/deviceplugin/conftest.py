"""Fixtures: the API-server emulator, a fake kubelet, and the device plugin run in-process
(its real threads: pod watch, reporter, NVML health monitor, gRPC server) on a fake NVML."""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from fake_kubelet import FakeKubelet
from kubernetes import client

from scheduler.agent.deviceplugin.health import HealthMonitor, Inventory
from scheduler.agent.deviceplugin.kube import PodWatch, Reporter
from scheduler.agent.deviceplugin.metrics import PluginMetrics
from scheduler.agent.deviceplugin.plugin import DeviceListStrategy, DevicePlugin
from scheduler.agent.deviceplugin.server import PluginServer, ServerConfig
from scheduler.agent.discovery import discover
from scheduler.agent.fakegpus import FakeNvml, parse_fake_gpus
from scheduler.agent.podresources import list_pod_resources
from scheduler.core.topology.schema import topology_from_dict
from tests.emulator import Emulator
from tests.emulator.fixture import emulator

__all__ = ["emulator"]

NODE = "gpu-1"


def core_api(url: str) -> Any:
    """A CoreV1Api talking to the emulator."""
    config = client.Configuration()
    config.host = url
    return client.CoreV1Api(client.ApiClient(config))


@dataclass
class RunningPlugin:
    """One plugin 'process': its threads share `stop`."""

    plugin: DevicePlugin
    server: PluginServer
    nvml: FakeNvml
    metrics: PluginMetrics
    reporter: Reporter
    watch: PodWatch
    stop: threading.Event
    threads: list[threading.Thread | PodWatch | HealthMonitor] = field(default_factory=list)

    def shutdown(self) -> None:
        self.stop.set()
        self.plugin.inventory.wake()
        for thread in self.threads:
            thread.join(5)
        self.reporter.close(5)


@dataclass
class Node:
    """The emulator, one fake kubelet and (re)startable plugins on one node."""

    emu: Emulator
    kubelet: FakeKubelet
    tmp: str
    fake_gpus: str = "dgx-a100"
    strategy: DeviceListStrategy = DeviceListStrategy.ENVVAR
    api_url: str | None = None
    running: list[RunningPlugin] = field(default_factory=list)

    def start_plugin(self, nvml: FakeNvml | None = None) -> RunningPlugin:
        nvml = nvml or FakeNvml(parse_fake_gpus(self.fake_gpus), NODE)
        nvml.nvmlInit()
        topology = topology_from_dict(discover(nvml, nvml.read_file), node=NODE)
        inventory = Inventory(topology)
        stop = threading.Event()
        core = core_api(self.api_url or self.emu.url)
        watch = PodWatch(core, NODE, stop, timeout=1.0, max_backoff=0.2)
        reporter = Reporter(core, NODE, stop, initial_backoff=0.05)
        metrics = PluginMetrics(inventory)
        socket = self.kubelet.pod_resources_socket
        plugin = DevicePlugin(
            inventory,
            watch,
            lambda: list_pod_resources(socket, timeout=2.0),
            reporter,
            metrics,
            strategy=self.strategy,
        )
        server = PluginServer(
            plugin,
            ServerConfig(device_plugin_dir=self.kubelet.plugin_dir, poll_interval=0.05),
            stop,
        )
        monitor = HealthMonitor(nvml, inventory, stop, probe_interval=0.05, wait_ms=50)
        watch.start()
        reporter.start()
        monitor.start()
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        reconciler = threading.Thread(
            target=plugin.run_reconciler, args=(stop,), kwargs={"interval": 0.2}, daemon=True
        )
        reconciler.start()
        running = RunningPlugin(plugin, server, nvml, metrics, reporter, watch, stop)
        running.threads = [thread, watch, monitor, reconciler]
        self.running.append(running)
        return running

    def pod(self, name: str, gpus: int, recorded: str | None = None, **kw: Any) -> dict[str, Any]:
        """Create a pod bound to the node, with a recorded set when given."""
        annotations = dict(kw.pop("annotations", {}))
        if recorded is not None:
            annotations["topo-scheduler.io/gpus"] = recorded
        return self.emu.create_pod(
            name, gpus=gpus, node=NODE, annotations=annotations, namespace="ml", **kw
        )

    def node_pods(self) -> list[dict[str, Any]]:
        return [p for p in self.emu.pods() if p["spec"].get("nodeName") == NODE]


@pytest.fixture
def node(emulator: Emulator) -> Iterator[Node]:
    tmp = tempfile.mkdtemp(prefix="dp", dir="/tmp")  # unix socket paths must stay short
    emulator.create_node(NODE, gpus=8)
    kubelet = FakeKubelet(f"{tmp}/device-plugins", f"{tmp}/pod-resources.sock", lambda: [])
    result = Node(emulator, kubelet, tmp)
    kubelet.pods = result.node_pods
    kubelet.start()
    try:
        yield result
    finally:
        for running in result.running:
            running.shutdown()
        kubelet.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def index_of(running: RunningPlugin) -> Callable[[str], int]:
    return lambda uuid: running.plugin.inventory.by_uuid[uuid]


def settle(running: RunningPlugin, timeout: float = 5.0) -> None:
    """Wait until PodResources confirmed every allocation and the reports are written."""
    deadline = time.monotonic() + timeout
    while running.plugin.reconcile():
        assert time.monotonic() < deadline, "allocations not confirmed by PodResources"
        time.sleep(0.02)
    assert running.reporter.wait_idle(max(0.1, deadline - time.monotonic()))


@pytest.fixture(params=["pod-manager", "all-bound"])
def listing(request: pytest.FixtureRequest, node: Node) -> str:
    """Both PodResources listings: the kubelet's (the pod being admitted) and one that lists
    every bound pod."""
    node.kubelet.list_all = request.param == "all-bound"
    return str(request.param)


def start_registered(node: Node) -> RunningPlugin:
    """A plugin started, its pod watch synced and registered with the kubelet."""
    registered = len(node.kubelet.registrations)
    running = node.start_plugin()
    assert running.watch.synced.wait(5)
    node.kubelet.wait_registered(registered + 1)
    return running
