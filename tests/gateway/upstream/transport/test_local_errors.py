"""The gateway's own resource errors (EMFILE, ENFILE, ENOBUFS, ENOMEM) become
`LocalResourceError` where they enter, on connect and on read, and are counted by errno; a
replica's own failures stay what they were. The real shortage runs in a gateway process of its
own with a low descriptor limit (tests/integration/test_file_descriptors.py)."""

from __future__ import annotations

import asyncio
import errno
from typing import Any

import grpc
import pytest

from gateway.config.endpoint import Endpoint
from gateway.errors import LocalResourceError, UpstreamConnectError
from gateway.faults.classify import classify_error
from gateway.outcome import OutcomeKind
from gateway.upstream.transport.grpc_client import rpc_error
from gateway.upstream.transport.http1 import Http1Transport
from gateway.upstream.transport.local_errors import (
    LOCAL_RESOURCE_ERRORS,
    local_error,
    local_error_in,
)

ENDPOINT = Endpoint.parse("http://127.0.0.1:9")


@pytest.mark.parametrize("number", [errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM])
def test_each_shortage_is_the_gateways_own_and_counted(number: int) -> None:
    name = errno.errorcode[number]
    before = LOCAL_RESOURCE_ERRORS[name]
    error = local_error(OSError(number, "short"))
    assert isinstance(error, LocalResourceError) and name in error.message
    assert LOCAL_RESOURCE_ERRORS[name] == before + 1
    outcome = classify_error("r0", error, 0.001)
    assert outcome.kind is OutcomeKind.LOCAL_RESOURCE and not outcome.is_failure
    assert outcome.retryable  # another replica may have a pooled connection
    assert "short of file descriptors or memory" in outcome.summary()


def test_a_replicas_own_failures_are_not_the_gateways() -> None:
    for number in (errno.ECONNREFUSED, errno.ECONNRESET, errno.EHOSTUNREACH):
        assert local_error(OSError(number, "theirs")) is None
    assert local_error(None) is None and local_error(ValueError("x")) is None
    chained = UpstreamConnectError("cannot connect")
    chained.__cause__ = OSError(errno.EMFILE, "Too many open files")
    assert local_error(chained) is not None  # the cause is read


async def test_a_connect_without_a_descriptor_left_is_the_gateways_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def no_descriptor(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.EMFILE, "Too many open files")

    loop = asyncio.get_running_loop()
    monkeypatch.setattr(loop, "create_connection", no_descriptor)
    transport = Http1Transport()
    try:
        with pytest.raises(LocalResourceError, match="EMFILE"):
            await transport.request(ENDPOINT, "GET", "/v2/health/ready", timeout=1.0)

        async def refused(*args: Any, **kwargs: Any) -> Any:
            raise ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")

        monkeypatch.setattr(loop, "create_connection", refused)
        with pytest.raises(UpstreamConnectError):  # the replica's: as before
            await transport.request(ENDPOINT, "GET", "/v2/health/ready", timeout=1.0)
    finally:
        await transport.aclose()


def test_grpc_saying_it_had_no_socket_is_the_gateways_own() -> None:
    details = "failed to connect to all addresses; last error: INTERNAL: <address>: socket: "
    assert local_error_in(details + "Too many open files") is not None
    assert "ENFILE" in str(local_error_in(details + "Too many open files in system"))
    assert local_error_in(details + "Connection refused") is None

    class Failed(grpc.aio.AioRpcError):
        def __init__(self, text: str) -> None:
            super().__init__(grpc.StatusCode.UNAVAILABLE, None, None, details=text)

    with pytest.raises(LocalResourceError):
        rpc_error(Failed(details + "Too many open files"))
    with pytest.raises(UpstreamConnectError):
        rpc_error(Failed(details + "Connection refused"))
