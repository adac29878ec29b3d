"""Install (or remove) Kueue's cluster objects on the 1.37 plane, from the Kueue module's own
source (`config/components`), for `kueue.sh`:

- the CRDs of `config/components/crd/bases` with the conversion webhooks of
  `crd/patches/webhook_in_*.yaml` (as Kueue's kustomization adds them);
- namespace `kueue-system`, the (empty) Secret `kueue-webhook-server-cert` that Kueue's internal
  certificate management fills, and the Service `kueue-webhook-service`;
- the webhook configurations of `config/components/webhook/manifests.yaml`, named as
  Kueue's kustomization names them (`kueue-` prefix), keeping the webhooks of Kueue's own kinds
  and of the integrations enabled (`KUEUE_FRAMEWORKS`: `batch/v1` Jobs, and JobSets
  `jobset.x-k8s.io/v1alpha2` when `jobset.x-k8s.io/jobset` is listed).

The Service is `type: ExternalName` with `externalName: localhost`: kube-apiserver resolves a
webhook's service reference through the Service (an ExternalName to its name, at the
webhook's port) and checks the certificate against `kueue-webhook-service.kueue-system.svc`,
the name Kueue's internal certificate management signs, so Kueue's own certificates and CA
bundle injection work on loopback without kube-proxy or cluster DNS.

Usage: kueue_install.py install|uninstall STATE_DIR KUEUE_SOURCE_DIR WEBHOOK_PORT
       kueue_install.py mount-secret STATE_DIR CERT_DIR   (exit 1 while the Secret is empty)
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

NS = "kueue-system"
SERVICE = "kueue-webhook-service"
SECRET = "kueue-webhook-server-cert"
PREFIX = "kueue-"
CONVERTED = ("localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters")
MANAGER = "kueue-install"
# webhook paths kept: Kueue's own kinds, and each enabled framework's
KEEP_PATHS = ("kueue-x-k8s-io",)
FRAMEWORK_PATHS = {
    "batch/job": "-batch-v1-job",
    "jobset.x-k8s.io/jobset": "-jobset-x-k8s-io-v1alpha2-jobset",
}


def keep_paths() -> tuple[str, ...]:
    frameworks = os.environ.get("KUEUE_FRAMEWORKS", "batch/job").split()
    return KEEP_PATHS + tuple(FRAMEWORK_PATHS[f] for f in frameworks if f in FRAMEWORK_PATHS)


class Client:
    def __init__(self, state: Path) -> None:
        env: dict[str, str] = {}
        for line in (state / "env.sh").read_text().splitlines():
            key, _, value = line.removeprefix("export ").partition("=")
            env[key] = value.strip("'\"")
        self.base = env["REALKUBE_SERVER"]
        self.token = env["REALKUBE_ADMIN_TOKEN"]
        self.ssl = ssl.create_default_context(cafile=env["REALKUBE_CA"])

    def call(self, method: str, path: str, body: Any = None, ctype: str = "") -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            req.add_header("Content-Type", ctype or "application/json")
        try:
            with urllib.request.urlopen(req, context=self.ssl, timeout=30) as resp:
                text = resp.read().decode()
        except urllib.error.HTTPError as err:
            if method == "DELETE" and err.code == 404:
                return None
            raise SystemExit(f"{method} {path}: {err.code} {err.read().decode()[:500]}") from None
        return json.loads(text) if text else None

    def apply(self, path: str, obj: dict[str, Any]) -> None:
        self.call(
            "PATCH",
            f"{path}/{obj['metadata']['name']}?fieldManager={MANAGER}&force=true",
            obj,
            "application/apply-patch+yaml",
        )


def crds(src: Path, port: int) -> list[dict[str, Any]]:
    out = []
    for path in sorted((src / "config/components/crd/bases").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        if crd["spec"]["names"]["plural"] in CONVERTED:
            crd["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": {
                        "service": {
                            "namespace": NS,
                            "name": SERVICE,
                            "path": "/convert",
                            "port": port,
                        }
                    },
                    "conversionReviewVersions": ["v1"],
                },
            }
        out.append(crd)
    return out


def webhook_configurations(src: Path, port: int) -> list[dict[str, Any]]:
    out = []
    text = (src / "config/components/webhook/manifests.yaml").read_text()
    for doc in yaml.safe_load_all(text):
        if not doc:
            continue
        doc["metadata"]["name"] = PREFIX + doc["metadata"]["name"]
        kept = []
        for hook in doc["webhooks"]:
            service = hook["clientConfig"]["service"]
            if not any(p in service["path"] for p in keep_paths()):
                continue
            service.update(namespace=NS, name=SERVICE, port=port)
            kept.append(hook)
        doc["webhooks"] = kept
        out.append(doc)
    return out


ADMISSION = "/apis/admissionregistration.k8s.io/v1/"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def install(client: Client, src: Path, port: int) -> None:
    client.apply(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
    )
    client.apply(
        f"/api/v1/namespaces/{NS}/secrets",
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET}},
    )
    client.apply(
        f"/api/v1/namespaces/{NS}/services",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": SERVICE},
            "spec": {
                "type": "ExternalName",
                "externalName": "localhost",
                "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
            },
        },
    )
    for crd in crds(src, port):
        client.apply(CRD_PATH, crd)
    for conf in webhook_configurations(src, port):
        plural = conf["kind"].lower() + "s"
        client.apply(ADMISSION + plural, conf)


def uninstall(client: Client, src: Path, port: int) -> None:
    """The webhook configurations only (once Kueue is stopped nothing would answer them, and
    every Job create would fail); the CRDs and Kueue's objects stay, as Kueue's finalizers on
    them need Kueue running to be removed."""
    for conf in webhook_configurations(src, port):
        plural = conf["kind"].lower() + "s"
        client.call("DELETE", f"{ADMISSION}{plural}/{conf['metadata']['name']}")


def mount_secret(client: Client, cert_dir: Path, ns: str = NS, secret: str = SECRET) -> bool:
    """What the kubelet does for Kueue's pod (the Secret mounted at the webhook's certDir):
    write the Secret's `tls.crt`, `tls.key` and `ca.crt` once Kueue's certificate management
    has filled it (cert-controller waits for the files to appear). True once written."""
    import base64

    data = client.call("GET", f"/api/v1/namespaces/{ns}/secrets/{secret}").get("data") or {}
    names = ("ca.crt", "tls.crt", "tls.key")
    if not all(data.get(n) for n in names):
        return False
    for name in names:
        path = cert_dir / name
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(base64.b64decode(data[name]))
        tmp.chmod(0o600)
        tmp.replace(path)
    return True


if __name__ == "__main__":
    action, state = sys.argv[1:3]
    if action == "mount-secret":
        sys.exit(0 if mount_secret(Client(Path(state)), Path(sys.argv[3])) else 1)
    src, port = sys.argv[3:5]
    {"install": install, "uninstall": uninstall}[action](Client(Path(state)), Path(src), int(port))
