"""Gives the heap's free pages back to the OS after a burst of large bodies (glibc malloc_trim).

Why: blocks of `LARGE_BUFFER_BYTES` and more are mmapped (`return_large_buffers_to_the_os`,
below, fixes the mmap threshold at start) and go back whole when freed, but a body's buffers
under that (socket reads, parser pieces, the body itself) come from the heap; freed among live
small objects, they leave free pages glibc keeps. Clients sending large bodies left the
gateway's RSS far above its baseline for good; one ``malloc_trim(0)`` (which also releases free
pages inside the heap, not only at its top) took it back below the baseline (the figures:
docs/measured.md, measured by loadtests/bench_pressure.py). So when the in-flight
byte budget drains after a burst (`gateway.policies.byte_budget`), a trim runs shortly after, in a
worker thread (it walks the heap: not on the event loop), at most one at a time, and once more
a while later: buffers the budget no longer counts may still be alive at the drain (a request
past its deadline whose body a socket's write queue still holds, until it drains). Not glibc:
nothing to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
LARGE_BUFFER_BYTES = 32 * 1024 * 1024  # glibc's own ceiling for its moving threshold
TRIM_DELAY_S = 0.2  # after the drain: a burst often ends with a few stragglers
LATE_TRIM_S = 3.0  # the second trim, for buffers freed after the drain


def return_large_buffers_to_the_os() -> None:
    """Allocations from `LARGE_BUFFER_BYTES` up are mmapped, and so given back to the OS when freed.

    glibc raises its mmap threshold to the size of each large block freed, so without a fixed
    one a large body's buffers come from the heap and stay. A low threshold makes every large
    temporary a fresh mmap whose pages fault in one by one, which slows the checks of large
    JSON bodies several times over. Smaller blocks (every body under the default cap)
    come from the heap and are reused; what a burst leaves there goes back with the trim below
    (loadtests/bench_pressure.py measures the RSS, loadtests/bench_payloads.py the CPU).
    """
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to tune
        ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, LARGE_BUFFER_BYTES)


def _malloc_trim() -> Callable[[int], int] | None:
    with contextlib.suppress(OSError, AttributeError):
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
        return trim
    return None


class HeapTrim:
    """``soon()``: trim the heap in a worker thread shortly, unless a trim is already due."""

    def __init__(self, delay_s: float = TRIM_DELAY_S, late_s: float = LATE_TRIM_S) -> None:
        self.delay_s = delay_s
        self.late_s = late_s
        self.trims = 0
        self._trim = _malloc_trim()
        self._due: asyncio.TimerHandle | None = None

    @property
    def available(self) -> bool:
        return self._trim is not None

    def soon(self) -> None:
        if self._trim is None or self._due is not None:
            return
        loop = asyncio.get_running_loop()
        self._due = loop.call_later(self.delay_s, self._start, True)

    def _start(self, again: bool) -> None:
        loop = asyncio.get_running_loop()
        self._due = loop.call_later(self.late_s, self._start, False) if again else None
        loop.run_in_executor(None, self.now).add_done_callback(_log_failure)

    def now(self) -> None:
        """Trims at once, in the calling thread."""
        if self._trim is not None:
            self._trim(0)
            self.trims += 1


def _log_failure(future: asyncio.Future[None]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("malloc_trim failed: %r", future.exception())
