"""Client-side rate limit: client-go's token bucket (`--kube-api-qps`, `--kube-api-burst`),
with priorities so that bindings never queue behind status patches or config reads.

client-go's limiter serves waiters in arrival order. Here waiters are served by priority,
then arrival: under sustained pressure a binding waits only for other bindings (and the rare
lease renewal), which is what keeps a scheduler's throughput at the rate limit.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from enum import IntEnum


class Priority(IntEnum):
    """Lower is served first."""

    LEASE = 0  # leader election: a missed renewal costs leadership
    BIND = 1  # pods/binding: the scheduler's output
    DEFAULT = 2  # lists, watches, config reads
    STATUS = 3  # PodScheduled=False patches: informative, may wait


class TokenBucket:
    """`qps` tokens per second, at most `burst` stored; `acquire` waits for one token.

    A caller takes a token at once when one is stored and nobody waits; otherwise it waits
    in a heap ordered by (priority, arrival) and one timer hands out tokens as they refill.
    A cancelled waiter gives its token back (or never takes one).
    """

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if qps <= 0:
            raise ValueError("qps must be positive")
        self.qps = qps
        self.burst = max(1, burst)
        self._clock = clock
        self._tokens = float(self.burst)
        self._last = clock()
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._arrival = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_loop: asyncio.AbstractEventLoop | None = None

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now

    def try_acquire(self) -> bool:
        """Take a token if one is free and nobody waits; never waits."""
        self._refill()
        if self._tokens >= 1.0 and not self._waiters:
            self._tokens -= 1.0
            return True
        return False

    @property
    def waiting(self) -> int:
        return sum(1 for _, _, fut in self._waiters if not fut.done())

    async def acquire(self, priority: int = Priority.DEFAULT) -> None:
        if self.try_acquire():
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (int(priority), next(self._arrival), fut))
        self._arm()
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self._tokens += 1.0  # handed a token, then cancelled: give it back
                self._arm()
            raise

    def _arm(self) -> None:
        loop = asyncio.get_running_loop()
        if self._timer is not None and self._timer_loop is loop:
            return  # a timer of a loop that has ended (tests reuse clients) must not count
        self._refill()
        delay = 0.0 if self._tokens >= 1.0 else (1.0 - self._tokens) / self.qps
        self._timer = loop.call_later(delay, self._dispatch)
        self._timer_loop = loop

    def _dispatch(self) -> None:
        self._timer = None
        self._refill()
        while self._waiters and self._tokens >= 1.0:
            _, _, fut = heapq.heappop(self._waiters)
            if fut.done():  # cancelled while waiting
                continue
            self._tokens -= 1.0
            fut.set_result(None)
        while self._waiters and self._waiters[0][2].done():
            heapq.heappop(self._waiters)
        if self._waiters:
            self._arm()
