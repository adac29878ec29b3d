"""Reservations: capacity held for a pod group that would fit once running pods end."""

from __future__ import annotations

from typing import Any

from core_support import node_info, pod
from test_core_group import RACK, SPINE, Cluster, gpu_node, labels_of, member, racks

from scheduler.assembly import assemble
from scheduler.core.cache import Cache
from scheduler.core.config import SchedulerConfiguration, default_config, load_config
from scheduler.core.model import NodeInfo, PodInfo
from scheduler.core.queue import ClusterEvent, Where
from scheduler.core.reservation import DEFAULT_TIMEOUT
from scheduler.explain.dryrun import DryRunBinder

HOLD = 3600.0  # seconds a reservation holds its nodes in these tests


def running(
    name: str, node: str, gpus: int, namespace: str = "default", priority: int = 0
) -> PodInfo:
    obj = pod(
        name,
        {"cpu": "1", "nvidia.com/gpu": str(gpus)},
        namespace=namespace,
        node_name=node,
        phase="Running",
    )
    if priority:
        obj["spec"]["priority"] = priority
    return PodInfo.from_object(obj)


def small(name: str, gpus: int = 2, priority: int = 0, namespace: str = "ml") -> dict[str, Any]:
    obj = pod(name, {"cpu": "1", "nvidia.com/gpu": str(gpus)}, namespace=namespace)
    if priority:
        obj["spec"]["priority"] = priority
    return obj


def held_cluster(nodes: list[dict[str, Any]]) -> Cluster:
    c = Cluster(nodes)
    assert c.sched.groups is not None
    c.sched.groups.reservations.timeout = HOLD
    return c


def busy_cluster() -> tuple[Cluster, list[PodInfo]]:
    """Two 8-GPU nodes, each half used; a third full."""
    c = held_cluster([gpu_node("n0"), gpu_node("n1"), gpu_node("n2")])
    pods = [running("r0", "n0", 4), running("r1", "n1", 4), running("r2", "n2", 8)]
    for p in pods:
        c.cache.add_pod(p)
    return c, pods


def test_a_group_that_would_fit_once_pods_end_holds_the_freest_nodes() -> None:
    c, running_pods = busy_cluster()
    c.add(member("w0", min_member=2), member("w1", min_member=2))
    c.run()
    assert c.bound == {}
    groups = c.sched.groups
    assert groups is not None
    held = groups.reservations.held[("annotation", "ml/llama")]
    assert held.nodes == ("n0", "n1")  # the most free GPUs now
    assert held.gpus == 16
    message = c.events.failures[-1][1]
    assert "capacity held for it as it frees on 2 node(s): n0, n1" in message
    assert c.outcomes[-1].reservation is held
    # a smaller pod of equal priority does not take the held room
    c.add(small("s0"))
    c.run()
    assert "ml/s0" not in c.bound
    # one of higher priority does
    c.add(small("s1", priority=100))
    c.run()
    assert c.bound["ml/s1"] in ("n0", "n1")
    c.cache.remove_pod("ml/s1")
    # the running pods end: the group is placed on the held nodes and the hold ends
    c.cache.remove_pod(running_pods[0].key)
    c.cache.remove_pod(running_pods[1].key)
    c.now = 60.0  # past the backoff
    c.queue.move_all(ClusterEvent.POD_DELETE)
    c.run()
    assert c.nodes_of("ml/w0", "ml/w1") == {"n0", "n1"}
    assert groups.reservations.held == {}
    assert groups.reservations.fulfilled == 1
    assert c.sched.nominator.get("ml/w0") is None


def test_a_pod_that_fits_elsewhere_still_goes() -> None:
    c, _ = busy_cluster()
    c.add(member("w0", min_member=2), member("w1", min_member=2))
    c.run()
    c.cache.add_node(node_info("n3", cpu="64", memory="512Gi", extra={"nvidia.com/gpu": "8"}))
    c.add(small("s0"))
    c.run()
    assert c.bound["ml/s0"] == "n3"


def test_a_reservation_expires_and_the_group_waits_its_turn() -> None:
    c, _ = busy_cluster()
    groups = c.sched.groups
    assert groups is not None
    groups.reservations.timeout = 600.0
    c.add(member("w0", min_member=2), member("w1", min_member=2))
    c.run()
    assert groups.reservations.made == 1
    c.now = 700.0
    c.queue.flush()
    c.queue.move_all(ClusterEvent.POD_DELETE)
    c.run()
    assert groups.reservations.expired == 1
    assert groups.reservations.held == {}
    assert c.sched.nominator.get("ml/w0") is None
    c.add(small("s0"))
    c.run()
    assert "ml/s0" in c.bound  # nothing held any more
    assert "capacity held" not in c.events.failures[-1][1]


def test_a_reservation_moves_to_a_node_that_freed_sooner_than_its_own() -> None:
    """Held n0 and n1 stay busy; n2's pod ends first: the member held on the least free
    of its nodes moves to n2, and the group starts once n0 frees, without waiting for
    n1."""
    c = held_cluster([gpu_node("n0"), gpu_node("n1"), gpu_node("n2")])
    busy = [running("r0", "n0", 4), running("r1", "n1", 6), running("r2", "n2", 8)]
    for p in busy:
        c.cache.add_pod(p)
    c.add(member("w0", min_member=2), member("w1", min_member=2))
    c.run()
    groups = c.sched.groups
    assert groups is not None
    held = groups.reservations.held[("annotation", "ml/llama")]
    assert held.nodes == ("n0", "n1")
    # two GPUs free on n2: more than on n1, yet no member fits there now: it stays
    c.cache.remove_pod(busy[2].key)
    c.cache.add_pod(running("r2b", "n2", 6))
    c.now = 60.0
    c.queue.move_all(ClusterEvent.POD_DELETE)
    c.run()
    assert groups.reservations.held[("annotation", "ml/llama")].nodes == ("n0", "n1")
    # n2 empties: a member fits there now, it moves and n1 is no longer held
    c.cache.remove_pod("default/r2b")
    c.now = 120.0
    c.queue.move_all(ClusterEvent.POD_DELETE)
    c.run()
    assert "ml/w0" not in c.bound  # n0 still busy
    assert groups.reservations.held[("annotation", "ml/llama")].nodes == ("n0", "n2")
    assert {n.node for n in c.sched.nominator.on_node("n1")} == set()
    c.add(small("s0", gpus=2))
    c.run()
    assert c.bound["ml/s0"] == "n1"  # n1 is free for others again
    c.cache.remove_pod(busy[0].key)
    c.now = 180.0
    c.queue.move_all(ClusterEvent.POD_DELETE)
    c.run()
    assert c.nodes_of("ml/w0", "ml/w1") == {"n0", "n2"}
    assert groups.reservations.fulfilled == 1


def four_busy_nodes(levels: tuple[str, ...] = ()) -> Cluster:
    """Four 8-GPU nodes with 2 GPUs used on each by pods no group here may preempt (racks
    of two under two spines)."""
    c = Cluster(racks([2, 2], spines=2), levels=levels)
    assert c.sched.groups is not None
    c.sched.groups.reservations.timeout = HOLD
    for name in ("r0n0", "r0n1", "r1n0", "r1n1"):
        c.cache.add_pod(running(f"run-{name}", name, 2, priority=1000))
    return c


def test_reservations_never_share_a_node() -> None:
    c = four_busy_nodes()
    c.add(member("a0", "a", 2), member("a1", "a", 2))
    c.add(member("b0", "b", 2), member("b1", "b", 2))
    c.add(member("c0", "c", 2, namespace="dev"), member("c1", "c", 2, namespace="dev"))
    c.run()
    groups = c.sched.groups
    assert groups is not None
    held = groups.reservations.held
    # two groups of one queue each hold two nodes; no node is left for the third
    assert set(held) == {("annotation", "ml/a"), ("annotation", "ml/b")}
    assert set(held[("annotation", "ml/a")].nodes).isdisjoint(held[("annotation", "ml/b")].nodes)
    assert "capacity held" not in c.events.failures[-1][1]


def test_a_node_that_frees_goes_to_the_reservation_made_first() -> None:
    """Two groups each hold two busy nodes. A node of the first frees: the second does not
    take it. A node of the second frees: the first takes it (the second is released and
    holds other nodes on its next cycle), and is placed once its own node frees as well."""
    c = four_busy_nodes()
    c.add(member("a0", "a", 2), member("a1", "a", 2))
    c.run()
    c.add(member("b0", "b", 2), member("b1", "b", 2))
    c.run()
    groups = c.sched.groups
    assert groups is not None
    book = groups.reservations
    first, second = ("annotation", "ml/a"), ("annotation", "ml/b")
    a_nodes, b_nodes = book.held[first].nodes, book.held[second].nodes

    def free(node: str, at: float) -> None:
        c.cache.remove_pod(f"default/run-{node}")
        c.now = at
        c.queue.move_all(ClusterEvent.POD_DELETE)
        c.run()

    free(a_nodes[0], 60.0)
    assert book.held[second].nodes == b_nodes  # not the first's free node
    assert book.held[first].nodes == a_nodes
    free(b_nodes[0], 120.0)
    assert b_nodes[0] in book.held[first].nodes
    assert book.released == 1
    b0 = c.sched.nominator.get("ml/b0")
    assert b0 is None or b0.node not in book.held[first].nodes
    assert c.queue.where("ml/b0") is Where.UNSCHEDULABLE  # released: waits for an event
    c.now = 180.0
    assert c.queue.where("ml/a0") is Where.BACKOFF  # the move sent it back, no event needed
    c.queue.flush()
    c.run()
    assert c.nodes_of("ml/a0", "ml/a1") == {a_nodes[0], b_nodes[0]}
    assert book.fulfilled == 1
    assert "ml/b0" not in c.bound
    if second in book.held:  # held again, on nodes the first did not take
        assert not set(book.held[second].nodes) & {a_nodes[0], b_nodes[0]}


def two_reservations(first: list[dict[str, Any]], nodes: int) -> tuple[Cluster, Any]:
    """`nodes` 8-GPU nodes, each full with a pod no group may preempt; the group `first`
    reserves, then a group of two 8-GPU members."""
    c = held_cluster([gpu_node(f"n{i}") for i in range(nodes)])
    for i in range(nodes):
        c.cache.add_pod(running(f"run{i}", f"n{i}", 8, priority=1000))
    c.add(*first)
    c.run()
    c.add(member("b0", "b", 2), member("b1", "b", 2))
    c.run()
    groups = c.sched.groups
    assert groups is not None
    return c, groups.reservations


def free_up(c: Cluster, node: str, left: int = 0) -> None:
    """The pod on `node` ends; a smaller one (`left` GPUs) takes its place."""
    c.cache.remove_pod(f"default/run{node[1:]}")
    if left:
        c.cache.add_pod(running(f"run{node[1:]}b", node, left, priority=1000))


def test_a_later_reservation_keeps_a_node_where_no_member_would_fit_now() -> None:
    """The first group (8 + 8 + 4 GPUs) holds n0-n2, the second (8 + 8) n3 and n4. n5 frees
    and n3 half frees: the first moves an 8-GPU member to n5; the next, 8 GPUs, would have no
    room on n3 now, so the second keeps n3 rather than be released for nothing."""
    first = [member("a0", "a", 3), member("a1", "a", 3), member("a2", "a", 3, gpus=4)]
    c, book = two_reservations(first, 6)
    a, b = ("annotation", "ml/a"), ("annotation", "ml/b")
    assert (book.held[a].nodes, book.held[b].nodes) == (("n0", "n1", "n2"), ("n3", "n4"))
    free_up(c, "n5")
    free_up(c, "n3", left=4)
    c.now = 60.0
    c.queue.move_all(ClusterEvent.POD_DELETE)
    c.run()
    assert "n5" in book.held[a].nodes
    assert "n3" not in book.held[a].nodes
    assert book.held[b].nodes == ("n3", "n4")
    assert book.released == 0


def test_a_moving_reservation_places_its_largest_members_first() -> None:
    """The first group (4 + 8 GPUs, the smaller listed first) holds n0 and n1, the second
    n2 and n3. n4 frees and n2 half frees: the 8-GPU member goes to n4 and the 4-GPU one to
    n2, where it has room now; the second is released, and the first, with room for all its
    members, goes back to the queue at once and is placed without a cluster event."""
    c, book = two_reservations([member("a0", "a", 2, gpus=4), member("a1", "a", 2)], 5)
    a = ("annotation", "ml/a")
    assert book.held[a].nodes == ("n0", "n1")
    free_up(c, "n4")
    free_up(c, "n2", left=4)
    c.now = 60.0
    c.queue.move_all(ClusterEvent.POD_DELETE)
    c.run()
    assert book.held[a].nodes == ("n2", "n4")
    assert book.released == 1
    assert c.queue.where("ml/a0") is Where.BACKOFF
    assert c.queue.where("ml/b0") is Where.UNSCHEDULABLE  # released: waits for an event
    c.now = 120.0
    c.queue.flush()
    c.run()
    assert (c.bound["ml/a0"], c.bound["ml/a1"]) == ("n2", "n4")


def test_a_group_of_higher_priority_takes_over_the_lesser_reservation_of_its_queue() -> None:
    c = four_busy_nodes()
    c.add(member("a0", "a", 2), member("a1", "a", 2))
    c.add(member("b0", "b", 2), member("b1", "b", 2))
    c.run()
    urgent = [member(f"h{i}", "h", 2) for i in range(2)]
    for obj in urgent:
        obj["spec"]["priority"] = 100
    c.add(*urgent)
    c.run()
    groups = c.sched.groups
    assert groups is not None
    assert set(groups.reservations.held) == {("annotation", "ml/a"), ("annotation", "ml/h")}
    assert groups.reservations.released == 1
    assert c.sched.nominator.get("ml/b0") is None


def test_a_group_holding_nodes_in_one_spine_waits_for_them_rather_than_span_spines() -> None:
    c = four_busy_nodes(levels=(SPINE, RACK))
    c.add(member("w0", min_member=2), member("w1", min_member=2))
    c.run()
    groups = c.sched.groups
    assert groups is not None
    held = groups.reservations.held[("annotation", "ml/llama")]
    racks_held = {n[:2] for n in held.nodes}  # r0n1 -> r0: its rack
    assert len(racks_held) == 1
    (rack,) = racks_held
    inside = list(held.nodes)
    outside = [n for n in ("r0n0", "r0n1", "r1n0", "r1n1") if n not in inside]
    # one held node and one node of the other spine free up: the two would hold the group
    c.cache.remove_pod(f"default/run-{inside[0]}")
    c.cache.remove_pod(f"default/run-{outside[0]}")
    c.now = 60.0
    c.queue.move_all(ClusterEvent.POD_DELETE)
    c.run()
    assert c.bound == {}
    assert "rather than span wider" in c.events.failures[-1][1]
    # the other held node frees: the group goes to its rack
    c.cache.remove_pod(f"default/run-{inside[1]}")
    c.now = 200.0
    c.queue.move_all(ClusterEvent.POD_DELETE)
    c.run()
    assert {labels_of(c, k, RACK) for k in c.bound} == {f"rack{rack[1]}"}
    assert groups.reservations.fulfilled == 1


def test_a_reservation_widens_within_its_spine_to_nodes_that_freed() -> None:
    """Racks of two nodes in one spine: the group holds its rack; one node of it and one of
    the other rack free. The reservation moves to the two free nodes (its spine holds them)
    and the group is placed there rather than wait for its rack."""
    c = Cluster(racks([2, 2], spines=1), levels=(SPINE, RACK))
    assert c.sched.groups is not None
    c.sched.groups.reservations.timeout = HOLD
    for name in ("r0n0", "r0n1", "r1n0", "r1n1"):
        c.cache.add_pod(running(f"run-{name}", name, 2, priority=1000))
    c.add(member("w0", min_member=2), member("w1", min_member=2))
    c.run()
    book = c.sched.groups.reservations
    held = book.held[("annotation", "ml/llama")].nodes
    assert {n[:2] for n in held} in ({"r0"}, {"r1"})  # one rack
    other = next(n for n in ("r0n0", "r1n0") if n[:2] != held[0][:2])
    c.cache.remove_pod(f"default/run-{held[0]}")
    c.cache.remove_pod(f"default/run-{other}")
    for at in (60.0, 120.0):
        c.now = at
        c.queue.move_all(ClusterEvent.POD_DELETE)
        c.run()
    assert c.nodes_of("ml/w0", "ml/w1") == {held[0], other}
    assert book.fulfilled == 1


def test_no_reservation_for_a_group_no_freeing_can_hold() -> None:
    c, _ = busy_cluster()
    c.add(*(member(f"w{i}", min_member=4) for i in range(4)))  # four 8-GPU pods, three nodes
    c.run()
    groups = c.sched.groups
    assert groups is not None
    assert groups.reservations.made == 0
    assert "capacity held" not in c.events.failures[-1][1]


def test_reservations_off_by_default() -> None:
    assert DEFAULT_TIMEOUT == 0.0
    c = Cluster([gpu_node("n0"), gpu_node("n1"), gpu_node("n2")])
    for p in (running("r0", "n0", 4), running("r1", "n1", 4)):
        c.cache.add_pod(p)
    assert c.sched.groups is not None
    c.add(member("w0", min_member=2), member("w1", min_member=2))
    c.run()
    assert c.sched.groups.reservations.made == 0


def configured(seconds: float) -> SchedulerConfiguration:
    args = {"gangReservationSeconds": seconds}
    return load_config({"profiles": [{"pluginConfig": [{"name": "GPUTopology", "args": args}]}]})


def assembled_reservations(
    config: SchedulerConfiguration, timeout: float | None = None
) -> tuple[float, int]:
    """The assembled group cycle's timeout, and the reservations it made for a group that
    fits once the running pods end (the busy cluster's)."""
    cache = Cache()
    for name in ("n0", "n1", "n2"):
        cache.add_node(NodeInfo.from_object(gpu_node(name)))
    for p in (running("r0", "n0", 4), running("r1", "n1", 4), running("r2", "n2", 8)):
        cache.add_pod(p)
    parts = assemble(
        config, DryRunBinder(), clock=lambda: 0.0, cache=cache, reservation_timeout=timeout
    )
    for obj in (member("w0", min_member=2), member("w1", min_member=2)):
        parts.cycle.enqueue(PodInfo.from_object(obj))
    while (qp := parts.queue.pop()) is not None:
        parts.cycle.schedule(qp)
    assert parts.groups is not None
    book = parts.groups.reservations
    return book.timeout, book.made


def test_assemble_gives_the_group_cycle_the_configured_reservation_timeout() -> None:
    assert assembled_reservations(configured(1800)) == (1800.0, 1)
    assert assembled_reservations(default_config()) == (0.0, 0)  # off by default
    assert assembled_reservations(configured(0)) == (0.0, 0)
    # an explicit timeout (the simulator's --gang-reservation) wins over the configuration
    assert assembled_reservations(configured(1800), timeout=0.0) == (0.0, 0)
    assert assembled_reservations(default_config(), timeout=600.0) == (600.0, 1)


def test_nominations_a_former_leader_left_become_this_schedulers_reservation() -> None:
    """A new leader finds a group's members nominated (`status.nominatedNodeName`) by the
    former leader's reservation: it holds those very nodes as its own reservation, which
    expires as any and clears them, rather than leave them held with no end."""
    c, _ = busy_cluster()
    groups = c.sched.groups
    assert groups is not None
    book = groups.reservations
    book.timeout = 600.0
    workers = [member("w0", min_member=2), member("w1", min_member=2)]
    for obj, node in zip(workers, ("n1", "n2"), strict=True):  # not the freest pair
        obj.setdefault("status", {})["nominatedNodeName"] = node
    c.add(*workers)
    c.run()
    held = book.held[("annotation", "ml/llama")]
    assert {key: node for key, (_, node) in held.members.items()} == {
        "ml/w0": "n1",
        "ml/w1": "n2",
    }
    assert book.made == 1
    assert "capacity held for it as it frees on 2 node(s): n1, n2" in c.events.failures[-1][1]
    w0 = c.sched.nominator.get("ml/w0")
    assert w0 is not None and not w0.inherited  # this scheduler's own from now on
    c.now = 700.0
    c.queue.flush()
    c.queue.move_all(ClusterEvent.POD_DELETE)
    c.run()
    assert book.expired == 1
    assert c.sched.nominator.get("ml/w0") is None
    assert c.sched.nominator.get("ml/w1") is None
