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
    shutil.copy(ROOT / "pyproject.toml", copy)
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


LONG_DIR = "d" * 100  # <tmp>/ddd.../topo-scheduler-gpu.sock exceeds a unix socket path


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--metrics-bind-address", "127.0.0.1:99999"),
        ("--metrics-bind-address", ""),
        ("--metrics-bind-address", "10270"),
        ("--metrics-bind-address", "gpu-node:10270"),
        ("--metrics-bind-address", "127.0.0.1:" + "9" * 5000),
        ("--fake-gpus", ""),
        ("--fake-gpus", "   "),
        ("--fake-gpus", "dgx-a100:"),
        ("--fake-gpus", "dgx-a100:fail="),
        ("--fake-gpus", "dgx-a100:fail=1,,2"),
        ("--fake-gpus", "dgx-a100:fail=-1"),
        ("--fake-gpus", "dgx-a100:fail=" + "9" * 5000),
        ("--fake-gpus", "dgx-a100:fail=3:fail=4"),
        ("--resource-name", ""),
        ("--resource-name", "gpu"),
        ("--resource-name", "nvidia.com/"),
        ("--resource-name", "/gpu"),
        ("--resource-name", "Nvidia.com/gpu"),
        ("--resource-name", "nvidia.com/gpu/0"),
        ("--resource-name", "kubernetes.io/gpu"),
        ("--resource-name", "nvidia.com/" + "g" * 64),
        ("--node-name", ""),
        ("--node-name", " gpu-1"),
        ("--node-name", "GPU_1"),
        ("--device-plugin-dir", ""),
        ("--device-plugin-dir", "/nonexistent/device-plugins"),
        ("--device-plugin-dir", "FILE"),
        ("--device-plugin-dir", LONG_DIR),
        ("--pod-resources-socket", ""),
        ("--kubeconfig", ""),
        ("--kubeconfig", "/nonexistent/kubeconfig"),
    ],
)
def test_device_plugin_flag_errors_are_one_line_naming_the_flag(
    flag: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("")
    (tmp_path / LONG_DIR).mkdir()
    if value == "FILE":
        value = str(tmp_path / "file")
    elif value == LONG_DIR:
        value = str(tmp_path / LONG_DIR)
    argv = ["device-plugin", "--node-name", "gpu-1", "--fake-gpus", "dgx-a100"]
    argv += ["--device-plugin-dir", str(tmp_path), flag, value]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"device-plugin: {flag}"), err
    assert len(err) < 400


def test_device_plugin_unknown_strategy_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["device-plugin", "--node-name", "n", "--device-list-strategy", "volume-mounts"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--device-list-strategy" in err


def test_device_plugin_flags_accepted(tmp_path: Path) -> None:
    from scheduler.agent.deviceplugin.cli import check_flags
    from scheduler.cli import build_parser

    argv = ["device-plugin", "--node-name", "gpu-1.example", "--device-plugin-dir", str(tmp_path)]
    argv += ["--resource-name", "example.com/accel_v2", "--metrics-bind-address", "[::1]:0"]
    argv += ["--fake-gpus", "dgx-h100:fail=02,7"]
    flags = check_flags(build_parser().parse_args(argv))
    assert flags.resource_name == "example.com/accel_v2"
    assert (flags.host, flags.port) == ("::1", 0)
    assert flags.fake_gpus.failing == frozenset({2, 7})
    defaults = check_flags(
        build_parser().parse_args(
            ["device-plugin", "--node-name", "n", "--device-plugin-dir", str(tmp_path)]
        )
    )
    assert defaults.resource_name == "nvidia.com/gpu" and defaults.fake_gpus is None
    assert (defaults.host, defaults.port) == ("0.0.0.0", 10270)


def test_waiting_for_the_kubelet_is_said_once_then_reminded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import logging
    import threading
    import time

    from scheduler.agent.deviceplugin.server import PluginServer, ServerConfig

    caplog.set_level(logging.INFO, logger="topo_scheduler.device_plugin")
    stop = threading.Event()
    config = ServerConfig(str(tmp_path), poll_interval=0.02, waiting_reminder=0.2)
    server = PluginServer(None, config, stop)  # type: ignore[arg-type]
    thread = threading.Thread(target=server.run)
    thread.start()
    time.sleep(0.7)
    stop.set()
    thread.join(5)
    waiting = [r.getMessage() for r in caplog.records if "registration socket" in r.getMessage()]
    assert waiting[0] == f"waiting for the kubelet's registration socket {tmp_path}/kubelet.sock"
    assert 2 <= len(waiting) <= 5  # a reminder every waiting_reminder seconds, not a flood
    assert all("still waiting" in line for line in waiting[1:])
