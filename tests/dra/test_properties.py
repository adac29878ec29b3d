"""Properties of the allocator on random small clusters: any allocation returned satisfies
every selector, count and constraint, tolerates every taint and never uses a device twice
nor one already allocated; and it finds one whenever an exhaustive enumeration does."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.dra import Allocator, CelCache, DeviceID, Features
from tests.dra.builders import (
    cel,
    claim,
    device,
    device_class,
    match_attribute,
    node,
    request,
    resource_slice,
)

A = "driver-a"
NODE = node("node-1", "region-1")
CEL = CelCache()
CLASS = device_class("class-a", A)
SELECTORS: dict[str, Callable[[dict[str, Any]], bool]] = {
    'device.attributes["driver-a"].numa == 0': lambda d: d["numa"] == 0,
    'device.capacity["driver-a"].memory.compareTo(quantity("2Gi")) >= 0': lambda d: d["mem"] >= 2,
    'device.attributes["driver-a"].model.startsWith("h")': lambda d: d["model"].startswith("h"),
}
TAINT = {"key": "broken", "value": "yes", "effect": "NoSchedule"}
TOLERATION = {"key": "broken", "operator": "Exists"}

devices_st = st.lists(
    st.fixed_dictionaries(
        {
            "numa": st.integers(0, 1),
            "mem": st.integers(1, 3),
            "model": st.sampled_from(["h100", "a100"]),
            "tainted": st.booleans(),
            "held": st.booleans(),
        }
    ),
    min_size=1,
    max_size=6,
)
requests_st = st.lists(
    st.tuples(
        st.integers(1, 3), st.lists(st.sampled_from(sorted(SELECTORS)), max_size=2, unique=True)
    ),
    min_size=1,
    max_size=2,
)


@settings(max_examples=150, deadline=None)
@given(
    devs=devices_st,
    reqs=requests_st,
    constrain=st.booleans(),
    tolerate=st.booleans(),
    pools=st.integers(1, 2),
)
def test_allocation_is_valid_and_complete(
    devs: list[dict[str, Any]],
    reqs: list[tuple[int, list[str]]],
    constrain: bool,
    tolerate: bool,
    pools: int,
) -> None:
    names = [f"dev-{i}" for i in range(len(devs))]
    pool_of = [f"pool-{i % pools}" for i in range(len(devs))]
    slices = []
    for p in sorted(set(pool_of)):
        members = [
            device(
                names[i],
                attributes={"numa": d["numa"], "model": d["model"]},
                capacity={"memory": f"{d['mem']}Gi"},
                taints=[TAINT] if d["tainted"] else [],
            )
            for i, d in enumerate(devs)
            if pool_of[i] == p
        ]
        slices.append(resource_slice(f"slice-{p}", "node-1", p, A, *members))
    held = frozenset(DeviceID(A, pool_of[i], names[i]) for i, d in enumerate(devs) if d["held"])
    tolerations = [TOLERATION] if tolerate else []
    the_claim = claim(
        "c",
        *(
            request(f"r{j}", "class-a", n, *(cel(s) for s in sel), tolerations=tolerations)
            for j, (n, sel) in enumerate(reqs)
        ),
        constraints=[match_attribute("driver-a/numa")] if constrain else [],
    )
    allocator = Allocator({CLASS.name: CLASS}, slices, held, features=Features(), cel=CEL)
    results = allocator.allocate(NODE, [the_claim])

    def fits(i: int, j: int) -> bool:
        d = devs[i]
        if d["held"] or (d["tainted"] and not tolerate):
            return False
        return all(SELECTORS[s](d) for s in reqs[j][1])

    def possible() -> bool:
        slots = [j for j, (n, _) in enumerate(reqs) for _ in range(n)]
        for chosen in itertools.permutations(range(len(devs)), len(slots)):
            if all(fits(i, j) for i, j in zip(chosen, slots, strict=True)) and (
                not constrain or len({devs[i]["numa"] for i in chosen}) == 1
            ):
                return True
        return False

    if results is None:
        assert not possible()
        return
    (result,) = results
    index = {(pool_of[i], names[i]): i for i in range(len(devs))}
    used = [index[(d.pool, d.device)] for d in result.devices]
    assert len(used) == len(set(used)), "a device is used twice"
    for j, (n, _) in enumerate(reqs):
        mine = [index[(d.pool, d.device)] for d in result.devices if d.request == f"r{j}"]
        assert len(mine) == n
        assert all(fits(i, j) for i in mine)
    if constrain:
        assert len({devs[i]["numa"] for i in used}) == 1
