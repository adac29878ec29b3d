"""`nvidia-smi topo -m` parser and `topo-scheduler topology from-nvidia-smi`."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from topo_fakes import DATA

from scheduler.cli import main
from scheduler.core.topology import (
    BUILTIN_TOPOLOGIES,
    TopologyError,
    builtin_topology,
    builtin_topology_text,
    parse_nvidia_smi,
    parse_topology,
)
from scheduler.core.topology.nvidia_smi import nvidia_smi_cells


def _read(name: str) -> str:
    return (DATA / f"{name}.txt").read_text()


@pytest.mark.parametrize(
    ("name", "numa", "nvlink_pairs", "switched"),
    [
        ("dgx1-v100", [0, 0, 0, 0, 1, 1, 1, 1], 16, False),
        ("dgx-a100", [3, 3, 1, 1, 7, 7, 5, 5], 28, True),
        ("dgx-h100", [0, 0, 0, 0, 1, 1, 1, 1], 28, True),
        ("pcie-8gpu-2socket", [0, 0, 0, 0, 1, 1, 1, 1], 0, False),
        ("all-sys-2numa", [0, 0, 1, 1], 0, False),
    ],
)
def test_real_outputs(name: str, numa: list[int], nvlink_pairs: int, switched: bool) -> None:
    topology = parse_nvidia_smi(_read(name), source=name)
    assert [g.numa_node for g in topology.gpus] == numa
    assert all(g.uuid is None and g.model is None and g.healthy for g in topology.gpus)
    nv = [lk for lk in topology.links if lk.nvlinks]
    assert len(nv) == nvlink_pairs
    assert all((lk.nvswitch_links == lk.nvlinks) == switched for lk in nv)
    assert all(lk.pcie is None for lk in nv)  # hidden behind NV# in the matrix
    # Tab-separated file with legend equals the space-aligned built-in text.
    assert topology == parse_nvidia_smi(builtin_topology_text(name))


def test_specific_cells() -> None:
    dgx1 = parse_nvidia_smi(_read("dgx1-v100"))
    cells = nvidia_smi_cells(dgx1)
    assert cells[(0, 3)] == "NV2" and cells[(0, 1)] == "NV1" and cells[(0, 5)] == "SYS"
    pcie = parse_nvidia_smi(_read("pcie-8gpu-2socket"))
    assert [pcie.link(0, j).pcie for j in range(1, 8)] == ["PIX", "NODE", "NODE"] + ["SYS"] * 4


def test_old_driver_without_numa_column() -> None:
    text = _read("dgx1-v100-old-driver")
    # NUMA nodes from the CPU Affinity groups (0-19,40-59 -> 0; 20-39,60-79 -> 1)
    assert parse_nvidia_smi(text) == parse_nvidia_smi(_read("dgx1-v100"))  # SOC read as SYS
    topology = parse_nvidia_smi(text, numa=[0, 0, 0, 0, 1, 1, 1, 1])
    assert topology == parse_nvidia_smi(_read("dgx1-v100"))
    swapped = parse_nvidia_smi(text, numa=[1, 1, 1, 1, 0, 0, 0, 0])  # --numa still wins
    assert [g.numa_node for g in swapped.gpus] == [1, 1, 1, 1, 0, 0, 0, 0]
    no_columns = "\n".join(line.rsplit("\t", 1)[0] for line in text.splitlines()[:9])
    with pytest.raises(TopologyError, match="no NUMA Affinity or CPU Affinity column; give"):
        parse_nvidia_smi(no_columns)


@pytest.mark.parametrize(
    ("affinities", "numa"),
    [
        (["0-7", "0-7", "8-15", "8-15"], [0, 0, 1, 1]),
        (["8-15", "0-7", "N/A", "0-7"], [1, 0, None, 0]),  # numbered by the lowest CPU
        (["0-3,8-11", "4-7,12-15", "0-3,8-11", "4-7,12-15"], [0, 1, 0, 1]),
        (["0-63"] * 4, [0, 0, 0, 0]),
    ],
)
def test_numa_from_cpu_affinity(affinities: list[str], numa: list[int | None]) -> None:
    n = len(affinities)
    header = "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\tCPU Affinity\n"
    rows = "".join(
        f"GPU{i}\t" + "\t".join(" X " if i == j else "SYS" for j in range(n))
        + f"\t{affinities[i]}\n"
        for i in range(n)
    )
    assert [g.numa_node for g in parse_nvidia_smi(header + rows).gpus] == numa


@pytest.mark.parametrize(
    ("affinities", "message"),
    [
        (["0-7", "0-15"], "CPU Affinity groups overlap"),
        (["0-7", "cpu0"], "GPU1 CPU Affinity 'cpu0' is not a CPU list; give --numa"),
        (["7-0", "0-7"], "GPU0 CPU Affinity '7-0' is not a CPU list"),
        (["0-7", "\u00b9"], "is not a CPU list"),
    ],
)
def test_cpu_affinity_that_is_not_numa(affinities: list[str], message: str) -> None:
    header = "\tGPU0\tGPU1\tCPU Affinity\n"
    rows = f"GPU0\t X \tSYS\t{affinities[0]}\nGPU1\tSYS\t X \t{affinities[1]}\n"
    with pytest.raises(TopologyError, match=message):
        parse_nvidia_smi(header + rows)


def test_errors_name_the_cell() -> None:
    text = _read("pcie-8gpu-2socket")
    asym = text.replace("GPU1\tPIX", "GPU1\tPXB", 1)
    with pytest.raises(TopologyError, match=r"GPU1/GPU0 .* not symmetric"):
        parse_nvidia_smi(asym)
    with pytest.raises(TopologyError, match="GPU2 row, GPU3 column: unknown link 'QPI'"):
        parse_nvidia_smi(text.replace("GPU2\tNODE\tNODE\t X \tPIX", "GPU2\tNODE\tNODE\t X \tQPI"))
    with pytest.raises(TopologyError, match="no `nvidia-smi topo -m` header"):
        parse_nvidia_smi("No devices were found\n")
    with pytest.raises(TopologyError, match="3 NUMA nodes given for 8 GPUs"):
        parse_nvidia_smi(text, numa=[0, 0, 1])
    truncated = "\n".join(text.splitlines()[:5])
    with pytest.raises(TopologyError, match=r"expected rows GPU0..GPU7"):
        parse_nvidia_smi(truncated)


def test_builtins_are_valid() -> None:
    for name in BUILTIN_TOPOLOGIES:
        topology = builtin_topology(name)
        assert topology.size in (4, 8, 16)
        assert parse_topology(json.dumps({"version": 1, "gpus": [], "links": []})).size == 0
    with pytest.raises(TopologyError, match="unknown built-in topology 'dgx-9'"):
        builtin_topology("dgx-9")


def test_cli_outputs_annotation(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topology", "from-nvidia-smi", str(DATA / "dgx-h100.txt")]) == 0
    out = capsys.readouterr().out
    topology = parse_topology(out, node="cli")
    assert topology == parse_nvidia_smi(_read("dgx-h100"))
    data = json.loads(out)
    assert data["gpus"][0]["uuid"] is None and data["links"][0]["nvswitchLinks"] == 18


def test_cli_numa_flag_and_stdin(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(_read("dgx1-v100-old-driver")))
    assert main(["topology", "from-nvidia-smi", "-", "--numa", "0,0,0,0,1,1,1,1"]) == 0
    assert parse_topology(capsys.readouterr().out).gpus[7].numa_node == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["dgx1-v100-old-driver.txt", "--numa", "0,0"], "2 NUMA nodes given for 8 GPUs"),
        (["dgx1-v100-old-driver.txt", "--numa", "0,a"], "--numa: 'a' is not a NUMA node number"),
        (["missing.txt"], "cannot read"),
    ],
)
def test_cli_errors_exit_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(DATA / args[0]) if args[0] != "missing.txt" else str(Path("/nonexistent/x.txt"))
    assert main(["topology", "from-nvidia-smi", path, *args[1:]]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_pasted_text_with_stripped_indentation() -> None:
    lines = _read("pcie-4gpu").splitlines()
    pasted = "\n".join(line.strip() for line in lines) + "\n"
    indented = "\n".join("    " + line for line in lines) + "\n"
    assert parse_nvidia_smi(pasted) == parse_nvidia_smi(_read("pcie-4gpu"))
    assert parse_nvidia_smi(indented) == parse_nvidia_smi(_read("pcie-4gpu"))


def test_single_gpu_machine() -> None:
    text = "\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-15\t0\n"
    topology = parse_nvidia_smi(text)
    assert topology.size == 1 and topology.links == () and topology.gpus[0].numa_node == 0
