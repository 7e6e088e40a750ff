"""The worker end of the link: connects to control's socket, says `Hello`, and hands each message
control sends to ``on_message``; reconnects for as long as it runs.

While control is gone (or hung) the worker goes on serving on what it last heard: the client
reconnects with exponential backoff and full jitter (`gateway.retry.backoff.FullJitter`,
capped, so that a control back again is found within ``backoff_cap_s``; the jitter keeps
workers from reconnecting in step), and ``stale`` turns true once nothing came for
``stale_s``. `send_batch` never waits: while the link is down or control does not read, batches
are held up to a bound and the oldest are dropped (``dropped_batches``).

A `Refused` from control, or a `Welcome` of another protocol version, ends the client for good
(``refused`` says why) after ``on_message`` is told with a `Refused`: retrying cannot help.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Final, cast

from tenacity import AsyncRetrying, retry_if_result

from gateway.clock import Clock, wait_first
from gateway.periodic import BackgroundTask
from gateway.retry.backoff import FullJitter
from gateway.snapshot.codec import MAX_FRAME_BYTES, FrameError, control_decoder, encode_frame
from gateway.snapshot.freshness import STALE_S, Freshness
from gateway.snapshot.messages import PROTOCOL, Batch, ControlMessage, Hello, Refused, Welcome
from gateway.snapshot.outbox import Outbox

log = logging.getLogger(__name__)

BACKOFF_BASE_S: Final = 0.05
BACKOFF_CAP_S: Final = 1.0
CONNECT_TIMEOUT_S: Final = 1.0
# for what is written to reach control when the client stops
CLOSE_TIMEOUT_S: Final = 1.0
# five seconds of batches at their usual pace
MAX_HELD_BATCHES: Final = 50
MAX_HELD_BYTES: Final = 2 * MAX_FRAME_BYTES


class _Connection(asyncio.Protocol):
    """One connection to control; ``lost`` is done once it ended."""

    def __init__(self, client: LinkClient) -> None:
        self._client = client
        self._decoder = control_decoder(client.max_frame_bytes)
        self.transport: asyncio.Transport | None = None
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.welcomed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self._client._connected(self, self.transport)

    def data_received(self, data: bytes) -> None:
        try:
            for message in self._decoder.feed(data):
                if not self._client._receive(self, message):
                    return
        except FrameError as exc:
            self._client.frame_errors += 1
            log.warning("link to control closed: refused a frame: %s", exc)
            self.abort()

    def pause_writing(self) -> None:
        self._client._outbox.pause()

    def resume_writing(self) -> None:
        self._client._outbox.resume()

    def connection_lost(self, exc: Exception | None) -> None:
        self._client._outbox.detach()
        if not self.lost.done():
            self.lost.set_result(None)

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()


class LinkClient(BackgroundTask):
    """``start()`` connects and keeps connecting; ``await stop()`` ends it."""

    def __init__(
        self,
        path: str,
        hello_factory: Callable[[], Hello],
        on_message: Callable[[ControlMessage], None],
        *,
        clock: Clock,
        rng: random.Random,
        stale_s: float = STALE_S,
        backoff_base_s: float = BACKOFF_BASE_S,
        backoff_cap_s: float = BACKOFF_CAP_S,
        max_frame_bytes: int = MAX_FRAME_BYTES,
        max_held_batches: int = MAX_HELD_BATCHES,
        max_held_bytes: int = MAX_HELD_BYTES,
    ) -> None:
        super().__init__("snapshot-link")
        self.path = path
        self._hello_factory = hello_factory
        self._on_message = on_message
        self._clock = clock
        self._wait = FullJitter(backoff_base_s, backoff_cap_s, rng)
        self._backoff_cap_s = backoff_cap_s
        self.freshness = Freshness(clock, stale_s)
        self.max_frame_bytes = max_frame_bytes
        self._outbox = Outbox(max_held_batches, max_held_bytes, drop_oldest=True)
        self._connection: _Connection | None = None
        self._stopping = False
        self.refused: str | None = None
        # connections made (the first one included)
        self.connects = 0
        self.frame_errors = 0
        # refused here, as control would refuse them
        self.oversize_batches = 0

    @property
    def stale(self) -> bool:
        return self.freshness.stale

    @property
    def connected(self) -> bool:
        """Connected and welcomed by control."""
        return self._connection is not None and self._connection.welcomed

    @property
    def dropped_batches(self) -> int:
        return self._outbox.dropped

    @property
    def held_batches(self) -> int:
        return self._outbox.held

    def send_batch(self, batch: Batch) -> None:
        """Sends now, or holds (bounded, the oldest dropped) while that cannot be."""
        try:
            frame = encode_frame(batch, self.max_frame_bytes)
        except FrameError as exc:
            self.oversize_batches += 1
            log.error("batch %d not sent: %s", batch.seq, exc)
            return
        self._outbox.put(frame)

    async def stop(self) -> None:
        """Stops reconnecting; what is already written gets ``CLOSE_TIMEOUT_S`` to reach
        control before the connection is cut."""
        self._stopping = True
        connection = self._connection
        if connection is not None and connection.transport is not None:
            connection.transport.close()
            await wait_first(self._clock, [connection.lost], self._clock.now() + CLOSE_TIMEOUT_S)
        await super().stop()
        self._connection = None

    async def _run(self) -> None:
        while self.refused is None and not self._stopping:
            retrying = AsyncRetrying(
                sleep=self._clock.sleep,
                wait=self._wait,
                retry=retry_if_result(lambda done: not done),
            )
            try:
                await retrying(self._session)
            except Exception:
                # a bug in one session must not end the link for good
                log.exception("link to control failed")
                await self._clock.sleep(self._backoff_cap_s)

    async def _session(self) -> bool:
        """One connection, from connecting to its end; True once it was welcomed (the next
        connection then starts the backoff afresh), or when no other may follow (refused,
        stopping)."""
        loop = asyncio.get_running_loop()
        try:
            async with self._clock.timeout_at(self._clock.now() + CONNECT_TIMEOUT_S):
                await loop.create_unix_connection(lambda: _Connection(self), self.path)
        except (OSError, TimeoutError) as exc:
            log.debug("no link to control at %s: %s", self.path, exc)
            return False
        connection = self._connection
        if connection is None:
            return False
        try:
            await connection.lost
        finally:
            # when cancelled (stop): never leave the socket open
            connection.abort()
        if self._connection is connection:
            self._connection = None
        if self._stopping:
            return True
        log.warning("link to control lost; the worker serves on its last snapshot")
        return connection.welcomed or self.refused is not None

    def _connected(self, connection: _Connection, transport: asyncio.Transport) -> None:
        self._connection = connection
        self.connects += 1
        transport.write(encode_frame(self._hello_factory(), self.max_frame_bytes))
        self._outbox.attach(transport)

    def _receive(self, connection: _Connection, message: ControlMessage) -> bool:
        """Hands ``message`` on; False when the link is refused (nothing more is read)."""
        self.freshness.heard()
        if isinstance(message, Welcome):
            if message.protocol != PROTOCOL:
                message = Refused(
                    f"control speaks link protocol {message.protocol}, this worker {PROTOCOL}"
                )
            else:
                connection.welcomed = True
        if isinstance(message, Refused):
            self.refused = message.reason
            log.error("control refused this worker's link: %s", message.reason)
            connection.abort()
        try:
            self._on_message(message)
        except Exception:
            # one message's bug must not take the link down
            log.exception("applying %s from control failed", type(message).__name__)
        return self.refused is None
