"""`topo-scheduler run` startup: unusable flags and files exit 2 with one line naming them;
an API server that does not answer makes it exit 1 after --startup-timeout."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.emulator import Emulator


def _kubeconfig(url: str) -> str:
    return (
        "apiVersion: v1\nkind: Config\ncurrent-context: emu\n"
        f"clusters:\n- name: emu\n  cluster:\n    server: {url}\n"
        "users:\n- name: emu\n  user: {}\n"
        "contexts:\n- name: emu\n  context:\n    cluster: emu\n    user: emu\n"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_all(cases: dict[str, list[str]], timeout: float = 60) -> dict[str, tuple[int, str, float]]:
    """Start every `run` at once (2 shared cores), then collect (rc, stderr, seconds)."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    start = time.monotonic()
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-m", "scheduler.cli", "run", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for name, argv in cases.items()
    }
    out = {}
    for name, proc in procs.items():
        try:
            _, err = proc.communicate(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
        out[name] = (proc.returncode, err, time.monotonic() - start)
    return out


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if not line.startswith("{")]


def test_unusable_flags_and_files_exit_2_with_one_line(tmp_path: Path, emulator: Emulator) -> None:
    good = tmp_path / "kubeconfig"
    good.write_text(_kubeconfig(emulator.url))
    files = {
        "binary": b"\xff\xfe\x00\x80garbage",
        "list": b"- a\n- b\n",
        "empty": b"",
        "deep": b"[" * 50_000 + b"]" * 50_000,
        "no-context": b"apiVersion: v1\nkind: Config\n",
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "config.bin").write_bytes(b"\xff\xfeapiVersion")
    header = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
    (tmp_path / "config-date.yaml").write_text(header + "percentageOfNodesToScore: 2020-02-30\n")
    (tmp_path / "config-range.yaml").write_text(header + "percentageOfNodesToScore: 400\n")
    busy = socket.create_server(("127.0.0.1", 0))
    busy_port = busy.getsockname()[1]
    base = ["--kubeconfig", str(good), "--insecure-plain-http"]
    free = "127.0.0.1:0"
    cases = {
        "bind-nohost": (base + ["--bind-address", "nohost"], "--bind-address"),
        "bind-name": (base + ["--bind-address", "example.com:80"], "--bind-address"),
        "bind-port": (base + ["--bind-address", "127.0.0.1:70000"], "--bind-address"),
        "port-in-use": (base + ["--bind-address", f"127.0.0.1:{busy_port}"], "in use"),
        "qps-0": (base + ["--bind-address", free, "--kube-api-qps", "0"], "--kube-api-qps"),
        "qps-nan": (base + ["--bind-address", free, "--kube-api-qps", "nan"], "--kube-api-qps"),
        "burst-0": (base + ["--bind-address", free, "--kube-api-burst", "0"], "--kube-api-burst"),
        "events-qps-0": (base + ["--bind-address", free, "--events-qps", "0"], "--events-qps"),
        "events-qps-inf": (base + ["--bind-address", free, "--events-qps", "inf"], "--events-qps"),
        "events-burst-0": (
            base + ["--bind-address", free, "--events-burst", "0"],
            "--events-burst: must be at least 1, got 0",
        ),
        "timeout-0": (
            base + ["--startup-timeout", "0", "--bind-address", free],
            "--startup-timeout",
        ),
        "config-map": (base + ["--config-map", "onlyname", "--bind-address", free], "--config-map"),
        "config-bytes": (
            base + ["--config", str(tmp_path / "config.bin"), "--bind-address", free],
            "not UTF-8",
        ),
        "config-deep": (
            base + ["--config", str(tmp_path / "deep"), "--bind-address", free],
            f"{tmp_path / 'deep'}: line 1, column 101: nested more than 100 levels deep",
        ),
        "config-date": (
            base + ["--config", str(tmp_path / "config-date.yaml"), "--bind-address", free],
            "percentageOfNodesToScore: not in valid range [0-100], got '2020-02-30'",
        ),
        "config-range": (
            base + ["--config", str(tmp_path / "config-range.yaml"), "--bind-address", free],
            "percentageOfNodesToScore",
        ),
        "kubeconfig-missing": (["--kubeconfig", str(tmp_path / "nope")], "no such file"),
        "kubeconfig-dir": (["--kubeconfig", str(tmp_path)], "is a directory"),
        "cert-missing": (
            [
                "--kubeconfig",
                str(good),
                "--bind-address",
                free,
                "--tls-cert-file",
                "/nope.crt",
                "--tls-private-key-file",
                "/nope.key",
            ],
            "--tls-cert-file /nope.crt",
        ),
        "cert-garbage": (
            [
                "--kubeconfig",
                str(good),
                "--bind-address",
                free,
                "--tls-cert-file",
                str(tmp_path / "list"),
                "--tls-private-key-file",
                str(tmp_path / "list"),
            ],
            "not a matching PEM",
        ),
        "cert-alone": (
            ["--kubeconfig", str(good), "--bind-address", free, "--tls-cert-file", str(good)],
            "must be given together",
        ),
        "no-credentials": (
            ["--bind-address", free, "--insecure-plain-http"],
            "--kubeconfig: required outside a pod",
        ),
    }
    for name in files:
        cases[f"kubeconfig-{name}"] = (
            ["--kubeconfig", str(tmp_path / name), "--bind-address", free, "--insecure-plain-http"],
            f"--kubeconfig {tmp_path / name}",
        )
    try:
        results = _run_all({name: argv for name, (argv, _) in cases.items()})
    finally:
        busy.close()
    for name, (_, expected) in cases.items():
        rc, err, _ = results[name]
        lines = _error_lines(err)
        assert rc == 2, (name, err)
        # argparse's own (a number that does not parse) names the subcommand first
        assert len(lines) == 1, (name, err)
        assert lines[0].startswith(("error: ", "topo-scheduler run: error: ")), (name, err)
        assert expected in lines[0], (name, lines[0])
        assert "Traceback" not in err


def test_unreachable_api_server_exits_1_after_the_startup_timeout(tmp_path: Path) -> None:
    dead = tmp_path / "kubeconfig"
    dead.write_text(_kubeconfig(f"http://127.0.0.1:{_free_port()}"))
    argv = ["--kubeconfig", str(dead), "--insecure-plain-http", "--bind-address", "127.0.0.1:0"]
    results = _run_all({"dead": [*argv, "--startup-timeout", "2"]})
    rc, err, took = results["dead"]
    assert rc == 1, err
    lines = _error_lines(err)
    assert len(lines) == 1 and "unreachable for 2s (--startup-timeout)" in lines[0], err
    assert 2.0 <= took < 15.0
    assert "waiting for the API server" in err  # each retry is logged


@pytest.mark.parametrize("status", [401])
def test_refused_credentials_exit_1_at_once(
    emulator: Emulator, status: int, tmp_path: Path
) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(_kubeconfig(emulator.url))
    emulator.fail(status, 1, path_contains="/version")
    argv = ["--kubeconfig", str(config), "--insecure-plain-http", "--bind-address", "127.0.0.1:0"]
    rc, err, _ = _run_all({"refused": [*argv, "--startup-timeout", "30"]})["refused"]
    assert rc == 1 and "refused the credentials" in err, err
