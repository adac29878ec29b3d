"""`topo-scheduler agent`: publish this node's GPU topology and assignments (DaemonSet)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from types import FrameType
from typing import Any

from scheduler.agent.discovery import ReadFile, read_sysfs_file
from scheduler.agent.loop import Agent, AgentConfig
from scheduler.core.safeload import InputError, load_yaml, one_line, read_input
from scheduler.core.topology.schema import TopologyError

MAX_INTERVAL = 86_400.0
"""The longest --interval: a day (a longer wait is a mistake, and the wait has a limit)."""


def kubeconfig_problem(path: str) -> str | None:
    """Why a kubeconfig file cannot be used (one line naming it), or None."""
    try:
        data = load_yaml(read_input(path), path)
    except InputError as exc:
        return str(exc)
    if not isinstance(data, dict):
        return f"{path}: not a kubeconfig (a YAML mapping with clusters, users and contexts)"
    return None


def run_agent(args: argparse.Namespace) -> int:
    """Run the agent until SIGTERM/SIGINT (or once with --once)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if not 0 < args.interval <= MAX_INTERVAL:  # also false for nan
        print(
            f"agent: --interval must be a number of seconds > 0 and <= {MAX_INTERVAL:,}, "
            f"got {args.interval!r}",
            file=sys.stderr,
        )
        return 2
    if args.kubeconfig:
        problem = kubeconfig_problem(args.kubeconfig)
        if problem:
            print(f"agent: --kubeconfig {one_line(problem)}", file=sys.stderr)
            return 2
    nvml: Any
    read_file: ReadFile = read_sysfs_file
    if getattr(args, "fake_gpus", None) is not None:  # "" is an error, not real NVML
        from scheduler.agent.fakegpus import FakeNvml, parse_fake_gpus

        try:
            nvml = FakeNvml(parse_fake_gpus(args.fake_gpus), args.node_name)
        except TopologyError as exc:
            print(f"agent: {one_line(exc)}", file=sys.stderr)
            return 2
        read_file = nvml.read_file
    else:
        try:
            import pynvml
        except ImportError:
            print(
                "agent: the nvidia-ml-py package (module pynvml) is not installed", file=sys.stderr
            )
            return 1
        nvml = pynvml
    from scheduler.agent.kube import KubeNodeApi

    try:
        api = KubeNodeApi.connect(args.kubeconfig)
    except Exception as exc:  # any credential problem ends here with one line
        detail = " ".join(str(exc).split()) or type(exc).__name__
        if args.kubeconfig:  # the file given is not usable: a usage error, as for `run`
            print(f"agent: --kubeconfig {args.kubeconfig}: {detail}", file=sys.stderr)
            return 2
        print(f"agent: cannot load Kubernetes credentials: {detail}", file=sys.stderr)
        return 1
    config = AgentConfig(
        node_name=args.node_name,
        interval=args.interval,
        pod_resources_socket=args.pod_resources_socket,
    )
    stop = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return Agent(config, nvml, api, read_file=read_file).run(once=args.once, wait=stop.wait)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
