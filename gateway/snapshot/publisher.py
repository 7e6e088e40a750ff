"""Control's side of the snapshot: built every ``interval_s``, sent when it changed, and at least
every ``heartbeat_s`` besides (at the last tick before that much time passed without a send),
so a worker knows control is alive (`Freshness`).

A change is told by the encoded snapshot itself: its bytes, with ``version`` and ``sent_at``
zeroed, against the last sent. So ``build`` states what the data plane needs and nothing has
to track what changed; the version goes up by one on each change (never on a heartbeat), and
``latest`` is what a worker that just said hello is sent.

Replicas' load readings change with nearly every answer while traffic flows; a change of loads
alone goes out at most every ``loads_every_s`` (with any other change at once), and as a
`Loads` message, the readings only, not the whole snapshot: under load the workers decode and
apply a few small messages a second, not a snapshot a tick. A reading is stale only after
``load.stale_s`` (2 s by default), and each worker reads its own answers' reports at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import msgspec

from gateway.clock import Clock
from gateway.periodic import Periodic
from gateway.snapshot.messages import Loads, LoadView, Snapshot

INTERVAL_S: Final = 0.05
HEARTBEAT_S: Final = 1.0
# a change of replicas' loads alone goes out at most this often (`load.interval_s`'s default)
LOADS_EVERY_S: Final = 0.25

_encoder = msgspec.msgpack.Encoder()


class SnapshotPublisher:
    __slots__ = (
        "_build",
        "_clock",
        "_key",
        "_rest_key",
        "_send",
        "_sent_at",
        "heartbeat_s",
        "interval_s",
        "latest",
        "loads_every_s",
        "sends",
        "version",
    )

    def __init__(
        self,
        build: Callable[[], Snapshot],
        send: Callable[[Snapshot | Loads], None],
        clock: Clock,
        interval_s: float = INTERVAL_S,
        heartbeat_s: float = HEARTBEAT_S,
        loads_every_s: float = LOADS_EVERY_S,
    ) -> None:
        """``send`` is usually `LinkServer.broadcast`."""
        self.loads_every_s = loads_every_s
        self._build = build
        self._send = send
        self._clock = clock
        self.interval_s = interval_s
        self.heartbeat_s = heartbeat_s
        self._key = b""
        # the last sent without its loads
        self._rest_key = b""
        self._sent_at = float("-inf")
        self.version = 0
        # the last sent, as sent
        self.latest: Snapshot | None = None
        self.sends = 0

    def tick(self) -> None:
        """Builds the snapshot and sends it if it changed or a heartbeat is due (control may
        also tick at once after a change it knows of, such as a drain)."""
        snapshot = self._build()
        bare = msgspec.structs.replace(snapshot, version=0, sent_at=0.0)
        key = _encoder.encode(bare)
        now = self._clock.now()
        since = now - self._sent_at
        changed = key != self._key
        rest_key = _encoder.encode(_without_loads(bare)) if changed else self._rest_key
        loads_only = changed and rest_key == self._rest_key
        if loads_only and since < self.loads_every_s - 1e-9:
            # loads alone: they go with the next send
            return
        # a heartbeat goes at the last tick before a second would pass without one
        if not changed and since < self.heartbeat_s - self.interval_s:
            return
        if changed:
            self._key = key
            self._rest_key = rest_key
            self.version += 1
        sent = msgspec.structs.replace(snapshot, version=self.version, sent_at=now)
        self._sent_at = now
        self.latest = sent
        self.sends += 1
        self._send(Loads(self.version, now, _loads(snapshot)) if loads_only else sent)

    def service(self) -> Periodic:
        """Ticks every ``interval_s``."""
        return Periodic("snapshot-publisher", self.interval_s, self._clock, self.tick)


def _without_loads(snapshot: Snapshot) -> Snapshot:
    """``snapshot`` with every replica's load reading taken out."""
    pools = tuple(
        msgspec.structs.replace(
            pool, members=tuple(msgspec.structs.replace(r, load=None) for r in pool.members)
        )
        for pool in snapshot.pools
    )
    return msgspec.structs.replace(snapshot, pools=pools)


def _loads(snapshot: Snapshot) -> dict[str, LoadView]:
    """Every replica's load reading in ``snapshot``, by replica id."""
    return {
        replica.id: replica.load
        for pool in snapshot.pools
        for replica in pool.members
        if replica.load is not None
    }
