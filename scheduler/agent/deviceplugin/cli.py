"""`topo-scheduler device-plugin`: wire NVML (or `--fake-gpus`), the kubelet, the API server."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from types import FrameType
from typing import Any

from scheduler.agent.discovery import discover, read_sysfs_file
from scheduler.core.topology.schema import GPU_RESOURCE


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"--metrics-bind-address: expected HOST:PORT, got {text!r}")
    return host or "0.0.0.0", int(port)


def _nvml(args: argparse.Namespace) -> tuple[Any, Any]:
    """(nvml, sysfs reader): pynvml, or the fake for `--fake-gpus`."""
    if args.fake_gpus:
        from scheduler.agent.fakegpus import FakeNvml, parse_fake_gpus

        fake = FakeNvml(parse_fake_gpus(args.fake_gpus), args.node_name)
        return fake, fake.read_file
    import pynvml

    return pynvml, read_sysfs_file


def run_device_plugin(args: argparse.Namespace) -> int:
    """Run until SIGTERM/SIGINT; 1 with a one-line error when it cannot start."""
    resource = args.resource_name or GPU_RESOURCE
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    from scheduler.agent.deviceplugin.health import HealthMonitor, Inventory
    from scheduler.agent.deviceplugin.kube import PodWatch, Reporter
    from scheduler.agent.deviceplugin.metrics import PluginMetrics
    from scheduler.agent.deviceplugin.plugin import DeviceListStrategy, DevicePlugin
    from scheduler.agent.deviceplugin.server import PluginServer, ServerConfig
    from scheduler.agent.podresources import list_pod_resources
    from scheduler.core.topology.schema import TopologyError, topology_from_dict

    prog = "device-plugin"
    try:
        host, port = _host_port(args.metrics_bind_address)
        nvml, read_file = _nvml(args)
    except (ValueError, TopologyError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    except ImportError:
        print(f"{prog}: the nvidia-ml-py package (module pynvml) is not installed", file=sys.stderr)
        return 1
    try:
        nvml.nvmlInit()
        topology = topology_from_dict(discover(nvml, read_file), node=args.node_name)
    except nvml.NVMLError as exc:
        print(f"{prog}: NVML on node {args.node_name} failed: {exc}", file=sys.stderr)
        return 1
    try:
        from kubernetes import client, config

        if args.kubeconfig:
            config.load_kube_config(config_file=args.kubeconfig)  # type: ignore[no-untyped-call]
        else:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
        core = client.CoreV1Api()
    except Exception as exc:  # any credential problem ends here with one line
        print(f"{prog}: cannot load Kubernetes credentials: {exc}", file=sys.stderr)
        return 1

    stop = threading.Event()
    inventory = Inventory(topology)
    metrics = PluginMetrics(inventory)
    from prometheus_client import start_http_server

    try:
        start_http_server(port, host, registry=metrics.registry)
    except OSError as exc:
        print(f"{prog}: cannot serve metrics on {host}:{port}: {exc}", file=sys.stderr)
        return 1
    watch = PodWatch(core, args.node_name, stop).start()
    reporter = Reporter(core, args.node_name, stop).start()
    socket = args.pod_resources_socket
    plugin = DevicePlugin(
        inventory,
        watch,
        lambda: list_pod_resources(socket, timeout=5.0),
        reporter,
        metrics,
        resource_name=resource,
        strategy=DeviceListStrategy(args.device_list_strategy),
    )
    HealthMonitor(nvml, inventory, stop).start()
    server = PluginServer(
        plugin,
        ServerConfig(device_plugin_dir=args.device_plugin_dir, resource_name=resource),
        stop,
    )

    def _stop(signum: int, frame: FrameType | None) -> None:
        stop.set()
        inventory.wake()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stop)
    logging.getLogger("topo_scheduler.device_plugin").info(
        "device plugin for %s on node %s: %d GPUs, device list strategy %s",
        resource,
        args.node_name,
        len(inventory.devices()),
        args.device_list_strategy,
    )
    server.run()
    reporter.close(timeout=5.0)
    return 0
