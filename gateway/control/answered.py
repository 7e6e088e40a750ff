"""Answered requests into the telemetry: the tape's records folded in, those alike together.

The request path appends one `Answer` per request (`gateway.telemetry.answers.AnswerTape`);
`AnswerFold` takes a batch of them into the metrics, the SLO windows, Triton's statistics and
the dashboard's history. Answers alike (model, status, replica, degradation, tenant) share one
series lookup and one update of each counter; an SLO window takes each answer at its own wall
time, and only for models that have SLOs. A voted answer (a vote's, or a fallback's in its
place) of a model with a correctness SLO is also a judged answer: bad when it was served
without a quorum (`voted_answer`).
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.clock import Clock
from gateway.config.models import ModelConfig
from gateway.control.history import HistoryRecorder
from gateway.slo.engine import SloBook
from gateway.telemetry.answers import AT, Answer, AnswerTape
from gateway.telemetry.metrics import UNKNOWN_MODEL, Metrics
from gateway.telemetry.model_stats import ModelStats


def answer_tape(
    models: Mapping[str, ModelConfig],
    metrics: Metrics,
    slo: SloBook,
    stats: ModelStats,
    history: HistoryRecorder,
    clock: Clock,
) -> AnswerTape:
    """A gateway's tape, folded into these before each of their reads: a scrape (the first of
    its hooks: the others read what it folds), an SLO evaluation or export, a history sample.
    Triton's statistics are read through the gateway, which folds first."""
    tape = AnswerTape(AnswerFold(models, metrics, slo, stats, history), clock)
    slo.before_read = history.before_read = tape.fold
    metrics.on_scrape(tape.fold)
    return tape


class AnswerFold:
    """The tape's consumer (``AnswerTape(AnswerFold(...), clock)``)."""

    def __init__(
        self,
        models: Mapping[str, ModelConfig],
        metrics: Metrics,
        slo: SloBook,
        stats: ModelStats,
        history: HistoryRecorder,
    ) -> None:
        self._models = models
        self._metrics = metrics
        self._slo = slo
        self._stats = stats
        self._history = history

    def __call__(self, answers: list[Answer], now: float, wall: float) -> None:
        """``now`` and ``wall``: one instant on both clocks, to date each answer."""
        alike: dict[tuple[str, int, str, str | None, str], list[Answer]] = {}
        for answer in answers:
            key = answer[:5]
            group = alike.get(key)
            if group is None:
                alike[key] = [answer]
            else:
                group.append(answer)
        # in the order of their last answers: the statistics' last stamp is the latest answer's
        for (model, status, served_by, degraded, tenant), group in sorted(
            alike.items(), key=_last_answered
        ):
            latencies = [a[5] for a in group]
            config = self._models.get(model)
            if config is None:
                self._metrics.requests(
                    UNKNOWN_MODEL, "none", status, served_by, None, tenant, latencies, (), (), ()
                )
                continue
            route = "fallback" if served_by.startswith("fallback/") else config.route
            rows = [a[9] for a in group]
            self._metrics.requests(
                model,
                route,
                status,
                served_by if route == "single" else route,
                degraded,
                tenant,
                latencies,
                [a[7] for a in group],
                [a[8] for a in group],
                rows,
            )
            if self._slo.trackers.get(model):
                # only where SLOs are set: per answer, dated
                bad = degraded is not None
                for a in group:
                    self._slo.record(model, status, a[5], bad, tenant, a[6], wall - (now - a[AT]))
                if status == 200 and voted_answer(served_by, config, model in self._slo.escalated):
                    for a in group:
                        self._slo.judge(model, not bad, "vote", wall - (now - a[AT]))
            last_wall = wall - (now - group[-1][AT])
            self._stats.record_all(model, status == 200, latencies, last_wall, rows)
            self._history.observe(model, status, latencies, degraded, served_by)


def voted_answer(served_by: str, config: ModelConfig, escalated: bool) -> bool:
    """Whether an answer of a model voted now (by its route, or its burn policy's vote) came
    from its vote: the legs' replicas, comma-joined, or the fallback answering in the vote's
    place (served without a quorum). A single-route answer of an escalated model (over the
    vote's cap) was not voted."""
    if config.vote is None and not escalated:
        return False
    return "," in served_by or served_by.startswith("fallback/")


def _last_answered(item: tuple[object, list[Answer]]) -> float:
    return item[1][-1][AT]
