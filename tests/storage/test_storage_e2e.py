"""Volume binding end to end through the API-server emulator.

The scheduler writes `volume.kubernetes.io/selected-node` on a WaitForFirstConsumer claim (or
the claimRef of the PV it chose), waits for the PV controller, and only then binds the pod.
The PV controller here is a small test-side loop that does what kube's does for these cases.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.emulator import (
    CSI_NODES,
    EVENTS,
    PODS,
    PVCS,
    PVS,
    STORAGE_CLASSES,
    VOLUME_ATTACHMENTS,
    Emulator,
    make_pod,
)
from tests.emulator.harness import Replica, all_bound_once, fast_settings, wait_for
from tests.emulator.store import DRA_RESOURCES, RESOURCE_CLAIMS_V1

from .objects import csi_node, pv, pvc, resource_claim, storage_class, volume_attachment

Obj = dict[str, Any]
SELECTED = "volume.kubernetes.io/selected-node"
HOSTNAME = "kubernetes.io/hostname"


def _pod_with_claim(emu: Emulator, name: str, claim: str) -> None:
    obj = make_pod(name)
    obj["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
    emu.create(PODS, obj, "default")


def _claim(emu: Emulator, name: str) -> Obj:
    return emu.get(PVCS, name, "default")


def _bind(emu: Emulator, volume: str, claim: Obj) -> None:
    md = claim["metadata"]
    ref = {"kind": "PersistentVolumeClaim", "namespace": md["namespace"], "name": md["name"]}
    emu.patch(
        PVS, volume, {"spec": {"claimRef": ref | {"uid": md["uid"]}}, "status": {"phase": "Bound"}}
    )
    emu.patch(
        PVCS,
        md["name"],
        {
            "metadata": {"annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
            "spec": {"volumeName": volume},
            "status": {"phase": "Bound"},
        },
        md["namespace"],
    )


async def pv_controller(emu: Emulator, stop: asyncio.Event) -> None:
    """Binds claims the scheduler chose a PV for, and provisions claims with a selected node
    (a PV on that node), as kube's PV controller and an external provisioner do."""
    while not stop.is_set():
        volumes = emu.list(PVS)
        for claim in emu.list(PVCS):
            md = claim["metadata"]
            if claim["spec"].get("volumeName"):
                continue
            chosen = [
                v["metadata"]["name"]
                for v in volumes
                if (v["spec"].get("claimRef") or {}).get("name") == md["name"]
            ]
            if chosen:
                _bind(emu, chosen[0], claim)
                continue
            node = (md.get("annotations") or {}).get(SELECTED)
            if node:
                name = f"pvc-{md['uid']}"
                emu.create(PVS, pv(name, class_name="wait", hosts=(node,), phase="Pending"))
                _bind(emu, name, claim)
        await asyncio.sleep(0.05)


def _setup(emu: Emulator, nodes: int = 2) -> None:
    for i in range(nodes):
        emu.create_node(f"n{i}")
    emu.create(STORAGE_CLASSES, storage_class("wait", provisioner="csi.example"))


def _config(tmp_path: Path, timeout: int) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\n"
        "kind: KubeSchedulerConfiguration\n"
        "profiles:\n"
        "- schedulerName: topo-scheduler\n"
        "  pluginConfig:\n"
        "  - name: VolumeBinding\n"
        f"    args: {{bindTimeoutSeconds: {timeout}}}\n"
    )
    return str(path)


STORAGE_PATHS = (
    "persistentvolumeclaims",
    "persistentvolumes",
    "storageclasses",
    "csinodes",
    "csidrivers",
    "csistoragecapacities",
    "resourceclaims",
)


def _writes_only_update(emu: Emulator, written: str, count: int) -> None:
    """The scheduler's storage writes: `count` PUTs (RBAC's update) of `written`, nothing else
    (the test-side PV controller writes to the store directly, not over HTTP)."""
    assert emu.request_count("PUT", f"/{written}/") == count
    for path in STORAGE_PATHS:
        for method in ("POST", "PATCH", "DELETE") + (("PUT",) if path != written else ()):
            assert emu.request_count(method, f"/{path}") == 0, (method, path)


def _claim_and_pod(emu: Emulator) -> None:
    """Two nodes, a WaitForFirstConsumer class that provisions, claim `data`, pod `train`."""
    _setup(emu)
    emu.create(PVCS, pvc("data", class_name="wait"), "default")
    _pod_with_claim(emu, "train", "data")


async def _node_selected(emu: Emulator) -> None:
    await wait_for(
        lambda: SELECTED in (_claim(emu, "data")["metadata"].get("annotations") or {}),
        what="selected-node annotation",
    )


def _condition(emu: Emulator, key: str) -> Obj:
    conds = emu.pod(key).get("status", {}).get("conditions") or []
    return next((c for c in conds if c.get("type") == "PodScheduled"), {})


async def _condition_says(emu: Emulator, key: str, text: str) -> None:
    """Wait until the pod's PodScheduled condition message contains `text`."""
    await wait_for(lambda: text in _condition(emu, key).get("message", ""), what=text)


def test_wait_for_first_consumer_claim_selected_node_then_bound(emulator: Emulator) -> None:
    _claim_and_pod(emulator)

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        await _node_selected(emulator)
        # the scheduler waits for the PV controller: no binding yet
        await asyncio.sleep(0.5)
        assert emulator.binding_posts("default/train") == 0
        assert not emulator.pod("default/train")["spec"].get("nodeName")
        stop = asyncio.Event()
        controller = asyncio.create_task(pv_controller(emulator, stop))
        await wait_for(lambda: all_bound_once(emulator, ["default/train"]), what="pod bound")
        stop.set()
        await controller
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    _writes_only_update(emulator, "persistentvolumeclaims", 1)
    claim = _claim(emulator, "data")
    node = emulator.pod("default/train")["spec"]["nodeName"]
    assert claim["metadata"]["annotations"][SELECTED] == node
    assert claim["spec"]["volumeName"]


def test_bind_timeout_requeues_reverts_and_binds_nothing(
    emulator: Emulator, tmp_path: Path
) -> None:
    _claim_and_pod(emulator)

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator, config_file=_config(tmp_path, 1))).start()
        await wait_for(
            lambda: (
                "context deadline exceeded"
                in _condition(emulator, "default/train").get("message", "")
            ),
            what="PreBind timeout reported",
        )
        sched = rep.sched
        assert sched is not None
        assert emulator.binding_posts("default/train") == 0
        assert not emulator.pod("default/train")["spec"].get("nodeName")
        cond = _condition(emulator, "default/train")
        assert cond["status"] == "False" and cond["reason"] == "SchedulerError"
        assert cond["message"].startswith("Binding rejected: VolumeBinding: binding volumes:")
        # reverted and requeued: nothing assumed for the claim or the pod (between attempts)
        await wait_for(
            lambda: "default/train" in sched.queue and not sched.cache.is_assumed("default/train"),
            what="pod back in the queue",
        )
        assert not sched.cache.snapshot.storage.is_assumed_claim("default/data")
        # the claim keeps the node the provisioner was asked for: the retry stays there
        node = _claim(emulator, "data")["metadata"]["annotations"][SELECTED]
        stop = asyncio.Event()
        controller = asyncio.create_task(pv_controller(emulator, stop))
        await wait_for(lambda: all_bound_once(emulator, ["default/train"]), what="bound on retry")
        assert emulator.pod("default/train")["spec"]["nodeName"] == node
        stop.set()
        await controller
        assert await rep.shutdown() == 0

    asyncio.run(scenario())


def test_claim_deleted_while_waiting_for_the_pv_controller(emulator: Emulator) -> None:
    _claim_and_pod(emulator)

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        await _node_selected(emulator)
        emulator.delete(PVCS, "data", "default")
        want = (
            '0/2 nodes are available: persistentvolumeclaim "data" not found. preemption: '
            "0/2 nodes are available: 2 Preemption is not helpful for scheduling."
        )
        await wait_for(
            lambda: _condition(emulator, "default/train").get("message") == want,
            what="unschedulable without its claim",
        )
        assert _condition(emulator, "default/train")["reason"] == "Unschedulable"
        assert rep.sched is not None and not rep.sched.cache.is_assumed("default/train")
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    assert emulator.binding_posts("default/train") == 0
    failed = [e for e in emulator.list(EVENTS) if e["reason"] == "FailedScheduling"]
    assert any('persistentvolumeclaim "data" not found' in e["note"] for e in failed)


def test_local_pv_admits_one_node_and_gets_the_claim_reference(emulator: Emulator) -> None:
    for i in range(3):
        emulator.create_node(f"n{i}")
    emulator.create(STORAGE_CLASSES, storage_class("wait"))  # no provisioner: static PVs only
    emulator.create(PVS, pv("local-n2", class_name="wait", size="10Gi", hosts=("n2",)))
    emulator.create(PVCS, pvc("data", class_name="wait", size="5Gi"), "default")
    _pod_with_claim(emulator, "train", "data")

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        await wait_for(
            lambda: (
                (emulator.get(PVS, "local-n2")["spec"].get("claimRef") or {}).get("name") == "data"
            ),
            what="claimRef written on the PV",
        )
        assert emulator.binding_posts("default/train") == 0
        ref = emulator.get(PVS, "local-n2")["spec"]["claimRef"]
        assert ref["uid"] == _claim(emulator, "data")["metadata"]["uid"]
        assert emulator.get(PVS, "local-n2")["metadata"]["annotations"] == {
            "pv.kubernetes.io/bound-by-controller": "yes"
        }
        stop = asyncio.Event()
        controller = asyncio.create_task(pv_controller(emulator, stop))
        await wait_for(lambda: all_bound_once(emulator, ["default/train"]), what="pod bound")
        stop.set()
        await controller
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    _writes_only_update(emulator, "persistentvolumes", 1)
    assert emulator.pod("default/train")["spec"]["nodeName"] == "n2"
    assert SELECTED not in (_claim(emulator, "data")["metadata"].get("annotations") or {})


@pytest.mark.parametrize("served", [True, False])
def test_resource_claims_read_only_where_served(emulator: Emulator, served: bool) -> None:
    emulator.create_node("n0")
    obj = make_pod("dra")
    obj["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "rc"}]
    emulator.create(PODS, obj, "default")
    if served:
        emulator.serve(*DRA_RESOURCES)

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        await _condition_says(emulator, "default/dra", '"rc" not found')
        assert rep.sched is not None
        dra = rep.sched.dra_watches
        assert dra.synced and dra.served is served
        names = {r.name for r in dra.reflectors}
        assert ("resourceclaims" in names) is served
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    assert emulator.binding_posts("default/dra") == 0


def test_claim_from_a_template_allocated_elsewhere_lets_the_pod_bind(emulator: Emulator) -> None:
    emulator.serve(*DRA_RESOURCES)
    emulator.create_node("n0")
    emulator.create_node("n1")
    obj = make_pod("dra")
    obj["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "t"}]
    uid = emulator.create(PODS, obj, "default")["metadata"]["uid"]

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        await wait_for(
            lambda: "ResourceClaim not created yet"
            in _condition(emulator, "default/dra").get("message", ""),
            what="template claim refused",
        )
        # the claim controller creates the claim, a DRA driver allocates it on n1 for the pod
        claim = resource_claim(
            "dra-gpu-1", allocated=True, reserved_for=uid, node="n1", owner=uid
        )
        emulator.create(RESOURCE_CLAIMS_V1, claim, "default")
        status = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "dra-gpu-1"}]}
        store = emulator.server.store  # the claim controller writes pods/status
        emulator.server.call(
            lambda: store.patch(PODS, "default", "dra", {"status": status}, False, "status")
        )
        await wait_for(lambda: all_bound_once(emulator, ["default/dra"]), what="pod bound")
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    assert emulator.pod("default/dra")["spec"]["nodeName"] == "n1"


def test_a_volume_still_attached_counts_towards_the_limit_until_its_attachment_goes(
    emulator: Emulator,
) -> None:
    """kube's NodeVolumeLimits counts the node's VolumeAttachments (a volume stays attached
    after its pod is gone): watched in-cluster, added and deleted."""
    driver = "ebs.csi.example"
    emulator.create_node("n0")
    emulator.create(CSI_NODES, csi_node("n0", {driver: 1}))
    emulator.create(PVS, pv("pv-old", claim=("default", "old"), phase="Bound", csi=(driver, "h0")))
    emulator.create(PVS, pv("pv-new", claim=("default", "data"), phase="Bound", csi=(driver, "h1")))
    emulator.create(PVCS, pvc("data", volume="pv-new", bound=True), "default")
    emulator.create(VOLUME_ATTACHMENTS, volume_attachment("va-old", "n0", driver, "pv-old"))
    _pod_with_claim(emulator, "train", "data")

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        # the attached volume fills the node's limit
        await _condition_says(emulator, "default/train", "exceed max volume count")
        assert emulator.binding_posts("default/train") == 0
        emulator.delete(VOLUME_ATTACHMENTS, "va-old")  # detached
        await wait_for(lambda: all_bound_once(emulator, ["default/train"]), what="pod bound")
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    assert emulator.pod("default/train")["spec"]["nodeName"] == "n0"
