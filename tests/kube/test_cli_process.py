"""`topo-scheduler run` as a real process: kubeconfig, lease, JSON logs, SIGTERM -> exit 0."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.emulator import LEASES, Emulator
from tests.emulator.harness import all_bound_once


def _kubeconfig(path: Path, url: str) -> None:
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: emu\n"
        f"clusters:\n- name: emu\n  cluster:\n    server: {url}\n"
        "users:\n- name: emu\n  user: {}\n"
        "contexts:\n- name: emu\n  context:\n    cluster: emu\n    user: emu\n"
    )


def test_run_binds_then_sigterm_releases_lease_and_exits_0(
    emulator: Emulator, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    _kubeconfig(kubeconfig, emulator.url)
    emulator.create_node("n0", gpus=8)
    emulator.create_pod("p0", gpus=4)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "scheduler.cli",
            "run",
            "--kubeconfig",
            str(kubeconfig),
            "--leader-elect",
            "--leader-elect-namespace",
            "kube-system",
            "--bind-address",
            "127.0.0.1:0",
            "--kube-api-qps",
            "100",
            "--kube-api-burst",
            "200",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not all_bound_once(emulator, ["default/p0"]):
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "pod not bound"
            time.sleep(0.1)
        holder = emulator.get(LEASES, "topo-scheduler", "kube-system")["spec"]["holderIdentity"]
        assert holder
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert emulator.get(LEASES, "topo-scheduler", "kube-system")["spec"]["holderIdentity"] == ""
    records = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    decision = next(r for r in records if r["event"] == "pod scheduled")
    assert decision["pod"] == "default/p0" and decision["node"] == "n0"
    assert len(decision["gpus"].split(",")) == 4 and "duration_ms" in decision
    assert any(r["event"] == "scheduler stopped" and r["exit_code"] == 0 for r in records)
