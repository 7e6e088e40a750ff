"""Counts the function calls the gateway's event-loop thread makes in a window, for the guard.

The calls-per-request guard (``loadtests/bench_calls.py``, ``loadtests/call_budgets.json``)
needs a number that does not depend on how busy the machine is: how many Python functions and
C builtins one request runs. With ``$GATEWAY_CALL_COUNT`` naming a file, `install` adds two
signal handlers to the running loop: SIGUSR1 starts a `cProfile` window on the loop's thread,
SIGUSR2 ends it and writes the window's totals to that file as JSON (written whole, then
renamed in place, so a reader never sees half of it). Without the variable nothing is
installed and nothing is profiled: it costs the request path nothing.

The totals are the window's ``calls`` (every call cProfile saw, a coroutine's resumption
included), ``c_calls`` (of those, the builtins') and its length in ``seconds``; the driver
subtracts an idle window's rate to leave what the requests cost. ``top`` names the costliest
entries by call count, to show where a budget went.
"""

from __future__ import annotations

import asyncio
import cProfile
import os
import pstats
import signal
import time
from collections.abc import Callable
from pathlib import Path

import orjson

ENV = "GATEWAY_CALL_COUNT"
# also keep each window's profile: PREFIX.N (pstats)
DUMP_ENV = "GATEWAY_CALL_COUNT_PROFILE"
TOP = 250


class CallCounter:
    """One window at a time: `begin` (SIGUSR1), `end` (SIGUSR2) writes the totals."""

    def __init__(self, path: Path, settle: Callable[[], None] = lambda: None) -> None:
        """``settle``: the work requests leave for later (folding their answers into the
        telemetry), done before a window opens and again before it closes, so a window
        counts exactly its own requests' share of it."""
        self._path = path
        self._settle = settle
        self._profile: cProfile.Profile | None = None
        self._began = 0.0
        self._windows = 0

    def begin(self) -> None:
        if self._profile is not None:
            self._profile.disable()
        # what requests before the window left for later is not counted
        self._settle()
        # the driver waits for this before it sends
        self._write({"counting": True})
        self._profile = cProfile.Profile()
        self._began = time.perf_counter()
        self._profile.enable()

    def end(self) -> None:
        profile = self._profile
        if profile is None:
            return
        # and what the window's requests left for later is
        self._settle()
        profile.disable()
        seconds = time.perf_counter() - self._began
        self._profile = None
        dump = os.environ.get(DUMP_ENV)
        self._windows += 1
        if dump:
            profile.dump_stats(f"{dump}.{self._windows}")
        entries = pstats.Stats(profile).stats  # type: ignore[attr-defined]
        calls = c_calls = 0
        rows: list[tuple[int, str]] = []
        for (file, line, name), (_, ncalls, *_rest) in entries.items():
            calls += ncalls
            if file == "~":
                c_calls += ncalls
            rows.append((ncalls, f"{file}:{line}({name})"))
        rows.sort(reverse=True)
        self._write({"calls": calls, "c_calls": c_calls, "seconds": seconds, "top": rows[:TOP]})

    def _write(self, report: dict[str, object]) -> None:
        partial = self._path.with_suffix(".partial")
        partial.write_bytes(orjson.dumps(report))
        partial.replace(self._path)


def install(
    loop: asyncio.AbstractEventLoop, settle: Callable[[], None] = lambda: None
) -> CallCounter | None:
    """The counter's signal handlers, when ``$GATEWAY_CALL_COUNT`` names a file; else None."""
    target = os.environ.get(ENV)
    if not target:
        return None
    counter = CallCounter(Path(target), settle)
    loop.add_signal_handler(signal.SIGUSR1, counter.begin)
    loop.add_signal_handler(signal.SIGUSR2, counter.end)
    return counter
