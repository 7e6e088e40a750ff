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
