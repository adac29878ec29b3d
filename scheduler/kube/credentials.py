"""Where the API server is and how to authenticate to it: the pod's service account, a
kubeconfig, or a plain-HTTP test URL.

In-cluster (the way the chart runs the scheduler) follows client-go's `rest.InClusterConfig`:
`https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`, the service-account CA, and the
projected token, re-read every minute because the kubelet rotates it. A kubeconfig (contexts,
client certificates, exec plugins, token refresh) is read by the official `kubernetes.aio`
loader, imported only then: it costs a third of a second of start-up, and a scheduler pod
starting after a failover should not pay it.
"""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REFRESH_SECONDS = 60.0
"""How long a read service-account token is used before the file is read again (client-go and
the official Python client: one minute)."""

AuthHeaders = Callable[[], Awaitable[Mapping[str, str]]]


class CredentialsError(Exception):
    """Credentials that cannot be used; the message is one line."""


async def _no_auth() -> Mapping[str, str]:
    return {}


@dataclass(frozen=True)
class Endpoint:
    """An API server address, its TLS settings and the per-request credentials."""

    host: str
    tls: ssl.SSLContext | None = None
    server_hostname: str | None = None
    proxy: str | None = None
    proxy_headers: Mapping[str, str] | None = None
    auth_headers: AuthHeaders = field(default=_no_auth)

    @classmethod
    def plain(cls, url: str) -> Endpoint:
        """An unauthenticated plain-HTTP server (the test emulator)."""
        return cls(host=url.rstrip("/"))

    @classmethod
    def in_cluster(
        cls,
        environ: Mapping[str, str] = os.environ,
        account_dir: Path = SERVICE_ACCOUNT_DIR,
    ) -> Endpoint:
        """The pod's service account; `CredentialsError` outside a pod."""
        host = environ.get("KUBERNETES_SERVICE_HOST", "")
        port = environ.get("KUBERNETES_SERVICE_PORT", "")
        if not host or not port:
            raise CredentialsError(
                "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set "
                "(not running in a pod; pass --kubeconfig)"
            )
        if ":" in host:  # IPv6, as Go's net.JoinHostPort
            host = f"[{host}]"
        ca = account_dir / "ca.crt"
        try:
            tls = ssl.create_default_context(cafile=str(ca))
        except (OSError, ssl.SSLError) as exc:
            raise CredentialsError(f"{ca}: not a usable CA bundle: {exc}") from None
        token = ServiceAccountToken(account_dir / "token")
        token.read()  # fail at start, not on the first request
        return cls(host=f"https://{host}:{port}", tls=tls, auth_headers=token.headers)

    @classmethod
    async def from_kubeconfig(cls, path: str) -> Endpoint:
        """The current context of a kubeconfig file, through the official loader."""
        from kubernetes.aio import client as aclient
        from kubernetes.aio import config as aconfig

        cfg = aclient.Configuration()
        await aconfig.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=path, client_configuration=cfg, persist_config=False
        )
        # the official client's TLS context for this configuration (CA, client certificate,
        # verification switches), without opening its session
        tls: ssl.SSLContext = aclient.rest.RESTClientObject(cfg).ssl_context

        async def auth_headers() -> Mapping[str, str]:
            # `auth_settings` runs the configuration's refresh hook (exec plugins, token files)
            auth: Mapping[str, Any] = dict((await cfg.auth_settings()).get("BearerToken") or {})
            if auth.get("in") == "header" and auth.get("value"):
                return {str(auth["key"]): str(auth["value"])}
            return {}

        host = str(cfg.host).rstrip("/")
        return cls(
            host=host,
            tls=tls if host.startswith("https://") else None,
            server_hostname=cfg.tls_server_name or None,
            proxy=cfg.proxy or None,
            proxy_headers=cfg.proxy_headers or None,
            auth_headers=auth_headers,
        )


class ServiceAccountToken:
    """A projected service-account token file, re-read once it is a minute old."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self.clock = clock
        self._value = ""
        self._read_at = float("-inf")

    def read(self) -> str:
        try:
            value = self.path.read_text().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise CredentialsError(f"{self.path}: cannot read the token: {exc}") from None
        if not value:
            raise CredentialsError(f"{self.path}: the token file is empty")
        self._value, self._read_at = value, self.clock()
        return value

    async def headers(self) -> Mapping[str, str]:
        if self.clock() - self._read_at >= TOKEN_REFRESH_SECONDS:
            try:
                self.read()
            except CredentialsError:
                if not self._value:
                    raise
                # mid-rotation the file can be briefly missing: keep the token we have
        return {"Authorization": f"Bearer {self._value}"}
