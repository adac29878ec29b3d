"""Property: whatever bytes or YAML a file holds, every file-reading command ends with exit 0
or 2, one line on stderr when it fails, and in bounded time.

Random bytes, random nested YAML (deep, wide, huge integers, timestamps, nulls) and valid
inputs with one random subtree swapped in, for each file position of each command."""

from __future__ import annotations

import contextlib
import io
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.cli import main
from scheduler.core.topology import ANNOTATION_TOPOLOGY, builtin_topology, format_topology
from scheduler.core.topology.nvidia_smi import nvidia_smi_cells
from tests.builders import node, pod

SETTINGS = settings(
    # HARDEN_EXAMPLES=300 for a longer, random hunt; the suite runs a fixed dozen per file
    max_examples=int(os.environ.get("HARDEN_EXAMPLES", "12")),
    deadline=None,  # the bound is asserted per run below, with room for a slow shared machine
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize="HARDEN_EXAMPLES" not in os.environ,
)
SECONDS = 20.0

SNAPSHOT: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "List",
    "items": [
        node("cpu"),
        node(
            "gpu",
            cpu="32",
            memory="128Gi",
            extra={"nvidia.com/gpu": "8"},
            annotations={ANNOTATION_TOPOLOGY: format_topology(builtin_topology("dgx-a100"))},
        ),
        pod("held", {"cpu": "1", "nvidia.com/gpu": "2"}, node_name="gpu", phase="Running"),
    ],
}
POD = pod("web", {"cpu": "1", "nvidia.com/gpu": "1"},
          spec={"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]})  # fmt: skip
CONFIG: dict[str, Any] = {
    "apiVersion": "kubescheduler.config.k8s.io/v1",
    "kind": "KubeSchedulerConfiguration",
    "profiles": [
        {
            "schedulerName": "topo-scheduler",
            "pluginConfig": [{"name": "GPUTopology", "args": {"pairScores": {"nvlink": 100}}}],
        }
    ],
}
SCENARIO: dict[str, Any] = {
    "name": "tiny",
    "nodes": [
        {
            "name": "n",
            "count": 2,
            "gpuTopology": "pcie-4gpu",
            "resources": {"cpu": "32", "memory": "64Gi"},
            "labels": {"pool": "a"},
        }
    ],
    "jobs": [
        {"name": "j", "gpus": 2, "duration": 60},
        {"generate": 3, "gpus": {1: 1, 2: 1}, "duration": {"median": 30}},
    ],
}
TRACE = "job,arrival_s,duration_s,gpus,workers,gpu_model,status\na,0,10,1,1,,\nb,5,20,2,,,\n"
KUBECONFIG: dict[str, Any] = {"apiVersion": "v1", "kind": "Config", "clusters": [],
                              "users": [], "contexts": [], "current-context": ""}  # fmt: skip


def smi_text() -> str:
    cells = nvidia_smi_cells(builtin_topology("pcie-4gpu"))
    lines = ["\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity"]
    for i in range(4):
        row = [" X " if i == j else cells[(min(i, j), max(i, j))] for j in range(4)]
        lines.append(f"GPU{i}\t" + "\t".join(row) + f"\t0-7\t{i // 2}")
    return "\n".join(lines) + "\n"


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**60, max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["2020-02-30", "1e16", "0.5", "-1", "NV18", "nvidia.com/gpu", "Pod", "Node"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def yaml_text(value: Any) -> str:
    return yaml.safe_dump(value, allow_unicode=True)


@st.composite
def nested_yaml(draw: st.DrawFn) -> str:
    """Deep or wide nesting in flow or block style, or a random document."""
    depth = draw(st.integers(min_value=1, max_value=3000))
    kind = draw(st.sampled_from(["flow-list", "flow-map", "block", "random", "big-int", "date"]))
    if kind == "flow-list":
        return "[" * depth + "1" + "]" * draw(st.integers(0, depth))
    if kind == "flow-map":
        return "{a: " * depth + "1" + "}" * depth
    if kind == "block":
        return "".join("  " * k + "- \n" for k in range(min(depth, 400)))
    if kind == "big-int":
        return f"a: {'9' * depth}\n"
    if kind == "date":
        return f"a: {draw(st.sampled_from(['2020-02-30', '2021-13-01', '0000-00-00']))}\n"
    return yaml_text(draw(VALUES))


def mutate(document: Any, seed: int, value: Any) -> Any:
    """The document with one randomly chosen subtree replaced by `value`."""
    rng = random.Random(seed)
    copy = yaml.safe_load(yaml.safe_dump(document))
    parent: Any = None
    key: Any = None
    here = copy
    while isinstance(here, dict | list) and here and rng.random() < 0.8:
        parent = here
        key = rng.choice(list(here)) if isinstance(here, dict) else rng.randrange(len(here))
        here = here[key]
    if parent is None:
        return value
    parent[key] = value
    return copy


@st.composite
def contents(draw: st.DrawFn, base: Any) -> bytes:
    """Random bytes, random YAML, or the valid `base` (mapping or text) with one change."""
    choice = draw(st.sampled_from(["bytes", "yaml", "mutated", "mutated-text"]))
    if choice == "bytes":
        return draw(st.binary(max_size=400))
    if choice == "yaml":
        return draw(nested_yaml()).encode("utf-8", "surrogatepass")
    if isinstance(base, str) or choice == "mutated-text":
        text = base if isinstance(base, str) else yaml_text(base)
        at = draw(st.integers(0, len(text)))
        junk = draw(st.sampled_from(["\xff", "NV" + "9" * 5000, "NV\u00b2", "[" * 5000, "\x00",
                                     "1" * 5001, "\t", "\n", "GPU99", "2020-02-30"]))  # fmt: skip
        return (text[:at] + junk + text[at + draw(st.integers(0, 5)) :]).encode(
            "utf-8", "surrogateescape"
        )
    value = draw(VALUES)
    return yaml_text(mutate(base, draw(st.integers(0, 2**32)), value)).encode(
        "utf-8", "surrogatepass"
    )


def run_command(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    out = io.StringIO()
    start = time.monotonic()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = main(argv)
    elapsed = time.monotonic() - start
    assert elapsed < SECONDS, (argv, elapsed)
    return code, err.getvalue()


def check(code: int, err: str) -> None:
    assert code in (0, 2), (code, err)
    if code == 2:
        assert err.count("\n") == 1 and "Traceback" not in err, err


@pytest.fixture
def valid(tmp_path: Path) -> dict[str, str]:
    files = {
        "snapshot": yaml_text(SNAPSHOT),
        "pod": yaml_text(POD),
        "config": yaml_text(CONFIG),
        "scenario": yaml_text(SCENARIO),
        "trace": TRACE,
        "smi": smi_text(),
    }
    paths = {}
    for name, text in files.items():
        path = tmp_path / f"valid-{name}"
        path.write_text(text)
        paths[name] = str(path)
    return paths


Command = Callable[[dict[str, str], str], list[str]]
COMMANDS: dict[str, tuple[Any, Command]] = {
    "explain --snapshot": (SNAPSHOT, lambda v, f: ["explain", "--snapshot", f, "--pod", v["pod"]]),
    "explain --pod": (POD, lambda v, f: ["explain", "--snapshot", v["snapshot"], "--pod", f]),
    "explain --config": (
        CONFIG,
        lambda v, f: ["explain", "--snapshot", v["snapshot"], "--pod", v["pod"], "--config", f],
    ),
    "simulate SCENARIO": (SCENARIO, lambda v, f: ["simulate", f, "--policy", "topo+topo-dp"]),
    "simulate --config": (
        CONFIG,
        lambda v, f: ["simulate", v["scenario"], "--policy", "topo+topo-dp", "--config", f],
    ),
    "simulate --trace": (
        TRACE,
        lambda v, f: [
            "simulate",
            "--trace",
            f,
            "--cluster",
            v["scenario"],
            "--policy",
            "topo+topo-dp",
        ],
    ),
    "simulate --cluster": (
        SCENARIO,
        lambda v, f: [
            "simulate",
            "--trace",
            v["trace"],
            "--cluster",
            f,
            "--policy",
            "topo+topo-dp",
        ],
    ),
    "topology from-nvidia-smi": (smi_text(), lambda v, f: ["topology", "from-nvidia-smi", f]),
    "agent --kubeconfig": (
        KUBECONFIG,
        lambda v, f: [
            "agent",
            "--node-name",
            "n",
            "--kubeconfig",
            f,
            "--fake-gpus",
            "pcie-4gpu",
            "--once",
            "--interval",
            "1",
        ],
    ),
}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_any_file_ends_in_exit_0_or_2_with_one_line(
    name: str, valid: dict[str, str], tmp_path: Path
) -> None:
    base, command = COMMANDS[name]

    @SETTINGS
    @given(content=contents(base))
    def property_(content: bytes) -> None:
        path = tmp_path / "input"
        path.write_bytes(content)
        code, err = run_command(command(valid, str(path)))
        if name == "agent --kubeconfig":
            assert code == 2, err  # no cluster can be reached from any of these files
        check(code, err)

    property_()
