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
from dataclasses import dataclass, field
from typing import Any

import orjson

HEARTBEAT_EVERY_S = 2.0  # how often an instance publishes its heartbeat
STALE_AFTER_S = 10.0  # a heartbeat older than this: the instance is shown stale
HEARTBEAT_TTL_S = 300.0  # a stale instance stays listed this long, then the store drops it
THIS_INSTANCE_ONLY = "this instance only (no shared state configured)"


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """One instance as it described itself at wall time ``seen``."""

    instance: str
    version: str
    started: float  # wall seconds the instance started
    seen: float  # wall seconds it published this heartbeat
    rate: float  # answers per second over the last `RATE_WINDOW_S` (gateway.fleet)
    error_rate: float  # share of those answers that were 5xx, 0..1
    verdicts: Mapping[str, str] = field(default_factory=dict)  # replica id -> verdict word

    def expires_at(self, ttl_s: float = HEARTBEAT_TTL_S) -> float:
        return self.seen + ttl_s

    def newer_than(self, other: Heartbeat | None) -> bool:
        return other is None or self.seen > other.seen

    def encode(self) -> str:
        return orjson.dumps(
            [self.instance, self.version, self.started, self.seen, self.rate, self.error_rate,
             dict(self.verdicts)]
        ).decode()  # fmt: skip

    @classmethod
    def decode(cls, text: str | bytes) -> Heartbeat:
        instance, version, started, seen, rate, errors, verdicts = orjson.loads(text)
        if not isinstance(verdicts, dict):
            raise ValueError("verdicts: not a mapping")
        return cls(str(instance), str(version), float(started), float(seen), float(rate),
                   float(errors), {str(k): str(v) for k, v in verdicts.items()})  # fmt: skip


def fleet_document(
    own: Heartbeat,
    others: Mapping[str, Heartbeat],
    wall: float,
    *,
    scope: str | None,
    store: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``/admin/fleet``: every instance (this one first, then by id) and every replica's
    verdict per instance. ``scope``: what the list covers (the namespace), or None when no
    shared state is configured and the list is this instance alone."""
    beats = {own.instance: own}
    for name, beat in others.items():
        if name != own.instance and beat.expires_at() > wall:
            beats[name] = beat
    order = [own.instance, *sorted(n for n in beats if n != own.instance)]
    instances = [_instance(beats[name], wall, name == own.instance) for name in order]
    replicas: dict[str, dict[str, str]] = {}
    for name in order:
        for replica, verdict in beats[name].verdicts.items():
            replicas.setdefault(replica, {})[name] = verdict
    return {
        "as_of": wall,
        "shared": scope is not None,
        "scope": scope or THIS_INSTANCE_ONLY,
        "store": dict(store) if store is not None else None,
        "stale_after_s": STALE_AFTER_S,
        "alive": sum(1 for i in instances if i["alive"]),
        "instances": instances,
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
