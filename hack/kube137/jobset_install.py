"""Install (or remove) JobSet's cluster objects on the 1.37 plane, from the JobSet module's own
source (`config/components`), for `jobset.sh`, the way `kueue_install.py` does Kueue's:

- the CRD of `config/components/crd/bases` (one served version, v1alpha2: no conversion, so
  the conversion webhook of `crd/patches` is left out; JobSet's certificate management injects
  its CA into the webhook configurations only);
- namespace `jobset-system`, the (empty) Secret `jobset-webhook-server-cert` that JobSet's
  internal certificate management fills, and the Service `jobset-webhook-service`
  (`type: ExternalName` to localhost, as Kueue's: see `kueue_install.py`);
- the webhook configurations of `config/components/webhook/manifests.yaml` with the JSON
  patches of `webhook/patches` (the Pod webhooks restricted to JobSet's pods by an
  objectSelector), named as JobSet's kustomization names them (`jobset-` prefix).

Usage: jobset_install.py install|uninstall STATE_DIR JOBSET_SOURCE_DIR WEBHOOK_PORT
       jobset_install.py mount-secret STATE_DIR CERT_DIR   (exit 1 while the Secret is empty)
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kueue_install import ADMISSION, CRD_PATH, Client, mount_secret

NS = "jobset-system"
SERVICE = "jobset-webhook-service"
SECRET = "jobset-webhook-server-cert"
PREFIX = "jobset-"
PATCHES = {
    "MutatingWebhookConfiguration": "mutating-patch.yaml",
    "ValidatingWebhookConfiguration": "validating-patch.yaml",
}


def crds(src: Path) -> list[dict[str, Any]]:
    return [
        yaml.safe_load(p.read_text())
        for p in sorted((src / "config/components/crd/bases").glob("*.yaml"))
    ]


def webhook_configurations(src: Path, port: int) -> list[dict[str, Any]]:
    out = []
    hooks = src / "config/components/webhook"
    for doc in yaml.safe_load_all((hooks / "manifests.yaml").read_text()):
        if not doc:
            continue
        patch = hooks / "patches" / PATCHES[doc["kind"]]
        for op in yaml.safe_load(patch.read_text()) or []:
            # the kustomization's patches: `replace /webhooks/<i>` only
            assert op["op"] == "replace" and op["path"].startswith("/webhooks/"), op
            doc["webhooks"][int(op["path"].rsplit("/", 1)[1])] = op["value"]
        doc["metadata"]["name"] = PREFIX + doc["metadata"]["name"]
        for hook in doc["webhooks"]:
            hook["clientConfig"]["service"].update(namespace=NS, name=SERVICE, port=port)
        out.append(doc)
    return out


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
    for crd in crds(src):
        client.apply(CRD_PATH, crd)
    for conf in webhook_configurations(src, port):
        client.apply(ADMISSION + conf["kind"].lower() + "s", conf)


def uninstall(client: Client, src: Path, port: int) -> None:
    """The webhook configurations only: once JobSet is stopped nothing answers them (JobSet
    creates and JobSet pods would fail); the CRD and objects stay."""
    for conf in webhook_configurations(src, port):
        plural = conf["kind"].lower() + "s"
        client.call("DELETE", f"{ADMISSION}{plural}/{conf['metadata']['name']}")


if __name__ == "__main__":
    action, state = sys.argv[1:3]
    if action == "mount-secret":
        ok = mount_secret(Client(Path(state)), Path(sys.argv[3]), NS, SECRET)
        sys.exit(0 if ok else 1)
    src, port = sys.argv[3:5]
    {"install": install, "uninstall": uninstall}[action](Client(Path(state)), Path(src), int(port))
