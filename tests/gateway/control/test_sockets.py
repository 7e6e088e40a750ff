"""The ports bound once by the control process: the REST listener its workers inherit, and the
gRPC port held for the workers' grpc servers; a port in use fails with today's message."""

from __future__ import annotations

import socket

import grpc.aio
import pytest

from gateway.control.launcher import LaunchError
from gateway.control.sockets import reserve_port, rest_listener
from tests.support.processes import free_port


def test_the_rest_listener_listens_and_is_inheritable() -> None:
    with rest_listener("127.0.0.1", 0, backlog=16) as listener:
        assert listener.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1
        assert listener.get_inheritable()
        assert not listener.getblocking()
        port = listener.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=2.0):
            pass  # queued in the backlog until someone accepts


def test_a_rest_port_in_use_is_refused_as_today() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(LaunchError) as refused:
            rest_listener("127.0.0.1", port)
    assert str(refused.value) == (
        f"the gateway: address 127.0.0.1:{port} is already in use "
        "(`gateway up --port N` or server.port in the config, or stop what listens)"
    )


def test_an_unknown_host_is_refused() -> None:
    with pytest.raises(LaunchError, match=r"cannot resolve 'no-such-host\.invalid'"):
        rest_listener("no-such-host.invalid", 0)


def reuse_port_listener(port: int) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(8)
    sock.settimeout(2.0)
    return sock


def test_a_reserved_port_takes_reuse_port_listeners_and_no_one_else() -> None:
    with reserve_port("127.0.0.1", 0) as reserved:
        port = reserved.getsockname()[1]
        assert reserved.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 0
        with socket.socket() as squatter, pytest.raises(OSError, match="in use"):
            squatter.bind(("127.0.0.1", port))
        with reuse_port_listener(port) as worker, socket.create_connection(("127.0.0.1", port)):
            conn, _ = worker.accept()  # the listener gets it, not the reservation
            conn.close()


def test_a_grpc_port_already_served_is_refused() -> None:
    port = free_port()
    with reuse_port_listener(port), pytest.raises(LaunchError) as refused:
        reserve_port("127.0.0.1", port)  # even another SO_REUSEPORT listener: not shared
    assert str(refused.value).startswith(
        f"the gateway's gRPC door: address 127.0.0.1:{port} is already in use"
    )


async def test_grpc_servers_bind_the_reserved_port_beside_each_other() -> None:
    with reserve_port("127.0.0.1", 0) as reserved:
        port = reserved.getsockname()[1]
        servers = [grpc.aio.server(options=[("grpc.so_reuseport", 1)]) for _ in range(2)]
        try:
            for server in servers:
                assert server.add_insecure_port(f"127.0.0.1:{port}") == port
                await server.start()
        finally:
            for server in servers:
                await server.stop(None)
