"""The link between control and workers: CPU µs per message, encoded, sent and decoded.

Measured in-process on a real Unix socket as the CPU time of the loop's thread (the peer is
another thread that only drains the socket, so the figure is the sender's own cost: encoding
plus the write, and not how busy the machine is): a snapshot of 32 replicas as
control broadcasts it, and a batch of 1,000 answers (with 1,000 calls, as a worker's request
path records them) as a worker ships it; and each decoded as the other end reads it (the
frame decoder fed the whole stream), with the garbage collector on as in the gateway. Best of
five runs, µs per message.
Run: ``.venv/bin/python loadtests/bench_snapshot_link.py [--number 2000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.clock import MonotonicClock
from gateway.snapshot.codec import FrameDecoder, control_decoder, encode_frame, worker_decoder
from gateway.snapshot.link_client import LinkClient
from gateway.snapshot.link_server import LinkServer
from gateway.snapshot.messages import (
    PROTOCOL,
    AdjustmentView,
    Batch,
    Call,
    Gauges,
    Hello,
    ModelView,
    PoolView,
    ReplicaView,
    Snapshot,
    Welcome,
)
from gateway.snapshot.publisher import SnapshotPublisher
from gateway.telemetry.answers import Answer

REPEAT = 5


def snapshot(replicas: int = 32) -> Snapshot:
    members = tuple(
        ReplicaView(
            f"mlp-{i}",
            f"http://10.0.0.{i}:9000",
            f"zone-{i % 3}",
            False,
            True,
            0.0,
            None,
            0.0,
            None,
            1.0,
        )
        for i in range(replicas)
    )
    pools = (PoolView("mlp", None, (), True, members),)
    models = {"digits": ModelView(AdjustmentView(), None, None, None)}
    return Snapshot(7, 1234.5, False, pools, models, ())


def batch(answers: int = 1000) -> Batch:
    answer: Answer = ("digits", 200, "mlp-3", None, "anonymous", 0.0031, 1.0, 620, 480, 1, 12.5)
    calls = [Call("metrics", "attempt", ("digits", "mlp", "mlp-3", "ok", 0.0031))] * answers
    gauges = Gauges({f"mlp-{i}": 1 for i in range(32)}, {"digits": 4}, 10.0, 80_000_000, 3.5)
    return Batch(1, 1, [answer] * answers, calls, gauges)


def drain(sock: socket.socket) -> None:
    """The peer: reads everything until the socket closes."""
    with sock:
        while sock.recv(1 << 20):
            pass


def best_us(run: Callable[[], object], number: int) -> float:
    """Best of `REPEAT` runs of ``number`` calls of ``run``, µs per call."""
    best = float("inf")
    for _ in range(REPEAT):
        start = time.thread_time()
        for _ in range(number):
            run()
        best = min(best, time.thread_time() - start)
    return best / number * 1e6


async def broadcast_us(folder: str, message: Snapshot, number: int) -> float:
    """Control's broadcast of ``message`` to one worker: encode once, write once."""
    path = os.path.join(folder, "control.sock")
    hello = asyncio.Event()
    server = LinkServer(path, lambda c, h: hello.set(), lambda c, b: None, lambda c: None)
    await server.start()
    peer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    await asyncio.get_running_loop().sock_connect(peer, path)
    peer.sendall(encode_frame(Hello(PROTOCOL, 0, os.getpid(), 0)))
    peer.setblocking(True)
    threading.Thread(target=drain, args=(peer,), daemon=True).start()
    await asyncio.wait_for(hello.wait(), 10.0)
    best = float("inf")
    for _ in range(REPEAT):
        start = time.thread_time()
        for n in range(number):
            server.broadcast(message)
            if n % 20 == 0:
                await asyncio.sleep(0)  # the loop writes what the socket did not take
        best = min(best, time.thread_time() - start)
    await server.close()
    return best / number * 1e6


async def send_batch_us(folder: str, message: Batch, number: int) -> float:
    """A worker's `send_batch` of ``message``: encode, write."""
    path = os.path.join(folder, "batches.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen()

    def control() -> None:
        sock, _ = listener.accept()
        sock.sendall(encode_frame(Welcome(PROTOCOL, 0, "", 1, folder)))
        drain(sock)

    threading.Thread(target=control, daemon=True).start()
    welcome = asyncio.Event()
    client = LinkClient(
        path,
        lambda: Hello(PROTOCOL, 0, os.getpid(), 0),
        lambda m: welcome.set(),
        clock=MonotonicClock(),
        rng=random.Random(1),
    )
    client.start()
    await asyncio.wait_for(welcome.wait(), 10.0)
    best = float("inf")
    for _ in range(REPEAT):
        start = time.thread_time()
        for _ in range(number):
            client.send_batch(message)
            await asyncio.sleep(0)
        best = min(best, time.thread_time() - start)
    dropped = client.dropped_batches
    await client.stop()
    listener.close()
    if dropped:
        print(f"(note: {dropped} batches dropped: the drain thread fell behind)")
    return best / number * 1e6


def decode_us(frame: bytes, decoder_of: Callable[[], FrameDecoder[Any]], number: int) -> float:
    stream = frame * number

    def run() -> None:
        for _ in decoder_of().feed(stream):
            pass

    return best_us(run, 1) / number


def encode(message: object) -> Callable[[], object]:
    return lambda: encode_frame(message)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=2000)
    args = parser.parse_args(argv)
    n = args.number
    snap, big = snapshot(), batch()
    snap_frame, batch_frame = bytes(encode_frame(snap)), bytes(encode_frame(big))
    publisher = SnapshotPublisher(lambda: snap, lambda s: None, MonotonicClock())
    publisher.tick()
    small = max(1, n // 10)
    with tempfile.TemporaryDirectory(prefix="bench", dir="/tmp") as folder:
        rows = [
            ("snapshot, 32 replicas", len(snap_frame), "encode", best_us(encode(snap), n)),
            ("", 0, "encode + send (broadcast)", asyncio.run(broadcast_us(folder, snap, n))),
            ("", 0, "decode", decode_us(snap_frame, control_decoder, n)),
            ("", 0, "publisher tick, unchanged", best_us(publisher.tick, n)),
            (
                "batch, 1,000 answers + calls",
                len(batch_frame),
                "encode",
                best_us(encode(big), small),
            ),
            ("", 0, "encode + send (send_batch)", asyncio.run(send_batch_us(folder, big, small))),
            ("", 0, "decode", decode_us(batch_frame, worker_decoder, small)),
        ]
    print("| message | bytes | step | µs each |\n|---|---:|---|---:|")
    for name, size, step, us in rows:
        print(f"| {name} | {size or ''} | {step} | {us:.1f} |")


if __name__ == "__main__":
    main()
