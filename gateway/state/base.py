"""The `StateStore` protocol and the values that travel through it.

Two things are shared between gateway instances: *signals* (a replica's breaker state and
ejection, last writer by epoch wins) and *counters* (SLO and retry-budget events, added up
across instances). A store is never read on a request's critical path: `StateSync` pushes local
changes and pulls the others' in the background, and requests read local state.

Signal order (the epoch rule): a signal replaces the stored one for its replica only if
``(epoch, stamp, origin)`` is greater, compared in that order. ``epoch`` is a Lamport counter
per replica (a transition publishes one more than the highest epoch its instance has seen),
``stamp`` the origin's wall time of the transition, ``origin`` the instance id (an ASCII tie
breaker, so every instance picks the same winner). A stale instance cannot overwrite a newer
state, and resending the same signal is a no-op.

Signals expire (`SIGNAL_TTL_S` after the later of their stamp and the end of their ejection),
so the ids of replicas that left (every rollout under DNS discovery adds some) do not travel on
every pull forever. A store keeps each replica's entry until every signal offered for it has
expired, winner or loser, and drops a signal offered already expired, so expiry never lets an
older signal win: one offered before is expired itself by the time its entry goes. One offered
only after that is still live, so stamped (or ejecting) within the last `SIGNAL_TTL_S`, after
every forgotten one was stamped (up to clock skew between gateways).

Counters carry deltas and an absolute expiry; the store keeps the totals, a change log so a
pull returns only the keys changed since the caller's cursor, and a *generation* token that
changes when the store loses its data (a Redis restart without persistence), which tells every
instance to push its own contribution again.

Decisions (`gateway.state.decisions`: an operator's drain, eject or pause) ride the same push
and pull, but never expire: a store keeps the winner per target (by version) until a newer one
replaces it, and a pull returns all of them.

Heartbeats (`gateway.state.fleet`: each instance's id, version, rates and replica verdicts)
ride them too: a store keeps the newest per instance until it expires, and a pull returns all.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import msgspec

from gateway.state.decisions import Decision
from gateway.state.fleet import Heartbeat
from gateway.state.lease import Lease
from gateway.state.limits import Name, Version, Wall

BREAKER_STATES = frozenset({"closed", "open", "half-open"})

# How long a signal is worth sharing after its transition (or after its ejection ends). Safe to
# forget then: a fresh transition re-stamps the replica's signal; a gateway that applied this one
# keeps its own breaker and ejection state (the signal only told it once); one that never saw it
# learns the replica's state by itself, as any gateway does. An hour is far longer than a breaker
# timeout or an ejection, and short enough that a day of rollouts leaves no trail behind.
SIGNAL_TTL_S = 3600.0


class StoreUnavailable(Exception):
    """The store failed or did not answer in time; callers keep serving on local state."""


def make_origin() -> str:
    """A unique id for this gateway process: host, pid and a random suffix (ASCII only)."""
    host = re.sub(r"[^A-Za-z0-9.-]", "-", socket.gethostname())[:40] or "host"
    return f"{host}-{os.getpid()}-{secrets.token_hex(3)}"


class ReplicaSignal(msgspec.Struct, frozen=True, array_like=True):
    """One replica's breaker state and ejection as decided by the instance ``origin``.

    Encoded as a JSON array in field order (the store scripts read it by position); decoding
    checks the bounds of every field (`gateway.state.limits`)."""

    replica_id: Name
    # "closed" | "open" | "half-open"
    breaker: str
    # Unix seconds; 0 when not ejected
    ejected_until_wall: Wall
    epoch: Version
    origin: Name
    # the origin's wall time of the transition
    stamp: Wall

    def __post_init__(self) -> None:
        if self.breaker not in BREAKER_STATES:
            raise ValueError(f"breaker: no state {self.breaker[:20]!r}")

    def expires_at(self, ttl_s: float = SIGNAL_TTL_S) -> float:
        """Unix seconds after which the signal tells nothing worth sharing any more."""
        return max(self.stamp, self.ejected_until_wall) + ttl_s

    def order(self) -> tuple[int, float, str]:
        return (self.epoch, self.stamp, self.origin)

    def supersedes(self, other: ReplicaSignal | None) -> bool:
        """The epoch rule: whether this signal may replace ``other``."""
        return other is None or self.order() > other.order()

    def encode(self) -> str:
        return msgspec.json.encode(self).decode()

    @classmethod
    def decode(cls, text: str | bytes) -> ReplicaSignal:
        """The signal ``text`` holds; `ValueError` when malformed or out of bounds."""
        return msgspec.json.decode(text, type=cls)


class CounterDelta(NamedTuple):
    """Events to add to a shared counter, and when the counter may be forgotten (Unix s)."""

    amount: int
    expire_at: float

    def plus(self, other: CounterDelta) -> CounterDelta:
        return CounterDelta(self.amount + other.amount, max(self.expire_at, other.expire_at))


@dataclass(frozen=True, slots=True)
class PushBatch:
    """Local changes from one instance; ``number`` grows per origin (one run of an instance),
    and a store applies a batch at most once (a retry after a lost reply is skipped)."""

    origin: str
    number: int
    signals: tuple[ReplicaSignal, ...] = ()
    counters: Mapping[str, CounterDelta] = field(default_factory=dict)
    decisions: tuple[Decision, ...] = ()
    heartbeat: Heartbeat | None = None


@dataclass(frozen=True, slots=True)
class PushResult:
    generation: str
    # False: this batch number was applied before
    applied: bool
    # replica ids whose signal lost to a newer stored one
    stale: tuple[str, ...] = ()


class Cursor(NamedTuple):
    """Where a pull left off: the store generation and change sequence number it saw."""

    generation: str
    seq: int


START = Cursor("", 0)


@dataclass(frozen=True, slots=True)
class Pulled:
    """A pull: all stored signals, and counter totals of all instances changed since a cursor.

    ``full`` is True when ``counters`` holds every live key (the cursor was the start, or from
    another generation), so anything not in it is gone.
    """

    cursor: Cursor
    full: bool
    signals: dict[str, ReplicaSignal]
    counters: dict[str, int]
    # every stored one, by key
    decisions: dict[str, Decision] = field(default_factory=dict)
    # live ones, by instance
    heartbeats: dict[str, Heartbeat] = field(default_factory=dict)

    @property
    def generation(self) -> str:
        return self.cursor.generation


@dataclass(frozen=True, slots=True)
class SharedView:
    """What `StateSync` hands its ``apply`` callback after a pull.

    ``signals``: the winning signal per replica (possibly this instance's own). ``counters``:
    the *other* instances' totals for the keys that changed (store total minus what this
    instance pushed); ``full``: it holds every key, so drop remote values not in it.
    """

    signals: dict[str, ReplicaSignal]
    counters: dict[str, int]
    full: bool
    decisions: dict[str, Decision] = field(default_factory=dict)
    heartbeats: dict[str, Heartbeat] = field(default_factory=dict)
    # the store lost its data since the last pull (a new generation)
    lost: bool = False


class StateStore(Protocol):
    """Shared state behind one interface: `MemoryStore` (one instance) or `RedisStore`."""

    name: str

    @property
    def healthy(self) -> bool:
        """False after a failed call, True again after a successful one."""
        ...

    async def push(self, batch: PushBatch) -> PushResult:
        """Adds counter deltas and offers signals (epoch rule); `StoreUnavailable` on failure."""
        ...

    async def lease(self, name: str, holder: str, ttl_s: float, release: bool = False) -> Lease:
        """Takes or renews ``holder``'s lease on ``name`` (`gateway.state.lease`), or gives it
        up (``release``); `StoreUnavailable` on failure."""
        ...

    async def pull(self, since: Cursor = START) -> Pulled:
        """Signals, and counters changed after ``since``; `StoreUnavailable` on failure."""
        ...

    def describe(self) -> dict[str, Any]:
        """For ``/admin/state``: kind, location, health."""
        ...

    async def close(self) -> None: ...
