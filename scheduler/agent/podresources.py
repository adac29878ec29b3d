"""Kubelet PodResources v1 `List` over gRPC, with the few protobuf messages hand-coded.

Only the fields we read are decoded (unknown fields are skipped, as protobuf requires):

    ListPodResourcesResponse { repeated PodResources pod_resources = 1; }
    PodResources       { string name = 1; string namespace = 2;
                         repeated ContainerResources containers = 3; }
    ContainerResources { string name = 1; repeated ContainerDevices devices = 2; ... }
    ContainerDevices   { string resource_name = 1; repeated string device_ids = 2; ... }

The encoder exists so tests can serve real wire bytes from a fake kubelet.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from scheduler.core.topology.schema import GPU_RESOURCE

LIST_METHOD = "/v1.PodResourcesLister/List"
SERVICE_NAME = "v1.PodResourcesLister"


class PodResourcesError(RuntimeError):
    """The kubelet could not be reached or answered something undecodable."""


@dataclass(frozen=True)
class ContainerDevices:
    """Devices of one resource held by a container."""

    resource_name: str
    device_ids: tuple[str, ...]


@dataclass(frozen=True)
class ContainerResources:
    """One container and its devices."""

    name: str
    devices: tuple[ContainerDevices, ...]


@dataclass(frozen=True)
class PodResources:
    """One pod (by namespace and name: the v1 API carries no UID) and its containers."""

    name: str
    namespace: str
    containers: tuple[ContainerResources, ...]


# --------------------------------------------------------------------------- wire format


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(data):
            raise PodResourcesError("protobuf: truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise PodResourcesError("protobuf: varint too long")


def _fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """Yield (field number, wire type, value) of a message; length-delimited values as bytes."""
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, pos = _read_varint(data, pos)
        elif wire == 1:
            value, pos = int.from_bytes(data[pos : pos + 8], "little"), pos + 8
        elif wire == 2:
            length, pos = _read_varint(data, pos)
            if pos + length > len(data):
                raise PodResourcesError("protobuf: truncated length-delimited field")
            value, pos = data[pos : pos + length], pos + length
        elif wire == 5:
            value, pos = int.from_bytes(data[pos : pos + 4], "little"), pos + 4
        else:
            raise PodResourcesError(f"protobuf: unsupported wire type {wire}")
        if pos > len(data):
            raise PodResourcesError("protobuf: truncated fixed-size field")
        yield number, wire, value


def _text(value: int | bytes) -> str:
    if not isinstance(value, bytes):
        raise PodResourcesError("protobuf: expected a string field")
    return value.decode("utf-8", errors="replace")


def _decode_devices(data: bytes) -> ContainerDevices:
    resource, ids = "", []
    for number, wire, value in _fields(data):
        if number == 1 and wire == 2:
            resource = _text(value)
        elif number == 2 and wire == 2:
            ids.append(_text(value))
    return ContainerDevices(resource, tuple(ids))


def _decode_container(data: bytes) -> ContainerResources:
    name, devices = "", []
    for number, wire, value in _fields(data):
        if number == 1 and wire == 2:
            name = _text(value)
        elif number == 2 and wire == 2:
            assert isinstance(value, bytes)
            devices.append(_decode_devices(value))
    return ContainerResources(name, tuple(devices))


def _decode_pod(data: bytes) -> PodResources:
    name, namespace, containers = "", "", []
    for number, wire, value in _fields(data):
        if number == 1 and wire == 2:
            name = _text(value)
        elif number == 2 and wire == 2:
            namespace = _text(value)
        elif number == 3 and wire == 2:
            assert isinstance(value, bytes)
            containers.append(_decode_container(value))
    return PodResources(name, namespace, tuple(containers))


def decode_list_response(data: bytes) -> tuple[PodResources, ...]:
    """Decode a ListPodResourcesResponse."""
    pods = []
    for number, wire, value in _fields(data):
        if number == 1 and wire == 2:
            assert isinstance(value, bytes)
            pods.append(_decode_pod(value))
    return tuple(pods)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _bytes_field(number: int, payload: bytes) -> bytes:
    return _varint((number << 3) | 2) + _varint(len(payload)) + payload


def _str_field(number: int, text: str) -> bytes:
    return _bytes_field(number, text.encode()) if text else b""


def encode_list_response(pods: Sequence[PodResources]) -> bytes:
    """Encode a ListPodResourcesResponse (used by the fake kubelet in tests)."""
    out = bytearray()
    for pod in pods:
        body = _str_field(1, pod.name) + _str_field(2, pod.namespace)
        for container in pod.containers:
            cbody = _str_field(1, container.name)
            for devices in container.devices:
                dbody = _str_field(1, devices.resource_name)
                for device_id in devices.device_ids:
                    dbody += _bytes_field(2, device_id.encode())
                cbody += _bytes_field(2, dbody)
            body += _bytes_field(3, cbody)
        out += _bytes_field(1, body)
    return bytes(out)


# --------------------------------------------------------------------------- client


def list_pod_resources(socket_path: str, *, timeout: float = 10.0) -> tuple[PodResources, ...]:
    """Call the kubelet's PodResources v1 List on a unix socket."""
    import grpc

    try:
        with grpc.insecure_channel(f"unix://{socket_path}") as channel:
            call = channel.unary_unary(
                LIST_METHOD,
                request_serializer=lambda request: request,
                response_deserializer=lambda response: response,
            )
            raw = call(b"", timeout=timeout)
    except grpc.RpcError as exc:
        raise PodResourcesError(f"kubelet pod-resources {socket_path}: {exc}") from None
    if not isinstance(raw, bytes):
        raise PodResourcesError(f"kubelet pod-resources {socket_path}: unexpected reply")
    return decode_list_response(raw)


def gpu_assignments(
    pods: Sequence[PodResources],
    uuid_to_index: dict[str, int],
    pod_uids: dict[tuple[str, str], str],
    resource_name: str = GPU_RESOURCE,
) -> dict[str, tuple[int, ...]]:
    """Pod UID -> GPU indices held, from device IDs (GPU UUIDs) of `resource_name`.

    Time-sliced replicas (`GPU-...::N`) map to their GPU; IDs that are not whole GPUs of this
    node (MIG devices, unknown UUIDs) are ignored, as are pods whose UID is unknown.
    """
    out: dict[str, set[int]] = {}
    for pod in pods:
        uid = pod_uids.get((pod.namespace, pod.name))
        if uid is None:
            continue
        for container in pod.containers:
            for devices in container.devices:
                if devices.resource_name != resource_name:
                    continue
                for device_id in devices.device_ids:
                    index = uuid_to_index.get(device_id.split("::", 1)[0])
                    if index is not None:
                        out.setdefault(uid, set()).add(index)
    return {uid: tuple(sorted(indices)) for uid, indices in sorted(out.items())}
