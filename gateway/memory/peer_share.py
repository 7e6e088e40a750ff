"""Client addresses holding large requests in the in-flight bytes: a bounded table.

`gateway.memory.inflight_bytes.InflightBytes` keeps one account per client address (the peer,
as its door saw it) for the requests that hold more than a small one, so that it can hold a
peer to its share while others wait and take back what a peer was lent but never sent. An
account stays in the table while it holds requests; one that holds none stays until the table
is full, when all such are dropped at once (so a client's next large request finds its account
without a new one each time). At most ``most`` addresses have one: past that, new addresses
share one account, so a flood of addresses costs the table nothing more and, together, the
share of one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

# addresses with large requests in flight that get an account of their own
PEERS = 4096
# the account shared by addresses past ``PEERS``
OTHERS = "(others)"


class PeerAccount:
    """One address's large requests: the bytes they hold, how many there are (the budget
    counts them in and out), and the holds it was lent ahead of bytes it has not sent (each
    with how to take it back)."""

    __slots__ = ("held", "holders", "key", "lent")

    def __init__(self, key: str) -> None:
        self.key = key
        self.held = 0
        self.holders = 0
        # holder -> reclaim, oldest first
        self.lent: dict[object, Callable[[], None]] = {}


class PeerShares:
    """The accounts of the addresses that hold large requests, at most ``most`` of them."""

    __slots__ = ("_accounts", "_most", "_others")

    def __init__(self, most: int = PEERS) -> None:
        self._accounts: dict[str, PeerAccount] = {}
        self._most = most
        self._others = PeerAccount(OTHERS)

    def enter(self, peer: str) -> PeerAccount:
        """The account of ``peer`` (its door's form, `peer_host`) for one more request (which
        counts itself out of ``holders`` when it holds nothing any more)."""
        key = peer_host(peer)
        account = self._accounts.get(key)
        if account is None:
            account = self._open(key)
        account.holders += 1
        return account

    def _open(self, key: str) -> PeerAccount:
        accounts = self._accounts
        if len(accounts) >= self._most:
            # full: the accounts holding nothing go
            for idle in [a for a in accounts.values() if not a.holders]:
                del accounts[idle.key]
            if len(accounts) >= self._most:
                return self._others
        account = accounts[key] = PeerAccount(key)
        return account

    def __iter__(self) -> Iterator[PeerAccount]:
        """The accounts that hold requests."""
        for account in self._accounts.values():
            if account.holders:
                yield account
        if self._others.holders:
            yield self._others

    def __len__(self) -> int:
        """Addresses that hold requests now."""
        return sum(1 for _ in self)


_GRPC_FORMS = frozenset(("ipv4:", "ipv6:"))


def peer_host(peer: str) -> str:
    """The address alone, from an ASGI client's host (``10.0.0.1``, ``::1``) or grpc's peer
    string (``ipv4:10.0.0.1:5000``, ``ipv6:[::1]:5000``); anything else as it is."""
    if peer[:5] in _GRPC_FORMS:
        host = peer[5 : peer.rindex(":")]
        return host[1:-1] if host[:1] == "[" else host
    return peer
