"""Helpers shared by the scheduling-core tests.

Every plugin helper runs BOTH forms of a plugin (the vectorised one over the snapshot and the
per-node reference one) and asserts they agree before returning the verdict, so each ported
upstream case also checks the two implementations against each other.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from plugins import frameworks_for  # noqa: E402
from scheduler.core.cache import Cache  # noqa: E402
from scheduler.core.config import load_config  # noqa: E402
from scheduler.core.framework import (
    CycleState,
    Framework,
    ScoreNormalizer,
)
from scheduler.core.model import NodeInfo, PodInfo  # noqa: E402
from tests.builders import cache_of, container, node, pod  # noqa: E402

__all__ = [
    "cache_of",
    "container",
    "filter_reasons",
    "framework",
    "node",
    "plugin_scores",
    "pod",
    "pod_info",
    "profile_config",
]

NO_GPU_PLUGINS: dict[str, Any] = {
    "filter": {"disabled": [{"name": "GPUTopology"}]},
    "score": {"disabled": [{"name": "GPUTopology"}]},
}


def profile_config(
    plugins: Mapping[str, Any] | None = None,
    plugin_config: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """A one-profile configuration mapping with GPUTopology disabled (it is not ours)."""
    merged: dict[str, Any] = {
        k: {"disabled": list(v["disabled"])} for k, v in NO_GPU_PLUGINS.items()
    }
    for point, value in (plugins or {}).items():
        entry = merged.setdefault(point, {})
        entry.setdefault("disabled", [])
        entry["disabled"] = [*entry["disabled"], *value.get("disabled", [])]
        if "enabled" in value:
            entry["enabled"] = list(value["enabled"])
    profile: dict[str, Any] = {"schedulerName": "topo-scheduler", "plugins": merged}
    if plugin_config:
        profile["pluginConfig"] = list(plugin_config)
    return {"profiles": [profile]}


def framework(
    plugins: Mapping[str, Any] | None = None,
    plugin_config: Sequence[Mapping[str, Any]] | None = None,
) -> Framework:
    config = load_config(profile_config(plugins, plugin_config))
    return frameworks_for(config)["topo-scheduler"]


def pod_info(name: str = "p", requests: dict[str, str] | None = None, **kw: Any) -> PodInfo:
    return PodInfo.from_object(pod(name, requests, **kw))


def node_info(name: str, **kw: Any) -> NodeInfo:
    return NodeInfo.from_object(node(name, **kw))


def _live(cache: Cache) -> list[int]:
    snap = cache.snapshot
    return sorted(snap.live_slots(), key=lambda s: snap.names[s] or "")


def filter_reasons(plugin: Any, p: PodInfo, cache: Cache) -> dict[str, list[str]]:
    """Reasons per node name (empty list: fits), asserting vector == reference."""
    snap = cache.snapshot
    slots = _live(cache)
    candidates = snap.live.copy()
    masks = plugin.filter(CycleState(), p, snap, candidates)
    vector = {snap.names[s]: [r for r, m in masks if m[s]] for s in slots}
    reference = {snap.names[s]: plugin.filter_node(p, snap.node_state(s)) for s in slots}
    assert vector == reference, (vector, reference)
    return {str(k): v for k, v in vector.items()}


def plugin_scores(plugin: Any, p: PodInfo, cache: Cache) -> dict[str, int] | None:
    """Normalized scores per node name over all live nodes, asserting vector == reference."""
    snap = cache.snapshot
    slots = _live(cache)
    feasible = snap.live.copy()
    raw = plugin.score(CycleState(), p, snap, feasible)
    states = [snap.node_state(s) for s in slots]
    ref_raw = plugin.score_nodes(p, states, states)
    if raw is None:
        assert ref_raw is None
        return None
    assert ref_raw is not None
    normalized = np.asarray(raw).copy()
    if isinstance(plugin, ScoreNormalizer):  # optional, as kube's ScoreExtensions
        normalized = plugin.normalize(CycleState(), normalized, feasible)
    vector = {str(snap.names[s]): int(normalized[s]) for s in slots}
    ref_norm = list(ref_raw)
    if hasattr(plugin, "normalize_reference"):
        ref_norm = plugin.normalize_reference(ref_norm)
    reference = {st.info.name: int(v) for st, v in zip(states, ref_norm, strict=True)}
    assert vector == reference, (vector, reference)
    return vector
