"""The device plugin's API-server side: a watch on the pods bound to its node, and a writer
for what it must report (Warning events, the node's `gpu-assignments` annotation).

Both run on threads over the official synchronous client (`kubernetes.client.CoreV1Api`),
with raw JSON bodies. The writer retries with backoff, so an unreachable API server delays
the report but never blocks the kubelet's Allocate call.
"""

from __future__ import annotations

import datetime
import json
import logging
import queue
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from scheduler.core.topology.schema import (
    ANNOTATION_ASSIGNMENTS,
    TopologyError,
    format_assignments,
    parse_assignments,
)

log = logging.getLogger("topo_scheduler.device_plugin")

Obj = dict[str, Any]
COMPONENT = "topo-scheduler-device-plugin"


def _key(obj: Obj) -> str:
    """A pod's identity in the watch: its UID (a pod recreated under the same name is
    another pod, never an update of the old one)."""
    meta = obj.get("metadata") or {}
    uid = meta.get("uid")
    return str(uid) if uid else f"{meta.get('namespace', '')}/{meta.get('name', '')}"


class PodWatch:
    """List+watch of the pods whose spec.nodeName is the node; a reflector in miniature.

    `snapshot()` is the cached pods once the first list arrived, else None. `list_now()` is
    a fresh list for the moment the cache may lag behind the kubelet (None on failure).
    """

    def __init__(
        self,
        core: Any,
        node: str,
        stop: threading.Event,
        *,
        timeout: float = 5.0,
        watch_seconds: int = 300,
        max_backoff: float = 10.0,
    ) -> None:
        self._core = core
        self._selector = f"spec.nodeName={node}"
        self._stop = stop
        self._timeout = timeout
        self._watch_seconds = watch_seconds
        self._max_backoff = max_backoff
        self._lock = threading.Lock()
        self._pods: dict[str, Obj] | None = None  # by UID
        self.synced = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod-watch", daemon=True)

    def start(self) -> PodWatch:
        self._thread.start()
        return self

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def snapshot(self) -> list[Obj] | None:
        with self._lock:
            return None if self._pods is None else list(self._pods.values())

    def _list(self) -> tuple[list[Obj], str]:
        response = self._core.list_pod_for_all_namespaces(
            field_selector=self._selector,
            _preload_content=False,
            _request_timeout=self._timeout,
        )
        body = json.loads(response.data)
        return list(body.get("items") or []), str(body["metadata"].get("resourceVersion", ""))

    def list_now(self) -> list[Obj] | None:
        """A fresh list of the node's pods; None when the API server cannot be reached."""
        try:
            items, _ = self._list()
        except Exception as exc:  # any transport or API failure: the caller falls back
            log.warning("listing the pods of the node failed: %s", exc)
            return None
        return items

    def _run(self) -> None:
        from kubernetes.watch.watch import iter_resp_lines

        failures = 0
        while not self._stop.is_set():
            try:
                items, version = self._list()
                with self._lock:
                    self._pods = {_key(p): p for p in items}
                self.synced.set()
                failures = 0
                while not self._stop.is_set():
                    response = self._core.list_pod_for_all_namespaces(
                        field_selector=self._selector,
                        watch=True,
                        resource_version=version,
                        allow_watch_bookmarks=True,
                        timeout_seconds=self._watch_seconds,
                        _preload_content=False,
                        _request_timeout=(self._timeout, self._watch_seconds + self._timeout),
                    )
                    gone = False
                    for line in iter_resp_lines(response):  # type: ignore[no-untyped-call]
                        event = json.loads(line)
                        kind, obj = event.get("type"), event.get("object") or {}
                        if kind == "ERROR":
                            gone = obj.get("code") == 410
                            break
                        version = str((obj.get("metadata") or {}).get("resourceVersion", version))
                        with self._lock:
                            assert self._pods is not None
                            if kind in ("ADDED", "MODIFIED"):
                                self._pods[_key(obj)] = obj
                            elif kind == "DELETED":
                                self._pods.pop(_key(obj), None)
                        if self._stop.is_set():
                            break
                    response.release_conn()
                    if gone:
                        break  # relist
            except Exception as exc:  # keep watching whatever the failure
                failures += 1
                delay = min(self._max_backoff, 0.2 * 2 ** min(failures, 10))
                log.warning("watch of the node's pods failed (%s); retrying in %.1fs", exc, delay)
                self._stop.wait(delay)


@dataclass(frozen=True)
class Mismatch:
    """The kubelet gave a pod other GPUs than the ones recorded on it."""

    namespace: str
    name: str
    uid: str
    expected: tuple[int, ...]
    actual: tuple[int, ...]

    @property
    def message(self) -> str:
        want = ",".join(map(str, self.expected)) or "none"
        got = ",".join(map(str, self.actual))
        return (
            f"kubelet allocated GPUs {got} instead of the recorded {want}; "
            "the node's gpu-assignments annotation now holds the allocated set"
        )


class Reporter:
    """Writes events and assignment annotations on a thread, retrying with backoff."""

    def __init__(
        self,
        core: Any,
        node: str,
        stop: threading.Event,
        *,
        max_attempts: int = 8,
        initial_backoff: float = 0.2,
        now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self._core = core
        self._node = node
        self._stop = stop
        self._max_attempts = max_attempts
        self._initial_backoff = initial_backoff
        self._now = now
        self._queue: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._idle = threading.Event()
        self._idle.set()
        self._pending = 0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="reporter", daemon=True)

    def start(self) -> Reporter:
        self._thread.start()
        return self

    def close(self, timeout: float | None = None) -> None:
        self._queue.put(None)
        self._thread.join(timeout)

    def wait_idle(self, timeout: float) -> bool:
        """Wait until every queued report was written or given up (tests, shutdown)."""
        return self._idle.wait(timeout)

    def _submit(self, what: str, job: Callable[[], None]) -> None:
        with self._lock:
            self._pending += 1
            self._idle.clear()

        def attempt() -> None:
            delay = self._initial_backoff
            for number in range(1, self._max_attempts + 1):
                try:
                    job()
                    return
                except Exception as exc:  # API down or conflict: try again later
                    if number == self._max_attempts or self._stop.is_set():
                        log.error("%s: giving up after %d attempts: %s", what, number, exc)
                        return
                    log.warning("%s failed (%s); retrying in %.1fs", what, exc, delay)
                    self._stop.wait(delay)
                    delay = min(delay * 2, 10.0)

        self._queue.put(attempt)

    def mismatch(self, mismatch: Mismatch) -> None:
        """A Warning event `GPUSetMismatch` on the pod."""
        self._submit(
            f"event GPUSetMismatch on pod {mismatch.namespace}/{mismatch.name}",
            lambda: self._create_event(mismatch),
        )

    def assignment(self, uid: str, indices: tuple[int, ...]) -> None:
        """Merge `uid -> indices` into the node's `gpu-assignments` annotation."""
        self._submit(
            f"annotation {ANNOTATION_ASSIGNMENTS} on node {self._node}",
            lambda: self._merge_assignment(uid, indices),
        )

    def _create_event(self, m: Mismatch) -> None:
        stamp = self._now().strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{m.name}.{secrets.token_hex(8)}", "namespace": m.namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": m.namespace,
                "name": m.name,
                "uid": m.uid,
            },
            "reason": "GPUSetMismatch",
            "message": m.message,
            "type": "Warning",
            "source": {"component": COMPONENT, "host": self._node},
            "reportingComponent": COMPONENT,
            "reportingInstance": f"{COMPONENT}-{self._node}",
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        self._core.create_namespaced_event(m.namespace, body, _preload_content=False)

    def _merge_assignment(self, uid: str, indices: tuple[int, ...]) -> None:
        response = self._core.read_node(self._node, _preload_content=False)
        node = json.loads(response.data)
        meta = node.get("metadata") or {}
        current = (meta.get("annotations") or {}).get(ANNOTATION_ASSIGNMENTS)
        assignments: dict[str, tuple[int, ...]] = {}
        if current:
            try:
                assignments = parse_assignments(current, node=self._node)
            except TopologyError as exc:
                log.warning("replacing an unreadable annotation: %s", exc)
        if assignments.get(uid) == indices:
            return
        assignments[uid] = indices
        patch = {
            "metadata": {
                # Optimistic concurrency: a write by the agent in between makes this a 409,
                # and the retry merges into the newer value.
                "resourceVersion": meta.get("resourceVersion"),
                "annotations": {ANNOTATION_ASSIGNMENTS: format_assignments(assignments)},
            }
        }
        self._core.patch_node(
            self._node,
            patch,
            _content_type="application/merge-patch+json",
            _preload_content=False,
        )

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            try:
                job()
            finally:
                with self._lock:
                    self._pending -= 1
                    if self._pending == 0:
                        self._idle.set()
