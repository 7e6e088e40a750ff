"""A raw HTTP/2 client of gRPC calls for tests of the door's limits: sends what no gRPC library
would (a message declared at one length and sent short, a call ending inside the 5-byte message
header, a stream opened and never written), and reports how each stream ended.

On ``h2`` (the pure-Python HTTP/2 state machine), over one TCP connection per `H2Client`, in
the test's own event loop. Data is sent as the server's flow control allows, no faster: what
the server lets a client push is exactly what it has let itself in for.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events

INFER = "/inference.GRPCInferenceService/ModelInfer"
STREAM_INFER = "/inference.GRPCInferenceService/ModelStreamInfer"


@dataclass
class Ended:
    """How a stream ended: its ``grpc-status`` (None: none came), or reset by the server."""

    code: int | None = None
    message: str = ""
    reset: bool = False
    at: float = 0.0  # time.monotonic() when it ended
    answers: int = 0  # DATA frames received on it (answers of a stream)
    metadata: dict[str, str] = field(default_factory=dict)  # the headers that carried the status


@dataclass
class _Stream:
    pending: memoryview
    end: bool  # END_STREAM once ``pending`` is sent
    ended: Ended = field(default_factory=Ended)
    done: asyncio.Event = field(default_factory=asyncio.Event)


def frame(message: bytes, declared: int | None = None) -> bytes:
    """A gRPC length-prefixed message (uncompressed), its length ``declared`` if given."""
    length = len(message) if declared is None else declared
    return b"\x00" + length.to_bytes(4, "big") + message


class H2Client:
    """One HTTP/2 connection to a gRPC server at ``host:port``; ``read_answers``: False, and
    the client never opens its receive windows (a client that stops reading); ``source``:
    the local address to connect from (another loopback address is another client)."""

    def __init__(
        self, host: str, port: int, *, read_answers: bool = True, source: str | None = None
    ) -> None:
        self.host, self.port = host, port
        self.read_answers = read_answers
        self.source = source
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        )
        self.streams: dict[int, _Stream] = {}
        self.closed = asyncio.Event()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pump: asyncio.Task[None] | None = None

    async def __aenter__(self) -> H2Client:
        local = None if self.source is None else (self.source, 0)
        self._reader, self._writer = await asyncio.open_connection(
            self.host, self.port, local_addr=local
        )
        self.conn.initiate_connection()
        self._flush()
        self._pump = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._pump is not None:
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._pump
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()

    def call(
        self,
        path: str,
        data: bytes = b"",
        *,
        end: bool = True,
        timeout: str | None = None,
        metadata: Sequence[tuple[bytes, bytes]] = (),
    ) -> int:
        """Opens a stream for ``path`` and sends ``data`` (as flow control allows), then ends
        its side if ``end``; returns the stream id. Nothing sent and ``end``: no message.
        ``metadata``: headers sent as they are, unchecked (CR, LF, NUL: what no library sends)."""
        sid = self.conn.get_next_available_stream_id()
        headers = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", f"{self.host}:{self.port}"),
            ("te", "trailers"),
            ("content-type", "application/grpc"),
        ]
        if timeout is not None:
            headers.append(("grpc-timeout", timeout))
        raw = [(k.encode(), v.encode()) for k, v in headers] + list(metadata)
        self.conn.send_headers(sid, raw, end_stream=end and not data)
        self.streams[sid] = _Stream(memoryview(data), end and bool(data))
        self._send_pending()
        self._flush()
        return sid

    def send(self, sid: int, data: bytes) -> None:
        """More ``data`` on stream ``sid`` (its side still open), as flow control allows."""
        stream = self.streams[sid]
        stream.pending = memoryview(bytes(stream.pending) + data)
        self._send_pending()
        self._flush()

    def unsent(self, sid: int) -> int:
        """Bytes of stream ``sid`` that flow control has not let out yet."""
        return len(self.streams[sid].pending)

    async def wait(self, sid: int, timeout: float) -> Ended | None:
        """How stream ``sid`` ended, or None if it had not ended within ``timeout``."""
        stream = self.streams[sid]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stream.done.wait(), timeout)
        return stream.ended if stream.done.is_set() else None

    def _send_pending(self) -> None:
        for sid, stream in self.streams.items():
            while stream.pending and not stream.done.is_set():
                try:
                    room = self.conn.local_flow_control_window(sid)
                except Exception:  # the stream is closed
                    break
                size = min(room, self.conn.max_outbound_frame_size, len(stream.pending))
                if size <= 0:
                    break
                chunk, stream.pending = stream.pending[:size], stream.pending[size:]
                last = stream.end and not stream.pending
                self.conn.send_data(sid, bytes(chunk), end_stream=last)

    def _flush(self) -> None:
        data = self.conn.data_to_send()
        if data and self._writer is not None and not self._writer.is_closing():
            self._writer.write(data)

    def _end(self, sid: int, **what: object) -> None:
        stream = self.streams.get(sid)
        if stream is None or stream.done.is_set():
            return
        for name, value in what.items():
            setattr(stream.ended, name, value)
        stream.ended.at = time.monotonic()
        stream.done.set()

    async def _read(self) -> None:
        assert self._reader is not None
        try:
            while data := await self._reader.read(65536):
                for event in self.conn.receive_data(data):
                    self._on(event)
                self._send_pending()
                self._flush()
        except (ConnectionError, h2.exceptions.ProtocolError):
            pass
        finally:
            for sid in list(self.streams):
                self._end(sid, reset=True)
            self.closed.set()

    def _on(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.DataReceived) and event.stream_id in self.streams:
            self.streams[event.stream_id].ended.answers += 1
            if self.read_answers:
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.ResponseReceived | h2.events.TrailersReceived):
            headers = {_text(k): _text(v) for k, v in event.headers or ()}
            if "grpc-status" in headers:
                self._end(
                    event.stream_id,
                    code=int(headers["grpc-status"]),
                    message=str(headers.get("grpc-message", "")),
                    metadata=headers,
                )
        elif isinstance(event, h2.events.StreamReset):
            self._end(event.stream_id, reset=True)
        elif isinstance(event, h2.events.ConnectionTerminated):
            for sid in list(self.streams):
                self._end(sid, reset=True)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def rss_bytes(pid: int) -> int:
    """The resident set size of process ``pid`` (Linux)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise LookupError(f"no VmRSS for {pid}")
