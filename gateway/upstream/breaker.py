"""A per-replica circuit breaker: pybreaker's state machine, driven through its state API.

Design: pybreaker stays the breaker and holds every piece of breaker state, in a storage of its
own contract (`ClockStorage`): the state, the failure and success counters and when it opened.
The adapter keeps no copy of any of them; ``closed``, ``state()`` and the counters are reads of
that storage. Transitions go through pybreaker's public API: ``open()``, ``half_open()``,
``close()`` and the state objects' ``on_success()`` / ``on_failure()`` hooks, so pybreaker's
rules (trip at ``fail_max``, a failed probe re-opens, ``success_threshold`` passes close) and
its listeners decide and announce every change.

Why not ``CircuitBreaker.call``: it runs the guarded function synchronously and judges it at
once, but an attempt here is admitted first and judged later (after the exchange, or once
evidence decided a disputed answer), so an adapter over ``call`` would replay finished outcomes
into it and keep a shadow state beside pybreaker. Why not pybreaker's own open -> half-open
timer: it runs only inside ``call`` and compares ``opened_at`` with its own
``datetime.now(UTC)``, which no clock can be injected into, and could not be exact on a fake
clock (two wall-clock reads, microsecond rounding). So the storage stamps ``opened_at`` on the
injected `Clock`, and ``state()`` moves an open breaker to half-open exactly when that clock
reaches ``opened + reset_timeout`` (pybreaker's own ``reset_timeout``).

What the adapter adds is only what pybreaker lacks:

- a bound of ``half_open_max_calls`` concurrent half-open permits (pybreaker lets every caller
  through while half-open);
- no user code runs inside pybreaker, and nothing in it blocks: the storage is memory, and the
  whole breaker lives on the event loop's thread (no await between a read and its write);
- client errors (4xx), cancellations and slow-but-unfinished attempts are no verdict at all
  (pybreaker's exclusion idea, decided on the classified `Outcome`);
- a straggler verdict that arrives while open changes nothing (the trip already happened).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime

import pybreaker

from gateway.clock import Clock
from gateway.config.policies import BreakerConfig
from gateway.outcome import GATEWAYS_OWN, REPLICA_FAILURES, Outcome, OutcomeKind

log = logging.getLogger(__name__)

CLOSED, OPEN, HALF_OPEN = pybreaker.STATE_CLOSED, pybreaker.STATE_OPEN, pybreaker.STATE_HALF_OPEN
StateListener = Callable[[str, str, str], None]  # (replica id, old state, new state)


_NO_VERDICT = frozenset(
    {OutcomeKind.CLIENT_ERROR, OutcomeKind.CANCELLED, OutcomeKind.SLOW, *GATEWAYS_OWN}
)


class ClockStorage(pybreaker.CircuitBreakerStorage):
    """pybreaker's storage contract in memory, with the opening instant on the injected clock.

    The single home of the breaker's state. Plain slots, not properties, because ``state`` is
    read on every request. pybreaker's ``open()`` hands ``opened_at`` its own wall-clock
    ``datetime.now``; the storage records the injected clock's reading instead
    (``opened_on_clock``) and reports ``opened_at`` as the wall time of that same instant.
    """

    __slots__ = ("_clock", "counter", "opened_on_clock", "state", "success_counter")
    state: str
    counter: int
    success_counter: int

    def __init__(self, clock: Clock, state: str = CLOSED) -> None:
        super().__init__("clock-memory")
        self._clock = clock
        self.state = state
        self.counter = 0
        self.success_counter = 0
        self.opened_on_clock: float | None = None  # `Clock.now()` when it last opened

    def increment_counter(self) -> None:
        self.counter += 1

    def reset_counter(self) -> None:
        self.counter = 0

    def increment_success_counter(self) -> None:
        self.success_counter += 1

    def reset_success_counter(self) -> None:
        self.success_counter = 0

    @property
    def opened_at(self) -> datetime | None:
        opened = self.opened_on_clock
        if opened is None:
            return None
        return datetime.fromtimestamp(self._clock.wall() - (self._clock.now() - opened), UTC)

    @opened_at.setter
    def opened_at(self, wall_now: datetime) -> None:
        self.opened_on_clock = self._clock.now()  # pybreaker's wall-clock reading is not ours


class _Failed(Exception):
    """A failed outcome, in the form pybreaker's ``on_failure`` takes (and re-raises)."""


class _Listener(pybreaker.CircuitBreakerListener):
    def __init__(self, owner: ReplicaBreaker) -> None:
        self._owner = owner

    def state_change(self, cb: pybreaker.CircuitBreaker, old: object, new: object) -> None:
        old_name = getattr(old, "name", str(old))
        new_name = getattr(new, "name", str(new))
        self._owner.on_state_change(old_name, new_name)


class ReplicaBreaker:
    def __init__(
        self,
        replica_id: str,
        config: BreakerConfig,
        clock: Clock,
        listeners: tuple[StateListener, ...] = (),
    ) -> None:
        self.replica_id = replica_id
        self._clock = clock
        self._listeners = listeners
        self._max_probes = config.half_open_max_calls
        self._probes = 0  # half-open permits out now: the one bound pybreaker lacks
        self.half_open_granted = 0  # permits given while half-open, for tests and state
        self.half_open_peak = 0  # most half-open probes ever in flight at once
        self.transitions = 0
        self._storage = ClockStorage(clock)
        self._cb = pybreaker.CircuitBreaker(
            fail_max=config.failure_threshold,
            reset_timeout=config.reset_timeout_s,
            success_threshold=config.success_threshold,
            name=replica_id,
            listeners=[_Listener(self)],
            state_storage=self._storage,
            throw_new_error_on_trip=False,
        )

    @property
    def closed(self) -> bool:
        """The hot path's check: one read of pybreaker's storage, no timer to consult."""
        return self._storage.state == CLOSED

    def state(self) -> str:
        """pybreaker's state, after moving an open breaker whose reset timeout ran out."""
        storage = self._storage
        state = storage.state
        if state != OPEN:
            return state
        opened = storage.opened_on_clock
        if opened is not None and self._clock.now() < opened + self._cb.reset_timeout:
            return OPEN
        self._cb.half_open()  # pybreaker notifies the listener -> on_state_change
        return HALF_OPEN

    def admits(self) -> bool:
        """Whether the balancer may consider this replica at all (no permit taken)."""
        state = self.state()
        if state == CLOSED:
            return True
        return state == HALF_OPEN and self._probes < self._max_probes

    def acquire(self) -> bool:
        """Takes a permit for one attempt; while half-open only a bounded number pass."""
        state = self.state()
        if state == CLOSED:
            return True
        if state == HALF_OPEN and self._probes < self._max_probes:
            self._probes += 1
            self.half_open_granted += 1
            self.half_open_peak = max(self.half_open_peak, self._probes)
            return True
        return False

    def record(self, outcome: Outcome, permitted_state: str) -> None:
        """Feeds one finished attempt; ``permitted_state`` is the state when it was admitted."""
        self.release(permitted_state)
        self.judge(outcome)

    def release(self, permitted_state: str) -> None:
        """Hands back the permit of a finished attempt (its verdict may come later)."""
        if permitted_state == HALF_OPEN:
            self._probes = max(0, self._probes - 1)

    def judge(self, outcome: Outcome) -> None:
        """Feeds a verdict on the replica: now, or once evidence decided a disputed answer.

        What pybreaker's ``_handle_success`` / ``_handle_error`` do after running a call,
        through its public pieces: the storage's counters, then the state object's rule.
        """
        if outcome.kind in _NO_VERDICT:
            return
        storage = self._storage
        state = storage.state
        if state == OPEN:
            return  # a straggler from before the trip: the verdict is already in
        if outcome.kind in REPLICA_FAILURES:  # `Outcome.is_failure`, without the property
            storage.increment_counter()
            with contextlib.suppress(_Failed, pybreaker.CircuitBreakerError):
                self._cb.state.on_failure(_Failed(outcome.describe()))
        elif state == HALF_OPEN or storage.counter:  # closed with no failures: nothing to reset
            storage.reset_counter()
            self._cb.state.on_success()

    def trial(self) -> bool:
        """Moves an open breaker to half-open now (its replica passed health checks again).

        Envoy un-ejects a host on a successful active health check; waiting out the reset
        timeout after the probes have seen the replica recover only keeps traffic on the
        fallback longer. Half-open still lets just ``half_open_max_calls`` probes through.
        """
        if self._storage.state != OPEN:
            return False
        self._cb.half_open()
        return True

    def force(self, state: str) -> None:
        """Takes a state decided elsewhere (another gateway instance, via shared state)."""
        if state == self._storage.state:
            return
        if state == OPEN:
            self._cb.open()
        elif state == HALF_OPEN:
            self._cb.half_open()
        else:
            self._cb.close()

    def report_permits(self, granted: int, peak: int) -> None:
        """Half-open permits the data-plane workers' breakers for this replica gave (in the
        control process, whose own breaker serves no attempt): their sum, and the most any
        one of them had out at once."""
        self.half_open_granted, self.half_open_peak = granted, peak

    def carry_from(self, old: ReplicaBreaker) -> None:
        """Takes over ``old``'s state (the same replica's breaker before a reload).

        The state goes through pybreaker (`force`: listeners, metrics and shared state hear
        of an open breaker); then the storage takes ``old``'s counters and its opening
        instant, so an open breaker half-opens when it would have. Half-open permits stay
        with ``old``, whose attempts hand them back there.
        """
        self.force(old._storage.state)
        storage, was = self._storage, old._storage
        storage.counter, storage.success_counter = was.counter, was.success_counter
        storage.opened_on_clock = was.opened_on_clock
        self.transitions = old.transitions
        self.half_open_granted, self.half_open_peak = old.half_open_granted, old.half_open_peak

    def snapshot(self) -> dict[str, object]:
        return {
            "state": self.state(),
            "transitions": self.transitions,
            "half_open_in_flight": self._probes,
            "half_open_granted": self.half_open_granted,
            "half_open_peak": self.half_open_peak,
        }

    def on_state_change(self, old: str, new: str) -> None:
        if old == new:
            return
        self.transitions += 1
        self._probes = 0  # permits belong to one half-open spell
        log.warning("breaker of %s: %s -> %s", self.replica_id, old, new)
        for listener in self._listeners:
            listener(self.replica_id, old, new)
