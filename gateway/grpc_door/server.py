"""The gRPC door's server: `grpc.aio` in the gateway's own event loop, beside the HTTP server.

`gateway.server.GatewayServer` binds it before the gateway starts (a port in use fails the
start, as the HTTP port does), starts it once the gateway has started, and stops it with the
HTTP server's own shutdown: no new RPCs from then on, RPCs in flight finished within the same
grace (the longest deadline a model allows), before the gateway stops.

The client limits follow REST's: at most ``server.max_connections`` connections at once (one
more is closed at once, before its handshake: `gateway.config.connections`), each closed if it
has not sent its HTTP/2 preface within ``server.header_timeout_s``; at most
``server.max_connections_per_peer`` of one address's connections with calls in flight
(`gateway.grpc_door.peer_connections`: RESOURCE_EXHAUSTED past it); a message over
``server.max_body_bytes`` is refused by gRPC itself (RESOURCE_EXHAUSTED), and metadata over
``server.max_header_bytes`` too; each message
counts against ``server.inflight_bytes`` from before grpc takes it in, and must be complete
within ``server.body_timeout_s`` (`gateway.grpc_door.receive`). grpc's own HTTP/2 limits
(streams per connection, a stream's window, keepalive pings, idle and old connections) come
from ``server.grpc`` (`gateway.config.grpc_door`). All are read when the server starts: a
reload's new body limit applies at once through the edge's own check, the rest at the next
restart. Answers are not bounded here, as REST's are not (a replica's reply is capped upstream
by ``upstream.max_reply_body_bytes``), but a stream's unwritten answers are
(`gateway.grpc_door.stream`).
"""

from __future__ import annotations

import logging

import grpc

from gateway.config.connections import door_connections
from gateway.grpc_door.door_app import DoorApp
from gateway.grpc_door.metadata_log import quiet_non_utf8_metadata
from gateway.grpc_door.peer_connections import PeerConnections
from gateway.grpc_door.receive import MessageReader
from gateway.grpc_door.service import V2Service
from v2proto.grpc.service import generic_handler

log = logging.getLogger(__name__)


class GrpcDoor:
    """The V2 gRPC service for ``app`` (read at each RPC: a reload's edge takes over at once)."""

    def __init__(self, app: DoorApp, host: str, port: int, *, reuse_port: bool = False) -> None:
        """``reuse_port``: several processes bind the port (a control's workers; its control
        process keeps it reserved, `gateway.control.sockets.reserve_port`)."""
        self._app = app
        self.host = host
        self.port = port
        # the bound port once `bind` has run (0 asks for a free one)
        self._reuse_port = reuse_port
        self._server: grpc.aio.Server | None = None
        # connections held at once, once `bind` has run
        self.max_connections = 0

    def bind(self) -> int:
        """Creates the server and binds its port (not serving yet); `OSError` if it cannot."""
        config = self._app.gateway.config
        limits = config.server
        self.max_connections = door_connections(config)
        quiet_non_utf8_metadata(self._app.gateway.clock)
        server = grpc.aio.server(
            options=[
                # one connection more is closed at once, before its handshake
                ("grpc.max_allowed_incoming_connections", self.max_connections),
                # a connection that has not sent its HTTP/2 preface by then is closed
                ("grpc.server_handshake_timeout_ms", round(limits.header_timeout_s * 1000)),
                ("grpc.max_receive_message_length", limits.max_body_bytes),
                # both: refused always, not at random
                ("grpc.max_metadata_size", limits.max_header_bytes),
                ("grpc.absolute_max_metadata_size", limits.max_header_bytes),
                ("grpc.max_send_message_length", -1),
                # a second gateway on the port fails, as HTTP does, but a control's workers
                # share it
                ("grpc.so_reuseport", 1 if self._reuse_port else 0),
                *limits.grpc.server_options(),
            ]
        )
        reader = MessageReader(self._app.memory, limits.max_body_bytes, limits.body_timeout_s)
        per_peer = limits.max_connections_per_peer
        peers = None if per_peer is None else PeerConnections(per_peer)
        service = V2Service(self._app, reader, limits.grpc.stream_answers, peers)
        server.add_generic_rpc_handlers(
            (service.infer_handler(), generic_handler(service.handlers()))
        )
        host = f"[{self.host}]" if ":" in self.host else self.host
        try:
            port = server.add_insecure_port(f"{host}:{self.port}")
        except RuntimeError as exc:
            # grpc's way of saying the address is taken
            raise OSError(
                f"gRPC: cannot listen on {host}:{self.port} (address already in use?): {exc}"
            ) from exc
        self._server = server
        self.port = port
        return port

    async def start(self) -> None:
        assert self._server is not None, "bind() first"
        await self._server.start()
        log.info(
            "gRPC (V2 inference service) on %s:%d, up to %d connections at once",
            self.host,
            self.port,
            self.max_connections,
        )

    async def stop(self, grace_s: float | None) -> None:
        """No new RPCs; those in flight get ``grace_s`` (None: cancelled now)."""
        if self._server is not None:
            await self._server.stop(grace_s)
