"""The secure port: HTTPS, /metrics behind TokenReview + SubjectAccessReview, deadlines.

Runs the real `serve()` against the API-server emulator, which answers TokenReviews and
SubjectAccessReviews from tokens and grants the test sets.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path

from cryptography import x509

from scheduler.kube.server import ServingOptions, StatusServer, self_signed_pem
from tests.emulator import Emulator
from tests.emulator.harness import Replica, fast_settings, wait_for

READER = "system:serviceaccount:monitoring:prometheus"
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


def _https(
    port: int, path: str, token: str | None = None, scheme: str = "Bearer"
) -> tuple[int, str]:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # self-signed, as Prometheus' insecureSkipVerify
    req = urllib.request.Request(f"https://127.0.0.1:{port}{path}")
    if token is not None:
        req.add_header("Authorization", f"{scheme} {token}")
    try:
        with urllib.request.urlopen(req, timeout=5, context=ctx) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


async def _secure_replica(emulator: Emulator, **serving: object) -> Replica:
    options = ServingOptions(header_timeout=1.0, handshake_timeout=1.0, **serving)
    rep = Replica(fast_settings(emulator, serving=options)).start()
    await wait_for(lambda: rep.server is not None and rep.sched is not None, what="serving")
    return rep


def test_metrics_need_a_reviewed_token_and_probes_stay_anonymous(emulator: Emulator) -> None:
    emulator.add_token("good", READER)
    emulator.grant_non_resource(READER, "get", "/metrics")
    emulator.add_token("nobody", "system:serviceaccount:default:default")

    async def scenario() -> None:
        rep = await _secure_replica(emulator)
        assert rep.server is not None and rep.server.scheme == "https"
        port = rep.server.port
        await wait_for(lambda: rep.sched is not None and rep.sched.synced, what="sync")
        for probe in ("/healthz", "/livez", "/readyz"):
            status, body = await asyncio.to_thread(_https, port, probe)
            assert status == 200, (probe, body)
        status, body = await asyncio.to_thread(_https, port, "/metrics")
        assert status == 401 and json.loads(body)["reason"] == "Unauthorized"
        reviews = emulator.request_count("POST", TOKEN_REVIEWS)
        assert reviews == 0  # no token: nothing to review
        status, _ = await asyncio.to_thread(_https, port, "/metrics", "forged")
        assert status == 401
        status, body = await asyncio.to_thread(_https, port, "/metrics", "nobody")
        assert status == 403
        assert json.loads(body)["message"] == (
            'forbidden: User "system:serviceaccount:default:default" cannot get path "/metrics"'
        )
        status, body = await asyncio.to_thread(_https, port, "/metrics", "good")
        assert status == 200 and "scheduler_pending_pods" in body
        # answers are cached (kube's 10 s TTL): a second scrape costs no review
        before = (
            emulator.request_count("POST", TOKEN_REVIEWS),
            emulator.request_count("POST", ACCESS_REVIEWS),
        )
        assert before == (3, 2)
        status, _ = await asyncio.to_thread(_https, port, "/metrics", "good")
        assert status == 200
        after = (
            emulator.request_count("POST", TOKEN_REVIEWS),
            emulator.request_count("POST", ACCESS_REVIEWS),
        )
        assert after == before
        # the same token as Basic credentials is no bearer token
        status, _ = await asyncio.to_thread(_https, port, "/metrics", "good", "Basic")
        assert status == 401
        assert await rep.shutdown() == 0

    asyncio.run(scenario())


def test_review_failures_answer_401_and_500(emulator: Emulator) -> None:
    emulator.add_token("good", READER)
    emulator.grant_non_resource(READER, "get", "/metrics")

    async def scenario() -> None:
        rep = await _secure_replica(emulator)
        assert rep.server is not None
        port = rep.server.port
        emulator.fail(500, 1, method="POST", path_contains="tokenreviews")
        status, _ = await asyncio.to_thread(_https, port, "/metrics", "good")
        assert status == 401  # kube: an authentication error is Unauthorized
        emulator.fail(500, 1, method="POST", path_contains="subjectaccessreviews")
        status, body = await asyncio.to_thread(_https, port, "/metrics", "good")
        assert status == 500 and json.loads(body)["reason"] == "InternalError"
        status, _ = await asyncio.to_thread(_https, port, "/metrics", "good")
        assert status == 200  # the failed authorization was not cached
        assert await rep.shutdown() == 0

    asyncio.run(scenario())


def test_serves_the_certificate_files_given(emulator: Emulator, tmp_path: Path) -> None:
    cert, key = self_signed_pem("scheduler.example")
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "tls.key").write_bytes(key)

    async def scenario() -> None:
        rep = await _secure_replica(
            emulator, cert_file=str(tmp_path / "tls.crt"), key_file=str(tmp_path / "tls.key")
        )
        assert rep.server is not None
        served = await asyncio.to_thread(ssl.get_server_certificate, ("127.0.0.1", rep.server.port))
        assert x509.load_pem_x509_certificate(served.encode()) == x509.load_pem_x509_certificate(
            cert
        )
        assert await rep.shutdown() == 0

    asyncio.run(scenario())


def test_default_certificate_is_self_signed_for_the_host_and_loopback(emulator: Emulator) -> None:
    async def scenario() -> None:
        rep = await _secure_replica(emulator)
        assert rep.server is not None
        served = await asyncio.to_thread(ssl.get_server_certificate, ("127.0.0.1", rep.server.port))
        cert = x509.load_pem_x509_certificate(served.encode())
        assert cert.issuer == cert.subject
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert "localhost" in sans.get_values_for_type(x509.DNSName)
        assert socket.gethostname() in sans.get_values_for_type(x509.DNSName)
        assert {str(a) for a in sans.get_values_for_type(x509.IPAddress)} == {"127.0.0.1", "::1"}
        assert await rep.shutdown() == 0

    asyncio.run(scenario())


def _closed_within(sock: socket.socket, seconds: float, trickle: bytes = b"") -> float:
    """Send `trickle` one byte every 0.1 s until the server closes; seconds it took."""
    start = time.monotonic()
    sock.settimeout(0.1)
    sent = 0
    while time.monotonic() - start < seconds:
        if sent < len(trickle):
            try:
                sock.sendall(trickle[sent : sent + 1])
            except OSError:
                return time.monotonic() - start
            sent += 1
        try:
            if sock.recv(1024) == b"":
                return time.monotonic() - start
        except TimeoutError:
            continue
        except OSError:
            return time.monotonic() - start
    raise AssertionError(f"connection still open after {seconds}s")


def test_slow_partial_requests_and_handshakes_are_cut() -> None:
    async def scenario() -> None:
        from prometheus_client import CollectorRegistry

        opts = ServingOptions(plain_http=True, header_timeout=0.5, handshake_timeout=0.5)
        plain = StatusServer(CollectorRegistry(), {}, options=opts)
        plain_port = await plain.start("127.0.0.1", 0)
        partial = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100
        with socket.create_connection(("127.0.0.1", plain_port)) as s:
            took = await asyncio.to_thread(_closed_within, s, 5.0, partial)
        assert took < 2.0
        # a kept-alive connection gets the deadline again after each answer
        with socket.create_connection(("127.0.0.1", plain_port)) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert (await asyncio.to_thread(s.recv, 4096)).startswith(b"HTTP/1.1 200")
            took = await asyncio.to_thread(_closed_within, s, 5.0)
        assert took < 2.0
        await plain.stop()

        from scheduler.kube.server import tls_context

        tls = StatusServer(CollectorRegistry(), {}, tls=tls_context(opts), options=opts)
        tls_port = await tls.start("127.0.0.1", 0)
        with socket.create_connection(("127.0.0.1", tls_port)) as s:  # never says hello
            took = await asyncio.to_thread(_closed_within, s, 5.0)
        assert took < 2.0
        await tls.stop()

    asyncio.run(scenario())
