"""The one scheduling cycle: kube's extension points in kube's order, Unreserve in reverse on
every failure after Reserve, Permit waits, points enabled one by one, plugins without a
reference form, and the GPU set the cache accounts for an assumed pod."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from core_support import node, pod

from plugins import REGISTRY
from scheduler.core.cache import Cache
from scheduler.core.config import build_frameworks, load_config
from scheduler.core.cycle import Scheduler, drive
from scheduler.core.framework import (
    BindOutcome,
    BindResult,
    CycleState,
    Framework,
    Permit,
    PostFilterResult,
    PreFilterResult,
    ReasonMasks,
    ScheduleResult,
)
from scheduler.core.model import NodeInfo, PodInfo
from scheduler.core.queue import SchedulingQueue, Where
from scheduler.core.reference import NoReferenceForm, schedule_reference
from scheduler.core.snapshot import BoolArray, IntArray, Snapshot
from scheduler.core.topology.builtin import builtin_topology
from scheduler.core.topology.schema import ANNOTATION_GPUS, ANNOTATION_TOPOLOGY, format_topology
from scheduler.explain import DryRunBinder

Calls = list[str]


class Recorder:
    """Implements every extension point and records each call as `<name>.<point>`."""

    def __init__(self, name: str, calls: Calls, fail_at: str | None = None) -> None:
        self.name = name
        self.calls = calls
        self.fail_at = fail_at
        self.permit_answer = Permit.allow()

    def _log(self, point: str) -> None:
        self.calls.append(f"{self.name}.{point}")

    def pre_enqueue(self, pod: PodInfo) -> str | None:
        self._log("preEnqueue")
        return None

    def pre_filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot
    ) -> PreFilterResult | None:
        self._log("preFilter")
        state.write(self.name, "seen at PreFilter")
        return None

    def filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: BoolArray
    ) -> ReasonMasks:
        assert state.read(self.name) == "seen at PreFilter"  # CycleState carries it
        self._log("filter")
        if self.fail_at == "filter":
            return [("node(s) refused by the recorder", candidates.copy())]
        return []

    def post_filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, result: ScheduleResult
    ) -> PostFilterResult | None:
        self._log("postFilter")
        return PostFilterResult(message="recorder: no victims.")

    def pre_score(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, feasible: BoolArray
    ) -> bool:
        self._log("preScore")
        return True

    def score(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, feasible: BoolArray
    ) -> IntArray | None:
        self._log("score")
        return np.zeros(snapshot.capacity, np.int64)

    def normalize(self, state: CycleState, scores: IntArray, feasible: BoolArray) -> IntArray:
        self._log("normalizeScore")
        return scores

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> str | None:
        self._log("reserve")
        return "reserve failed" if self.fail_at == "reserve" else None

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        self._log("unreserve")

    def permit(self, state: CycleState, pod: PodInfo, node: str) -> Permit:
        self._log("permit")
        if self.fail_at == "permit":
            return Permit.reject("permit says no")
        return self.permit_answer

    async def pre_bind(self, state: CycleState, pod: PodInfo, node: str) -> str | None:
        self._log("preBind")
        return "volumes not ready" if self.fail_at == "preBind" else None

    async def bind(
        self, state: CycleState, pod: PodInfo, node: str, binder: Any
    ) -> BindResult | None:
        self._log("bind")
        if self.fail_at == "bind":
            return BindResult(BindOutcome.ERROR, "API server said no")
        return None  # leave it to DefaultBinder

    def post_bind(self, state: CycleState, pod: PodInfo, node: str) -> None:
        self._log("postBind")


class OnlyFilter:
    """A plugin with a vector filter and no per-node reference form."""

    name = "OnlyFilter"

    def filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: BoolArray
    ) -> ReasonMasks:
        mask = np.zeros(snapshot.capacity, np.bool_)
        slot = snapshot.index.get("a")
        if slot is not None:
            mask[slot] = True
        return [("node(s) named a are refused", mask)]


def _factory(plugin: Any) -> Any:
    return lambda args, path: plugin


def _setup(
    plugins: Mapping[str, Any], points: Mapping[str, Any]
) -> tuple[Scheduler, SchedulingQueue[PodInfo], Cache]:
    registry = {
        **REGISTRY,
        **{name: _factory(p) for name, p in plugins.items()},
    }
    config = load_config({"profiles": [{"schedulerName": "topo-scheduler", "plugins": points}]})
    frameworks = build_frameworks(config, registry)
    cache = Cache()
    for name in ("a", "b"):
        cache.add_node(NodeInfo.from_object(node(name, cpu="8", memory="32Gi")))
    queue: SchedulingQueue[PodInfo] = SchedulingQueue(lambda: 0.0)
    return Scheduler(cache, queue, frameworks, DryRunBinder()), queue, cache


def _run(cycle: Scheduler, queue: SchedulingQueue[PodInfo], name: str = "p") -> Any:
    pending = PodInfo.from_object(pod(name, {"cpu": "1"}))
    assert cycle.enqueue(pending) is None
    queued = queue.pop()
    assert queued is not None
    decision = cycle.schedule_one(queued)
    if decision.assumed is not None:
        drive(cycle.bind(decision.assumed))
    return decision


# At Bind the first plugin that binds wins; A and B come before DefaultBinder when the
# point names them (as in kube's MultiPoint expansion).
ALL = {
    "multiPoint": {"enabled": [{"name": "A"}, {"name": "B"}]},
    "bind": {"enabled": [{"name": "A"}, {"name": "B"}]},
}


def test_points_run_in_kube_order() -> None:
    calls: Calls = []
    cycle, queue, cache = _setup({"A": Recorder("A", calls), "B": Recorder("B", calls)}, ALL)
    _run(cycle, queue)
    points = [c for c in calls if c.startswith("A.")]
    assert points == [
        "A.preEnqueue",
        "A.preFilter",
        "A.filter",  # node a
        "A.preScore",
        "A.score",
        "A.normalizeScore",
        "A.reserve",
        "A.permit",
        "A.preBind",
        "A.bind",
        "A.postBind",
    ]
    # plugins of one point run in the profile's order before the next point
    assert calls.index("B.preFilter") < calls.index("A.filter")
    assert calls.index("B.reserve") < calls.index("A.permit")
    assert "A.unreserve" not in calls and "A.postFilter" not in calls
    assert cache.get("default/p") is not None and not cache.is_assumed("default/p")
    assert "default/p" not in queue


@pytest.mark.parametrize(
    ("fail_at", "where"),
    [
        ("reserve", Where.UNSCHEDULABLE),
        ("permit", Where.UNSCHEDULABLE),
        ("preBind", Where.BACKOFF),
        ("bind", Where.BACKOFF),
    ],
)
def test_failure_after_reserve_unreserves_in_reverse_and_requeues(
    fail_at: str, where: Where
) -> None:
    calls: Calls = []
    plugins = {"A": Recorder("A", calls), "B": Recorder("B", calls, fail_at=fail_at)}
    cycle, queue, cache = _setup(plugins, ALL)
    _run(cycle, queue)
    tail = calls[calls.index("A.reserve") :]
    assert tail[-2:] == ["B.unreserve", "A.unreserve"], tail
    assert "A.postBind" not in calls
    assert cache.get("default/p") is None  # the assumption is forgotten
    assert queue.where("default/p") is where  # never lost


def test_post_filter_runs_only_when_no_node_fits() -> None:
    calls: Calls = []
    cycle, queue, _ = _setup({"A": Recorder("A", calls, fail_at="filter")}, ALL_A)
    decision = _run(cycle, queue)
    assert decision.outcome == "unschedulable"
    assert "A.postFilter" in calls and "A.reserve" not in calls
    # every PostFilter's message, joined in profile order (kube's RunPostFilterPlugins)
    assert decision.message == (
        "0/2 nodes are available: 2 node(s) refused by the recorder. preemption: 0/2 nodes "
        "are available: 2 No preemption victims found for incoming pod., recorder: no victims."
    )
    assert queue.where("default/p") is Where.UNSCHEDULABLE


ALL_A = {"multiPoint": {"enabled": [{"name": "A"}]}}


def test_permit_wait_times_out_rejects_and_unreserves() -> None:
    calls: Calls = []
    waiting = Recorder("A", calls)
    waiting.permit_answer = Permit.wait(0.05)
    cycle, queue, cache = _setup({"A": waiting}, ALL_A)

    async def scenario() -> Any:
        pending = PodInfo.from_object(pod("p", {"cpu": "1"}))
        cycle.enqueue(pending)
        queued = queue.pop()
        assert queued is not None
        decision = cycle.schedule_one(queued)
        assert decision.outcome == "assumed" and "default/p" in cycle.waiting
        return await cycle.bind(decision.assumed)

    result = asyncio.run(scenario())
    assert result.outcome is BindOutcome.ABORTED
    assert result.message == "rejected due to timeout after waiting 0.05s at plugin A"
    assert calls[-1] == "A.unreserve" and "A.preBind" not in calls
    assert cache.get("default/p") is None
    assert queue.where("default/p") is Where.UNSCHEDULABLE
    assert not cycle.waiting


def test_permit_wait_allowed_goes_on_to_bind() -> None:
    calls: Calls = []
    waiting = Recorder("A", calls)
    waiting.permit_answer = Permit.wait(5.0)
    cycle, queue, cache = _setup({"A": waiting}, ALL_A)

    async def scenario() -> Any:
        cycle.enqueue(PodInfo.from_object(pod("p", {"cpu": "1"})))
        queued = queue.pop()
        assert queued is not None
        decision = cycle.schedule_one(queued)
        binding = asyncio.create_task(cycle.bind(decision.assumed))
        await asyncio.sleep(0)
        assert cycle.allow("default/p", "A")
        return await binding

    assert asyncio.run(scenario()).outcome is BindOutcome.BOUND
    assert calls[-2:] == ["A.preBind", "A.postBind"]  # DefaultBinder bound it
    assert cache.get("default/p") is not None


def test_plugin_enabled_only_at_reserve_runs_there_only() -> None:
    calls: Calls = []
    cycle, queue, _ = _setup(
        {"A": Recorder("A", calls, fail_at="filter")},
        {"reserve": {"enabled": [{"name": "A"}]}},
    )
    decision = _run(cycle, queue)
    assert decision.outcome == "assumed"  # its failing Filter is not enabled
    assert sorted(set(calls)) == ["A.reserve"]
    assert cycle.frameworks["topo-scheduler"].plugins()["reserve"][-1] == "A"


def test_plugin_without_reference_form_still_runs() -> None:
    cycle, queue, cache = _setup(
        {"OnlyFilter": OnlyFilter()}, {"filter": {"enabled": [{"name": "OnlyFilter"}]}}
    )
    framework: Framework = cycle.frameworks["topo-scheduler"]
    assert "OnlyFilter" in framework.plugins()["filter"]
    decision = _run(cycle, queue)
    assert decision.result.node == "b"  # node a refused by the plugin
    with pytest.raises(NoReferenceForm, match="OnlyFilter"):
        schedule_reference(framework, PodInfo.from_object(pod("q", {"cpu": "1"})), cache.snapshot)


def test_assumed_gpu_set_outranks_a_stale_annotation() -> None:
    """The set the cycle chose is what the cache accounts: no round trip through the pod's
    annotation, and a stale annotation left by an earlier failed binding is ignored."""
    registry_points: dict[str, Any] = {}
    cycle, queue, cache = _setup({}, registry_points)
    topology = builtin_topology("dgx-a100")
    gpu_node = node("g", cpu="64", memory="512Gi", extra={"nvidia.com/gpu": "8"})
    gpu_node["metadata"]["annotations"] = {ANNOTATION_TOPOLOGY: format_topology(topology)}
    cache.add_node(NodeInfo.from_object(gpu_node))
    stale = pod("t", {"cpu": "1", "nvidia.com/gpu": "2"})
    stale["metadata"]["annotations"] = {ANNOTATION_GPUS: "6,7"}  # from an earlier attempt
    pending = PodInfo.from_object(stale)
    cycle.enqueue(pending)
    queued = queue.pop()
    assert queued is not None
    decision = cycle.schedule_one(queued)
    chosen = decision.result.gpus
    assert decision.assumed is not None and len(chosen) == 2 and chosen != (6, 7)
    slot = cache.snapshot.index["g"]
    assert cache.gpus_held("default/t") == chosen
    assert int(cache.gpus.used[slot]) == sum(1 << g for g in chosen)
    # the watch then reports the pod bound with the annotation the Binding carried
    stale["spec"]["nodeName"] = "g"
    stale["metadata"]["annotations"] = {ANNOTATION_GPUS: ",".join(map(str, chosen))}
    cache.add_pod(PodInfo.from_object(stale))
    assert cache.gpus_held("default/t") == chosen
