"""Simulated traffic on the fake clock for SLO tests."""

from __future__ import annotations

from gateway.slo.engine import SloBook
from tests.support.clock import FakeClock


def traffic(
    book: SloBook,
    clock: FakeClock,
    seconds: float,
    *,
    per_s: int = 10,
    errors: int = 0,
    model: str = "digits",
    latency_s: float = 0.01,
) -> None:
    """``per_s`` requests a second for ``seconds``, ``errors`` of them 503s, on the fake clock."""
    for _ in range(int(seconds)):
        for i in range(per_s):
            book.record(model, 503 if i < errors else 200, latency_s)
        clock.advance(1.0)
