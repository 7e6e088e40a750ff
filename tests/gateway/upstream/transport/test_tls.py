"""`Http1Transport` over TLS to a real uvicorn with certificates made here, on both loops: the
pool's CA, SNI, mutual TLS, one handshake for many requests, and every TLS failure a connect
error."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from gateway.config.endpoint import Endpoint
from gateway.config.headers import ExtraHeaders
from gateway.config.tls import TlsConfig
from gateway.errors import UpstreamConnectError
from gateway.upstream.transport.http1 import Http1Transport
from tests.gateway.upstream.conftest import echo_server
from tests.support.tls import Certificates


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return Certificates.make(tmp_path_factory.mktemp("tls"))


def _trusting(certs: Certificates, *, client: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(certs.ca))
    if client:
        context.load_cert_chain(str(certs.client_cert), str(certs.client_key))
    return context


@pytest.fixture(scope="module")
def tls_port(certs: Certificates) -> Iterator[int]:
    with echo_server(
        str(certs.server_cert), str(certs.server_key), context=_trusting(certs)
    ) as port:
        yield port


@pytest.fixture(scope="module")
def mtls_port(certs: Certificates) -> Iterator[int]:
    """A server that refuses a client without a certificate signed by the CA."""
    tls = (str(certs.server_cert), str(certs.server_key), str(certs.ca))
    with echo_server(*tls, context=_trusting(certs, client=True)) as port:
        yield port


@pytest.fixture
async def transport() -> AsyncIterator[Http1Transport]:
    built = Http1Transport(connect_timeout_s=2.0)
    try:
        yield built
    finally:
        await built.aclose()


def _https(port: int, host: str = "127.0.0.1", **tls: Any) -> Endpoint:
    settings = TlsConfig(**{k: str(v) if isinstance(v, Path) else v for k, v in tls.items()})
    return Endpoint(host, port, scheme="https", tls=settings)


async def _seen(transport: Http1Transport, endpoint: Endpoint) -> dict[str, Any]:
    reply = await transport.request(endpoint, "GET", "/headers", timeout=5.0)
    assert reply.status == 200
    seen: dict[str, Any] = json.loads(reply.body)
    return seen


async def test_requests_over_tls_share_one_connection(
    transport: Http1Transport, certs: Certificates, tls_port: int
) -> None:
    endpoint = _https(tls_port, ca_file=certs.ca)
    peers = set()
    for i in range(20):
        body = f"tensor {i}".encode()
        reply = await transport.request(endpoint, "POST", "/echo", body=body, timeout=5.0)
        assert (reply.status, reply.body) == (200, body)
        peers.add((await _seen(transport, endpoint))["peer"])
    assert len(peers) == 1  # 40 requests, one connection: one handshake


async def test_a_large_reply_over_tls_is_read_whole_into_one_buffer_and_the_connection_kept(
    transport: Http1Transport, certs: Certificates, tls_port: int
) -> None:
    endpoint = _https(tls_port, ca_file=certs.ca)
    body = bytes(range(256)) * 12_000  # 3 MB: read straight into one buffer, through TLS
    for _ in range(2):
        reply = await transport.request(endpoint, "POST", "/echo", body=body, timeout=10.0)
        assert (reply.status, reply.body) == (200, body)
    peers = {(await _seen(transport, endpoint))["peer"] for _ in range(2)}
    assert len(peers) == 1


async def test_the_certificate_is_checked_against_the_server_name(
    transport: Http1Transport, certs: Certificates, tls_port: int
) -> None:
    await _seen(transport, _https(tls_port, host="localhost", ca_file=certs.ca))
    await _seen(transport, _https(tls_port, ca_file=certs.ca, server_name="localhost"))
    wrong_name = _https(tls_port, ca_file=certs.ca, server_name="other.test")
    with pytest.raises(UpstreamConnectError, match="certificate verify failed: Hostname mismatch"):
        await _seen(transport, wrong_name)


@pytest.mark.parametrize("trusted", ["other_ca", None])
async def test_an_untrusted_certificate_is_a_connect_error(
    transport: Http1Transport, certs: Certificates, tls_port: int, trusted: str | None
) -> None:
    tls = {"ca_file": getattr(certs, trusted)} if trusted else {}  # None: the system's CAs
    message = r"^TLS handshake failed: certificate verify failed: unable"
    with pytest.raises(UpstreamConnectError, match=message):
        await _seen(transport, _https(tls_port, **tls))
    assert not transport._open  # nothing left behind by the failed handshakes


async def test_verify_false_skips_every_check(
    transport: Http1Transport, certs: Certificates, tls_port: int
) -> None:
    tls: dict[str, Any] = {"ca_file": certs.other_ca, "server_name": "other.test", "verify": False}
    await _seen(transport, _https(tls_port, **tls))


async def test_mutual_tls_presents_the_pools_client_certificate(
    transport: Http1Transport, certs: Certificates, mtls_port: int
) -> None:
    client: dict[str, Any] = {"cert_file": certs.client_cert, "key_file": certs.client_key}
    await _seen(transport, _https(mtls_port, ca_file=certs.ca, **client))
    # TLS 1.3: the client's handshake completes before the server checks; the refusal ends
    # the first exchange before any reply byte: a connect error all the same.
    with pytest.raises(UpstreamConnectError, match="refuses the client certificate"):
        await _seen(transport, _https(mtls_port, ca_file=certs.ca))


async def test_the_pools_headers_reach_the_replica_once(
    transport: Http1Transport, certs: Certificates, tls_port: int
) -> None:
    pool = {"Host": "digits.models.example", "Authorization": "Bearer ${TOKEN}"}
    extra = ExtraHeaders.resolve({k: SecretStr(v) for k, v in pool.items()}, {"TOKEN": "t0k"})
    endpoint = _https(tls_port, ca_file=certs.ca).with_pool(None, extra)
    fields = (await _seen(transport, endpoint))["headers"]
    assert [v for k, v in fields if k == "host"] == ["digits.models.example"]
    assert [v for k, v in fields if k == "authorization"] == ["Bearer t0k"]


async def test_tls_to_a_plaintext_server_is_a_connect_error(
    transport: Http1Transport, uvicorn_endpoint: Endpoint
) -> None:
    endpoint = _https(uvicorn_endpoint.port)
    with pytest.raises(UpstreamConnectError, match=r"^TLS handshake failed"):
        await _seen(transport, endpoint)


async def test_a_silent_handshake_is_bounded_by_the_connect_timeout() -> None:
    transport = Http1Transport(connect_timeout_s=0.2)
    with socket.socket() as sock:  # the kernel completes TCP; nobody ever answers the hello
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        started = time.monotonic()
        with pytest.raises(UpstreamConnectError, match=r"^connect and TLS handshake timed out$"):
            await transport.request(_https(sock.getsockname()[1]), "GET", "/", timeout=5.0)
        assert time.monotonic() - started < 1.0
    await transport.aclose()


async def test_unusable_tls_files_are_named(
    transport: Http1Transport, tmp_path: Path, tls_port: int
) -> None:
    bad = tmp_path / "not-a-cert.pem"
    bad.write_text("not a PEM")
    with pytest.raises(UpstreamConnectError, match=r"cannot load the TLS files \(.*not-a-cert"):
        await _seen(transport, _https(tls_port, ca_file=bad))
    await asyncio.sleep(0)
