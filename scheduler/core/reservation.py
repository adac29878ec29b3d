"""Reservations: capacity held for a pod group that does not fit now but would once running
pods end, so that smaller pods of equal or lower priority do not take it as it frees.

A group that does not fit, whose members would fit on nodes whose only shortfall is what
running pods use (`Insufficient ...`, too few free GPUs), gets those nodes held for it: each
member is nominated to one of them (the scheduler's one nominator, as preemption nominates),
so every pod of equal or lower priority counts the member there and places elsewhere, or
waits; pods of higher priority do not see it. The group is placed by its own cycle when the
held nodes (or any others) have the room. When a node has freed enough for a member while
one of the group's own has not, the reservation moves to the nodes that give more of its
members room now (never to fewer), in any domain of the topology levels (a wider one than
it held included, never across the widest), as kube-scheduler's partially placed gang takes
each node that frees first. Reservations are ordered, higher priority first, then the one
made first: a free node held by a reservation later in that order is open to an earlier
one (when a member moved there fits now), and the later reservation is released (made
again on its group's next cycle), so free nodes do not sit idle split among reservations
that each wait for another. A move that gives every member GPU room now sends the group back
to the queue (backoff honoured) rather than leave it for the next cluster event.

The book lives in the leader's memory, the holds in the members' `status.nominatedNodeName`:
a scheduler that finds every member of a group nominated by someone else (a former leader)
adopts those nodes as its own reservation, with a fresh timeout.

Bounds, so no reservation starves the others and none can deadlock:

- a reservation never holds a node another reservation holds, and is made only when its own
  nodes hold the whole group when empty; the first in the order loses no node to another,
  so it completes as its own nodes free whatever the others do, and the next is then first;
  a group that finds every such node held may take over the
  reservation of the lowest priority below its own in its queue (the group's namespace);
- a group holding nodes inside one domain of a topology level is not placed wider than that
  domain while it holds them (it waits for them rather than span spines);
- it expires after `timeout` seconds; the group may not reserve again for as long, so other
  groups get their turn.

(Volcano's reservation design elects one target job, the highest priority waiting longest,
and locks the nodes with the most idle resources until it is placed; this holds nodes for
every waiting group that has disjoint nodes to hold, as kube-scheduler's partial placement
of a gang's workers accumulates GPUs for each gang at once, but all or nothing, with a
timeout.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.core.model import PodInfo

__all__ = ["DEFAULT_TIMEOUT", "MAX_TIMEOUT", "Reservation", "Reservations"]

DEFAULT_TIMEOUT = 0.0
"""Seconds a reservation holds its nodes before it expires; 0: no reservations (the default:
held nodes idle while the rest free, a trade measured in `docs/gang-scheduling.md`)."""
MAX_TIMEOUT = 7 * 86_400.0
"""The longest timeout the configuration accepts (GPUTopology's `gangReservationSeconds`)."""

GroupId = tuple[str, str]


@dataclass(slots=True)
class Reservation:
    """Nodes held for one pod group: each member it holds for and its node."""

    group: GroupId
    name: str  # the group's namespace/name
    queue: str  # the group's namespace
    priority: int
    members: dict[str, tuple[PodInfo, str]]  # pod key -> (pod, node held for it)
    gpus: int  # GPUs the held members request in all
    since: float
    expires: float

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(sorted({node for _, node in self.members.values()}))

    def describe(self, now: float) -> str:
        nodes = self.nodes
        shown = ", ".join(nodes[:4]) + (f" and {len(nodes) - 4} more" if len(nodes) > 4 else "")
        return (
            f"capacity held for it as it frees on {len(nodes)} node(s): {shown} "
            f"(reservation for {len(self.members)} pods, {self.gpus} GPUs, "
            f"expires in {max(0.0, self.expires - now):,.0f}s)"
        )


@dataclass(slots=True)
class Reservations:
    """The reservations of one scheduler, by group, and their counts."""

    timeout: float = DEFAULT_TIMEOUT
    held: dict[GroupId, Reservation] = field(default_factory=dict)
    cooldown: dict[GroupId, float] = field(default_factory=dict)  # group -> may reserve from
    made: int = 0
    fulfilled: int = 0  # the group was placed while it held its reservation
    expired: int = 0
    released: int = 0  # taken over, a free node taken by an earlier one, or the group is gone
    ended_gpu_seconds: float = 0.0  # GPUs held x seconds, reservations that ended

    @property
    def enabled(self) -> bool:
        return self.timeout > 0

    def lowest_below(self, queue: str, priority: int) -> Reservation | None:
        """The queue's reservation of the lowest priority below `priority` (the last made
        among equals), or None."""
        lesser = [r for r in self.held.values() if r.queue == queue and r.priority < priority]
        return min(reversed(lesser), key=lambda r: r.priority, default=None)

    def nodes_held(self, other_than: GroupId | None = None) -> set[str]:
        return {
            node
            for gid, r in self.held.items()
            if gid != other_than
            for _, node in r.members.values()
        }

    def may_reserve(self, group: GroupId, now: float) -> bool:
        until = self.cooldown.get(group)
        if until is not None and now >= until:
            del self.cooldown[group]
            return True
        return until is None

    def add(self, reservation: Reservation) -> None:
        self.held[reservation.group] = reservation
        self.made += 1

    def end(self, group: GroupId, now: float, how: str) -> Reservation | None:
        """End a group's reservation: `fulfilled`, `expired` (the group then waits `timeout`
        before it may reserve again) or `released`."""
        reservation = self.held.pop(group, None)
        if reservation is None:
            return None
        self.ended_gpu_seconds += reservation.gpus * max(0.0, now - reservation.since)
        if how == "fulfilled":
            self.fulfilled += 1
        elif how == "expired":
            self.expired += 1
            self.cooldown[group] = now + self.timeout
        else:
            self.released += 1
        return reservation

    def gpu_seconds(self, now: float) -> float:
        """GPUs held x seconds, over every reservation so far (the live ones until `now`)."""
        live = sum(r.gpus * max(0.0, now - r.since) for r in self.held.values())
        return self.ended_gpu_seconds + live
