"""The scheduler end to end through the API-server emulator.

Every scenario ends with each of our pods bound exactly once (one successful pods/binding,
spec.nodeName set) and no pod lost.
"""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path
from typing import Any

from scheduler.kube.client import ClientOptions
from tests.emulator import CONFIGMAPS, EVENTS, LEASES, NODES, PODS, Emulator
from tests.emulator.harness import Replica, all_bound_once, fast_settings, wait_for
from tests.emulator.store import Change


def _keys(n: int, prefix: str = "p") -> list[str]:
    return [f"default/{prefix}{i}" for i in range(n)]


def _http(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_schedules_gpu_pods_once_with_events_and_metrics(emulator: Emulator) -> None:
    for i in range(4):
        emulator.create_node(f"n{i}", gpus=8)
    for i in range(12):
        emulator.create_pod(f"p{i}", gpus=2)
    emulator.create_pod("big", gpus=16)  # fits nowhere
    emulator.create_pod("theirs", scheduler="default-scheduler", gpus=1)

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        await wait_for(lambda: all_bound_once(emulator, _keys(12)), what="12 pods bound")
        await wait_for(
            lambda: any(
                c.get("reason") == "Unschedulable"
                for c in emulator.pod("default/big")["status"].get("conditions") or []
            ),
            what="PodScheduled=False on the big pod",
        )
        assert rep.server is not None and rep.sched is not None
        registry = rep.sched.metrics.registry
        attempts = "scheduler_schedule_attempts_total"
        labels = {"profile": "topo-scheduler", "result": "scheduled"}
        # a binding is stored before its reply reaches the client that counts it
        await wait_for(lambda: registry.get_sample_value(attempts, labels) == 12, what="12 counted")
        port = rep.server.port
        status, body = await asyncio.to_thread(_http, port, "/readyz")
        assert status == 200, body
        status, metrics = await asyncio.to_thread(_http, port, "/metrics")
        series = 'scheduler_schedule_attempts_total{profile="topo-scheduler",result="scheduled"}'
        assert f"{series} 12.0" in metrics
        assert "scheduler_binding_duration_seconds_bucket" in metrics
        assert 'scheduler_pending_pods{queue="unschedulable"}' in metrics
        assert rep.sched.handlers.foreign == {"default/theirs"}
        assert "topo_scheduler_other_scheduler_pending_pods 1.0" in metrics
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    # GPU sets recorded and never overlapping on a node
    per_node: dict[str, set[int]] = {}
    for key in _keys(12):
        pod = emulator.pod(key)
        gpus = [int(g) for g in pod["metadata"]["annotations"]["topo-scheduler.io/gpus"].split(",")]
        assert len(gpus) == 2
        held = per_node.setdefault(pod["spec"]["nodeName"], set())
        assert not held & set(gpus)
        held |= set(gpus)
    assert emulator.pod("default/theirs")["spec"].get("nodeName") is None
    assert emulator.binding_posts("default/theirs") == 0
    assert emulator.binding_posts("default/big") == 0
    big = emulator.pod("default/big")
    cond = next(c for c in big["status"]["conditions"] if c["type"] == "PodScheduled")
    assert cond["status"] == "False" and cond["message"].startswith("0/4 nodes are available:")
    events = emulator.list(EVENTS)
    scheduled = [e for e in events if e["reason"] == "Scheduled"]
    assert len(scheduled) == 12
    assert all(e["note"].startswith("Successfully assigned default/p") for e in scheduled)
    failed = [e for e in events if e["reason"] == "FailedScheduling"]
    assert len(failed) == 1  # retried, but deduplicated
    assert failed[0]["note"] == cond["message"]


def test_watch_dropped_410_and_500_storm(emulator: Emulator) -> None:
    emulator.create_node("n0", gpus=8)
    emulator.create_node("n1", gpus=8)

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        await wait_for(lambda: rep.sched is not None and rep.sched.synced, what="sync")
        assert rep.sched is not None
        for i in range(4):
            emulator.create_pod(f"a{i}", gpus=1)
        await wait_for(lambda: all_bound_once(emulator, _keys(4, "a")), what="first wave")
        # a watch dropped mid-stream: resume from the last resourceVersion
        emulator.drop_watches()
        for i in range(4):
            emulator.create_pod(f"b{i}", gpus=1)
        await wait_for(lambda: all_bound_once(emulator, _keys(4, "b")), what="after drop")
        # history compacted while watches are down: 410, re-list, ghosts removed
        emulator.fail(500, 10_000, method="GET", path_contains="/api/v1/pods")
        emulator.drop_watches()
        await asyncio.sleep(0.3)
        emulator.delete(PODS, "a0", "default")  # deleted while we cannot watch
        emulator.create_pod("c0", gpus=1)
        emulator.compact()
        for rule in emulator.server.faults.rules:
            rule.count = 0
        await wait_for(lambda: all_bound_once(emulator, ["default/c0"]), what="after 410")
        assert "default/a0" not in rep.sched.pods.known
        assert rep.sched.cache.get("default/a0") is None
        assert rep.sched.pods.lists >= 2
        # a storm of 500s on binding: retried with backoff, still bound once
        emulator.fail(500, 6, method="POST", path_contains="/binding")
        for i in range(3):
            emulator.create_pod(f"d{i}", gpus=1)
        await wait_for(lambda: all_bound_once(emulator, _keys(3, "d")), what="after 500 storm")
        # 429 with Retry-After is honoured by the client, not surfaced
        emulator.fail(429, 3, method="POST", path_contains="/binding", retry_after=0.1)
        emulator.create_pod("e0", gpus=1)
        await wait_for(lambda: all_bound_once(emulator, ["default/e0"]), what="after 429")
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    for key in [*_keys(3, "d"), *_keys(4, "b"), "default/c0"]:
        assert len(emulator.bindings()[key]) == 1


def test_conflict_on_bind_drops_the_pod(emulator: Emulator) -> None:
    emulator.create_node("n0", gpus=8)
    emulator.create_node("other", gpus=8)

    async def scenario() -> None:
        # another actor binds the pod while our binding requests are slow
        rep = Replica(fast_settings(emulator)).start()
        await wait_for(lambda: rep.sched is not None and rep.sched.synced, what="sync")
        emulator.set_latency(0.3)
        emulator.create_pod("p", gpus=1)
        # our POST is in the server, held by the latency: another actor binds first
        await wait_for(
            lambda: emulator.request_count("POST", "/pods/p/binding") >= 1,
            what="our binding request",
        )
        store = emulator.server.store
        emulator.server.call(
            lambda: store.bind("default", "p", {"target": {"kind": "Node", "name": "other"}})
        )
        emulator.set_latency(0)
        await wait_for(lambda: emulator.binding_posts("default/p") >= 2, what="our bind")
        await wait_for(
            lambda: (
                rep.sched is not None
                and "default/p" not in rep.sched.queue
                and "default/p" not in rep.sched.binding
            ),
            what="dropped",
        )
        assert rep.sched is not None
        assert rep.sched.cache.node_of("default/p") == "other"
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    assert emulator.bindings()["default/p"] == ["other"]
    # our GPU set travelled in the refused Binding: the pod never got it
    assert "topo-scheduler.io/gpus" not in emulator.pod("default/p")["metadata"]["annotations"]


def test_gpu_set_arrives_with_the_binding(emulator: Emulator) -> None:
    """One write per pod: the annotation lands in the binding's update, with spec.nodeName."""
    emulator.create_node("n0", gpus=8)
    emulator.create_node("n1", gpus=8)
    store = emulator.server.store
    versions: dict[str, list[dict[str, Any]]] = {}  # pod name -> every stored version

    def record(change: Change) -> None:
        if change.res is PODS and change.type != "DELETED":
            versions.setdefault(change.obj["metadata"]["name"], []).append(change.obj)

    emulator.server.call(lambda: store.hooks.append(record))

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        for i in range(6):
            emulator.create_pod(f"p{i}", gpus=2)
        emulator.create_pod("cpu")  # no GPUs: a Binding without annotations
        await wait_for(lambda: all_bound_once(emulator, [*_keys(6), "default/cpu"]), what="bound")
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    ann = "topo-scheduler.io/gpus"
    for i in range(6):
        history = versions[f"p{i}"]
        bound = [v for v in history if v["spec"].get("nodeName")]
        annotated = [v for v in history if ann in (v["metadata"].get("annotations") or {})]
        # the first version with a node is the first with the GPU set: same resourceVersion
        assert bound and annotated
        assert (
            bound[0]["metadata"]["resourceVersion"] == annotated[0]["metadata"]["resourceVersion"]
        )
        assert len(bound[0]["metadata"]["annotations"][ann].split(",")) == 2
    assert ann not in emulator.pod("default/cpu")["metadata"]["annotations"]
    # nothing but the binding wrote to the pods: no PATCH of a pod at all
    assert emulator.request_count("PATCH", "/pods/") == 0
    assert sum(emulator.binding_posts(k) for k in [*_keys(6), "default/cpu"]) == 7


def test_restart_mid_run(emulator: Emulator) -> None:
    for i in range(3):
        emulator.create_node(f"n{i}", gpus=8)

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        await wait_for(lambda: rep.sched is not None and rep.sched.synced, what="sync")
        for i in range(20):
            emulator.create_pod(f"p{i}", gpus=1)
        await wait_for(lambda: len(emulator.bindings()) >= 5, what="some bound")
        assert await rep.shutdown() == 0
        for i in range(20, 24):
            emulator.create_pod(f"p{i}", gpus=1)
        rep2 = Replica(fast_settings(emulator)).start()
        await wait_for(lambda: all_bound_once(emulator, _keys(24)), what="all bound")
        assert await rep2.shutdown() == 0

    asyncio.run(scenario())
    # GPUs chosen by both processes never overlap on a node
    per_node: dict[str, list[int]] = {}
    for key in _keys(24):
        pod = emulator.pod(key)
        gpus = pod["metadata"]["annotations"]["topo-scheduler.io/gpus"].split(",")
        per_node.setdefault(pod["spec"]["nodeName"], []).extend(int(g) for g in gpus)
    for gpus in per_node.values():
        assert len(gpus) == len(set(gpus))


def test_two_replicas_race_for_the_lease(emulator: Emulator) -> None:
    for i in range(2):
        emulator.create_node(f"n{i}", gpus=8)

    async def scenario() -> None:
        # a binding slowed past the client's deadline by a loaded machine would be counted
        # as failed although stored: give requests room, the test counts bindings
        roomy = ClientOptions(qps=5000, burst=5000, timeout=30.0, max_retry_after=0.2)
        a = Replica(fast_settings(emulator, leader_elect=True, identity="a", client=roomy))
        b = Replica(fast_settings(emulator, leader_elect=True, identity="b", client=roomy))
        a.start()
        b.start()
        await wait_for(
            lambda: (
                a.sched is not None and b.sched is not None and a.sched.synced and b.sched.synced
            ),
            what="both synced",
        )
        for i in range(6):
            emulator.create_pod(f"p{i}", gpus=1)
        await wait_for(lambda: all_bound_once(emulator, _keys(6)), what="first wave")
        assert a.sched is not None and b.sched is not None
        leader, standby = (a, b) if a.sched.active else (b, a)
        assert leader.sched is not None and standby.sched is not None
        assert not standby.sched.active and standby.sched.scheduled == 0
        # the standby's caches are warm: it sees every binding the leader made
        sched = standby.sched
        await wait_for(lambda: sched.cache.pod_count == 6, what="standby cache")
        assert sched.cache.node_count == 2
        assert await leader.shutdown() == 0  # releases the lease at once
        lease = emulator.get(LEASES, "topo-scheduler", "kube-system")
        assert lease["spec"]["holderIdentity"] in ("", standby.settings.identity)
        for i in range(6, 10):
            emulator.create_pod(f"p{i}", gpus=1)
        await wait_for(lambda: all_bound_once(emulator, _keys(10)), what="standby took over")
        # the API server records a binding before its reply reaches the client
        await wait_for(lambda: sched.scheduled == 4, what="standby counted its bindings")
        assert await standby.shutdown() == 0

    asyncio.run(scenario())


def test_lost_lease_stops_scheduling_and_exits(emulator: Emulator) -> None:
    emulator.create_node("n0", gpus=8)

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator, leader_elect=True, identity="a")).start()
        await wait_for(lambda: rep.sched is not None and rep.sched.active, what="leading")
        # someone else takes the lease over (e.g. after a partition)
        lease = emulator.get(LEASES, "topo-scheduler", "kube-system")
        emulator.patch(
            LEASES, "topo-scheduler", {"spec": {"holderIdentity": "intruder"}}, "kube-system"
        )
        assert rep.task is not None
        code = await asyncio.wait_for(rep.task, 10)
        assert code == 1
        assert lease["spec"]["holderIdentity"] == "a"

    asyncio.run(scenario())


def test_bad_config_map_rejected_while_scheduling_continues(emulator: Emulator) -> None:
    emulator.create_node("n0", gpus=8)
    good = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
    emulator.put_config_map("kube-system", "topo", {"config.yaml": good})

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator, config_map="kube-system/topo")).start()
        await wait_for(lambda: rep.sched is not None and rep.sched.synced, what="sync")
        bad = good + "percentageOfNodesToScore: 400\n"
        emulator.put_config_map("kube-system", "topo", {"config.yaml": bad})
        await wait_for(
            lambda: any(e["reason"] == "InvalidConfiguration" for e in emulator.list(EVENTS)),
            what="warning event",
        )
        for i in range(3):
            emulator.create_pod(f"p{i}", gpus=1)
        await wait_for(lambda: all_bound_once(emulator, _keys(3)), what="still scheduling")
        assert rep.server is not None
        _, metrics = await asyncio.to_thread(_http, rep.server.port, "/metrics")
        assert 'topo_scheduler_config_reloads_total{result="failure"} 1.0' in metrics
        # a valid change applies without restart: a second profile takes other pods
        second = good + "profiles:\n- schedulerName: topo-scheduler\n- schedulerName: gang\n"
        emulator.put_config_map("kube-system", "topo", {"config.yaml": second})
        await wait_for(
            lambda: rep.sched is not None and "gang" in rep.sched.names, what="new profile"
        )
        emulator.create_pod("g0", scheduler="gang", gpus=1)
        await wait_for(lambda: all_bound_once(emulator, ["default/g0"]), what="gang pod")
        _, metrics = await asyncio.to_thread(_http, rep.server.port, "/metrics")
        assert 'topo_scheduler_config_reloads_total{result="success"} 1.0' in metrics
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    event = next(e for e in emulator.list(EVENTS) if e["reason"] == "InvalidConfiguration")
    assert "percentageOfNodesToScore" in event["note"]
    assert event["regarding"]["kind"] == "ConfigMap" and event["type"] == "Warning"


def test_invalid_config_map_at_startup_fails_fast(emulator: Emulator) -> None:
    emulator.put_config_map(
        "kube-system",
        "topo",
        {"config.yaml": "apiVersion: wrong/v1\nkind: KubeSchedulerConfiguration\n"},
    )

    async def scenario() -> int:
        rep = Replica(fast_settings(emulator, config_map="kube-system/topo")).start()
        assert rep.task is not None
        return await asyncio.wait_for(rep.task, 10)

    assert asyncio.run(scenario()) == 1
    assert emulator.get(CONFIGMAPS, "topo", "kube-system")


def test_node_deleted_while_its_pods_are_assumed(emulator: Emulator) -> None:
    emulator.create_node("doomed", gpus=8)

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        await wait_for(lambda: rep.sched is not None and rep.sched.synced, what="sync")
        sched = rep.sched
        assert sched is not None
        # every binding slot taken: the pods stay assumed, their binders waiting before the
        # node check that precedes the POST
        slots = sched.options.max_bindings_in_flight
        for _ in range(slots):
            await sched.binder._slots.acquire()
        for i in range(3):
            emulator.create_pod(f"p{i}", gpus=2)
        await wait_for(lambda: len(sched.binding) == 3, what="assumed")
        emulator.delete(NODES, "doomed")
        await wait_for(lambda: sched.cache.node_count == 0, what="node removed from the cache")
        for _ in range(slots):
            sched.binder._slots.release()
        await wait_for(lambda: not sched.binding, what="bindings aborted")
        assert emulator.binding_posts("default/p0") == 0
        emulator.create_node("fresh", gpus=8)
        await wait_for(lambda: all_bound_once(emulator, _keys(3)), what="rebound")
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    assert {emulator.pod(k)["spec"]["nodeName"] for k in _keys(3)} == {"fresh"}
    assert all(emulator.binding_posts(k) == 1 for k in _keys(3))


def test_stale_gpu_annotation_does_not_double_book(emulator: Emulator) -> None:
    """A pod still carrying the set of an earlier failed binding is accounted by the new one."""
    emulator.create_node("n0", gpus=8)

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        await wait_for(lambda: rep.sched is not None and rep.sched.synced, what="sync")
        emulator.set_latency(0.5)  # keep the first pod assumed while the node changes
        emulator.create_pod("stale", gpus=2, annotations={"topo-scheduler.io/gpus": "4,5"})
        await wait_for(lambda: rep.sched is not None and "default/stale" in rep.sched.binding)
        # another scheduler's pod lands on the node: the cache re-resolves its GPU sets
        emulator.create_pod("theirs", scheduler="default-scheduler", node="n0", gpus=1)
        await wait_for(lambda: rep.sched is not None and rep.sched.cache.get("default/theirs"))
        emulator.create_pod("next", gpus=4)
        await wait_for(lambda: all_bound_once(emulator, ["default/stale", "default/next"]))
        emulator.set_latency(0)
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    held: list[str] = []
    for key in ("default/stale", "default/next"):
        held += emulator.pod(key)["metadata"]["annotations"]["topo-scheduler.io/gpus"].split(",")
    assert len(held) == 6 and len(set(held)) == 6, held  # without the fix: 0,1 twice


def test_pod_deleted_during_binding_and_watches_cut_every_few_events(emulator: Emulator) -> None:
    emulator.create_node("n0", gpus=8)
    emulator.create_node("n1", gpus=8)

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        await wait_for(lambda: rep.sched is not None and rep.sched.synced, what="sync")
        sched = rep.sched
        assert sched is not None
        store = emulator.server.store
        gone_versions: list[tuple[str, dict[str, Any]]] = []  # every write to the pod

        def record(change: Change) -> None:
            if change.res is PODS and change.obj["metadata"]["name"] == "gone":
                gone_versions.append((change.type, change.obj))

        emulator.server.call(lambda: store.hooks.append(record))
        emulator.set_latency(0.4)  # the binding POST is slow
        emulator.create_pod("gone", gpus=2)
        await wait_for(
            lambda: emulator.request_count("POST", "/pods/gone/binding") >= 1, what="binding"
        )
        emulator.delete(PODS, "gone", "default")
        await wait_for(lambda: "default/gone" not in sched.binding, what="binding ended")
        emulator.set_latency(0)
        assert "default/gone" not in sched.queue and sched.cache.get("default/gone") is None
        assert emulator.binding_posts("default/gone") == 1  # answered 404
        gone = sched.metrics.registry.get_sample_value(
            "topo_scheduler_bindings_total", {"result": "gone"}
        )
        assert gone == 1.0
        # the GPU set was only ever in the Binding: no version of the pod carried it
        assert [t for t, _ in gone_versions] == ["ADDED", "DELETED"]
        assert not any(
            "topo-scheduler.io/gpus" in (o["metadata"].get("annotations") or {})
            for _, o in gone_versions
        )
        # every watch stream is now cut after 3 events; the informers resume each time
        emulator.drop_watches_after(3)
        for i in range(10):
            emulator.create_pod(f"p{i}", gpus=1)
        await wait_for(lambda: all_bound_once(emulator, _keys(10)), what="bound through cuts")
        assert sched.pods.watches > 3
        emulator.drop_watches_after(None)
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    assert "default/gone" not in emulator.bindings()


def test_config_file_profiles_decide_which_pods_are_ours(
    emulator: Emulator, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        "profiles:\n- schedulerName: gpu-train\n"
    )
    emulator.create_node("n0", gpus=8)
    emulator.create_pod("train", scheduler="gpu-train", gpus=2)
    emulator.create_pod("default-name", gpus=2)  # topo-scheduler: not a profile here

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator, config_file=str(config))).start()
        await wait_for(lambda: all_bound_once(emulator, ["default/train"]), what="bound")
        assert rep.sched is not None and rep.sched.handlers.foreign == {"default/default-name"}
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    assert emulator.binding_posts("default/default-name") == 0


def test_lease_renewed_while_the_first_sync_is_slow(emulator: Emulator) -> None:
    """Renewal starts right after acquiring: a sync longer than the lease never lets it lapse."""
    emulator.create_node("n0", gpus=8)
    emulator.create_pod("p0", gpus=1)
    rule = emulator.fail(500, 10_000, method="GET", path_contains="/api/v1/pods")

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator, leader_elect=True, identity="a")).start()

        def holder() -> str:
            try:
                lease = emulator.get(LEASES, "topo-scheduler", "kube-system")
            except Exception:
                return ""
            return str(lease["spec"].get("holderIdentity") or "")

        await wait_for(lambda: holder() == "a", what="lease acquired")
        first = emulator.get(LEASES, "topo-scheduler", "kube-system")["spec"]["renewTime"]
        await asyncio.sleep(2.0)  # longer than the lease (1.5 s): the pod list still fails
        assert rep.sched is not None and not rep.sched.synced and not rep.sched.active
        lease = emulator.get(LEASES, "topo-scheduler", "kube-system")["spec"]
        assert lease["holderIdentity"] == "a" and lease["renewTime"] != first
        rule.count = 0
        await wait_for(lambda: all_bound_once(emulator, ["default/p0"]), what="bound after sync")
        assert await rep.shutdown() == 0

    asyncio.run(scenario())


def test_pod_informer_skips_finished_pods_and_managed_fields(emulator: Emulator) -> None:
    emulator.create_node("n0", gpus=8)
    store = emulator.server.store
    managed = [{"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:spec": {}}}]

    def make_finished(name: str, phase: str) -> None:
        emulator.server.call(
            lambda: store.patch(
                PODS, "default", name, {"status": {"phase": phase}}, False, "status"
            )
        )

    emulator.create_pod("done", scheduler="default-scheduler", node="n0", gpus=1)
    make_finished("done", "Succeeded")
    emulator.create_pod("runs", scheduler="default-scheduler", node="n0", gpus=2)
    emulator.patch(PODS, "runs", {"metadata": {"managedFields": managed}}, "default")

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        await wait_for(lambda: rep.sched is not None and rep.sched.synced, what="sync")
        sched = rep.sched
        assert sched is not None
        assert sched.pods.field_selector == "status.phase!=Succeeded,status.phase!=Failed"
        assert set(sched.pods.known) == {"default/runs"}  # the finished pod was never listed
        assert "managedFields" not in sched.pods.known["default/runs"]["metadata"]
        assert sched.cache.get("default/done") is None
        # a pod that finishes leaves the watch as DELETED: its GPUs are free again
        make_finished("runs", "Failed")
        await wait_for(lambda: sched.cache.get("default/runs") is None, what="finished pod gone")
        assert "default/runs" not in sched.pods.known
        emulator.create_pod("big", gpus=8)
        await wait_for(lambda: all_bound_once(emulator, ["default/big"]), what="all GPUs used")
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
