"""Command line: `topo-scheduler run | explain | simulate | agent | topology`.

Each subcommand parses its flags here and hands an argparse namespace to the adapter that
implements it; adapters are imported lazily so `explain` never loads the Kubernetes client.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _add_run(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("run", help="run the scheduler in a cluster")
    p.add_argument("--kubeconfig", help="kubeconfig path (default: in-cluster credentials)")
    cfg = p.add_mutually_exclusive_group()
    cfg.add_argument("--config", help="KubeSchedulerConfiguration file")
    cfg.add_argument(
        "--config-map",
        metavar="NAMESPACE/NAME",
        help="ConfigMap holding config.yaml, watched and applied live",
    )
    p.add_argument("--leader-elect", action="store_true", help="elect a leader with a Lease")
    p.add_argument("--leader-elect-namespace", default=None, help="namespace of the Lease")
    p.add_argument("--leader-elect-name", default="topo-scheduler", help="name of the Lease")
    p.add_argument("--bind-address", default="0.0.0.0:10259", metavar="HOST:PORT")
    p.add_argument("--kube-api-qps", type=float, default=50.0)
    p.add_argument("--kube-api-burst", type=int, default=100)


def _add_explain(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("explain", help="show how a pod would be scheduled on a snapshot")
    p.add_argument(
        "--snapshot", required=True, help="kubectl get nodes,pods,namespaces -A -o yaml output"
    )
    p.add_argument("--pod", required=True, help="Pod manifest")
    p.add_argument("--config", help="KubeSchedulerConfiguration file")
    p.add_argument("--output", choices=("table", "json"), default="table")


def _add_simulate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("simulate", help="replay a GPU cluster and a job trace")
    p.add_argument("scenario", nargs="?", help="scenario YAML (default: the bundled cluster)")
    p.add_argument(
        "--policy",
        choices=("topology", "topology-dp", "count-only", "naive", "both", "all"),
        default="both",
    )
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--output", choices=("table", "json"), default="table")
    p.add_argument("--plot", metavar="FILE.png")
    p.add_argument("--config", help="KubeSchedulerConfiguration for the topology policy")


def _add_agent(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("agent", help="publish this node's GPU topology (DaemonSet)")
    p.add_argument("--node-name", required=True)
    p.add_argument("--interval", type=float, default=60.0, metavar="SECONDS")
    p.add_argument("--kubeconfig")
    p.add_argument(
        "--pod-resources-socket",
        default="/var/lib/kubelet/pod-resources/kubelet.sock",
        help="kubelet PodResources socket; skipped when absent",
    )
    p.add_argument("--once", action="store_true", help="publish once and exit")


def _add_topology(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("topology", help="GPU topology tools")
    tsub = p.add_subparsers(dest="topology_command", required=True)
    f = tsub.add_parser("from-nvidia-smi", help="`nvidia-smi topo -m` text -> annotation JSON")
    f.add_argument("file", help="file with the output of `nvidia-smi topo -m` ('-' for stdin)")
    f.add_argument(
        "--numa",
        help="NUMA node of each GPU, comma separated, when the output lacks affinity columns",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="topo-scheduler", description="Topology-aware Kubernetes scheduler for GPU pods"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _add_run(sub)
    _add_explain(sub)
    _add_simulate(sub)
    _add_agent(sub)
    _add_topology(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _dispatch(build_parser().parse_args(argv))
    except BrokenPipeError:  # `... | head`: the reader left, nothing more to say
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        return 130


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "explain":
        from scheduler.explain import run_explain

        return int(run_explain(args))
    if args.command == "simulate":
        from scheduler.sim.cli import run_simulate

        return int(run_simulate(args))
    if args.command == "run":
        from scheduler.kube.cli import run_scheduler

        return int(run_scheduler(args))
    if args.command == "agent":
        from scheduler.agent.cli import run_agent

        return int(run_agent(args))
    if args.command == "topology":
        from scheduler.agent.topology_cli import run_topology

        return int(run_topology(args))
    raise AssertionError(args.command)


if __name__ == "__main__":
    sys.exit(main())
