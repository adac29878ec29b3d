"""`topo-scheduler explain` end to end: the JSON contract, the table, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.cli import main
from scheduler.core.topology import ANNOTATION_TOPOLOGY, builtin_topology, format_topology
from tests.builders import container, node, pod

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GPU_TOLERATION = [{"key": "nvidia.com/gpu", "operator": "Exists"}]


def write(path: Path, objects: list[dict[str, Any]] | dict[str, Any]) -> str:
    if isinstance(objects, list):
        path.write_text(yaml.safe_dump_all(objects))
    else:
        path.write_text(yaml.safe_dump(objects))
    return str(path)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["explain", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def cluster(tmp_path: Path) -> str:
    nodes = [
        node("small", cpu="1", memory="2Gi"),
        node("big", cpu="8", memory="32Gi"),
        node("tainted", cpu="8", memory="32Gi",
             taints=[{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]),
        node("gpu", cpu="32", memory="128Gi", extra={"nvidia.com/gpu": "8"},
             annotations={ANNOTATION_TOPOLOGY: format_topology(builtin_topology("dgx-h100"))}),
    ]  # fmt: skip
    bound = [
        pod("busy", {"cpu": "500m"}, node_name="small", phase="Running"),
        pod("done", {"cpu": "8"}, node_name="big", phase="Succeeded"),
    ]
    listing = {"apiVersion": "v1", "kind": "List", "items": nodes + bound}
    return write(tmp_path / "snapshot.yaml", listing)


def test_json_contract_for_a_pod_that_fits(
    cluster: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = write(tmp_path / "pod.yaml", pod("web", {"cpu": "2", "memory": "1Gi"}))
    code, out, _ = run(capsys, "--snapshot", cluster, "--pod", manifest, "--output", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["pod"] == "default/web"
    assert doc["message"] is None
    assert set(doc["nodes"]) == {"small", "big", "tainted", "gpu"}
    assert doc["nodes"]["small"] == {
        "feasible": False, "reasons": ["Insufficient cpu"], "scores": {}, "total": None,
    }  # fmt: skip
    assert doc["nodes"]["tainted"]["reasons"] == [
        "node(s) had untolerated taint {dedicated: infra}"
    ]
    feasible = {name: entry for name, entry in doc["nodes"].items() if entry["feasible"]}
    assert set(feasible) == {"big", "gpu"}
    for entry in feasible.values():
        assert entry["reasons"] == []
        assert all(0 <= score <= 100 for score in entry["scores"].values())
        weights = {"TaintToleration": 3, "NodeResourcesFit": 1,
                    "NodeResourcesBalancedAllocation": 1, "ImageLocality": 1}  # fmt: skip
        assert entry["total"] == sum(entry["scores"][p] * w for p, w in weights.items())
    # The Succeeded pod on `big` holds nothing, so `big` is as free as it gets per CPU.
    assert doc["nodes"]["big"]["scores"]["NodeResourcesFit"] == (
        ((8000 - 2000) * 100 // 8000 + (32 * 2**30 - 2**30) * 100 // (32 * 2**30)) // 2
    )
    best = max(feasible, key=lambda n: (feasible[n]["total"], [-ord(c) for c in n]))
    assert doc["node"] == best


def test_unschedulable_pod_gets_kubes_fit_error(
    cluster: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = write(tmp_path / "pod.yaml", pod("huge", {"cpu": "64"}))
    code, out, _ = run(capsys, "--snapshot", cluster, "--pod", manifest, "--output", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["node"] is None
    assert doc["message"] == (
        "0/4 nodes are available: 1 node(s) had untolerated taint {dedicated: infra}, "
        "3 Insufficient cpu. "
        # kube 1.33's PostFilter suffix: a taint and a request larger than every node are
        # not cured by evicting anything
        "preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."
    )
    assert doc["preemption"] is None
    assert all(entry["total"] is None for entry in doc["nodes"].values())


def test_gpu_pod_reports_the_chosen_set(
    cluster: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = write(
        tmp_path / "pod.yaml",
        pod("train", containers=[container(requests={"cpu": "4", "nvidia.com/gpu": "4"})]),
    )
    code, out, _ = run(capsys, "--snapshot", cluster, "--pod", manifest, "--output", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["node"] == "gpu"
    assert len(doc["gpus"]) == 4
    assert doc["nodes"]["gpu"]["gpus"] == doc["gpus"]
    assert "GPUTopology" in doc["nodes"]["gpu"]["scores"]
    assert doc["nodes"]["big"]["reasons"] == ["Insufficient nvidia.com/gpu"]


def test_table_marks_the_chosen_node_and_lists_reasons(
    cluster: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = write(tmp_path / "pod.yaml", pod("web", {"cpu": "2"}))
    code, out, _ = run(capsys, "--snapshot", cluster, "--pod", manifest)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("pod default/web -> node ")
    chosen = lines[0].split("-> node ")[1].split()[0]
    marked = [line for line in lines if line.startswith("*")]
    assert len(marked) == 1 and chosen in marked[0]
    assert any("small" in line and "Insufficient cpu" in line for line in lines)
    # Feasible nodes come first, by total.
    order = [line.split()[1] if line.startswith("*") else line.split()[0] for line in lines[2:6]]
    assert order.index("small") > order.index("big")


def test_pod_without_scheduler_name_uses_the_first_profile(
    cluster: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = pod("web", {"cpu": "1"})
    del raw["spec"]["schedulerName"]
    code, out, _ = run(
        capsys, "--snapshot", cluster, "--pod", write(tmp_path / "p.yaml", raw), "--output", "json"
    )
    assert code == 0 and json.loads(out)["node"] is not None


def test_config_changes_weights(
    cluster: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [{
            "schedulerName": "topo-scheduler",
            "plugins": {"score": {"disabled": [{"name": "*"}],
                                  "enabled": [{"name": "NodeResourcesFit", "weight": 7}]}},
            "pluginConfig": [{"name": "NodeResourcesFit",
                              "args": {"scoringStrategy": {"type": "MostAllocated"}}}],
        }],
    }  # fmt: skip
    manifest = write(tmp_path / "pod.yaml", pod("web", {"cpu": "500m"}))
    code, out, _ = run(capsys, "--snapshot", cluster, "--pod", manifest, "--output", "json",
                       "--config", write(tmp_path / "config.yaml", config))  # fmt: skip
    assert code == 0
    doc = json.loads(out)
    for entry in doc["nodes"].values():
        if entry["feasible"]:
            assert list(entry["scores"]) == ["NodeResourcesFit"]
            assert entry["total"] == 7 * entry["scores"]["NodeResourcesFit"]
    # MostAllocated packs: `small` already runs 500m of its 1 CPU.
    assert doc["node"] == "small"


@pytest.mark.parametrize("group", [False, True])
def test_a_profile_missing_a_prefilter_explains_kubes_error(
    cluster: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], group: bool
) -> None:
    """VolumeRestrictions' Filter kept, its PreFilter disabled: the pod, or the pod group,
    fails with kube-scheduler's error, exit 0, no traceback."""
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [{"schedulerName": "topo-scheduler",
                      "plugins": {"preFilter": {"disabled": [{"name": "VolumeRestrictions"}]}}}],
    }  # fmt: skip
    obj = pod("train", {"cpu": "1"})
    if group:
        obj["metadata"]["annotations"] = {
            "topo-scheduler.io/pod-group": "g", "topo-scheduler.io/min-member": "1",
        }  # fmt: skip
    manifest = write(tmp_path / "pod.yaml", obj)
    code, out, err = run(capsys, "--snapshot", cluster, "--pod", manifest, "--output", "json",
                         "--config", write(tmp_path / "config.yaml", config))  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    assert doc["node"] is None
    assert 'error reading "VolumeRestrictions/rwop-conflicts" from cycleState: not found' in (
        doc["message"]
    )


@pytest.mark.parametrize(
    ("what", "content", "expected"),
    [
        ("snapshot", "kind: List\nitems: [\n", "not valid YAML"),
        ("snapshot", yaml.safe_dump(node("n", cpu="lots")),
         "Node n: status.allocatable.cpu: quantities must match"),
        ("pod", yaml.safe_dump(pod("p", {"memory": "1Gb"})),
         "Pod default/p: spec.containers[0].resources.requests.memory"),
        ("pod", "", "must hold exactly one Pod, found 0"),
        ("config", "profiles:\n- schedulerName: topo-scheduler\n  pluginConfig:\n"
                   "  - name: NodeResourcesFit\n    args:\n      scoringStrategy:\n"
                   "        resources: [{name: cpu, weight: 1}, {name: memory, weight: 101}]\n",
         "profiles[0].pluginConfig[0].args.scoringStrategy.resources[1].weight: "
         "must be between 1 and 100"),
        ("config", "profiles:\n- schedulerName: topo-scheduler\n  plugins:\n"
                   "    score:\n      enabled: [{name: Bogus}]\n",
         "plugin 'Bogus' is not registered"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(
    what: str, content: str, expected: str, cluster: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    files = {"snapshot": cluster, "pod": write(tmp_path / "pod.yaml", pod("ok", {"cpu": "1"}))}
    bad = tmp_path / f"bad-{what}.yaml"
    bad.write_text(content)
    files[what] = str(bad)
    args = ["--snapshot", files["snapshot"], "--pod", files["pod"]]
    if what == "config":
        args += ["--config", str(bad)]
    code, out, err = run(capsys, *args)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert expected in err


def test_missing_file_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--snapshot", str(tmp_path / "nope.yaml"), "--pod", "x.yaml")
    assert code == 2 and "No such file" in err


def test_readme_example_runs_through_the_console_script() -> None:
    """The README's example: the bundled snapshot and pod, through the installed CLI."""
    proc = subprocess.run(
        [sys.executable, "-m", "scheduler.cli", "explain", "--snapshot",
         str(EXAMPLES / "snapshot.yaml"), "--pod", str(EXAMPLES / "explain-pod.yaml"),
         "--output", "json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["pod"] == "ml/llm-finetune-0"
    # The pod asks for 4 NVLink-connected GPUs: the PCIe server cannot offer them.
    assert doc["nodes"]["pcie-1"]["reasons"] == [
        "node(s) didn't have 4 NVLink-connected free GPUs"
    ]
    assert doc["node"] in {n for n, e in doc["nodes"].items() if e["feasible"]}
    assert len(doc["gpus"]) == 4
    assert any("device plugin would have assigned" in note for note in doc.get("notes", []))


def test_custom_gpu_resource_is_accounted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """GPUTopology's resourceName reaches the cache: GPUs recorded on a bound pod are held."""
    topo = {ANNOTATION_TOPOLOGY: format_topology(builtin_topology("dgx-h100"))}
    objects = [
        node("g", cpu="32", memory="64Gi", extra={"example.com/gpu": "8"}, annotations=topo),
        pod("held", containers=[container(requests={"example.com/gpu": "4"})], node_name="g",
            phase="Running", annotations={"topo-scheduler.io/gpus": "0,1,2,3"}),
    ]  # fmt: skip
    config = {"profiles": [{"schedulerName": "topo-scheduler", "pluginConfig": [
        {"name": "GPUTopology", "args": {"resourceName": "example.com/gpu"}}]}]}  # fmt: skip
    manifest = pod("next", containers=[container(requests={"example.com/gpu": "4"})])
    code, out, _ = run(capsys, "--snapshot", write(tmp_path / "s.yaml", objects),
                       "--pod", write(tmp_path / "p.yaml", manifest), "--output", "json",
                       "--config", write(tmp_path / "c.yaml", config))  # fmt: skip
    assert code == 0
    assert sorted(json.loads(out)["gpus"]) == [4, 5, 6, 7]
