"""`--fake-gpus`, `agent --once` on fake GPUs, the device-plugin command's errors, and the
generated protobuf modules being current."""

from __future__ import annotations

import filecmp
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler.agent.discovery import discover
from scheduler.agent.fakegpus import FakeNvml, fake_gpu_uuid, parse_fake_gpus
from scheduler.cli import main
from scheduler.core.topology import (
    ANNOTATION_TOPOLOGY,
    BUILTIN_TOPOLOGIES,
    TopologyError,
    builtin_topology,
    parse_topology,
)
from scheduler.core.topology.nvidia_smi import nvidia_smi_cells
from tests.emulator import NODES, Emulator

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", BUILTIN_TOPOLOGIES)
def test_fake_nvml_discovers_the_builtin_topology(name: str) -> None:
    fake = FakeNvml(parse_fake_gpus(name), "node-a")
    topology = parse_topology(discover(fake, fake.read_file))
    expected = builtin_topology(name)
    assert nvidia_smi_cells(topology) == nvidia_smi_cells(expected)
    assert topology.key == expected.key  # same NUMA nodes, links and health
    assert [g.uuid for g in topology.gpus] == [
        fake_gpu_uuid("node-a", name, i) for i in range(expected.size)
    ]


def test_fake_uuids_stable_per_node_and_topology() -> None:
    # stable across processes (a uuid5 of node, machine and index, not `hash()`)
    assert fake_gpu_uuid("a", "dgx-a100", 0) == "GPU-73206172-22d5-572e-a946-3b4e490debf5"
    assert fake_gpu_uuid("a", "dgx-a100", 0) != fake_gpu_uuid("b", "dgx-a100", 0)
    assert fake_gpu_uuid("a", "dgx-a100", 0) != fake_gpu_uuid("a", "dgx-h100", 0)


def test_fail_option_marks_those_gpus_unhealthy() -> None:
    fake = FakeNvml(parse_fake_gpus("dgx-a100:fail=3,5"), "n")
    topology = parse_topology(discover(fake, fake.read_file))
    assert [g.index for g in topology.gpus if not g.healthy] == [3, 5]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("dgx-z", "unknown built-in topology 'dgx-z'"),
        ("dgx-a100:fail=9", "'9' is not a GPU index 0..7 of dgx-a100"),
        ("dgx-a100:broken=1", "expected NAME or NAME:fail=I[,J...]"),
    ],
)
def test_bad_fake_gpus_value(value: str, message: str) -> None:
    with pytest.raises(TopologyError, match=message.replace("[", r"\[").replace(".", r"\.")):
        parse_fake_gpus(value)


def test_device_plugin_bad_flag_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["device-plugin", "--node-name", "n", "--fake-gpus", "dgx-z"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("device-plugin: --fake-gpus 'dgx-z'")
    assert main(["agent", "--node-name", "n", "--fake-gpus", "dgx-z", "--once"]) == 2


def test_agent_once_publishes_fake_gpus(tmp_path: Path) -> None:
    with Emulator() as emu:
        emu.create_node("gpu-7", gpus=8)
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters: [{{name: e, cluster: {{server: '{emu.url}'}}}}]\n"
            "users: [{name: u, user: {}}]\n"
            "contexts: [{name: c, context: {cluster: e, user: u}}]\n"
            "current-context: c\n"
        )
        argv = ["agent", "--node-name", "gpu-7", "--kubeconfig", str(kubeconfig)]
        argv += ["--fake-gpus", "dgx-h100:fail=2", "--pod-resources-socket", "", "--once"]
        assert main(argv) == 0
        annotations = emu.get(NODES, "gpu-7")["metadata"]["annotations"]
    topology = parse_topology(annotations[ANNOTATION_TOPOLOGY])
    assert [g.uuid for g in topology.gpus] == [
        fake_gpu_uuid("gpu-7", "dgx-h100", i) for i in range(8)
    ]
    assert [g.healthy for g in topology.gpus] == [i != 2 for i in range(8)]


def test_generated_modules_match_the_proto(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    copy = tmp_path / "repo"
    source = ROOT / "scheduler/agent/deviceplugin/v1beta1"
    (copy / "hack").mkdir(parents=True)
    shutil.copy(ROOT / "hack/gen-deviceplugin-proto.sh", copy / "hack")
    target = copy / "scheduler/agent/deviceplugin/v1beta1"
    target.mkdir(parents=True)
    shutil.copy(source / "api.proto", target)
    env_python = Path(sys.executable).parent
    subprocess.run(
        ["bash", str(copy / "hack/gen-deviceplugin-proto.sh")],
        check=True,
        env={"PATH": f"{env_python}:/usr/bin:/bin"},
    )
    for name in ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py"):
        assert filecmp.cmp(source / name, target / name, shallow=False), f"{name} is stale"
