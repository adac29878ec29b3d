"""Bad input files to every file-reading command: exit 2 and one line naming the file (and the
field), never a traceback, a hang or silently accepted nonsense."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from scheduler.cli import main
from scheduler.core.topology import ANNOTATION_TOPOLOGY, builtin_topology, format_topology
from scheduler.core.topology.nvidia_smi import nvidia_smi_cells
from tests.builders import node, pod
from tests.explain.test_explain import write as dump

GPU_TOLERATION = [{"key": "nvidia.com/gpu", "operator": "Exists"}]


def one_line_error(capsys: pytest.CaptureFixture[str], code: int, *needles: str) -> str:
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    gpu = node(
        "gpu",
        cpu="32",
        memory="128Gi",
        extra={"nvidia.com/gpu": "8"},
        annotations={ANNOTATION_TOPOLOGY: format_topology(builtin_topology("dgx-h100"))},
    )
    return {
        "snapshot": dump(tmp_path / "snapshot.yaml", [node("a"), gpu]),
        "pod": dump(tmp_path / "pod.yaml", pod("web", {"cpu": "1"})),
    }


# --------------------------------------------------------------------------- explain


@pytest.mark.parametrize(
    ("which", "content", "needles"),
    [
        ("snapshot", b"kind: Node\nmetadata: {name: \xff}\n", ["not UTF-8 text (byte 28)"]),
        ("pod", b"\xfe\xff", ["pod.yaml: not UTF-8"]),
        ("snapshot", b"kind: List\nitems: " + b"1" * 5001, ["line 2, column 8: integer of 5,001"]),
        ("snapshot", b"[" * 100_000, ["nested more than 100 levels deep"]),
        ("pod", b"{" * 50_000, ["pod.yaml: line 1, column 101: nested more than 100"]),
        ("config", b"a:\n" + b"".join(b"  " * k + b"- \n" for k in range(1, 150)), ["nested"]),
        (
            "pod",
            b"kind: Pod\nmetadata: {name: p, creationTimestamp: 2020-02-30}\nspec: {}\n",
            ["metadata.creationTimestamp: must be an RFC 3339 time, got '2020-02-30'"],
        ),
    ],
)
def test_explain_unreadable_files(
    files: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    which: str,
    content: bytes,
    needles: list[str],
) -> None:
    path = tmp_path / f"{which}.yaml"
    path.write_bytes(content)
    args = {**files, which: str(path)}
    argv = ["explain", "--snapshot", args["snapshot"], "--pod", args["pod"]]
    if which == "config":
        argv += ["--config", str(path)]
    one_line_error(capsys, main(argv), f"{which}.yaml", *needles)


@pytest.mark.parametrize(
    ("objects", "needles"),
    [
        ([{"metadata": {"name": "x"}}], ["object 0: kind: is required"]),
        ([node("a"), node("b"), node("a")], ["object 2: Node a repeats object 0"]),
        (
            [node("a"), pod("p", node_name="a"), pod("p", node_name="a")],
            ["object 2: Pod default/p repeats object 1"],
        ),
        ([node("a"), pod("p", namespace="x"), pod("p", namespace="y")], None),  # not repeats
    ],
)
def test_explain_snapshot_nonsense(
    files: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    objects: list[dict[str, Any]],
    needles: list[str] | None,
) -> None:
    snapshot = dump(tmp_path / "bad.yaml", {"kind": "List", "items": objects})
    code = main(["explain", "--snapshot", snapshot, "--pod", files["pod"]])
    if needles is None:
        assert code == 0
    else:
        one_line_error(capsys, code, "bad.yaml", *needles)


def test_explain_two_inputs_from_stdin(
    files: dict[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(Path(files["pod"]).read_text()))
    code = main(["explain", "--snapshot", "-", "--pod", "-"])
    one_line_error(capsys, code, "--snapshot - and --pod -: only one of them can read stdin")


@pytest.mark.parametrize(
    ("annotation", "problem"),
    [
        ("[" * 100_000, "nested more than 100 levels deep"),
        ('{"version":1,"gpus":[{"index":' + "1" * 5001 + "}]}", "integer of 5,001"),
        (
            json.dumps(
                {
                    "version": 1,
                    "gpus": [{"index": 0}, {"index": 1}],
                    "links": [{"a": 0, "b": 1, "nvlinks": 10**17}],
                }
            ),
            "must be <= 64",
        ),
    ],
)
def test_explain_unreadable_annotation_is_a_count_only_note(
    tmp_path: Path,
    files: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    annotation: str,
    problem: str,
) -> None:
    gpu = node("gpu", cpu="32", memory="128Gi", extra={"nvidia.com/gpu": "8"},
               annotations={ANNOTATION_TOPOLOGY: annotation})  # fmt: skip
    snapshot = dump(tmp_path / "s.yaml", [gpu])
    manifest = dump(
        tmp_path / "p.yaml",
        pod("train", {"nvidia.com/gpu": "2"}, spec={"tolerations": GPU_TOLERATION}),
    )
    code = main(["explain", "--snapshot", snapshot, "--pod", manifest, "--output", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    assert doc["node"] == "gpu" and "gpuSetScore" not in doc["nodes"]["gpu"]
    assert problem in doc["nodes"]["gpu"]["gpuTopologyProblem"]
    assert any("count-only" in note for note in doc["notes"])


# --------------------------------------------------------------------------- simulate

NODES = [{"name": "n", "count": 1, "gpuTopology": "dgx-a100",
          "resources": {"cpu": "64", "memory": "256Gi"}}]  # fmt: skip


def scenario(path: Path, **top: Any) -> str:
    data = {"name": "s", "nodes": NODES, "jobs": [{"name": "j", "gpus": 1, "duration": 10}]}
    data.update(top)
    return dump(path, data)


@pytest.mark.parametrize(
    ("top", "needles"),
    [
        (
            {"nodes": [{**NODES[0], "count": 1_000_000}]},
            ["nodes: 1,000,000 nodes in all; the simulator takes at most 10,000"],
        ),
        (
            {"jobs": [{"generate": 1_000_000}]},
            ["jobs[0].generate: 1,000,000 jobs in all; the simulator takes at most 100,000"],
        ),
        (
            {"nodes": [{**NODES[0], "count": 10_000}], "jobs": [{"generate": 5_000}]},
            ["nodes x jobs: 10,000 x 5,000 is more than the simulator's limit of 20,000,000"],
        ),
        (
            {"jobs": [{"name": "j", "duration": 1e301}]},
            ["jobs[0].duration: must be <= 315,360,000"],
        ),
        (
            {"jobs": [{"name": "j", "duration": 1, "count": 100_000, "interval": 300_000_000}]},
            ["after the simulator's limit of 315,360,000 s"],
        ),
        (
            {"nodes": [{**NODES[0], "labels": {"pool": None}}]},
            ["nodes[0].labels.pool: is required"],
        ),
        (
            {"nodes": [{**NODES[0], "labels": {"pool": 3}}]},
            ["nodes[0].labels.pool: must be a string, got int"],
        ),
        (
            {"jobs": [{"name": "j", "duration": 1, "cpu": "1e18"}]},
            ["jobs[0].cpu: '1e18' is too large (at most 2^53-1 in kube's unit)"],
        ),
        (
            {"jobs": [{"name": "j", "duration": 1, "gpus": 8, "memoryPerGpu": "1Pi"}]},
            ["jobs[0]: the job's memory request is too large"],
        ),
        (
            {
                "nodes": [
                    {
                        **NODES[0],
                        "resources": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2.5"},
                    }
                ]
            },
            ["nodes[0].resources.nvidia.com/gpu: must be a whole number"],
        ),
    ],
)
def test_simulate_scenario_nonsense(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], top: dict[str, Any], needles: list[str]
) -> None:
    path = scenario(tmp_path / "s.yaml", **top)
    one_line_error(capsys, main(["simulate", path]), "s.yaml", *needles)


@pytest.mark.parametrize(
    ("content", "needles"),
    [
        (b"name: \xff\n", ["not UTF-8 text (byte 6)"]),
        (b"seed: " + b"7" * 5001, ["line 1, column 7: integer of 5,001 characters"]),
        (b"[" * 100_000, ["nested more than 100 levels deep"]),
    ],
)
def test_simulate_unreadable_scenario(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, needles: list[str]
) -> None:
    path = tmp_path / "s.yaml"
    path.write_bytes(content)
    one_line_error(capsys, main(["simulate", str(path)]), "s.yaml", *needles)


@pytest.mark.parametrize(
    ("rows", "needles"),
    [
        (b"a,1,2,\xff,,,\n", ["t.csv: not UTF-8 text"]),
        (b"a,1," + b"9" * 5000 + b",1,,,\n", ["line 2: duration_s: must be a number of seconds"]),
        (b"a,1,2," + b"9" * 5000 + b",,,\n", ["line 2: gpus: must be an integer from 0"]),
        (b"a,1e300,2,1,,,\n", ["line 2: arrival_s: must be a number of seconds from 0 to"]),
    ],
)
def test_simulate_unreadable_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rows: bytes, needles: list[str]
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_bytes(b"job,arrival_s,duration_s,gpus,workers,gpu_model,status\n" + rows)
    cluster = scenario(tmp_path / "c.yaml")
    code = main(["simulate", "--trace", str(trace), "--cluster", cluster])
    one_line_error(capsys, code, *needles)


def test_simulate_job_waiting_behind_a_five_day_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = [{"name": "big", "gpus": 8, "duration": 5 * 86_400},
            {"name": "next", "gpus": 8, "arrival": 1, "duration": 10}]  # fmt: skip
    path = scenario(tmp_path / "s.yaml", jobs=jobs)
    code = main(["simulate", path, "--policy", "topo+topo-dp", "--output", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    (result,) = json.loads(out)["policies"].values()
    assert result["makespan_seconds"] == pytest.approx(5 * 86_400 + 10)


def test_simulate_work_limit_ends_the_run_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Jobs waiting on one node are retried on every completion: work grows with their square.
    monkeypatch.setattr("scheduler.sim.engine.WORK_LIMIT", 20_000)
    jobs = [{"name": "j", "gpus": 8, "duration": 10, "count": 60}]
    path = scenario(tmp_path / "s.yaml", jobs=jobs)
    code = main(["simulate", path, "--policy", "topo+topo-dp"])
    one_line_error(
        capsys,
        code,
        "s.yaml: policy topo+topo-dp: more than 20,000 node evaluations",
        "on 1 node(s)), the simulator's limit",
    )
    monkeypatch.setattr("scheduler.sim.engine.WORK_LIMIT", 10_000_000)
    assert main(["simulate", path, "--policy", "topo+topo-dp"]) == 0


# --------------------------------------------------------------------------- topology, agent


def nvidia_smi_text(n: int, cell: str | None = None) -> str:
    cells = nvidia_smi_cells(builtin_topology("dgx-h100"))
    header = "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\tNUMA Affinity\n"
    rows = []
    for i in range(n):
        row = [" X " if i == j else (cell or cells.get((min(i, j) % 8, max(i, j) % 8), "SYS"))
               for j in range(n)]  # fmt: skip
        rows.append(f"GPU{i}\t" + "\t".join(row) + "\t0\n")
    return header + "".join(rows)


@pytest.mark.parametrize(
    ("content", "needles"),
    [
        (b"\tGPU0\tGPU1\n\xff", ["smi.txt: not UTF-8 text"]),
        (nvidia_smi_text(2, "NV" + "9" * 5000).encode(), ["more than 64 NVLinks"]),
        (nvidia_smi_text(2, "NV\u00b2").encode(), ["unknown link 'NV\u00b2'"]),
        (nvidia_smi_text(2, "NV\u0663").encode(), ["unknown link"]),  # Arabic-Indic 3
        (nvidia_smi_text(64).encode(), ["64 GPUs; at most 63 are supported per node"]),
        (nvidia_smi_text(2).replace("\t0\n", "\t\u00b9\n").encode(), ["not a single NUMA node"]),
        (("\tGPU0\tGPU" + "1" * 5000 + "\n").encode(), ["expected rows GPU0..GPU0"]),
    ],
)
def test_from_nvidia_smi_unreadable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, needles: list[str]
) -> None:
    path = tmp_path / "smi.txt"
    path.write_bytes(content)
    code = main(["topology", "from-nvidia-smi", str(path)])
    one_line_error(capsys, code, "smi.txt", *needles)


@pytest.mark.parametrize("interval", ["-1", "0", "1e300"])
def test_agent_interval(capsys: pytest.CaptureFixture[str], interval: str) -> None:
    code = main(["agent", "--node-name", "n", "--interval", interval, "--fake-gpus", "dgx-a100"])
    one_line_error(capsys, code, "--interval must be a number of seconds > 0 and <= 86,400")


@pytest.mark.parametrize("value", ["", " ", ":fail=0"])
def test_agent_fake_gpus_empty_is_an_error(capsys: pytest.CaptureFixture[str], value: str) -> None:
    """An empty --fake-gpus names the flag; it never falls back to the real NVML."""
    code = main(["agent", "--node-name", "n", "--once", "--fake-gpus", value])
    one_line_error(capsys, code, "--fake-gpus")


def flag_error(capsys: pytest.CaptureFixture[str], argv: list[str], *needles: str) -> str:
    """argparse's errors too: one line naming the flag, exit 2, no usage block."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    return one_line_error(capsys, int(exit_info.value.code or 0), *needles)


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (["agent", "--node-name", "n", "--interval", "nan"], ["--interval", "'nan'"]),
        (["agent", "--node-name", "n", "--interval", "inf"], ["--interval", "finite number"]),
        (["agent", "--node-name", "n", "--interval", "6_0"], ["--interval", "'6_0'"]),
        (["run", "--kube-api-burst", "1_0"], ["--kube-api-burst", "must be an integer"]),
        (["run", "--kube-api-burst", " 10"], ["--kube-api-burst", "' 10'"]),
        (["run", "--kube-api-burst", "10.0"], ["--kube-api-burst", "must be an integer"]),
        (["run", "--kube-api-qps", "1e999"], ["--kube-api-qps", "finite number"]),
        (["run", "--events-qps", "٣"], ["--events-qps", "finite number"]),
        (["run", "--events-burst", "0x10"], ["--events-burst", "must be an integer"]),
        (["run", "--startup-timeout", "-inf"], ["--startup-timeout"]),
        (["simulate", "--seed", "1_000"], ["--seed", "must be an integer"]),
        (["simulate", "--policy", "fastest"], ["--policy", "invalid choice"]),
        (["explain", "--pod", "p.yaml"], ["--snapshot", "required"]),
        (["run", "--no-such-flag"], ["unrecognized arguments: --no-such-flag"]),
        ([], ["required: command"]),
    ],
)
def test_flag_errors_are_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], needles: list[str]
) -> None:
    flag_error(capsys, argv, *needles)


@pytest.mark.parametrize(
    ("content", "needles"),
    [
        (b"\xff", ["kc.yaml: not UTF-8 text (byte 0)"]),
        (b"[" * 100_000, ["kc.yaml: line 1, column 101: nested more than 100"]),
        (b"- a\n- b\n", ["kc.yaml: not a kubeconfig"]),
    ],
)
def test_agent_kubeconfig(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, needles: list[str]
) -> None:
    path = tmp_path / "kc.yaml"
    path.write_bytes(content)
    argv = ["agent", "--node-name", "n", "--kubeconfig", str(path), "--fake-gpus", "dgx-a100"]
    one_line_error(capsys, main(argv), "--kubeconfig", *needles)
