"""The gRPC side: the DevicePlugin service on a unix socket, registration with the kubelet,
and re-registration when the kubelet restarts.

Lifecycle, as the kubelet expects it: serve `<dir>/<socket>`, then call `Register` on
`<dir>/kubelet.sock`. A restarting kubelet deletes every socket in the directory and
creates a new `kubelet.sock`; the plugin notices either change (polling, every
`poll_interval` seconds), serves a fresh socket and registers again.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc

from scheduler.agent.deviceplugin.health import Inventory
from scheduler.agent.deviceplugin.plugin import AllocationError, DevicePlugin
from scheduler.agent.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from scheduler.core.topology.schema import GPU_RESOURCE

log = logging.getLogger("topo_scheduler.device_plugin")

API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"


def list_and_watch_response(inventory: Inventory) -> api_pb2.ListAndWatchResponse:
    """The device list as the kubelet receives it."""
    devices = []
    for gpu in inventory.devices():
        topology = None
        if gpu.numa_node is not None:
            topology = api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=gpu.numa_node)])
        devices.append(
            api_pb2.Device(
                ID=gpu.uuid, health=HEALTHY if gpu.healthy else UNHEALTHY, topology=topology
            )
        )
    return api_pb2.ListAndWatchResponse(devices=devices)


class DevicePluginService(api_pb2_grpc.DevicePluginServicer):
    """v1beta1.DevicePlugin over a DevicePlugin."""

    def __init__(self, plugin: DevicePlugin, stop: threading.Event) -> None:
        self._plugin = plugin
        self._stop = stop

    def GetDevicePluginOptions(
        self, request: api_pb2.Empty, context: grpc.ServicerContext
    ) -> api_pb2.DevicePluginOptions:
        return api_pb2.DevicePluginOptions(
            pre_start_required=False, get_preferred_allocation_available=True
        )

    def ListAndWatch(
        self, request: api_pb2.Empty, context: grpc.ServicerContext
    ) -> Iterator[api_pb2.ListAndWatchResponse]:
        inventory = self._plugin.inventory
        seen = inventory.version
        yield list_and_watch_response(inventory)
        while context.is_active() and not self._stop.is_set():
            now = inventory.wait_changed(seen, 0.5)
            if now != seen and context.is_active():
                seen = now
                yield list_and_watch_response(inventory)

    def GetPreferredAllocation(
        self, request: api_pb2.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> api_pb2.PreferredAllocationResponse:
        responses = []
        for req in request.container_requests:
            try:
                ids = self._plugin.preferred(
                    list(req.available_deviceIDs),
                    list(req.must_include_deviceIDs),
                    int(req.allocation_size),
                )
            except AllocationError as exc:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            responses.append(api_pb2.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return api_pb2.PreferredAllocationResponse(container_responses=responses)

    def Allocate(
        self, request: api_pb2.AllocateRequest, context: grpc.ServicerContext
    ) -> api_pb2.AllocateResponse:
        try:
            answers = self._plugin.allocate(
                [list(r.devices_ids) for r in request.container_requests]
            )
        except AllocationError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return api_pb2.AllocateResponse(
            container_responses=[
                api_pb2.ContainerAllocateResponse(
                    envs=a.envs, cdi_devices=[api_pb2.CDIDevice(name=n) for n in a.cdi_devices]
                )
                for a in answers
            ]
        )

    def PreStartContainer(
        self, request: api_pb2.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> api_pb2.PreStartContainerResponse:
        return api_pb2.PreStartContainerResponse()


@dataclass(frozen=True)
class ServerConfig:
    """Where to serve and register."""

    device_plugin_dir: str = "/var/lib/kubelet/device-plugins"
    socket_name: str = "topo-scheduler-gpu.sock"
    resource_name: str = GPU_RESOURCE
    poll_interval: float = 1.0
    register_timeout: float = 5.0
    waiting_reminder: float = 60.0  # seconds between "still waiting for the kubelet" lines

    @property
    def socket_path(self) -> str:
        return os.path.join(self.device_plugin_dir, self.socket_name)

    @property
    def kubelet_socket(self) -> str:
        return os.path.join(self.device_plugin_dir, KUBELET_SOCKET)


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns)


class PluginServer:
    """Serves the plugin and keeps it registered while `stop` is not set."""

    def __init__(self, plugin: DevicePlugin, config: ServerConfig, stop: threading.Event) -> None:
        self._plugin = plugin
        self.config = config
        self._stop = stop
        self._server: Any = None
        self.registrations = 0
        self.registered = threading.Event()

    def _serve(self) -> None:
        path = self.config.socket_path
        if os.path.exists(path):
            os.unlink(path)  # a stale socket of an earlier run
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        api_pb2_grpc.add_DevicePluginServicer_to_server(  # type: ignore[no-untyped-call]
            DevicePluginService(self._plugin, self._stop), server
        )
        server.add_insecure_port(f"unix://{path}")
        server.start()
        self._server = server

    def _shutdown(self) -> None:
        if self._server is not None:
            self._server.stop(grace=0.5).wait()
            self._server = None

    def _register(self) -> None:
        with grpc.insecure_channel(f"unix://{self.config.kubelet_socket}") as channel:
            stub = api_pb2_grpc.RegistrationStub(channel)  # type: ignore[no-untyped-call]
            stub.Register(
                api_pb2.RegisterRequest(
                    version=API_VERSION,
                    endpoint=self.config.socket_name,
                    resource_name=self.config.resource_name,
                    options=api_pb2.DevicePluginOptions(get_preferred_allocation_available=True),
                ),
                timeout=self.config.register_timeout,
            )

    def run(self) -> None:
        """Serve, register, and start over whenever the kubelet or our socket changes."""
        failures = 0
        waiting_since: float | None = None
        reminded = 0.0
        while not self._stop.is_set():
            kubelet = _identity(self.config.kubelet_socket)
            if kubelet is None:
                # The kubelet is not up yet (or restarting): say so once, then remind.
                now = time.monotonic()
                if waiting_since is None:
                    waiting_since = reminded = now
                    log.info(
                        "waiting for the kubelet's registration socket %s",
                        self.config.kubelet_socket,
                    )
                elif now - reminded >= self.config.waiting_reminder:
                    reminded = now
                    log.warning(
                        "still waiting for the kubelet's registration socket %s (%.0fs); "
                        "is --device-plugin-dir the kubelet's device-plugins directory?",
                        self.config.kubelet_socket,
                        now - waiting_since,
                    )
                self._stop.wait(self.config.poll_interval)
                continue
            waiting_since = None
            try:
                self._serve()
                self._register()
            except (grpc.RpcError, OSError, RuntimeError) as exc:
                self._shutdown()
                failures += 1
                delay = min(10.0, self.config.poll_interval * 2 ** min(failures, 5))
                log.warning("registration with the kubelet failed (%s); retry in %.1fs", exc, delay)
                self._stop.wait(delay)
                continue
            failures = 0
            self.registrations += 1
            self.registered.set()
            log.info(
                "registered %s with the kubelet for %s",
                self.config.socket_path,
                self.config.resource_name,
            )
            while not self._stop.wait(self.config.poll_interval):
                if _identity(self.config.kubelet_socket) != kubelet:
                    log.info("the kubelet restarted; registering again")
                    break
                if not os.path.exists(self.config.socket_path):
                    log.info("our socket was removed; serving a new one")
                    break
            self.registered.clear()
            self._shutdown()
        self._shutdown()
