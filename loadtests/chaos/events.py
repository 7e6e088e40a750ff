"""One compact JSON line per request: what the locustfile writes and the runner reads.

Locust's own statistics have no notion of a degraded or a wrong answer and no per-second
percentiles, so every request is recorded as it finished and the runner computes its own.
The file is named by the ``CHAOS_EVENTS`` environment variable; without it nothing is written.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import orjson

ENV_VAR = "CHAOS_EVENTS"


@dataclass(frozen=True, slots=True)
class Event:
    """One request as the client saw it.

    ``error`` is empty for a well-formed 200 answer, else a short kind: ``status`` (non-200),
    ``transport`` (no HTTP answer), ``schema`` (a 200 that is not a valid V2 answer).
    A wrong answer is not an error: it is a valid answer whose labels differ from the reference.
    """

    t: float  # start, seconds since the epoch
    ms: float  # latency
    model: str
    rows: int
    status: int  # 0 when no HTTP answer came
    error: str = ""
    degraded: bool = False
    wrong: bool = False
    reason: str = ""  # x-degraded
    vote: str = ""  # x-vote, e.g. "2/3"
    served_by: str = ""  # x-served-by, kept for degraded and wrong answers only

    @property
    def ok(self) -> bool:
        return not self.error

    def to_line(self) -> bytes:
        raw: dict[str, object] = {
            "t": round(self.t, 4),
            "ms": round(self.ms, 3),
            "m": self.model,
            "n": self.rows,
            "s": self.status,
            "e": self.error,
            "d": int(self.degraded),
            "w": int(self.wrong),
        }
        for key, value in (("r", self.reason), ("v", self.vote), ("b", self.served_by)):
            if value:
                raw[key] = value
        return orjson.dumps(raw) + b"\n"

    @classmethod
    def from_line(cls, line: bytes | str) -> Event:
        raw = orjson.loads(line)
        return cls(
            t=float(raw["t"]),
            ms=float(raw["ms"]),
            model=str(raw["m"]),
            rows=int(raw["n"]),
            status=int(raw["s"]),
            error=str(raw["e"]),
            degraded=bool(raw["d"]),
            wrong=bool(raw["w"]),
            reason=str(raw.get("r", "")),
            vote=str(raw.get("v", "")),
            served_by=str(raw.get("b", "")),
        )


class EventLog:
    """Appends events to a file, buffered; the first is flushed at once (it marks time zero)."""

    def __init__(self, path: str | Path, flush_every: int = 256) -> None:
        self._file: IO[bytes] = open(path, "ab")  # noqa: SIM115 (closed by close())
        self._pending = 0
        self._flush_every = flush_every
        self._first = True

    @classmethod
    def from_env(cls) -> EventLog | None:
        path = os.environ.get(ENV_VAR)
        return cls(path) if path else None

    def write(self, event: Event) -> None:
        self._file.write(event.to_line())
        self._pending += 1
        if self._first or self._pending >= self._flush_every:
            self._first = False
            self.flush()

    def flush(self) -> None:
        if not self._file.closed:
            self._file.flush()
        self._pending = 0

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


def read_events(path: str | Path) -> Iterator[Event]:
    """The events in a file; a torn last line (the writer was killed) is skipped."""
    with open(path, "rb") as source:
        for line in source:
            if not line.endswith(b"\n"):
                return
            try:
                yield Event.from_line(line)
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                continue


def first_event_time(path: str | Path) -> float | None:
    """The start time of the first complete event in a file, if there is one yet."""
    try:
        with open(path, "rb") as source:
            line = source.readline()
    except FileNotFoundError:
        return None
    if not line.endswith(b"\n"):
        return None
    return Event.from_line(line).t
