"""What a server process holds, seen from its side: its established TCP connections (Linux).

A test that must know whether a replica still serves a request the gateway gave up on reads the
replica's side of the wire, `/proc/net/tcp`, not the gateway's own view of it. IPv4 listeners
only (the tests' replicas bind 127.0.0.1): the table is read once per call, as reading it can
take milliseconds on a busy machine.
"""

from __future__ import annotations

from pathlib import Path

_TABLE = Path("/proc/net/tcp")
_ESTABLISHED = "01"


def established(*ports: int) -> dict[int, set[int]]:
    """For each of ``ports``, the peer ports of the connections established to it: the sockets
    on the server's side of each (the peers are on loopback)."""
    peers: dict[int, set[int]] = {port: set() for port in ports}
    for line in _TABLE.read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, state = fields[1], fields[2], fields[3]
        if state == _ESTABLISHED:
            port = int(local.rsplit(":", 1)[1], 16)
            if port in peers:
                peers[port].add(int(remote.rsplit(":", 1)[1], 16))
    return peers
