"""The simulator's policies: which scheduler picks the node and which device plugin hands
out the GPUs on it. Plain constants, so the command line can list them without loading the
simulator."""

from __future__ import annotations

__all__ = [
    "KUBE_FIRST_FREE",
    "KUBE_NVIDIA_DP",
    "POLICIES",
    "POLICY_ALIASES",
    "POLICY_CHOICES",
    "POLICY_DESCRIPTIONS",
    "TOPO",
    "TOPO_NVIDIA_DP",
    "expand_policies",
]

TOPO = "topo+topo-dp"
TOPO_NVIDIA_DP = "topo+nvidia-dp"
KUBE_NVIDIA_DP = "kube+nvidia-dp"
KUBE_FIRST_FREE = "kube+first-free"
POLICIES = (TOPO, TOPO_NVIDIA_DP, KUBE_NVIDIA_DP, KUBE_FIRST_FREE)
"""Scheduler + device plugin: who picks the node, who hands out the GPUs on it."""
POLICY_DESCRIPTIONS = {
    TOPO: "topo-scheduler + its device plugin (hands out the recorded GPU set)",
    TOPO_NVIDIA_DP: "topo-scheduler + NVIDIA's stock device plugin (its own besteffort pick)",
    KUBE_NVIDIA_DP: "kube-scheduler (GPUs counted) + NVIDIA's stock device plugin",
    KUBE_FIRST_FREE: "kube-scheduler (GPUs counted) + a device plugin giving the lowest free GPUs",
}
POLICY_ALIASES = {
    "topology": TOPO,
    "topology-dp": TOPO_NVIDIA_DP,
    "count-only": KUBE_NVIDIA_DP,
    "naive": KUBE_FIRST_FREE,
}
"""Earlier names, still accepted."""

_POLICY_SETS = {
    **{p: (p,) for p in POLICIES},
    **{alias: (p,) for alias, p in POLICY_ALIASES.items()},
    "both": (TOPO, KUBE_NVIDIA_DP),
    "all": POLICIES,
}
POLICY_CHOICES = tuple(_POLICY_SETS)
"""`--policy` values: each policy, the earlier names, `both` and `all`."""


def expand_policies(name: str) -> tuple[str, ...]:
    return _POLICY_SETS[name]
