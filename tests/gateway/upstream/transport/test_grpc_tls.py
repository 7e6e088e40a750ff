"""grpcs:// replicas: GrpcTransport speaks TLS and mutual TLS from the pool's settings, against a
real grpc.aio server with certificates made in the test (trustme)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from gateway.config.endpoint import Endpoint
from gateway.config.headers import NO_HEADERS
from gateway.config.tls import TlsConfig
from gateway.errors import UpstreamConnectError
from gateway.upstream.transport.grpc_client import GrpcTransport
from tests.support.tls import Certificates
from v2proto.grpc import grpc_service_pb2 as pb
from v2proto.grpc.service import generic_handler


async def _ready(request: Any, context: Any) -> Any:
    return pb.ServerReadyResponse(ready=True)


@pytest.fixture
def certs(tmp_path: Path) -> Certificates:
    return Certificates.make(tmp_path)


async def _server(certs: Certificates, *, mutual: bool) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((generic_handler({"ServerReady": _ready}),))
    credentials = grpc.ssl_server_credentials(
        [(certs.server_key.read_bytes(), certs.server_cert.read_bytes())],
        certs.ca.read_bytes() if mutual else None,
        require_client_auth=mutual,
    )
    port = server.add_secure_port("127.0.0.1:0", credentials)
    await server.start()
    return server, port


@pytest.fixture
async def transport() -> AsyncIterator[GrpcTransport]:
    transport = GrpcTransport()
    yield transport
    await transport.aclose()


def endpoint(port: int, tls: TlsConfig) -> Endpoint:
    return Endpoint.parse(f"grpcs://127.0.0.1:{port}").with_pool(tls, NO_HEADERS)


async def test_tls_with_the_pools_ca(certs: Certificates, transport: GrpcTransport) -> None:
    server, port = await _server(certs, mutual=False)
    try:
        trusted = endpoint(port, TlsConfig(ca_file=str(certs.ca)))
        reply = await transport.request(trusted, "GET", "/v2/health/ready", timeout=5)
        assert reply.status == 200
        stranger = endpoint(port, TlsConfig(ca_file=str(certs.other_ca)))
        with pytest.raises(UpstreamConnectError):  # the server's certificate is not trusted
            await transport.request(stranger, "GET", "/v2/health/ready", timeout=5)
    finally:
        await server.stop(None)


async def test_mutual_tls_presents_the_pools_client_certificate(
    certs: Certificates, transport: GrpcTransport
) -> None:
    server, port = await _server(certs, mutual=True)
    try:
        with_cert = TlsConfig(
            ca_file=str(certs.ca), cert_file=str(certs.client_cert), key_file=str(certs.client_key)
        )
        reply = await transport.request(
            endpoint(port, with_cert), "GET", "/v2/health/ready", timeout=5
        )
        assert reply.status == 200
        without = endpoint(port, TlsConfig(ca_file=str(certs.ca), server_name="localhost"))
        with pytest.raises(UpstreamConnectError):  # no client certificate: refused
            await transport.request(without, "GET", "/v2/health/ready", timeout=5)
    finally:
        await server.stop(None)


async def test_verify_false_is_refused_for_grpcs(transport: GrpcTransport) -> None:
    unverified = endpoint(1, TlsConfig(verify=False))
    with pytest.raises(UpstreamConnectError, match="verify: false"):
        await transport.request(unverified, "GET", "/v2/health/ready", timeout=1)
