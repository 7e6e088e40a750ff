"""The gRPC door's cap on one address's connections, counted by connections with calls in
flight (grpc names each call's connection by the client's address and port)."""

from __future__ import annotations

from gateway.grpc_door.peer_connections import PeerConnections


def test_an_address_holds_its_most_connections_and_calls_on_them_go_on() -> None:
    peers = PeerConnections(2)
    assert peers.enter("ipv4:10.0.0.9:5000") and peers.enter("ipv4:10.0.0.9:5001")
    # a third connection of that address is refused; more calls on its two are not
    assert not peers.enter("ipv4:10.0.0.9:5002")
    assert peers.enter("ipv4:10.0.0.9:5000")
    # another address is counted apart, IPv6 by its address
    assert peers.enter("ipv4:10.0.0.1:6000") and peers.enter("ipv6:[::1]:7000")
    assert peers.connections("10.0.0.9") == 2 and peers.connections("::1") == 1
    assert "at most 2" in peers.refusal("ipv4:10.0.0.9:5002")


def test_a_connection_counts_until_its_last_call_ends() -> None:
    peers = PeerConnections(1)
    for _ in range(2):
        assert peers.enter("ipv4:10.0.0.9:5000")
    peers.leave("ipv4:10.0.0.9:5000")
    assert not peers.enter("ipv4:10.0.0.9:5001")
    peers.leave("ipv4:10.0.0.9:5000")
    assert peers.connections("10.0.0.9") == 0
    assert peers.enter("ipv4:10.0.0.9:5001")
