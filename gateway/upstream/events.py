"""Upstream state changes as events: breaker transitions, ejections, quarantines.

The reactors that change replica state report here once per change; `Metrics` implements the
protocol (counters and gauges), and `NullEvents` is the null object for tests and tools.
"""

from __future__ import annotations

from typing import Protocol


class UpstreamEvents(Protocol):
    def breaker_transition(self, replica: str, old: str, new: str) -> None: ...

    def ejection(self, replica: str, reason: str) -> None: ...

    def quarantine(self, replica: str, reason: str) -> None: ...


class NullEvents:
    def breaker_transition(self, replica: str, old: str, new: str) -> None:
        pass

    def ejection(self, replica: str, reason: str) -> None:
        pass

    def quarantine(self, replica: str, reason: str) -> None:
        pass


class FanoutEvents:
    """Reports each event to every target, in order (metrics, shared state, ...)."""

    def __init__(self, *targets: UpstreamEvents) -> None:
        self._targets = list(targets)

    def add(self, target: UpstreamEvents) -> None:
        self._targets.append(target)

    def breaker_transition(self, replica: str, old: str, new: str) -> None:
        for target in self._targets:
            target.breaker_transition(replica, old, new)

    def ejection(self, replica: str, reason: str) -> None:
        for target in self._targets:
            target.ejection(replica, reason)

    def quarantine(self, replica: str, reason: str) -> None:
        for target in self._targets:
            target.quarantine(replica, reason)
