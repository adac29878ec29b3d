"""Objects the scheduler cannot read whole: a pod bound to a node counts
with every resource it holds whatever else it says; what cannot be read of it is reported,
recorded in `PodInfo.unreadable` and left at its neutral default. A pending pod stays strict.
A node that cannot be read takes no pods while its pods still count."""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from core_support import cache_of, container, filter_reasons, node, pod

from plugins import frameworks_for, node_resources_fit
from scheduler.core.cache import Cache
from scheduler.core.config import default_config
from scheduler.core.model import ModelError, NodeInfo, PodInfo
from scheduler.core.podaffinity import PodAffinity
from scheduler.core.topology import ANNOTATION_TOPOLOGY, builtin_topology, format_topology
from scheduler.explain import ExplainError, explain, load_cluster, load_pod

Obj = dict[str, Any]
GPUS = {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "8"}
HELD = {"cpu": 4000, "memory": 8 * 2**30, "nvidia.com/gpu": 8}
TOPOLOGY = {ANNOTATION_TOPOLOGY: format_topology(builtin_topology("dgx-h100"))}


def _theirs(**kw: Any) -> Obj:
    """Another scheduler's 8-GPU pod, bound and running on node n, with a GPU record."""
    obj = pod(
        "theirs",
        GPUS,
        node_name="n",
        scheduler_name="default-scheduler",
        phase="Running",
        annotations={"topo-scheduler.io/gpus": "0,1,2,3,4,5,6,7", "team": "a"},
        **kw,
    )
    obj["metadata"]["labels"] = {"app": "train"}
    return obj


def _set(path: str, value: Any) -> Callable[[Obj], None]:
    """A breaker: set the value at a dotted path (list indices as numbers)."""

    def apply(obj: Obj) -> None:
        *parents, last = path.split(".")
        target: Any = obj
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target.setdefault(part, {})
        target[last] = value

    return apply


def _annotate(key: str, value: Any) -> Callable[[Obj], None]:
    def apply(obj: Obj) -> None:
        obj["metadata"]["annotations"][key] = value

    return apply


GROUP = "topo-scheduler.io/pod-group"
MIN = "topo-scheduler.io/min-member"

# (case, breaker, field named in the error, what the part reads as when left out)
CASES: list[tuple[str, Callable[[Obj], None], str, Callable[[PodInfo], bool]]] = [
    ("group without min-member", _annotate(GROUP, "g"), MIN, lambda p: p.pod_group is None),
    (
        "min-member not a number",
        lambda o: (_annotate(GROUP, "g")(o), _annotate(MIN, "abc")(o)),
        MIN,
        lambda p: p.pod_group is None,
    ),
    (
        "min-member a non-ASCII digit",
        lambda o: (_annotate(GROUP, "g")(o), _annotate(MIN, "²")(o)),
        MIN,
        lambda p: p.pod_group is None,
    ),
    (
        "min-member of 5000 digits",
        lambda o: (_annotate(GROUP, "g")(o), _annotate(MIN, "9" * 5000)(o)),
        MIN,
        lambda p: p.pod_group is None,
    ),
    (
        "topology-required blank",
        lambda o: (
            _annotate(GROUP, "g")(o),
            _annotate(MIN, "2")(o),
            _annotate("topo-scheduler.io/topology-required", " ")(o),
        ),
        "topo-scheduler.io/topology-required",
        lambda p: p.pod_group is None,
    ),
    (
        "topology-preferred empty",
        lambda o: (
            _annotate(GROUP, "g")(o),
            _annotate(MIN, "2")(o),
            _annotate("topo-scheduler.io/topology-preferred", "")(o),
        ),
        "topo-scheduler.io/topology-preferred",
        lambda p: p.pod_group is None,
    ),
    (
        "non-string annotation value",
        _annotate(GROUP, 5),
        f"metadata.annotations.{GROUP}: must be a string",
        # the other annotations are kept: the GPU record among them
        lambda p: (
            GROUP not in p.annotations
            and p.annotations["topo-scheduler.io/gpus"] == "0,1,2,3,4,5,6,7"
            and p.pod_group is None
        ),
    ),
    (
        "annotations not a mapping",
        _set("metadata.annotations", ["x"]),
        "metadata.annotations: must be a mapping",
        lambda p: p.annotations == {},
    ),
    (
        "non-string label value",
        _set("metadata.labels.tier", 3),
        "metadata.labels.tier: must be a string",
        lambda p: dict(p.labels) == {"app": "train"},
    ),
    (
        "node affinity not a mapping",
        _set("spec.affinity.nodeAffinity", "any"),
        "spec.affinity.nodeAffinity: must be a mapping",
        lambda p: p.required_affinity is None and p.preferred_affinity == (),
    ),
    (
        "pod anti-affinity without topologyKey",
        _set(
            "spec.affinity.podAntiAffinity",
            {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {}}]},
        ),
        "topologyKey: can not be empty",
        lambda p: p.pod_affinity == PodAffinity(),
    ),
    (
        "affinity not a mapping",
        _set("spec.affinity", 7),
        "spec.affinity: must be a mapping",
        lambda p: p.required_affinity is None and p.pod_affinity == PodAffinity(),
    ),
    (
        "spread constraint with maxSkew 0",
        _set(
            "spec.topologySpreadConstraints",
            [{"maxSkew": 0, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}],
        ),
        "spec.topologySpreadConstraints[0].maxSkew",
        lambda p: p.spread_constraints == (),
    ),
    (
        "toleration not a mapping",
        _set("spec.tolerations", [{"key": "a", "operator": "Exists"}, "b"]),
        "spec.tolerations[1]: must be a mapping",
        lambda p: p.tolerations == (),
    ),
    (
        "toleration key not a string",
        _set("spec.tolerations", [{"key": 1}]),
        "spec.tolerations[0].key: must be a string",
        lambda p: p.tolerations == (),
    ),
    (
        "nodeSelector value not a string",
        _set("spec.nodeSelector", {"zone": "a", "rack": 1}),
        "spec.nodeSelector.rack: must be a string",
        lambda p: p.node_selector == (("zone", "a"),),
    ),
    (
        "creationTimestamp not a time",
        _set("metadata.creationTimestamp", "yesterday"),
        "metadata.creationTimestamp: must be an RFC 3339 time",
        lambda p: p.creation_timestamp == 0.0,
    ),
    (
        "deletionTimestamp not a time",
        _set("metadata.deletionTimestamp", 12),
        "metadata.deletionTimestamp: must be an RFC 3339 time",
        lambda p: p.deletion_timestamp is None,
    ),
    (
        "startTime not a time",
        _set("status.startTime", "soon"),
        "status.startTime: must be an RFC 3339 time",
        lambda p: p.start_time is None,
    ),
    (
        "conditions not a list",
        _set("status.conditions", {"type": "Ready"}),
        "status.conditions: must be a list",
        lambda p: p.preempted is False,
    ),
    (
        "phase not a string",
        _set("status.phase", 3),
        "status.phase: must be a string",
        lambda p: p.phase == "" and not p.terminal,
    ),
    (
        "nominatedNodeName not a string",
        _set("status.nominatedNodeName", ["n"]),
        "status.nominatedNodeName: must be a string",
        lambda p: p.nominated_node_name is None,
    ),
    (
        "schedulerName not a string",
        _set("spec.schedulerName", 1),
        "spec.schedulerName: must be a string",
        lambda p: p.scheduler_name == "default-scheduler",
    ),
    (
        "priority not an integer",
        _set("spec.priority", "high"),
        "spec.priority: must be an integer",
        lambda p: p.priority == 0,
    ),
    (
        "preemptionPolicy unknown",
        _set("spec.preemptionPolicy", "Sometimes"),
        "spec.preemptionPolicy: Unsupported value",
        lambda p: p.preemption_policy == "PreemptLowerPriority",
    ),
    (
        "priorityClassName not a string",
        _set("spec.priorityClassName", 1),
        "spec.priorityClassName: must be a string",
        lambda p: p.priority_class_name == "",
    ),
    (
        "schedulingGates not a list",
        _set("spec.schedulingGates", "wait"),
        "spec.schedulingGates: must be a list",
        lambda p: p.scheduling_gates == (),
    ),
    (
        "ownerReferences not a list",
        _set("metadata.ownerReferences", {"kind": "Job"}),
        "metadata.ownerReferences: must be a list",
        lambda p: p.controller is None,
    ),
    (
        "volume not a mapping",
        _set("spec.volumes", ["data"]),
        "spec.volumes[0]",
        lambda p: p.volumes == () and p.resource_claims == (),
    ),
    (
        "host port not an integer",
        _set("spec.containers.0.ports", [{"containerPort": 80, "hostPort": "80"}]),
        "spec.containers[0].ports[0].hostPort: must be an integer",
        lambda p: p.host_ports == (),
    ),
    (
        "image not a string",
        _set("spec.containers.0.image", 5),
        "spec.containers[0].image: must be a string",
        lambda p: p.images == (),
    ),
    (
        "restartPolicy not a string",
        _set("spec.containers.0.restartPolicy", 5),
        "spec.containers[0].restartPolicy: must be a string",
        lambda p: True,
    ),
]


@pytest.mark.parametrize(
    ("breaker", "field", "default"),
    [pytest.param(b, f, d, id=case) for case, b, f, d in CASES],
)
def test_a_bound_pod_keeps_every_resource_and_leaves_out_what_cannot_be_read(
    breaker: Callable[[Obj], None], field: str, default: Callable[[PodInfo], bool]
) -> None:
    raw = _theirs()
    breaker(raw)
    held = PodInfo.from_object(raw)
    assert held.requests == HELD
    assert (held.key, held.uid, held.node_name) == ("default/theirs", raw["metadata"]["uid"], "n")
    assert held.unreadable and any(field in u for u in held.unreadable), held.unreadable
    assert all(u.startswith("Pod default/theirs: ") and "\n" not in u for u in held.unreadable)
    assert default(held), held
    # the same pod pending is an error naming the field, as before
    pending = copy.deepcopy(raw)
    del pending["spec"]["nodeName"]
    with pytest.raises(ModelError, match=r"^Pod default/theirs: "):
        PodInfo.from_object(pending)


def test_readable_pods_have_nothing_unreadable() -> None:
    assert PodInfo.from_object(_theirs()).unreadable == ()
    assert PodInfo.from_object(pod("mine", GPUS)).unreadable == ()


def test_unreadable_min_member_of_a_pending_pod_is_a_model_error_not_a_crash() -> None:
    for value in ("²", "٣", "9" * 5000, "0", "-1", " "):
        raw = pod("mine", GPUS, annotations={GROUP: "g", MIN: value})
        with pytest.raises(ModelError, match=r"min-member: must be a positive integer"):
            PodInfo.from_object(raw)
    raw = pod("mine", GPUS, annotations={GROUP: "g", MIN: " 0004 "})
    group = PodInfo.from_object(raw).pod_group
    assert group is not None and group.min_member == 4


def test_a_container_that_is_not_a_mapping_is_left_out_the_others_count() -> None:
    raw = pod(
        "theirs",
        containers=[container("a", {"nvidia.com/gpu": "4"}), "junk", container("b", GPUS)],
        node_name="n",
    )
    held = PodInfo.from_object(raw)
    assert held.requests == {"cpu": 4000, "memory": 8 * 2**30, "nvidia.com/gpu": 12}
    assert held.unreadable == (
        "Pod default/theirs: spec.containers[1]: must be a mapping, got str",
    )


def test_identity_and_node_name_stay_required() -> None:
    raw = _theirs()
    del raw["metadata"]["name"]
    with pytest.raises(ModelError, match=r"metadata\.name: is required"):
        PodInfo.from_object(raw)
    raw = _theirs()
    raw["spec"]["nodeName"] = 5
    with pytest.raises(ModelError, match=r"spec\.nodeName: must be a string"):
        PodInfo.from_object(raw)


def test_each_unreadable_part_is_logged_once_naming_the_field(
    caplog: pytest.LogCaptureFixture,
) -> None:
    raw = _theirs()
    raw["metadata"]["annotations"][MIN] = "once-only"
    raw["metadata"]["annotations"][GROUP] = "g"
    with caplog.at_level(logging.WARNING, "topo_scheduler.core.model"):
        for _ in range(3):  # parsed again on every watch event
            PodInfo.from_object(raw)
    logged = [r.getMessage() for r in caplog.records if "once-only" in r.getMessage()]
    assert len(logged) == 1, logged
    assert logged[0].startswith(f"Pod default/theirs: metadata.annotations.{MIN}: ")
    assert "counted with what can be read" in logged[0]


# --------------------------------------------------------------------------- updates


def test_update_reads_status_fields_again() -> None:
    """The watch fast path (`PodInfo.updated`) re-reads node, phase, annotations and the
    status fields preemption reads; before, the start time and nomination stayed stale."""
    raw = pod("mine", GPUS)
    first = PodInfo.from_object(raw)
    raw["spec"]["nodeName"] = "n"
    raw["status"] = {
        "phase": "Running",
        "startTime": "2026-01-02T00:00:00Z",
        "nominatedNodeName": "n",
        "conditions": [
            {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
        ],
    }
    raw["metadata"]["annotations"]["topo-scheduler.io/gpus"] = "0,1,2,3,4,5,6,7"
    updated = first.updated(raw)
    assert updated == PodInfo.from_object(raw)
    assert updated.start_time is not None and updated.preempted
    assert updated.annotations == PodInfo.from_object(raw).annotations


def test_update_of_a_pending_pod_into_an_unreadable_state_raises() -> None:
    raw = pod("mine", GPUS)
    first = PodInfo.from_object(raw)
    raw["metadata"]["annotations"]["note"] = 5
    with pytest.raises(ModelError, match=r"metadata\.annotations\.note: must be a string"):
        first.updated(raw)
    raw = pod("mine", GPUS)
    raw["status"] = {"phase": "Pending", "startTime": "later"}
    with pytest.raises(ModelError, match=r"status\.startTime"):
        first.updated(raw)


def test_update_of_a_bound_pod_is_lenient_and_a_partly_unreadable_one_is_read_whole() -> None:
    raw = _theirs()
    first = PodInfo.from_object(raw)
    raw["status"]["startTime"] = "soon"
    updated = first.updated(raw)
    assert updated.requests == HELD and updated.start_time is None
    assert [u for u in updated.unreadable if "status.startTime" in u]
    # fixed again: read whole, nothing left unreadable
    raw["status"]["startTime"] = "2026-01-02T00:00:00Z"
    again = updated.updated(raw)
    assert again.unreadable == () and again.start_time is not None


# --------------------------------------------------------------------------- the cache


def _gpu_node() -> Obj:
    return node("n", cpu="64", memory="512Gi", annotations=TOPOLOGY, extra={"nvidia.com/gpu": "8"})


@pytest.mark.parametrize(
    "record",
    [
        "0,1,2,3,4,5,6,7",
        None,  # no record: the device-plugin guess
        "abc",
        "0,1",  # another count than the pod holds
        "0,1,2,3,4,5,6,60",  # a GPU the node does not have
        "0,0,1,2,3,4,5,6",
        5,  # not a string: the annotation is left out
    ],
)
def test_a_bound_gpu_pod_holds_its_count_whatever_its_gpu_record(record: Any) -> None:
    raw = _theirs()
    annotations = raw["metadata"]["annotations"]
    annotations[GROUP] = "g"  # and an unreadable group (no min-member)
    if record is None:
        del annotations["topo-scheduler.io/gpus"]
    else:
        annotations["topo-scheduler.io/gpus"] = record
    cache = cache_of([_gpu_node()], [raw])
    assert cache.gpus.used[0] == 0xFF  # every GPU of the node is held
    fit = node_resources_fit.new({}, "args")
    mine = PodInfo.from_object(pod("mine", {"nvidia.com/gpu": "1"}))
    assert filter_reasons(fit, mine, cache) == {"n": ["Insufficient nvidia.com/gpu"]}


def test_a_gpu_record_of_the_wrong_size_does_not_free_gpus() -> None:
    """A 4-GPU pod recorded as holding one GPU holds four (guessed): the free set the
    GPUTopology filter picks from is four GPUs, not seven."""
    raw = pod("theirs", {"nvidia.com/gpu": "4"}, node_name="n", scheduler_name="x",
              annotations={"topo-scheduler.io/gpus": "5"})  # fmt: skip
    cache = cache_of([_gpu_node()], [raw])
    assert bin(int(cache.gpus.used[0])).count("1") == 4
    assert cache.guessed_gpus()[0][0] == "default/theirs"


def test_an_unreadable_node_takes_no_pods_while_its_pods_still_count() -> None:
    cache = cache_of([_gpu_node(), node("m", cpu="64", memory="512Gi")], [_theirs()])
    slot = cache.snapshot.index["n"]
    gpu_row = cache.snapshot.row["nvidia.com/gpu"]
    cache.set_unreadable_node("n", "Node n: spec.taints[0].effect: Unsupported value")
    assert not cache.snapshot.live[slot] and cache.node_count == 1
    assert cache.snapshot.requested[gpu_row, slot] == 8 and cache.get("default/theirs")
    assert cache.unreadable() == [
        "node n: not understood, no pod is placed on it: "
        "Node n: spec.taints[0].effect: Unsupported value"
    ]
    cache.add_node(NodeInfo.from_object(_gpu_node()))  # readable again
    assert cache.snapshot.live[slot] and cache.unreadable() == []
    assert cache.snapshot.requested[gpu_row, slot] == 8 and cache.gpus.used[slot] == 0xFF


def test_the_cache_lists_bound_pods_counted_without_what_cannot_be_read() -> None:
    raw = _theirs()
    raw["metadata"]["annotations"][MIN] = "abc"
    raw["metadata"]["annotations"][GROUP] = "g"
    cache = Cache()
    cache.add_pod(PodInfo.from_object(raw))
    (line,) = cache.unreadable()
    assert line.startswith("pod default/theirs on n: counted with what could be read; ")
    assert f"metadata.annotations.{MIN}: must be a positive integer, got 'abc'" in line


# --------------------------------------------------------------------------- explain


def test_explain_counts_an_unreadable_bound_pod_and_says_so(tmp_path: Path) -> None:
    bad = _theirs()
    bad["metadata"]["annotations"].update({GROUP: "g", MIN: "abc"})
    bad["spec"]["tolerations"] = ["junk"]
    snapshot = tmp_path / "snapshot.yaml"
    snapshot.write_text(yaml.safe_dump_all([_gpu_node(), bad]))
    cluster = load_cluster(str(snapshot))
    framework = frameworks_for(default_config())["topo-scheduler"]
    document = explain(cluster.cache, PodInfo.from_object(pod("mine", GPUS)), framework)
    assert document["node"] is None
    assert document["nodes"]["n"]["reasons"] == ["Insufficient nvidia.com/gpu"]
    notes = [n for n in document["notes"] if n.startswith("pod default/theirs on n: counted")]
    assert len(notes) == 1 and "spec.tolerations[0]" in notes[0] and MIN in notes[0]


def test_explain_of_a_group_member_notes_an_unreadable_bound_pod(tmp_path: Path) -> None:
    # the group's dry run is the single pod's: the same notes
    bad = _theirs()
    bad["spec"]["tolerations"] = ["junk"]
    snapshot = tmp_path / "snapshot.yaml"
    snapshot.write_text(yaml.safe_dump_all([_gpu_node(), bad]))
    cluster = load_cluster(str(snapshot))
    framework = frameworks_for(default_config())["topo-scheduler"]
    mine = pod("mine", GPUS)
    mine["metadata"]["annotations"] = {GROUP: "job", MIN: "1"}
    document = explain(cluster.cache, PodInfo.from_object(mine), framework)
    assert document["group"]["name"] == "default/job"
    notes = [n for n in document["notes"] if n.startswith("pod default/theirs on n: counted")]
    assert len(notes) == 1 and "spec.tolerations[0]" in notes[0]


def test_explain_reads_the_explained_pod_whole(tmp_path: Path) -> None:
    bad = _theirs()
    bad["spec"]["tolerations"] = ["junk"]
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(bad))
    with pytest.raises(ExplainError, match=r"spec\.tolerations\[0\]: must be a mapping"):
        load_pod(str(manifest))
