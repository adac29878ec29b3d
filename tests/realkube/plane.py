"""A real control plane (etcd + kube-apiserver 1.20, optionally kube-scheduler) on loopback,
driven through `shared/realkube/`'s scripts, for the real-plane tests and the benchmark.

Each `Plane` has its own state dir and free ports, so several can run on one machine; `stop`
stops exactly what it started (the scripts keep PIDs). `PlaneUnavailable` says why a plane
could not be built or started (no scripts, not root, build failed).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class PlaneUnavailable(Exception):
    """The real control plane cannot be built or started here (the message says why)."""


def scripts_dir() -> Path:
    """`$REALKUBE_DIR` when set, else `shared/realkube` beside the checkout (or its parent)."""
    env = os.environ.get("REALKUBE_DIR")
    if env:
        candidates = [Path(env)]
    else:
        candidates = [
            ROOT.parent / "shared" / "realkube",
            ROOT.parent.parent / "shared" / "realkube",
        ]
    for path in candidates:
        if (path / "ensure.sh").is_file():
            return path
    raise PlaneUnavailable(
        "no shared/realkube/ensure.sh beside the checkout (set REALKUBE_DIR): "
        + ", ".join(str(p) for p in candidates)
    )


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def ensure(timeout: float = 1800) -> Path:
    """Build (first time, minutes) or find the cached binaries; their directory."""
    if os.geteuid() != 0:
        raise PlaneUnavailable("shared/realkube/ensure.sh needs root (apt-get)")
    script = scripts_dir() / "ensure.sh"
    try:
        out = subprocess.run(
            ["bash", str(script)], capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise PlaneUnavailable(f"{script} did not finish within {timeout:.0f} s") from exc
    if out.returncode != 0:
        raise PlaneUnavailable(
            f"{script} failed (exit {out.returncode}):\n{_tail(out.stdout + out.stderr)}"
        )
    for line in reversed(out.stdout.splitlines()):
        if line.startswith("REALKUBE_BIN="):
            return Path(line.partition("=")[2])
    raise PlaneUnavailable(f"{script} printed no REALKUBE_BIN=")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


PORT_VARS = ("APISERVER_PORT", "ETCD_PORT", "ETCD_PEER_PORT", "SCHEDULER_PORT")


@dataclass
class Plane:
    """One control plane: its state dir, ports and credentials."""

    state_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="realkube-")))
    ports: dict[str, int] = field(default_factory=dict)
    scheduler_qps: float = 50.0
    scheduler_burst: int = 100
    running: bool = False

    def __post_init__(self) -> None:
        for var in (*PORT_VARS, "SCHEDULER_INSECURE_PORT"):
            self.ports.setdefault(var, free_port())

    # -- scripts --------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({k: str(v) for k, v in self.ports.items()})
        env["SCHEDULER_QPS"] = str(self.scheduler_qps)
        env["SCHEDULER_BURST"] = str(self.scheduler_burst)
        return env

    def _script(self, name: str, *args: str, timeout: float = 120) -> str:
        cmd = ["bash", str(scripts_dir() / name), "-d", str(self.state_dir), *args]
        try:
            out = subprocess.run(
                cmd, capture_output=True, text=True, env=self.env(), timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise PlaneUnavailable(f"{' '.join(cmd)}: no answer within {timeout:.0f} s") from exc
        if out.returncode != 0:
            raise PlaneUnavailable(
                f"{' '.join(cmd)} failed (exit {out.returncode}):\n{_tail(out.stdout + out.stderr)}"
            )
        return out.stdout

    def start(self) -> Plane:
        """etcd + kube-apiserver; ready when this returns."""
        self.running = True  # stop() must clean up even after a partial start
        self._script("start.sh")
        return self

    def stop(self, clean: bool = True) -> None:
        if self.running:
            self._script("stop.sh", *(["--clean"] if clean else []))
            self.running = False

    def start_scheduler(self) -> None:
        """The real kube-scheduler (healthy when this returns)."""
        self._script("start.sh", "--scheduler-only")

    def stop_scheduler(self) -> None:
        self._script("stop.sh", "--scheduler-only")

    def stop_apiserver(self) -> None:
        self._script("stop.sh", "--apiserver-only")

    def start_apiserver(self) -> None:
        self._script("start.sh", "--apiserver-only")

    # -- credentials ----------------------------------------------------------------------

    def kubeconfig(self, user: str = "admin") -> Path:
        """`admin`, `scheduler` or `restricted` (the chart's service account)."""
        return self.state_dir / f"{user}.kubeconfig"

    def token(self, user: str = "admin") -> str:
        """The bearer token of `admin`, `scheduler` or `restricted` (tokens.csv, in that
        order)."""
        rows = (self.state_dir / "tokens.csv").read_text().splitlines()
        return rows[("admin", "scheduler", "restricted").index(user)].split(",")[0]

    def service_account_dir(self, user: str = "admin") -> Path:
        """A folder laid out as the kubelet mounts a pod's service account (`token`,
        `ca.crt`), for running a client in-cluster style."""
        folder = self.state_dir / f"serviceaccount-{user}"
        folder.mkdir(exist_ok=True)
        (folder / "token").write_text(self.token(user))
        shutil.copyfile(self.state_dir / "pki" / "ca.crt", folder / "ca.crt")
        return folder

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.ports['APISERVER_PORT']}"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['ETCD_PORT']}"

    def log(self, component: str) -> Path:
        return self.state_dir / "logs" / f"{component}.log"
