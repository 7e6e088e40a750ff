"""State changes logged once: a breaker trip, an ejection, a fallback switch, an alert.

Such events are often detected on the request path, which would log the same news on every
request; and a flapping subject could log a line per flip. `StateLog` logs a (kind, subject)
only when its state changes, and with ``min_interval_s`` at most once per interval: the flips
in between are counted and reported with the next line, or by `flush()` (call it from a
periodic task) so that the state a subject settled in is always logged in the end.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from gateway.clock import Clock, MonotonicClock
from gateway.telemetry.logging import RESERVED_FIELDS

MAX_ONCE_KEYS = 10_000  # `once` forgets everything past this, rather than grow without end


@dataclass(slots=True)
class _Entry:
    state: str  # the latest state seen
    logged: str | None  # the latest state logged
    logged_at: float
    suppressed: int = 0


class StateLog:
    def __init__(
        self,
        logger: logging.Logger,
        clock: Clock | None = None,
        min_interval_s: float = 0.0,
    ) -> None:
        self._log = logger
        self._clock = clock or MonotonicClock()
        self._min_interval_s = min_interval_s
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._once: set[Hashable] = set()

    def change(
        self,
        kind: str,
        subject: str,
        state: str,
        msg: str | None = None,
        *,
        level: int = logging.WARNING,
        **fields: Any,
    ) -> bool:
        """Logs that ``subject``'s ``kind`` is now ``state``, unless it already was.

        Returns whether a line was written. ``fields`` become JSON fields of the line.
        """
        key = (kind, subject)
        entry = self._entries.get(key)
        if entry is not None and entry.state == state:
            return False
        now = self._clock.now()
        if entry is None:
            entry = self._entries[key] = _Entry(state, None, now)
        else:
            entry.state = state
            if self._min_interval_s > 0 and now - entry.logged_at < self._min_interval_s:
                entry.suppressed += 1
                return False
        self._emit(kind, subject, entry, now, msg, level, fields)
        return True

    def flush(self, level: int = logging.WARNING) -> int:
        """Logs every subject whose latest changes were held back, with its settled state."""
        now, written = self._clock.now(), 0
        for (kind, subject), entry in self._entries.items():
            if entry.suppressed:
                self._emit(kind, subject, entry, now, None, level, {})
                written += 1
        return written

    def state(self, kind: str, subject: str) -> str | None:
        entry = self._entries.get((kind, subject))
        return None if entry is None else entry.state

    def once(self, key: Hashable, msg: str, *args: object, level: int = logging.WARNING) -> bool:
        """Logs ``msg`` the first time ``key`` is seen, never again."""
        if key in self._once:
            return False
        if len(self._once) >= MAX_ONCE_KEYS:
            self._once.clear()
        self._once.add(key)
        self._log.log(level, msg, *args, extra={"once": str(key)})
        return True

    def _emit(
        self,
        kind: str,
        subject: str,
        entry: _Entry,
        now: float,
        msg: str | None,
        level: int,
        fields: dict[str, Any],
    ) -> None:
        extra: dict[str, Any] = {"event": kind, "subject": subject, "state": entry.state}
        if entry.logged is not None:
            extra["previous"] = entry.logged
        text = msg or f"{kind} {subject}: {entry.state}"
        if entry.suppressed:
            extra["changes_not_logged"] = entry.suppressed
            text += f" ({entry.suppressed} changes in between not logged)"
        extra.update(
            (k if k not in RESERVED_FIELDS else f"field_{k}", v) for k, v in fields.items()
        )
        self._log.log(level, text, extra=extra)
        entry.logged, entry.logged_at, entry.suppressed = entry.state, now, 0
