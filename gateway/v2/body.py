"""A request body as the buffers it arrived in: carried, spliced and sent without copies.

A large image request arrives in many chunks; joining them, splicing an id into the
result and prefixing the HTTP head cost three full copies before a byte reached a replica.
A `Body` keeps the chunks (or the one buffer it came in) as ``pieces``; a splice (the id in
the JSON header, a vote's ``outputs``) adds a small buffer between two views of the same
bytes; the transport sends the HTTP head and every piece in one vectored write
(``transport.writelines``, which uvloop turns into ``writev``). A retry, a hedge and every vote
leg send the same pieces.

What needs contiguous bytes (a JSON parse, the gRPC upstream's conversion, a dialect
rewrite) calls `Body.joined`, which joins once and keeps the result.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

Piece = bytes | memoryview
# Below this size a body is handled as one buffer (spliced by copying, written whole): a copy
# of a few KiB costs less than views and a vector of pieces.
SMALL_BODY_BYTES = 16 * 1024


class Body:
    """Immutable bytes in pieces; ``len`` is their total. (Joining changes how the bytes are
    held, never what they are: views taken before stay valid.)"""

    __slots__ = ("_joined", "pieces", "size")

    def __init__(self, pieces: Sequence[Piece], size: int | None = None) -> None:
        self.pieces: tuple[Piece, ...] = tuple(pieces)
        self.size = sum(map(len, self.pieces)) if size is None else size
        self._joined: bytes | None = None
        if len(self.pieces) == 1 and type(self.pieces[0]) is bytes:
            self._joined = self.pieces[0]

    @classmethod
    def of(cls, data: bytes) -> Body:
        """One buffer as a body."""
        return cls((data,), len(data))

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"Body({self.size} bytes in {len(self.pieces)} pieces)"

    def joined(self) -> bytes:
        """The bytes in one buffer (joined on the first call, then kept). From then on the
        body is that buffer (its one piece), so the chunks are not held twice."""
        if self._joined is None:
            self._joined = b"".join(self.pieces)
            self.pieces = (self._joined,)
        return self._joined

    def head(self, size: int) -> bytes:
        """The first ``size`` bytes as one buffer (a copy of those bytes only)."""
        first = self.pieces[0] if self.pieces else b""
        if len(first) >= size:
            return bytes(first[:size])
        return b"".join(_views(self.pieces, 0, size))

    def views(self, start: int, end: int | None = None) -> Iterator[memoryview]:
        """The bytes ``[start, end)`` as views of the pieces (none copied)."""
        return _views(self.pieces, start, self.size if end is None else end)

    def spliced(self, at: int, insert: bytes, cut: int = 0) -> Body:
        """These bytes with ``cut`` bytes at ``at`` replaced by ``insert``; the rest shared."""
        pieces: list[Piece] = [*_views(self.pieces, 0, at), insert]
        pieces.extend(_views(self.pieces, at + cut, self.size))
        return Body([p for p in pieces if len(p)], self.size - cut + len(insert))


def as_bytes(body: bytes | Body) -> bytes:
    """``body`` in one buffer, whichever form it has."""
    return body if isinstance(body, bytes) else body.joined()


def _views(pieces: Sequence[Piece], start: int, end: int) -> Iterator[memoryview]:
    offset = 0
    for piece in pieces:
        size = len(piece)
        if offset + size > start and offset < end:
            view = memoryview(piece)
            if offset >= start and offset + size <= end:
                yield view
            else:
                yield view[max(start - offset, 0) : min(end - offset, size)]
        offset += size
        if offset >= end:
            return
