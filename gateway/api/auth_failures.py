"""Wrong keys at the control plane: each client address held back a little more with each one.

A request to the control plane with a wrong key is answered 401 only after a delay that grows
with its address's recent failures (`STEP_S`, doubled per failure up to `MAX_DELAY_S`). An
address's answers are queued one after the other, so a failing address gets one answer per
delay however many requests it sends at once; once its queue holds more than `MAX_QUEUE_S` of
them, its next requests are answered 429 with ``Retry-After`` at once, before any key is
compared (whatever key they carry: an operator behind the same address waits too). So guessing
keys costs time per guess, not only bandwidth. The wait is the request's own (an ``await`` on
the injected clock): other clients, and the event loop, go on meanwhile. A right key from an
address forgets its failures; an address quiet for `FORGET_AFTER_S` starts afresh.

The table of addresses is bounded (`MAX_ADDRESSES`, the least recently failing forgotten first),
so a flood of addresses costs bounded memory. Failures are logged at most once per
`LOG_EVERY_S`, each line saying how many there were since the last and from how many addresses
(not one line per failure); the guard counts every refusal in
``gateway_admin_auth_failures_total``.
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from dataclasses import dataclass

from gateway.clock import Clock

log = logging.getLogger(__name__)

# the first failure's delay; each next one in a row doubles it
STEP_S = 0.05
# the most one failure is delayed
MAX_DELAY_S = 2.0
# an address with more answers queued than this gets 429 at once
MAX_QUEUE_S = 10.0
# an address quiet this long starts afresh
FORGET_AFTER_S = 60.0
# addresses remembered; the least recently failing goes first
MAX_ADDRESSES = 4096
# at most one line per this long
LOG_EVERY_S = 10.0
# distinct addresses a log line counts exactly
MAX_COUNTED_ADDRESSES = 1024


@dataclass(slots=True)
class _Address:
    # in a row, since it was last quiet for FORGET_AFTER_S
    failures: int = 0
    # when it last failed
    last: float = 0.0
    # when its queued answers are all out
    free_at: float = 0.0


class AuthFailures:
    """Per-address delays after wrong keys, and the rate-limited log of them."""

    def __init__(self, clock: Clock, max_addresses: int = MAX_ADDRESSES) -> None:
        self._clock = clock
        self._max_addresses = max_addresses
        self._addresses: OrderedDict[str, _Address] = OrderedDict()
        self._next_log = -math.inf
        self._unlogged = 0
        self._unlogged_from: set[str] = set()

    def __len__(self) -> int:
        return len(self._addresses)

    def held_back(self, address: str) -> float | None:
        """While ``address`` has more than `MAX_QUEUE_S` of delayed answers queued: the seconds
        until it has not (answer 429 now, compare no key); None: go on."""
        entry = self._addresses.get(address)
        if entry is None:
            return None
        over = entry.free_at - self._clock.now() - MAX_QUEUE_S
        return over if over > 0 else None

    def failed(self, address: str) -> float:
        """Records one wrong key from ``address``; returns how long to wait before answering
        it (its turn in the address's queue, plus its own delay)."""
        now = self._clock.now()
        entry = self._addresses.pop(address, None)
        if entry is None:
            entry = _Address()
            while len(self._addresses) >= self._max_addresses:
                self._addresses.popitem(last=False)
        if now - entry.last > FORGET_AFTER_S:
            entry.failures = 0
        entry.failures += 1
        entry.last = now
        delay = min(STEP_S * 2 ** min(entry.failures - 1, 30), MAX_DELAY_S)
        entry.free_at = max(now, entry.free_at) + delay
        # the most recently failing last
        self._addresses[address] = entry
        self._log(address, now)
        return entry.free_at - now

    async def wait(self, seconds: float) -> None:
        """Holds back one answer (this request's task only) on the injected clock."""
        await self._clock.sleep(seconds)

    def succeeded(self, address: str) -> None:
        """A right key from ``address``: its failures are forgotten."""
        self._addresses.pop(address, None)

    def _log(self, address: str, now: float) -> None:
        self._unlogged += 1
        if len(self._unlogged_from) < MAX_COUNTED_ADDRESSES:
            self._unlogged_from.add(address)
        if now < self._next_log:
            return
        senders = len(self._unlogged_from)
        log.warning(
            "control plane: %d request(s) with a wrong key since the last such line, from "
            "%s address(es) (the latest %s); each address's answers are delayed",
            self._unlogged,
            f"{senders}+" if senders >= MAX_COUNTED_ADDRESSES else senders,
            address,
        )
        self._next_log = now + LOG_EVERY_S
        self._unlogged = 0
        self._unlogged_from.clear()
