"""`topo-scheduler simulate [SCENARIO.yaml] [--policy ...] [--seed N] [--output table|json]
[--plot FILE.png] [--config FILE] [--trace FILE.csv --cluster SCENARIO.yaml [--window S:E]]`:
replay a GPU cluster and a job trace under each policy."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from scheduler.core.config import ConfigError, SchedulerConfiguration, default_config, load_config
from scheduler.core.safeload import InputError, one_line, read_input, with_origin
from scheduler.sim.engine import Simulation, WorkLimitError
from scheduler.sim.policies import (
    POLICY_ALIASES,
    POLICY_CHOICES,
    TOPO,
    TOPO_NVIDIA_DP,
    expand_policies,
)
from scheduler.sim.report import document, plot, render_table, summarize
from scheduler.sim.scenario import (
    MAX_SECONDS,
    Scenario,
    ScenarioError,
    bundled_scenario_path,
    check_limits,
    load_scenario,
)
from scheduler.sim.trace import TraceReplay, load_trace, parse_window, replay_on

__all__ = ["POLICY_CHOICES", "expand_policies", "run_simulate", "simulate"]


def _config(path: str | None) -> SchedulerConfiguration:
    from plugins import frameworks_for

    if path is None:
        return default_config()
    try:
        config = load_config(read_input(path), origin=path)
        frameworks_for(config)  # plugin args are validated when the profile is built
    except InputError as exc:
        raise ScenarioError(str(exc)) from None
    except ConfigError as exc:
        raise ScenarioError(with_origin(path, str(exc))) from None
    return config


def simulate(
    scenario: Scenario,
    policies: tuple[str, ...],
    config: SchedulerConfiguration | None = None,
    *,
    check: bool = False,
    progress: Callable[[str], Callable[[int], None]] | None = None,
    trace: TraceReplay | None = None,
    preemption: bool = True,
    reservation_timeout: float | None = None,
) -> tuple[dict[str, Any], dict[str, Simulation]]:
    """Run each policy on the scenario; returns the JSON document and the simulations.
    `reservation_timeout`: the seconds gang reservations hold nodes for (None: the
    configuration's GPUTopology `gangReservationSeconds`)."""
    started = time.perf_counter()
    sims: dict[str, Simulation] = {}
    for policy in dict.fromkeys(POLICY_ALIASES.get(p, p) for p in policies):
        advance = progress(policy) if progress is not None else None
        sims[policy] = Simulation(
            scenario, policy, config if policy in (TOPO, TOPO_NVIDIA_DP) else None, check=check,
            progress=advance, preemption=preemption, reservation_timeout=reservation_timeout,
        ).run()  # fmt: skip
    summaries = {name: summarize(sim) for name, sim in sims.items()}
    runtime = time.perf_counter() - started
    return document(scenario, summaries, runtime, trace.summary() if trace else None), sims


@contextmanager
def _progress_bar(
    enabled: bool, events: int
) -> Iterator[Callable[[str], Callable[[int], None]] | None]:
    """A rich progress bar on stderr (terminals only), one task per policy."""
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description:<12}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} events"),
        TimeElapsedColumn(),
        console=Console(file=sys.stderr),
        transient=True,
    ) as bar:

        def start(policy: str) -> Callable[[int], None]:
            task = bar.add_task(policy, total=events)
            return lambda n: bar.advance(task, n)

        yield start


def _scenario(args: argparse.Namespace) -> tuple[Scenario, TraceReplay | None]:
    """The scenario to run: a scenario file, or a trace replayed on a cluster's nodes."""
    trace_path: str | None = getattr(args, "trace", None)
    cluster: str | None = getattr(args, "cluster", None)
    window_text: str | None = getattr(args, "window", None)
    request: str | None = getattr(args, "gpu_request", None)
    if trace_path is None:
        if cluster is not None:
            raise ScenarioError("--cluster: only with --trace (else give the scenario file)")
        if window_text is not None:
            raise ScenarioError("--window: only with --trace")
        path = args.scenario or bundled_scenario_path()
        return load_scenario(path, seed=args.seed, gpu_request=request), None
    if cluster is None:
        raise ScenarioError("--trace: needs --cluster SCENARIO.yaml (the nodes to replay it on)")
    if args.scenario is not None:
        raise ScenarioError(f"{args.scenario}: with --trace, give the scenario as --cluster")
    window = parse_window(window_text) if window_text is not None else (0.0, None)
    scenario = load_scenario(cluster, seed=args.seed, jobs_required=False, gpu_request=request)
    rows = load_trace(trace_path)
    replay = replay_on(scenario, rows, trace_path, window)
    try:
        check_limits(scenario)
    except ScenarioError as exc:
        raise ScenarioError(f"{trace_path}: {exc}") from None
    if not scenario.jobs:
        raise ScenarioError(f"{trace_path}: no job to replay (window {window_text or '0:'})")
    scenario.name = f"{scenario.name} + {Path(trace_path).name}"
    return scenario, replay


def _reservation(seconds: float | None) -> float | None:
    """`--gang-reservation SECONDS`; None (not given): the configuration's value."""
    if seconds is None:
        return None
    if not math.isfinite(seconds) or seconds < 0 or seconds > MAX_SECONDS:
        raise ScenarioError(
            f"--gang-reservation: must be seconds from 0 to {MAX_SECONDS:,}, got {seconds:g}"
        )
    return seconds


def run_simulate(args: argparse.Namespace) -> int:
    """CLI entry: exit 0 after a run, 2 with one line on stderr for a bad scenario or config."""
    try:
        scenario, trace = _scenario(args)
        config = _config(args.config)
        if args.plot and not str(args.plot).lower().endswith(".png"):
            raise ScenarioError(f"--plot: {args.plot}: must name a .png file")
        reservation = _reservation(args.gang_reservation)
    except ScenarioError as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2
    policies = expand_policies(args.policy)
    try:
        with _progress_bar(sys.stderr.isatty(), 2 * len(scenario.jobs)) as progress:
            doc, sims = simulate(
                scenario,
                policies,
                config,
                progress=progress,
                trace=trace,
                preemption=not args.no_preemption,
                reservation_timeout=reservation,
            )
    except WorkLimitError as exc:
        origin = trace.file if trace is not None else scenario.source
        print(f"error: {one_line(origin)}: {exc}", file=sys.stderr)
        return 2
    if args.output == "json":
        print(json.dumps(doc, indent=2))
    else:
        print(render_table(doc), end="")
    if args.plot:
        try:
            plot(sims, args.plot)
        except OSError as exc:
            print(f"error: --plot: {args.plot}: {exc.strerror}", file=sys.stderr)
            return 2
    return 0
