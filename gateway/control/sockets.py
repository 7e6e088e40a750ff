"""The ports the workers serve on, bound once by the control process and kept by it.

REST: `rest_listener` binds and listens on one socket that every worker inherits (``pass_fds``)
and accepts on; connections queue in its backlog while no worker accepts (a worker being
replaced), so a worker's death refuses no new connection. gRPC: grpc binds its own sockets, so
`reserve_port` keeps a bound, non-listening ``SO_REUSEPORT`` socket on the port: each worker's
grpc server binds and listens beside it (grpc sets ``SO_REUSEPORT`` unless its option
``grpc.so_reuseport`` is 0), the kernel spreads connections over the listening ones only, and
no program without ``SO_REUSEPORT`` (or of another user) can take the port while the gateway
runs.

Both are bound before any worker starts, so a port in use fails the start with today's message.
"""

from __future__ import annotations

import errno
import socket

from gateway.control.launcher import GATEWAY_PORT_HINT, GRPC_PORT_HINT, LaunchError, refuse_taken

# The listen backlog: uvicorn's default, which the single-process gateway used.
BACKLOG = 2048


def rest_listener(host: str, port: int, backlog: int = BACKLOG) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: one the kernel picks; read it back with
    ``getsockname()``), inheritable and non-blocking; `LaunchError` if it cannot be bound."""
    sock = _bound("the gateway", host, port, GATEWAY_PORT_HINT, reuse_port=False)
    try:
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise LaunchError(f"the gateway cannot listen on {host}:{port}: {exc.strerror}") from exc
    return sock


def reserve_port(host: str, port: int) -> socket.socket:
    """A bound, non-listening ``SO_REUSEPORT`` socket holding ``host:port`` for the workers'
    gRPC servers, kept open while they run; `LaunchError` if something already listens there
    (even with ``SO_REUSEPORT``: another gateway's gRPC door would share the connections)."""
    refuse_taken("the gateway's gRPC door", host, port, GRPC_PORT_HINT)
    sock = _bound("the gateway's gRPC door", host, port, GRPC_PORT_HINT, reuse_port=True)
    # the control's alone: the workers bind their own
    sock.set_inheritable(False)
    return sock


def _bound(what: str, host: str, port: int, hint: str, *, reuse_port: bool) -> socket.socket:
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise LaunchError(f"{what}: cannot resolve {host!r}: {exc.strerror}") from exc
    sock = socket.socket(family, kind, proto)
    try:
        # as uvicorn binds: a closed connection's TIME_WAIT does not hold the port
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
        sock.set_inheritable(True)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise LaunchError(f"{what}: address {host}:{port} is already in use ({hint})") from exc
        raise LaunchError(f"{what} cannot bind {host}:{port}: {exc.strerror}") from exc
    return sock
