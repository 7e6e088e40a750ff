"""A request's deadline, anchored at arrival; every layer below reads the time left.

Parsing the client's ``x-request-timeout-ms`` lives here too, so the rule "never wait past the
deadline, cap what the client asks for" is written once.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.clock import Clock
from gateway.errors import BadRequest

TIMEOUT_HEADER = "x-request-timeout-ms"


@dataclass(slots=True)
class Deadline:
    """When a request started and when it must be answered by. Built for every request and
    never written after (not frozen: a frozen one's construction stores each field through
    ``object.__setattr__``)."""

    clock: Clock
    started_at: float
    expires_at: float

    @classmethod
    def after(cls, clock: Clock, seconds: float) -> Deadline:
        now = clock.now()
        return cls(clock, now, now + seconds)

    def remaining(self) -> float:
        return self.expires_at - self.clock.now()

    def elapsed(self) -> float:
        return self.clock.now() - self.started_at

    @property
    def timeout_s(self) -> float:
        return self.expires_at - self.started_at

    def expired(self) -> bool:
        return self.remaining() <= 0.0


def timeout_from_header(raw: str | None, default_ms: int, max_ms: int) -> float:
    """Seconds the request may take: the header's value (capped) or the model's default."""
    if raw is None or raw == "":
        return default_ms / 1000.0
    try:
        value = float(raw)
    except ValueError as exc:
        raise BadRequest(f"header {TIMEOUT_HEADER} must be a number of milliseconds") from exc
    if not value > 0 or value != value:
        # rejects 0, negatives and NaN
        raise BadRequest(f"header {TIMEOUT_HEADER} must be > 0")
    return min(value, float(max_ms)) / 1000.0
