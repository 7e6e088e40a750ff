"""The control end of the link: a Unix socket server with one `WorkerConnection` per worker.

A worker's first frame is its `Hello`; then ``on_hello(connection, hello)`` answers it (a
`Welcome`, then the latest snapshot), and each `Batch` goes to ``on_batch(connection,
batch)``. ``on_lost(connection)`` follows the end of a connection that said hello, however it
ended. A frame refused (too large, malformed, of the wrong type or out of order) is counted in
``frame_errors``, logged, and closes that connection; a link protocol other than this one's is
answered `Refused`, saying why.

Sending never waits on a worker: each connection writes through an `Outbox`. While a worker
does not read, only its newest snapshot is kept (older ones dropped, counted in
``dropped_snapshots``) and other messages queue up to a hard bound; past it the worker is
disconnected and reconnects once it reads again. The socket is created mode 0600 before it
listens, so no other user can connect in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import stat
from collections.abc import Callable
from typing import Final, cast

from gateway.snapshot.codec import MAX_FRAME_BYTES, FrameError, encode_frame, worker_decoder
from gateway.snapshot.messages import (
    PROTOCOL,
    Batch,
    ControlMessage,
    Hello,
    Loads,
    Refused,
    Snapshot,
    WorkerMessage,
)
from gateway.snapshot.outbox import Outbox

log = logging.getLogger(__name__)

# the kind of frame of which only the newest is kept
SNAPSHOT: Final = "snapshot"
LOADS: Final = "loads"
MAX_HELD_FRAMES: Final = 64
MAX_HELD_BYTES: Final = 2 * MAX_FRAME_BYTES
BACKLOG: Final = 128


def kind_of(message: ControlMessage) -> str | None:
    if isinstance(message, Snapshot):
        return SNAPSHOT
    return LOADS if isinstance(message, Loads) else None


class WorkerConnection(asyncio.Protocol):
    """One worker's connection: what it said in `Hello`, and `send` to it."""

    def __init__(self, server: LinkServer) -> None:
        self._server = server
        self._decoder = worker_decoder(server.max_frame_bytes)
        self._outbox = Outbox(server.max_held_frames, server.max_held_bytes, drop_oldest=False)
        self._transport: asyncio.Transport | None = None
        self.hello: Hello | None = None
        self.closed_reason: str | None = None

    @property
    def worker(self) -> int | None:
        return None if self.hello is None else self.hello.worker

    @property
    def dropped_snapshots(self) -> int:
        """Snapshots replaced by a newer one before this worker read them."""
        return self._outbox.replaced

    @property
    def held_bytes(self) -> int:
        return self._outbox.held_bytes

    def send(self, message: ControlMessage) -> None:
        """Sends at once, or holds while the worker does not read; never waits."""
        self.send_frame(encode_frame(message, self._server.max_frame_bytes), kind_of(message))

    def send_frame(self, frame: bytes | bytearray, kind: str | None = None) -> None:
        if self.closed_reason is not None:
            return
        if not self._outbox.put(frame, kind):
            self.close(f"it stopped reading ({self._outbox.held_bytes} bytes held)")

    def close(self, reason: str, *, flush: bool = False) -> None:
        """Ends the connection, logging why (``flush``: after what is written so far is
        sent)."""
        if self.closed_reason is None:
            log.warning("link to worker %s closed: %s", self.worker, reason)
        self.end(reason, flush=flush)

    def end(self, reason: str, *, flush: bool = False) -> None:
        """Ends the connection, as `close` does, without a word in the log."""
        if self.closed_reason is not None:
            return
        self.closed_reason = reason
        if self._transport is not None:
            if flush:
                self._transport.close()
            else:
                self._transport.abort()

    # asyncio's protocol callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._outbox.attach(self._transport)
        self._server._opened(self)

    def data_received(self, data: bytes) -> None:
        try:
            for message in self._decoder.feed(data):
                if self.closed_reason is not None:
                    return
                self._receive(message)
        except FrameError as exc:
            self._server.frame_errors += 1
            self.close(f"refused a frame: {exc}")

    def pause_writing(self) -> None:
        self._outbox.pause()

    def resume_writing(self) -> None:
        self._outbox.resume()

    def connection_lost(self, exc: Exception | None) -> None:
        self._outbox.detach()
        if self.closed_reason is None:
            self.closed_reason = f"lost: {exc}" if exc is not None else "closed by the worker"
        self._server._lost(self)

    def _receive(self, message: WorkerMessage) -> None:
        if isinstance(message, Batch):
            if self.hello is None:
                raise FrameError("a Batch before Hello")
            self._server._batch(self, message)
        elif self.hello is not None:
            raise FrameError("a second Hello")
        elif message.protocol != PROTOCOL:
            reason = f"worker speaks link protocol {message.protocol}, control {PROTOCOL}"
            self.send(Refused(reason))
            log.error("refused worker %d (pid %d): %s", message.worker, message.pid, reason)
            self.close(reason, flush=True)
        else:
            self.hello = message
            self._server._hello(self)


class LinkServer:
    """Listens on ``path``; `broadcast` sends to every worker that said hello."""

    def __init__(
        self,
        path: str,
        on_hello: Callable[[WorkerConnection, Hello], None],
        on_batch: Callable[[WorkerConnection, Batch], None],
        on_lost: Callable[[WorkerConnection], None],
        *,
        max_frame_bytes: int = MAX_FRAME_BYTES,
        max_held_frames: int = MAX_HELD_FRAMES,
        max_held_bytes: int = MAX_HELD_BYTES,
    ) -> None:
        self.path = path
        self._on_hello, self._on_batch, self._on_lost = on_hello, on_batch, on_lost
        self.max_frame_bytes = max_frame_bytes
        self.max_held_frames = max_held_frames
        self.max_held_bytes = max_held_bytes
        self._server: asyncio.Server | None = None
        self._open: set[WorkerConnection] = set()
        # those that said hello, in that order
        self.connections: list[WorkerConnection] = []
        self.frame_errors = 0

    async def start(self) -> None:
        sock = listening_socket(self.path)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_unix_server(lambda: WorkerConnection(self), sock=sock)

    def broadcast(self, message: ControlMessage) -> None:
        """Sends ``message`` to every worker that said hello, encoded once."""
        frame = encode_frame(message, self.max_frame_bytes)
        kind = kind_of(message)
        for connection in list(self.connections):
            connection.send_frame(frame, kind)

    async def close(self) -> None:
        """Stops listening, ends every connection, removes the socket."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for connection in list(self._open):
            connection.end("control closing")
        await server.wait_closed()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def _opened(self, connection: WorkerConnection) -> None:
        self._open.add(connection)

    def _hello(self, connection: WorkerConnection) -> None:
        assert connection.hello is not None
        self.connections.append(connection)
        try:
            self._on_hello(connection, connection.hello)
        except Exception:
            # a bug answering one worker must not take the link down
            log.exception("answering worker %s's hello failed", connection.worker)
            connection.close("its hello could not be answered")

    def _batch(self, connection: WorkerConnection, batch: Batch) -> None:
        try:
            self._on_batch(connection, batch)
        except Exception:
            # one batch's bug must not cost the next ones
            log.exception("applying batch %d of worker %s failed", batch.seq, connection.worker)

    def _lost(self, connection: WorkerConnection) -> None:
        self._open.discard(connection)
        if connection not in self.connections:
            return
        self.connections.remove(connection)
        try:
            self._on_lost(connection)
        except Exception:
            log.exception("handling the loss of worker %s failed", connection.worker)


def listening_socket(path: str, backlog: int = BACKLOG) -> socket.socket:
    """A Unix socket listening on ``path``, mode 0600 before it listens; a socket left there
    by an earlier run is replaced (any other file is an error)."""
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        os.chmod(path, 0o600)
        sock.listen(backlog)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock
