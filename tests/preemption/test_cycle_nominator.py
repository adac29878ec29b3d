"""The cycle acts on preemption: victims handed to the front end, lower nominations cleared,
the preemptor nominated, its room held against lower-priority pods until it is placed."""

from __future__ import annotations

from plugins import frameworks_for
from scheduler.core.cache import Cache
from scheduler.core.config import default_config
from scheduler.core.cycle import CycleHooks, Scheduler, drive
from scheduler.core.model import NodeInfo, PodInfo
from scheduler.core.preemption import Plan
from scheduler.core.queue import SchedulingQueue
from scheduler.explain import DryRunBinder
from tests.preemption.helpers import gpu_node, pending, running


class Recorder(CycleHooks):
    def __init__(self) -> None:
        self.plans: list[Plan] = []
        self.nominations: list[tuple[str, str | None]] = []

    def preempt(self, plan: Plan) -> None:
        self.plans.append(plan)

    def nominated(self, pod: PodInfo, node: str | None) -> None:
        self.nominations.append((pod.key, node))


def make() -> tuple[Scheduler, Recorder, Cache]:
    cache = Cache()
    for name in ("a", "b"):
        cache.add_node(NodeInfo.from_object(gpu_node(name)))
    cache.add_pod(PodInfo.from_object(running("sweep", "a", 0, gpus=(0, 1, 2, 3))))
    cache.add_pod(PodInfo.from_object(running("busy", "b", 3000, gpus=tuple(range(8)))))
    cache.add_pod(PodInfo.from_object(running("half", "a", 100, gpus=(4, 5, 6, 7))))
    queue: SchedulingQueue[PodInfo] = SchedulingQueue(lambda: 0.0)
    hooks = Recorder()
    return (
        Scheduler(cache, queue, frameworks_for(default_config()), DryRunBinder(), hooks),
        hooks,
        cache,
    )


def schedule(cycle: Scheduler, obj: dict) -> str | None:  # type: ignore[type-arg]
    pod = PodInfo.from_object(obj)
    cycle.queue.delete(pod.key)  # a retry: straight to the active queue
    cycle.enqueue(pod)
    queued = cycle.queue.pop()
    assert queued is not None and queued.key == pod.key
    decision = cycle.schedule_one(queued)
    if decision.assumed is not None:
        drive(cycle.bind(decision.assumed))
        return decision.assumed.node
    return None


def test_preemptor_is_nominated_and_its_room_held() -> None:
    cycle, hooks, cache = make()
    assert schedule(cycle, pending("big", 1000, {"nvidia.com/gpu": "4"})) is None
    assert [v.pod.key for v in hooks.plans[0].victims] == ["default/sweep"]
    assert hooks.nominations == [("default/big", "a")]
    assert cycle.nominator.get("default/big") is not None
    # the victim goes (the front end deleted it): a lower-priority pod may not take its GPUs
    cache.remove_pod("default/sweep")
    assert schedule(cycle, pending("small", 50, {"nvidia.com/gpu": "2"})) is None
    # the preemptor gets the node and the GPUs freed for it; its nomination ends
    assert schedule(cycle, pending("big", 1000, {"nvidia.com/gpu": "4"})) == "a"
    assert cache.gpus_held("default/big") == (0, 1, 2, 3)
    assert cycle.nominator.get("default/big") is None


def test_higher_preemptor_clears_lower_nomination_on_the_node() -> None:
    cycle, hooks, cache = make()
    assert schedule(cycle, pending("mid", 500, {"nvidia.com/gpu": "4"})) is None
    assert hooks.nominations == [("default/mid", "a")]
    # a higher-priority pod needing the whole node preempts there too: mid's nomination goes
    assert schedule(cycle, pending("top", 2000, {"nvidia.com/gpu": "8"})) is None
    plan = hooks.plans[-1]
    assert plan.node == "a" and [p.key for p in plan.cleared] == ["default/mid"]
    assert hooks.nominations[-2:] == [("default/mid", None), ("default/top", "a")]
    assert cycle.nominator.get("default/mid") is None


def test_a_nomination_read_from_the_api_is_inherited_unless_it_is_this_schedulers_own() -> None:
    """The API reporting back a nomination this scheduler made keeps it its own; one it did
    not make (a former leader's) is inherited, and a hold on the same node takes it over
    without a second status write."""
    cycle, recorder, _ = make()
    obj = pending("p", 0, {"cpu": "1"})
    mine = PodInfo.from_object(obj)
    cycle.hold(mine, "n0")
    obj.setdefault("status", {})["nominatedNodeName"] = "n0"
    cycle.nominator.observe(PodInfo.from_object(obj))
    assert cycle.inherited_nomination(mine) is None
    obj["status"]["nominatedNodeName"] = "n1"
    cycle.nominator.observe(PodInfo.from_object(obj))
    assert cycle.inherited_nomination(mine) == "n1"
    writes = len(recorder.nominations)
    cycle.hold(mine, "n1")
    assert cycle.inherited_nomination(mine) is None
    assert cycle.nominated_node(mine) == "n1"
    assert len(recorder.nominations) == writes
