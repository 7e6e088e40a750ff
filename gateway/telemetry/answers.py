"""Answers as the request path records them: one tuple appended each, folded in off the path.

Updating the metrics series, the Triton statistics and the dashboard's counts as each request
is answered takes a few dozen calls, paid on every request. Instead the edge appends one
`Answer` to an `AnswerTape` and returns; `AnswerTape.fold` hands every
answer since the previous fold to the telemetry (`gateway.control.answered.AnswerFold`), in
the order they were answered, before anything reads it (a scrape, the statistics endpoint,
the dashboard's sample, an SLO evaluation) and once a second besides, which bounds the
tape's length. Every reader folds first, so what it reports is what per-request updates
would have made it; only the cost moves off the path.

The fold takes answers alike (same model, status, replica, degradation, tenant) together:
one lookup of their series and one update of each counter, and histograms that sort a batch
once (`gateway.telemetry.series.Buckets.observe_all`), so its cost per answer falls as the
rate rises. Counts are exact; a histogram's sum adds the same values, grouped otherwise, so
its last bits may differ from a sum in arrival order. An answer carries the loop time it was
recorded at, so what the fold stamps on it (the SLO windows' buckets, the statistics' last
inference) is the wall time of the answer, not of the fold.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from gateway.clock import Clock
from gateway.periodic import Periodic

# model, status, served_by, degraded, tenant (what answers alike share: `Answer[:5]`), then
# latency_s, deadline_s, request_bytes, response_bytes, rows, and the loop time (`Clock.now`)
# it was answered at
Answer = tuple[str, int, str, str | None, str, float, float | None, int, int, int, float]
# where an answer's time is
AT: Final = 10
FOLD_EVERY_S = 1.0


class AnswerTape:
    """Answers since the last `fold`; ``consume(answers, now, wall)`` folds them in, where
    ``now`` and ``wall`` are the same instant on the loop's clock and the wall clock."""

    __slots__ = ("_clock", "_consume", "answers")

    def __init__(self, consume: Callable[[list[Answer], float, float], None], clock: Clock) -> None:
        self._consume = consume
        self._clock = clock
        # appended to by the request path (``answers.append``)
        self.answers: list[Answer] = []

    def fold(self) -> None:
        """Folds every answer recorded so far into the telemetry (readers call this first)."""
        answers = self.answers
        if not answers:
            return
        # swapped first: an answer recorded during the fold waits for the next
        self.answers = []
        self._consume(answers, self._clock.now(), self._clock.wall())

    def service(self) -> Periodic:
        """Folds once a second, so the tape stays short while nothing reads."""
        return Periodic("answers-fold", FOLD_EVERY_S, self._clock, self.fold)
