"""Control's side of the snapshot: built every ``interval_s``, sent when it changed, and at least
every ``heartbeat_s`` besides (at the last tick before that much time passed without a send),
so a worker knows control is alive (`Freshness`).

A change is told by the encoded snapshot itself: its bytes, with ``version`` and ``sent_at``
zeroed, against the last sent. So ``build`` states what the data plane needs and nothing has
to track what changed; the version goes up by one on each change (never on a heartbeat), and
``latest`` is what a worker that just said hello is sent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import msgspec

from gateway.clock import Clock
from gateway.periodic import Periodic
from gateway.snapshot.messages import Snapshot

INTERVAL_S: Final = 0.05
HEARTBEAT_S: Final = 1.0

_encoder = msgspec.msgpack.Encoder()


class SnapshotPublisher:
    __slots__ = (
        "_build",
        "_clock",
        "_key",
        "_send",
        "_sent_at",
        "heartbeat_s",
        "interval_s",
        "latest",
        "sends",
        "version",
    )

    def __init__(
        self,
        build: Callable[[], Snapshot],
        send: Callable[[Snapshot], None],
        clock: Clock,
        interval_s: float = INTERVAL_S,
        heartbeat_s: float = HEARTBEAT_S,
    ) -> None:
        """``send`` is usually `LinkServer.broadcast`."""
        self._build = build
        self._send = send
        self._clock = clock
        self.interval_s = interval_s
        self.heartbeat_s = heartbeat_s
        self._key = b""
        self._sent_at = float("-inf")
        self.version = 0
        # the last sent, as sent
        self.latest: Snapshot | None = None
        self.sends = 0

    def tick(self) -> None:
        """Builds the snapshot and sends it if it changed or a heartbeat is due (control may
        also tick at once after a change it knows of, such as a drain)."""
        snapshot = self._build()
        key = _encoder.encode(msgspec.structs.replace(snapshot, version=0, sent_at=0.0))
        now = self._clock.now()
        changed = key != self._key
        # a heartbeat goes at the last tick before a second would pass without one
        if not changed and now - self._sent_at < self.heartbeat_s - self.interval_s:
            return
        if changed:
            self._key = key
            self.version += 1
        sent = msgspec.structs.replace(snapshot, version=self.version, sent_at=now)
        self._sent_at = now
        self.latest = sent
        self.sends += 1
        self._send(sent)

    def service(self) -> Periodic:
        """Ticks every ``interval_s``."""
        return Periodic("snapshot-publisher", self.interval_s, self._clock, self.tick)
