"""The agent loop: discover, compare with the node's annotations, patch only on change.

Survives NVML and API errors with exponential backoff; says plainly when no NVIDIA driver is
present.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from scheduler.agent.discovery import ReadFile, discover, read_sysfs_file
from scheduler.agent.kube import NodeApi
from scheduler.agent.podresources import (
    PodResources,
    PodResourcesError,
    gpu_assignments,
    list_pod_resources,
)
from scheduler.core.topology.schema import (
    ANNOTATION_ASSIGNMENTS,
    ANNOTATION_TOPOLOGY,
    GPU_RESOURCE,
    format_assignments,
    format_topology,
    topology_from_dict,
)

log = logging.getLogger(__name__)

ListPods = Callable[[str], tuple[PodResources, ...]]


class AgentError(RuntimeError):
    """One sync failed; the message says why."""


class NoDriverError(AgentError):
    """NVML cannot be loaded: no NVIDIA driver on this node."""


@dataclass(frozen=True)
class AgentConfig:
    """Agent settings (from the command line)."""

    node_name: str
    interval: float = 60.0
    pod_resources_socket: str = "/var/lib/kubelet/pod-resources/kubelet.sock"
    resource_name: str = GPU_RESOURCE
    min_backoff: float = 1.0


@dataclass(frozen=True)
class SyncResult:
    """What one sync published: the annotations changed (empty when nothing changed)."""

    patched: tuple[str, ...]


class Agent:
    """Publishes a node's GPU topology and GPU assignments as annotations."""

    def __init__(
        self,
        config: AgentConfig,
        nvml: Any,
        api: NodeApi,
        *,
        read_file: ReadFile = read_sysfs_file,
        list_pods: ListPods = list_pod_resources,
        socket_exists: Callable[[str], bool] = os.path.exists,
    ) -> None:
        self.config = config
        self._nvml = nvml
        self._api = api
        self._read_file = read_file
        self._list_pods = list_pods
        self._socket_exists = socket_exists
        self._nvml_ready = False

    def _init_nvml(self) -> None:
        if self._nvml_ready:
            return
        nvml = self._nvml
        no_driver = tuple(
            getattr(nvml, name)
            for name in ("NVMLError_LibraryNotFound", "NVMLError_DriverNotLoaded")
            if hasattr(nvml, name)
        )
        try:
            nvml.nvmlInit()
        except no_driver as exc:
            raise NoDriverError(
                f"no NVIDIA driver on node {self.config.node_name} (NVML: {exc}); "
                "run the agent only on GPU nodes with the driver installed"
            ) from None
        except nvml.NVMLError as exc:
            raise AgentError(f"NVML initialisation failed: {exc}") from None
        self._nvml_ready = True

    def _reset_nvml(self) -> None:
        if self._nvml_ready:
            with contextlib.suppress(self._nvml.NVMLError):
                self._nvml.nvmlShutdown()
        self._nvml_ready = False

    def desired_annotations(self) -> dict[str, str]:
        """Annotation values this node should carry now."""
        self._init_nvml()
        try:
            data = discover(self._nvml, self._read_file)
        except self._nvml.NVMLError as exc:
            self._reset_nvml()
            raise AgentError(f"NVML discovery failed: {exc}") from None
        topology = topology_from_dict(data, node=self.config.node_name)
        out = {ANNOTATION_TOPOLOGY: format_topology(topology)}
        socket = self.config.pod_resources_socket
        if socket and self._socket_exists(socket):
            try:
                pods = self._list_pods(socket)
            except PodResourcesError as exc:
                # Publish the topology anyway; the assignments wait for the next sync.
                log.warning("GPU assignments not refreshed: %s", exc)
                return out
            uids = self._api.pod_uids(self.config.node_name)
            by_uuid = {g.uuid: g.index for g in topology.gpus if g.uuid}
            assigned = gpu_assignments(pods, by_uuid, uids, self.config.resource_name)
            out[ANNOTATION_ASSIGNMENTS] = format_assignments(assigned)
        return out

    def sync_once(self) -> SyncResult:
        """Discover and patch the node when an annotation differs."""
        desired = self.desired_annotations()
        current = self._api.node_annotations(self.config.node_name)
        changed = {k: v for k, v in desired.items() if current.get(k) != v}
        if changed:
            self._api.patch_node_annotations(self.config.node_name, changed)
        return SyncResult(tuple(sorted(changed)))

    def run(
        self,
        *,
        once: bool = False,
        wait: Callable[[float], bool] | None = None,
        max_cycles: int | None = None,
    ) -> int:
        """Sync every interval until `wait` returns True (stop requested); 0 on clean exit.

        With `once`, one sync: exit 0 on success, 1 on failure. Failures back off from
        `min_backoff` doubling up to the interval.
        """
        failures = 0
        cycles = 0
        while True:
            cycles += 1
            try:
                result = self.sync_once()
            except NoDriverError as exc:
                log.error("%s", exc)
                ok = False
            except Exception as exc:  # the agent must outlive API and NVML hiccups
                log.error("sync of node %s failed: %s", self.config.node_name, exc)
                ok = False
            else:
                if result.patched:
                    log.info(
                        "patched node %s: %s", self.config.node_name, ", ".join(result.patched)
                    )
                ok = True
            if once:
                return 0 if ok else 1
            failures = 0 if ok else failures + 1
            delay = (
                self.config.interval
                if ok
                # the exponent is capped: a node failing for days must not overflow the float
                else min(
                    self.config.interval, self.config.min_backoff * 2.0 ** min(failures - 1, 62)
                )
            )
            if max_cycles is not None and cycles >= max_cycles:
                return 0
            if wait is not None and wait(delay):
                return 0
