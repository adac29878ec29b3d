"""Job traces in the neutral CSV format, replayed on a scenario's nodes.

    job,arrival_s,duration_s,gpus,workers,gpu_model,status

One row per job (docs/simulator.md): `arrival_s` seconds from the trace's start, `duration_s`
its run time, `gpus` its GPUs in all, `workers` the nodes it ran on, `gpu_model` and `status`
as the source says. Any cell may be empty. A row with an empty `arrival_s`, `duration_s` or
`gpus` cannot be replayed and is counted, not run; a job asking more GPUs than the largest node
has runs as a pod group of equal workers (the trace's `workers` when it splits the GPUs evenly
onto existing nodes, else the fewest that do), placed whole by the gang scheduler.
Otherwise `workers`, `gpu_model` and `status` are read and checked but do not change the
replay: a job that fits a node runs as one pod for its duration (stretched by its GPU set's
bandwidth, as any job).
Errors name the file, the line (the header is line 1) and the column. Numbers are read strictly
(`go_parse_int`, `parse_decimal`: ASCII digits only, no `1_0`, no `nan`). The replay's pods
(gang workers included) are counted against the scenario's limits row by row, before any row
is expanded, and every pod name is allocated from one set (scenario pods and groups, trace pods
and groups), so a worker `<job>-w<k>` and a job row never share a name.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from math import isqrt
from pathlib import Path
from typing import Any, TypeVar

from scheduler.core.decode import go_parse_int, parse_decimal
from scheduler.core.safeload import InputError, read_input
from scheduler.sim.scenario import (
    MAX_SECONDS,
    Job,
    Scenario,
    ScenarioError,
    as_workers,
    over_limit,
    worker_name,
)

__all__ = [
    "TRACE_COLUMNS",
    "TraceReplay",
    "TraceRow",
    "load_trace",
    "parse_window",
    "replay_on",
]

NAMESPACE_COLUMN = "namespace"
"""An optional column: the job's namespace (empty: by the scenario's `traceNamespaces`)."""
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
TRACE_COLUMNS = ("job", "arrival_s", "duration_s", "gpus", "workers", "gpu_model", "status")
CPU_MILLIS_BASE, CPU_MILLIS_PER_GPU = 1000, 4000
MEMORY_GIB_BASE, MEMORY_GIB_PER_GPU = 4, 16
"""What a trace job's pod requests (traces carry no CPU or memory figures): 1 CPU and 4 GiB,
plus 4 CPUs and 16 GiB per GPU."""
N = TypeVar("N", int, float)
MIN_DURATION = 1.0
"""Rows of 0 seconds run this long (a pod that starts and stops)."""
MAX_ROWS = 1_000_000
"""Rows a trace file may hold (the replay window then picks the jobs to run)."""
MAX_GPUS = 1_000_000


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One CSV row, checked; None where the cell is empty."""

    line: int
    job: str
    arrival: float | None
    duration: float | None
    gpus: int | None
    workers: int | None
    gpu_model: str
    status: str
    namespace: str | None = None  # the optional `namespace` column (None: empty or absent)


@dataclass
class TraceReplay:
    """The jobs a trace contributes to a replay, and what it left out."""

    file: str
    window: tuple[float, float | None]
    rows: int = 0
    jobs: list[Job] = field(default_factory=list)
    outside_window: int = 0
    incomplete: int = 0
    not_placeable: int = 0
    not_placeable_gpu_hours: float = 0.0
    largest_node_gpus: int = 0
    gangs: int = 0  # jobs larger than any node, replayed as pod groups of workers

    def summary(self) -> dict[str, Any]:
        start, end = self.window
        return {
            "file": self.file,
            "window": f"{start:g}:{'' if end is None else f'{end:g}'}",
            "rows": self.rows,
            "jobs": len(self.jobs),
            "outside_window": self.outside_window,
            "incomplete": self.incomplete,
            "not_placeable": self.not_placeable,
            "not_placeable_gpu_hours": round(self.not_placeable_gpu_hours, 1),
            "gangs": self.gangs,
            "largest_node_gpus": self.largest_node_gpus,
        }


def _cell(
    text: str,
    where: str,
    column: str,
    parse: Callable[[str], N | None],
    minimum: N,
    what: str,
    maximum: N,
) -> N | None:
    """A checked cell: None when empty, else minimum <= `parse(text)` <= maximum, where
    `parse` returns None for text that is not a number of its kind."""
    if text == "":
        return None
    value = parse(text) if len(text) <= _MAX_CELL_CHARS else None
    if value is None or value < minimum or value > maximum:
        shown = text if len(text) <= _MAX_CELL_CHARS else f"{text[:_MAX_CELL_CHARS]}..."
        raise ScenarioError(f"{where}: {column}: must be {what}, got {shown!r}")
    return value


_MAX_CELL_CHARS = 40
"""A numeric cell longer than this is refused before it is read (and shown cut)."""


def _seconds(text: str, where: str, column: str) -> float | None:
    what = f"a number of seconds from 0 to {MAX_SECONDS:,} (ten years)"
    return _cell(text, where, column, parse_decimal, 0.0, what, float(MAX_SECONDS))


def _count(text: str, where: str, column: str, minimum: int) -> int | None:
    what = f"an integer from {minimum} to {MAX_GPUS:,}"
    return _cell(text, where, column, go_parse_int, minimum, what, MAX_GPUS)


def _namespace_cell(text: str, where: str) -> str | None:
    if not text:
        return None
    if len(text) > 63 or not _DNS_LABEL.fullmatch(text):
        shown = text if len(text) <= _MAX_CELL_CHARS else text[:_MAX_CELL_CHARS] + "..."
        raise ScenarioError(
            f"{where}: {NAMESPACE_COLUMN}: must be a namespace name (a DNS label: lowercase "
            f"letters, digits and '-', at most 63), got {shown!r}"
        )
    return text


def load_trace(path: str | Path) -> list[TraceRow]:
    """Read and check a trace CSV; errors: `FILE: line N: COLUMN: problem`."""
    source = str(path)
    try:
        text = read_input(path, source)
    except InputError as exc:
        raise ScenarioError(str(exc)) from None
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)  # a stray quote: an error
    rows: list[TraceRow] = []
    try:
        header = next(reader, None)
        if header is None:
            raise ScenarioError(f"{source}: line 1: empty file (expected the header)")
        header = [h.strip() for h in header]
        twice = sorted({h for h in header if header.count(h) > 1})
        if twice:
            raise ScenarioError(f"{source}: line 1: column(s) named twice: {', '.join(twice)}")
        missing = [c for c in TRACE_COLUMNS if c not in header]
        if missing:
            raise ScenarioError(
                f"{source}: line 1: header lacks column(s) {', '.join(missing)} "
                f"(expected {','.join(TRACE_COLUMNS)})"
            )
        at = {name: header.index(name) for name in TRACE_COLUMNS}
        if NAMESPACE_COLUMN in header:
            at[NAMESPACE_COLUMN] = header.index(NAMESPACE_COLUMN)
        for cells in reader:
            line = reader.line_num
            if not cells:
                continue
            where = f"{source}: line {line}"
            if len(cells) != len(header):
                raise ScenarioError(f"{where}: expected {len(header)} cells, got {len(cells)}")
            if len(rows) >= MAX_ROWS:
                raise ScenarioError(f"{where}: more than {MAX_ROWS:,} rows (the replay's limit)")
            cell = {name: cells[i].strip() for name, i in at.items()}
            rows.append(
                TraceRow(
                    line,
                    cell["job"],
                    _seconds(cell["arrival_s"], where, "arrival_s"),
                    _seconds(cell["duration_s"], where, "duration_s"),
                    _count(cell["gpus"], where, "gpus", 0),
                    _count(cell["workers"], where, "workers", 1),
                    cell["gpu_model"],
                    cell["status"],
                    _namespace_cell(cell.get(NAMESPACE_COLUMN, ""), where),
                )
            )
    except csv.Error as exc:
        raise ScenarioError(f"{source}: line {reader.line_num}: {exc}") from None
    return rows


def parse_window(text: str) -> tuple[float, float | None]:
    """`START:END` seconds after the trace's first arrival; either side may be empty."""
    start_text, sep, end_text = text.partition(":")
    if not sep:
        raise ScenarioError(f"--window: {text!r}: expected START:END in seconds, e.g. 0:86400")
    start = parse_decimal(start_text) if start_text else 0.0
    end = parse_decimal(end_text) if end_text else None
    if start is None or (end_text and end is None):
        raise ScenarioError(
            f"--window: {text!r}: START and END must be numbers of seconds (e.g. 0:86400)"
        )
    if start < 0 or (end is not None and not end > start):
        raise ScenarioError(f"--window: {text!r}: need 0 <= START < END")
    if start > MAX_SECONDS:
        raise ScenarioError(
            f"--window: {text!r}: START must be at most {MAX_SECONDS:,} s (ten years)"
        )
    return start, end


_NOT_NAME = re.compile(r"[^a-z0-9.-]+")


def _candidates(base: str, line: int) -> Iterator[str]:
    yield base
    yield f"{base}-line{line}"
    n = 2
    while True:
        yield f"{base}-line{line}-{n}"
        n += 1


def _job_name(row: TraceRow, workers: int, taken: set[str]) -> str:
    """A valid pod name from the job cell (`row-N` when empty), `-lineN` added when it, or
    one of its workers' names (`<name>-w<k>`), is taken; the names are then taken."""
    base = _NOT_NAME.sub("-", row.job.lower()).strip("-.")[:200] or f"row-{row.line}"
    for name in _candidates(base, row.line):
        if workers == 1:
            if name not in taken:
                taken.add(name)
                return name
            continue
        pods = [worker_name(name, k) for k in range(workers)]
        if name not in taken and taken.isdisjoint(pods):
            taken.add(name)  # the group's name: kept for it alone
            taken.update(pods)
            return name
    raise AssertionError("unreachable: the candidates never end")


def _workers(row: TraceRow, largest: int) -> int | None:
    """Worker pods for a job: one when it fits the largest node; else a gang of equal workers
    (the trace's `workers` when that splits its GPUs evenly onto nodes that exist, else the
    fewest that do); None when no node has a GPU."""
    gpus = row.gpus or 0
    if gpus <= largest:
        return 1
    if largest <= 0:
        return None
    fits = row.workers and row.workers > 1 and gpus % row.workers == 0
    if fits and row.workers and gpus // row.workers <= largest:
        return row.workers
    return _smallest_divisor_from(gpus, -(-gpus // largest))


def _smallest_divisor_from(n: int, low: int) -> int:
    """The smallest divisor of n that is >= low (1 <= low <= n), in at most 2 sqrt(n) steps:
    the divisors up to sqrt(n) upward from low, then the larger ones as n // c for the
    cofactors c from min(n // low, sqrt(n)) down."""
    root = isqrt(n)
    for d in range(low, root + 1):
        if n % d == 0:
            return d
    for c in range(min(n // low, root), 0, -1):
        if n % c == 0:
            return n // c
    return n


def replay_on(
    scenario: Scenario, rows: list[TraceRow], file: str, window: tuple[float, float | None]
) -> TraceReplay:
    """The scenario's own jobs plus the trace's (in the window, shifted so START is time 0)."""
    replay = TraceReplay(file, window, rows=len(rows))
    replay.largest_node_gpus = scenario.largest_node_gpus
    first = min((r.arrival for r in rows if r.arrival is not None), default=0.0)
    start, end = window
    # every pod and pod group name of the run, the scenario's own first
    taken = {j.name for j in scenario.jobs} | {j.group for j in scenario.jobs if j.group}
    pods, nodes = len(scenario.jobs), scenario.node_count
    for row in rows:
        if row.arrival is None or row.duration is None or row.gpus is None:
            replay.incomplete += 1
            continue
        offset = row.arrival - first
        if offset < start or (end is not None and offset >= end):
            replay.outside_window += 1
            continue
        workers = _workers(row, replay.largest_node_gpus)
        if workers is None:
            replay.not_placeable += 1
            replay.not_placeable_gpu_hours += row.gpus * row.duration / 3600
            continue
        problem = over_limit(nodes, pods + workers)  # before the row's pods exist
        if problem is not None:
            what = f"a job of {workers:,} worker pods: " if workers > 1 else ""
            raise ScenarioError(f"{file}: line {row.line}: gpus: {what}{problem}")
        pods += workers
        gpus = row.gpus // workers
        job = Job(
            _job_name(row, workers, taken),
            round(offset - start, 3),
            max(MIN_DURATION, row.duration),
            gpus,
            f"{CPU_MILLIS_BASE + gpus * CPU_MILLIS_PER_GPU}m",
            f"{MEMORY_GIB_BASE + gpus * MEMORY_GIB_PER_GPU}Gi",
        )
        if scenario.gpu_request == "dra":
            job = dataclasses.replace(job, dra=True)
        namespace = row.namespace or scenario.namespace_for(row.gpus)
        if namespace != "default":
            job = dataclasses.replace(job, namespace=namespace)
        if workers > 1:
            replay.gangs += 1
        replay.jobs.extend(as_workers(job, workers, None))
    scenario.jobs = sorted([*scenario.jobs, *replay.jobs], key=lambda j: (j.arrival, j.name))
    return replay
