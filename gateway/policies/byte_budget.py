"""The gateway-wide budget of in-flight request and reply bytes: a memory bound across requests.

Each request and answer body the gateway holds is in memory until its answer is written; caps
per request (``server.max_body_bytes``, ``upstream.max_reply_body_bytes``) do not bound their
sum, so 32 clients sending 6 MB each held 192 MB of bodies (and the copies made of them) at
once. Here a request declares its body (Content-Length) before the body is read; it is
admitted while the bytes held, plus its own, stay within ``server.inflight_bytes``; otherwise it
waits, first come first served, up to ``server.inflight_wait_s``, then gets 503 with
Retry-After. A body that the
client did not declare (chunked), and each answer body, are counted once received, never waited
for (they are already in memory): they hold new requests back until their answer is written.

One request alone is always admitted when nothing else is held, so a body under the cap is
never refused for being larger than the budget. Waiters are woken in order as bytes come back;
no timer runs while nothing waits. When the budget drains after a burst of at least
``burst_bytes``, or half the limit where that is less (a 16 MiB budget full of 6 MB bodies
never holds more than 12 MB), or after large bodies (`LARGE_BODY_BYTES` each) adding up to as
much were given back since the last such call, one at a time or not, ``drained`` is called
(the gateway gives the heap's free pages back then: `gateway.policies.heap_trim`): large
answers written one after the other free as much as a burst does, without ever making one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import deque
from collections.abc import Callable
from pathlib import Path

from gateway.errors import Overloaded

BURST_BYTES = 16 * 1024 * 1024  # a drain after holding this much calls ``drained``
LARGE_BODY_BYTES = 256 * 1024  # a body this large is a buffer of its own on the heap


class InflightBytes:
    """Bytes held by requests being served, against ``limit``; ``wait_s``: the longest wait."""

    def __init__(
        self,
        limit: int,
        wait_s: float,
        drained: Callable[[], None] | None = None,
        burst_bytes: int = BURST_BYTES,
    ) -> None:
        self.limit = limit
        self.wait_s = wait_s
        self.held = 0
        self.peak = 0  # the most held at once (for /metrics and the benchmarks)
        self._drained = drained
        self._burst_bytes = min(burst_bytes, limit // 2)
        self._burst = 0  # the most held since the budget last drained
        self._large = 0  # bytes of large bodies given back since ``drained`` was last called
        self.refused = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    def fits(self, size: int) -> bool:
        return not self._waiters and (self.held == 0 or self.held + size <= self.limit)

    async def take(self, size: int) -> None:
        """Holds ``size`` bytes for a request about to be read: at once if they fit, else after
        a wait of at most ``wait_s``; `Overloaded` (503, Retry-After) if they never fit."""
        if self.fits(size):
            self.add(size)
            return
        if self.wait_s <= 0:
            self._refuse(size)
        waiter = asyncio.get_running_loop().create_future()
        entry = (size, waiter)
        self._waiters.append(entry)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), self.wait_s)
        except TimeoutError:
            if waiter.done():  # granted as the wait ran out: keep it
                return
            self._waiters.remove(entry)
            self._wake()  # a smaller waiter behind this one may fit now
            self._refuse(size)
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.give(size)  # granted, but its request is gone
            elif entry in self._waiters:
                self._waiters.remove(entry)
            raise

    def add(self, size: int) -> None:
        """Counts bytes already in memory (an undeclared body, an answer): never waits."""
        held = self.held = self.held + size
        if held > self._burst:
            self._burst = held
            if held > self.peak:
                self.peak = held

    def give(self, size: int) -> None:
        """The bytes are no longer held (the answer was written, or the request refused)."""
        self.held -= size
        if size >= LARGE_BODY_BYTES:
            self._large += size
        if self._waiters:
            self._wake()
        if self.held or self._drained is None:
            return
        if self._burst >= self._burst_bytes or self._large >= self._burst_bytes:
            self._burst = self._large = 0
            self._drained()

    def _wake(self) -> None:
        waiters = self._waiters
        while waiters:
            size, waiter = waiters[0]
            if waiter.done():  # its wait ended: it is being removed
                waiters.popleft()
                continue
            if self.held and self.held + size > self.limit:
                return
            waiters.popleft()
            self.add(size)
            waiter.set_result(None)

    def _refuse(self, size: int) -> None:
        self.refused += 1
        raise Overloaded(
            f"the gateway holds {self.held} bytes of requests and answers in flight "
            f"(server.inflight_bytes={self.limit}); this {size}-byte request did not fit "
            f"within {self.wait_s:g} s",
            retry_after_s=1.0,
        )


def machine_default() -> int:
    """1/16 of the memory this process may use (the machine's, or its cgroup's limit if lower),
    from 64 MiB to 1 GiB: room for the bodies in flight and the copies made of them, well
    inside what is left to the replicas beside it."""
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    with contextlib.suppress(OSError, ValueError):
        memory = min(memory, int(Path("/sys/fs/cgroup/memory.max").read_text()))
    return max(64 << 20, min(1 << 30, memory // 16))
