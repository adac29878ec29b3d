"""Command line: `topo-scheduler run | explain | simulate | agent | device-plugin | topology`.

Each subcommand parses its flags here and hands an argparse namespace to the adapter that
implements it; adapters are imported lazily so `explain` never loads the Kubernetes client.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from scheduler.core.decode import go_parse_int, parse_decimal


class _OneLineParser(argparse.ArgumentParser):
    """A flag error is one line naming the flag (argparse would print the usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _integer(text: str) -> int:
    """argparse type: a plain decimal integer (Python's int() would also take ``1_0``)."""
    value = go_parse_int(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}")
    return value


def _number(text: str) -> float:
    """argparse type: a finite decimal number (float() would also take ``nan``, ``1_0``)."""
    value = parse_decimal(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def _add_run(sub: argparse._SubParsersAction[_OneLineParser]) -> None:
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
    p.add_argument(
        "--bind-address",
        default="0.0.0.0:10259",
        metavar="HOST:PORT",
        help="where /healthz, /readyz and /metrics are served (HTTPS unless --insecure-plain-http)",
    )
    p.add_argument(
        "--tls-cert-file",
        metavar="FILE",
        help="PEM certificate (chain) for HTTPS; default: a self-signed one made at start",
    )
    p.add_argument("--tls-private-key-file", metavar="FILE", help="PEM key of --tls-cert-file")
    p.add_argument(
        "--insecure-plain-http",
        action="store_true",
        help="development only: plain HTTP, /metrics without authentication",
    )
    p.add_argument(
        "--kube-api-qps",
        type=_number,
        default=50.0,
        help="scheduling client's QPS (bindings first)",
    )
    p.add_argument("--kube-api-burst", type=_integer, default=100, help="scheduling client's burst")
    p.add_argument(
        "--events-qps",
        type=_number,
        default=None,
        help="event client's own QPS (default: --kube-api-qps, a separate budget)",
    )
    p.add_argument(
        "--events-burst",
        type=_integer,
        default=None,
        help="event client's burst (default: --kube-api-burst)",
    )
    p.add_argument(
        "--startup-timeout",
        type=_number,
        default=60.0,
        metavar="SECONDS",
        help="how long to wait for the API server at startup before exiting 1 (default 60)",
    )


def _add_explain(sub: argparse._SubParsersAction[_OneLineParser]) -> None:
    p = sub.add_parser("explain", help="show how a pod would be scheduled on a snapshot")
    p.add_argument(
        "--snapshot", required=True, help="kubectl get nodes,pods,namespaces -A -o yaml output"
    )
    p.add_argument("--pod", required=True, help="Pod manifest")
    p.add_argument("--config", help="KubeSchedulerConfiguration file")
    p.add_argument("--output", choices=("table", "json"), default="table")


def _add_simulate(sub: argparse._SubParsersAction[_OneLineParser]) -> None:
    from scheduler.sim.policies import POLICY_CHOICES

    p = sub.add_parser("simulate", help="replay a GPU cluster and a job trace")
    p.add_argument("scenario", nargs="?", help="scenario YAML (default: the bundled cluster)")
    p.add_argument(
        "--policy",
        choices=POLICY_CHOICES,
        default="both",
        help="scheduler+device plugin: topo+topo-dp, topo+nvidia-dp, kube+nvidia-dp, "
        "kube+first-free (earlier names topology, topology-dp, count-only, naive), both "
        "(topo+topo-dp and kube+nvidia-dp) or all",
    )
    p.add_argument("--seed", type=_integer, default=None)
    p.add_argument("--output", choices=("table", "json"), default="table")
    p.add_argument("--plot", metavar="FILE.png")
    p.add_argument("--config", help="KubeSchedulerConfiguration for the topo+ policies")
    p.add_argument("--trace", metavar="FILE.csv", help="job trace to replay (neutral CSV)")
    p.add_argument("--cluster", metavar="SCENARIO.yaml", help="the nodes to replay --trace on")
    p.add_argument(
        "--window",
        metavar="START:END",
        help="replay the trace's jobs arriving START..END seconds after its first arrival",
    )
    p.add_argument(
        "--no-preemption",
        action="store_true",
        help="turn DefaultPreemption off (on by default, as in kube-scheduler)",
    )
    p.add_argument(
        "--gang-reservation",
        metavar="SECONDS",
        type=_number,
        default=None,
        help="topo+ policies: hold capacity for a pod group that would fit once running pods "
        "end, each reservation for at most SECONDS (0: none; default: the configuration's "
        "GPUTopology gangReservationSeconds, 0 when it sets none)",
    )
    p.add_argument(
        "--gpu-request",
        choices=("extended", "dra"),
        default=None,
        help="how GPU jobs ask for GPUs and GPU nodes publish them, unless they say: "
        "nvidia.com/gpu (extended) or a ResourceClaim on NVIDIA's DRA driver's slices (dra); "
        "default: the scenario's gpuRequest",
    )


def _add_agent(sub: argparse._SubParsersAction[_OneLineParser]) -> None:
    p = sub.add_parser("agent", help="publish this node's GPU topology (DaemonSet)")
    p.add_argument("--node-name", required=True)
    p.add_argument("--interval", type=_number, default=60.0, metavar="SECONDS")
    p.add_argument("--kubeconfig")
    p.add_argument(
        "--pod-resources-socket",
        default="/var/lib/kubelet/pod-resources/kubelet.sock",
        help="kubelet PodResources socket; skipped when absent",
    )
    p.add_argument("--once", action="store_true", help="publish once and exit")
    _add_fake_gpus(p)


def _add_fake_gpus(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--fake-gpus",
        metavar="TOPOLOGY[:fail=I,J]",
        help="no NVML: a fake node with a built-in topology (dgx-a100, dgx-h100, dgx1-v100, "
        "dgx2-v100, pcie-8gpu-2socket, pcie-4gpu, all-sys-2numa); fail= makes those GPUs' "
        "NVML calls fail",
    )


def _add_device_plugin(sub: argparse._SubParsersAction[_OneLineParser]) -> None:
    p = sub.add_parser(
        "device-plugin", help="kubelet device plugin handing pods their recorded GPU set"
    )
    p.add_argument("--node-name", required=True)
    p.add_argument("--kubeconfig", help="kubeconfig path (default: in-cluster credentials)")
    p.add_argument(
        "--device-plugin-dir",
        default="/var/lib/kubelet/device-plugins",
        help="the kubelet's device plugin directory; must exist and be writable",
    )
    p.add_argument(
        "--pod-resources-socket",
        default="/var/lib/kubelet/pod-resources/kubelet.sock",
        help="the kubelet's PodResources socket (tells which pod holds which GPUs)",
    )
    p.add_argument(
        "--resource-name",
        help="extended resource to serve (default nvidia.com/gpu); must equal the scheduler "
        "profile's GPU resource",
    )
    p.add_argument(
        "--device-list-strategy",
        choices=("envvar", "cdi-cri"),
        default="envvar",
        help="envvar: NVIDIA_VISIBLE_DEVICES=<uuids>; cdi-cri: CDI names nvidia.com/gpu=<uuid>",
    )
    p.add_argument("--metrics-bind-address", default="0.0.0.0:10270", metavar="HOST:PORT")
    _add_fake_gpus(p)


def _add_topology(sub: argparse._SubParsersAction[_OneLineParser]) -> None:
    p = sub.add_parser("topology", help="GPU topology tools")
    tsub = p.add_subparsers(dest="topology_command", required=True)
    f = tsub.add_parser("from-nvidia-smi", help="`nvidia-smi topo -m` text -> annotation JSON")
    f.add_argument("file", help="file with the output of `nvidia-smi topo -m` ('-' for stdin)")
    f.add_argument(
        "--numa",
        help="NUMA node of each GPU, comma separated, when the output lacks affinity columns",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
        prog="topo-scheduler", description="Topology-aware Kubernetes scheduler for GPU pods"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _add_run(sub)
    _add_explain(sub)
    _add_simulate(sub)
    _add_agent(sub)
    _add_device_plugin(sub)
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
    if args.command == "device-plugin":
        from scheduler.agent.deviceplugin.cli import run_device_plugin

        return int(run_device_plugin(args))
    if args.command == "topology":
        from scheduler.agent.topology_cli import run_topology

        return int(run_topology(args))
    raise AssertionError(args.command)


if __name__ == "__main__":
    sys.exit(main())
