"""`topo-scheduler agent`: publish this node's GPU topology and assignments (DaemonSet)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from types import FrameType

from scheduler.agent.loop import Agent, AgentConfig


def run_agent(args: argparse.Namespace) -> int:
    """Run the agent until SIGTERM/SIGINT (or once with --once)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if args.interval <= 0:
        print("agent: --interval must be positive", file=sys.stderr)
        return 2
    try:
        import pynvml
    except ImportError:
        print("agent: the nvidia-ml-py package (module pynvml) is not installed", file=sys.stderr)
        return 1
    from scheduler.agent.kube import KubeNodeApi

    try:
        api = KubeNodeApi.connect(args.kubeconfig)
    except Exception as exc:  # any credential problem ends here with one line
        print(f"agent: cannot load Kubernetes credentials: {exc}", file=sys.stderr)
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
        return Agent(config, pynvml, api).run(once=args.once, wait=stop.wait)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
