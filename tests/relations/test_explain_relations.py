"""`explain` end to end with pod relations: a snapshot holding Namespaces (as
`kubectl get nodes,pods,namespaces -A -o yaml` prints it), a pod whose anti-affinity selects
namespaces by label, kube's reasons per node and the plugins' normalized scores."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.cli import main
from tests.relations.support import HOST, affinity, mknode, mkpod, sel, spread, term, weighted


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def explain(tmp_path: Path, capsys: pytest.CaptureFixture[str], incoming: dict[str, Any],
            *extra: str) -> tuple[int, str, str]:  # fmt: skip
    items = [
        namespace("prod", env="prod"),
        namespace("staging", env="staging"),
        mknode("a1", zone="A"),
        mknode("a2", zone="A"),
        mknode("b1", zone="B"),
        mknode("c1", zone="C"),
        mkpod("db", {"app": "db"}, on="a1", ns="prod"),
        mkpod("db-test", {"app": "db"}, on="b1", ns="staging"),
    ]
    snapshot = tmp_path / "snapshot.yaml"
    snapshot.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(incoming))
    code = main(["explain", "--snapshot", str(snapshot), "--pod", str(manifest), *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_namespace_selector_decides_which_pods_repel(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    incoming = mkpod(
        "api",
        {"app": "api"},
        ns="apps",
        aff=affinity(
            anti=[term(sel(app="db"), "zone", namespaceSelector=sel(env="prod"))],
            preferred=[weighted(10, term(sel(app="db"), "zone", namespaceSelector={}))],
        ),
        constraints=[spread(1, "zone", "ScheduleAnyway", sel(app="api"))],
    )
    code, out, _ = explain(tmp_path, capsys, incoming, "--output", "json")
    assert code == 0
    doc = json.loads(out)
    nodes = doc["nodes"]
    anti = "node(s) didn't match pod anti-affinity rules"
    # only the prod database repels (staging is not selected); zone A is out
    assert nodes["a1"]["reasons"] == [anti]
    assert nodes["a2"]["reasons"] == [anti]
    assert nodes["b1"]["feasible"] and nodes["c1"]["feasible"]
    # preferred affinity to any namespace's database: zone B (staging db) 100, C 0
    assert nodes["b1"]["scores"]["InterPodAffinity"] == 100
    assert nodes["c1"]["scores"]["InterPodAffinity"] == 0
    # no api pods yet: spread scores every feasible node 100
    assert nodes["b1"]["scores"]["PodTopologySpread"] == 100
    assert nodes["c1"]["scores"]["PodTopologySpread"] == 100
    assert doc["node"] == "b1"


def test_without_the_namespace_labels_the_selector_selects_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    incoming = mkpod(
        "api",
        {"app": "api"},
        ns="apps",
        aff=affinity([term(sel(app="db"), "zone", namespaceSelector=sel(env="qa"))]),
    )
    code, out, _ = explain(tmp_path, capsys, incoming)
    assert code == 0
    assert "pod apps/api is unschedulable: 0/4 nodes are available: " in out
    assert "4 node(s) didn't match pod affinity rules." in out


def test_table_shows_the_two_plugins_with_kube_weights(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    incoming = mkpod(
        "api",
        {"app": "api"},
        aff=affinity(preferred=[weighted(10, term(sel(app="db"), HOST, namespaces=["prod"]))]),
        constraints=[spread(1, "zone", "ScheduleAnyway", sel(app="api"))],
    )
    code, out, _ = explain(tmp_path, capsys, incoming)
    assert code == 0
    assert "PodTopologySpread (x2)" in out and "InterPodAffinity (x2)" in out
    assert "-> node a1" in out


def test_bad_namespace_is_one_line_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot = tmp_path / "s.yaml"
    snapshot.write_text(yaml.safe_dump_all([{"kind": "Namespace", "metadata": {"name": "x",
                                             "labels": {"team": 3}}}]))  # fmt: skip
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(mkpod("p")))
    code = main(["explain", "--snapshot", str(snapshot), "--pod", str(manifest)])
    _, err = capsys.readouterr()
    assert code == 2
    assert (
        err.strip()
        == f"error: {snapshot}: Namespace x: metadata.labels.team: must be a string, got int"
    )


def test_a_replicaset_in_the_snapshot_brings_the_default_spread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """kube's System defaults: a pod its ReplicaSet selects is spread by hostname and zone."""
    owner = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "controller": True}]
    items: list[dict[str, Any]] = [
        mknode("n1"),
        mknode("n2"),
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web-1"},
         "spec": {"selector": {"matchLabels": {"app": "web"}}}},
    ]  # fmt: skip
    for i in range(3):
        replica = mkpod(f"web-{i}", {"app": "web"}, on="n1")
        replica["metadata"]["ownerReferences"] = owner
        items.append(replica)
    incoming = mkpod("web-new", {"app": "web"})
    incoming["metadata"]["ownerReferences"] = owner
    snapshot = tmp_path / "snapshot.yaml"
    snapshot.write_text(yaml.safe_dump_all(items))
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(incoming))
    code = main(
        ["explain", "--snapshot", str(snapshot), "--pod", str(manifest), "--output", "json"]
    )
    out, _ = capsys.readouterr()
    assert code == 0
    nodes = json.loads(out)["nodes"]
    # hostname maxSkew 3, weight ln 4: n1 round(3 ln 4 + 2) = 6, n2 2 -> 100 * (8 - raw) / 6
    assert nodes["n1"]["scores"]["PodTopologySpread"] == 33
    assert nodes["n2"]["scores"]["PodTopologySpread"] == 100
    # without the ReplicaSet object there is no selector and no default spread
    snapshot.write_text(yaml.safe_dump_all(items[:2] + items[3:]))
    main(["explain", "--snapshot", str(snapshot), "--pod", str(manifest), "--output", "json"])
    out, _ = capsys.readouterr()
    assert "PodTopologySpread" not in json.loads(out)["nodes"]["n1"]["scores"]
