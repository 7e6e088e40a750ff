"""What sampling accelerators costs the gateway: 32 replicas at 10 Hz, and a request beside it.

Why: the accelerator rules (docs/hardware.md) read every replica's GPU up to 10 times a second
on the gateway's event loop; that must stay a small share of a core and must not delay
requests. One helper process serves 32 replica stand-ins (a raw asyncio server per port: a
replica's DCGM page, or a small infer answer), whose temperature and power change every
``--change-s`` (0.1: a replica sampling NVML at 10 Hz, every page new; 0.5: the default 2 Hz).
This process runs the real `AcceleratorSampler` (real `Gateway` state, `Http1Transport`) over
them for ``--seconds`` and reports its CPU time as a share of one core, over an idle baseline
of the same length, as user time (the gateway's own work) and system time (the kernel's: on
loopback a send also runs the receiving side's TCP stack); beside it, a control prober sends
one small POST every 20 ms to a stand-in and records its latency with the sampler off and on,
and the loop's lateness. ``--bare`` runs, instead of the sampler, loops that only GET the same
pages at the same rate: the floor any sampler over HTTP pays, to tell the transport's share
from the sampler's own. ``--gpus-per-node N`` serves the replicas' GPUs from dcgm-exporter
stand-ins instead, N GPUs a page (the gateway names each replica's exporter and UUID), as a
cluster with one exporter per node looks: one GET a node for all of its GPUs' replicas.

    .venv/bin/python loadtests/bench_accelerator.py [--replicas 32] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere in the repo

from gateway.accelerator.sampler import AcceleratorSampler
from gateway.config import parse_config
from gateway.config.endpoint import Endpoint
from gateway.control.runtime import Gateway
from gateway.errors import UpstreamError
from gateway.upstream.transport.http1 import Http1Transport
from v2proto.dcgm import FIELDS

UUID = "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"
INFER = b'{"id":"1","model_name":"m","outputs":[{"name":"label","datatype":"INT64",' + (
    b'"shape":[1],"data":[3]}]}'
)
PROBE_S = 0.02


def uuid_of(gpu: int) -> str:
    return f"{UUID[:-4]}{gpu:04d}"


def page(now: float, change_s: float, gpus: int = 1) -> bytes:
    """A DCGM page (HELP, TYPE, one sample a field and GPU): a replica's own (one GPU) or a
    node exporter's; temperature (60-61 °C, never near slowdown) and power move."""
    step = int(now / change_s)
    values = {
        "temperature_c": 60 + step % 2,
        "power_w": 300 + step % 97,
        "slowdown_c": 90,
        "shutdown_c": 95,
    }
    lines = []
    for f in FIELDS:
        lines += [f"# HELP {f.name} {f.help}", f"# TYPE {f.name} gauge"]
        lines += [
            f'{f.name}{{gpu="{g}",UUID="{uuid_of(g) if gpus > 1 else UUID}"}} '
            f"{float(values.get(f.attr, 0))}"
            for g in range(gpus)
        ]
    return ("\n".join(lines) + "\n").encode()


class StandIn(asyncio.Protocol):
    change_s = 0.1
    gpus = 1

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            head, _, rest = self.buffer.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(rest) < length:
                return
            self.buffer = rest[length:]
            post = head.startswith(b"POST")
            body = INFER if post else page(time.time(), self.change_s, self.gpus)
            kind = b"application/json" if post else b"text/plain"
            self.transport.write(  # type: ignore[attr-defined]
                b"HTTP/1.1 200 OK\r\ncontent-type: "
                + kind
                + b"\r\ncontent-length: "
                + str(len(body)).encode()
                + b"\r\n\r\n"
                + body
            )


async def serve(count: int, change_s: float, gpus: int = 1) -> None:
    StandIn.change_s, StandIn.gpus = change_s, gpus
    loop = asyncio.get_running_loop()
    servers = [await loop.create_server(StandIn, "127.0.0.1", 0) for _ in range(count + 1)]
    ports = [s.sockets[0].getsockname()[1] for s in servers]
    print(json.dumps(ports), flush=True)
    await asyncio.Event().wait()


def config(ports: list[int], interval_s: float, replicas: int, gpus: int = 1) -> Gateway:
    """``replicas`` replicas; with ``gpus`` > 1, ``ports`` are node exporters, ``gpus`` each."""
    accelerator: dict[str, object] = {"interval_s": interval_s}
    if gpus > 1:
        accelerator["exporters"] = {
            f"r{i}": {"url": f"http://127.0.0.1:{ports[i // gpus]}", "uuid": uuid_of(i % gpus)}
            for i in range(replicas)
        }
        ports = [ports[0]] * replicas  # the replicas' own ports are not read
    doc = {
        "pools": {
            "p": {
                "model": "m",
                "accelerator": accelerator,
                "replicas": [
                    {"id": f"r{i}", "url": f"http://127.0.0.1:{port}"}
                    for i, port in enumerate(ports)
                ],
            }
        },
        "models": {"m": {"pool": "p"}},
    }
    return Gateway(parse_config(doc))


async def control(port: int, seconds: float) -> tuple[list[float], list[float]]:
    """A POST every PROBE_S for ``seconds``: (latencies, loop lateness), in seconds."""
    transport = Http1Transport()
    endpoint = Endpoint("127.0.0.1", port)
    latencies, late = [], []
    end = time.perf_counter() + seconds
    try:
        while time.perf_counter() < end:
            started = time.perf_counter()
            await transport.request(endpoint, "POST", "/infer", body=b"{}", timeout=2.0)
            latencies.append(time.perf_counter() - started)
            due = time.perf_counter() + PROBE_S
            await asyncio.sleep(PROBE_S)
            late.append(time.perf_counter() - due)
    finally:
        await transport.aclose()
    return latencies, late


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))] * 1000


def cpu() -> tuple[float, float]:
    """This process's (user, system) CPU seconds so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


async def fetch_only(
    transport: Http1Transport, port: int, interval_s: float, counts: list[int]
) -> None:
    """What `AcceleratorSampler` does per sample, minus reading and judging: the GET alone."""
    endpoint, rng = Endpoint("127.0.0.1", port), random.Random(port)
    while True:
        with contextlib.suppress(UpstreamError):  # as the sampler: a timeout is one sample lost
            await transport.request(endpoint, "GET", "/metrics", timeout=interval_s)
            counts[0] += 1
        await asyncio.sleep(interval_s * (1 + 0.1 * (2 * rng.random() - 1)))


async def sleep_only(interval_s: float, counts: list[int], seed: int) -> None:
    """A loop that wakes as often as a sampler's and does nothing: the event loop's floor."""
    rng = random.Random(seed)
    while True:
        await asyncio.sleep(interval_s * (1 + 0.1 * (2 * rng.random() - 1)))
        counts[0] += 1


async def measure(
    ports: list[int],
    seconds: float,
    interval_s: float,
    mode: str = "sampler",
    replicas: int = 32,
    gpus: int = 1,
) -> dict[str, float]:
    """``mode``: "sampler", "bare" (the GETs alone) or "sleep" (the wake-ups alone)."""
    sources, probe_port = ports[:-1], ports[-1]
    user0, sys0 = cpu()
    off = await control(probe_port, seconds)
    user1, sys1 = cpu()
    idle_user, idle_sys = user1 - user0, sys1 - sys0
    gateway = config(sources, interval_s, replicas, gpus)
    transport = Http1Transport()
    sampler = AcceleratorSampler(
        gateway.registry,
        transport,
        gateway.clock,
        random.Random(1),
        gateway.shared,
        lambda pool: False,
    )
    counts = [0]
    bare = mode != "sampler"
    if mode == "bare":
        loops = [asyncio.create_task(fetch_only(transport, p, interval_s, counts)) for p in sources]
    elif mode == "sleep":
        loops = [asyncio.create_task(sleep_only(interval_s, counts, i)) for i in sources]
    else:
        sampler.start()
    await asyncio.sleep(2 * interval_s)  # connections open, first pages parsed
    before = counts[0] if bare else sum(sampler.samples.values())
    user0, sys0 = cpu()
    on = await control(probe_port, seconds)
    user1, sys1 = cpu()
    user, system = user1 - user0 - idle_user, sys1 - sys0 - idle_sys
    taken = (counts[0] if bare else sum(sampler.samples.values())) - before
    if bare:
        for task in loops:
            task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
    else:
        await sampler.stop()
    await transport.aclose()
    return {
        "samples_per_s": taken / seconds,
        "core_share_pct": (user + system) / seconds * 100,
        "user_share_pct": user / seconds * 100,  # the gateway's own work (Python)
        "system_share_pct": system / seconds * 100,  # the kernel's (loopback TCP, both ends)
        "us_per_sample": (user + system) / max(taken, 1) * 1e6,
        "user_us_per_sample": user / max(taken, 1) * 1e6,
        "probe_p50_off_ms": pct(off[0], 0.5),
        "probe_p99_off_ms": pct(off[0], 0.99),
        "probe_p50_on_ms": pct(on[0], 0.5),
        "probe_p99_on_ms": pct(on[0], 0.99),
        "loop_late_p99_off_ms": pct(off[1], 0.99),
        "loop_late_p99_on_ms": pct(on[1], 0.99),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--replicas", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--interval", type=float, default=0.1, help="sampling interval (s)")
    parser.add_argument("--change-s", type=float, default=0.1, help="how often pages change")
    parser.add_argument("--bare", action="store_true", help="only the GETs, no sampler")
    parser.add_argument(
        "--sleep-only", action="store_true", help="only the wake-ups, as the sampler's loops"
    )
    parser.add_argument(
        "--gpus-per-node", type=int, default=1, help="read node exporters, this many GPUs each"
    )
    parser.add_argument("--profile", action="store_true", help="print a cProfile of the run")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    gpus = max(1, args.gpus_per_node)
    if args.serve:
        asyncio.run(serve(args.replicas, args.change_s, gpus))
        return 0
    sources = -(-args.replicas // gpus)  # a port per replica, or per node exporter
    helper = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--serve",
            "--replicas",
            str(sources),
            "--change-s",
            str(args.change_s),
            "--gpus-per-node",
            str(gpus),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    mode = "sleep" if args.sleep_only else "bare" if args.bare else "sampler"
    run = functools.partial(
        measure,
        seconds=args.seconds,
        interval_s=args.interval,
        mode=mode,
        replicas=args.replicas,
        gpus=gpus,
    )
    try:
        assert helper.stdout is not None
        ports = json.loads(helper.stdout.readline())
        if args.profile:
            import cProfile
            import pstats

            profiler = cProfile.Profile(time.process_time)  # CPU, not a busy machine's waits
            result = profiler.runcall(uvloop.run, run(ports))
            pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        else:
            # on the gateway's own loop (uvloop): stdlib asyncio's selector loop costs more a GET
            result = uvloop.run(run(ports))
    finally:
        helper.terminate()
        helper.wait(timeout=10)
    what = {"bare": "GETs only (--bare)", "sleep": "wake-ups only (--sleep-only)"}.get(
        mode, "the sampler"
    )
    where = f"{sources} node exporters, {gpus} GPUs each" if gpus > 1 else "their own pages"
    print(
        f"{what}: {args.replicas} replicas ({where}) every {args.interval:g} s, pages "
        f"changing every {args.change_s:g} s, {args.seconds:g} s; "
        f"load {os.getloadavg()[0]:.1f}"
    )
    for key, value in result.items():
        print(f"  {key:24} {value:10.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
