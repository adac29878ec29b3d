"""In-cluster credentials as client-go reads them, and kube's MicroTime."""

from __future__ import annotations

import asyncio
import datetime as dt
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.kube.credentials import (
    TOKEN_REFRESH_SECONDS,
    CredentialsError,
    Endpoint,
    ServiceAccountToken,
)
from scheduler.kube.events import micro_time

ENV = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}


@pytest.fixture(scope="module")
def ca_pem(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("ca")
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=test-ca", "-keyout", str(folder / "k"), "-out", str(folder / "c")),
        ],
        check=True,
        capture_output=True,
    )
    return (folder / "c").read_text()


def _account(tmp_path: Path, ca: str, token: str = "t0") -> Path:
    (tmp_path / "ca.crt").write_text(ca)
    (tmp_path / "token").write_text(token + "\n")
    return tmp_path


def test_in_cluster_reads_host_ca_and_token(tmp_path: Path, ca_pem: str) -> None:
    endpoint = Endpoint.in_cluster(ENV, _account(tmp_path, ca_pem))
    assert endpoint.host == "https://10.0.0.1:443"
    assert endpoint.tls is not None and endpoint.tls.check_hostname
    headers = asyncio.run(endpoint.auth_headers())
    assert headers == {"Authorization": "Bearer t0"}
    ipv6 = Endpoint.in_cluster({**ENV, "KUBERNETES_SERVICE_HOST": "fd00::1"}, tmp_path)
    assert ipv6.host == "https://[fd00::1]:443"  # as Go's net.JoinHostPort


@pytest.mark.parametrize(
    ("env", "files", "message"),
    [
        ({}, True, "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set"),
        ({**ENV, "KUBERNETES_SERVICE_PORT": ""}, True, "are not set"),
        (ENV, False, "ca.crt: not a usable CA bundle"),
    ],
)
def test_in_cluster_outside_a_pod_is_one_line(
    tmp_path: Path, ca_pem: str, env: dict[str, str], files: bool, message: str
) -> None:
    if files:
        _account(tmp_path, ca_pem)
    with pytest.raises(CredentialsError) as err:
        Endpoint.in_cluster(env, tmp_path)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_in_cluster_rejects_an_empty_token_or_a_garbage_ca(tmp_path: Path, ca_pem: str) -> None:
    _account(tmp_path, ca_pem, token="")
    with pytest.raises(CredentialsError, match="token file is empty"):
        Endpoint.in_cluster(ENV, tmp_path)
    (tmp_path / "ca.crt").write_text("not a certificate")
    with pytest.raises(CredentialsError, match="not a usable CA bundle"):
        Endpoint.in_cluster(ENV, tmp_path)


def test_rotated_token_is_read_after_a_minute_and_a_missing_file_keeps_the_last(
    tmp_path: Path,
) -> None:
    now = [0.0]
    path = tmp_path / "token"
    path.write_text("first")
    token = ServiceAccountToken(path, clock=lambda: now[0])
    token.read()
    path.write_text("second")  # the kubelet rotated it

    def bearer() -> str:
        return asyncio.run(token.headers())["Authorization"]

    now[0] = TOKEN_REFRESH_SECONDS - 1
    assert bearer() == "Bearer first"  # read at most once a minute
    now[0] = TOKEN_REFRESH_SECONDS
    assert bearer() == "Bearer second"
    path.unlink()  # mid-rotation (the kubelet swaps a symlink)
    now[0] = 3 * TOKEN_REFRESH_SECONDS
    assert bearer() == "Bearer second"
    path.write_text("third")
    now[0] = 4 * TOKEN_REFRESH_SECONDS
    assert bearer() == "Bearer third"


@given(st.floats(min_value=0, max_value=4_102_444_800, allow_nan=False))
def test_micro_time_is_rfc3339_with_microseconds_as_datetime_writes_it(ts: float) -> None:
    reference = dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert micro_time(ts) == reference
