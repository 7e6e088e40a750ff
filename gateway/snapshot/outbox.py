"""One end's frames on their way to the peer: written at once while the peer reads, held (and
bounded) while it does not, so that sending never blocks the sender's loop.

The transport says when the peer stops reading (``pause_writing``: its buffer passed the high
water mark) and when it reads again (``resume_writing``). Meanwhile, and while no transport is
attached (the link is down), frames are held here, in order, within ``max_frames`` and
``max_bytes``. A frame put with a ``kind`` replaces the held frame of that kind: only the
newest snapshot matters. Past a bound, ``drop_oldest`` makes room by dropping the oldest held
frames (counted in ``dropped``); otherwise `put` says the peer is over its bound, and the caller
disconnects it.
"""

from __future__ import annotations

import asyncio
from collections import deque

# the transport's own buffer, past which the peer is not reading
WRITE_HIGH_WATER = 256 * 1024


class Outbox:
    __slots__ = (
        "_held",
        "_held_bytes",
        "_paused",
        "_transport",
        "drop_oldest",
        "dropped",
        "max_bytes",
        "max_frames",
        "replaced",
    )

    def __init__(self, max_frames: int, max_bytes: int, *, drop_oldest: bool) -> None:
        self.max_frames = max_frames
        self.max_bytes = max_bytes
        self.drop_oldest = drop_oldest
        self._transport: asyncio.WriteTransport | None = None
        self._paused = False
        self._held: deque[tuple[str | None, bytes | bytearray]] = deque()
        self._held_bytes = 0
        # held frames dropped to make room
        self.dropped = 0
        # held frames replaced by a newer one of their kind
        self.replaced = 0

    @property
    def held(self) -> int:
        return len(self._held)

    @property
    def held_bytes(self) -> int:
        return self._held_bytes

    def attach(self, transport: asyncio.WriteTransport) -> None:
        """Writes to ``transport`` from now on, beginning with what is held."""
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        self._transport = transport
        self._paused = False
        self._flush()

    def detach(self) -> None:
        """The link is down: hold from now on."""
        self._transport = None
        self._paused = False

    def pause(self) -> None:
        self._paused = True

    def resume(self) -> None:
        self._paused = False
        self._flush()

    def put(self, frame: bytes | bytearray, kind: str | None = None) -> bool:
        """Writes or holds ``frame``; False when holding it passed a bound that
        ``drop_oldest`` does not make room under (the caller then disconnects the peer)."""
        transport = self._transport
        if transport is not None and not self._paused and not self._held:
            transport.write(frame)
            return True
        if kind is not None:
            self._discard(kind)
        self._held.append((kind, frame))
        self._held_bytes += len(frame)
        return self._bound()

    def _discard(self, kind: str) -> None:
        for entry in self._held:
            if entry[0] == kind:
                self._held.remove(entry)
                self._held_bytes -= len(entry[1])
                self.replaced += 1
                return

    def _bound(self) -> bool:
        held = self._held
        while len(held) > self.max_frames or self._held_bytes > self.max_bytes:
            if not self.drop_oldest:
                return False
            self._held_bytes -= len(held.popleft()[1])
            self.dropped += 1
        return True

    def _flush(self) -> None:
        held = self._held
        transport = self._transport
        # a write may pause the transport at once (past its high water): then hold the rest
        while held and transport is not None and not self._paused:
            _, frame = held.popleft()
            self._held_bytes -= len(frame)
            transport.write(frame)
