"""An older API server: discovery turns off what it lacks and says so."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from plugins import frameworks_for
from scheduler.core.config import default_config
from scheduler.kube.cli import Settings, serve
from scheduler.kube.client import KubeClient
from scheduler.kube.discovery import ServerAPIs, discover
from scheduler.kube.events import EventRecorder, ObjectRef
from scheduler.kube.scheduler import KubeScheduler
from tests.emulator import Emulator


def _old_server(groups: list[str], posted: list[tuple[str, Any]]) -> web.Application:
    """/version, /apis without the given group-versions' absence, and an events sink."""

    async def version(_: web.Request) -> web.Response:
        return web.json_response({"gitVersion": "v1.18.20"})

    async def apis(_: web.Request) -> web.Response:
        return web.json_response(
            {
                "kind": "APIGroupList",
                "groups": [
                    {"name": gv.split("/")[0], "versions": [{"groupVersion": gv}]} for gv in groups
                ],
            }
        )

    async def events(request: web.Request) -> web.Response:
        posted.append((request.path, await request.json()))
        return web.json_response({}, status=201)

    app = web.Application()
    app.router.add_get("/version", version)
    app.router.add_get("/apis", apis)
    app.router.add_post("/api/v1/namespaces/{ns}/events", events)
    return app


async def _serving(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


def test_server_without_events_v1_gets_core_v1_events() -> None:
    posted: list[tuple[str, Any]] = []

    async def run() -> ServerAPIs:
        runner, url = await _serving(_old_server(["coordination.k8s.io/v1"], posted))
        client = KubeClient.for_url(url)
        try:
            apis = await discover(client)
            rec = EventRecorder(client)
            rec.core_v1 = not apis.events_v1
            worker = asyncio.create_task(rec.run())
            rec.record(ObjectRef("Pod", "ml", "p", "u1"), "Warning", "FailedScheduling", "S", "0/3")
            await rec.flush(5)
            worker.cancel()
            return apis
        finally:
            await client.close()
            await runner.cleanup()

    apis = asyncio.run(run())
    assert apis == ServerAPIs("v1.18.20", frozenset({"coordination.k8s.io/v1"}))
    assert (apis.events_v1, apis.leases_v1) == (False, True)
    assert not apis.serves("events.k8s.io/v1") and apis.serves("coordination.k8s.io/v1")
    assert not apis.serves("policy/v1") and ServerAPIs().serves("policy/v1")
    ((path, event),) = posted
    assert path == "/api/v1/namespaces/ml/events"
    assert event["apiVersion"] == "v1" and event["involvedObject"]["name"] == "p"
    assert (event["reason"], event["message"], event["count"]) == ("FailedScheduling", "0/3", 1)
    assert event["source"] == {"component": "topo-scheduler"}


def test_leader_election_refused_without_leases(capsys: Any) -> None:
    async def run() -> int:
        runner, url = await _serving(_old_server(["events.k8s.io/v1"], []))
        try:
            settings = Settings(url=url, leader_elect=True, bind_address=None)
            return await serve(settings, asyncio.Event())
        finally:
            await runner.cleanup()

    assert asyncio.run(run()) == 1
    err = capsys.readouterr().err
    assert "--leader-elect needs coordination.k8s.io/v1 Leases (Kubernetes 1.14+)" in err
    assert "v1.18.20" in err


def test_server_without_discovery_is_taken_to_serve_everything(emulator: Emulator) -> None:
    async def run() -> ServerAPIs:
        client = KubeClient.for_url(emulator.url)  # the emulator serves no /apis
        try:
            return await discover(client)
        finally:
            await client.close()

    apis = asyncio.run(run())  # (the emulator may or may not answer /version)
    assert (apis.events_v1, apis.leases_v1) == (True, True) and apis.group_versions is None


def test_apis_discovery_does_not_list_start_empty_without_a_request(
    emulator: Emulator, capsys: Any
) -> None:
    """A 1.20 server: no policy/v1, no resource.k8s.io, no PodGroup CRDs. Their informers are
    synced empty at once, nobody asks the server for them, and the log says what is off."""
    emulator.create_node("n0")
    served = {"events.k8s.io/v1", "coordination.k8s.io/v1", "storage.k8s.io/v1", "apps/v1"}

    async def run() -> None:
        config = default_config()
        client = KubeClient.for_url(emulator.url)
        apis = ServerAPIs("v1.20.2", frozenset(served))
        sched = KubeScheduler(client, config, frameworks_for(config), apis=apis)
        try:
            await sched.start()
            await asyncio.wait_for(sched.wait_synced(), 10)
            assert sched.budgets.unserved
            assert sched.dra_watches.served is False and not sched.dra_watches.reflectors
        finally:
            await sched.close()
            await client.close()

    asyncio.run(run())
    assert emulator.request_count("GET", "/apis/policy") == 0
    assert emulator.request_count("GET", "/apis/resource.k8s.io") == 0
    assert emulator.request_count("GET", "/apis/scheduling") == 0  # PodGroup discovery
    assert emulator.request_count("GET", "/apis/storage.k8s.io/v1/csinodes") >= 1
    out = capsys.readouterr().out
    assert "preemption sees no PodDisruptionBudgets" in out
    assert out.count("DynamicResources is off") == 1
