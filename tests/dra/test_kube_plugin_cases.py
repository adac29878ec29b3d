"""kube-scheduler's DynamicResources plugin cases (dynamicresources_test.go, TestPlugin),
under their upstream names, for the features on by default (admin access and the
prioritized list included): PreFilter's message, each node's Filter reason, and what PreBind
wrote to the claim. Run through the default profile over the in-memory path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.cli import main
from scheduler.core.dra.state import FINALIZER
from tests.builders import node, pod
from tests.dra.plugin_support import cluster

Obj = dict[str, Any]
DRIVER, CLASS, NODE = "some-driver", "my-resource-class", "worker"
POD, UID, CLAIM = "my-pod", "1234", "my-pod-my-resource"
BROKEN = {"cel": {"expression": f'device.attributes["{DRIVER}"].healthy'}}
ALLOCATION = {
    "devices": {
        "results": [{"request": "req-1", "driver": DRIVER, "pool": NODE, "device": "instance-1"}]
    },
    "nodeSelector": {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
        ]
    },
}


def worker() -> Obj:
    return node(NODE, labels={"kubernetes.io/hostname": NODE})


def worker_slice() -> Obj:
    return {"kind": "ResourceSlice", "metadata": {"name": f"{NODE}-{DRIVER}"},
            "spec": {"driver": DRIVER, "nodeName": NODE,
                     "pool": {"name": NODE, "resourceSliceCount": 1},
                     "devices": [{"name": "instance-1"}]}}  # fmt: skip


def device_class(selectors: list[Obj] | None = None) -> Obj:
    return {"kind": "DeviceClass", "metadata": {"name": CLASS},
            "spec": {"selectors": selectors or []}}  # fmt: skip


def claim(name: str = CLAIM, *, allocation: Obj | None = None, reserved: bool = False,
          owner: bool = True, deleting: bool = False, admin: bool = False,
          prioritized: bool = False, class_name: str = CLASS,
          selectors: list[Obj] | None = None) -> Obj:  # fmt: skip
    meta: Obj = {"name": name, "namespace": "default", "uid": f"uid-{name}",
                 "resourceVersion": "1"}  # fmt: skip
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": POD, "uid": UID,
                                    "controller": True}]  # fmt: skip
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    exact: Obj = {"deviceClassName": class_name}
    if admin:
        exact["adminAccess"] = True
    if selectors:
        exact["selectors"] = selectors
    req: Obj = {"name": "req-1", "exactly": exact}
    if prioritized:
        req = {"name": "req-1", "firstAvailable": [{"name": "subreq-1", **exact}]}
    obj: Obj = {"kind": "ResourceClaim", "metadata": meta,
                "spec": {"devices": {"requests": [req]}}, "status": {}}  # fmt: skip
    if allocation is not None:
        obj["status"]["allocation"] = allocation
    if reserved:
        obj["status"]["reservedFor"] = [{"resource": "pods", "name": POD, "uid": UID}]
    return obj


def with_claim(template: bool = False, in_status: bool = True) -> Obj:
    key = "resourceClaimTemplateName" if template else "resourceClaimName"
    p = pod(POD, {"cpu": "1m"}, uid=UID,
            spec={"resourceClaims": [{"name": "my-resource", key: CLAIM}]})  # fmt: skip
    if template and in_status:
        p["status"]["resourceClaimStatuses"] = [{"name": "my-resource", "resourceClaimName": CLAIM}]
    return p


def admin(allocation: Obj) -> Obj:
    out = {**allocation, "devices": {"results": [
        {**r, "adminAccess": True} for r in allocation["devices"]["results"]]}}  # fmt: skip
    return out


OTHER_ALLOCATED = claim("not-my-claim", allocation=ALLOCATION, owner=False)
WRONG = {"nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
    {"key": "no-such-label", "operator": "In", "values": ["no-such-value"]}]}]},
    "devices": {"results": []}}  # fmt: skip
GOOD = {"nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
    {"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE]}]}]},
    "devices": {"results": []}}  # fmt: skip

# name: (objects, pod, expected) where expected is
#   ("prefilter", message) | ("filter", reason) | ("error", message) | ("bound", allocation)
CASES: dict[str, tuple[list[Obj], Obj, tuple[str, Any]]] = {
    "claim-reference": ([claim(allocation=ALLOCATION), claim("not-my-claim")], with_claim(),
                        ("bound", ALLOCATION)),
    "claim-template": ([claim(allocation=ALLOCATION), claim("not-my-claim")],
                       with_claim(template=True), ("bound", ALLOCATION)),
    "missing-claim": ([claim(allocation=ALLOCATION)], with_claim(template=True, in_status=False),
                      ("prefilter", 'pod "default/my-pod": ResourceClaim not created yet')),
    "deleted-claim": ([claim(allocation=ALLOCATION, deleting=True)], with_claim(template=True),
                      ("prefilter", 'resourceclaim "my-pod-my-resource" is being deleted')),
    "wrong-claim": ([claim(allocation=ALLOCATION, owner=False)], with_claim(template=True),
                    ("prefilter", "ResourceClaim default/my-pod-my-resource was not created for "
                     "pod default/my-pod (pod is not owner)")),
    "no-resources": ([claim(), device_class()], with_claim(),
                     ("filter", "cannot allocate all claims")),
    "with-resources": ([claim(), device_class(), worker_slice()], with_claim(),
                       ("bound", ALLOCATION)),
    "exhausted-resources": ([claim(), OTHER_ALLOCATED, device_class(), worker_slice()],
                            with_claim(), ("filter", "cannot allocate all claims")),
    "request-admin-access-with-DRAAdminAccess-featuregate": (
        [claim(admin=True), OTHER_ALLOCATED, device_class(), worker_slice()], with_claim(),
        ("bound", admin(ALLOCATION))),
    "structured-ignore-allocated-admin-access": (
        [claim(), claim("not-my-claim", allocation=admin(ALLOCATION), owner=False),
         device_class(), worker_slice()], with_claim(), ("bound", ALLOCATION)),
    "claim-parameters-CEL-runtime-error": (
        [claim(selectors=[BROKEN]), device_class(), worker_slice()], with_claim(),
        ("error", "claim default/my-pod-my-resource: selector #0: CEL runtime error: "
         "no such key: healthy")),
    "class-parameters-CEL-runtime-error": (
        [claim(), device_class([BROKEN]), worker_slice()], with_claim(),
        ("error", "class my-resource-class: selector #0: CEL runtime error: no such key: "
         "healthy")),
    "missing-class": ([claim()], with_claim(),
                      ("prefilter", "request req-1: device class my-resource-class does not "
                       "exist")),
    "wrong-topology": ([claim(allocation=WRONG)], with_claim(),
                       ("filter", "resourceclaim not available on the node")),
    "good-topology": ([claim(allocation=GOOD)], with_claim(), ("bound", GOOD)),
    "reserved-okay": ([claim(allocation=ALLOCATION, reserved=True)], with_claim(),
                      ("bound", ALLOCATION)),
    "claim-with-request-with-unknown-device-class": (
        [claim(class_name="does-not-exist")], with_claim(),
        ("prefilter", "request req-1: device class does-not-exist does not exist")),
    "claim-with-prioritized-list-unknown-device-class": (
        [claim(prioritized=True, class_name="does-not-exist")], with_claim(),
        ("prefilter", "request req-1/subreq-1: device class does-not-exist does not exist")),
    "claim-with-prioritized-list": (
        [claim(prioritized=True), device_class(), worker_slice()], with_claim(),
        ("bound", {**ALLOCATION, "devices": {"results": [
            {**ALLOCATION["devices"]["results"][0], "request": "req-1/subreq-1"}]}})),
}  # fmt: skip


# PostFilter's message where no node fits (kube's, joined before preemption's).
NO_NEW, STILL, DEALLOCATED = (
    "no new claims to deallocate",
    "still not schedulable",
    "deallocation of ResourceClaim completed",
)
POSTFILTER: dict[str, str] = {
    "missing-claim": NO_NEW,
    "deleted-claim": NO_NEW,
    "wrong-claim": NO_NEW,
    "missing-class": NO_NEW,
    "claim-with-request-with-unknown-device-class": NO_NEW,
    "claim-with-prioritized-list-unknown-device-class": NO_NEW,
    "no-resources": STILL,
    "exhausted-resources": STILL,
    "wrong-topology": DEALLOCATED,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_plugin(name: str) -> None:
    objects, the_pod, (kind, want) = CASES[name]
    c = cluster([worker(), *objects])
    decision = c.schedule(the_pod)
    if name in POSTFILTER:
        assert f". {POSTFILTER[name]}, preemption: " in (decision.message or "")
    if kind == "prefilter":
        assert decision.outcome == "unschedulable"
        assert (decision.message or "").startswith(f"0/1 nodes are available: {want}.")
    elif kind == "filter":
        assert decision.outcome == "unschedulable"
        assert decision.result is not None
        slot = c.cache.snapshot.index[NODE]
        assert decision.result.node_reasons(slot) == [want]
    elif kind == "error":
        # kube's text up to the runtime's own words for the missing key (cel-expr-python's)
        assert decision.outcome == "error"
        head, _, key = want.partition(": CEL runtime error: no such key: ")
        message = decision.message or ""
        assert message.startswith(head.split(": selector")[0]) and "selector #0" in message
        assert "CEL runtime error" in message and f'"{key}"' in message
    else:
        assert decision.outcome == "assumed", decision.message
        assert c.binder.bound == {f"default/{POD}": NODE}
        written = c.claim(CLAIM)
        assert written.reserved_for_pod(UID)
        assert written.allocation is not None
        assert written.allocation.to_api() == want
        fresh = want is not None and not any(
            o["metadata"]["name"] == CLAIM and o.get("status", {}).get("allocation")
            for o in objects
        )
        if fresh:
            assert FINALIZER in written.raw["metadata"]["finalizers"]


def test_skip_bind() -> None:
    """`skip-bind`: the binding fails after PreBind wrote the allocation; Unreserve drops
    the in-flight allocation and removes the pod from `reservedFor` (the allocation stays,
    as kube leaves it)."""
    c = cluster([worker(), claim(), device_class(), worker_slice()])
    c.binder.fail_bind = True
    decision = c.schedule(with_claim())
    assert decision.outcome == "assumed"
    written = c.claim(CLAIM)
    assert not written.reserved_for_pod(UID) and written.reserved_for == ()
    assert written.allocation is not None and written.allocation.to_api() == ALLOCATION
    assert c.binder.claim_writes == [f"default/{CLAIM}", f"unreserve default/{CLAIM}"]
    assert not c.cache.snapshot.storage.dra.has_pending(written.uid)


def test_bind_failure() -> None:
    """`bind-failure`: an allocated claim reserved for the pod at PreBind; the binding
    fails and Unreserve leaves `reservedFor` empty."""
    c = cluster([worker(), claim(allocation=GOOD)])
    c.binder.fail_bind = True
    assert c.schedule(with_claim()).outcome == "assumed"
    written = c.claim(CLAIM)
    assert written.reserved_for == ()
    assert written.allocation is not None and written.allocation.to_api() == GOOD


def test_wrong_topology_deallocates() -> None:
    """`wrong-topology`: the claim is allocated where the pod cannot go and reserved for
    nobody: PostFilter deallocates it (allocation and reservedFor cleared)."""
    c = cluster([worker(), claim(allocation=WRONG)])
    decision = c.schedule(with_claim())
    assert decision.outcome == "unschedulable"
    written = c.claim(CLAIM)
    assert written.allocation is None and written.reserved_for == ()
    assert c.binder.claim_writes == [f"deallocate default/{CLAIM}"]


def test_wrong_topology_reserved_elsewhere_stays() -> None:
    """A claim reserved for another pod is not deallocated: `still not schedulable`."""
    other = claim(allocation=WRONG)
    other["status"]["reservedFor"] = [{"resource": "pods", "name": "other", "uid": "9"}]
    c = cluster([worker(), other])
    decision = c.schedule(with_claim())
    assert f". {STILL}, preemption: " in (decision.message or "")
    assert c.claim(CLAIM).allocation is not None
    assert c.binder.claim_writes == []


@pytest.mark.parametrize("name", sorted(n for n, case in CASES.items() if case[2][0] != "error"))
def test_explain_reproduces_the_case(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """explain, from the same objects as a snapshot, answers as the cycle does."""
    objects, the_pod, (kind, want) = CASES[name]
    items = [{"apiVersion": "v1", **worker()}]
    items += [{"apiVersion": "resource.k8s.io/v1", **o} for o in objects]
    snapshot, pod_file = tmp_path / "snapshot.yaml", tmp_path / "pod.yaml"
    snapshot.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    pod_file.write_text(yaml.safe_dump(the_pod))
    code = main(["explain", "--snapshot", str(snapshot), "--pod", str(pod_file),
                 "--output", "json"])  # fmt: skip
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    if kind == "prefilter":
        assert doc["node"] is None
        assert doc["message"].startswith(f"0/1 nodes are available: {want}.")
    elif kind == "filter":
        assert doc["node"] is None
        assert doc["nodes"][NODE]["reasons"] == [want]
    else:
        assert doc["node"] == NODE
        if not any(o["metadata"]["name"] == CLAIM and o["status"].get("allocation")
                   for o in objects):  # fmt: skip
            devices = doc["claims"][f"default/{CLAIM}"]["devices"]
            assert len(devices) == len(want["devices"]["results"])
