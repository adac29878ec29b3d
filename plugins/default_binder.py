"""DefaultBinder (Bind): hands the pod, its node and its GPU set to the front end's binder
(a pods/binding request whose annotations carry the set, the simulator's cluster, or explain's
dry run), as kube-scheduler's DefaultBinder posts the Binding."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.core.config import strict_mapping
from scheduler.core.framework import ALLOCATION_KEY, Allocation, Binder, BindResult, CycleState
from scheduler.core.model import PodInfo

NAME = "DefaultBinder"


class DefaultBinder:
    name = NAME

    async def bind(
        self, state: CycleState, pod: PodInfo, node: str, binder: Binder
    ) -> BindResult | None:
        allocation: Allocation | None = state.get(ALLOCATION_KEY)
        return await binder.bind(pod, node, allocation.gpus if allocation else ())


def new(args: Mapping[str, Any] | None, path: str) -> DefaultBinder:
    strict_mapping(args, path, set())
    return DefaultBinder()
