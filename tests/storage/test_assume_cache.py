"""The storage cache's assumptions (kube's assume cache) and VolumeBinding's Reserve/Unreserve."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.core.cycle import drive
from scheduler.core.framework import CycleState
from scheduler.core.model import PodInfo
from scheduler.core.storage import (
    ANN_SELECTED_NODE,
    AssumeError,
    PersistentVolume,
    PersistentVolumeClaim,
    StorageState,
)
from tests.builders import node, pod
from tests.core.core_support import framework

from .objects import HOSTNAME, claim_volume, pv, pvc, storage_class
from .test_volume_plugins import cluster


def _versioned(obj: dict, rv: str) -> dict:
    obj["metadata"]["resourceVersion"] = rv
    return obj


def test_assumption_shadows_the_api_until_a_newer_version_arrives() -> None:
    state = StorageState()
    state.set_volume(PersistentVolume.from_object(_versioned(pv("v"), "5")))
    claim = PersistentVolumeClaim.from_object(_versioned(pvc("c"), "3"))
    state.set_claim(claim)
    bound = state.volumes["v"].bind_to(claim)
    state.assume_volume(bound)
    assert state.volume("v") == bound and state.volumes["v"].claim_ref is None
    state.set_volume(PersistentVolume.from_object(_versioned(pv("v"), "4")))  # older: kept
    assert state.is_assumed_volume("v")
    state.set_volume(PersistentVolume.from_object(_versioned(pv("v"), "6")))  # newer: replaces
    assert not state.is_assumed_volume("v") and state.volume("v") == state.volumes["v"]
    with pytest.raises(AssumeError, match="older than 6"):
        state.assume_volume(replace(bound, resource_version="5"))
    with pytest.raises(AssumeError, match='persistentvolumeclaim "default/x" not found'):
        state.assume_claim(replace(claim, name="x"))
    annotated = replace(claim, annotations={ANN_SELECTED_NODE: "a"})
    state.assume_claim(annotated)
    assert state.claim("default", "c") == annotated
    state.restore_claim("default/c")
    assert state.claim("default", "c") == claim


def test_reserve_assumes_choices_and_unreserve_reverts_them() -> None:
    cache = cluster(
        [node("a", labels={HOSTNAME: "a"}), node("b", labels={HOSTNAME: "b"})],
        [
            storage_class("local"),
            storage_class("csi", provisioner="csi.example"),
            pv("small", class_name="local", size="2Gi", hosts=("a",)),
            pv("big", class_name="local", size="20Gi", hosts=("a",)),
            pvc("static", class_name="local", size="1Gi"),
            pvc("dynamic", class_name="csi"),
        ],
    )
    p = PodInfo.from_object(
        pod(
            "p",
            {"cpu": "1"},
            spec={"volumes": [claim_volume("s", "static"), claim_volume("d", "dynamic")]},
        )
    )
    fw = framework()
    state = CycleState()
    result = fw.schedule(p, cache.snapshot, state)
    assert result.node == "a"
    storage = cache.snapshot.storage
    assert fw.run_reserve(state, p, "a") is None
    chosen = storage.volume("small")  # the smallest PV that fits
    assert chosen is not None and chosen.claim_ref is not None and chosen.claim_ref.name == "static"
    assert chosen.annotations == {"pv.kubernetes.io/bound-by-controller": "yes"}
    dynamic = storage.claim("default", "dynamic")
    assert dynamic is not None and dynamic.annotations[ANN_SELECTED_NODE] == "a"
    fw.run_unreserve(state, p, "a")
    assert not storage.is_assumed_volume("small") and not storage.is_assumed_claim(
        "default/dynamic"
    )
    assert storage.volumes["small"].claim_ref is None
    assert ANN_SELECTED_NODE not in storage.claims["default/dynamic"].annotations


def test_assumed_pv_is_not_offered_to_another_claim() -> None:
    cache = cluster(
        [node("a", labels={HOSTNAME: "a"})],
        [
            storage_class("local"),
            pv("only", class_name="local", hosts=("a",)),
            pvc("c1", class_name="local"),
            pvc("c2", class_name="local"),
        ],
    )
    fw = framework()
    first = PodInfo.from_object(
        pod("p1", {"cpu": "1"}, spec={"volumes": [claim_volume("v", "c1")]})
    )
    state = CycleState()
    assert fw.schedule(first, cache.snapshot, state).node == "a"
    assert fw.run_reserve(state, first, "a") is None
    second = PodInfo.from_object(
        pod("p2", {"cpu": "1"}, spec={"volumes": [claim_volume("v", "c2")]})
    )
    result = fw.schedule(second, cache.snapshot, CycleState())
    assert result.node is None
    assert result.node_reasons(0) == ["node(s) didn't find available persistent volumes to bind"]
    # a dry run (no writer) writes nothing and leaves nothing assumed
    assert drive(fw.run_pre_bind(state, first, "a")) is None
    assert not cache.snapshot.storage.is_assumed_volume("only")


@pytest.mark.parametrize(
    ("volumes", "chosen"),
    [
        # the smallest fitting PV wins, local (hostname) PVs and others compared together
        (
            [("local-5", "5Gi", True), ("zonal-3", "3Gi", False), ("local-2", "2Gi", True)],
            "local-2",
        ),
        ([("local-5", "5Gi", True), ("zonal-3", "3Gi", False)], "zonal-3"),
        # too small for the 2Gi claim
        ([("local-1", "1Gi", True), ("zonal-9", "9Gi", False)], "zonal-9"),
    ],
)
def test_smallest_matching_pv_is_chosen(volumes: list[tuple[str, str, bool]], chosen: str) -> None:
    rack = [{"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}]
    objects = [storage_class("local"), pvc("c", class_name="local", size="2Gi")]
    for name, size, local in volumes:
        objects.append(
            pv(
                name,
                class_name="local",
                size=size,
                hosts=("a",) if local else (),
                affinity=None if local else rack,
            )
        )
    cache = cluster([node("a", labels={HOSTNAME: "a", "rack": "r1"})], objects)
    p = PodInfo.from_object(pod("p", {"cpu": "1"}, spec={"volumes": [claim_volume("v", "c")]}))
    fw = framework()
    state = CycleState()
    assert fw.schedule(p, cache.snapshot, state).node == "a"
    assert fw.run_reserve(state, p, "a") is None
    storage = cache.snapshot.storage
    assert [n for n, *_ in volumes if storage.is_assumed_volume(n)] == [chosen]
