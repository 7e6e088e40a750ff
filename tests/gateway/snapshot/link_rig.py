"""Both ends of a real link in one test: a `LinkServer` and `LinkClient`s on a Unix socket in a
temporary directory, with what each end received recorded."""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from gateway.clock import Clock, MonotonicClock
from gateway.snapshot.link_client import LinkClient
from gateway.snapshot.link_server import LinkServer, WorkerConnection
from gateway.snapshot.messages import (
    PROTOCOL,
    AdjustmentView,
    Batch,
    ControlMessage,
    Hello,
    ModelView,
    PoolView,
    ReplicaView,
    Snapshot,
    Welcome,
)
from tests.support.processes import wait_until_async

WAIT_S = 10.0  # a bound on every wait for a condition (a busy 2-core machine)


def snapshot(version: int = 0, replicas: int = 32, metadata: int = 0) -> Snapshot:
    """A snapshot of one pool of ``replicas``, with ``metadata`` bytes of model metadata."""
    members = tuple(
        ReplicaView(
            f"mlp-{i}", f"http://10.0.0.{i}:9000", "a", False, True, 0.0, None, 0.0, None, 1.0
        )
        for i in range(replicas)
    )
    model = ModelView(AdjustmentView(), None, b"m" * metadata if metadata else None, None)
    pool = PoolView("mlp", None, (), True, members)
    return Snapshot(version, 1.0, False, (pool,), {"digits": model}, ())


@contextmanager
def socket_dir() -> Iterator[str]:
    """A short private directory (a Unix socket's path must fit in 108 bytes)."""
    path = tempfile.mkdtemp(prefix="link", dir="/tmp")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class Control:
    """The control end: welcomes each worker (and sends it ``first`` if set), records batches."""

    def __init__(self, path: str, **options: Any) -> None:
        self.hellos: list[Hello] = []
        self.batches: list[Batch] = []
        self.lost: list[WorkerConnection] = []
        self.first: Snapshot | None = None
        self.server = LinkServer(path, self.on_hello, self.batches_of, self.lost.append, **options)

    def on_hello(self, connection: WorkerConnection, hello: Hello) -> None:
        self.hellos.append(hello)
        connection.send(Welcome(PROTOCOL, hello.worker, "pools: {}", 1, "/run"))
        if self.first is not None:
            connection.send(self.first)

    def batches_of(self, connection: WorkerConnection, batch: Batch) -> None:
        self.batches.append(batch)


class Worker:
    """The worker end: records every message control sends."""

    def __init__(
        self, path: str, clock: Clock | None = None, protocol: int = PROTOCOL, **options: Any
    ) -> None:
        self.received: list[ControlMessage] = []
        options.setdefault("backoff_base_s", 0.01)
        options.setdefault("backoff_cap_s", 0.05)
        self.client = LinkClient(
            path,
            lambda: Hello(protocol, 1, os.getpid(), 0),
            self.on_message,
            clock=clock or MonotonicClock(),
            rng=random.Random(7),
            **options,
        )

    def on_message(self, message: ControlMessage) -> None:
        self.received.append(message)

    def of(self, kind: type[Any]) -> list[Any]:
        return [m for m in self.received if isinstance(m, kind)]


async def until(predicate: Any, message: str) -> None:
    await wait_until_async(predicate, WAIT_S, message=message)


@asynccontextmanager
async def linked(control: Control, *workers: Worker) -> AsyncIterator[None]:
    """Control listening and ``workers`` connecting; both ends stopped after, however it went."""
    await control.server.start()
    for worker in workers:
        worker.client.start()
    try:
        yield
    finally:
        for worker in workers:
            await worker.client.stop()
        await control.server.close()
