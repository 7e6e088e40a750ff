"""One replica's accelerator as the gateway has seen it: recent samples, staleness, hysteresis.

`match` (`gateway.accelerator.rules`) says what the latest window shows; this says what to do
about it, so that a reading that flaps does not flap the traffic:

- a drain rule that matches asks for a drain at once (`Want.DRAIN`), and every sample on
  which one matches restarts the good streak;
- a drained replica returns (`Want.RESTORE`) only after ``healthy_for_s`` of samples on which
  no drain rule matched; weight is lowered and restored the same way;
- a reading older than 3 intervals (`AcceleratorConfig.stale_after_s`), or none at all, is
  *unknown*: it neither drains nor restores, and the good streak starts again after it;
- `urgent` says when the next sample is due at the pool's fast interval: the readings are
  near a limit (`gateway.accelerator.need`), the replica is drained or its weight
  lowered by the rules, or its reading is unknown; otherwise at the idle interval.

Nothing here does I/O or reads a clock: times come in as arguments.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import Enum

from gateway.accelerator.need import Margins, near
from gateway.accelerator.rules import Evidence, Sample, Window, match
from gateway.config.accelerator import AcceleratorConfig
from v2proto.dcgm import Reading


class Want(Enum):
    NOTHING = "nothing"
    DRAIN = "drain"
    RESTORE = "restore"


@dataclass(frozen=True, slots=True)
class Advice:
    want: Want
    # the rule that drains, on this sample
    drain: Evidence | None
    # the balancer weight the replica should have now
    weight: float


class AcceleratorTracker:
    """The window and the hysteresis of one replica's accelerator."""

    def __init__(self, config: AcceleratorConfig) -> None:
        self._config = config
        keep = max(config.fit_s, config.interval_s * 3)
        self._keep_s = keep
        self.samples: deque[Sample] = deque()
        # why the last sample failed
        self.error: str | None = None
        # when the last good sample was read
        self.last_at: float | None = None
        # the evidence an accelerator drain holds on
        self.drained: Evidence | None = None
        # start of the streak with no drain rule matched
        self.good_since: float | None = None
        self.weight_evidence: Evidence | None = None
        self.weight_good_since: float | None = None
        # the latest sample's drain rule, if any
        self.last_drain: Evidence | None = None
        # ... and its weight rule
        self._throttle: Evidence | None = None
        # why the latest readings are near a limit, if they are
        self.near: str | None = None
        self._margins = Margins(config.margin_c, config.margin_share)

    @property
    def healthy_for_s(self) -> float:
        """How long a drained replica's samples must be good before it returns."""
        return self._config.healthy_for_s

    @property
    def reading(self) -> Reading | None:
        return self.samples[-1].reading if self.samples else None

    def stale(self, now: float) -> bool:
        return self.last_at is None or now - self.last_at > self._config.stale_after_s

    def failed(self, now: float, error: str) -> Advice:
        """A sample that could not be read: unknown, not healthy."""
        self.error = error
        if self.stale(now):
            self.good_since = self.weight_good_since = None
        return Advice(Want.NOTHING, None, self.weight)

    def observe(self, now: float, reading: Reading | None, new: bool = True) -> Advice:
        """One sample (None: the source shows no accelerator for this replica). ``new``
        False: the source answered with its previous measurement again (its own sampler has
        not moved on): it is fresh, but not a second point for the trend, and the advice on
        it stands as it was."""
        if reading is None:
            return self.failed(now, "no accelerator readings")
        if self.stale(now):
            # the streak restarts after a gap
            self.good_since = self.weight_good_since = None
        self.error = None
        self.last_at = now
        if new or not self.samples:
            self.samples.append(Sample(now, reading))
            while self.samples and self.samples[0].at < now - self._keep_s:
                self.samples.popleft()
            fit = [s for s in self.samples if s.at >= now - self._config.fit_s]
            window = Window(fit, self._config.limits, self._config.lead_s, self._config.fit_s)
            self.last_drain, self._throttle = match(window)
            self.near = near(window, self._margins)
        drain = self.last_drain
        self._weigh(now, self._throttle)
        if drain is not None:
            self.good_since = None
            return Advice(Want.DRAIN, drain, self.weight)
        if self.good_since is None:
            self.good_since = now
        if self.drained is not None and now - self.good_since >= self._config.healthy_for_s:
            return Advice(Want.RESTORE, None, self.weight)
        return Advice(Want.NOTHING, None, self.weight)

    def _weigh(self, now: float, throttle: Evidence | None) -> None:
        if throttle is not None:
            self.weight_evidence, self.weight_good_since = throttle, None
            return
        if self.weight_good_since is None:
            self.weight_good_since = now
        if (
            self.weight_evidence is not None
            and now - self.weight_good_since >= self._config.healthy_for_s
        ):
            self.weight_evidence = None

    def urgent(self, now: float) -> bool:
        """Whether the next sample is due at the fast interval (see the module's docstring)."""
        return (
            self.near is not None
            or self.drained is not None
            or self.weight_evidence is not None
            or self.stale(now)
        )

    @property
    def weight(self) -> float:
        return self._config.limits.throttled_weight if self.weight_evidence is not None else 1.0

    def snapshot(self, now: float) -> dict[str, object]:
        reading = self.reading
        stale = self.stale(now)
        state = "unknown" if stale else ("drain" if self.last_drain is not None else "ok")
        return {
            # unknown: stale or never read; never shown as healthy
            "state": state,
            "age_s": None if self.last_at is None else round(now - self.last_at, 3),
            "reading": None if reading is None or stale else reading.to_json(),
            "error": self.error,
            "signal": None if self.last_drain is None else self.last_drain.to_json(),
            "drained": None if self.drained is None else self.drained.to_json(),
            "weight": self.weight,
            "throttle": None if self.weight_evidence is None else self.weight_evidence.to_json(),
            "good_for_s": None if self.good_since is None else round(now - self.good_since, 3),
            # why it is sampled at the fast interval (None: idle pace)
            "near": self.near,
        }
