"""Both ends of the link on a real Unix socket: hello and welcome, snapshots down and batches
up, reconnecting after control restarts, staleness, refusals."""

from __future__ import annotations

import asyncio
import os
import random
import stat

from gateway.snapshot.codec import HEADER, encode_frame
from gateway.snapshot.link_client import LinkClient
from gateway.snapshot.link_server import WorkerConnection
from gateway.snapshot.messages import (
    PROTOCOL,
    Batch,
    ControlMessage,
    Drain,
    Hello,
    Refused,
    Snapshot,
    Welcome,
)
from tests.gateway.snapshot.link_rig import Control, Worker, linked, snapshot, socket_dir, until
from tests.support.clock import FakeClock


def batch(seq: int) -> Batch:
    return Batch(1, seq, [], [], None)


async def test_a_worker_is_welcomed_gets_snapshots_and_ships_batches() -> None:
    with socket_dir() as folder:
        path = os.path.join(folder, "control.sock")
        control = Control(path)
        control.first = snapshot(version=1)
        await control.server.start()
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        worker = Worker(path)
        worker.client.start()
        try:
            await until(lambda: len(worker.received) == 2, "welcome and first snapshot")
            welcome, first = worker.received
            assert isinstance(welcome, Welcome) and welcome.config_text == "pools: {}"
            assert first == snapshot(version=1)
            assert worker.client.connected and not worker.client.stale
            assert [h.worker for h in control.hellos] == [1]

            control.server.broadcast(snapshot(version=2))
            worker.client.send_batch(batch(1))
            await until(lambda: len(worker.of(Snapshot)) == 2, "the broadcast")
            await until(lambda: control.batches == [batch(1)], "the batch")
        finally:
            await worker.client.stop()
            await control.server.close()
        assert not os.listdir(folder)  # the socket removed
        await until(lambda: len(control.lost) == 1, "the loss seen by control")


async def test_a_worker_reconnects_after_control_restarts_and_keeps_what_it_could() -> None:
    with socket_dir() as folder:
        path = os.path.join(folder, "control.sock")
        control, again = Control(path), Control(path)
        worker = Worker(path, max_held_batches=3)
        async with linked(control, worker):
            await until(lambda: worker.client.connected, "the first connection")
            await control.server.close()
            await until(lambda: not worker.client.connected, "the loss seen by the worker")
            for seq in range(1, 6):  # control is gone: held, the oldest dropped
                worker.client.send_batch(batch(seq))
            assert (worker.client.held_batches, worker.client.dropped_batches) == (3, 2)
            try:
                await again.server.start()
                await until(lambda: worker.client.connected, "the reconnection")
                await until(lambda: len(again.batches) == 3, "the held batches")
            finally:
                await worker.client.stop()
                await again.server.close()
            assert [b.seq for b in again.batches] == [3, 4, 5]  # a gap: 2 dropped
            assert len(control.hellos) == len(again.hellos) == 1
            assert len(worker.of(Welcome)) == 2


async def test_a_worker_retries_with_capped_jittered_backoff_while_control_is_gone() -> None:
    with socket_dir() as folder:
        clock = FakeClock(start=0.0)  # its sleeps are recorded and return at once
        client = LinkClient(
            os.path.join(folder, "control.sock"),
            lambda: Hello(PROTOCOL, 1, 1, 0),
            lambda message: None,
            clock=clock,
            rng=random.Random(3),
            backoff_base_s=0.05,
            backoff_cap_s=1.0,
        )
        client.start()
        try:
            await until(lambda: len(clock.slept) >= 12, "a dozen retries")
        finally:
            await client.stop()
        waits = clock.slept[:12]
        ceilings = [min(1.0, 0.05 * 2**n) for n in range(12)]
        assert all(0 <= w <= c for w, c in zip(waits, ceilings, strict=True)), waits
        assert max(waits[6:]) > 0.5  # the ceiling grew up to the cap
        assert len(set(waits)) == len(waits)  # jittered: no two alike


async def test_a_snapshot_goes_stale_without_messages_and_fresh_with_the_next() -> None:
    with socket_dir() as folder:
        path = os.path.join(folder, "control.sock")
        control = Control(path)
        clock = FakeClock()
        worker = Worker(path, clock=clock)
        assert worker.client.stale  # nothing heard yet
        async with linked(control, worker):
            await until(lambda: worker.client.connected, "the welcome")
            assert not worker.client.stale
            clock.advance(3.0)
            assert not worker.client.stale
            clock.advance(0.01)
            assert worker.client.stale and worker.client.connected  # hung, not gone
            control.server.broadcast(snapshot(version=2))
            await until(lambda: not worker.client.stale, "fresh again")


async def test_a_worker_of_another_protocol_is_refused_and_stops_trying() -> None:
    with socket_dir() as folder:
        path = os.path.join(folder, "control.sock")
        control = Control(path)
        worker = Worker(path, protocol=PROTOCOL + 1)
        async with linked(control, worker):
            await until(lambda: worker.client.refused is not None, "the refusal")
            assert "protocol" in (worker.client.refused or "")
            assert worker.of(Refused) and not worker.of(Welcome)
            assert control.hellos == []
            await asyncio.sleep(0.2)  # backoff cap 0.05: a retry would have come by now
            assert worker.client.connects == 1


async def test_a_control_of_another_protocol_is_refused_by_the_worker() -> None:
    with socket_dir() as folder:
        path = os.path.join(folder, "control.sock")

        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(encode_frame(Welcome(PROTOCOL + 1, 1, "", 1, "/run")))
            await reader.read()  # until the worker hangs up
            writer.close()

        server = await asyncio.start_unix_server(answer, path)
        worker = Worker(path)
        worker.client.start()
        try:
            await until(lambda: worker.client.refused is not None, "the refusal")
            assert f"control speaks link protocol {PROTOCOL + 1}" in (worker.client.refused or "")
            assert [type(m) for m in worker.received] == [Refused]
        finally:
            await worker.client.stop()
            server.close()
            await server.wait_closed()


async def test_garbage_closes_only_its_own_connection_and_is_counted() -> None:
    with socket_dir() as folder:
        path = os.path.join(folder, "control.sock")
        control = Control(path)
        worker = Worker(path)
        async with linked(control, worker):
            await until(lambda: worker.client.connected, "the good worker")
            for junk in (
                HEADER.pack(3) + b"\xc1\xc1\xc1",  # not msgpack
                HEADER.pack(2**31),  # over the frame limit
                bytes(encode_frame(batch(1))),  # a batch before its hello
                bytes(encode_frame(Drain("x"))),  # control's message, sent to control
            ):
                reader, writer = await asyncio.open_unix_connection(path)
                writer.write(junk)
                assert await asyncio.wait_for(reader.read(), 10.0) == b""  # closed by control
                writer.close()
            assert control.server.frame_errors == 4
            control.server.broadcast(Drain("still here"))
            await until(lambda: worker.of(Drain) == [Drain("still here")], "the good worker")
            assert len(control.server.connections) == 1


class BuggyControl(Control):
    def batches_of(self, connection: WorkerConnection, batch: Batch) -> None:
        if batch.seq == 1:
            raise RuntimeError("a bug applying a batch")
        super().batches_of(connection, batch)


class BuggyWorker(Worker):
    def on_message(self, message: ControlMessage) -> None:
        if isinstance(message, Drain):
            raise RuntimeError("a bug applying a drain")
        super().on_message(message)


async def test_a_bug_in_either_ends_callback_costs_that_message_only() -> None:
    with socket_dir() as folder:
        path = os.path.join(folder, "control.sock")
        control, worker = BuggyControl(path), BuggyWorker(path)
        async with linked(control, worker):
            await until(lambda: worker.client.connected, "the welcome")
            worker.client.send_batch(batch(1))
            worker.client.send_batch(batch(2))
            control.server.broadcast(Drain("x"))
            control.server.broadcast(snapshot(version=3))
            await until(lambda: control.batches == [batch(2)], "the batch after the bug")
            await until(lambda: worker.of(Snapshot) == [snapshot(version=3)], "the snapshot")
            assert worker.client.connects == 1 and control.lost == []
