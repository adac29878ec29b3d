"""Agent: NVML discovery on fake machines equals the machines' nvidia-smi matrices; patching
only on change; survival of NVML and API errors; the no-driver message."""

from __future__ import annotations

import json
import logging

import pynvml
import pytest
from topo_fakes import (
    DATA,
    FakeNodeApi,
    FakeNvml,
    Machine,
    all_sys_2numa,
    dgx1_v100,
    dgx_a100,
    dgx_h100,
    fake_sysfs,
    pcie_8gpu_2socket,
)

from scheduler.agent.discovery import discover, normalize_bus_id
from scheduler.agent.loop import Agent, AgentConfig, NoDriverError
from scheduler.core.topology import (
    ANNOTATION_ASSIGNMENTS,
    ANNOTATION_TOPOLOGY,
    GpuSelector,
    parse_nvidia_smi,
    parse_topology,
)
from scheduler.core.topology.nvidia_smi import nvidia_smi_cells

MACHINES = {
    "dgx1-v100": dgx1_v100,
    "dgx-a100": dgx_a100,
    "dgx-h100": dgx_h100,
    "pcie-8gpu-2socket": pcie_8gpu_2socket,
    "all-sys-2numa": all_sys_2numa,
}


def _discover(machine: Machine) -> dict[str, object]:
    return discover(FakeNvml(machine), fake_sysfs(machine).get)


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_discovery_matches_nvidia_smi_matrix(name: str) -> None:
    machine = MACHINES[name]()
    topology = parse_topology(_discover(machine), node=name)
    expected = parse_nvidia_smi((DATA / f"{name}.txt").read_text(), source=name)
    assert nvidia_smi_cells(topology) == nvidia_smi_cells(expected)
    assert [g.numa_node for g in topology.gpus] == [g.numa_node for g in expected.gpus]
    assert [(lk.a, lk.b, lk.nvswitch_links) for lk in topology.links] == [
        (lk.a, lk.b, lk.nvswitch_links) for lk in expected.links
    ]
    for gpu, fake in zip(topology.gpus, machine.gpus, strict=True):
        assert gpu.healthy and gpu.uuid and gpu.uuid.startswith("GPU-")
        assert gpu.model == fake.name and gpu.memory_mib == fake.memory_mib
        assert gpu.pci_bus_id == normalize_bus_id(fake.bus_id)


def test_discovery_reports_pcie_level_behind_nvlink_pairs() -> None:
    topology = parse_topology(_discover(dgx1_v100()))
    # nvidia-smi shows NV1 for 0-1 and hides the PCIe switch they share; NVML tells it.
    assert topology.link(0, 1).pcie == "PIX" and topology.link(0, 1).nvlinks == 1
    assert topology.link(0, 2).pcie == "PHB"


def test_mig_gpu_published_and_never_selected() -> None:
    machine = pcie_8gpu_2socket(mig_gpu=5)
    topology = parse_topology(_discover(machine))
    assert [g.mig_enabled for g in topology.gpus] == [i == 5 for i in range(8)]
    selector = GpuSelector()
    for size in range(1, 8):
        chosen = selector.best_set(topology, 0xFF, size)
        assert chosen is not None and 5 not in chosen.gpus
    assert selector.best_set(topology, 0xFF, 8) is None
    assert selector.best_set(topology, 1 << 5, 1) is None


@pytest.mark.parametrize("mode", ["calls", "handle"])
def test_failing_gpu_is_unhealthy_and_rest_is_intact(mode: str) -> None:
    machine = pcie_8gpu_2socket(failing={3: mode})
    topology = parse_topology(_discover(machine))
    assert [g.healthy for g in topology.gpus] == [i != 3 for i in range(8)]
    cells = nvidia_smi_cells(topology)
    expected = nvidia_smi_cells(parse_nvidia_smi((DATA / "pcie-8gpu-2socket.txt").read_text()))
    for pair, cell in expected.items():
        assert cells[pair] == ("?" if 3 in pair else cell)
    selector = GpuSelector()
    assert selector.best_set(topology, 0xFF, 8) is None  # only 7 healthy GPUs
    chosen = selector.best_set(topology, 0xFF, 7)
    assert chosen is not None and 3 not in chosen.gpus
    chosen = selector.best_set(topology, 0xFF, 2)
    assert chosen is not None and chosen.gpus in ((0, 1), (4, 5), (6, 7))


def _agent(machine: Machine, api: FakeNodeApi, **kw: object) -> Agent:
    config = AgentConfig(node_name="gpu-1", pod_resources_socket="")
    return Agent(config, kw.pop("nvml", FakeNvml(machine)), api, read_file=fake_sysfs(machine).get)


def test_agent_patches_only_on_change() -> None:
    api = FakeNodeApi()
    agent = _agent(dgx_h100(), api)
    assert agent.sync_once().patched == (ANNOTATION_TOPOLOGY,)
    assert agent.sync_once().patched == ()
    assert len(api.patches) == 1
    published = parse_topology(api.annotations[ANNOTATION_TOPOLOGY], node="gpu-1")
    assert published.size == 8 and published.link(0, 7).nvlinks == 18
    api.annotations[ANNOTATION_TOPOLOGY] = json.dumps({"version": 1, "gpus": []})
    assert agent.sync_once().patched == (ANNOTATION_TOPOLOGY,)
    assert ANNOTATION_ASSIGNMENTS not in api.annotations  # no kubelet socket configured


def test_agent_no_driver_message(caplog: pytest.LogCaptureFixture) -> None:
    api = FakeNodeApi()
    nvml = FakeNvml(dgx_a100(), init_error=pynvml.NVMLError_LibraryNotFound)
    agent = _agent(dgx_a100(), api, nvml=nvml)
    with pytest.raises(NoDriverError, match="no NVIDIA driver on node gpu-1"):
        agent.sync_once()
    with caplog.at_level(logging.ERROR):
        assert agent.run(once=True) == 1
    assert "no NVIDIA driver" in caplog.text and api.patches == []
    nvml.init_error = pynvml.NVMLError_DriverNotLoaded
    with pytest.raises(NoDriverError):
        agent.sync_once()


def test_agent_backs_off_on_errors_and_recovers() -> None:
    api = FakeNodeApi(fail_next=3)
    nvml = FakeNvml(pcie_8gpu_2socket(), count_error=True)
    config = AgentConfig(node_name="gpu-1", interval=30.0, pod_resources_socket="")
    agent = Agent(config, nvml, api, read_file=fake_sysfs(nvml.machine).get)
    delays: list[float] = []

    def wait(delay: float) -> bool:
        delays.append(delay)
        if len(delays) == 2:
            nvml.count_error = False  # NVML recovers; the API still fails 3 times
        return len(delays) >= 7

    assert agent.run(wait=wait) == 0
    # NVML fails twice, the API three times, then success every interval.
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert len(api.patches) == 1
    assert nvml.calls.count("init") == 3  # re-initialised after each NVML failure
    assert nvml.calls.count("shutdown") == 2


def test_agent_failing_for_days_keeps_backing_off() -> None:
    # 1,100 failures in a row: the doubling backoff is capped, never a float overflow.
    api = FakeNodeApi(fail_next=1_100)
    nvml = FakeNvml(pcie_8gpu_2socket())
    config = AgentConfig(node_name="gpu-1", interval=30.0, pod_resources_socket="")
    agent = Agent(config, nvml, api, read_file=fake_sysfs(nvml.machine).get)
    delays: list[float] = []

    def wait(delay: float) -> bool:
        delays.append(delay)
        return len(delays) >= 1_101

    assert agent.run(wait=wait) == 0
    assert delays[:6] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0]
    assert set(delays[5:]) == {30.0} and len(api.patches) == 1


class _FakeCoreV1:
    """Records what KubeNodeApi sends to the API server."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, object], str | None]] = []

    def read_node(self, name: str) -> object:
        from types import SimpleNamespace

        return SimpleNamespace(metadata=SimpleNamespace(annotations={"a": "1"}))

    def patch_node(
        self, name: str, body: dict[str, object], _content_type: str | None = None
    ) -> None:
        self.patches.append((name, body, _content_type))

    def list_pod_for_all_namespaces(self, field_selector: str) -> object:
        from types import SimpleNamespace

        assert field_selector == "spec.nodeName=gpu-1"
        meta = SimpleNamespace(namespace="ml", name="p", uid="u-1")
        return SimpleNamespace(items=[SimpleNamespace(metadata=meta)])


def test_kube_adapter_sends_merge_patch() -> None:
    from scheduler.agent.kube import KubeNodeApi

    core = _FakeCoreV1()
    api = KubeNodeApi(core)
    assert api.node_annotations("gpu-1") == {"a": "1"}
    api.patch_node_annotations("gpu-1", {ANNOTATION_TOPOLOGY: "{}", "old": None})
    assert core.patches == [
        (
            "gpu-1",
            {"metadata": {"annotations": {ANNOTATION_TOPOLOGY: "{}", "old": None}}},
            "application/merge-patch+json",
        )
    ]
    assert api.pod_uids("gpu-1") == {("ml", "p"): "u-1"}


def test_agent_command_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from scheduler.agent.kube import KubeNodeApi
    from scheduler.cli import main

    api = FakeNodeApi()
    nvml = FakeNvml(dgx_a100())
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setattr(KubeNodeApi, "connect", classmethod(lambda cls, kubeconfig: api))
    argv = [
        "agent",
        "--node-name",
        "gpu-1",
        "--once",
        "--pod-resources-socket",
        "/nonexistent.sock",
    ]
    assert main(argv) == 0
    published = parse_topology(api.annotations[ANNOTATION_TOPOLOGY])
    # No sysfs here: NUMA nodes come from NVML's memory affinity.
    assert [g.numa_node for g in published.gpus] == [3, 3, 1, 1, 7, 7, 5, 5]
    nvml_missing = FakeNvml(dgx_a100(), init_error=pynvml.NVMLError_LibraryNotFound)
    monkeypatch.setitem(sys.modules, "pynvml", nvml_missing)
    assert main(argv) == 1
    assert main(["agent", "--node-name", "gpu-1", "--interval", "0"]) == 2


def test_real_pynvml_without_driver_says_so() -> None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:  # a machine with a driver: nothing to check here
        pynvml.nvmlShutdown()
        pytest.skip("NVIDIA driver present")
    agent = Agent(AgentConfig(node_name="cpu-1", pod_resources_socket=""), pynvml, FakeNodeApi())
    with pytest.raises(NoDriverError, match="no NVIDIA driver on node cpu-1"):
        agent.sync_once()
