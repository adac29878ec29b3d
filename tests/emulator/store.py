"""In-memory object store of the API-server emulator.

One global resourceVersion counter, a bounded history of changes (the etcd compaction window,
kept small in tests to force `410 Gone`), and watchers fed on every write. The store is used
from the emulator's event loop only, so it needs no locks.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import itertools
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]


@dataclass(frozen=True)
class Resource:
    """One served resource type: where it lives and what its objects say they are."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """`pods`, `leases.coordination.k8s.io`: the name kube uses in error messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


RESOURCES: tuple[Resource, ...] = (
    Resource("", "v1", "pods", "Pod", True),
    Resource("", "v1", "nodes", "Node", False),
    Resource("", "v1", "configmaps", "ConfigMap", True),
    Resource("", "v1", "events", "Event", True),
    Resource("", "v1", "namespaces", "Namespace", False),
    Resource("events.k8s.io", "v1", "events", "Event", True),
    Resource("coordination.k8s.io", "v1", "leases", "Lease", True),
    # storage kinds the volume plugins read (and PreBind updates: claims, volumes)
    Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True),
    Resource("", "v1", "persistentvolumes", "PersistentVolume", False),
    Resource("storage.k8s.io", "v1", "storageclasses", "StorageClass", False),
    Resource("storage.k8s.io", "v1", "csinodes", "CSINode", False),
    Resource("storage.k8s.io", "v1", "csidrivers", "CSIDriver", False),
    Resource("storage.k8s.io", "v1", "csistoragecapacities", "CSIStorageCapacity", True),
    Resource("resource.k8s.io", "v1beta1", "resourceclaims", "ResourceClaim", True),
    Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True),
    # what PodTopologySpread's default constraints select pods by
    Resource("", "v1", "services", "Service", True),
    Resource("", "v1", "replicationcontrollers", "ReplicationController", True),
    Resource("apps", "v1", "replicasets", "ReplicaSet", True),
    Resource("apps", "v1", "statefulsets", "StatefulSet", True),
    # volumes still attached to a node count towards its CSI limit (NodeVolumeLimits)
    Resource("storage.k8s.io", "v1", "volumeattachments", "VolumeAttachment", False),
)

# Served only when a test says so (`Store.served`), as CRDs and feature-gated APIs are:
# scheduler-plugins' PodGroup CRD and Kubernetes' own PodGroup (GenericWorkload gate).
X_PODGROUPS = Resource("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup", True)
K8S_PODGROUPS = Resource("scheduling.k8s.io", "v1beta1", "podgroups", "PodGroup", True)
# resource.k8s.io/v1 (DRA), served when a test says so
DEVICE_CLASSES = Resource("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", False)
RESOURCE_CLAIMS_V1 = Resource("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True)
CLAIM_TEMPLATES = Resource(
    "resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", True
)
RESOURCE_SLICES = Resource("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", False)
DRA_RESOURCES = (DEVICE_CLASSES, RESOURCE_CLAIMS_V1, CLAIM_TEMPLATES, RESOURCE_SLICES)
# scheduler-plugins' ElasticQuota CRD, served when a test says so
ELASTIC_QUOTAS = Resource("scheduling.x-k8s.io", "v1alpha1", "elasticquotas", "ElasticQuota", True)
OPTIONAL_RESOURCES: tuple[Resource, ...] = (
    X_PODGROUPS,
    K8S_PODGROUPS,
    *DRA_RESOURCES,
    ELASTIC_QUOTAS,
)


class ApiError(Exception):
    """An error the API server answers with a Status object."""

    def __init__(self, code: int, reason: str, message: str, details: Obj | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details or {}

    def status(self) -> Obj:
        return status_object(self.code, self.reason, self.message, self.details)


def status_object(code: int, reason: str, message: str, details: Obj | None = None) -> Obj:
    """A `v1.Status` as the API server writes it."""
    out: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
        "code": code,
    }
    if message:
        out["message"] = message
    if reason:
        out["reason"] = reason
    if details:
        out["details"] = details
    return out


def not_found(res: Resource, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{res.qualified} "{name}" not found',
        {"name": name, "group": res.group, "kind": res.plural},
    )


def conflict(res: Resource, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {res.qualified} "{name}": {why}',
        {"name": name, "group": res.group, "kind": res.plural},
    )


STALE = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def field_value(obj: Obj, path: str) -> str:
    """The string value of a dotted field path (`spec.nodeName`), "" when absent."""
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    return "" if cur is None else str(cur)


Selector = list[tuple[str, str, bool]]  # (path, value, equal)

_META_FIELDS = frozenset({"metadata.name", "metadata.namespace"})
_EVENT_FIELDS = _META_FIELDS | {
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
}
# the field labels kube-apiserver accepts per resource (its AddFieldLabelConversionFunc and
# GetAttrs): anything else is answered 400 "field label not supported"
FIELD_LABELS: dict[str, frozenset[str]] = {
    "pods": _META_FIELDS
    | {
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.podIPs",
        "status.nominatedNodeName",
    },
    "nodes": _META_FIELDS | {"spec.unschedulable"},
    "namespaces": _META_FIELDS | {"status.phase"},
    "events": _EVENT_FIELDS,
}


def parse_selector(text: str | None, res: Resource | None = None) -> Selector:
    """`a=b,c!=d` (also `==`) -> terms; only the equality forms kube's selectors allow.

    With `res` it is a field selector: like kube-apiserver, only that resource's supported
    field labels are accepted (400 `field label not supported: X` otherwise).
    """
    out: Selector = []
    for term in (text or "").split(","):
        term = term.strip()
        if not term:
            continue
        if "!=" in term:
            k, v = term.split("!=", 1)
            out.append((k.strip(), v.strip(), False))
        elif "==" in term:
            k, v = term.split("==", 1)
            out.append((k.strip(), v.strip(), True))
        elif "=" in term:
            k, v = term.split("=", 1)
            out.append((k.strip(), v.strip(), True))
        else:
            raise ApiError(400, "BadRequest", f'invalid selector: "{term}"')
    if res is not None:
        allowed = FIELD_LABELS.get(res.plural, _META_FIELDS)
        for path, _, _ in out:
            if path not in allowed:
                raise ApiError(400, "BadRequest", f"field label not supported: {path}")
    return out


def field_match(obj: Obj, sel: Selector) -> bool:
    return all((field_value(obj, p) == v) == eq for p, v, eq in sel)


def label_match(obj: Obj, sel: Selector) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    return all((str(labels.get(k, "")) == v) == eq for k, v, eq in sel)


@dataclass
class Change:
    """One committed write, as retained in the history window."""

    rv: int
    res: Resource
    type: str  # ADDED / MODIFIED / DELETED
    obj: Obj
    old: Obj | None


@dataclass
class Watcher:
    """A live watch: filters plus the queue its HTTP stream drains."""

    res: Resource
    namespace: str | None
    fields: Selector
    labels: Selector
    queue: asyncio.Queue[Change | None] = field(default_factory=asyncio.Queue)


def merge_patch(target: Any, patch: Any, strategic: bool = False) -> Any:
    """RFC 7386 merge patch; `strategic` merges `conditions` lists by `type` like kube."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif strategic and key == "conditions" and isinstance(value, list):
            current = [dict(c) for c in out.get(key) or [] if isinstance(c, dict)]
            for cond in value:
                for i, have in enumerate(current):
                    if have.get("type") == cond.get("type"):
                        current[i] = merge_patch(have, cond)
                        break
                else:
                    current.append(copy.deepcopy(cond))
            out[key] = current
        else:
            out[key] = merge_patch(out.get(key), value, strategic)
    return out


class Store:
    """Objects by (resource, namespace, name), a change history and the live watchers."""

    def __init__(self, history: int = 100_000) -> None:
        self.rv = 0
        self.history: deque[Change] = deque()
        self.history_limit = history
        self.compacted = 0  # changes with rv <= compacted are gone from the history
        self.objects: dict[Resource, dict[tuple[str, str], Obj]] = {
            r: {} for r in (*RESOURCES, *OPTIONAL_RESOURCES)
        }
        self.served: set[Resource] = set()  # optional resources now served
        self.watchers: list[Watcher] = []
        self.binding_posts: dict[str, int] = {}  # "ns/name" -> POSTs to pods/binding
        self.bindings: dict[str, list[str]] = {}  # "ns/name" -> nodes bound to, in order
        self.hooks: list[Callable[[Change], None]] = []
        self.created_at: dict[str, float] = {}  # "ns/name" -> wall time the pod was created
        self.bound_at: dict[str, float] = {}  # "ns/name" -> wall time of its first binding
        self._uids = itertools.count()

    # -- plumbing -------------------------------------------------------------------------

    def _commit(self, res: Resource, kind: str, obj: Obj, old: Obj | None) -> Obj:
        self.rv += 1
        if kind != "DELETED":
            obj["metadata"]["resourceVersion"] = str(self.rv)
        else:
            obj = {**obj, "metadata": dict(obj["metadata"])}
            obj["metadata"]["resourceVersion"] = str(self.rv)
        change = Change(self.rv, res, kind, obj, old)
        self.history.append(change)
        while len(self.history) > self.history_limit:
            self.compacted = self.history.popleft().rv
        for w in self.watchers:
            if w.res is res:
                w.queue.put_nowait(change)
        for hook in self.hooks:
            hook(change)
        return obj

    def compact(self) -> None:
        """Drop the whole history, as an etcd compaction would (watches from older RVs: 410)."""
        if self.history:
            self.compacted = self.history[-1].rv
            self.history.clear()

    @staticmethod
    def key(obj: Obj) -> tuple[str, str]:
        md = obj.get("metadata") or {}
        return (str(md.get("namespace") or ""), str(md.get("name") or ""))

    def get(self, res: Resource, namespace: str, name: str) -> Obj:
        obj = self.objects[res].get((namespace if res.namespaced else "", name))
        if obj is None:
            raise not_found(res, name)
        return obj

    def list(
        self, res: Resource, namespace: str | None, fields: Selector, labels: Selector
    ) -> list[Obj]:
        return [
            o
            for (ns, _), o in self.objects[res].items()
            if (namespace is None or ns == namespace)
            and field_match(o, fields)
            and label_match(o, labels)
        ]

    # -- writes ---------------------------------------------------------------------------

    def create(self, res: Resource, namespace: str | None, body: Obj) -> Obj:
        obj = copy.deepcopy(body)
        md = obj.setdefault("metadata", {})
        if not md.get("name") and md.get("generateName"):
            md["name"] = f"{md['generateName']}{uuid.uuid4().hex[:5]}"
        name = md.get("name")
        if not name:
            raise ApiError(422, "Invalid", f"{res.kind} is invalid: metadata.name: Required value")
        if res.namespaced:
            ns = namespace or md.get("namespace") or "default"
            if md.get("namespace") and md["namespace"] != ns:
                raise ApiError(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request",
                )
            md["namespace"] = ns
        else:
            md.pop("namespace", None)
            ns = ""
        if (ns, name) in self.objects[res]:
            raise ApiError(
                409,
                "AlreadyExists",
                f'{res.qualified} "{name}" already exists',
                {"name": name, "group": res.group, "kind": res.plural},
            )
        md.pop("resourceVersion", None)
        md["uid"] = str(uuid.UUID(int=next(self._uids) + 1))
        md["creationTimestamp"] = _now()
        obj["kind"] = res.kind
        obj["apiVersion"] = res.api_version
        if res.kind == "Pod":
            obj.setdefault("spec", {}).setdefault("schedulerName", "default-scheduler")
            obj.setdefault("status", {}).setdefault("phase", "Pending")
        self.objects[res][(ns, name)] = obj
        if res.kind == "Pod":
            self.created_at[f"{ns}/{name}"] = time.time()
        return self._commit(res, "ADDED", obj, None)

    def _check_rv(self, res: Resource, current: Obj, wanted: Any) -> None:
        if wanted not in (None, "") and str(wanted) != current["metadata"]["resourceVersion"]:
            raise conflict(res, current["metadata"]["name"], STALE)

    def replace(self, res: Resource, namespace: str, name: str, body: Obj) -> Obj:
        current = self.get(res, namespace, name)
        md = body.get("metadata") or {}
        if md.get("name") not in (None, name):
            raise ApiError(400, "BadRequest", "the name of the object does not match the request")
        self._check_rv(res, current, md.get("resourceVersion"))
        obj = copy.deepcopy(body)
        keep = ("uid", "creationTimestamp", "namespace", "name")
        old_md = current["metadata"]
        obj.setdefault("metadata", {}).update({k: old_md[k] for k in keep if k in old_md})
        obj["kind"] = res.kind
        obj["apiVersion"] = res.api_version
        return self._store_update(res, current, obj)

    def patch(
        self,
        res: Resource,
        namespace: str,
        name: str,
        patch: Obj,
        strategic: bool,
        subresource: str = "",
    ) -> Obj:
        current = self.get(res, namespace, name)
        self._check_rv(res, current, (patch.get("metadata") or {}).get("resourceVersion"))
        if subresource == "status":
            patch = {"status": patch.get("status", {})}
        elif res.kind == "Pod":
            # the main resource ignores status; spec is immutable except a few fields
            patch = {k: v for k, v in patch.items() if k not in ("status",)}
            if "spec" in patch:
                spec = patch["spec"] or {}
                if set(spec) - {"schedulingGates", "activeDeadlineSeconds", "tolerations"}:
                    raise ApiError(
                        422,
                        "Invalid",
                        f'Pod "{name}" is invalid: spec: Forbidden: pod updates may not change '
                        "fields other than `spec.containers[*].image`, ...",
                    )
        obj = merge_patch(current, patch, strategic)
        obj["metadata"] = dict(obj["metadata"])
        for k in ("uid", "creationTimestamp", "namespace", "name"):
            if k in current["metadata"]:
                obj["metadata"][k] = current["metadata"][k]
        return self._store_update(res, current, obj)

    def _store_update(self, res: Resource, current: Obj, obj: Obj) -> Obj:
        key = (current["metadata"].get("namespace") or "", current["metadata"]["name"])
        self.objects[res][key] = obj
        return self._commit(res, "MODIFIED", obj, current)

    def delete(self, res: Resource, namespace: str, name: str) -> Obj:
        current = self.get(res, namespace, name)
        del self.objects[res][(namespace if res.namespaced else "", name)]
        return self._commit(res, "DELETED", current, None)

    def bind(self, namespace: str, name: str, binding: Obj) -> None:
        """pods/binding: set spec.nodeName once, with kube's errors.

        Like kube-apiserver's BindingREST (registry/core/pod/storage, setPodNodeAndMetadata),
        the Binding's `metadata.annotations` are merged into the pod's in the same update that
        sets spec.nodeName and the PodScheduled condition: one write, one resourceVersion, and
        nothing written when the binding is refused.
        """
        pods = RESOURCES[0]
        key = f"{namespace}/{name}"
        self.binding_posts[key] = self.binding_posts.get(key, 0) + 1
        annotations = (binding.get("metadata") or {}).get("annotations") or {}
        if not isinstance(annotations, dict) or not all(
            isinstance(v, str) for v in annotations.values()
        ):  # map[string]string in the Go type: the request does not even decode
            raise ApiError(
                400,
                "BadRequest",
                "json: cannot unmarshal into Go struct field ObjectMeta.metadata.annotations "
                "of type string",
            )
        pod = self.get(pods, namespace, name)
        want_uid = (binding.get("metadata") or {}).get("uid")
        if want_uid and want_uid != pod["metadata"]["uid"]:
            raise conflict(
                pods,
                name,
                f"Precondition failed: UID in precondition: {want_uid}, "
                f"UID in object meta: {pod['metadata']['uid']}",
            )
        target = (binding.get("target") or {}).get("name")
        if not target:
            raise ApiError(
                422, "Invalid", f'Binding.core "{name}" is invalid: target.name: Required value'
            )
        if pod["metadata"].get("deletionTimestamp"):
            raise conflict(
                _BINDING,
                name,
                f"pod {name} is being deleted, cannot be assigned to a host",
            )
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            raise conflict(_BINDING, name, f'pod {name} is already assigned to node "{node}"')
        # stored objects are never mutated in place: copy only the branches that change
        obj = {
            **pod,
            "metadata": dict(pod["metadata"]),
            "spec": dict(pod["spec"]),
            "status": dict(pod.get("status") or {}),
        }
        obj["spec"]["nodeName"] = target
        if annotations:
            obj["metadata"]["annotations"] = {
                **(obj["metadata"].get("annotations") or {}),
                **annotations,
            }
        conds = [
            c for c in obj["status"].get("conditions") or [] if c.get("type") != "PodScheduled"
        ]
        conds.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": _now()})
        obj["status"]["conditions"] = conds
        self.bindings.setdefault(key, []).append(target)
        self.bound_at.setdefault(key, time.time())
        self._store_update(pods, pod, obj)


_BINDING = Resource("", "v1", "pods/binding", "Binding", True)
