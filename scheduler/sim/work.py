"""The simulator's work limit: every phase of a policy run counts against one budget.

The budget is in node evaluations (`engine.WORK_LIMIT`, 100,000,000 per policy run; about 1-3 us
each on one core). What each phase is charged, always *before* it runs:

- a scheduling attempt (`Framework.schedule`: one pod, or one member of a pod group placed by
  the group cycle): the live node count plus ATTEMPT_OVERHEAD;
- a filter pass outside an attempt (preemption trying victims on a copy of a node, or placing
  a gang's other members): FILTER_OVERHEAD for its PreFilter plus the nodes it filters;
- a preemption (`Framework.run_post_filter`): the live node count (the candidates it scans)
  plus ATTEMPT_OVERHEAD;
- reading the pending members of a pod group (preemption for a gang, the group cycle): one per
  member;
- reading the nominated pods that hold room against a pod: one per nomination.

The core's cycle catches a plugin's exceptions (a plugin bug must not stop the scheduler), so
the meter, once over the limit, refuses every further charge at once, and the engine re-raises
`WorkLimitError` after the cycle returns (`WorkMeter.check`): the work done past the limit is at
most one filter pass and a few cheap refusals.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from scheduler.core.framework import CycleState, Framework, ScheduleResult
from scheduler.core.model import PodInfo
from scheduler.core.nominator import Nomination, Nominator
from scheduler.core.snapshot import Snapshot

__all__ = [
    "ATTEMPT_OVERHEAD",
    "FILTER_OVERHEAD",
    "MeteredNominator",
    "WorkLimitError",
    "WorkMeter",
    "meter_framework",
]

ATTEMPT_OVERHEAD = 50
"""A scheduling attempt's fixed cost (PreFilter, scoring, the pick), in node evaluations."""
FILTER_OVERHEAD = 10
"""A filter pass's fixed cost (PreFilter and the plugins' set-up), in node evaluations."""

SCHEDULING = "scheduling"
PREEMPTION = "preemption"
GROUPS = "pod groups"
NOMINATIONS = "nominations"


class WorkLimitError(RuntimeError):
    """A run needs more work than the limit; the message says so in one line."""


class WorkMeter:
    """Node evaluations charged by phase against `limit`; raises once past it."""

    def __init__(self, limit: int, describe: Callable[[], str]) -> None:
        self.limit = limit
        self.used = 0
        self.by_phase: Counter[str] = Counter()
        self.error: WorkLimitError | None = None
        self._describe = describe  # where the run is (policy, time, attempts, nodes)

    def charge(self, units: int, phase: str) -> None:
        if self.error is not None:
            raise self.error
        self.used += units
        self.by_phase[phase] += units
        if self.used > self.limit:
            spent = ", ".join(f"{p} {n:,}" for p, n in self.by_phase.most_common())
            self.error = WorkLimitError(
                f"{self._describe()}, the simulator's limit per policy run (spent on {spent}): "
                "fewer jobs waiting at once, smaller pod groups, or fewer nodes"
            )
            raise self.error

    def check(self) -> None:
        """Raise the limit's error if a charge went past it (even where it was caught)."""
        if self.error is not None:
            raise self.error


def meter_framework(fw: Framework, meter: WorkMeter) -> None:
    """Charge this framework's attempts, filter passes and preemptions to `meter` (instance
    attributes over the methods; the decisions are unchanged)."""
    schedule, run_pre_filter = fw.schedule, fw.run_pre_filter
    run_filters, run_post_filter = fw.run_filters, fw.run_post_filter
    inside = [0]  # depth of schedule calls: their own filter pass is part of the attempt

    def metered_schedule(
        pod: PodInfo, snapshot: Snapshot, state: CycleState | None = None
    ) -> ScheduleResult:
        meter.charge(snapshot.live_count + ATTEMPT_OVERHEAD, SCHEDULING)
        inside[0] += 1
        try:
            return schedule(pod, snapshot, state)
        finally:
            inside[0] -= 1

    def metered_pre_filter(state: CycleState, pod: PodInfo, snapshot: Snapshot) -> Any:
        if not inside[0]:
            meter.charge(FILTER_OVERHEAD, PREEMPTION)
        return run_pre_filter(state, pod, snapshot)

    def metered_filters(
        state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: Any
    ) -> Any:
        if not inside[0]:
            meter.charge(int(np.count_nonzero(candidates)), PREEMPTION)
        return run_filters(state, pod, snapshot, candidates)

    def metered_post_filter(
        state: CycleState, pod: PodInfo, snapshot: Snapshot, result: ScheduleResult
    ) -> Any:
        meter.charge(snapshot.live_count + ATTEMPT_OVERHEAD, PREEMPTION)
        return run_post_filter(state, pod, snapshot, result)

    fw.schedule = metered_schedule  # type: ignore[method-assign]
    fw.run_pre_filter = metered_pre_filter  # type: ignore[method-assign]
    fw.run_filters = metered_filters  # type: ignore[method-assign]
    fw.run_post_filter = metered_post_filter  # type: ignore[method-assign]


class MeteredNominator(Nominator):
    """The cycle's nominator; every attempt reads all nominations (charged one each)."""

    def __init__(self, meter: WorkMeter) -> None:
        super().__init__()
        self.meter = meter

    def others(self, pod: PodInfo) -> list[Nomination]:
        if self._by_pod:
            self.meter.charge(len(self._by_pod), NOMINATIONS)
        return super().others(pod)
