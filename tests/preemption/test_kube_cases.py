"""kube-scheduler's DefaultPreemption cases (pickOneNodeForPreemption, Preempt,
SelectVictimsOnNode with PodDisruptionBudgets, nodesWherePreemptionMightHelp), ported as data
and run through `topo-scheduler explain`, which plans preemption and evicts nothing.

As upstream: nodes of 500m CPU; pods small 100m, medium 200m, large 300m, very large 500m;
priorities neg -100, low 0, mid 100, high 1000, very high 10000.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.builders import node
from tests.preemption.helpers import explain_json, pending, running

SIZES = {"small": "100m", "medium": "200m", "large": "300m", "veryLarge": "500m"}
PRIORITY = {"neg": -100, "low": 0, "mid": 100, "high": 1000, "veryHigh": 10000}


def machine(name: str) -> dict[str, Any]:
    return node(name, cpu="500m", memory="1000Mi")


def bound(name: str, size: str, priority: str, start: str = "2019-01-01") -> dict[str, Any]:
    host = "machine" + name[1]
    return running(
        name,
        host,
        PRIORITY[priority],
        {"cpu": SIZES[size], "memory": "100"},
        start=f"{start}T00:00:00Z",
    )


def preemptor(size: str, priority: str) -> dict[str, Any]:
    return pending("p", PRIORITY[priority], {"cpu": SIZES[size], "memory": "100"})


# (name, machines, pods on them (name, size, priority[, start]), preemptor, node, victims)
# victims None: the pod fits without preemption (no plan).
CASES: list[tuple[str, int, list[tuple[str, ...]], tuple[str, str], str, list[str] | None]] = [
    ("no node needs preemption", 1,
     [("m1.1", "small", "mid")], ("large", "high"), "machine1", None),
    ("fits on both machines when lower priority pods are preempted", 2,
     [("m1.1", "large", "mid"), ("m2.1", "large", "mid")], ("large", "high"),
     "machine1", ["m1.1"]),
    ("fits on a machine with no preemption", 3,
     [("m1.1", "large", "mid"), ("m2.1", "large", "mid")], ("large", "high"), "machine3", None),
    ("machine with min highest priority pod is picked", 3,
     [("m1.1", "medium", "mid"), ("m1.2", "large", "mid"),
      ("m2.1", "medium", "mid"), ("m2.2", "medium", "low"),
      ("m3.1", "medium", "low"), ("m3.2", "medium", "low")],
     ("veryLarge", "high"), "machine3", ["m3.1", "m3.2"]),
    ("when highest priorities are the same, minimum sum of priorities is picked", 3,
     [("m1.1", "medium", "mid"), ("m1.2", "large", "mid"),
      ("m2.1", "large", "mid"), ("m2.2", "medium", "low"),
      ("m3.1", "medium", "mid"), ("m3.2", "medium", "mid")],
     ("veryLarge", "high"), "machine2", ["m2.1", "m2.2"]),
    ("when highest priority and sum are the same, minimum number of pods is picked", 3,
     [("m1.1", "small", "mid"), ("m1.2", "small", "neg"), ("m1.3", "small", "mid"),
      ("m1.4", "small", "neg"),
      ("m2.1", "large", "mid"), ("m2.2", "medium", "neg"),
      ("m3.1", "medium", "mid"), ("m3.2", "small", "neg"), ("m3.3", "small", "low")],
     ("veryLarge", "high"), "machine2", ["m2.1", "m2.2"]),
    ("sum of adjusted priorities is considered", 3,
     [("m1.1", "small", "mid"), ("m1.2", "small", "neg"), ("m1.3", "small", "neg"),
      ("m2.1", "large", "mid"), ("m2.2", "medium", "neg"),
      ("m3.1", "medium", "mid"), ("m3.2", "small", "neg"), ("m3.3", "small", "low")],
     ("veryLarge", "high"), "machine2", ["m2.1", "m2.2"]),
    ("non-overlapping lowest high priority, sum priorities, and number of pods", 4,
     [("m1.1", "small", "mid"), ("m1.2", "small", "low"), ("m1.3", "small", "low"),
      ("m2.1", "large", "high"),
      ("m3.1", "medium", "mid"), ("m3.2", "small", "low"), ("m3.3", "small", "low"),
      ("m3.4", "medium", "low"),
      ("m4.1", "medium", "mid"), ("m4.2", "small", "mid"), ("m4.3", "small", "mid"),
      ("m4.4", "small", "neg")],
     ("veryLarge", "veryHigh"), "machine1", ["m1.1", "m1.2", "m1.3"]),
    ("same priority, same number of victims, different start time for each machine's pod", 3,
     [("m1.1", "medium", "mid", "2019-01-03"), ("m1.2", "medium", "mid", "2019-01-03"),
      ("m2.1", "medium", "mid", "2019-01-04"), ("m2.2", "medium", "mid", "2019-01-04"),
      ("m3.1", "medium", "mid", "2019-01-02"), ("m3.2", "medium", "mid", "2019-01-02")],
     ("veryLarge", "high"), "machine2", ["m2.1", "m2.2"]),
    ("same priority, same number of victims, different start time for all pods", 3,
     [("m1.1", "medium", "mid", "2019-01-05"), ("m1.2", "medium", "mid", "2019-01-03"),
      ("m2.1", "medium", "mid", "2019-01-06"), ("m2.2", "medium", "mid", "2019-01-02"),
      ("m3.1", "medium", "mid", "2019-01-04"), ("m3.2", "medium", "mid", "2019-01-07")],
     ("veryLarge", "high"), "machine3", ["m3.1", "m3.2"]),
    ("different priority, same number of victims, different start time for all pods", 3,
     [("m1.1", "medium", "low", "2019-01-05"), ("m1.2", "medium", "mid", "2019-01-03"),
      ("m2.1", "medium", "mid", "2019-01-07"), ("m2.2", "medium", "low", "2019-01-02"),
      ("m3.1", "medium", "low", "2019-01-04"), ("m3.2", "medium", "mid", "2019-01-06")],
     ("veryLarge", "high"), "machine2", ["m2.1", "m2.2"]),
    ("basic preemption logic (TestPreempt)", 3,
     [("m1.1", "small", "low"), ("m1.2", "small", "low"),
      ("m2.1", "large", "high"), ("m3.1", "medium", "mid")],
     ("veryLarge", "high"), "machine1", ["m1.1", "m1.2"]),
    ("one node doesn't need any preemption (TestPreempt)", 3,
     [("m1.1", "small", "low"), ("m1.2", "small", "low"), ("m2.1", "large", "high")],
     ("veryLarge", "high"), "machine3", None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("machines", "pods", "incoming", "expected_node", "victims"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_upstream_case(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    machines: int,
    pods: list[tuple[str, ...]],
    incoming: tuple[str, str],
    expected_node: str,
    victims: list[str] | None,
) -> None:
    objects = [machine(f"machine{i}") for i in range(1, machines + 1)]
    objects += [bound(*p) for p in pods]
    doc = explain_json(tmp_path, objects, preemptor(*incoming), capsys)
    if victims is None:
        assert doc["node"] == expected_node
        assert doc["preemption"] is None
        return
    assert doc["node"] is None
    assert doc["preemption"]["node"] == expected_node
    assert doc["preemption"]["victims"] == [f"default/{v}" for v in victims]
    # a successful preemption adds nothing to the FailedScheduling text (kube's Success)
    assert "preemption:" not in doc["message"]


def pdb(name: str, labels: dict[str, str], allowed: int, disrupted: list[str] = ()) -> Any:  # type: ignore[assignment]
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"matchLabels": labels}},
        "status": {"disruptionsAllowed": allowed, "disruptedPods": {d: "2019-01-01T00:00:00Z" for d in disrupted}},
    }  # fmt: skip


def labelled(name: str, size: str, priority: str, app: str) -> dict[str, Any]:
    obj = bound(name, size, priority)
    obj["metadata"]["labels"] = {"app": app}
    return obj


def test_fewest_pdb_violations_wins_over_lower_priority(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """kube: 'A node with a minimum number of PDB violations is preferable', before priority."""
    objects = [
        machine("machine1"),
        machine("machine2"),
        labelled("m1.1", "veryLarge", "low", "guarded"),
        labelled("m2.1", "veryLarge", "mid", "free"),
        pdb("guard", {"app": "guarded"}, 0),
    ]
    doc = explain_json(tmp_path, objects, preemptor("veryLarge", "high"), capsys)
    assert doc["preemption"]["node"] == "machine2"
    assert doc["preemption"]["victims"] == ["default/m2.1"]
    # without the budget the lower-priority victim's node wins
    doc = explain_json(tmp_path, objects[:-1], preemptor("veryLarge", "high"), capsys)
    assert doc["preemption"]["node"] == "machine1"


def test_pdb_violators_are_reprieved_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """SelectVictimsOnNode tries to keep PDB violators before anyone else, even a
    higher-priority non-violator: of two equal pods, the guarded one stays."""
    objects = [
        machine("machine1"),
        labelled("m1.1", "large", "mid", "free"),
        labelled("m1.2", "large", "low", "guarded"),
        pdb("guard", {"app": "guarded"}, 0),
    ]
    doc = explain_json(tmp_path, objects, preemptor("medium", "high"), capsys)
    assert doc["preemption"]["victims"] == ["default/m1.1"]
    # a pod already counted in disruptedPods does not violate the budget again
    objects[-1] = pdb("guard", {"app": "guarded"}, 0, disrupted=["m1.2"])
    doc = explain_json(tmp_path, objects, preemptor("medium", "high"), capsys)
    assert doc["preemption"]["victims"] == ["default/m1.2"]


def test_no_victims_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objects = [machine(f"machine{i}") for i in range(1, 4)]
    objects += [bound(f"m{i}.1", "veryLarge", "high") for i in range(1, 4)]
    doc = explain_json(tmp_path, objects, preemptor("large", "high"), capsys)
    assert doc["preemption"] is None
    assert doc["message"] == (
        "0/3 nodes are available: 3 Insufficient cpu. "
        "preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
    )


def test_unresolvable_nodes_are_not_candidates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """nodesWherePreemptionMightHelp: taints, cordons, node selectors and a request larger
    than the node are never cured by eviction; the other nodes are tried."""
    objects = [
        node("tainted", cpu="500m", memory="1000Mi",
             taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]),
        node("cordoned", cpu="500m", memory="1000Mi", unschedulable=True),
        node("tiny", cpu="200m", memory="1000Mi"),
        machine("machine1"),
    ]  # fmt: skip
    objects += [
        running(f"{n}-pod", n, 0, {"cpu": "200m"})
        for n in ("tainted", "cordoned", "tiny", "machine1")
    ]
    objects.append(running("m1.2", "machine1", 2000, {"cpu": "200m"}))
    doc = explain_json(tmp_path, objects, preemptor("large", "high"), capsys)
    assert doc["preemption"] == {
        "node": "machine1",
        "victims": ["default/machine1-pod"],
        "gpus": [],
    }
    # with nothing to evict on the one resolvable node:
    objects = [o for o in objects if o["metadata"]["name"] != "machine1-pod"]
    objects.append(running("m1.3", "machine1", 2000, {"cpu": "200m"}))
    doc = explain_json(tmp_path, objects, preemptor("large", "high"), capsys)
    assert doc["message"].endswith(
        "preemption: 0/4 nodes are available: 1 No preemption victims found for incoming pod, "
        "3 Preemption is not helpful for scheduling."
    )


def test_all_unresolvable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objects = [node("tiny", cpu="200m", memory="1000Mi"), running("a", "tiny", 0, {"cpu": "100m"})]
    doc = explain_json(tmp_path, objects, preemptor("large", "high"), capsys)
    assert doc["message"] == (
        "0/1 nodes are available: 1 Insufficient cpu. "
        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    )


def test_preemption_policy_never(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objects = [machine("machine1"), bound("m1.1", "veryLarge", "low")]
    incoming = pending("p", 1000, {"cpu": "300m"}, preemptionPolicy="Never")
    doc = explain_json(tmp_path, objects, incoming, capsys)
    assert doc["preemption"] is None
    assert doc["message"] == (
        "0/1 nodes are available: 1 Insufficient cpu. "
        "preemption: not eligible due to preemptionPolicy=Never."
    )
    incoming["spec"]["preemptionPolicy"] = "PreemptLowerPriority"
    assert explain_json(tmp_path, objects, incoming, capsys)["preemption"]["node"] == "machine1"


def test_equal_priority_is_not_a_victim(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objects = [machine("machine1"), bound("m1.1", "veryLarge", "high")]
    doc = explain_json(tmp_path, objects, preemptor("large", "high"), capsys)
    assert doc["preemption"] is None
    assert "1 No preemption victims found for incoming pod." in doc["message"]


def test_a_pod_with_a_claim_preempts_and_a_zone_it_cannot_reach_is_not_tried(
    tmp_path: Path, capsys: Any
) -> None:
    """Preemption re-runs the volume plugins on its copy of the node: they must see the
    cluster's claims and volumes (a bound claim, then one whose PV is in another zone)."""
    from tests.storage.objects import claim_volume, pv, pvc

    zone = "topology.kubernetes.io/zone"
    victim = running("v", "n1", 0, {"cpu": "1"})
    claimant = pending("p", 1000, {"cpu": "1"}, volumes=[claim_volume("d", "data")])
    bound = [pv("vol", claim=("default", "data")), pvc("data", volume="vol", bound=True)]
    doc = explain_json(tmp_path, [node("n1", cpu="1"), victim, *bound], claimant, capsys)
    assert doc["preemption"] == {"node": "n1", "victims": ["default/v"], "gpus": []}
    elsewhere = [
        pv("vol", claim=("default", "data"), labels={zone: "b"}),
        pvc("data", volume="vol", bound=True),
    ]
    in_a = node("n1", cpu="1", labels={zone: "a"})
    doc = explain_json(tmp_path, [in_a, victim, *elsewhere], claimant, capsys)
    assert doc["preemption"] is None
    assert "had no available volume zone" in doc["message"]
