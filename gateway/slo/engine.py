"""SLO trackers and the book of all of them: events in, error budgets, burn rates, alerts out.

A `SloTracker` turns each request's outcome as the client saw it (status, latency, degraded)
into a good or bad event of one SLO, and derives from its `SloWindow` the error budget over the
compliance window and the burn rates the alert table reads. A correctness SLO's events are
answers judged instead (`judge`: audits, golden probes, votes), with the interval of its
estimate, and its alerts wait for enough of them (`gateway.slo.correctness`). The `SloBook`
holds every tracker of every model with each model's `BurnPolicy` and its vote escalation
(`gateway.slo.escalation`), renders ``/slo`` and shares counters (keys
``slo:<model>:<slo>:<f|c>:<bucket start>:<g|t|d>``) with other instances via the state store.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from gateway.clock import Clock
from gateway.errors import CLIENT_CLOSED
from gateway.slo.alerts import ALERT_RULES, BURN_WINDOWS, AlertState
from gateway.slo.config import BurnPolicyConfig, SloConfig
from gateway.slo.correctness import min_judged, wrong_rate_interval
from gateway.slo.escalation import Switched, VoteEscalation
from gateway.slo.policy import NORMAL, BurnPolicy, PolicyAdjustment
from gateway.slo.window import Field, SloWindow
from gateway.state.base import CounterDelta

KEY_PREFIX = "slo:"
_FIELDS: tuple[Field, ...] = ("g", "t", "d")


class SloTracker:
    """One SLO of one model: records events, computes its budget, burn rates and alerts."""

    def __init__(self, model: str, config: SloConfig, clock: Clock) -> None:
        self.model = model
        self.config = config
        self.key = f"{KEY_PREFIX}{model}:{config.name}"
        self.retention_s = max(config.window_s, max(BURN_WINDOWS.values()))
        self.window = SloWindow(clock, self.retention_s)
        self.alerts = tuple(AlertState(rule, f"{model}/{config.name}") for rule in ALERT_RULES)
        self.burn_rates = dict.fromkeys(BURN_WINDOWS, 0.0)
        self._threshold_s = (config.threshold_ms or 0.0) / 1000.0
        self._min_deadline_s = config.min_deadline_s
        self.excluded = 0  # requests with a deadline under the floor, since start (this instance)
        # Events this instance counted since it started, never lowered: Prometheus counters
        # (``gateway_slo_events_total``, ``gateway_slo_bad_events_total``) that the rules of
        # `gateway.slo.rules` sum over every instance, as the shared window does here.
        self.counted_total = 0
        self.counted_bad = 0
        self.judged_only = config.kind == "correctness"
        # a correctness SLO's evidence by source, since start: judged answers and wrong ones
        self.sources: dict[str, list[int]] = {}
        self._min_judged = {
            rule.name: min_judged(config.error_budget, rule.factor) for rule in ALERT_RULES
        }

    def record(
        self,
        status: int,
        latency_s: float,
        degraded: bool = False,
        deadline_s: float | None = None,
        wall: float | None = None,
    ) -> None:
        """One request as the client saw it; 4xx answers count as good, 5xx as bad.

        A request whose deadline was shorter than the SLO's floor only counts as excluded; one
        whose client left before its answer (`CLIENT_CLOSED`) is no event at all: nobody saw
        how it would have ended. ``wall``: when it was answered (None: now).
        """
        if status == CLIENT_CLOSED or self.judged_only:
            return
        if deadline_s is not None and deadline_s < self._min_deadline_s:
            self.excluded += 1
            return
        good = status < 500
        if good and self.config.kind == "latency":
            good = latency_s <= self._threshold_s
        self.window.add(good, degraded, wall)
        self.counted_total += 1
        self.counted_bad += not good

    def judge(self, good: bool, source: str, wall: float | None = None) -> None:
        """One judged answer of a correctness SLO: ``good`` unless shown wrong; ``source``:
        what judged it (``audit``, ``golden``, ``vote``)."""
        self.window.add(good, False, wall)
        self.counted_total += 1
        self.counted_bad += not good
        counts = self.sources.get(source)
        if counts is None:
            counts = self.sources[source] = [0, 0]
        counts[0] += 1
        counts[1] += not good

    def burn_rate(self, window_s: float) -> float:
        """How fast the budget burns: the error rate over ``window_s`` / the allowed rate."""
        counts = self.window.counts(window_s)
        if counts.total == 0:
            return 0.0
        return counts.bad / counts.total / self.config.error_budget

    def evaluate(self, wall: float) -> None:
        self.burn_rates = {name: self.burn_rate(s) for name, s in BURN_WINDOWS.items()}
        for alert in self.alerts:
            rule = alert.rule
            alert.update(self.burn_rates, wall, self._judged(rule.name, rule.short_window))

    def _judged(self, rule: str, short_window: str) -> bool:
        """Whether a rule's windows hold enough events to judge it: always, but for a
        correctness SLO, whose short window needs `min_judged` judged answers."""
        if not self.judged_only:
            return True
        return self.window.counts(BURN_WINDOWS[short_window]).total >= self._min_judged[rule]

    @property
    def fast_burn(self) -> bool:
        """Whether a page-severity alert fires (as of the last `evaluate`)."""
        return any(a.firing and a.rule.severity == "page" for a in self.alerts)

    def firing_reason(self) -> str:
        """The page alerts firing, with their burn rates, for logs and `/slo`."""
        return "; ".join(
            a.describe() for a in self.alerts if a.firing and a.rule.severity == "page"
        )

    def budget(self) -> dict[str, Any]:
        """Error budget over the compliance window: allowed bad events, consumed, remaining."""
        counts = self.window.counts(self.config.window_s)
        allowed = self.config.error_budget * counts.total
        consumed = counts.bad / allowed if counts.total else 0.0
        return {
            "events": {
                "total": counts.total,
                "good": counts.good,
                "bad": counts.bad,
                "degraded": counts.degraded,
            },
            "sli": round(counts.good / counts.total, 6) if counts.total else None,
            "degraded_fraction": round(counts.degraded / counts.total, 6) if counts.total else 0.0,
            "error_budget": {
                "allowed_bad": round(allowed, 3),
                "consumed": round(consumed, 6),
                "remaining": round(1.0 - consumed, 6),
                "remaining_events": round(allowed - counts.bad, 3),
            },
        }

    def carry_from(self, old: SloTracker) -> bool:
        """Takes ``old``'s events, burn rates and alerts if its events mean the same."""
        mine, was = self.config, old.config
        if (mine.kind, mine.threshold_ms, mine.tenant) != (was.kind, was.threshold_ms, was.tenant):
            return False
        self.window = old.window
        self.window.keep_for(self.retention_s)
        self.alerts = old.alerts
        self.burn_rates = dict(old.burn_rates)
        self.excluded = old.excluded
        self.counted_total, self.counted_bad = old.counted_total, old.counted_bad
        return True

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.config.name,
            "kind": self.config.kind,
            "objective": self.config.objective,
            "window_days": self.config.window_days,
            "threshold_ms": self.config.threshold_ms,
            "tenant": self.config.tenant,
            **self.budget(),
            "excluded": {
                "short_deadline": self.excluded,
                "min_deadline_ms": round(self._min_deadline_s * 1000.0, 3),
            },
            "burn_rates": {name: round(rate, 4) for name, rate in self.burn_rates.items()},
            "alerts": [a.to_json() for a in self.alerts],
            "counted_here": {"total": self.counted_total, "bad": self.counted_bad},
            **(self._correctness() if self.judged_only else {}),
        }

    def _correctness(self) -> dict[str, Any]:
        """A correctness SLO's estimate: the wrong rate over the compliance window with its
        95 % interval (`gateway.slo.correctness`), the SLI's interval, the evidence by source,
        and the judged answers each alert needs before it may fire."""
        counts = self.window.counts(self.config.window_s)
        low, high = wrong_rate_interval(counts.bad, counts.total)
        return {
            "wrong_rate": round(counts.bad / counts.total, 6) if counts.total else None,
            "wrong_rate_interval": [round(low, 6), round(high, 6)],
            "sli_interval": [round(1.0 - high, 6), round(1.0 - low, 6)],
            "interval": "95 % Wilson score with continuity correction",
            "sources": {
                name: {"judged": judged, "wrong": wrong}
                for name, (judged, wrong) in sorted(self.sources.items())
            },
            "min_judged": dict(self._min_judged),
        }


class SloBook:
    """Every SLO tracker of every model, with each model's burn policy.

    Alerts are re-evaluated at most every ``eval_interval_s`` (lazily by `fast_burn` and
    `adjustment`, or by a background roller calling `evaluate`), so the request path reads a
    cached verdict instead of summing buckets.
    """

    def __init__(
        self,
        slos: Mapping[str, Sequence[SloConfig]],
        clock: Clock,
        *,
        policies: Mapping[str, BurnPolicyConfig] | None = None,
        eval_interval_s: float = 1.0,
    ) -> None:
        self._clock = clock
        self._interval = eval_interval_s
        self._evaluated_at: float | None = None
        self.trackers = {m: tuple(SloTracker(m, c, clock) for c in cs) for m, cs in slos.items()}
        self._by_key = {t.key: t for ts in self.trackers.values() for t in ts}
        policies = policies or {}
        # runs before the windows are read: the gateway folds the answers recorded since
        # (`gateway.telemetry.answers`) into them
        self.before_read: Callable[[], None] = lambda: None
        self.policies = {
            m: BurnPolicy(m, policies.get(m, BurnPolicyConfig()), clock) for m in self.trackers
        }
        # the models the burn policy may serve by a vote, and those it serves so now (model ->
        # why; read in place by the request path of a gateway in one process)
        self.escalations = {
            m: VoteEscalation(m, p.config.vote, clock)
            for m, p in self.policies.items()
            if p.config.vote.enabled
        }
        for model, escalation in self.escalations.items():
            escalation.limit = _page_rate(self.trackers[model])
        self.escalated: dict[str, str] = {}
        self.switched: Switched = lambda model, engaged, reason: None

    def record(
        self,
        model: str,
        status: int,
        latency_s: float,
        degraded: bool = False,
        tenant: str | None = None,
        deadline_s: float | None = None,
        wall: float | None = None,
    ) -> None:
        """One request to ``model`` as the client saw it; SLOs of other tenants ignore it.

        ``deadline_s``: the time the client allowed, for SLOs that exclude short deadlines;
        ``wall``: when it was answered (None: now).
        """
        for tracker in self.trackers.get(model, ()):
            if tracker.config.tenant is None or tracker.config.tenant == tenant:
                tracker.record(status, latency_s, degraded, deadline_s, wall)

    def judge(self, model: str, good: bool, source: str, wall: float | None = None) -> None:
        """One judged answer of ``model`` (an audit's, a golden probe's, a vote's) for its
        correctness SLOs (none: nothing)."""
        for tracker in self.trackers.get(model, ()):
            if tracker.judged_only:
                tracker.judge(good, source, wall)

    def evaluate(self, force: bool = True) -> None:
        """Recomputes burn rates and alerts, then engages or releases each burn policy and
        each vote escalation."""
        now = self._clock.now()
        if (
            not force
            and self._evaluated_at is not None
            and now - self._evaluated_at < self._interval
        ):
            return
        self.before_read()
        self._evaluated_at = now
        wall = self._clock.wall()
        for model, trackers in self.trackers.items():
            for tracker in trackers:
                tracker.evaluate(wall)
            burning = [t for t in trackers if t.fast_burn]
            reason = "fast burn: " + "; ".join(t.firing_reason() for t in burning)
            self.policies[model].update(bool(burning), reason)
            escalation = self.escalations.get(model)
            if escalation is not None:
                wrong = [t for t in burning if t.judged_only]
                why = "; ".join(t.firing_reason() for t in wrong)
                escalation.update(bool(wrong), why, self.switched)
                if escalation.reason is not None:
                    self.escalated[model] = escalation.reason
                else:
                    self.escalated.pop(model, None)

    def fast_burn(self, model: str) -> bool:
        self.evaluate(force=False)
        return self.burning(model)

    def burning(self, model: str) -> bool:
        """Whether a page alert of ``model`` fired at the last evaluation, evaluating nothing:
        the request path's read (a rollout judged as its requests are answered); the
        background roller evaluates."""
        return any(t.fast_burn for t in self.trackers.get(model, ()))

    def adjustment(self, model: str) -> PolicyAdjustment:
        """The policy adjustment in force for ``model`` (`NORMAL` unless its policy engaged)."""
        self.evaluate(force=False)
        policy = self.policies.get(model)
        return policy.current if policy is not None else PolicyAdjustment()

    def current(self, model: str) -> PolicyAdjustment:
        """The adjustment as of the last evaluation, evaluating nothing: the request path's
        read (the background roller evaluates; `adjustment` is for readers off the path)."""
        policy = self.policies.get(model)
        return policy.current if policy is not None else NORMAL

    def to_json(self) -> dict[str, Any]:
        """The ``/slo`` document: per model, its SLOs, budgets, burn rates, alerts, policy."""
        self.evaluate()
        return {
            "evaluated_at": self._clock.wall(),
            "alert_rules": [asdict(rule) for rule in ALERT_RULES],
            "models": {
                model: {
                    "fast_burn": any(t.fast_burn for t in trackers),
                    "policy": self.policies[model].to_json(),
                    "slos": [t.to_json() for t in trackers],
                    **(
                        {"vote_escalation": self.escalations[model].to_json()}
                        if model in self.escalations
                        else {}
                    ),
                }
                for model, trackers in self.trackers.items()
            },
        }

    def carry_from(self, old: SloBook) -> list[str]:
        """Takes over ``old``'s history for the SLOs both hold (a reload); returns their names.

        A model's burn policy keeps its state while its config is unchanged; either way the
        next evaluation engages it if the carried alerts burn.
        """
        old.before_read()
        carried = []
        for model, trackers in self.trackers.items():
            before = {t.config.name: t for t in old.trackers.get(model, ())}
            for tracker in trackers:
                was = before.get(tracker.config.name)
                if was is not None and tracker.carry_from(was):
                    carried.append(f"{model}/{tracker.config.name}")
            policy, was_policy = self.policies[model], old.policies.get(model)
            if was_policy is not None and was_policy.config == policy.config:
                self.policies[model] = was_policy
            escalation, escalated = self.escalations.get(model), old.escalations.get(model)
            if (
                escalation is not None
                and escalated is not None
                and escalated.config == escalation.config
            ):
                self.escalations[model] = escalated
                if escalated.reason is not None:
                    self.escalated[model] = escalated.reason
        self.evaluate()
        return carried

    # --- sharing through the state store -----------------------------------------------

    def export_deltas(self) -> dict[str, CounterDelta]:
        """Local events since the last export, as counter deltas for `StateStore.push`."""
        self.before_read()
        out: dict[str, CounterDelta] = {}
        for key, tracker in self._by_key.items():
            for d in tracker.window.take_deltas():
                base = f"{key}:{d.tag}:{d.start}:"
                for field, amount in zip(
                    _FIELDS, (d.counts.good, d.counts.total, d.counts.degraded), strict=True
                ):
                    if amount:
                        out[base + field] = CounterDelta(amount, d.expire_at)
        return out

    def apply_remote(self, counters: Mapping[str, int], full: bool = False) -> None:
        """Other instances' totals per counter key; ``full`` means the map holds all of them."""
        if full:
            for tracker in self._by_key.values():
                tracker.window.clear_remote()
        for key, value in counters.items():
            if not key.startswith(KEY_PREFIX):
                continue
            parts = key.rsplit(":", 3)
            target = self._by_key.get(parts[0]) if len(parts) == 4 else None
            field = parts[3] if len(parts) == 4 else ""
            if target is None or field not in _FIELDS or not parts[2].lstrip("-").isdigit():
                continue
            target.window.set_remote(parts[1], int(parts[2]), field, value)


def _page_rate(trackers: Sequence[SloTracker]) -> float:
    """The lowest wrong rate at which a page alert of these correctness SLOs fires."""
    pages = [rule.factor for rule in ALERT_RULES if rule.severity == "page"]
    rates = [min(pages) * t.config.error_budget for t in trackers if t.judged_only]
    return min(rates, default=1.0)
