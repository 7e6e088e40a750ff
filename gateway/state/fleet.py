"""Gateway instances' heartbeats, and the fleet view built from them.

Each instance publishes a `Heartbeat` (its id, version, start, when it was published, its
request and error rates, and its verdict on every replica it knows) with `StateSync`'s batches,
every `HEARTBEAT_EVERY_S`; the store keeps the newest per instance until `HEARTBEAT_TTL_S` after
it was published, and every pull returns all of them. So each gateway of a namespace knows the
others from its own pulls, and the fleet view (`fleet_document`) needs no call of its own: an
instance is *alive* while its last heartbeat is under `STALE_AFTER_S` old, *stale* after that
(stopped, partitioned or stuck), and gone from the list once its heartbeat expired.

Ages are read against the viewer's wall clock, so clock skew between pods shifts them; the
stale threshold is many heartbeats long, well above the skew NTP leaves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from gateway.state.limits import FUTURE_SKEW_S, MAX_VERDICTS, Name, Rate, Share, Wall, Word

# how often an instance publishes its heartbeat
HEARTBEAT_EVERY_S = 2.0
# a heartbeat older than this: the instance is shown stale
STALE_AFTER_S = 10.0
# a stale instance stays listed this long, then the store drops it
HEARTBEAT_TTL_S = 300.0
# A stored heartbeat stamped further than this past the store's clock keeps its place against no
# later heartbeat of its instance: a forged stamp a year ahead would otherwise outrank every
# heartbeat the instance publishes, and readers drop it as from the future, so the instance
# would vanish from every fleet view. An honest one that far ahead is outrun by its next anyway.
HELD_AHEAD_S = STALE_AFTER_S
# instances ``/admin/fleet`` lists (this one first, then the freshest)
MAX_LISTED = 256
THIS_INSTANCE_ONLY = "this instance only (no shared state configured)"


# the words `gateway.control.fleet.verdict` says about a replica, most serious first
VERDICTS = frozenset(
    {
        "drained",
        "ejected",
        "quarantined",
        "unhealthy",
        "not probed",
        "breaker open",
        "half-open",
        "serving",
    }
)
Verdicts = Annotated[dict[Name, Word], Meta(max_length=MAX_VERDICTS)]


class Heartbeat(msgspec.Struct, frozen=True, array_like=True):
    """One instance as it described itself at wall time ``seen``.

    Encoded as a JSON array in field order (the store scripts read ``seen`` by position);
    decoding checks every bound (`gateway.state.limits`) and every verdict word."""

    instance: Name
    version: Word
    # wall seconds the instance started
    started: Wall
    # wall seconds it published this heartbeat
    seen: Wall
    # answers per second over the last `RATE_WINDOW_S` (gateway.control.fleet)
    rate: Rate
    # share of those answers that were 5xx, 0..1
    error_rate: Share
    # replica id -> verdict word
    verdicts: Verdicts = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = next((v for v in self.verdicts.values() if v not in VERDICTS), None)
        if unknown is not None:
            raise ValueError(f"verdicts: no verdict {unknown[:20]!r}")

    def expires_at(self, ttl_s: float = HEARTBEAT_TTL_S) -> float:
        return self.seen + ttl_s

    def newer_than(self, other: Heartbeat | None, now: float | None = None) -> bool:
        """Whether this heartbeat replaces ``other`` in a store whose wall clock reads ``now``
        (None: compare the stamps alone): it is newer, or ``other`` is stamped more than
        `HELD_AHEAD_S` ahead of the store's clock."""
        if other is None or self.seen > other.seen:
            return True
        return now is not None and other.seen > now + HELD_AHEAD_S

    def encode(self) -> str:
        return msgspec.json.encode(self).decode()

    @classmethod
    def decode(cls, text: str | bytes) -> Heartbeat:
        """The heartbeat ``text`` holds; `ValueError` when malformed or out of bounds."""
        return msgspec.json.decode(text, type=cls)


def believable(beat: Heartbeat, wall: float) -> bool:
    """Not published later than the reader's clock allows (a forged one keeps a dead instance
    alive), nor started after it was published."""
    return beat.seen <= wall + FUTURE_SKEW_S and beat.started <= beat.seen + FUTURE_SKEW_S


def take_heartbeats(
    known: Mapping[str, Heartbeat],
    pulled: Mapping[str, Heartbeat],
    own: Heartbeat | None,
    wall: float,
) -> tuple[dict[str, Heartbeat], list[tuple[str, str]]]:
    """The heartbeats a pull brought, as this instance takes them, and those it leaves out
    (instance, why). ``known``: those taken at the last pull; ``own``: this instance's.

    Left out: one published in the future (`believable`); one under this instance's name from
    another run than its own (another process publishes under its name: forged, or two
    gateways given one ``state.instance``); and one whose run (``started``) disagrees with
    the heartbeat known for its instance while that one is live (under `STALE_AFTER_S` old):
    the run seen first keeps the name until it goes quiet, so a heartbeat forged under a live
    gateway's name does not replace it in the fleet view. Where one is left out, the live one
    known before stays.
    """
    taken: dict[str, Heartbeat] = {}
    left: list[tuple[str, str]] = []
    for name, beat in pulled.items():
        before = known.get(name)
        live = before is not None and wall - before.seen < STALE_AFTER_S
        why = None
        if not believable(beat, wall):
            why = "published in the future"
        elif own is not None and name == own.instance and beat.started != own.started:
            why = "under this instance's name, from another run"
        elif live and before is not None and before.started != beat.started:
            why = "from another run than its live heartbeat"
        if why is None:
            taken[name] = beat
            continue
        left.append((name, why))
        if live and before is not None:
            # the instance's own, until it goes quiet
            taken[name] = before
    return taken, left


def fleet_document(
    own: Heartbeat,
    others: Mapping[str, Heartbeat],
    wall: float,
    *,
    scope: str | None,
    store: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``/admin/fleet``: every instance (this one first, then by id) and every replica's
    verdict per instance, within bounds (`MAX_LISTED` instances, `MAX_VERDICTS` replicas, none
    published in the future). ``scope``: what the list covers (the namespace), or None when no
    shared state is configured and the list is this instance alone."""
    live = [
        b
        for n, b in others.items()
        if n != own.instance and b.expires_at() > wall and believable(b, wall)
    ]
    # the freshest, if more than can be listed
    live.sort(key=lambda b: b.seen, reverse=True)
    beats = {own.instance: own, **{b.instance: b for b in live[: MAX_LISTED - 1]}}
    order = [own.instance, *sorted(n for n in beats if n != own.instance)]
    instances = [_instance(beats[name], wall, name == own.instance) for name in order]
    # this one's first
    replicas: dict[str, dict[str, str]] = {r: {} for r in own.verdicts}
    for name in order:
        for replica, verdict in beats[name].verdicts.items():
            row = replicas.get(replica)
            if row is None and len(replicas) < MAX_VERDICTS:
                row = replicas[replica] = {}
            if row is not None:
                row[name] = verdict
    return {
        "as_of": wall,
        "shared": scope is not None,
        "scope": scope or THIS_INSTANCE_ONLY,
        "store": dict(store) if store is not None else None,
        "stale_after_s": STALE_AFTER_S,
        "alive": sum(1 for i in instances if i["alive"]),
        "instances": instances,
        "not_listed": max(0, len(live) - (MAX_LISTED - 1)),
        "replicas": {r: replicas[r] for r in sorted(replicas)},
    }


def _instance(beat: Heartbeat, wall: float, own: bool) -> dict[str, Any]:
    age = max(0.0, wall - beat.seen)
    return {
        "instance": beat.instance,
        "self": own,
        "alive": own or age < STALE_AFTER_S,
        "last_seen": beat.seen,
        "age_s": round(age, 3),
        "version": beat.version,
        "started": beat.started,
        "rate": beat.rate,
        "error_rate": beat.error_rate,
    }
