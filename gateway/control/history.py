"""What the dashboard draws over time: per-second samples and a timeline of state changes.

The present alone does not show how the last minutes went (an ejection vanishes once it
expires). `HistoryRecorder` keeps them, in-process and bounded:

- every answer the edge reports (`observe`, from `Gateway.observe`) is summed per model for
  the current second; a 1 s chore (`sample`) turns that into a row with rate, error and
  degraded shares, p50/p99, plus the retry budget's balance, each SLO's 5 min burn rate and
  budget left, and each pool's healthy/ejected/quarantined/open-breaker counts;
- upstream events arrive as an `UpstreamEvents` target (breaker transitions, ejections,
  quarantines, with the replica's own reason); what has no event (a health verdict, an
  ejection ending, a fallback switching in or out, its verification changing, a burn policy
  or SLO alert changing) is found by comparing each sample with the previous one;
- `gateway up`'s supervisor reports a local replica's exit and restart (`supervisor`);
- anything else (a reload) calls `record_event`, and an operator's action (or a decision
  another gateway took and this one obeys) `audit`, with who acted.

All times shown are wall-clock (``clock.wall()``); durations use ``clock.now()``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.clock import Clock
from gateway.fallback.model import FallbackModel
from gateway.periodic import Periodic
from gateway.retry.budget import RetryBudget
from gateway.slo.engine import SloBook
from gateway.telemetry.audit import AuditEvent
from gateway.telemetry.history_buffers import Event, EventLog, Row, SampleRing, SecondCounts
from gateway.upstream.registry import Registry
from gateway.upstream.replica import Replica

SAMPLE_S = 1.0
# ten minutes at one sample a second
KEEP_SAMPLES = 600
KEEP_EVENTS = 500
# no fallback answer for this long: the primary path is back
FALLBACK_QUIET_S = 5.0
# the burn rate charted: the shortest window of the alert table
BURN_WINDOW = "5m"
MODEL_FIELDS = ("rate", "error_share", "degraded_share", "fallback_share", "p50_ms", "p99_ms")
POOL_FIELDS = ("healthy", "ejected", "quarantined", "open_breakers")


@dataclass(slots=True)
class _Seen:
    """A replica as the previous sample saw it, and since when (wall) it is in each state."""

    healthy: bool | None = None
    ejected: bool = False
    quarantined: bool = False
    unhealthy_since: float | None = None
    ejected_since: float | None = None
    quarantined_since: float | None = None
    last_error: str | None = None
    # the sample that saw the replica's last error happen
    last_error_at: float | None = None
    # the replica's failure counts then: one more is a new error
    failures: int = 0
    probe_failures: int = 0


class HistoryRecorder:
    def __init__(
        self,
        registry: Registry,
        slo: SloBook,
        budget: RetryBudget,
        fallbacks: Mapping[str, FallbackModel],
        models: Iterable[str],
        clock: Clock,
        *,
        keep_samples: int = KEEP_SAMPLES,
        keep_events: int = KEEP_EVENTS,
    ) -> None:
        self._registry = registry
        self._slo = slo
        self._budget = budget
        self._fallbacks = fallbacks
        self._clock = clock
        self.samples = SampleRing(keep_samples)
        self.events = EventLog(keep_events)
        self._second = {m: SecondCounts() for m in models}
        # runs before a sample reads the second's counts: the gateway folds the answers
        # recorded since (`gateway.telemetry.answers`) into them
        self.before_read: Callable[[], None] = lambda: None
        self._sampled_at = clock.now()
        self._seen: dict[str, _Seen] = {r.id: _Seen() for r in registry.replicas()}
        self._verified: dict[str, tuple[bool, str]] = {}
        # model -> when it last answered (now())
        self._fallback_last: dict[str, float] = {}
        self._policy: dict[str, bool] = {}
        self._alerts: dict[str, bool] = {}

    def service(self) -> Periodic:
        return Periodic("history-sample", SAMPLE_S, self._clock, self.sample)

    # --- inputs -------------------------------------------------------------------------

    def observe(
        self,
        model: str,
        status: int,
        latencies_s: Sequence[float],
        degraded: str | None,
        served_by: str,
    ) -> None:
        """Answers as their clients saw them, alike in all but their latency (configured
        models only; others are ignored)."""
        second = self._second.get(model)
        if second is not None:
            second.add_all(status, latencies_s, degraded, served_by.startswith("fallback/"))

    def record_event(self, kind: str, subject: str, detail: str, level: str = "info") -> None:
        """An event with no hook of its own (a reload), stamped now."""
        self.events.record(Event(self._clock.wall(), kind, subject, detail, level))

    def audit(self, event: AuditEvent) -> None:
        """An audited action, in the timeline as kind ``manual`` with who took it."""
        level = "ok" if event.action in ("restore", "resume") else "warn"
        if not event.outcome.startswith(("applied", "obeyed")):
            level = "bad"
        self.events.record(
            Event(event.at, "manual", event.target, event.summary(), level, by=event.who)
        )

    def controls_changed(self, changes: list[tuple[str, str]]) -> None:
        """What operators' decisions did by themselves: a replica back (its eject ran out)."""
        for target, what in changes:
            if what == "back in service":
                self.record_event("manual", target, what, "ok")

    def supervisor(self, replica: str, detail: str, level: str) -> None:
        """`gateway up` reaped or restarted a local replica process (kind ``supervisor``): a
        crash the health probes may never see, if the restart is quick."""
        self.record_event("supervisor", replica, detail, level)

    def breaker_transition(self, replica: str, old: str, new: str) -> None:
        level = {"open": "bad", "half-open": "warn", "closed": "ok"}.get(new, "info")
        self.record_event("breaker", replica, f"{old} → {new}", level)

    def ejection(self, replica: str, reason: str) -> None:
        found = self._registry.replica(replica)
        if found is None:
            self.record_event("ejection", replica, reason, "warn")
            return
        seen = self._seen_of(found)
        seen.ejected, seen.ejected_since = True, self._clock.wall()
        self.record_event("ejection", replica, self._ejection_detail(found), "warn")

    def quarantine(self, replica: str, reason: str) -> None:
        found = self._registry.replica(replica)
        detail = reason
        if found is not None:
            seen = self._seen_of(found)
            seen.quarantined, seen.quarantined_since = True, self._clock.wall()
            left = found.quarantined_until - self._clock.now()
            detail = f"{found.quarantine_reason or reason} (for {left:.0f} s)"
        self.record_event("quarantine", replica, detail, "bad")

    # --- the 1 s sample -----------------------------------------------------------------

    def sample(self) -> None:
        self.before_read()
        now, wall = self._clock.now(), self._clock.wall()
        elapsed, self._sampled_at = now - self._sampled_at, now
        models: dict[str, Row] = {}
        for name, second in self._second.items():
            models[name] = {**second.row(elapsed), "slo": self._slo_row(name)}
            self._fallback_switch(name, second, now)
            self._second[name] = SecondCounts()
        pools = {
            name: self._pool_row(pool.replicas, now) for name, pool in self._registry.pools.items()
        }
        self.samples.append(
            {
                "t": wall,
                "retry_budget": round(self._budget.balance(), 2),
                "models": models,
                "pools": pools,
            }
        )
        self._compare_replicas(now, wall)
        self._compare_fallbacks()
        self._compare_slos()

    def _slo_row(self, model: str) -> dict[str, dict[str, float]]:
        return {
            t.config.name: {
                "burn": round(t.burn_rates.get(BURN_WINDOW, 0.0), 4),
                "budget_remaining": t.budget()["error_budget"]["remaining"],
            }
            for t in self._slo.trackers.get(model, ())
        }

    def _pool_row(self, replicas: tuple[Replica, ...], now: float) -> dict[str, int]:
        return {
            "healthy": sum(1 for r in replicas if r.healthy),
            "ejected": sum(1 for r in replicas if r.ejected(now)),
            "quarantined": sum(1 for r in replicas if r.quarantined_until > now),
            "open_breakers": sum(
                1 for r in replicas if r.breaker is not None and r.breaker.state() == "open"
            ),
        }

    def _seen_of(self, replica: Replica) -> _Seen:
        return self._seen.setdefault(replica.id, _Seen())

    def _ejection_detail(self, replica: Replica) -> str:
        left = replica.ejected_until - self._clock.now()
        return f"{replica.ejection_reason or 'ejected'} (for {left:.0f} s)"

    def _compare_replicas(self, now: float, wall: float) -> None:
        present = {r.id for r in self._registry.replicas()}
        for gone in [rid for rid in self._seen if rid not in present]:
            # left (DNS churn)
            del self._seen[gone]
        for replica in self._registry.replicas():
            seen = self._seen_of(replica)
            self._note_error(replica, seen, wall)
            if replica.healthy != seen.healthy:
                if replica.healthy is False:
                    seen.unhealthy_since = wall
                    why = replica.last_error or "probe failed"
                    self.record_event("health", replica.id, f"unhealthy: {why}", "bad")
                elif seen.healthy is False:
                    seen.unhealthy_since = None
                    self.record_event("health", replica.id, "healthy again", "ok")
                seen.healthy = replica.healthy
            ejected = replica.ejected(now)
            if ejected and not seen.ejected:
                # adopted from another gateway: no event here
                seen.ejected_since = wall
                self.record_event(
                    "ejection", replica.id, self._ejection_detail(replica) + ", shared", "warn"
                )
            elif seen.ejected and not ejected:
                seen.ejected_since = None
                self.record_event("ejection", replica.id, "ejection ended", "ok")
            seen.ejected = ejected
            quarantined = replica.quarantined_until > now
            if seen.quarantined and not quarantined:
                seen.quarantined_since = None
                self.record_event("quarantine", replica.id, "quarantine ended", "ok")
            elif quarantined and seen.quarantined_since is None:
                # carried over by a reload: since unknown
                seen.quarantined_since = wall
            seen.quarantined = quarantined

    @staticmethod
    def _note_error(replica: Replica, seen: _Seen, wall: float) -> None:
        """When the replica's last error happened (to the sample), so a tile can say how old
        it is: it changed, or the same message came again (a failure count went up)."""
        again = replica.failures > seen.failures or replica.probe_failures > seen.probe_failures
        if replica.last_error is not None and (again or replica.last_error != seen.last_error):
            seen.last_error_at = wall
        seen.last_error = replica.last_error
        seen.failures, seen.probe_failures = replica.failures, replica.probe_failures

    def _fallback_switch(self, model: str, second: SecondCounts, now: float) -> None:
        answered = sum(second.fallback.values())
        if answered:
            if model not in self._fallback_last:
                reasons = ", ".join(f"{r} ×{n}" for r, n in second.fallback.most_common())
                self.record_event(
                    "fallback", model, f"answering from the fallback: {reasons}", "warn"
                )
            self._fallback_last[model] = now
        elif model in self._fallback_last and now - self._fallback_last[model] >= FALLBACK_QUIET_S:
            del self._fallback_last[model]
            self.record_event("fallback", model, "primary path answers again", "ok")

    def _compare_fallbacks(self) -> None:
        for name, fallback in self._fallbacks.items():
            status = (fallback.status.ok, fallback.status.reason)
            before = self._verified.get(name)
            self._verified[name] = status
            if status == before or (before is None and status[0]):
                continue
            level = "ok" if status[0] else "bad"
            verdict = "verified" if status[0] else "refused"
            self.record_event("fallback-check", name, f"{verdict}: {status[1]}", level)

    def _compare_slos(self) -> None:
        for model, policy in self._slo.policies.items():
            engaged = policy.engaged
            if engaged != self._policy.get(model, False):
                detail = (policy.current.reason or "engaged") if engaged else "released"
                self.record_event("burn-policy", model, detail, "bad" if engaged else "ok")
            self._policy[model] = engaged
        for model, trackers in self._slo.trackers.items():
            for tracker in trackers:
                for alert in tracker.alerts:
                    key = f"{model}/{tracker.config.name}/{alert.rule.name}"
                    if alert.firing != self._alerts.get(key, False):
                        detail = alert.describe() if alert.firing else f"{alert.rule.name} resolved"
                        level = "bad" if alert.firing else "ok"
                        self.record_event(
                            "slo-alert", f"{model}/{tracker.config.name}", detail, level
                        )
                    self._alerts[key] = alert.firing

    # --- reload and output --------------------------------------------------------------

    def carry_from(self, old: HistoryRecorder) -> None:
        """Takes over ``old``'s samples, events and what it had seen (a reload's new gateway),
        and records the reload itself."""
        self.samples.take_from(old.samples)
        self.events.take_from(old.events)
        # discovered members carried too
        present = {r.id for r in self._registry.replicas()}
        for replica_id, seen in old._seen.items():
            if replica_id in present:
                self._seen[replica_id] = seen
        self._verified.update(old._verified)
        self._fallback_last.update(old._fallback_last)
        self._policy.update(old._policy)
        self._alerts.update(old._alerts)
        kept = sum(1 for rid in old._seen if rid in present)
        self.record_event("reload", "config", f"reloaded; {kept} replicas' history kept")

    def to_json(self, seconds: float | None = None, events: int | None = None) -> dict[str, Any]:
        """The ``/admin/history`` document: series as columns (one ``t`` for all), the
        replicas' since-when, the events newest first and their counts by kind."""
        wall = self._clock.wall()
        rows = self.samples.since(wall - seconds) if seconds is not None else list(self.samples)
        return {
            "as_of": wall,
            "interval_s": SAMPLE_S,
            "capacity_s": self.samples.capacity * SAMPLE_S,
            "t": [row["t"] for row in rows],
            "retry_budget": [row["retry_budget"] for row in rows],
            "models": {m: _model_columns(m, rows) for m in self._second},
            "pools": {p: _columns(rows, "pools", p, POOL_FIELDS) for p in self._registry.pools},
            "replicas": {
                rid: {
                    "unhealthy_since": s.unhealthy_since,
                    "ejected_since": s.ejected_since,
                    "quarantined_since": s.quarantined_since,
                    "last_error_at": s.last_error_at,
                }
                for rid, s in self._seen.items()
            },
            "events": [e.to_json() for e in self.events.newest_first(events)],
            "event_counts": dict(self.events.counts),
        }


def _columns(
    rows: list[Row], group: str, name: str, fields: tuple[str, ...]
) -> dict[str, list[Any]]:
    cells = [row[group].get(name) or {} for row in rows]
    return {f: [cell.get(f) for cell in cells] for f in fields}


def _model_columns(model: str, rows: list[Row]) -> dict[str, Any]:
    doc: dict[str, Any] = _columns(rows, "models", model, MODEL_FIELDS)
    cells = [(row["models"].get(model) or {}).get("slo", {}) for row in rows]
    names = sorted({n for cell in cells for n in cell})
    doc["slo"] = {
        n: {
            "burn": [(c.get(n) or {}).get("burn") for c in cells],
            "budget_remaining": [(c.get(n) or {}).get("budget_remaining") for c in cells],
        }
        for n in names
    }
    return doc
