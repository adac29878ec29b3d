"""Thin Kubernetes adapter of the agent: read and merge-patch node annotations, map pods to UIDs.

The agent talks to the `NodeApi` protocol so tests run without a cluster; `KubeNodeApi` is
the real implementation over `kubernetes.client.CoreV1Api`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class NodeApi(Protocol):
    """What the agent needs from the API server."""

    def node_annotations(self, node: str) -> dict[str, str]:
        """Current annotations of the node."""
        ...

    def patch_node_annotations(self, node: str, annotations: Mapping[str, str | None]) -> None:
        """Merge-patch annotations (None deletes one)."""
        ...

    def pod_uids(self, node: str) -> dict[tuple[str, str], str]:
        """(namespace, name) -> UID of the pods bound to the node."""
        ...


class KubeNodeApi:
    """NodeApi over the official client (`CoreV1Api`)."""

    def __init__(self, core_v1: Any) -> None:
        self._core = core_v1

    @classmethod
    def connect(cls, kubeconfig: str | None) -> KubeNodeApi:
        """Load credentials (the kubeconfig file, else in-cluster) and build the client."""
        from kubernetes import client, config

        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        else:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
        return cls(client.CoreV1Api())

    def node_annotations(self, node: str) -> dict[str, str]:
        """Current annotations of the node."""
        obj = self._core.read_node(node)
        return dict(obj.metadata.annotations or {})

    def patch_node_annotations(self, node: str, annotations: Mapping[str, str | None]) -> None:
        """JSON merge patch of metadata.annotations."""
        body = {"metadata": {"annotations": dict(annotations)}}
        self._core.patch_node(node, body, _content_type="application/merge-patch+json")

    def pod_uids(self, node: str) -> dict[tuple[str, str], str]:
        """(namespace, name) -> UID of pods with spec.nodeName == node."""
        pods = self._core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}")
        return {(p.metadata.namespace, p.metadata.name): p.metadata.uid for p in pods.items}
