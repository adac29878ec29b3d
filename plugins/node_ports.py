"""NodePorts: a pod's host ports must be free on the node.

A port conflicts when protocol and port match and either side binds all addresses
(0.0.0.0, or no hostIP) or both bind the same address. Sidecar init containers' ports
count, as in kube-scheduler.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from scheduler.core.config import strict_mapping
from scheduler.core.framework import CycleState, ReasonMasks
from scheduler.core.model import HostPort, PodInfo
from scheduler.core.snapshot import BoolArray, NodeState, Snapshot

NAME = "NodePorts"
REASON = "node(s) didn't have free ports for the requested pod ports"
_ANY = "0.0.0.0"


def _conflicts(wanted: HostPort, used_ips: Iterable[str]) -> bool:
    ip = wanted.ip or _ANY
    ips = set(used_ips)
    if not ips:
        return False
    return ip == _ANY or _ANY in ips or ip in ips


class NodePorts:
    name = NAME

    def filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: BoolArray
    ) -> ReasonMasks:
        if not pod.host_ports:
            return []
        mask = np.zeros(snapshot.capacity, np.bool_)
        for wanted in pod.host_ports:
            for slot, ips in snapshot.port_index.get((wanted.protocol, wanted.port), {}).items():
                if _conflicts(wanted, ips):
                    mask[slot] = True
        return [(REASON, mask)]

    def filter_node(self, pod: PodInfo, node: NodeState) -> list[str]:
        used: dict[tuple[str, int], Counter[str]] = {}
        for other in node.pods:
            for port in other.host_ports:
                used.setdefault((port.protocol, port.port), Counter())[port.ip or _ANY] += 1
        for wanted in pod.host_ports:
            if _conflicts(wanted, used.get((wanted.protocol, wanted.port), Counter())):
                return [REASON]
        return []


def new(args: Mapping[str, Any] | None, path: str) -> NodePorts:
    strict_mapping(args, path, set())
    return NodePorts()
