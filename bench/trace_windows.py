"""Replay a trace in consecutive windows and compare the policies window by window.

One window can mislead either way, so a policy is judged on every window of the trace:

    python bench/trace_windows.py --trace ../shared/traces/philly_pollux.csv \
        --cluster examples/trace-cluster-queues.yaml --window-hours 24 --jobs 2

prints, per window, each job size's mean completion under topo-scheduler over
kube-scheduler + NVIDIA's plugin (a multi-node job's workers together, sized by all their
GPUs: `by_job_size`), the overall mean, the gang wait, the pods left unfinished at the end
(topo / kube: their jobs have no completion), and whether the window meets the rule "every
job size present within --tolerance of kube, overall no longer, 8-GPU jobs no slower". Each
window is one `topo-scheduler simulate --output json` process.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from scheduler.sim.policies import KUBE_NVIDIA_DP as KUBE
from scheduler.sim.policies import TOPO


def trace_span(path: Path) -> float:
    with path.open(newline="") as f:
        arrivals = [float(row["arrival_s"]) for row in csv.DictReader(f)]
    return max(arrivals) - min(arrivals)


def simulate(args: argparse.Namespace, start: int, end: int) -> dict[str, Any]:
    command = [
        sys.executable,
        "-m",
        "scheduler.cli",
        "simulate",
        "--trace",
        str(args.trace),
        "--cluster",
        str(args.cluster),
        "--window",
        f"{start}:{end}",
        "--output",
        "json",
        *args.extra,
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]}
    policies: dict[str, Any] = json.loads(done.stdout)["policies"]
    return policies


def completion(policy: dict[str, Any], size: str | None = None) -> float | None:
    """Mean completion of the jobs of one size (a multi-node job's workers together), or of
    every GPU job."""
    block = policy if size is None else policy["by_job_size"].get(size)
    if block is None:
        return None
    key = "job_completion_seconds" if size is None else "completion_seconds"
    stats = block.get(key) or {}
    return stats.get("mean") if stats.get("jobs") else None


def unfinished(policy: dict[str, Any]) -> int:
    """Pods still pending or running at the end: their jobs have no completion to compare."""
    pods = policy.get("pods") or {}
    return int(pods.get("pending", 0)) + int(pods.get("running", 0))


def gang_wait(policy: dict[str, Any]) -> float | None:
    gangs = policy.get("gangs") or {}
    wait = gangs.get("wait_seconds") or {}
    return wait.get("mean")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, required=True)
    parser.add_argument("--cluster", type=Path, required=True)
    parser.add_argument("--window-hours", type=float, default=24.0)
    parser.add_argument("--jobs", type=int, default=2, help="windows replayed at once")
    parser.add_argument("--tolerance", type=float, default=1.10)
    parser.add_argument(
        "--sizes", default="1,2,4,8,16,32", help="job sizes shown; every size present is judged"
    )
    parser.add_argument("--save", type=Path, help="write each window's JSON into this folder")
    parser.add_argument("extra", nargs="*", help="more `simulate` flags, after --")
    args = parser.parse_args()
    step = int(args.window_hours * 3600)
    count = int(trace_span(args.trace) // step) or 1
    windows = [(i * step, (i + 1) * step) for i in range(count)]
    sizes = args.sizes.split(",")
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda w: simulate(args, *w), windows))
    if args.save is not None:
        args.save.mkdir(parents=True, exist_ok=True)
        for (start, _), result in zip(windows, results, strict=True):
            (args.save / f"{start}.json").write_text(json.dumps(result))

    header = (
        ["window"]
        + [f"{s}-GPU" for s in sizes]
        + ["all", "topo all s", "kube all s", "gang wait topo/kube s", "unfinished", "ok"]
    )
    print(" | ".join(header))
    passed = 0
    for (start, end), result in zip(windows, results, strict=True):
        label = f"{start}:{end}"
        if "error" in result:
            print(f"{label} | error: {result['error']}")
            continue
        topo, kube = result[TOPO], result[KUBE]
        cells, ok = [], True
        present = set(topo["by_job_size"]) | set(kube["by_job_size"])
        for size in sorted(set(sizes) | present, key=int):
            t, k = completion(topo, size), completion(kube, size)
            if t is None or k is None or k == 0:
                if size in sizes:
                    cells.append("-")
                continue
            ratio = t / k
            if size in sizes:
                cells.append(f"{ratio:.2f}")
            ok &= ratio <= (1.0 if size == "8" else args.tolerance)
        left = f"{unfinished(topo)} / {unfinished(kube)}"
        t_all, k_all = completion(topo), completion(kube)
        ratio_all = (t_all or 0.0) / k_all if k_all else float("nan")
        ok &= ratio_all <= 1.0
        gt, gk = gang_wait(topo), gang_wait(kube)
        gangs = "-" if gt is None or gk is None else f"{gt:,.0f} / {gk:,.0f}"
        passed += ok
        print(
            " | ".join(
                [
                    label,
                    *cells,
                    f"{ratio_all:.2f}",
                    f"{t_all or 0:,.0f}",
                    f"{k_all or 0:,.0f}",
                    gangs,
                    left,
                    "yes" if ok else "NO",
                ]
            )
        )
    print(f"{passed} of {len(windows)} windows meet the rule")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
