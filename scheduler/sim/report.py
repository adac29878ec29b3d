"""What a simulation run measured: the JSON document (schema in docs/simulator.md), the table
for people, and the plot."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from scheduler.sim.engine import JobRecord, Sample, Simulation
from scheduler.sim.network import JobTime
from scheduler.sim.policies import (
    KUBE_FIRST_FREE,
    KUBE_NVIDIA_DP,
    POLICY_DESCRIPTIONS,
    TOPO,
    TOPO_NVIDIA_DP,
)
from scheduler.sim.scenario import Scenario

__all__ = ["WALL_CLOCK_FIELDS", "document", "plot", "render_table", "summarize"]

SERIES_POINTS = 100
_STYLES = {TOPO: "-", TOPO_NVIDIA_DP: "-.", KUBE_NVIDIA_DP: "--", KUBE_FIRST_FREE: ":"}
WALL_CLOCK_FIELDS = frozenset(
    {"wall_seconds", "decide_seconds", "throughput_decisions_per_second", "runtime_seconds"}
)
"""Fields that depend on the machine, not on the scenario and seed."""


def _percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def _time_mean(
    samples: Sequence[Sample], end: float, value: Callable[[Sample], float]
) -> float | None:
    """Time-weighted mean of a step function given by samples, over [first sample, end]."""
    total = 0.0
    span = 0.0
    for i, sample in enumerate(samples):
        stop = samples[i + 1].time if i + 1 < len(samples) else end
        length = max(0.0, min(stop, end) - sample.time)
        total += value(sample) * length
        span += length
    return total / span if span > 0 else None


def _binned(
    samples: Sequence[Sample], end: float, value: Callable[[Sample], float], points: int
) -> list[float]:
    """The step function averaged over `points` equal bins of [0, end]."""
    if end <= 0 or not samples:
        return []
    width = end / points
    out: list[float] = []
    j = 0
    for b in range(points):
        lo, hi = b * width, (b + 1) * width
        acc = 0.0
        while j + 1 < len(samples) and samples[j + 1].time <= lo:
            j += 1
        k = j
        while k < len(samples) and samples[k].time < hi:
            start = max(lo, samples[k].time)
            stop = min(hi, samples[k + 1].time if k + 1 < len(samples) else end)
            acc += value(samples[k]) * max(0.0, stop - start)
            k += 1
        out.append(acc / width)
    return out


def _distribution(values: Sequence[float], *, with_max: bool = False) -> dict[str, Any]:
    stats = {
        "jobs": len(values),
        "mean": _round(_mean(values)),
        "p50": _round(_percentile(values, 50)),
        "p95": _round(_percentile(values, 95)),
    }
    if with_max:
        stats["max"] = _round(max(values) if values else None)
    return stats


def _wait_stats(records: Sequence[JobRecord]) -> dict[str, Any]:
    return _distribution([r.wait for r in records if r.wait is not None], with_max=True)


def _completion_stats(records: Sequence[JobRecord]) -> dict[str, Any]:
    times = [r.completion_time for r in records if r.completion_time is not None]
    return _distribution(times)


def _gpu_hours(records: Sequence[JobRecord]) -> float:
    """GPU-hours held by jobs that ran (at their stretched run time)."""
    return round(sum(r.job.gpus * (r.run_seconds or 0.0) for r in records) / 3600, 3)


def _stretch(records: Sequence[JobRecord]) -> float | None:
    """Mean run time over trace duration, jobs that ran."""
    ratios = [r.run_seconds / r.job.duration for r in records if r.run_seconds is not None]
    return _round(_mean(ratios), 4)


def _by_job_size(records: Sequence[JobRecord]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Per job size (a multi-node job's workers together, sized by all their GPUs): jobs,
    wait (until its last worker was bound) and completion (its last worker's, from arrival;
    only jobs whose every worker completed), and the completion over every GPU job."""
    jobs: dict[tuple[bool, str], list[JobRecord]] = {}
    for record in records:
        group = record.job.group
        jobs.setdefault((True, group) if group else (False, record.job.name), []).append(record)
    sized: dict[int, list[tuple[float | None, float | None]]] = {}
    for workers in jobs.values():
        waits = [w for r in workers if (w := r.wait) is not None]
        done = [c for r in workers if (c := r.completion_time) is not None]
        wait = max(waits) if len(waits) == len(workers) else None
        completion = max(done) if len(done) == len(workers) else None
        sized.setdefault(sum(r.job.gpus for r in workers), []).append((wait, completion))
    out: dict[str, Any] = {}
    every: list[float] = []
    for size in sorted(sized):
        entries = sized[size]
        completions = [c for _, c in entries if c is not None]
        every += completions
        out[str(size)] = {
            "jobs": len(entries),
            "wait_seconds": _distribution([w for w, _ in entries if w is not None], with_max=True),
            "completion_seconds": _distribution(completions),
        }
    return out, _distribution(every)


def summarize(sim: Simulation) -> dict[str, Any]:
    """One policy's figures (see docs/simulator.md for each field)."""
    records = list(sim.records.values())
    end = max([s.time for s in sim.samples] + [sim.now])
    states = Counter(r.state for r in records)
    gpu_records = [r for r in records if r.job.gpus > 0]
    multi = [r for r in records if len(r.gpus) > 1 and r.quality is not None]
    qualities = [r.quality for r in multi if r.quality is not None]
    bandwidths = [q.busbw_gbps for q in qualities if q.busbw_gbps is not None]
    by_size: dict[str, Any] = {}
    for size in sorted({r.job.gpus for r in gpu_records}):
        group = [r for r in gpu_records if r.job.gpus == size]
        placed = [r.quality for r in group if r.quality is not None]
        bw = [q.busbw_gbps for q in placed if q.busbw_gbps is not None]
        by_size[str(size)] = {
            "jobs": len(group),
            "wait_seconds": _wait_stats(group),
            "completion_seconds": _completion_stats(group),
            "gpu_hours": _gpu_hours(group),
            "run_time_stretch_mean": _stretch(group),
            "best_set_share": _share(sum(q.best_possible for q in placed), len(placed))
            if size > 1
            else None,
            "allreduce_busbw_gbps_mean": _round(_mean(bw), 2),
        }
    by_job, job_completion = _by_job_size(gpu_records)
    total = sim.total_gpus or 1
    pending_gpu = [s for s in sim.samples if s.pending_gpu_jobs > 0]
    frag_mean = _time_mean(pending_gpu, end, lambda s: s.stranded_gpus) if pending_gpu else None
    stranded_share = (
        _time_mean(pending_gpu, end, lambda s: s.stranded_gpus / s.free_gpus if s.free_gpus else 0)
        if pending_gpu
        else None
    )
    pending_time = _time_mean(sim.samples, end, lambda s: 1.0 if s.pending_gpu_jobs else 0.0)
    reasons = Counter(r.reason or "unknown" for r in records if r.state == "pending")
    fw = next(iter(sim.frameworks.values()))
    return {
        "policy": sim.policy,
        "gpu_topology_weight": fw.weights.get("GPUTopology"),
        "pods": {
            "total": len(records),
            "scheduled": sim.scheduled,
            "completed": states.get("completed", 0),
            "running": states.get("running", 0),
            "pending": states.get("pending", 0),
        },
        "decisions": sim.decisions,
        "unschedulable_attempts": sim.decisions - sim.scheduled,
        "wall_seconds": round(sim.wall_seconds, 4),
        "decide_seconds": round(sim.schedule_seconds, 4),
        "work": {"node_evaluations": sim.meter.used, "limit": sim.meter.limit},
        "throughput_decisions_per_second": round(sim.decisions / sim.schedule_seconds, 1)
        if sim.schedule_seconds > 0
        else None,
        "wait_seconds": _wait_stats(records),
        "gpu_job_wait_seconds": _wait_stats(gpu_records),
        "best_effort_gpu_job_wait_seconds": _wait_stats(
            [r for r in gpu_records if r.job.placement in (None, "best-effort")]
        ),
        "gpu_job_completion_seconds": _completion_stats(gpu_records),
        "gpu_hours": _gpu_hours(gpu_records),
        "run_time_stretch_mean": _stretch([r for r in gpu_records if r.job.gpus > 1]),
        "by_gpus": by_size,
        "by_job_size": by_job,
        "job_completion_seconds": job_completion,
        "multi_gpu_jobs": len(qualities),
        "best_set_share": _share(sum(q.best_possible for q in qualities), len(qualities)),
        "nvlink_share": _share(sum(q.all_nvlink for q in qualities), len(qualities)),
        "cross_numa_share": _share(sum(q.cross_numa for q in qualities), len(qualities)),
        "allreduce_busbw_gbps": {
            "mean": _round(_mean(bandwidths), 2),
            "p10": _round(_percentile(bandwidths, 10), 2),
        },
        "utilization": {
            "mean": _round(_time_mean(sim.samples, end, lambda s: s.used_gpus / total), 4),
            "series": [
                round(v, 4)
                for v in _binned(sim.samples, end, lambda s: s.used_gpus / total, SERIES_POINTS)
            ],
        },
        "pending_gpu_jobs_series": [
            round(v, 2)
            for v in _binned(sim.samples, end, lambda s: s.pending_gpu_jobs, SERIES_POINTS)
        ],
        "fragmentation": {
            "time_with_gpu_jobs_pending_share": _round(pending_time, 4),
            "stranded_gpus_mean": _round(frag_mean, 2),
            "stranded_share_of_free": _round(stranded_share, 4),
            "largest_gang_workers": _largest_gangs(sim, end),
        },
        "job_time": _job_time(sim),
        "makespan_seconds": round(end, 3),
        **({"gangs": gangs} if (gangs := sim.gangs.summary(sim, end)) is not None else {}),
        "pending_reasons": dict(reasons.most_common()),
        "preemption": _preemption(sim),
        **({"namespaces": ns} if (ns := _namespaces(sim, gpu_records)) else {}),
        **({"reservations": held} if (held := _reservations(sim, end)) is not None else {}),
    }


def _namespaces(sim: Simulation, gpu_records: Sequence[JobRecord]) -> dict[str, Any]:
    """Per namespace (with queues, or a trace that names namespaces): its GPU pods, their
    wait and completion, and by job size (`by_gpus`: a multi-node job once, by all its
    GPUs); GPU-hours used and held above the queue's min; reclaim."""
    names = sorted({r.job.namespace for r in gpu_records} | set(sim.quota_min))
    if names in ([], ["default"]) and not sim.scenario.queues:
        return {}
    borrowed = sim.borrowed_gpu_hours()
    queues = {q.namespace: q for q in sim.scenario.queues}
    out: dict[str, Any] = {}
    for name in names:
        mine = [r for r in gpu_records if r.job.namespace == name]
        queue = queues.get(name)
        by_size = {
            size: {
                "jobs": block["jobs"],
                "wait_seconds_mean": block["wait_seconds"]["mean"],
                "completion_seconds_mean": block["completion_seconds"]["mean"],
            }
            for size, block in _by_job_size(mine)[0].items()
        }
        out[name] = {
            "queue": None
            if queue is None
            else {"min": queue.min, "max": queue.max, "enforced": sim.queues},
            "jobs": len(mine),
            "wait_seconds": _wait_stats(mine),
            "completion_seconds": _completion_stats(mine),
            "by_gpus": by_size,
            "gpu_hours": _gpu_hours(mine),
            "borrowed_gpu_hours": round(borrowed.get(name, 0.0), 3) if sim.queues else None,
            "reclaim": {
                "preemptions": sim.reclaimed.get(name, 0),
                "lost_gpu_hours": round(sim.reclaim_lost_gpu_seconds.get(name, 0.0) / 3600, 3),
            },
        }
    return out


def _reservations(sim: Simulation, end: float) -> dict[str, Any] | None:
    """Capacity held for pod groups as it freed (the group cycle's reservations)."""
    groups = sim.cycle.groups
    if groups is None:
        return None
    book = groups.reservations
    return {
        "timeout_seconds": book.timeout,
        "made": book.made,
        "fulfilled": book.fulfilled,
        "expired": book.expired,
        "released": book.released,
        "held_at_end": len(book.held),
        "gpu_hours": round(book.gpu_seconds(end) / 3600, 3),
        "idle_gpu_hours": round(sim.reserved_idle_gpu_seconds / 3600, 3),
    }


def _largest_gangs(sim: Simulation, end: float) -> dict[str, Any]:
    """Per network level (and the whole cluster): the largest gang of 8-GPU workers that could
    still be placed in one domain, time-weighted mean, minimum and binned series."""
    out: dict[str, Any] = {}
    samples = [s for s in sim.samples if s.largest_gang]
    for at, level in enumerate(sim.network.gang_levels):

        def get(s: Sample, at: int = at) -> float:
            return float(s.largest_gang[at])

        out[level] = {
            "mean": _round(_time_mean(samples, end, get), 2),
            "min": min((s.largest_gang[at] for s in samples), default=None),
            "series": [round(v, 2) for v in _binned(samples, end, get, SERIES_POINTS)],
        }
    return out


def _stretch_stats(times: Sequence[JobTime]) -> dict[str, Any]:
    stretches = [t.stretch for t in times]
    busbw = [t.busbw_gbps for t in times if t.busbw_gbps is not None]
    return {
        "jobs": len(times),
        "multi_node": sum(1 for t in times if t.nodes > 1),
        "stretch_mean": _round(_mean(stretches), 4),
        "stretch_p95": _round(_percentile(stretches, 95), 4),
        "stretch_max": _round(max(stretches) if stretches else None, 4),
        "busbw_gbps_mean": _round(_mean(busbw), 2),
        "reference_busbw_gbps_mean": _round(
            _mean([t.reference_busbw_gbps for t in times if t.reference_busbw_gbps is not None]),
            2,
        ),
        "stretch_gpu_hours": round(sum(t.gpus * (t.run - t.left) for t in times) / 3600, 3),
    }


def _job_time(sim: Simulation) -> dict[str, Any]:
    """Completed multi-GPU jobs (a multi-node job once, all its workers): run time over the
    reference placement's (`stretch`), GPU-hours lost to it, per job size (all GPUs)."""
    done: dict[str, bool] = {}
    for key, record in sim.records.items():
        job_key = record.job.group if record.job.group is not None else key
        done[job_key] = done.get(job_key, True) and record.state == "completed"
    times = [t for key, t in sim.network.jobs.items() if done.get(key) and t.gpus > 1]
    multi = [t for t in times if t.nodes > 1]
    spans = Counter(t.span or "none" for t in multi)
    return {
        "reference": sim.network.reference,
        **_stretch_stats(times),
        "multi_node_jobs": {
            **_stretch_stats(multi),
            "narrowest_level": {
                key: spans.get(key, 0) for key in (*sim.scenario.network_levels, "none")
            },
        },
        "by_size": {
            str(size): _stretch_stats([t for t in times if t.gpus == size])
            for size in sorted({t.gpus for t in times})
        },
    }


def _preemption(sim: Simulation) -> dict[str, Any]:
    """Preemptions and the GPU-hours they cost, by the victims' priority."""
    priorities = sorted(set(sim.preempted) | set(sim.lost_gpu_seconds))
    return {
        "enabled": sim.preemption,
        "preemptions": sum(sim.preempted.values()),
        "lost_gpu_hours": round(sum(sim.lost_gpu_seconds.values()) / 3600, 3),
        "by_priority": {
            str(priority): {
                "preemptions": sim.preempted.get(priority, 0),
                "lost_gpu_hours": round(sim.lost_gpu_seconds.get(priority, 0.0) / 3600, 3),
            }
            for priority in priorities
        },
    }


def document(
    scenario: Scenario,
    summaries: Mapping[str, Mapping[str, Any]],
    runtime: float,
    trace: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The whole JSON report; `trace`: what a trace replay kept and left out."""
    gpu_jobs = sum(1 for j in scenario.jobs if j.gpus)
    head: dict[str, Any] = {
        "name": scenario.name,
        "source": scenario.source,
        "seed": scenario.seed,
        "nodes": scenario.node_count,
        "gpus": scenario.total_gpus,
        "jobs": len(scenario.jobs),
        "gpu_jobs": gpu_jobs,
        "cpu_pods": len(scenario.jobs) - gpu_jobs,
    }
    if trace is not None:
        head["trace"] = dict(trace)
    return {
        "scenario": head,
        "policy_descriptions": {p: POLICY_DESCRIPTIONS[p] for p in summaries},
        "series_points": SERIES_POINTS,
        "policies": dict(summaries),
        "runtime_seconds": round(runtime, 3),
    }


def _fmt(value: Any, kind: str = "") -> str:
    if value is None:
        return "-"
    if kind == "pct":
        return f"{100 * value:.1f}%"
    if kind == "s":
        return f"{value:,.0f} s"
    if kind == "gbps":
        return f"{value:.1f} GB/s"
    if kind == "h":
        return f"{value:,.1f} h"
    if kind == "x":
        return f"{value:.3f}x"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _size_field(size: str, *keys: str) -> Callable[[Mapping[str, Any]], Any]:
    def get(policy: Mapping[str, Any]) -> Any:
        value: Any = policy["by_gpus"].get(size, {})
        for key in keys:
            value = value.get(key) if isinstance(value, Mapping) else None
        return value

    return get


def _by_priority(priority: str, key: str) -> Callable[[Mapping[str, Any]], Any]:
    def get(policy: Mapping[str, Any]) -> Any:
        return policy["preemption"]["by_priority"].get(priority, {}).get(key, 0)

    return get


def render_table(doc: Mapping[str, Any]) -> str:
    """Policies side by side, one metric a row."""
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    policies: Mapping[str, Mapping[str, Any]] = doc["policies"]
    sc = doc["scenario"]
    title = (
        f"{sc['name']}: {sc['nodes']} nodes, {sc['gpus']} GPUs, {sc['gpu_jobs']} GPU jobs, "
        f"{sc['cpu_pods']} CPU pods (seed {sc['seed']})"
    )
    table = Table(header_style="bold")
    table.add_column("metric", no_wrap=True)
    for name in policies:
        table.add_column(name, justify="right")

    def row(label: str, get: Callable[[Mapping[str, Any]], Any], kind: str = "") -> None:
        table.add_row(label, *(_fmt(get(p), kind) for p in policies.values()))

    row("pods scheduled", lambda p: f"{p['pods']['scheduled']}/{p['pods']['total']}")
    row("pods still pending", lambda p: p["pods"]["pending"])
    row("decisions", lambda p: p["decisions"])
    row("decisions / s (wall clock)", lambda p: p["throughput_decisions_per_second"])
    row("wait mean (all pods)", lambda p: p["wait_seconds"]["mean"], "s")
    row("wait p95 (all pods)", lambda p: p["wait_seconds"]["p95"], "s")
    row("wait mean (GPU jobs)", lambda p: p["gpu_job_wait_seconds"]["mean"], "s")
    row("wait p95 (GPU jobs)", lambda p: p["gpu_job_wait_seconds"]["p95"], "s")
    row(
        "wait mean (GPU jobs, no placement)",
        lambda p: p["best_effort_gpu_job_wait_seconds"]["mean"],
        "s",
    )
    sizes = sorted({s for p in policies.values() for s in p["by_gpus"]}, key=int)
    for size in sizes:
        if size != "0":
            row(f"  wait mean, {size}-GPU jobs", _size_field(size, "wait_seconds", "mean"), "s")
    row("multi-GPU jobs placed", lambda p: p["multi_gpu_jobs"])
    row("  on a best-possible GPU set", lambda p: p["best_set_share"], "pct")
    row("  on all-NVLink sets", lambda p: p["nvlink_share"], "pct")
    row("  crossing NUMA nodes", lambda p: p["cross_numa_share"], "pct")
    row("  all-reduce busbw mean", lambda p: p["allreduce_busbw_gbps"]["mean"], "gbps")
    row("  all-reduce busbw p10", lambda p: p["allreduce_busbw_gbps"]["p10"], "gbps")
    for size in sizes:
        if size not in ("0", "1"):
            row(
                f"  busbw mean, {size}-GPU jobs",
                _size_field(size, "allreduce_busbw_gbps_mean"),
                "gbps",
            )
    row("job completion mean (GPU jobs)", lambda p: p["gpu_job_completion_seconds"]["mean"], "s")
    for size in sizes:
        if size != "0":
            row(
                f"  completion mean, {size}-GPU jobs",
                _size_field(size, "completion_seconds", "mean"),
                "s",
            )
    row("run time stretch (multi-GPU jobs)", lambda p: p["run_time_stretch_mean"], "x")
    _job_time_rows(row, policies)
    row("GPU-hours used", lambda p: p["gpu_hours"], "h")
    for size in sizes:
        if size != "0":
            row(f"  GPU-hours, {size}-GPU jobs", _size_field(size, "gpu_hours"), "h")
    row("GPU utilization (mean)", lambda p: p["utilization"]["mean"], "pct")
    row(
        "time with GPU jobs pending",
        lambda p: p["fragmentation"]["time_with_gpu_jobs_pending_share"],
        "pct",
    )
    row("  stranded free GPUs (mean)", lambda p: p["fragmentation"]["stranded_gpus_mean"])
    row(
        "  stranded share of free GPUs",
        lambda p: p["fragmentation"]["stranded_share_of_free"],
        "pct",
    )
    levels = list(
        dict.fromkeys(
            k for p in policies.values() for k in p["fragmentation"]["largest_gang_workers"]
        )
    )
    for level in levels:
        row(
            f"  largest gang in one {level} (8-GPU workers): mean / min",
            _gang_room(level),
        )
    row("makespan", lambda p: p["makespan_seconds"], "s")
    if any("gangs" in p for p in policies.values()):  # multi-node jobs (workers: N)
        _gang_rows(row, policies)
    row(
        "preemptions",
        lambda p: p["preemption"]["preemptions"] if p["preemption"]["enabled"] else None,
    )
    row("  lost GPU-hours", lambda p: p["preemption"]["lost_gpu_hours"], "h")
    priorities = sorted(
        {int(k) for p in policies.values() for k in p["preemption"]["by_priority"]}, reverse=True
    )
    for prio in priorities:
        row(f"  victims of priority {prio}: preemptions", _by_priority(str(prio), "preemptions"))
        row(
            f"  victims of priority {prio}: lost GPU-hours",
            _by_priority(str(prio), "lost_gpu_hours"),
            "h",
        )
    _queue_rows(row, policies)
    out = StringIO()
    console = Console(file=out, width=120, highlight=False)
    console.print(title, soft_wrap=True)
    trace = sc.get("trace")
    if trace:
        left_out = (
            f"left out: {trace['outside_window']} outside the window, "
            f"{trace['incomplete']} with empty arrival_s/duration_s/gpus"
        )
        if trace["not_placeable"]:
            left_out += (
                f", {trace['not_placeable']} not placeable (no node has a GPU; "
                f"{trace['not_placeable_gpu_hours']:,.0f} GPU-hours)"
            )
        console.print(
            f"trace {trace['file']}: {trace['rows']} rows, {trace['jobs']} pods replayed "
            f"(window {trace['window']}; {trace['gangs']} jobs larger than the largest node, "
            f"{trace['largest_node_gpus']} GPUs, as pod groups of workers); {left_out}",
            soft_wrap=True,
        )
    console.print(table)
    for name, text in doc.get("policy_descriptions", {}).items():
        console.print(f"{name}: {text}", soft_wrap=True)
    for name, p in policies.items():
        for reason, count in list(p["pending_reasons"].items())[:3]:
            console.print(f"{name}: {count} pod(s) pending: {reason}", soft_wrap=True)
    console.print(f"simulated in {doc['runtime_seconds']:.1f} s wall clock")
    return out.getvalue()


def _queue_rows(row: Callable[..., None], policies: Mapping[str, Mapping[str, Any]]) -> None:
    """Reservations, then per namespace: jobs, waits and completions by size, GPU-hours used
    and borrowed, reclaim."""
    if any("reservations" in p for p in policies.values()):

        def held(*keys: str) -> Callable[[Mapping[str, Any]], Any]:
            def get(p: Mapping[str, Any]) -> Any:
                r = p.get("reservations")
                return None if r is None else "/".join(f"{r[k]:,.0f}" for k in keys)

            return get

        row("gang reservations: made / fulfilled / expired", held("made", "fulfilled", "expired"))
        row("  GPU-hours reserved / of them idle", held("gpu_hours", "idle_gpu_hours"))
    names = list(dict.fromkeys(n for p in policies.values() for n in p.get("namespaces", {})))

    def ns(name: str, *keys: str) -> Callable[[Mapping[str, Any]], Any]:
        def get(p: Mapping[str, Any]) -> Any:
            value: Any = p.get("namespaces", {}).get(name)
            for key in keys:
                if not isinstance(value, Mapping):
                    return None
                value = value.get(key)
            return value

        return get

    for name in names:
        row(f"namespace {name}: GPU jobs", ns(name, "jobs"))
        sizes = sorted(
            {
                s
                for p in policies.values()
                for s in p.get("namespaces", {}).get(name, {}).get("by_gpus", {})
            },
            key=int,
        )
        for size in sizes:
            row(
                f"  wait mean, {size}-GPU jobs", ns(name, "by_gpus", size, "wait_seconds_mean"), "s"
            )
            row(
                f"  completion mean, {size}-GPU jobs",
                ns(name, "by_gpus", size, "completion_seconds_mean"),
                "s",
            )
        row("  GPU-hours used", ns(name, "gpu_hours"), "h")
        row("  GPU-hours above its min (borrowed)", ns(name, "borrowed_gpu_hours"), "h")
        row("  preempted by reclaim", ns(name, "reclaim", "preemptions"))
        row("  lost to reclaim, GPU-hours", ns(name, "reclaim", "lost_gpu_hours"), "h")


def _gang_room(level: str) -> Callable[[Mapping[str, Any]], Any]:
    def get(policy: Mapping[str, Any]) -> Any:
        room = policy["fragmentation"]["largest_gang_workers"].get(level)
        if not room or room["mean"] is None:
            return None
        return f"{room['mean']:.1f} / {room['min']}"

    return get


def _job_time_rows(row: Callable[..., None], policies: Mapping[str, Mapping[str, Any]]) -> None:
    """Stretch against the reference placement, per job size, multi-node jobs apart."""

    def get(*keys: str) -> Callable[[Mapping[str, Any]], Any]:
        def value(policy: Mapping[str, Any]) -> Any:
            v: Any = policy.get("job_time")
            for key in keys:
                v = v.get(key) if isinstance(v, Mapping) else None
            return v

        return value

    first = next(iter(policies.values()))
    reference = first.get("job_time", {}).get("reference", "")
    row(f"stretch vs the best placement ({reference}), jobs", get("jobs"))
    row("  stretch mean / p95", _pair(get("stretch_mean"), get("stretch_p95")))
    row("  GPU-hours lost to stretch", get("stretch_gpu_hours"), "h")
    sizes = sorted(
        {s for p in policies.values() for s in p.get("job_time", {}).get("by_size", {})}, key=int
    )
    for size in sizes:
        row(
            f"  {size}-GPU jobs: stretch mean (jobs, multi-node)",
            _with_counts(get("by_size", size)),
        )
    if not any(get("multi_node_jobs", "jobs")(p) for p in policies.values()):
        return
    row("  multi-node jobs: stretch mean / p95", _pair(
        get("multi_node_jobs", "stretch_mean"), get("multi_node_jobs", "stretch_p95")
    ))  # fmt: skip
    row("  multi-node jobs: busbw mean", get("multi_node_jobs", "busbw_gbps_mean"), "gbps")
    row(
        "  multi-node jobs: GPU-hours lost to stretch",
        get("multi_node_jobs", "stretch_gpu_hours"),
        "h",
    )
    spans = list(
        dict.fromkeys(
            k
            for p in policies.values()
            for k in p.get("job_time", {}).get("multi_node_jobs", {}).get("narrowest_level", {})
        )
    )
    for key in spans:
        label = "no level (core)" if key == "none" else key
        span = get("multi_node_jobs", "narrowest_level", key)
        row(f"  multi-node jobs held by one {label}", span)


def _pair(
    a: Callable[[Mapping[str, Any]], Any], b: Callable[[Mapping[str, Any]], Any]
) -> Callable[[Mapping[str, Any]], Any]:
    def get(policy: Mapping[str, Any]) -> Any:
        x, y = a(policy), b(policy)
        return None if x is None else f"{x:.3f}x / {y:.3f}x"

    return get


def _with_counts(
    stats: Callable[[Mapping[str, Any]], Any],
) -> Callable[[Mapping[str, Any]], Any]:
    def get(policy: Mapping[str, Any]) -> Any:
        s = stats(policy)
        if not s or s.get("stretch_mean") is None:
            return None
        return f"{s['stretch_mean']:.3f}x ({s['jobs']}, {s['multi_node']})"

    return get


def _gang_rows(row: Callable[..., None], policies: Mapping[str, Mapping[str, Any]]) -> None:
    def gang(*keys: str) -> Callable[[Mapping[str, Any]], Any]:
        def get(policy: Mapping[str, Any]) -> Any:
            value: Any = policy.get("gangs")
            for key in keys:
                value = value.get(key) if isinstance(value, Mapping) else None
            return value

        return get

    row("multi-node jobs started", lambda p: f"{gang('started')(p)}/{gang('jobs')(p)}")
    row("  gang wait mean", gang("wait_seconds", "mean"), "s")
    row("  gang wait max", gang("wait_seconds", "max"), "s")
    row("  partially placed groups", gang("partially_placed"))
    row("  GPU-hours held idle by incomplete groups", gang("idle_gpu_hours"))
    levels = {
        k for p in policies.values() for k in (p.get("gangs") or {}).get("spanning_domains", {})
    }
    for key in sorted(levels):
        row(f"  jobs spanning >1 {key}", gang("spanning_domains", key))


def plot(sims: Mapping[str, Simulation], path: str) -> None:
    """PNG: GPU utilization, pending GPU jobs, job wait and the largest gang of 8-GPU workers
    placeable in one domain of each network level, over simulated time, per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(4, 1, figsize=(10, 12), sharex=True)
    for name, sim in sims.items():
        total = sim.total_gpus or 1
        times = [s.time / 3600 for s in sim.samples]
        style = {"label": name, "linestyle": _STYLES.get(name, "-")}
        axes[0].step(times, [s.used_gpus / total * 100 for s in sim.samples], where="post", **style)
        axes[1].step(times, [s.pending_gpu_jobs for s in sim.samples], where="post", **style)
        placed = sorted((r.job.arrival, r.wait) for r in sim.records.values() if r.wait is not None)
        if placed:
            window = 25
            xs, ys = [], []
            for i in range(len(placed)):
                chunk = placed[max(0, i - window + 1) : i + 1]
                xs.append(placed[i][0] / 3600)
                ys.append(sum(w for _, w in chunk) / len(chunk) / 60)
            axes[2].plot(xs, ys, **style)
        gang_samples = [s for s in sim.samples if s.largest_gang]
        gang_times = [s.time / 3600 for s in gang_samples]
        for at, level in enumerate(sim.network.gang_levels):
            axes[3].step(
                gang_times,
                [s.largest_gang[at] for s in gang_samples],
                where="post",
                label=f"{name}: {level.rsplit('/', 1)[-1]}",
                linestyle=style["linestyle"],
                color=f"C{at}",
            )
    axes[0].set_ylabel("GPU utilization (%)")
    axes[0].set_ylim(0, 105)
    axes[1].set_ylabel("pending GPU jobs")
    axes[2].set_ylabel("wait (min, mean of 25 jobs)")
    axes[3].set_ylabel("largest gang in one domain\n(8-GPU workers)")
    axes[3].set_xlabel("simulated time (h)")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right")
    first = next(iter(sims.values()))
    fig.suptitle(f"topo-scheduler simulate: {first.scenario.name}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
