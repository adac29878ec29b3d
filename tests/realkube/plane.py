"""A real control plane on loopback, for the real-plane tests and the benchmark, driven
through one of two sets of scripts with the same interface:

- `REALKUBE_PLANE=1.20` (the default): `shared/realkube/` (etcd 3.4 + kube-apiserver 1.20,
  optionally kube-scheduler; built from Debian's archive, needs root);
- `REALKUBE_PLANE=1.37`: `hack/kube137/` (etcd 3.6 + kube-apiserver, kube-controller-manager
  and KWOK's controller 1.37, optionally kube-scheduler; built from Go modules). Nodes
  annotated `kwok.x-k8s.io/node=fake` are KWOK's: Ready with a renewed Lease, their pods Running.

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
PLANES = ("1.20", "1.37")
KWOK_ANNOTATION = {"kwok.x-k8s.io/node": "fake"}  # a Node KWOK manages (1.37 plane)


def plane_version() -> str:
    """`$REALKUBE_PLANE` (1.20 or 1.37; default 1.20)."""
    version = os.environ.get("REALKUBE_PLANE", "1.20").strip() or "1.20"
    if version not in PLANES:
        raise PlaneUnavailable(f"REALKUBE_PLANE={version!r}: one of {', '.join(PLANES)}")
    return version


class PlaneUnavailable(Exception):
    """The real control plane cannot be built or started here (the message says why)."""


def scripts_dir(version: str | None = None) -> Path:
    """The 1.37 plane: `hack/kube137`. The 1.20 plane: `$REALKUBE_DIR` when set, else
    `shared/realkube` beside the checkout (or its parent)."""
    if (version or plane_version()) == "1.37":
        return ROOT / "hack" / "kube137"
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


def ensure(timeout: float | None = None, version: str | None = None) -> Path:
    """Build (first time, minutes) or find the cached binaries; their directory.

    The 1.37 plane's first build takes about half an hour on 2 cores; with
    `REALKUBE_BUILD=0` only cached binaries are used (`ensure.sh --offline`)."""
    version = version or plane_version()
    args: list[str] = []
    if version == "1.37":
        if shutil.which("go") is None:
            raise PlaneUnavailable("hack/kube137/ensure.sh needs Go (go not in PATH)")
        if os.environ.get("REALKUBE_BUILD", "1") == "0":
            args.append("--offline")
        timeout = timeout or 3600
    else:
        if os.geteuid() != 0:
            raise PlaneUnavailable("shared/realkube/ensure.sh needs root (apt-get)")
        timeout = timeout or 1800
    script = scripts_dir(version) / "ensure.sh"
    try:
        out = subprocess.run(
            ["bash", str(script), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise PlaneUnavailable(f"{script} did not finish within {timeout:.0f} s") from exc
    if out.returncode != 0:
        raise PlaneUnavailable(
            f"{script} failed (exit {out.returncode}):\n{_tail(out.stdout + out.stderr)}"
        )
    for line in reversed(out.stdout.splitlines()):
        if line.startswith(("REALKUBE_BIN=", "KUBE137_BIN=")):
            return Path(line.partition("=")[2])
    raise PlaneUnavailable(f"{script} printed no REALKUBE_BIN= / KUBE137_BIN=")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


PORT_VARS = ("APISERVER_PORT", "ETCD_PORT", "ETCD_PEER_PORT", "SCHEDULER_PORT")
PORT_VARS_137 = ("KCM_PORT", "KWOK_PORT")  # kube-controller-manager, KWOK (1.37 plane)


@dataclass
class Plane:
    """One control plane: its state dir, ports and credentials."""

    state_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="realkube-")))
    ports: dict[str, int] = field(default_factory=dict)
    scheduler_qps: float = 50.0
    scheduler_burst: int = 100
    running: bool = False
    version: str = field(default_factory=plane_version)

    def __post_init__(self) -> None:
        extra = PORT_VARS_137 if self.version == "1.37" else ()
        for var in (*PORT_VARS, "SCHEDULER_INSECURE_PORT", *extra):
            self.ports.setdefault(var, free_port())

    @property
    def kwok(self) -> bool:
        """Nodes are KWOK's (they must carry `KWOK_ANNOTATION`) and controllers run: the
        ServiceAccount admission plugin, the namespace and garbage collectors, the node
        lifecycle controller (a Node nobody heartbeats goes NotReady and tainted)."""
        return self.version == "1.37"

    # -- scripts --------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({k: str(v) for k, v in self.ports.items()})
        env["SCHEDULER_QPS"] = str(self.scheduler_qps)
        env["SCHEDULER_BURST"] = str(self.scheduler_burst)
        return env

    def _script(self, name: str, *args: str, timeout: float = 180) -> str:
        cmd = ["bash", str(scripts_dir(self.version) / name), "-d", str(self.state_dir), *args]
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

    def etcdctl(self) -> str:
        """etcdctl of the plane's etcd release where the plane ships one, else from PATH."""
        for line in (self.state_dir / "env.sh").read_text().splitlines():
            if line.startswith("export REALKUBE_BIN="):
                candidate = Path(line.partition("=")[2].strip("'\"")) / "etcdctl"
                if candidate.is_file():
                    return str(candidate)
        return "etcdctl"

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.ports['APISERVER_PORT']}"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['ETCD_PORT']}"

    def log(self, component: str) -> Path:
        return self.state_dir / "logs" / f"{component}.log"
