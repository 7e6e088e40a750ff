"""The gateway-wide bound on in-flight request and answer bytes, charged for what arrives.

Each request and answer body the gateway holds is in memory until its answer is written; caps
per request (``server.max_body_bytes``, ``upstream.max_reply_body_bytes``) do not bound their
sum. So every request holds bytes in this budget (``server.inflight_bytes``) from its head to
its written answer, and what it holds is what it has sent, never what it says it will send: a
body holds what has arrived plus one read's worth (`READ_BYTES`, what its door may read before
the edge asks for more), and grows its hold as its chunks arrive (`hold`, else `wait`). A hold
that does not fit waits, first come first served, up to ``server.inflight_wait_s``, then gets
503 with Retry-After. An answer waits the same way before it is read from its replica
(`hold_answer`, else `wait_answer`: its Content-Length, or as it arrives where it has none), so
requests admitted together never bring in more answers than the budget holds. Bytes already in
memory (an answer from a path that read it whole, a body read whole, a gRPC message) are
counted, never waited for (`settle`). All of them hold new requests back until they are given
back (`release`; an answer once its door says it is written, or when its request ends). A
client that declares a large body and sends nothing holds one read's worth, not what it
declared.

Small and large: a request that holds at most ``small_bytes`` is small, and costs one
comparison and an add (`fits`, `add`). Larger ones hold at most ``limit - kept`` between them:
the kept part (``server.inflight_small_reserve``) is for small requests, which may also use the
rest, so a small request finds room unless small requests themselves fill the budget.

Peers: a large request's bytes count to its client's address too (`gateway.memory.peer_share`,
a bounded table). One address may hold more than ``peer_bytes`` (``server.inflight_peer_share``
of the limit, or ``peer_floor`` where that is more: one large request's worth) only while no
other address waits: its requests that would grow past it wait behind the others'. What an
address was lent ahead of bytes it had not sent (a gRPC read's room, `gateway.grpc_door.receive`,
which grpc fills without telling) is taken back when another address has to wait: the oldest
lent hold of the address most over its share is reclaimed (its read is refused with 503), so
calls that send only their headers cannot keep the budget from everyone else. Small requests
are not counted per address: each holds at most ``small_bytes``, and how many one address has
open is bounded by the connections a server lets it have.

One request alone is always admitted, so a body under the cap is never refused for being larger
than the budget. Waiters are woken in order as bytes come back; no timer runs while nothing
waits. When the in-flight bytes empty after a burst of at least ``burst_bytes``, or half the
limit where that is less, or after large bodies (`LARGE_BODY_BYTES` each) adding up to as much
were given back since the last such call, one at a time or not, ``emptied`` is called (the
gateway gives the heap's free pages back then: `gateway.memory.heap_trim`): large answers
written one after the other free as much as a burst does, without ever making one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Protocol

from gateway.config.server import ServerConfig
from gateway.errors import Overloaded
from gateway.memory.peer_share import PeerAccount, PeerShares, peer_host

# emptying after holding this much calls ``emptied``
BURST_BYTES = 16 * 1024 * 1024
# What a door may have read past the bytes the edge has taken: one socket read (uvloop's read
# size, and the HTTP protocol pauses reading past as much unread).
READ_BYTES = 256 * 1024
# a request holding at most this much is small
SMALL_BYTES = 64 * 1024
# takes a lent hold back (its read is refused, then released)
Reclaim = Callable[[], None]


class Holder(Protocol):
    """One request's bytes in the budget (`gateway.pipeline.edge.Arrival`, or a door's `Hold`)."""

    # bytes it holds
    held: int
    # its client's address, as its door gave it (`peer_host` reads either form)
    peer: str
    # its address's account while it holds as a large request
    account: PeerAccount | None


class AnswerHolder(Holder, Protocol):
    """A request whose answer is read into memory under its hold (`InflightBytes.hold_answer`)."""

    # of ``held``, its answer's bytes
    answer_held: int


class Hold:
    """A holder of its own, for bytes held before the edge's arrival exists (a gRPC read)."""

    __slots__ = ("account", "held", "peer")

    def __init__(self, peer: str) -> None:
        self.peer = peer
        self.held = 0
        self.account: PeerAccount | None = None


class BudgetLevels(NamedTuple):
    """The budget's levels for /metrics (``gateway_inflight_*``); a worker ships them in its
    batches' gauges, and the control process sums its workers'."""

    # bytes held now
    held: int
    # requests waiting for room now
    waiting: int
    # waits that ran out (503) so far
    refused: int
    # lent holds taken back so far
    reclaimed: int
    # the budget (a worker's share of ``server.inflight_bytes``)
    limit: int


@dataclass(slots=True, eq=False)
class _Waiter:
    holder: Holder
    # what it asked to hold
    total: int
    future: asyncio.Future[None]
    # its address
    key: str
    reclaim: Reclaim | None


# a body this large is a buffer of its own on the heap
LARGE_BODY_BYTES = 256 * 1024


class InflightBytes:
    """Bytes held by requests being served, against ``limit``; ``wait_s``: the longest wait.
    ``small_reserve`` and ``peer_share``: shares of the limit (kept for small requests; what
    one address holds while others wait, at least ``peer_floor``)."""

    @classmethod
    def from_config(
        cls, server: ServerConfig, emptied: Callable[[], None] | None = None
    ) -> InflightBytes:
        """The budget ``server`` sets (``inflight_*``; the machine's default where unset)."""
        return cls(
            server.inflight_bytes or machine_default(),
            server.inflight_wait_s,
            emptied,
            small_bytes=server.inflight_small_bytes,
            small_reserve=server.inflight_small_reserve,
            peer_share=server.inflight_peer_share,
            # one large request's body and answer
            peer_floor=2 * server.max_body_bytes,
        )

    def __init__(
        self,
        limit: int,
        wait_s: float,
        emptied: Callable[[], None] | None = None,
        burst_bytes: int = BURST_BYTES,
        *,
        small_bytes: int = SMALL_BYTES,
        small_reserve: float = 0.0,
        peer_share: float = 1.0,
        peer_floor: int = 0,
    ) -> None:
        self.limit = limit
        self.wait_s = wait_s
        self.small_bytes = small_bytes
        # never held by large requests
        self.kept = int(limit * small_reserve)
        self.peer_bytes = max(int(limit * peer_share), peer_floor)
        self.held = 0
        # of which large requests hold
        self.large = 0
        # the most held at once (for the benchmarks)
        self.peak = 0
        # waits that ran out: 503 (`levels` and /metrics)
        self.refused = 0
        # lent holds taken back
        self.reclaimed = 0
        self.peers = PeerShares()
        self._emptied = emptied
        self._burst_bytes = min(burst_bytes, limit // 2)
        # the most held since the in-flight bytes last emptied
        self._burst = 0
        self._small: deque[_Waiter] = deque()
        self._large: deque[_Waiter] = deque()
        # address -> its waiters
        self._waiting: dict[str, int] = {}
        # bytes of large bodies given back since ``emptied`` last ran
        self._given_large = 0

    def levels(self) -> BudgetLevels:
        """What /metrics shows of the budget now (read at a worker's batch, not per request)."""
        waiting = len(self._small) + len(self._large)
        return BudgetLevels(self.held, waiting, self.refused, self.reclaimed, self.limit)

    # --- small requests: the usual path ---------------------------------------------------

    def fits(self, size: int) -> bool:
        """A small request's ``size`` bytes fit now (then `add` them); else `hold`/`wait`."""
        return size <= self.small_bytes and not self._small and self.held + size <= self.limit

    def add(self, size: int) -> None:
        """Counts bytes (a small request's; its holder's ``held`` is the caller's to set)."""
        held = self.held = self.held + size
        if held > self._burst:
            self._burst = held
            if held > self.peak:
                self.peak = held

    def give(self, size: int) -> None:
        """The bytes are no longer held."""
        self.held -= size
        if size >= LARGE_BODY_BYTES:
            self._given_large += size
        if self._small or self._large:
            self._wake()
        if self.held or self._emptied is None:
            return
        if self._burst >= self._burst_bytes or self._given_large >= self._burst_bytes:
            self._burst = self._given_large = 0
            self._emptied()

    # --- any holder -------------------------------------------------------------------------

    def hold(self, holder: Holder, total: int, reclaim: Reclaim | None = None) -> bool:
        """Makes ``holder`` hold ``total`` bytes if they fit now (True); else changes nothing
        it holds (False: `wait`). ``reclaim``: the hold is lent ahead of bytes not sent, and
        taken back with it when another address waits (`settle` ends the loan)."""
        size = total - holder.held
        if size <= 0:
            return True
        account = holder.account
        if account is None:
            if total <= self.small_bytes:
                if self._small or not self._room(size, holder.held):
                    return False
                self.add(size)
                holder.held = total
                return True
            account = self._enlarge(holder)
        if self._large or not self._fits_large(holder, account, size):
            return False
        # the grant, as `_grant` (inline: a body's every read comes here)
        self.add(size)
        self.large += size
        account.held += size
        holder.held = total
        if reclaim is not None:
            account.lent[holder] = reclaim
        return True

    async def wait(self, holder: Holder, total: int, reclaim: Reclaim | None = None) -> None:
        """`hold`, waiting up to ``wait_s`` for room; `Overloaded` (503, Retry-After) if it
        never comes (the holder keeps what it held before). Granted, the holder's owner gives
        the bytes back (`release`), cancelled or not."""
        if self.hold(holder, total, reclaim):
            return
        if self.wait_s <= 0:
            self._refuse(holder, total)
        account = holder.account
        key = account.key if account is not None else peer_host(holder.peer)
        waiter = _Waiter(holder, total, asyncio.get_running_loop().create_future(), key, reclaim)
        (self._small if account is None else self._large).append(waiter)
        self._waiting[key] = self._waiting.get(key, 0) + 1
        self._reclaim(key)
        # those ahead of it may be held back by their share
        self._wake()
        granted = waiter.future
        if granted.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(granted), self.wait_s)
        except TimeoutError:
            if granted.done():
                # granted as the wait ran out: keep it
                return
            self._dequeue(waiter)
            # a smaller waiter behind this one may fit now
            self._wake()
            self._refuse(holder, total)
        except asyncio.CancelledError:
            if not granted.done():
                self._dequeue(waiter)
                self._wake()
            raise

    # --- answers: room before they are read -------------------------------------------------

    def hold_answer(self, holder: AnswerHolder, size: int) -> bool:
        """Makes room for an answer of ``size`` bytes about to be read (its Content-Length, or
        what has arrived of one without it) if it fits now (True); else changes nothing (False:
        `wait_answer`). The answer's bytes join what the holder holds for its request, in place
        of an answer it held before (a retry's, a hedge's): a request holds room for its largest
        answer at once, as one request. An answer larger than ``small_bytes`` makes it a large
        request, so it never holds the part kept for small ones."""
        if size <= holder.answer_held:
            return True
        if not self.hold(holder, holder.held - holder.answer_held + size):
            return False
        holder.answer_held = size
        return True

    async def wait_answer(self, holder: AnswerHolder, size: int) -> None:
        """`hold_answer`, waiting up to ``wait_s`` as a body does (`wait`); `Overloaded` if no
        room comes: its reader then drops the answer unread."""
        if size <= holder.answer_held:
            return
        await self.wait(holder, holder.held - holder.answer_held + size)
        holder.answer_held = size

    def settle(self, holder: Holder, total: int) -> None:
        """The holder's bytes are in memory and known: it holds ``total`` from now, counted
        without waiting (an answer, a body read whole, a gRPC message), lent none."""
        account = holder.account
        size = total - holder.held
        if account is None:
            if total > self.small_bytes:
                account = self._enlarge(holder)
            else:
                holder.held = total
                if size > 0:
                    self.add(size)
                elif size < 0:
                    self.give(-size)
                return
        elif account.lent:
            account.lent.pop(holder, None)
        holder.held = total
        account.held += size
        self.large += size
        if size > 0:
            self.add(size)
        elif size < 0:
            self.give(-size)

    def release(self, holder: Holder, keep: int = 0) -> None:
        """Gives back what ``holder`` holds past ``keep`` bytes (an answer not yet written).
        A wait of its own still queued (an answer's, for a try that outlived its request) is
        cancelled: nothing is granted to a holder once it gives back."""
        if self._small or self._large:
            self._drop_waits(holder)
        size = holder.held - keep
        account = holder.account
        if account is not None:
            if account.lent:
                account.lent.pop(holder, None)
            if size > 0:
                account.held -= size
                self.large -= size
            if not keep:
                holder.account = None
                account.holders -= 1
        if size > 0:
            holder.held = keep
            self.give(size)

    # --- the rules ----------------------------------------------------------------------------

    def _room(self, size: int, own: int) -> bool:
        held = self.held
        # alone, or within the limit
        return held == own or held + size <= self.limit

    def _fits_large(self, holder: Holder, account: PeerAccount, size: int) -> bool:
        held = self.held
        if held != holder.held and (
            held + size > self.limit or self.large + size > self.limit - self.kept
        ):
            return False
        return account.held + size <= self.peer_bytes or not self._others_wait(account.key)

    def _others_wait(self, key: str) -> bool:
        return len(self._small) + len(self._large) > self._waiting.get(key, 0)

    def _enlarge(self, holder: Holder) -> PeerAccount:
        """The holder is a large request from now: its bytes count to its address too."""
        account = holder.account = self.peers.enter(holder.peer)
        account.held += holder.held
        self.large += holder.held
        return account

    def _grant(
        self, holder: Holder, account: PeerAccount, size: int, reclaim: Reclaim | None
    ) -> None:
        self.add(size)
        self.large += size
        account.held += size
        holder.held += size
        if reclaim is not None:
            account.lent[holder] = reclaim

    def _wake(self) -> None:
        small = self._small
        while small:
            waiter = small[0]
            holder = waiter.holder
            size = waiter.total - holder.held
            if size > 0 and not self._room(size, holder.held):
                break
            self._dequeue(waiter)
            if size > 0:
                self.add(size)
                holder.held = waiter.total
            waiter.future.set_result(None)
        for waiter in list(self._large):
            holder = waiter.holder
            account = holder.account
            # large waiters are enlarged before they wait
            assert account is not None
            size = waiter.total - holder.held
            if account.held + size > self.peer_bytes and self._others_wait(account.key):
                # over its share while another address waits: the others first
                continue
            held = self.held
            if held != holder.held and (
                held + size > self.limit or self.large + size > self.limit - self.kept
            ):
                # room goes first come, first served
                return
            self._dequeue(waiter)
            if size > 0:
                self._grant(holder, account, size, waiter.reclaim)
            waiter.future.set_result(None)

    def _dequeue(self, waiter: _Waiter) -> None:
        queue = self._small if waiter in self._small else self._large
        with contextlib.suppress(ValueError):
            queue.remove(waiter)
            left = self._waiting[waiter.key] - 1
            if left:
                self._waiting[waiter.key] = left
            else:
                del self._waiting[waiter.key]

    def _drop_waits(self, holder: Holder) -> None:
        dropped = [w for w in (*self._small, *self._large) if w.holder is holder]
        for waiter in dropped:
            self._dequeue(waiter)
            waiter.future.cancel()
        if dropped:
            # those behind may fit now
            self._wake()

    def _reclaim(self, key: str) -> None:
        """Takes back the oldest lent hold of the address most over its share (not ``key``)."""
        most: PeerAccount | None = None
        over = 0
        for account in self.peers:
            excess = account.held - self.peer_bytes
            if account.lent and excess > over and account.key != key:
                most, over = account, excess
        if most is not None:
            holder = next(iter(most.lent))
            reclaim = most.lent.pop(holder)
            self.reclaimed += 1
            reclaim()

    def _refuse(self, holder: Holder, total: int) -> None:
        self.refused += 1
        if not holder.held and holder.account is not None:
            # nothing to keep: no account
            self.release(holder)
        raise Overloaded(
            f"the gateway holds {self.held} bytes of requests and answers in flight "
            f"(server.inflight_bytes={self.limit}); this request's {total} bytes did not fit "
            f"within {self.wait_s:g} s",
            retry_after_s=1.0,
        )


def machine_default() -> int:
    """1/16 of the memory this process may use (the machine's, or its cgroup's limit if lower),
    from 64 MiB to 1 GiB: room for the bodies in flight and the copies made of them, well
    inside what is left to the replicas beside it."""
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    with contextlib.suppress(OSError, ValueError):
        memory = min(memory, int(Path("/sys/fs/cgroup/memory.max").read_text()))
    return max(64 << 20, min(1 << 30, memory // 16))
