"""The devices held, counted per holder as claims change, equal the union recomputed from
every claim (assumed or API version) and in-flight allocation, admin access left out."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.dra import AllocationResult, DeviceID, DeviceResult, ResourceClaim
from scheduler.core.dra.state import DraState


def _claim(name: str, devices: list[tuple[int, bool]], version: int) -> ResourceClaim:
    allocation = None
    if devices:
        allocation = AllocationResult(
            tuple(
                DeviceResult("r", "d", "p", f"dev-{i}", admin_access=True if admin else None)
                for i, admin in devices
            )
        )
    return ResourceClaim(
        "ns", name, uid=f"uid-{name}", allocation=allocation, resource_version=str(version)
    )


def _union(dra: DraState) -> frozenset[DeviceID]:
    held: set[DeviceID] = set()
    claims = [*dra.all_claims()]
    claims += [c for c in (dra.pending(f"uid-c{i}") for i in range(3)) if c is not None]
    for claim in claims:
        if claim.allocation is not None:
            held.update(d.id for d in claim.allocation.devices if not d.admin_access)
    return frozenset(held)


op_st = st.tuples(
    st.sampled_from(["set", "remove", "assume", "restore", "pending", "done"]),
    st.integers(0, 2),
    st.lists(st.tuples(st.integers(0, 4), st.booleans()), max_size=3),
    st.integers(1, 4),
)


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(op_st, max_size=25))
def test_held_devices_equal_the_union(
    ops: list[tuple[str, int, list[tuple[int, bool]], int]],
) -> None:
    dra = DraState()
    for op, index, devices, version in ops:
        name = f"c{index}"
        claim = _claim(name, devices, version)
        if op == "set":
            dra.set_claim(claim)
        elif op == "remove":
            dra.remove(ResourceClaim, claim.key)
        elif op == "assume":
            dra.assume_claim(claim)
        elif op == "restore":
            dra.restore_claim(claim.key)
        elif op == "pending" and not dra.has_pending(claim.uid):
            dra.signal_pending(claim)
        elif op == "done":
            dra.remove_pending(claim.uid)
        assert dra.allocated_devices() == _union(dra)
