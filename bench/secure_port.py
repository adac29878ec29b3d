"""Cost of the secure port: a /metrics scrape over HTTPS with a reviewed token, against plain HTTP.

The scheduler's StatusServer in this process, the API-server emulator (TokenReview,
SubjectAccessReview) on its own thread; scrapes come from an aiohttp client on keep-alive
connections. Prints the self-signed certificate's cost at start and the median and p99 time of
one scrape: plain HTTP without authentication, HTTPS with a token whose reviews are cached
(every scrape of a Prometheus after the first within 10 s), and HTTPS with a new token each
time (two reviews per scrape).

    .venv/bin/python bench/secure_port.py [--scrapes 300]
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp

from scheduler.kube.client import ClientOptions, KubeClient
from scheduler.kube.metrics import Metrics
from scheduler.kube.server import DelegatedAuth, ServingOptions, StatusServer, tls_context
from tests.emulator import Emulator

READER = "system:serviceaccount:monitoring:prometheus"


async def _scrapes(url: str, tokens: list[str | None]) -> list[float]:
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE
    times = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=insecure)) as session:
        for token in tokens:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            t0 = time.perf_counter()
            async with session.get(url, headers=headers) as resp:
                await resp.read()
                assert resp.status == 200, resp.status
            times.append(time.perf_counter() - t0)
    return times


def _line(name: str, times: list[float]) -> str:
    ms = sorted(t * 1000 for t in times)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    return f"{name:<34} median {statistics.median(ms):6.2f} ms   p99 {p99:6.2f} ms"


async def main(scrapes: int, emu: Emulator) -> None:
    metrics = Metrics()
    for i in range(200):  # a registry of realistic size
        metrics.schedule_attempts.labels("scheduled", f"profile-{i % 4}").inc()
    t0 = time.perf_counter()
    ctx = tls_context(ServingOptions())
    print(f"self-signed certificate and TLS context: {(time.perf_counter() - t0) * 1000:.1f} ms")

    plain = StatusServer(metrics.registry, {})
    port = await plain.start("127.0.0.1", 0)
    print(
        _line(
            "plain HTTP, no authentication",
            await _scrapes(f"http://127.0.0.1:{port}/metrics", [None] * scrapes),
        )
    )
    await plain.stop()

    # unthrottled, to measure the reviews themselves (`run` limits them to 20/s, burst 40)
    client = KubeClient.for_url(emu.url, ClientOptions(qps=1e6, burst=1_000_000))
    secure = StatusServer(metrics.registry, {}, auth=DelegatedAuth(client), tls=ctx)
    port = await secure.start("127.0.0.1", 0)
    url = f"https://127.0.0.1:{port}/metrics"
    emu.add_token("cached", READER)
    print(_line("HTTPS, token reviews cached", await _scrapes(url, ["cached"] * scrapes)))
    fresh = [f"t{i}" for i in range(scrapes)]
    for token in fresh:
        emu.add_token(token, READER)
    print(_line("HTTPS, two reviews per scrape", await _scrapes(url, fresh)))
    await secure.stop()
    await client.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=300)
    args = parser.parse_args()
    with Emulator() as emulator:
        emulator.grant_non_resource(READER, "get", "/metrics")
        asyncio.run(main(args.scrapes, emulator))
