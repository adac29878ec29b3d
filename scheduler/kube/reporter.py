"""What the in-cluster scheduler tells the cluster: Events, conditions and PodGroup status.

`Reporter` turns what the scheduling cycle reports (`CycleHooks`, dispatched by
`KubeScheduler`) into kube-scheduler's outputs: a `Scheduled` Event per bound pod, a
`FailedScheduling` Event and `PodScheduled=False` (patched only when reason or message
change) per failed attempt, preemption's victims marked, deleted and told (`Preempted`), the
preemptor's `status.nominatedNodeName`, the scheduling metrics and one log line per decision.

`PodGroupStatus` writes a PodGroup's status after each group cycle when it changed (see
`groups.py` for what each PodGroup API gets), retrying a failed write with the queue's backoff.

Both receive the narrow `AdapterHost` (client, background tasks, backoff), the Event
recorder, the metrics and the objects last seen by the watches; never the scheduler.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import structlog

from scheduler.core.cache import Cache
from scheduler.core.cycle import Assumed
from scheduler.core.framework import BindOutcome, BindResult, ScheduleResult
from scheduler.core.group import GroupOutcome
from scheduler.core.model import SOURCE_SCHEDULER_PLUGINS, PodInfo
from scheduler.core.preemption import Plan
from scheduler.core.snapshot import Snapshot
from scheduler.core.topology.schema import format_gpu_indices
from scheduler.kube.client import MERGE_PATCH, STRATEGIC_PATCH, ApiError
from scheduler.kube.events import EventRecorder, ObjectRef, rfc3339
from scheduler.kube.host import AdapterHost
from scheduler.kube.informer import Reflector
from scheduler.kube.metrics import Metrics
from scheduler.kube.ratelimit import Priority

Obj = dict[str, Any]
log = structlog.get_logger("topo_scheduler")

CONDITION_SCHEDULED = "PodGroupInitiallyScheduled"


def pod_ref(pod: PodInfo) -> ObjectRef:
    return ObjectRef("Pod", pod.namespace, pod.name, pod.uid)


class Reporter:
    """Events, the PodScheduled condition, preemption's writes, metrics and decision logs."""

    def __init__(
        self,
        host: AdapterHost,
        recorder: EventRecorder,
        metrics: Metrics,
        *,
        pods: Mapping[str, Obj],
        cache: Cache,
    ) -> None:
        self.host = host
        self.recorder = recorder
        self.metrics = metrics
        self.pods = pods  # the pods watch's last copy of each pod
        self.cache = cache
        # pod key -> the PodScheduled=False condition we set: (reason, message, transition time)
        self.conditions: dict[str, tuple[str, str, str]] = {}
        # pod key -> its decision, logged with the binding's outcome (one line per pod)
        self.decisions: dict[str, dict[str, Any]] = {}
        self.scheduled = 0

    # -- the cycle's outcomes -------------------------------------------------------------

    def failed(
        self,
        pod: PodInfo,
        profile: str,
        message: str,
        elapsed: float,
        error: Exception | None = None,
    ) -> None:
        self.metrics.schedule_attempts.labels("error", profile).inc()
        self.metrics.attempt_duration.labels("error", profile).observe(elapsed)
        log.error("scheduling error", pod=pod.key, error=message, exc_info=error)
        # visible like kube's: a FailedScheduling Event, PodScheduled=False SchedulerError
        self.report_failure(pod, "SchedulerError", message)

    def assumed(self, pod: PodInfo, result: ScheduleResult, attempts: int, elapsed: float) -> None:
        self.metrics.algorithm_duration.observe(elapsed)
        if result.allocation is not None and result.allocation.score is not None:
            self.metrics.gpu_set_quality.observe(result.allocation.score)
        if log.is_enabled_for(logging.INFO):  # the top scores cost a sort: only when logged
            self.decisions[pod.key] = {
                "pod": pod.key,
                "node": result.node,
                "gpus": format_gpu_indices(result.gpus) if result.gpus else None,
                "gpu_set_score": result.allocation.score if result.allocation else None,
                "top_scores": _top_scores(result, self.cache.snapshot),
                "attempts": attempts,
                "duration_ms": round(elapsed * 1000, 3),
            }

    def bound(self, assumed: Assumed, bind_seconds: float, waited: float | None) -> None:
        """The binding succeeded; `waited`: seconds since the pod was first seen pending."""
        pod, node, gpus = assumed.pod, assumed.node, assumed.gpus
        key = pod.key
        self.scheduled += 1
        total = time.perf_counter() - assumed.started
        profile = assumed.framework.profile
        # as kube: an attempt counts as scheduled once its binding succeeded
        self.metrics.schedule_attempts.labels("scheduled", profile).inc()
        self.metrics.attempt_duration.labels("scheduled", profile).observe(total)
        attempts = max(assumed.attempts, 1)
        self.metrics.pod_attempts.observe(attempts)
        if waited is not None:
            label = "15+" if attempts >= 15 else str(attempts)  # kube's getAttemptsLabel
            self.metrics.e2e_duration.labels(label).observe(waited)
        self.conditions.pop(key, None)
        note = f"Successfully assigned {key} to {node}"
        if gpus:
            note += f" with GPUs {format_gpu_indices(gpus)}"
        self.recorder.record(pod_ref(pod), "Normal", "Scheduled", "Binding", note)
        # one line per decision, once its binding succeeded (kube: "Successfully bound pod")
        decision = self.decisions.pop(key, None) or {"pod": key, "node": node}
        log.info("pod scheduled", **decision, binding_ms=round(bind_seconds * 1000, 3))

    def unbound(self, assumed: Assumed, result: BindResult, ours: bool) -> None:
        """The binding did not happen; `ours`: the pod still names one of our profiles."""
        pod = assumed.pod
        self.decisions.pop(pod.key, None)
        if result.outcome is not BindOutcome.ABORTED:  # kube: a binding cycle error
            profile = assumed.framework.profile
            total = time.perf_counter() - assumed.started
            self.metrics.schedule_attempts.labels("error", profile).inc()
            self.metrics.attempt_duration.labels("error", profile).observe(total)
        failed = result.outcome in (BindOutcome.ERROR, BindOutcome.CONFLICT)
        if failed and ours:
            # kube: a FailedScheduling Event and PodScheduled=False, reason SchedulerError
            self.report_failure(pod, "SchedulerError", f"Binding rejected: {result.message}")

    def unschedulable(self, pod: PodInfo, profile: str, message: str, elapsed: float) -> None:
        self.metrics.algorithm_duration.observe(elapsed)
        self.metrics.schedule_attempts.labels("unschedulable", profile).inc()
        self.metrics.attempt_duration.labels("unschedulable", profile).observe(elapsed)
        log.info(
            "pod unschedulable",
            pod=pod.key,
            message=message,
            duration_ms=round(elapsed * 1000, 3),
        )
        self.report_failure(pod, "Unschedulable", message)

    # -- pods the watches could not read --------------------------------------------------

    def unreadable_pending(self, obj: Obj, error: str) -> None:
        """One of our pending pods cannot be read: a FailedScheduling Event with the error."""
        md = obj.get("metadata") or {}
        ref = ObjectRef(
            "Pod", str(md.get("namespace")), str(md.get("name")), str(md.get("uid") or "")
        )
        self.recorder.record(ref, "Warning", "FailedScheduling", "Scheduling", error)

    def unreadable_bound(self, pod: PodInfo) -> None:
        """One of our bound pods is counted without the parts that cannot be read."""
        left_out = "; ".join(pod.unreadable)
        note = f"Counted on {pod.node_name} with what can be read, without: {left_out}"
        self.recorder.record(pod_ref(pod), "Warning", "Unreadable", "Scheduling", note)

    def forget(self, namespace: str, name: str) -> None:
        """The pod is gone."""
        key = f"{namespace}/{name}"
        self.conditions.pop(key, None)
        self.decisions.pop(key, None)
        self.recorder.forget(namespace, name)

    # -- FailedScheduling and PodScheduled=False ------------------------------------------

    def report_failure(self, pod: PodInfo, reason: str, message: str) -> None:
        """A FailedScheduling Warning Event and PodScheduled=False (patched when it changes)."""
        obj = self.pods.get(pod.key)
        if obj is not None and (obj.get("spec") or {}).get("nodeName"):
            return  # bound meanwhile (e.g. a binding that timed out but went through)
        self.recorder.record(pod_ref(pod), "Warning", "FailedScheduling", "Scheduling", message)
        prev = self.conditions.get(pod.key)
        if prev is not None and prev[:2] == (reason, message):
            return
        # kube changes lastTransitionTime only when the status changes: while it stays False
        # (another reason or message), the time it became False is kept
        since = prev[2] if prev is not None else self._false_since(pod)
        if since is None:
            since = rfc3339()
        self.conditions[pod.key] = (reason, message, since)
        self.host.spawn(self._set_condition(pod, reason, message, since))

    def _false_since(self, pod: PodInfo) -> str | None:
        """lastTransitionTime of the pod's PodScheduled condition when it is already False."""
        obj = self.pods.get(pod.key)
        if obj is None or (obj.get("metadata") or {}).get("uid") != pod.uid:
            return None
        for cond in (obj.get("status") or {}).get("conditions") or []:
            if isinstance(cond, dict) and cond.get("type") == "PodScheduled":
                since = cond.get("lastTransitionTime")
                if cond.get("status") == "False" and isinstance(since, str) and since:
                    return since
        return None

    async def _set_condition(self, pod: PodInfo, reason: str, message: str, since: str) -> None:
        """PodScheduled=False with `reason` (Unschedulable, SchedulerError), as kube sets it."""
        body = {
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": reason,
                        "message": message,
                        "lastProbeTime": None,
                        "lastTransitionTime": since,
                    }
                ]
            }
        }
        try:
            await self.host.client.patch(
                f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status",
                body,
                STRATEGIC_PATCH,
                priority=Priority.STATUS,  # after every waiting binding
            )
        except ApiError as exc:
            if exc.status != 404:
                log.warning("pod condition not updated", pod=pod.key, error=str(exc))
            self.conditions.pop(pod.key, None)

    # -- preemption -----------------------------------------------------------------------

    def preempt(self, plan: Plan) -> None:
        """kube's prepareCandidate: each victim gets the DisruptionTarget condition, is
        deleted with its grace period, and a `Preempted` event names the preemptor."""
        log.info(
            "preempting",
            pod=plan.preemptor.key,
            node=plan.node,
            victims=[v.pod.key for v in plan.victims],
            pdb_violations=plan.pdb_violations,
        )
        self.metrics.preemption_victims.observe(len(plan.victims))
        self.host.spawn(self._evict(plan))

    def nominated(self, pod: PodInfo, node: str | None) -> None:
        """`status.nominatedNodeName` set (or cleared, None) as kube patches it."""
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status"
        self.host.spawn(self._patch_quietly(pod, path, {"status": {"nominatedNodeName": node}}))

    async def _patch_quietly(self, pod: PodInfo, path: str, body: Obj) -> bool:
        try:
            await self.host.client.patch(path, body, STRATEGIC_PATCH)
        except ApiError as exc:
            if exc.status != 404:
                log.warning("pod status not updated", pod=pod.key, error=str(exc))
            return False
        return True

    async def _evict(self, plan: Plan) -> None:
        preemptor = plan.preemptor
        for victim in plan.victims:
            pod = victim.pod
            if pod.deletion_timestamp is not None:
                continue  # graceful deletion already started: no second call (kube's)
            base = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}"
            condition = {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "PreemptionByScheduler",
                "message": f"{preemptor.scheduler_name}: preempting to accommodate a higher "
                "priority pod",
                "lastTransitionTime": rfc3339(),
            }
            if not await self._patch_quietly(
                pod, f"{base}/status", {"status": {"conditions": [condition]}}
            ):
                continue
            try:
                await self.host.client.delete(base)
            except ApiError as exc:
                if exc.status != 404:
                    log.warning("victim not deleted", pod=pod.key, error=str(exc))
                continue
            self.recorder.record(
                pod_ref(pod),
                "Normal",
                "Preempted",
                "Preempting",
                f"Preempted by pod {preemptor.uid or preemptor.key} on node {victim.node}",
            )


def _top_scores(result: ScheduleResult, snapshot: Snapshot, n: int = 3) -> dict[str, int]:
    totals = result.totals
    if totals.size == 0:
        return {}
    feasible = np.flatnonzero(result.feasible[: totals.size])
    if feasible.size == 0:
        return {}
    best = feasible[np.argsort(-totals[feasible], kind="stable")[:n]]
    return {str(snapshot.names[int(i)]): int(totals[int(i)]) for i in best}


class PodGroupStatus:
    """PodGroup status writes: after each group cycle when it changed, and the condition of
    a PodGroup that cannot be read (or can again).

    `reflectors` holds, by source, the watch of each served PodGroup kind (`KubeGroups`
    fills it as discovery finds them): where to write, and the object last seen.
    """

    def __init__(self, host: AdapterHost) -> None:
        self.host = host
        self.reflectors: dict[str, Reflector] = {}
        self.written: dict[tuple[str, str], tuple[Any, ...]] = {}

    def forget(self, gid: tuple[str, str]) -> None:
        """The PodGroup is gone."""
        self.written.pop(gid, None)

    def outcome(self, outcome: GroupOutcome) -> None:
        """After a group cycle: write the PodGroup's status when it changed."""
        spec = outcome.spec
        if outcome.timed_out:
            log.warning(
                "pod group past its scheduleTimeoutSeconds",
                group=spec.key,
                timeout=spec.timeout,
                message=outcome.message,
            )
        reflector = self.reflectors.get(spec.source)
        if reflector is None:
            return
        obj = reflector.known.get(spec.key)
        if obj is None:
            return
        if spec.source == SOURCE_SCHEDULER_PLUGINS:
            body = self._scheduler_plugins_status(outcome, obj)
        else:
            body = self._kubernetes_status(outcome, obj)
        if body is not None:
            self.write(spec.source, spec.namespace, spec.name, spec.id, body)

    def write(
        self, source: str, namespace: str, name: str, gid: tuple[str, str], body: Obj
    ) -> None:
        reflector = self.reflectors.get(source)
        if reflector is None:
            return
        api = reflector.path.removesuffix("/podgroups")  # the kind's /apis/GROUP/VERSION
        path = f"{api}/namespaces/{namespace}/podgroups/{name}/status"
        self.host.spawn(self._patch(path, body, gid, self.written.get(gid)))

    def _changed(self, gid: tuple[str, str], state: tuple[Any, ...]) -> bool:
        if self.written.get(gid) == state:
            return False
        self.written[gid] = state
        return True

    def _scheduler_plugins_status(self, outcome: GroupOutcome, obj: Obj) -> Obj | None:
        status = obj.get("status") or {}
        placed = sum(1 for node, _ in outcome.members.values() if node)
        if outcome.scheduled:
            phase = "Scheduled"
        elif outcome.waiting:
            phase = "Pending"
        else:
            phase = "Scheduling"
        started = phase != "Scheduling" or status.get("scheduleStartTime")
        if status.get("phase") == phase and status.get("scheduled") == placed and started:
            self.written[outcome.spec.id] = (phase, placed)  # already so (e.g. a restart)
            return None
        if not self._changed(outcome.spec.id, (phase, placed)):
            return None
        body: Obj = {"phase": phase, "scheduled": placed}
        if phase == "Scheduling" and not status.get("scheduleStartTime"):
            body["scheduleStartTime"] = rfc3339()
        return {"status": body}

    def _kubernetes_status(self, outcome: GroupOutcome, obj: Obj) -> Obj | None:
        if outcome.waiting:
            return None
        reason = "Scheduled" if outcome.scheduled else "Unschedulable"
        message = outcome.message or f"{len(outcome.members)} pods placed"
        return self.condition(outcome.spec.id, obj, outcome.scheduled, reason, message)

    def condition(
        self, gid: tuple[str, str], obj: Obj, scheduled: bool, reason: str, message: str
    ) -> Obj | None:
        """The PodGroupInitiallyScheduled condition to write (None: unchanged, or already
        True: initially scheduled stays so)."""
        conditions = [
            c
            for c in (obj.get("status") or {}).get("conditions") or []
            if isinstance(c, dict) and c.get("type") != CONDITION_SCHEDULED
        ]
        previous = next(
            (
                c
                for c in (obj.get("status") or {}).get("conditions") or []
                if isinstance(c, dict) and c.get("type") == CONDITION_SCHEDULED
            ),
            None,
        )
        if previous is not None and previous.get("status") == "True":
            return None  # initially scheduled stays so
        status = "True" if scheduled else "False"
        if not self._changed(gid, (status, message)):
            return None
        since = rfc3339()
        if previous is not None and previous.get("status") == status:
            since = previous.get("lastTransitionTime") or since
        condition = {
            "type": CONDITION_SCHEDULED,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": since,
        }
        return {"status": {"conditions": [*conditions, condition]}}

    async def _patch(
        self, path: str, body: Obj, gid: tuple[str, str], state: tuple[Any, ...] | None
    ) -> None:
        """Write a status; a failure is retried with the queue's backoff while this is still
        the latest status of a group still there (a 404 or a refusal ends it)."""
        attempts = 0
        while True:
            try:
                await self.host.client.patch(path, body, MERGE_PATCH)
                return
            except ApiError as exc:
                retryable = exc.status in (0, 408, 429) or exc.status >= 500
                if exc.status != 404:
                    log.warning(
                        "pod group status not updated",
                        group=gid[1],
                        error=str(exc),
                        retry=retryable,
                    )
                if not retryable:
                    if self.written.get(gid) == state:
                        self.written.pop(gid, None)  # the next group cycle writes it again
                    return
            attempts += 1
            await asyncio.sleep(self.host.backoff(attempts))
            if self.written.get(gid) != state:
                return  # a newer status was written meanwhile, or the group is gone
