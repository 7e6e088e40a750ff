"""Neither end ever waits on the other: a control that stops reading costs the worker's request
path nothing but bounded, counted drops; a worker that stops reading is sent only the newest
snapshot and, past a hard bound of other messages, is disconnected."""

from __future__ import annotations

import asyncio
import os

from gateway.clock import MonotonicClock
from gateway.snapshot.codec import encode_frame
from gateway.snapshot.messages import Batch, Drain, Snapshot
from gateway.snapshot.outbox import WRITE_HIGH_WATER
from gateway.snapshot.shipper import BatchShipper
from gateway.telemetry.answers import Answer
from tests.gateway.snapshot.link_rig import Control, Worker, linked, snapshot, socket_dir, until

ANSWER: Answer = ("digits", 200, "mlp-1", None, "anonymous", 0.003, None, 600, 400, 1, 0.0)


async def test_a_control_that_stops_reading_never_holds_up_the_request_path() -> None:
    with socket_dir() as folder:
        path = os.path.join(folder, "control.sock")
        control = Control(path)
        worker = Worker(path, max_held_batches=5)
        client = worker.client
        largest = 0  # the largest frame a batch made

        def send(batch: Batch) -> None:
            nonlocal largest
            largest = max(largest, len(encode_frame(batch)))
            client.send_batch(batch)

        shipper = BatchShipper(MonotonicClock(), send, worker=1, interval_s=0.01)
        appended = 0
        longest = 0  # the longest the request path's list ever got

        async def request_path() -> None:  # 50 answers a millisecond at most
            nonlocal appended, longest
            while True:
                for _ in range(50):
                    shipper.answers.append(ANSWER)
                appended += 50
                longest = max(longest, len(shipper.answers))
                await asyncio.sleep(0.001)

        async with linked(control, worker):
            await until(lambda: client.connected, "the welcome")
            connection = control.server.connections[0]
            connection._transport.pause_reading()  # type: ignore[union-attr]  # control hangs
            shipper.start()
            traffic = asyncio.create_task(request_path())
            try:
                await until(lambda: client.dropped_batches >= 20, "batches dropped while held")
                assert client._connection is not None
                transport = client._connection.transport
                assert transport is not None
                assert client.held_batches <= 5
                assert transport.get_write_buffer_size() <= WRITE_HIGH_WATER + largest
                assert longest <= shipper.max_items  # swapped out every batch
                before = appended
                await until(lambda: appended > before, "the request path still appending")
            finally:
                traffic.cancel()
                await shipper.stop()
            connection._transport.resume_reading()  # type: ignore[union-attr]
            await client.stop()  # what is written gets to control before it hangs up
            await until(lambda: control.lost, "the worker's goodbye")
        seqs = [b.seq for b in control.batches]
        assert seqs == sorted(seqs) and seqs[-1] == shipper.seq
        assert len(seqs) + client.dropped_batches == shipper.seq  # every gap counted
        assert sum(len(b.answers) for b in control.batches) < appended  # dropped: not sent


async def test_a_worker_that_stops_reading_gets_the_newest_snapshot_only() -> None:
    with socket_dir() as folder:
        path = os.path.join(folder, "control.sock")
        control = Control(path)
        worker = Worker(path)
        async with linked(control, worker):
            await until(lambda: worker.client.connected, "the welcome")
            worker.client._connection.transport.pause_reading()  # type: ignore[union-attr]
            connection = control.server.connections[0]
            size = len(encode_frame(snapshot(version=200, metadata=50_000)))
            for version in range(1, 201):  # 10 MB sent to a worker that reads nothing
                control.server.broadcast(snapshot(version=version, metadata=50_000))
            assert connection.held_bytes <= size
            assert connection.dropped_snapshots > 150
            worker.client._connection.transport.resume_reading()  # type: ignore[union-attr]
            newest = snapshot(200, metadata=50_000)
            await until(lambda: worker.of(Snapshot)[-1:] == [newest], "the newest snapshot")
            versions = [s.version for s in worker.of(Snapshot)]
            assert versions == sorted(versions) and len(versions) < 50


async def test_a_worker_that_stops_reading_is_cut_off_past_the_hard_bound() -> None:
    with socket_dir() as folder:
        path = os.path.join(folder, "control.sock")
        control = Control(path, max_held_frames=8, max_held_bytes=1_000_000)
        worker = Worker(path)
        async with linked(control, worker):
            await until(lambda: worker.client.connected, "the welcome")
            worker.client._connection.transport.pause_reading()  # type: ignore[union-attr]
            connection = control.server.connections[0]
            for _ in range(40):  # drains are never dropped: they queue, up to the bound
                control.server.broadcast(Drain("x" * 100_000))
            await until(lambda: control.lost == [connection], "the cut seen by control")
            assert "stopped reading" in (connection.closed_reason or "")
            assert control.server.connections == []
            worker.client._connection.transport.resume_reading()  # type: ignore[union-attr]
            await until(lambda: worker.client.connects == 2, "the worker back")
            await until(lambda: len(control.server.connections) == 1, "welcomed again")
