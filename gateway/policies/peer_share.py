"""Client addresses holding large requests in the in-flight byte budget: a bounded table.

`gateway.policies.byte_budget.InflightBytes` keeps one account per client address (the peer,
as its door saw it) for the requests that hold more than a small one, so that it can hold a
peer to its share while others wait and take back what a peer was lent but never sent. Only
addresses holding such requests are in the table (an account goes when its last request
does), and at most ``most`` of them: past that, new addresses share one account, so a flood
of addresses costs the table nothing more and, together, the share of one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

PEERS = 4096  # addresses with large requests in flight that get an account of their own
OTHERS = "(others)"  # the account shared by addresses past ``PEERS``


class PeerAccount:
    """One address's large requests: the bytes they hold, how many there are, and the holds
    it was lent ahead of bytes it has not sent (each with how to take it back)."""

    __slots__ = ("held", "holders", "key", "lent")

    def __init__(self, key: str) -> None:
        self.key = key
        self.held = 0
        self.holders = 0
        self.lent: dict[object, Callable[[], None]] = {}  # holder -> reclaim, oldest first


class PeerShares:
    """The accounts of the addresses that hold large requests, at most ``most`` of them."""

    __slots__ = ("_accounts", "_most", "_others")

    def __init__(self, most: int = PEERS) -> None:
        self._accounts: dict[str, PeerAccount] = {}
        self._most = most
        self._others = PeerAccount(OTHERS)

    def enter(self, peer: str) -> PeerAccount:
        """The account of ``peer`` (its door's form, `peer_host`) for one more request."""
        key = peer_host(peer)
        account = self._accounts.get(key)
        if account is None:
            if len(self._accounts) >= self._most:
                account = self._others
            else:
                account = self._accounts[key] = PeerAccount(key)
        account.holders += 1
        return account

    def leave(self, account: PeerAccount) -> None:
        """One of its requests holds nothing any more; the account goes with its last."""
        account.holders -= 1
        if not account.holders and account is not self._others:
            self._accounts.pop(account.key, None)

    def __iter__(self) -> Iterator[PeerAccount]:
        yield from self._accounts.values()
        if self._others.holders:
            yield self._others

    def __len__(self) -> int:
        return len(self._accounts)


def peer_host(peer: str) -> str:
    """The address alone, from an ASGI client's host (``10.0.0.1``, ``::1``) or grpc's peer
    string (``ipv4:10.0.0.1:5000``, ``ipv6:[::1]:5000``); anything else as it is."""
    if peer.startswith(("ipv4:", "ipv6:")):
        host = peer[5:].rpartition(":")[0]
        return host[1:-1] if host.startswith("[") else host
    return peer
