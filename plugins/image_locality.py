"""ImageLocality: favour nodes that already hold the pod's container images.

kube's formula: each image present on the node adds its size scaled by the share of nodes
that have it (so an image everywhere counts little), the sum is clamped between 23 MiB and
1000 MiB per container and mapped to 0..100. Names without a tag mean `:latest`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from scheduler.core.config import strict_mapping
from scheduler.core.framework import MAX_NODE_SCORE, CycleState
from scheduler.core.model import PodInfo
from scheduler.core.snapshot import BoolArray, IntArray, NodeState, Snapshot

NAME = "ImageLocality"
MB = 1024 * 1024
MIN_THRESHOLD = 23 * MB
MAX_CONTAINER_THRESHOLD = 1000 * MB


def _priority(sums: IntArray, containers: int) -> IntArray:
    top = MAX_CONTAINER_THRESHOLD * containers
    clamped = np.clip(sums, MIN_THRESHOLD, max(top, MIN_THRESHOLD))
    if top == MIN_THRESHOLD:
        return np.zeros_like(sums)
    return MAX_NODE_SCORE * (clamped - MIN_THRESHOLD) // (top - MIN_THRESHOLD)


class ImageLocality:
    name = NAME

    def score(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, feasible: BoolArray
    ) -> IntArray:
        scores = np.zeros(snapshot.capacity, np.int64)
        held = [h for h in map(snapshot.image_holders, pod.images) if h is not None]
        if not held:
            return scores  # no node has any of the images: every score is 0
        total = snapshot.live_count
        for slots, sizes in held:
            np.add.at(scores, slots, (sizes * (len(slots) / total)).astype(np.int64))
        return _priority(scores, pod.container_count)

    def normalize(self, state: CycleState, scores: IntArray, feasible: BoolArray) -> IntArray:
        return scores

    def score_nodes(
        self, pod: PodInfo, feasible: Sequence[NodeState], all_nodes: Sequence[NodeState]
    ) -> list[int]:
        holders: dict[str, int] = {}
        for node in all_nodes:
            for image in node.info.images:
                holders[image] = holders.get(image, 0) + 1
        total = len(all_nodes)
        out = []
        for node in feasible:
            total_size = 0
            for image in pod.images:
                size = node.info.images.get(image)
                if size is not None:
                    total_size += int(size * (holders[image] / total))
            top = MAX_CONTAINER_THRESHOLD * pod.container_count
            clamped = min(max(total_size, MIN_THRESHOLD), top) if top > MIN_THRESHOLD else 0
            out.append(
                MAX_NODE_SCORE * (clamped - MIN_THRESHOLD) // (top - MIN_THRESHOLD)
                if top > MIN_THRESHOLD
                else 0
            )
        return out

    def normalize_reference(self, scores: list[int]) -> list[int]:
        return scores


def new(args: Mapping[str, Any] | None, path: str) -> ImageLocality:
    strict_mapping(args, path, set())
    return ImageLocality()
