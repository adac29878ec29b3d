"""`topo-scheduler topology from-nvidia-smi FILE [--numa 0,0,1,1]`: print the annotation JSON."""

from __future__ import annotations

import argparse
import json
import sys

from scheduler.core.safeload import InputError, one_line, read_input
from scheduler.core.topology.nvidia_smi import parse_numa_list, parse_nvidia_smi
from scheduler.core.topology.schema import TopologyError, topology_to_dict


def run_topology(args: argparse.Namespace) -> int:
    """Run a `topology` subcommand; exit 2 with a one-line message on bad input."""
    if args.topology_command != "from-nvidia-smi":
        print(f"topology: unknown command {args.topology_command!r}", file=sys.stderr)
        return 2
    source = "stdin" if args.file == "-" else args.file
    try:
        text = read_input(args.file, source)
    except InputError as exc:
        print(f"topology from-nvidia-smi: cannot read {one_line(exc)}", file=sys.stderr)
        return 2
    try:
        numa = parse_numa_list(args.numa) if args.numa else None
        topology = parse_nvidia_smi(text, numa=numa, source=source)
    except TopologyError as exc:
        print(f"topology from-nvidia-smi: {one_line(exc)}", file=sys.stderr)
        return 2
    print(json.dumps(topology_to_dict(topology), indent=2))
    return 0
