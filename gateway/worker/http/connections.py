"""A door's open connections: how many, from whom, what they hold, and their drain.

The cap on connections (``max_connections``) keeps file descriptors for the clients already
served when someone opens thousands of silent connections; the share of it one address may
hold (``max_connections_per_peer``) keeps one client from taking all of them. A connection over
either is answered 503 (``{"error": ...}``, ``connection: close``) and closed; it is never
counted. What each connection holds (`Member.held`: bodies read and not yet taken, a read kept
unparsed, answers not yet sent) adds up to what the door's clients hold in this process, for
a budget of bytes to read.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Protocol

from gateway.worker.http.limits import ClientLimits


class Member(Protocol):
    peer: str

    @property
    def held(self) -> int: ...

    def drain(self) -> None: ...

    def abort(self) -> None: ...


class Connections:
    def __init__(self, limits: ClientLimits) -> None:
        self._max = limits.max_connections
        self._max_per_peer = limits.max_connections_per_peer
        self.open: set[Member] = set()
        self.per_peer: Counter[str] = Counter()
        self.refusals: Counter[int] = Counter()  # the server's own answers, by status
        self.draining = False
        self._empty: asyncio.Event | None = None

    def admit(self, member: Member) -> str | None:
        """Counts ``member`` in; or why it is refused (it is then not counted)."""
        if self.draining:
            return "the server is shutting down"
        if self._max is not None and len(self.open) >= self._max:
            return f"too many connections (at most {self._max})"
        peer = member.peer
        if self._max_per_peer is not None and self.per_peer[peer] >= self._max_per_peer:
            return f"too many connections from {peer or 'this peer'} (at most {self._max_per_peer})"
        self.open.add(member)
        self.per_peer[peer] += 1
        return None

    def forget(self, member: Member) -> None:
        if member not in self.open:
            return  # refused, never counted
        self.open.discard(member)
        peer = member.peer
        left = self.per_peer[peer] - 1
        if left:
            self.per_peer[peer] = left
        else:
            del self.per_peer[peer]
        if not self.open and self._empty is not None:
            self._empty.set()

    def refused(self, status: int) -> None:
        self.refusals[status] += 1

    def held(self) -> int:
        """Bytes the open connections hold for their clients, all together."""
        return sum(member.held for member in self.open)

    def drain(self) -> None:
        """Idle connections close now, the others after their answer in progress."""
        self.draining = True
        for member in list(self.open):
            member.drain()

    async def closed(self, timeout_s: float) -> bool:
        """Waits until every connection has closed, at most ``timeout_s``; True if they did."""
        if not self.open:
            return True
        self._empty = asyncio.Event()
        try:
            async with asyncio.timeout(timeout_s):
                await self._empty.wait()
        except TimeoutError:
            return False
        return True

    def abort(self) -> None:
        """Cuts every connection still open (their handlers are cancelled)."""
        for member in list(self.open):
            member.abort()
