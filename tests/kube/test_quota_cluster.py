"""ElasticQuotas in the cluster, over the API-server emulator: `topo-scheduler run` discovers
scheduler-plugins' CRD, watches the quotas, enforces them (a pod over max stays pending with
scheduler-plugins' message), reclaims (a pod of a namespace within its min preempts a
borrower) and writes `status.used`; without the CRD nothing is watched and the log says so."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.emulator import NAMESPACES, PODS, Emulator
from tests.emulator.harness import Replica, all_bound_once, fast_settings, wait_for
from tests.emulator.store import ELASTIC_QUOTAS

Obj = dict[str, Any]
FULL = {"cpu": "64", "memory": "512Gi"}


def _quota(namespace: str, min_: Obj | None, max_: Obj | None) -> Obj:
    spec: Obj = {}
    if min_ is not None:
        spec["min"] = min_
    if max_ is not None:
        spec["max"] = max_
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {"name": "quota", "namespace": namespace},
        "spec": spec,
    }


def _message(emu: Emulator, key: str) -> str:
    conds = emu.pod(key).get("status", {}).get("conditions") or []
    cond = next((c for c in conds if c.get("type") == "PodScheduled"), {})
    return str(cond.get("message", ""))


def _gone(emu: Emulator, key: str) -> bool:
    return key not in {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in emu.pods()}


def _namespaces(emu: Emulator, *names: str) -> None:
    for name in names:
        emu.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                "metadata": {"name": name}})  # fmt: skip


def test_a_pod_over_its_quota_max_waits_and_status_used_is_written(emulator: Emulator) -> None:
    emulator.serve(ELASTIC_QUOTAS)
    _namespaces(emulator, "team-a")
    emulator.create_node("n0", gpus=8)
    bound = {**FULL, "nvidia.com/gpu": "4"}
    emulator.create(ELASTIC_QUOTAS, _quota("team-a", bound, bound), "team-a")
    emulator.create_pod("small", namespace="team-a", gpus=4, cpu="2")
    emulator.create_pod("big", namespace="team-a", gpus=1)

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        await wait_for(lambda: all_bound_once(emulator, ["team-a/small"]), what="small bound")
        await wait_for(
            lambda: "is more than Max" in _message(emulator, "team-a/big"), what="big refused"
        )

        def used() -> Obj:
            obj = emulator.get(ELASTIC_QUOTAS, "quota", "team-a")
            return dict((obj.get("status") or {}).get("used") or {})

        await wait_for(lambda: used().get("nvidia.com/gpu") == "4", what="status.used")
        assert used() == {"cpu": "2", "memory": str(2**30), "nvidia.com/gpu": "4"}
        assert rep.sched is not None
        writes = rep.sched.quota_watches.writes
        await asyncio.sleep(0.5)  # nothing changed: nothing more written
        assert rep.sched.quota_watches.writes == writes
        # usage falls when the pod goes; then big fits its quota
        emulator.delete(PODS, "small", "team-a")
        await wait_for(lambda: all_bound_once(emulator, ["team-a/big"]), what="big bound")
        await wait_for(lambda: used().get("nvidia.com/gpu") == "1", what="status.used lower")
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    assert emulator.request_count("PATCH", "/elasticquotas/quota/status") >= 2
    for method in ("PUT", "POST", "DELETE"):
        assert emulator.request_count(method, "/elasticquotas") == 0


def test_a_pod_within_its_min_reclaims_from_a_borrower(emulator: Emulator) -> None:
    emulator.serve(ELASTIC_QUOTAS)
    _namespaces(emulator, "team-a", "team-b")
    emulator.create_node("n0", gpus=8)
    bounds = ({**FULL, "nvidia.com/gpu": "4"}, {**FULL, "nvidia.com/gpu": "8"})
    for ns in ("team-a", "team-b"):
        emulator.create(ELASTIC_QUOTAS, _quota(ns, *bounds), ns)
    # team-b borrows team-a's idle guarantee: 8 GPUs against a min of 4
    emulator.create_pod("borrower", namespace="team-b", gpus=8, priority=1000)

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        await wait_for(lambda: all_bound_once(emulator, ["team-b/borrower"]), what="borrower")
        # team-a comes back for its min, at a lower priority than the borrower's
        emulator.create_pod("owner", namespace="team-a", gpus=4, priority=0)
        await wait_for(lambda: _gone(emulator, "team-b/borrower"), what="borrower preempted")
        await wait_for(lambda: all_bound_once(emulator, ["team-a/owner"]), what="owner bound")
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    assert emulator.pod("team-a/owner")["spec"]["nodeName"] == "n0"
    reasons = {e.get("reason") for e in emulator.events()}
    assert "Preempted" in reasons


def test_without_the_crd_quotas_are_not_watched_and_the_log_says_so(
    emulator: Emulator, capsys: Any
) -> None:
    emulator.create_node("n0", gpus=8)
    emulator.create_pod("p", gpus=1)

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        await wait_for(lambda: all_bound_once(emulator, ["default/p"]), what="bound")
        assert rep.sched is not None
        assert rep.sched.quota_watches.served is False and rep.sched.synced
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    assert capsys.readouterr().out.count("ElasticQuotas not enforced") == 1
    assert emulator.request_count("GET", "/apis/scheduling.x-k8s.io/v1alpha1/elasticquotas") == 0


def test_an_unreadable_quota_is_reported_and_its_last_good_version_kept(
    emulator: Emulator, capsys: Any
) -> None:
    emulator.serve(ELASTIC_QUOTAS)
    _namespaces(emulator, "team-a")
    emulator.create_node("n0", gpus=8)
    bound = {**FULL, "nvidia.com/gpu": "2"}
    emulator.create(ELASTIC_QUOTAS, _quota("team-a", bound, bound), "team-a")

    async def scenario() -> None:
        rep = Replica(fast_settings(emulator)).start()
        await wait_for(lambda: rep.sched is not None and rep.sched.synced, what="synced")
        assert rep.sched is not None
        quotas = rep.sched.cache.snapshot.quotas
        await wait_for(lambda: "team-a" in quotas.quotas, what="quota in force")
        emulator.patch(ELASTIC_QUOTAS, "quota", {"spec": {"max": {"cpu": "lots"}}}, "team-a")
        await wait_for(lambda: bool(quotas.unreadable), what="unreadable seen")
        assert quotas.quotas["team-a"].max == {
            "cpu": 64000, "memory": 512 * 2**30, "nvidia.com/gpu": 2}  # fmt: skip
        # still enforced with the last good version
        emulator.create_pod("big", namespace="team-a", gpus=4)
        await wait_for(lambda: "is more than Max" in _message(emulator, "team-a/big"),
                       what="big refused")  # fmt: skip
        assert await rep.shutdown() == 0

    asyncio.run(scenario())
    out = capsys.readouterr().out
    assert out.count("ElasticQuota not understood") == 1
    assert "spec.max.cpu" in out
