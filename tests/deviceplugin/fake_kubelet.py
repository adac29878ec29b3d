"""A fake kubelet speaking the real device plugin API v1beta1 and PodResources v1 List.

It plays the kubelet's device manager: serves `Registration` on `<dir>/kubelet.sock`,
dials the plugin's endpoint on Register, follows its `ListAndWatch` stream, and admits pods
one at a time in the order the test says (`admit`; `admit_pending` defaults to creation
order, as one batch of HandlePodAdditions); per GPU container it asks
`GetPreferredAllocation` with the healthy unallocated devices, takes the preferred ones that
are available and fills up from the rest in sorted order (as devicemanager does), then calls
`Allocate`. Devices are kept per pod UID, as the kubelet's podDevices.

PodResources `List` shows the kubelet's pod manager, as the real kubelet does: every pod it
was handed (the kubelet adds a pod just before admitting it), by namespace/name with no UID,
a pod recreated under the same name listed twice while the old one still holds its devices.
`list_all=True` also lists the bound pods not handed over yet, with no devices (a kubelet
that knows them early: the plugin must cope with both). `restart()` does what a kubelet
restart does to the directory.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc

from scheduler.agent.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from scheduler.agent.podresources import (
    SERVICE_NAME,
    ContainerDevices,
    ContainerResources,
    PodResources,
    encode_list_response,
)

Obj = dict[str, Any]
Substitute = Callable[[list[str], list[str]], list[str]]
"""(chosen device IDs, available device IDs) -> the IDs the kubelet really allocates."""


class AdmissionError(RuntimeError):
    """The kubelet could not admit a pod (UnexpectedAdmissionError)."""


@dataclass
class Admitted:
    """What a container got: device IDs and the plugin's Allocate answer."""

    devices: list[str]
    envs: dict[str, str]
    cdi_devices: list[str]
    preferred: list[str] | None


@dataclass
class _Plugin:
    endpoint: str
    resource: str
    channel: grpc.Channel
    stub: api_pb2_grpc.DevicePluginStub
    options: api_pb2.DevicePluginOptions
    stream: Any = None


@dataclass
class FakeKubelet:
    """See the module docstring. `pods` returns the pod objects bound to the node."""

    plugin_dir: str
    pod_resources_socket: str
    pods: Callable[[], list[Obj]]
    resource: str = "nvidia.com/gpu"
    substitute: Substitute | None = None
    registrations: list[api_pb2.RegisterRequest] = field(default_factory=list)
    devices: dict[str, str] = field(default_factory=dict)  # ID -> health, from ListAndWatch
    device_numa: dict[str, list[int]] = field(default_factory=dict)
    updates: int = 0
    list_all: bool = False
    by_uid: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # UID -> container
    pod_manager: dict[str, Obj] = field(default_factory=dict)  # UID -> pod, in hand-over order
    admissions: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Condition()
        self._plugin: _Plugin | None = None
        self._registration: grpc.Server | None = None
        self._pod_resources: grpc.Server | None = None

    # -- servers -------------------------------------------------------------------------

    def start(self) -> FakeKubelet:
        os.makedirs(self.plugin_dir, exist_ok=True)
        self._start_registration()
        self._pod_resources = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        handler = grpc.method_handlers_generic_handler(
            SERVICE_NAME, {"List": grpc.unary_unary_rpc_method_handler(self._list)}
        )
        self._pod_resources.add_generic_rpc_handlers((handler,))
        self._pod_resources.add_insecure_port(f"unix://{self.pod_resources_socket}")
        self._pod_resources.start()
        return self

    def _start_registration(self) -> None:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        api_pb2_grpc.add_RegistrationServicer_to_server(_Registration(self), server)
        server.add_insecure_port(f"unix://{os.path.join(self.plugin_dir, 'kubelet.sock')}")
        server.start()
        self._registration = server

    def stop(self) -> None:
        self._drop_plugin()
        for server in (self._registration, self._pod_resources):
            if server is not None:
                server.stop(None)

    def restart(self) -> None:
        """A kubelet restart: every socket in the directory goes, a new kubelet.sock comes.
        Allocations survive (the kubelet's checkpoint)."""
        self._drop_plugin()
        if self._registration is not None:
            self._registration.stop(None)
        for name in os.listdir(self.plugin_dir):
            os.unlink(os.path.join(self.plugin_dir, name))
        time.sleep(0.01)  # a new inode and modification time for the new socket
        self._start_registration()

    def _drop_plugin(self) -> None:
        with self._lock:
            plugin, self._plugin = self._plugin, None
            self.devices = {}
        if plugin is not None:
            if plugin.stream is not None:
                plugin.stream.cancel()
            plugin.channel.close()

    def register(self, request: api_pb2.RegisterRequest) -> None:
        """Dial the plugin, read its options, follow ListAndWatch."""
        self._drop_plugin()
        channel = grpc.insecure_channel(f"unix://{os.path.join(self.plugin_dir, request.endpoint)}")
        stub = api_pb2_grpc.DevicePluginStub(channel)
        options = stub.GetDevicePluginOptions(api_pb2.Empty(), timeout=5)
        plugin = _Plugin(request.endpoint, request.resource_name, channel, stub, options)
        plugin.stream = stub.ListAndWatch(api_pb2.Empty())
        with self._lock:
            self._plugin = plugin
            self.registrations.append(request)
        threading.Thread(target=self._follow, args=(plugin,), daemon=True).start()

    def _follow(self, plugin: _Plugin) -> None:
        try:
            for response in plugin.stream:
                with self._lock:
                    if self._plugin is not plugin:
                        return
                    self.devices = {d.ID: d.health for d in response.devices}
                    self.device_numa = {
                        d.ID: [n.ID for n in d.topology.nodes] for d in response.devices
                    }
                    self.updates += 1
                    self._lock.notify_all()
        except grpc.RpcError:
            pass  # the plugin went away or we cancelled

    def wait(self, condition: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
        """Wait until `condition()` (checked under the kubelet's lock) holds."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not condition():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"fake kubelet: timed out waiting for {what}")
                self._lock.wait(min(left, 0.05))

    def wait_registered(self, count: int = 1, timeout: float = 10.0) -> None:
        self.wait(
            lambda: len(self.registrations) >= count and bool(self.devices),
            timeout,
            f"registration {count} and a device list",
        )

    # -- PodResources ----------------------------------------------------------------------

    def _list(self, request: bytes, context: Any) -> bytes:
        with self._lock:
            pods = list(self.pod_manager.values())
            held = {uid: dict(v) for uid, v in self.by_uid.items()}
        if self.list_all:
            known = {p["metadata"]["uid"] for p in pods}
            pods += [p for p in self.pods() if p["metadata"]["uid"] not in known]
        out = []
        for pod in pods:
            meta, spec = pod["metadata"], pod["spec"]
            devices = held.get(meta["uid"], {})
            containers = tuple(
                ContainerResources(
                    c["name"],
                    (ContainerDevices(self.resource, tuple(devices[c["name"]])),)
                    if c["name"] in devices
                    else (),
                )
                for c in spec.get("containers", [])
            )
            out.append(PodResources(meta["name"], meta["namespace"], containers))
        return encode_list_response(out)

    # -- admission -------------------------------------------------------------------------

    @property
    def allocated(self) -> dict[tuple[str, str], dict[str, list[str]]]:
        """(namespace, name) -> container -> device IDs, for the pods holding devices (the
        latest pod of a name)."""
        with self._lock:
            return {
                (p["metadata"]["namespace"], p["metadata"]["name"]): dict(self.by_uid[uid])
                for uid, p in self.pod_manager.items()
                if uid in self.by_uid
            }

    def in_use(self) -> set[str]:
        with self._lock:
            return {d for pod in self.by_uid.values() for ids in pod.values() for d in ids}

    def release(self, namespace: str, name: str) -> None:
        """The pods of that name finished and are gone: their devices are free again."""
        with self._lock:
            for uid, pod in list(self.pod_manager.items()):
                if (pod["metadata"]["namespace"], pod["metadata"]["name"]) == (namespace, name):
                    self._forget(uid)

    def release_uid(self, uid: str) -> None:
        """One pod finished and is gone."""
        with self._lock:
            self._forget(uid)

    def _forget(self, uid: str) -> None:
        self.pod_manager.pop(uid, None)
        self.by_uid.pop(uid, None)

    def admit_pending(self, order: Callable[[Obj], Any] | None = None) -> list[tuple[str, str]]:
        """Admit every bound pod not handed over yet, in `order` (default: creation time,
        then name); the keys admitted."""
        pods = sorted(
            self.pods(),
            key=order
            or (lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"]["name"])),
        )
        done = []
        for pod in pods:
            if pod["metadata"]["uid"] in self.pod_manager:
                continue
            self.admit(pod)
            done.append((pod["metadata"]["namespace"], pod["metadata"]["name"]))
        return done

    def admit(self, pod: Obj, must_include: list[str] | None = None) -> dict[str, Admitted]:
        """Admit one pod: hand it to the pod manager, then GetPreferredAllocation and
        Allocate per GPU container."""
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        uid = pod["metadata"]["uid"]
        with self._lock:
            self.pod_manager[uid] = pod
        out: dict[str, Admitted] = {}
        for container in pod["spec"].get("containers", []):
            limits = (container.get("resources") or {}).get("limits") or {}
            need = int(limits.get(self.resource, 0))
            if need:
                out[container["name"]] = self._allocate(uid, container["name"], need, must_include)
        self.admissions.append(key)
        return out

    def _allocate(
        self, uid: str, container: str, need: int, must_include: list[str] | None = None
    ) -> Admitted:
        with self._lock:
            plugin = self._plugin
            healthy = {d for d, h in self.devices.items() if h == "Healthy"}
        if plugin is None:
            raise AdmissionError(f"no device plugin registered for {self.resource}")
        available = sorted(healthy - self.in_use())
        if len(available) < need:
            raise AdmissionError(
                f"requested number of devices unavailable for {self.resource}. "
                f"Requested: {need}, Available: {len(available)}"
            )
        preferred: list[str] | None = None
        chosen: list[str] = [d for d in must_include or () if d in available][:need]
        if plugin.options.get_preferred_allocation_available:
            answer = plugin.stub.GetPreferredAllocation(
                api_pb2.PreferredAllocationRequest(
                    container_requests=[
                        api_pb2.ContainerPreferredAllocationRequest(
                            available_deviceIDs=available,
                            must_include_deviceIDs=must_include or [],
                            allocation_size=need,
                        )
                    ]
                ),
                timeout=10,
            )
            preferred = list(answer.container_responses[0].deviceIDs)
            chosen += [d for d in preferred if d in available and d not in chosen]
            chosen = chosen[:need]
        chosen += [d for d in available if d not in chosen][: need - len(chosen)]
        if self.substitute is not None:
            chosen = self.substitute(chosen, available)
        response = plugin.stub.Allocate(
            api_pb2.AllocateRequest(
                container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=chosen)]
            ),
            timeout=10,
        )
        answer_c = response.container_responses[0]
        with self._lock:
            self.by_uid.setdefault(uid, {})[container] = list(chosen)
        return Admitted(
            list(chosen), dict(answer_c.envs), [d.name for d in answer_c.cdi_devices], preferred
        )


class _Registration(api_pb2_grpc.RegistrationServicer):  # type: ignore[misc]
    def __init__(self, kubelet: FakeKubelet) -> None:
        self._kubelet = kubelet

    def Register(self, request: api_pb2.RegisterRequest, context: Any) -> api_pb2.Empty:
        if request.version != "v1beta1":
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"unsupported version {request.version}"
            )
        if request.resource_name != self._kubelet.resource:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "unexpected resource")
        # The real kubelet dials the plugin after answering; a thread does it here too.
        threading.Thread(target=self._kubelet.register, args=(request,), daemon=True).start()
        return api_pb2.Empty()
