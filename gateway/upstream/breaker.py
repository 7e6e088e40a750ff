"""A per-replica circuit breaker: pybreaker's state machine under an asyncio-safe adapter.

pybreaker has the right states (closed, open, half-open), listeners and exclusions, but reads
wall-clock ``datetime.now`` for the open -> half-open timer, lets every caller through while
half-open, and wraps calls synchronously. This adapter closes those gaps:

- time comes from the injected `Clock`: the adapter moves open -> half-open itself, and gives
  pybreaker a reset timeout it never reaches on its own;
- a half-open breaker hands out at most ``half_open_max_calls`` concurrent permits;
- the attempt is never run *inside* pybreaker: the finished outcome is replayed into
  ``CircuitBreaker.call`` as a function that returns or raises, which takes microseconds on the
  memory storage, so nothing blocks the event loop;
- client errors (4xx) and cancellations are not recorded at all (pybreaker's exclusion idea).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

import pybreaker

from gateway.clock import Clock
from gateway.config.policies import BreakerConfig
from gateway.policies.classify import Outcome, OutcomeKind

log = logging.getLogger(__name__)

CLOSED, OPEN, HALF_OPEN = pybreaker.STATE_CLOSED, pybreaker.STATE_OPEN, pybreaker.STATE_HALF_OPEN
_NEVER = 10.0**9  # pybreaker's own reset timer must never fire: ours does
StateListener = Callable[[str, str, str], None]  # (replica id, old state, new state)


_NO_VERDICT = frozenset({OutcomeKind.CLIENT_ERROR, OutcomeKind.CANCELLED, OutcomeKind.SLOW})


class _Failed(Exception):
    """Replays a failed outcome into pybreaker."""


def _succeed() -> None:
    return None


def _fail() -> None:
    raise _Failed


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
        self._config = config
        self._clock = clock
        self._listeners = listeners
        self._opened_at = 0.0
        self._half_open_in_flight = 0
        self.half_open_granted = 0  # permits given while half-open, for tests and state
        self.half_open_peak = 0  # most half-open probes ever in flight at once
        self.closed = True  # mirrors the state for the hot path: no pybreaker call when closed
        self.transitions = 0
        self._cb = pybreaker.CircuitBreaker(
            fail_max=config.failure_threshold,
            reset_timeout=_NEVER,
            success_threshold=config.success_threshold,
            name=replica_id,
            listeners=[_Listener(self)],
            throw_new_error_on_trip=False,
        )

    def state(self) -> str:
        state: str = self._cb.current_state
        if state == OPEN and self._clock.now() - self._opened_at >= self._config.reset_timeout_s:
            self._cb.half_open()  # pybreaker notifies the listener -> on_state_change
            state = HALF_OPEN
        return state

    def admits(self) -> bool:
        """Whether the balancer may consider this replica at all (no permit taken)."""
        state = self.state()
        if state == CLOSED:
            return True
        return state == HALF_OPEN and self._half_open_in_flight < self._config.half_open_max_calls

    def acquire(self) -> bool:
        """Takes a permit for one attempt; while half-open only a bounded number pass."""
        state = self.state()
        if state == CLOSED:
            return True
        if state == HALF_OPEN and self._half_open_in_flight < self._config.half_open_max_calls:
            self._half_open_in_flight += 1
            self.half_open_granted += 1
            self.half_open_peak = max(self.half_open_peak, self._half_open_in_flight)
            return True
        return False

    def record(self, outcome: Outcome, permitted_state: str) -> None:
        """Feeds one finished attempt; ``permitted_state`` is the state when it was admitted."""
        self.release(permitted_state)
        self.judge(outcome)

    def release(self, permitted_state: str) -> None:
        """Hands back the permit of a finished attempt (its verdict may come later)."""
        if permitted_state == HALF_OPEN:
            self._half_open_in_flight = max(0, self._half_open_in_flight - 1)

    def judge(self, outcome: Outcome) -> None:
        """Feeds a verdict on the replica: now, or once evidence decided a disputed answer."""
        if outcome.kind in _NO_VERDICT:
            return
        state = self._cb.current_state
        if state == OPEN:
            return  # a straggler from before the trip: the verdict is already in
        if state == CLOSED and not outcome.is_failure and self._cb.fail_counter == 0:
            return  # the hot path: pybreaker would only reset a counter that is already 0
        with contextlib.suppress(_Failed, pybreaker.CircuitBreakerError):
            self._cb.call(_fail if outcome.is_failure else _succeed)

    def trial(self) -> bool:
        """Moves an open breaker to half-open now (its replica passed health checks again).

        Envoy un-ejects a host on a successful active health check; waiting out the reset
        timeout after the probes have seen the replica recover only keeps traffic on the
        fallback longer. Half-open still lets just ``half_open_max_calls`` probes through.
        """
        if self._cb.current_state != OPEN:
            return False
        self._cb.half_open()
        return True

    def force(self, state: str) -> None:
        """Takes a state decided elsewhere (another gateway instance, via shared state)."""
        if state == self._cb.current_state:
            return
        if state == OPEN:
            self._cb.open()
        elif state == HALF_OPEN:
            self._cb.half_open()
        else:
            self._cb.close()

    def snapshot(self) -> dict[str, object]:
        return {
            "state": self.state(),
            "transitions": self.transitions,
            "half_open_in_flight": self._half_open_in_flight,
            "half_open_granted": self.half_open_granted,
            "half_open_peak": self.half_open_peak,
        }

    def on_state_change(self, old: str, new: str) -> None:
        if old == new:
            return
        self.transitions += 1
        self.closed = new == CLOSED
        if new == OPEN:
            self._opened_at = self._clock.now()
        self._half_open_in_flight = 0
        log.info("breaker of %s: %s -> %s", self.replica_id, old, new)
        for listener in self._listeners:
            listener(self.replica_id, old, new)
