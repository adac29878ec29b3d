"""The emulator behaves like the API server where the scheduler depends on it.

Driven through the real sync `kubernetes.client` and `kubernetes.aio` clients.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import aiohttp
import pytest
from kubernetes import client as kclient
from kubernetes import watch as kwatch

from tests.emulator import PODS, Emulator, make_pod


@pytest.fixture
def core(emulator: Emulator) -> Iterator[kclient.CoreV1Api]:
    cfg = kclient.Configuration()
    cfg.host = emulator.url
    with kclient.ApiClient(cfg) as api:
        yield kclient.CoreV1Api(api)


def test_create_sets_metadata_and_list_has_rv(emulator: Emulator, core: kclient.CoreV1Api) -> None:
    created = core.create_namespaced_pod("default", make_pod("a"))
    assert created.metadata.uid and created.metadata.creation_timestamp
    rv = int(created.metadata.resource_version)
    core.create_namespaced_pod("default", make_pod("b"))
    listed = core.list_pod_for_all_namespaces()
    assert int(listed.metadata.resource_version) == rv + 1
    assert sorted(p.metadata.name for p in listed.items) == ["a", "b"]
    with pytest.raises(kclient.ApiException) as err:
        core.create_namespaced_pod("default", make_pod("a"))
    assert err.value.status == 409
    assert json.loads(err.value.body)["reason"] == "AlreadyExists"


def test_stale_resource_version_conflicts(emulator: Emulator, core: kclient.CoreV1Api) -> None:
    body = {"metadata": {"name": "c"}, "data": {"k": "1"}}
    core.create_namespaced_config_map("kube-system", body)
    cm = core.read_namespaced_config_map("c", "kube-system")
    cm.data = {"k": "2"}
    core.replace_namespaced_config_map("c", "kube-system", cm)
    cm.data = {"k": "3"}  # still carries the old resourceVersion
    with pytest.raises(kclient.ApiException) as err:
        core.replace_namespaced_config_map("c", "kube-system", cm)
    body = json.loads(err.value.body)
    assert err.value.status == 409 and body["kind"] == "Status" and body["reason"] == "Conflict"
    assert "the object has been modified" in body["message"]
    assert core.read_namespaced_config_map("c", "kube-system").data == {"k": "2"}


def test_binding_once_then_conflict_and_not_found(emulator: Emulator) -> None:
    emulator.create_node("n1")
    emulator.create_pod("p")
    cfg = kclient.Configuration()
    cfg.host = emulator.url
    with kclient.ApiClient(cfg) as api:
        core = kclient.CoreV1Api(api)
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "p"},
            "target": {"kind": "Node", "name": "n1"},
        }
        resp = core.create_namespaced_pod_binding("p", "default", body, _preload_content=False)
        assert resp.status == 201
        assert json.loads(resp.data)["status"] == "Success"
        with pytest.raises(kclient.ApiException) as err:
            core.create_namespaced_pod_binding("p", "default", body, _preload_content=False)
        assert err.value.status == 409
        assert 'pod p is already assigned to node "n1"' in json.loads(err.value.body)["message"]
        with pytest.raises(kclient.ApiException) as err:
            core.create_namespaced_pod_binding("gone", "default", body, _preload_content=False)
        assert err.value.status == 404
    assert emulator.pod("default/p")["spec"]["nodeName"] == "n1"
    assert emulator.binding_posts("default/p") == 2
    assert emulator.bindings() == {"default/p": ["n1"]}


def test_binding_annotations_merged_in_the_binding_write(emulator: Emulator) -> None:
    """kube's BindingREST: the Binding's annotations join the pod's in the nodeName write."""
    emulator.create_node("n1")
    emulator.create_pod("p", annotations={"keep": "me", "topo-scheduler.io/gpus": "7"})
    emulator.create_pod("q")
    cfg = kclient.Configuration()
    cfg.host = emulator.url
    before = emulator.pod("default/p")
    rv = emulator.resource_version

    def binding(
        name: str, annotations: dict[str, object], uid: str | None = None
    ) -> dict[str, object]:
        md: dict[str, object] = {"name": name, "annotations": annotations}
        if uid:
            md["uid"] = uid
        return {"kind": "Binding", "metadata": md, "target": {"kind": "Node", "name": "n1"}}

    with kclient.ApiClient(cfg) as api:
        core = kclient.CoreV1Api(api)
        body = binding("p", {"topo-scheduler.io/gpus": "0,1"}, before["metadata"]["uid"])
        resp = core.create_namespaced_pod_binding("p", "default", body, _preload_content=False)
        assert resp.status == 201
        # refused bindings write nothing, annotations included
        for name, b, status in (
            ("p", binding("p", {"topo-scheduler.io/gpus": "2,3"}), 409),  # already bound
            ("q", binding("q", {"x": "y"}, uid="not-q"), 409),  # UID precondition
            ("gone", binding("gone", {"x": "y"}), 404),
        ):
            with pytest.raises(kclient.ApiException) as err:
                core.create_namespaced_pod_binding(name, "default", b, _preload_content=False)
            assert err.value.status == status, (name, err.value.body)
    # annotations are map[string]string: the client refuses anything else, so post it raw
    raw = urllib.request.Request(
        f"{emulator.url}/api/v1/namespaces/default/pods/q/binding",
        data=json.dumps(binding("q", {"x": 1})).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as http_err:
        urllib.request.urlopen(raw, timeout=5)
    assert http_err.value.code == 400
    pod = emulator.pod("default/p")
    assert pod["spec"]["nodeName"] == "n1"
    assert pod["metadata"]["annotations"] == {"keep": "me", "topo-scheduler.io/gpus": "0,1"}
    assert pod["metadata"]["resourceVersion"] == str(rv + 1)  # one write for both
    assert emulator.resource_version == rv + 1  # the refused ones wrote nothing
    assert emulator.pod("default/q")["metadata"]["annotations"] == {}
    changes = emulator.server.call(lambda: list(emulator.server.store.history))
    last = changes[-1]
    assert last.rv == rv + 1 and last.type == "MODIFIED"
    assert last.obj["spec"]["nodeName"] == "n1" and last.old is not None
    assert last.old["metadata"]["annotations"]["topo-scheduler.io/gpus"] == "7"
    assert "nodeName" not in last.old["spec"]
    assert emulator.bindings() == {"default/p": ["n1"]}


def test_field_selector_and_status_patch(emulator: Emulator, core: kclient.CoreV1Api) -> None:
    emulator.create_pod("mine")
    emulator.create_pod("other", scheduler="default-scheduler")
    names = [
        p.metadata.name
        for p in core.list_pod_for_all_namespaces(
            field_selector="spec.schedulerName=topo-scheduler,spec.nodeName="
        ).items
    ]
    assert names == ["mine"]
    cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "m"}
    core.patch_namespaced_pod_status("mine", "default", {"status": {"conditions": [cond]}})
    core.patch_namespaced_pod_status(
        "mine", "default", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    )
    conds = emulator.pod("default/mine")["status"]["conditions"]
    assert {c["type"] for c in conds} == {"PodScheduled", "Ready"}
    core.patch_namespaced_pod("mine", "default", {"metadata": {"annotations": {"a": "b"}}})
    assert emulator.pod("default/mine")["metadata"]["annotations"]["a"] == "b"


def test_watch_replays_from_rv_and_410_when_too_old() -> None:
    with Emulator(history=3) as emu:
        cfg = kclient.Configuration()
        cfg.host = emu.url
        with kclient.ApiClient(cfg) as api:
            core = kclient.CoreV1Api(api)
            emu.create_node("n1")  # RV "0" would mean "any version": start above it
            rv = core.list_pod_for_all_namespaces().metadata.resource_version
            emu.create_pod("a")
            emu.create_pod("b")
            w = kwatch.Watch()
            seen = [
                (e["type"], e["object"].metadata.name)
                for e in w.stream(
                    core.list_pod_for_all_namespaces, resource_version=rv, timeout_seconds=1
                )
            ]
            assert seen == [("ADDED", "a"), ("ADDED", "b")]
            for i in range(5):
                emu.create_pod(f"x{i}")
            resp = core.list_pod_for_all_namespaces(
                watch=True, resource_version=rv, timeout_seconds=1, _preload_content=False
            )
            first = json.loads(resp.data.splitlines()[0])
            assert first["type"] == "ERROR" and first["object"]["code"] == 410
            assert "too old resource version" in first["object"]["message"]


def test_aio_client_watch_dropped_and_fault(emulator: Emulator) -> None:
    from kubernetes.aio import client as aclient

    async def run() -> None:
        cfg = aclient.Configuration(host=emulator.url)
        async with aclient.ApiClient(cfg) as api:
            core = aclient.CoreV1Api(api)
            emulator.fail(500, 1, method="GET", path_contains="/pods")
            with pytest.raises(aclient.ApiException) as err:
                await core.list_pod_for_all_namespaces()
            assert err.value.status == 500
            listed = await core.list_pod_for_all_namespaces_without_preload_content()
            rv = json.loads(await listed.read())["metadata"]["resourceVersion"]
            resp = await core.list_pod_for_all_namespaces_without_preload_content(
                watch=True, resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=5
            )
            emulator.create_pod("a")
            line = await asyncio.wait_for(resp.content.readline(), 5)
            assert json.loads(line)["type"] == "ADDED"
            emulator.drop_watches()
            # the connection is cut mid-stream, before its timeout and without an ERROR event
            with pytest.raises(aiohttp.ClientPayloadError):
                await asyncio.wait_for(resp.content.read(), 5)

    asyncio.run(run())
    assert PODS.plural == "pods"


def test_phase_field_selector_and_finished_pod_deleted_from_the_watch(emulator: Emulator) -> None:
    """kube-scheduler's `status.phase!=Succeeded,status.phase!=Failed`, served as kube does."""
    from scheduler.kube.client import ApiError, KubeClient

    selector = "status.phase!=Succeeded,status.phase!=Failed"
    store = emulator.server.store
    emulator.create_pod("running", node="n0")
    emulator.create_pod("done", node="n0")
    emulator.server.call(
        lambda: store.patch(
            PODS, "default", "done", {"status": {"phase": "Succeeded"}}, False, "status"
        )
    )

    async def run() -> None:
        client = KubeClient.for_url(emulator.url)
        try:
            listed = await client.get("/api/v1/pods", {"fieldSelector": selector})
            assert [p["metadata"]["name"] for p in listed["items"]] == ["running"]
            rv = listed["metadata"]["resourceVersion"]
            # like kube-apiserver: only the resource's own field labels
            with pytest.raises(ApiError) as err:
                await client.get("/api/v1/pods", {"fieldSelector": "spec.priority!=1"})
            assert err.value.status == 400
            assert "field label not supported: spec.priority" in err.value.message
            with pytest.raises(ApiError) as err:
                await client.get("/api/v1/nodes", {"fieldSelector": "status.phase!=Failed"})
            assert err.value.status == 400

            def finish() -> None:
                emulator.server.call(
                    lambda: store.patch(
                        PODS, "default", "running", {"status": {"phase": "Failed"}}, False, "status"
                    )
                )

            seen: list[tuple[str, str, str]] = []
            query = {"fieldSelector": selector, "resourceVersion": rv}
            loop = asyncio.get_running_loop()
            loop.call_later(0.2, lambda: loop.run_in_executor(None, finish))
            async for event in client.watch("/api/v1/pods", query, 2):
                obj = event["object"]
                seen.append((event["type"], obj["metadata"]["name"], obj["status"]["phase"]))
                break
            # the object stopped matching: DELETED, carrying its new state
            assert seen == [("DELETED", "running", "Failed")]
        finally:
            await client.close()

    asyncio.run(run())
