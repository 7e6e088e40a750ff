"""`ProtocolTransport`: each replica reached in the protocol its URL names.

A pool may mix replicas that speak V2 REST (``http://``, ``https://``) and V2 gRPC
(``grpc://``, ``grpcs://``); every caller (the attempt layer, probes, metadata) holds one
`Transport` and sends REST-shaped exchanges, and this one hands each to the transport of the
endpoint's protocol (`Http1Transport`, `GrpcTransport`). The gRPC one is made on the first
``grpc://`` endpoint: grpcio costs every process that imports it more than half a second of
start, and most gateways have no gRPC replica.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from gateway.config.endpoint import Endpoint
from gateway.upstream.transport.base import AnswerRoom, Reply, Transport
from gateway.v2.body import Body


class ProtocolTransport:
    """``http`` for REST endpoints; for gRPC ones, the transport ``grpc()`` makes, once."""

    def __init__(self, http: Transport, grpc: Callable[[], Transport]) -> None:
        self.http = http
        self._make_grpc = grpc
        self._grpc: Transport | None = None
        self.name = f"{http.name}+grpc"

    @property
    def grpc(self) -> Transport:
        if self._grpc is None:
            self._grpc = self._make_grpc()
        return self._grpc

    def _of(self, endpoint: Endpoint) -> Transport:
        return self.grpc if endpoint.is_grpc else self.http

    def request(
        self,
        endpoint: Endpoint,
        method: str,
        path: str,
        *,
        body: bytes | Body = b"",
        headers: Mapping[str, str] | None = None,
        timeout: float,
        room: AnswerRoom | None = None,
    ) -> Coroutine[Any, Any, Reply]:
        """The endpoint's transport's exchange, handed on as it is (no coroutine of its own)."""
        transport = self.grpc if endpoint.is_grpc else self.http
        return transport.request(
            endpoint, method, path, body=body, headers=headers, timeout=timeout, room=room
        )

    def forget(self, endpoint: Endpoint) -> None:
        self._of(endpoint).forget(endpoint)

    async def aclose(self) -> None:
        grpc = self._grpc
        await asyncio.gather(self.http.aclose(), *([grpc.aclose()] if grpc is not None else []))
