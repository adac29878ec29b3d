"""`topo-scheduler device-plugin`: wire NVML (or `--fake-gpus`), the kubelet, the API server.

Every flag is checked before anything starts; a bad one ends the command with one line
naming the flag and exit status 2 (1 for what fails later: NVML, credentials, the metrics
port).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import sys
import threading
from dataclasses import dataclass
from types import FrameType
from typing import Any

from scheduler.agent.discovery import discover, read_sysfs_file
from scheduler.core.decode import parse_host_port, shown
from scheduler.core.topology.schema import GPU_RESOURCE

SOCKET_NAME = "topo-scheduler-gpu.sock"
_UNIX_PATH_MAX = 107  # sun_path holds 108 bytes with the terminating NUL
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_RESOURCE_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


class FlagError(ValueError):
    """A flag's value cannot be used; the message names the flag."""


def _subdomain(text: str, limit: int = 253) -> bool:
    return len(text) <= limit and _DNS_SUBDOMAIN.fullmatch(text) is not None


def check_resource_name(text: str) -> str:
    """An extended resource name as the kubelet accepts it from a device plugin
    (`DOMAIN/NAME`, the domain not kubernetes.io, e.g. nvidia.com/gpu)."""
    flag = f"--resource-name {shown(text)}"
    domain, sep, name = text.partition("/")
    if not sep:
        raise FlagError(f"{flag}: must be DOMAIN/NAME, e.g. {GPU_RESOURCE}")
    # The kubelet checks "requests." + name as a qualified name.
    if not _subdomain(f"requests.{domain}"):
        raise FlagError(f"{flag}: {shown(domain)} is not a DNS subdomain (e.g. nvidia.com)")
    if domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
        raise FlagError(f"{flag}: the kubernetes.io domain is reserved for native resources")
    if domain.startswith("requests."):
        raise FlagError(f"{flag}: must not start with 'requests.'")
    if len(name) > 63 or _RESOURCE_NAME.fullmatch(name) is None:
        raise FlagError(
            f"{flag}: {shown(name)} is not a resource name (up to 63 letters, digits, '-', "
            "'_' or '.', starting and ending with a letter or digit)"
        )
    return text


@dataclass(frozen=True)
class Flags:
    """The device plugin's flags, checked."""

    node_name: str
    resource_name: str
    host: str
    port: int
    device_plugin_dir: str
    pod_resources_socket: str
    kubeconfig: str | None
    fake_gpus: Any  # FakeGpusSpec | None (fakegpus imports pynvml, loaded only when asked)


def check_flags(args: argparse.Namespace) -> Flags:
    """Every device-plugin flag, or FlagError naming the first bad one."""
    node = args.node_name
    if not _subdomain(node):
        raise FlagError(
            f"--node-name {shown(node)}: not a node name (a DNS subdomain: lower-case "
            "letters, digits, '-' and '.')"
        )
    resource = (
        GPU_RESOURCE if args.resource_name is None else check_resource_name(args.resource_name)
    )
    address = args.metrics_bind_address
    if len(address) > 300:
        raise FlagError(f"--metrics-bind-address {shown(address)}: must be HOST:PORT")
    try:
        host, port = parse_host_port(address, "--metrics-bind-address")
    except ValueError as exc:
        raise FlagError(str(exc)) from None
    fake = None
    if args.fake_gpus is not None:
        from scheduler.core.topology.schema import TopologyError

        try:
            from scheduler.agent.fakegpus import parse_fake_gpus

            fake = parse_fake_gpus(args.fake_gpus)
        except TopologyError as exc:
            raise FlagError(str(exc)) from None
    directory = args.device_plugin_dir
    flag = f"--device-plugin-dir {shown(directory)}"
    if not directory:
        raise FlagError(f"{flag}: empty (the kubelet's /var/lib/kubelet/device-plugins)")
    # As NVIDIA's plugin: no directory to watch is an error at start, not an endless wait
    # (the chart mounts it with hostPath type Directory: the pod starts only when it exists).
    if not os.path.isdir(directory):
        what = "not a directory" if os.path.exists(directory) else "no such directory"
        raise FlagError(
            f"{flag}: {what}; it must be the kubelet's device plugin directory "
            "(/var/lib/kubelet/device-plugins), mounted read-write"
        )
    if not os.access(directory, os.W_OK | os.X_OK):
        raise FlagError(f"{flag}: not writable (the plugin creates its socket there)")
    if len(os.path.join(directory, SOCKET_NAME).encode()) > _UNIX_PATH_MAX:
        raise FlagError(
            f"{flag}: too long for a unix socket path ({SOCKET_NAME} must fit in "
            f"{_UNIX_PATH_MAX} bytes)"
        )
    socket = args.pod_resources_socket
    if not socket:
        raise FlagError(
            "--pod-resources-socket '': empty; the plugin needs the kubelet's PodResources "
            "socket (/var/lib/kubelet/pod-resources/kubelet.sock)"
        )
    if len(socket.encode()) > _UNIX_PATH_MAX:
        raise FlagError(f"--pod-resources-socket {shown(socket)}: too long for a unix socket")
    kubeconfig = args.kubeconfig
    if kubeconfig is not None and not os.path.isfile(kubeconfig):
        what = (
            "empty (omit the flag for in-cluster credentials)"
            if not kubeconfig
            else ("no such file")
        )
        raise FlagError(f"--kubeconfig {shown(kubeconfig)}: {what}")
    return Flags(node, resource, host, port, directory, socket, kubeconfig, fake)


def _nvml(flags: Flags) -> tuple[Any, Any]:
    """(nvml, sysfs reader): pynvml, or the fake for `--fake-gpus`."""
    if flags.fake_gpus is not None:
        from scheduler.agent.fakegpus import FakeNvml

        fake = FakeNvml(flags.fake_gpus, flags.node_name)
        return fake, fake.read_file
    import pynvml

    return pynvml, read_sysfs_file


def run_device_plugin(args: argparse.Namespace) -> int:
    """Run until SIGTERM/SIGINT; 2 with a one-line error for a bad flag, 1 when it cannot
    start."""
    prog = "device-plugin"
    try:
        flags = check_flags(args)
    except FlagError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    except ImportError:
        print(f"{prog}: the nvidia-ml-py package (module pynvml) is not installed", file=sys.stderr)
        return 1
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    from scheduler.agent.deviceplugin.health import HealthMonitor, Inventory
    from scheduler.agent.deviceplugin.kube import PodWatch, Reporter
    from scheduler.agent.deviceplugin.metrics import PluginMetrics
    from scheduler.agent.deviceplugin.plugin import DeviceListStrategy, DevicePlugin
    from scheduler.agent.deviceplugin.server import PluginServer, ServerConfig
    from scheduler.agent.podresources import list_pod_resources
    from scheduler.core.topology.schema import topology_from_dict

    log = logging.getLogger("topo_scheduler.device_plugin")
    try:
        nvml, read_file = _nvml(flags)
    except ImportError:
        print(f"{prog}: the nvidia-ml-py package (module pynvml) is not installed", file=sys.stderr)
        return 1
    try:
        nvml.nvmlInit()
        topology = topology_from_dict(discover(nvml, read_file), node=flags.node_name)
    except nvml.NVMLError as exc:
        print(f"{prog}: NVML on node {flags.node_name} failed: {exc}", file=sys.stderr)
        return 1
    try:
        from kubernetes import client, config

        if flags.kubeconfig is not None:
            config.load_kube_config(config_file=flags.kubeconfig)  # type: ignore[no-untyped-call]
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
        start_http_server(flags.port, flags.host, registry=metrics.registry)
    except OSError as exc:
        print(
            f"{prog}: --metrics-bind-address: cannot serve metrics on "
            f"{flags.host}:{flags.port}: {exc}",
            file=sys.stderr,
        )
        return 1
    if not os.path.exists(flags.pod_resources_socket):
        log.warning(
            "the kubelet's PodResources socket %s does not exist (yet): until it does, pods "
            "get our own best set and mismatches cannot be attributed",
            flags.pod_resources_socket,
        )
    watch = PodWatch(core, flags.node_name, stop).start()
    reporter = Reporter(core, flags.node_name, stop).start()
    socket = flags.pod_resources_socket
    plugin = DevicePlugin(
        inventory,
        watch,
        lambda: list_pod_resources(socket, timeout=5.0),
        reporter,
        metrics,
        resource_name=flags.resource_name,
        strategy=DeviceListStrategy(args.device_list_strategy),
    )
    HealthMonitor(nvml, inventory, stop).start()
    threading.Thread(
        target=plugin.run_reconciler, args=(stop,), name="reconciler", daemon=True
    ).start()
    server = PluginServer(
        plugin,
        ServerConfig(
            device_plugin_dir=flags.device_plugin_dir,
            socket_name=SOCKET_NAME,
            resource_name=flags.resource_name,
        ),
        stop,
    )

    def _stop(signum: int, frame: FrameType | None) -> None:
        stop.set()
        inventory.wake()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stop)
    log.info(
        "device plugin for %s on node %s: %d GPUs, device list strategy %s",
        flags.resource_name,
        flags.node_name,
        len(inventory.devices()),
        args.device_list_strategy,
    )
    server.run()
    reporter.close(timeout=5.0)
    return 0
