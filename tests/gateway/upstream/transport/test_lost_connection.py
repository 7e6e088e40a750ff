"""A lost upstream connection is freed by reference counting alone, its read buffer with it.

Its parser holds its callbacks and its last reply holds it: cycles that only the cyclic
collector's rare full collections would free. With the collector off, nothing else can.
"""

from __future__ import annotations

import asyncio
import gc
import weakref

from gateway.upstream.transport.http1_connection import Connection


def test_a_lost_connection_needs_no_cyclic_collection() -> None:
    loop = asyncio.new_event_loop()
    gc.disable()
    try:
        conn = Connection(loop, lambda lost: None)
        gone = weakref.ref(conn)
        conn.connection_lost(None)
        del conn
        assert gone() is None
    finally:
        gc.enable()
        loop.close()


def test_a_connection_still_open_is_kept_by_its_parser_cycle_until_lost() -> None:
    loop = asyncio.new_event_loop()
    gc.disable()
    try:
        conn = Connection(loop, lambda lost: None)
        kept = weakref.ref(conn)
        del conn
        assert kept() is not None  # the cycle the release breaks is real
        lost = kept()
        assert lost is not None
        lost.connection_lost(None)
        del lost
        assert kept() is None
    finally:
        gc.enable()
        loop.close()


class _Wire:
    """Just enough of an asyncio transport for one exchange."""

    def get_extra_info(self, name: str) -> None:
        return None

    def is_closing(self) -> bool:
        return False

    def write(self, data: bytes) -> None:
        pass


def test_an_idle_connection_keeps_no_reference_to_its_last_reply() -> None:
    """A pooled connection waits for its next exchange; holding its last reply's future (and
    so the reply, body and all) would keep an image model's 6 MB answer per idle connection."""
    loop = asyncio.new_event_loop()
    try:
        conn = Connection(loop, lambda lost: None)
        conn.connection_made(_Wire())  # type: ignore[arg-type]
        future = conn.exchange(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n", loop.time() + 5)
        conn.data_received(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nbody")
        response = future.result()
        assert response.body == b"body" and conn.reusable
        del future
        holders = [r for r in gc.get_referrers(response) if isinstance(r, asyncio.Future)]
        assert holders == []
    finally:
        loop.close()
