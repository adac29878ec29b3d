"""End-to-end throughput: the real scheduler process against the API-server emulator.

500 GPU nodes (8 GPUs each, DGX-1 topology annotation) and 5,000 pods created at once, a third
of them asking for 1, 2 or 4 GPUs (2/3 of the cluster's GPUs in all). The emulator runs in a
child process, the scheduler in this one, talking over loopback HTTP with the kube client.
Prints pods bound per second and the creation->binding latency percentiles (both measured on
the emulator's side), and the CPU each process used.

    .venv/bin/python bench/end_to_end.py [--nodes 500] [--pods 5000] [--qps 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.core.topology.builtin import builtin_topology
from scheduler.core.topology.schema import ANNOTATION_TOPOLOGY, topology_to_dict


def _emulator_process(conn: Connection) -> None:
    """Child: run the emulator and answer commands from the parent."""
    from tests.emulator import NODES, PODS, Emulator, make_node, make_pod

    emu = Emulator(history=200_000, bookmark_interval=5.0).start()
    store = emu.server.store
    conn.send(emu.url)
    while True:
        cmd, arg = conn.recv()
        if cmd == "nodes":
            topo = json.dumps(topology_to_dict(builtin_topology("dgx1-v100")))
            emu.create_many(
                NODES,
                [
                    make_node(f"node-{i:04d}", gpus=8, annotations={ANNOTATION_TOPOLOGY: topo})
                    for i in range(arg)
                ],
            )
            conn.send(None)
        elif cmd == "pods":
            # a third of the pods want GPUs (1, 2 or 4): 3,333 GPUs of 4,000 for 5,000 pods
            sizes = (1, 2, 0, 4, 0, 0, 0, 0, 1, 0, 0, 0)
            emu.create_many(
                PODS,
                [
                    make_pod(f"job-{i:05d}", gpus=sizes[i % len(sizes)], cpu="2", memory="8Gi")
                    for i in range(arg)
                ],
            )
            conn.send(None)
        elif cmd == "cpu":
            conn.send(time.process_time())
        elif cmd == "bound":
            conn.send(emu.server.call(lambda: len(store.bound_at)))
        elif cmd == "stats":
            conn.send(
                emu.server.call(
                    lambda: (
                        dict(store.created_at),
                        dict(store.bound_at),
                        {k: len(v) for k, v in store.bindings.items()},
                        dict(store.binding_posts),
                        _writes(emu.server.requests),
                    )
                )
            )
        elif cmd == "stop":
            emu.stop()
            conn.send(None)
            return


def _writes(requests: list[tuple[str, str]]) -> dict[str, int]:
    """Write requests the emulator received, by kind (pod PATCH, binding, Event, other)."""
    out: dict[str, int] = {}
    for method, path in requests:
        if method == "GET":
            continue
        if path.endswith("/binding"):
            kind = "binding"
        elif "/events" in path:
            kind = "event"
        elif "/pods/" in path:
            kind = f"pod {method}{' status' if path.endswith('/status') else ''}"
        else:
            kind = f"other {method}"
        out[kind] = out.get(kind, 0) + 1
    return out


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


async def _run(url: str, conn: Connection, args: argparse.Namespace) -> dict[str, Any]:
    from scheduler.kube.cli import Settings, serve
    from scheduler.kube.client import ClientOptions
    from scheduler.kube.scheduler import KubeScheduler, Options

    holder: list[KubeScheduler] = []
    settings = Settings(
        url=url,
        bind_address=None,
        client=ClientOptions(qps=args.qps, burst=args.qps, timeout=30.0),
        options=Options(event_workers=4),
        on_ready=lambda s, _: holder.append(s),
    )
    stop = asyncio.Event()
    task = asyncio.create_task(serve(settings, stop))
    while not holder or not holder[0].synced:
        await asyncio.sleep(0.05)
    sched = holder[0]
    conn.send(("cpu", None))
    emu_cpu0 = await asyncio.to_thread(conn.recv)
    cpu0 = time.process_time()
    conn.send(("pods", args.pods))
    await asyncio.to_thread(conn.recv)
    start = time.time()
    while True:
        conn.send(("bound", None))
        bound = await asyncio.to_thread(conn.recv)
        stuck = sched.queue.pending()["unschedulable"]
        if bound + stuck >= args.pods or time.time() - start > args.timeout:
            break
        await asyncio.sleep(0.2)
    wall = time.time() - start
    cpu = time.process_time() - cpu0
    conn.send(("cpu", None))
    emu_cpu = await asyncio.to_thread(conn.recv) - emu_cpu0
    outcomes = {
        s.labels["result"]: int(s.value)
        for s in sched.metrics.bind_results.collect()[0].samples
        if s.name.endswith("_total")
    }
    state = {
        "pending": sched.queue.pending(),
        "binding": len(sched.binding),
        "outcomes": outcomes,
        "wall_s": round(wall, 2),
        "scheduler_cpu_s": round(cpu, 2),
        "emulator_cpu_s": round(emu_cpu, 2),
    }
    stop.set()
    code = await task
    dropped = {
        s.labels["reason"]: int(s.value)
        for s in sched.metrics.events_dropped.collect()[0].samples
        if s.name.endswith("_total")
    }
    events = {
        "sent": sched.recorder.sent,
        "aggregated": sched.recorder.suppressed,
        "dropped": dropped,
    }
    return {
        "exit": code,
        "cycles": sched.metrics.algorithm_duration,
        "state": state,
        "events": events,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--qps", type=float, default=5000.0)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()

    from scheduler.logs import configure

    configure("warning")
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_emulator_process, args=(child,), daemon=True)
    proc.start()
    url = parent.recv()
    parent.send(("nodes", args.nodes))
    parent.recv()
    result = asyncio.run(_run(url, parent, args))
    parent.send(("stats", None))
    created, bound, bindings, posts, writes = parent.recv()
    parent.send(("stop", None))
    parent.recv()
    proc.join(10)

    latencies = [bound[k] - created[k] for k in bound]
    first = min(created.values())
    last = max(bound.values()) if bound else first
    rate = len(bound) / (last - first) if bound and last > first else 0.0
    twice = sum(1 for n in bindings.values() if n > 1)
    print(f"nodes={args.nodes} pods={args.pods} qps={args.qps:g}")
    print(f"bound: {len(bound)}/{args.pods} in {last - first:.2f} s = {rate:.0f} pods/s")
    if latencies:
        print(
            f"creation->binding latency: p50 {_pct(latencies, 50) * 1000:.0f} ms, "
            f"p99 {_pct(latencies, 99) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms"
        )
    hist = result["cycles"]
    samples = {s.name: s.value for s in hist.collect()[0].samples if not s.labels.get("le")}
    count = samples.get("scheduler_scheduling_algorithm_duration_seconds_count", 0.0)
    total = samples.get("scheduler_scheduling_algorithm_duration_seconds_sum", 0.0)
    if count:
        print(f"scheduling cycle: {count:.0f} cycles, mean {total / count * 1000:.2f} ms")
    print(f"scheduler state at the end: {result['state']}")
    print(f"events after the shutdown flush: {result['events']}")
    per_pod = sum(writes.values()) / max(len(bound), 1)
    print(f"API writes: {writes} ({per_pod:.2f} per bound pod)")
    print(
        f"binding POSTs: {sum(posts.values())}, pods bound more than once: {twice}, "
        f"scheduler exit code: {result['exit']}"
    )
    return 0 if len(bound) == args.pods and twice == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
