"""Pieces of the kube adapter in isolation: rate limit, client retries, events, lease, HTTP."""

from __future__ import annotations

import asyncio
import io
import json
import urllib.error
import urllib.request

import pytest

from scheduler.core.config import SchedulerConfiguration, default_config
from scheduler.core.group import GroupOutcome, GroupSpec
from scheduler.core.model import PodInfo
from scheduler.core.reservation import Reservation, Reservations
from scheduler.kube.client import ApiError, ClientOptions, KubeClient
from scheduler.kube.events import EventRecorder, ObjectRef
from scheduler.kube.leader import LeaderElector, LeaseTiming
from scheduler.kube.metrics import Metrics
from scheduler.kube.scheduler import KubeScheduler
from scheduler.kube.server import StatusServer, parse_bind_address
from scheduler.logs import configure
from tests.emulator import EVENTS, LEASES, Emulator, make_pod


def test_client_honours_retry_after_and_reports_errors(emulator: Emulator) -> None:
    emulator.create_node("n0")

    async def run() -> None:
        client = KubeClient.for_url(emulator.url, ClientOptions(max_retry_after=0.05))
        try:
            rule = emulator.fail(429, 2, method="GET", retry_after=1)
            node = await client.get("/api/v1/nodes/n0")  # retried after each 429
            assert node["metadata"]["name"] == "n0" and rule.seen == 2
            emulator.fail(500, 1, method="GET")
            with pytest.raises(ApiError) as err:
                await client.get("/api/v1/nodes/n0")
            assert err.value.status == 500 and err.value.reason == "InternalError"
            with pytest.raises(ApiError) as err:
                await client.get("/api/v1/nodes/missing")
            assert err.value.status == 404 and 'nodes "missing" not found' in err.value.message
            emulator.set_latency(0.5)
            with pytest.raises(ApiError) as err:
                await client.request("GET", "/api/v1/nodes/n0", timeout=0.1)
            assert err.value.reason == "Timeout"
        finally:
            emulator.set_latency(0)
            await client.close()

    asyncio.run(run())


def test_events_deduplicated_and_rate_limited(emulator: Emulator) -> None:
    async def run() -> None:
        client = KubeClient.for_url(emulator.url)
        now = [0.0]
        rec = EventRecorder(client, burst=3, refill=100.0, dedup_window=60.0, clock=lambda: now[0])
        ref = ObjectRef("Pod", "default", "p", "uid-1")
        assert rec.record(ref, "Warning", "FailedScheduling", "Scheduling", "0/1 nodes")
        assert not rec.record(ref, "Warning", "FailedScheduling", "Scheduling", "0/1 nodes")
        assert rec.record(ref, "Warning", "FailedScheduling", "Scheduling", "0/2 nodes")
        assert rec.record(ref, "Normal", "Scheduled", "Binding", "Successfully assigned")
        assert not rec.record(ref, "Warning", "FailedScheduling", "Scheduling", "0/3 nodes")
        now[0] = 61.0  # the dedup window passed, but the bucket holds < 1 token
        assert not rec.record(ref, "Warning", "FailedScheduling", "Scheduling", "0/1 nodes")
        now[0] = 200.0
        assert rec.record(ref, "Warning", "FailedScheduling", "Scheduling", "0/1 nodes")
        worker = asyncio.create_task(rec.run())
        await rec.flush(5)
        worker.cancel()
        await client.close()
        assert rec.sent == 4 and rec.suppressed == 3

    asyncio.run(run())
    events = emulator.list(EVENTS)
    assert len(events) == 4
    first = events[0]
    assert first["regarding"] == {
        "kind": "Pod",
        "apiVersion": "v1",
        "namespace": "default",
        "name": "p",
        "uid": "uid-1",
    }
    assert first["reportingController"] == "topo-scheduler" and first["action"] == "Scheduling"
    assert first["eventTime"].endswith("Z") and "." in first["eventTime"]


def test_lease_is_exclusive_and_released(emulator: Emulator) -> None:
    async def run() -> None:
        client = KubeClient.for_url(emulator.url)
        timing = LeaseTiming(lease_duration=1.0, renew_deadline=0.5, retry_period=0.05)
        a = LeaderElector(client, "kube-system", "lock", "a", timing)
        b = LeaderElector(client, "kube-system", "lock", "b", timing)
        assert await a.try_acquire_or_renew()
        assert not await b.try_acquire_or_renew()  # a renewed recently
        # two writers from the same version: only one can win (409 for the other)
        lease = await client.get(a.path)
        lease["spec"]["holderIdentity"] = "c"
        await client.put(a.path, lease)
        stale = dict(lease, spec=dict(lease["spec"], holderIdentity="d"))
        with pytest.raises(ApiError) as err:
            await client.put(a.path, stale)
        assert err.value.status == 409
        # nobody renews: b takes over once the lease (1 s, whole seconds) ran out on its clock
        assert not await b.try_acquire_or_renew()  # first sight of holder "c"
        await asyncio.sleep(1.1)
        assert await b.try_acquire_or_renew()
        b.is_leader = True
        await b.release()
        await client.close()

    asyncio.run(run())
    spec = emulator.get(LEASES, "lock", "kube-system")["spec"]
    assert spec["holderIdentity"] == "" and spec["leaseTransitions"] >= 1


def test_status_server_probes_and_metrics() -> None:
    state = {"synced": False}
    metrics = Metrics()
    metrics.schedule_attempts.labels("scheduled", "topo-scheduler").inc()

    async def run() -> None:
        server = StatusServer(
            metrics.registry, {"informer-sync": lambda: (state["synced"], "not synced")}
        )
        port = await server.start("127.0.0.1", 0)

        def get(path: str) -> tuple[int, str]:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
                    return r.status, r.read().decode()
            except urllib.error.HTTPError as e:
                return e.code, e.read().decode()

        assert (await asyncio.to_thread(get, "/healthz"))[0] == 200
        code, body = await asyncio.to_thread(get, "/readyz")
        assert code == 503 and "[-]informer-sync failed" in body
        state["synced"] = True
        code, body = await asyncio.to_thread(get, "/readyz")
        assert code == 200 and "[+]informer-sync ok" in body
        _, text = await asyncio.to_thread(get, "/metrics")
        series = 'scheduler_schedule_attempts_total{profile="topo-scheduler",result="scheduled"}'
        assert f"{series} 1.0" in text
        await server.stop()

    asyncio.run(run())
    assert parse_bind_address("0.0.0.0:10259") == ("0.0.0.0", 10259)
    assert parse_bind_address("[::1]:80") == ("::1", 80)
    with pytest.raises(ValueError):
        parse_bind_address("nohost")


def test_metrics_registries_are_per_process_object() -> None:
    a, b = Metrics(), Metrics()
    a.config_reloads.labels("success").inc()
    name = "topo_scheduler_config_reloads_total"
    assert a.registry.get_sample_value(name, {"result": "success"}) == 1.0
    assert b.registry.get_sample_value(name, {"result": "success"}) is None


def _reservation(group: str, gpus: int, since: float) -> Reservation:
    namespace = group.partition("/")[0]
    gid = ("annotation", group)
    return Reservation(gid, group, namespace, 0, {}, gpus, since, since + 600.0)


def test_gang_reservation_metrics_follow_the_reservations() -> None:
    metrics = Metrics()
    value = metrics.registry.get_sample_value

    def counts() -> dict[str, float | None]:
        results = ("made", "fulfilled", "expired", "released")
        name = "topo_scheduler_gang_reservations_total"
        return {r: value(name, {"result": r}) for r in results}

    def gpu_seconds() -> float | None:
        return value("topo_scheduler_gang_reservation_gpu_seconds_total")

    book = Reservations(600.0)
    metrics.sync_reservations(book, 0.0)
    assert value("topo_scheduler_gang_reservations_held") == 0.0
    assert counts() == {"made": 0.0, "fulfilled": 0.0, "expired": 0.0, "released": 0.0}
    assert gpu_seconds() == 0.0
    book.add(_reservation("ml/a", 16, 0.0))
    book.add(_reservation("dev/b", 8, 0.0))
    metrics.sync_reservations(book, 100.0)
    assert value("topo_scheduler_gang_reservations_held") == 2.0
    assert counts()["made"] == 2.0
    assert gpu_seconds() == 2400.0  # held so far: (16 + 8) GPUs x 100 s
    book.end(("annotation", "ml/a"), 200.0, "fulfilled")
    book.end(("annotation", "dev/b"), 600.0, "expired")
    metrics.sync_reservations(book, 600.0)
    assert value("topo_scheduler_gang_reservations_held") == 0.0
    assert counts() == {"made": 2.0, "fulfilled": 1.0, "expired": 1.0, "released": 0.0}
    assert gpu_seconds() == 16 * 200 + 8 * 600
    metrics.sync_reservations(book, 700.0)  # nothing held: nothing grows
    assert counts()["made"] == 2.0 and gpu_seconds() == 8000.0
    book.add(_reservation("ml/c", 4, 700.0))
    metrics.sync_reservations(book, 800.0)
    assert gpu_seconds() == 8400.0
    # ended at an earlier time than the last sync counted it held: the counter keeps its value
    book.end(("annotation", "ml/c"), 750.0, "released")
    metrics.sync_reservations(book, 800.0)
    assert counts()["released"] == 1.0 and gpu_seconds() == 8400.0


def test_gang_reservations_from_the_configuration_applied_live_and_measured() -> None:
    from plugins import frameworks_for
    from scheduler.core.config import load_config
    from scheduler.kube.scheduler import Options

    def configured(seconds: float) -> SchedulerConfiguration:
        args = {"gangReservationSeconds": seconds}
        plugin = {"name": "GPUTopology", "args": args}
        return load_config({"profiles": [{"pluginConfig": [plugin]}]})

    now = [0.0]
    client = KubeClient.for_url("http://127.0.0.1:9")
    config = configured(3600)
    sched = KubeScheduler(
        client, config, frameworks_for(config), options=Options(clock=lambda: now[0])
    )
    book = sched.groups.cycle.reservations
    assert book.timeout == 3600.0
    # every group outcome brings the metrics in step with the reservations
    held = _reservation("ml/a", 16, 0.0)
    book.add(held)
    now[0] = 10.0
    observe = sched.groups.cycle.observer
    assert observe is not None
    spec = GroupSpec("annotation", "ml", "a", 2)
    observe(GroupOutcome(spec, {}, False, False, 0, "did not fit", reservation=held))
    value = sched.metrics.registry.get_sample_value
    assert value("topo_scheduler_gang_reservations_held") == 1.0
    assert value("topo_scheduler_gang_reservations_total", {"result": "made"}) == 1.0
    assert value("topo_scheduler_gang_reservation_gpu_seconds_total") == 160.0
    # a ConfigMap change: the new timeout without restart; the reservation held keeps its expiry
    changed = configured(60)
    sched.apply_config(changed, frameworks_for(changed))
    assert book.timeout == 60.0
    assert book.held[("annotation", "ml/a")].expires == 600.0
    sched.apply_config(default_config(), frameworks_for(default_config()))
    assert book.timeout == 0.0 and not book.enabled


def test_fast_parse_path_equals_full_parse() -> None:
    sched = KubeScheduler(KubeClient.for_url("http://127.0.0.1:9"), default_config(), {})
    pending = make_pod("p", gpus=2)
    pending["metadata"].update(
        uid="u1", resourceVersion="3", creationTimestamp="2026-01-01T00:00:00Z"
    )
    pending["status"] = {"phase": "Pending"}
    first = sched.handlers.parse_pod(pending, None)
    sched.handlers.infos[first.key] = first
    bound = json.loads(json.dumps(pending))
    bound["spec"]["nodeName"] = "n1"
    bound["metadata"]["annotations"]["topo-scheduler.io/gpus"] = "0,1"
    bound["metadata"]["resourceVersion"] = "4"
    bound["status"]["phase"] = "Running"
    assert sched.handlers.parse_pod(bound, pending) == PodInfo.from_object(bound)
    assert (
        sched.handlers.parse_pod(bound, pending).annotations
        == PodInfo.from_object(bound).annotations
    )
    changed = json.loads(json.dumps(bound))
    changed["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "3"
    assert sched.handlers.parse_pod(changed, bound).requests["cpu"] == 3000


def test_logs_are_json_lines_when_not_a_tty() -> None:
    import structlog

    out = io.StringIO()
    configure("info", stream=out)
    structlog.get_logger("t").info("pod scheduled", pod="default/p", node="n1", gpus="0,1")
    structlog.get_logger("t").debug("hidden")
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["event"] == "pod scheduled" and record["node"] == "n1"
    assert record["level"] == "info" and "timestamp" in record
    structlog.reset_defaults()


def test_hold_measures_the_renew_deadline_from_the_last_renewal(emulator: Emulator) -> None:
    """A hold started after the deadline already passed gives up at its first failed renewal."""

    async def run() -> None:
        client = KubeClient.for_url(emulator.url, ClientOptions(max_retry_after=0.01))
        now = [0.0]
        timing = LeaseTiming(lease_duration=15.0, renew_deadline=10.0, retry_period=0.05)
        elector = LeaderElector(client, "kube-system", "lock", "a", timing, clock=lambda: now[0])
        try:
            await elector.acquire()
            assert elector.renewed_at == 0.0
            now[0] = 11.0  # e.g. a slow first list: the renewal deadline is already gone
            emulator.fail(500, 10_000, method="GET", path_contains="/leases/lock")
            await asyncio.wait_for(elector.hold(), 2.0)  # before the fix: renews "forever"
            assert not elector.is_leader
        finally:
            await client.close()

    asyncio.run(run())


def test_queue_backoff_from_the_configuration_and_applied_live() -> None:
    from plugins import frameworks_for
    from scheduler.core.config import load_config
    from scheduler.kube.scheduler import Options

    head = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
    config = load_config(head + "podInitialBackoffSeconds: 3\npodMaxBackoffSeconds: 7\n")
    client = KubeClient.for_url("http://127.0.0.1:9")
    sched = KubeScheduler(client, config, frameworks_for(config))
    assert (sched.queue.initial_backoff, sched.queue.max_backoff) == (3.0, 7.0)
    assert [sched.queue.backoff_duration(n) for n in (1, 2, 3)] == [3.0, 6.0, 7.0]
    changed = load_config(head + "podInitialBackoffSeconds: 2\npodMaxBackoffSeconds: 20\n")
    sched.apply_config(changed, frameworks_for(changed))  # a ConfigMap change: no restart
    assert (sched.queue.initial_backoff, sched.queue.max_backoff) == (2.0, 20.0)
    # explicit Options (tests) win over the configuration
    fast = KubeScheduler(client, config, frameworks_for(config), options=Options(max_backoff=0.2))
    assert (fast.queue.initial_backoff, fast.queue.max_backoff) == (3.0, 0.2)


def test_invalid_gpu_topology_is_logged_once_and_the_node_stays_count_only() -> None:
    """A node whose topology annotation is invalid stays usable; the problem is logged once."""
    import structlog

    from plugins import frameworks_for
    from scheduler.core.config import default_config
    from scheduler.core.topology.schema import ANNOTATION_TOPOLOGY
    from scheduler.kube.scheduler import KubeScheduler

    config = default_config()
    sched = KubeScheduler(None, config, frameworks_for(config))  # type: ignore[arg-type]
    node = {
        "kind": "Node",
        "metadata": {"name": "g", "annotations": {ANNOTATION_TOPOLOGY: "{not json"}},
        "status": {"allocatable": {"cpu": "8", "memory": "8Gi", "pods": "10",
                                   "nvidia.com/gpu": "8"}},
    }  # fmt: skip
    with structlog.testing.capture_logs() as logs:
        sched.handlers.nodes_upsert(node, None)
        sched.handlers.nodes_upsert(node, node)  # a heartbeat: same problem, no second line
    warnings = [e for e in logs if e["event"].startswith("GPU annotation invalid")]
    assert len(warnings) == 1 and warnings[0]["node"] == "g"
    assert "gpu-topology" in warnings[0]["error"]
    slot = sched.cache.snapshot.slot("g")
    assert slot is not None and sched.cache.snapshot.live[slot]
    assert sched.cache.snapshot.gpus.topology[slot] is None


def test_a_bound_member_whose_group_cannot_be_read_leaves_its_group() -> None:
    from plugins import frameworks_for

    config = default_config()
    sched = KubeScheduler(None, config, frameworks_for(config))  # type: ignore[arg-type]
    annotations = {"topo-scheduler.io/pod-group": "job", "topo-scheduler.io/min-member": "2"}
    pod = {
        "kind": "Pod",
        "metadata": {"name": "w0", "namespace": "ml", "uid": "u0", "annotations": annotations},
        "spec": {"schedulerName": "topo-scheduler", "nodeName": "n",
                 "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
    }  # fmt: skip
    sched.handlers.pods_upsert(pod, None)
    assert "ml/w0" in sched.groups.cycle.members[("annotation", "ml/job")]
    unreadable = json.loads(json.dumps(pod))
    unreadable["metadata"]["annotations"]["topo-scheduler.io/min-member"] = "abc"
    sched.handlers.pods_upsert(unreadable, pod)
    assert sched.cache.get("ml/w0") is not None  # still counted where it runs
    assert ("annotation", "ml/job") not in sched.groups.cycle.members
