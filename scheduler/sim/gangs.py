"""Multi-node jobs in the simulator: when a job starts, what waiting for it cost.

A job of `workers: N` is N pods (an annotation pod group). It makes progress only once all N
run: its clock (`duration`) starts when the last worker is bound, and every worker finishes
then. Until that moment the GPUs of the workers already bound are held idle. A preempted
worker stops the job: the workers still bound lose their run back to the last checkpoint, as
the preempted one does, and hold their GPUs idle until it runs again. Under the gang
policies the group cycle binds all N at one instant; under count-only (kube-scheduler's
one-pod-at-a-time), workers trickle in and a job can sit partially placed, or forever.

Figures (`summary`): gang wait (arrival to all workers running), groups that were ever
partially placed at the end of a scheduling round (must be 0 under gang scheduling), jobs
spanning more than one domain of each network level, and GPU-hours held idle by incomplete
groups.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scheduler.sim.engine import Simulation

__all__ = ["GangTracker"]


@dataclass
class _Gang:
    arrival: float
    workers: int
    gpus: int  # per worker
    bound: dict[str, float] = field(default_factory=dict)  # pod key -> bound at
    nodes: dict[str, str] = field(default_factory=dict)  # pod key -> node
    started: float | None = None  # all workers running (the run under way)
    first_started: float | None = None  # all workers first running (the gang's wait)


class GangTracker:
    """Per multi-node job: its workers' binding times and nodes."""

    def __init__(self) -> None:
        self.gangs: dict[str, _Gang] = {}
        self.partial: set[str] = set()  # ever partially placed after a scheduling round
        self.idle_gpu_seconds = 0.0
        # groups that had a worker bound in this round: only their state can have changed
        # (a round looks at these, not at every group bound so far)
        self._touched: dict[str, None] = {}

    def bound(self, sim: Simulation, key: str, node: str) -> list[str]:
        """A pod was bound: the pods whose run starts now (all workers at the last one)."""
        job = sim.records[key].job
        if job.group is None:
            return [key]
        gang = self.gangs.setdefault(job.group, _Gang(job.arrival, job.workers, job.gpus))
        gang.bound[key] = sim.now
        gang.nodes[key] = node
        self._touched[job.group] = None
        if len(gang.bound) < gang.workers:
            return []
        gang.started = sim.now
        if gang.first_started is None:
            gang.first_started = sim.now
        for at in gang.bound.values():
            self.idle_gpu_seconds += gang.gpus * (sim.now - at)
        return list(gang.bound)

    def stopped(self, sim: Simulation, key: str) -> list[str]:
        """A worker was preempted: the job stops until all its workers run again. The other
        workers still bound, whose run stops too (idle from now)."""
        group = sim.records[key].job.group
        if group is None or group not in self.gangs:
            return []
        gang = self.gangs[group]
        gang.bound.pop(key, None)
        gang.nodes.pop(key, None)
        if gang.started is None:
            return []
        gang.started = None
        self._touched[group] = None
        for other in gang.bound:
            gang.bound[other] = sim.now
        return list(gang.bound)

    def round_done(self) -> None:
        """After a scheduling round: note the groups left partially placed."""
        for name in self._touched:
            gang = self.gangs[name]
            if gang.started is None and 0 < len(gang.bound) < gang.workers:
                self.partial.add(name)
        self._touched.clear()

    def summary(self, sim: Simulation, end: float) -> dict[str, Any] | None:
        groups = {r.job.group for r in sim.records.values() if r.job.group is not None}
        if not groups:
            return None
        idle = self.idle_gpu_seconds
        for gang in self.gangs.values():
            if gang.started is None:  # still incomplete at the end: idle until then
                idle += sum(gang.gpus * (end - at) for at in gang.bound.values())
        waits = sorted(
            g.first_started - g.arrival for g in self.gangs.values() if g.first_started is not None
        )
        spanning: dict[str, int] = {}
        labels = _node_labels(sim)
        for key in sim.scenario.network_levels:
            spanning[key] = sum(
                1
                for g in self.gangs.values()
                if g.first_started is not None
                and len({labels.get(n, {}).get(key) for n in g.nodes.values()}) > 1
            )
        return {
            "jobs": len(groups),
            "started": len(waits),
            "never_started": len(groups) - len(waits),
            "wait_seconds": {
                "mean": round(sum(waits) / len(waits), 3) if waits else None,
                "max": round(waits[-1], 3) if waits else None,
            },
            "partially_placed": len(self.partial),
            "spanning_domains": spanning,
            "idle_gpu_hours": round(idle / 3600, 3),
        }


def _node_labels(sim: Simulation) -> Mapping[str, Mapping[str, str]]:
    snapshot = sim.cache.snapshot
    return {info.name: info.labels for info in snapshot.nodes if info is not None}
