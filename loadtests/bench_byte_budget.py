"""The in-flight byte budget under clients that declare much and send nothing (issue 37's flood).

A ``gateway serve`` with ``--workers`` data-plane workers (2) on its default budget
(``server.inflight_bytes`` unset: 1/16 of the machine's memory, at most 1 GiB, shared among the
workers) and default ``max_body_bytes`` (16 MiB), over one digits replica. An attacker
process opens ``--silent`` REST connections (256), each a request head declaring a 16 MiB body
and not one byte of it, and ``--header-only`` gRPC calls (64) that send only their HEADERS, and
keeps them open for ``--seconds`` (60), opening a new one for each that the gateway ends (its
header and body timeouts, a refusal). Meanwhile a second client sends one-row digits infers
(closed loop, ``--concurrency``), first alone (the reference), then under the flood; its
failures and latency quantiles are printed, with what the attacker saw and the RSS of the
gateway's workers (added up) and of its control process.
Everything runs on 127.0.0.1: attacker and client are one address, so the per-address share
cannot tell them apart; what the client's small requests find is the part of the budget kept
for small requests, and a budget that charges what arrives.

Bounded in time (about ``--seconds`` + 30 s). Run: ``.venv/bin/python
loadtests/bench_byte_budget.py [--seconds 60] [--silent 256] [--header-only 64] [--workers 2]``.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests import bystander
from loadtests.bystander import DIGITS
from loadtests.stack import Stack, free_port, rss_of, worker_pids
from tests.support.h2_grpc import INFER, H2Client

BODY_BYTES = 16 * 1024 * 1024  # what each silent connection declares (the default body cap)
REOPEN_S = 0.5  # an attacker's pause before it replaces what the gateway ended
SETTLE_S = 3.0  # the flood in place before the client is measured


async def _silent(port: int, stop: float, seen: Counter[str]) -> None:
    """One silent connection at a time, for as long as the flood lasts."""
    head = (
        b"POST /v2/models/%s/infer HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json"
        b"\r\ncontent-length: %d\r\n\r\n" % (DIGITS.encode(), BODY_BYTES)
    )
    while time.monotonic() < stop:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            seen["rest connect failed"] += 1
            await asyncio.sleep(REOPEN_S)
            continue
        writer.write(head)
        seen["rest opened"] += 1
        try:
            answer = await asyncio.wait_for(reader.read(64), max(0.0, stop - time.monotonic()))
            seen[f"rest ended: {answer[:12].decode(errors='replace') or 'closed'}"] += 1
        except (TimeoutError, OSError):
            pass
        writer.close()
        await asyncio.sleep(REOPEN_S)


async def _header_only(port: int, calls: int, stop: float, seen: Counter[str]) -> None:
    """``calls`` gRPC calls that send only their HEADERS, each replaced when it ends."""
    while time.monotonic() < stop:
        async with H2Client("127.0.0.1", port) as client:
            sids = {client.call(INFER, end=False) for _ in range(calls)}
            seen["grpc opened"] += calls
            while time.monotonic() < stop and not client.closed.is_set():
                await asyncio.sleep(REOPEN_S)
                for sid in [s for s in sids if client.streams[s].done.is_set()]:
                    sids.discard(sid)
                    seen[f"grpc ended: {client.streams[sid].ended.code}"] += 1
                    sids.add(client.call(INFER, end=False))
                    seen["grpc opened"] += 1


async def _flood(port: int, grpc_port: int, silent: int, calls: int, seconds: float) -> str:
    stop = time.monotonic() + seconds
    seen: Counter[str] = Counter()
    tasks = [_silent(port, stop, seen) for _ in range(silent)]
    await asyncio.gather(*tasks, _header_only(grpc_port, calls, stop, seen))
    return ", ".join(f"{k} {v}" for k, v in sorted(seen.items()))


def _attacker(port: int, grpc_port: int, silent: int, calls: int, seconds: float, out: Any) -> None:
    out.put(uvloop.run(_flood(port, grpc_port, silent, calls, seconds)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the flood lasts")
    parser.add_argument("--silent", type=int, default=256, help="silent REST connections")
    parser.add_argument("--header-only", type=int, default=64, help="header-only gRPC calls")
    parser.add_argument("--concurrency", type=int, default=4, help="the client's connections")
    parser.add_argument("--workers", type=int, default=2, help="the gateway's data-plane workers")
    args = parser.parse_args(argv)
    with Stack() as stack:
        replica = stack.replica("digits", DIGITS, faults=False)
        grpc_port = free_port()
        config = {
            "server": {"grpc_port": grpc_port, "workers": args.workers},
            "pools": {"p": {"model": DIGITS, "replicas": [{"id": "r0", "url": replica.url}]}},
            "models": {DIGITS: {"pool": "p"}},
        }
        gateway = stack.gateway(config)
        port = int(gateway.url.rsplit(":", 1)[1])
        bystander.run(gateway.url, 3.0, args.concurrency)  # warm: connections, caches
        alone = bystander.run(gateway.url, 10.0, args.concurrency)
        workers = worker_pids(gateway.url)
        baseline = rss_of(workers), rss_of([gateway.pid])
        ctx = multiprocessing.get_context("spawn")
        out = ctx.Queue()
        flood = (port, grpc_port, args.silent, args.header_only, args.seconds)
        attacker = ctx.Process(target=_attacker, args=(*flood, out), daemon=True)
        attacker.start()
        time.sleep(SETTLE_S)
        flooded = bystander.run(gateway.url, args.seconds - SETTLE_S - 1.0, args.concurrency)
        peak = rss_of(workers), rss_of([gateway.pid])
        attacker.join(timeout=args.seconds + 30.0)
        seen = out.get(timeout=10.0) if attacker.exitcode == 0 else "attacker failed"
    print(
        f"{args.silent} silent REST connections declaring {BODY_BYTES >> 20} MiB and "
        f"{args.header_only} header-only gRPC calls for {args.seconds:g} s, default budget, "
        f"{args.workers} workers; "
        f"a client of one-row infers, {args.concurrency} connections, all on 127.0.0.1"
    )
    print(bystander.table(alone, flooded))
    print(
        f"workers' RSS: {baseline[0] >> 20} MiB before the flood, {peak[0] >> 20} MiB at its "
        f"end; control process: {baseline[1] >> 20} -> {peak[1] >> 20} MiB"
    )
    print(f"attacker: {seen}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
