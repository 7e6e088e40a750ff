"""The accelerator sampler: each replica's GPU health read off the request path, and
what the accelerator rules advise, carried out as the operators' own drain.

Only pools with ``accelerator:`` get loops, so a gateway without it runs nothing of this.
There is one loop per source: a replica's ``/metrics`` (its DCGM series only,
``?name[]=``), or a dcgm-exporter page named for one or more replicas, which is read once a
sample for all the replicas whose GPUs it reports (a node's exporter serves each of its GPUs'
replicas from one GET, not one GET each). A loop reads its source (GET) over the sampler's
own transport (`page_transport`), at most ``max_concurrent`` of a pool at once, each within
``timeout_s``, with jittered pauses, so the reads of a pool spread over the interval (at the
idle rate on a coarse grid whose steps several reads share: `IDLE_GRID_SHARE`): one tick
per pool reading every source together costs a GET less, but the burst of answers it brings
holds the event loop, and a request must not wait for a sample (docs/hardware.md has the
figures).
A source is read every ``idle_interval_s`` (1 Hz) while each of its replicas' readings is far
from every limit, and every ``interval_s`` (up to 10 Hz) once one is near a limit, drained or
unknown (`AcceleratorTracker.urgent`, `gateway.accelerator.need`): a fleet of cool GPUs
costs a GET per replica per second. The temperature and ECC counts a replica attaches to its
answers (its load report, `v2proto.load`) are taken between reads: an answer's report wakes
the replica's loop (`wake`: the control process's intake of its workers' batches calls it),
which judges them as a sample (at most one per ``interval_s`` unless an ECC count moved),
so an uncorrectable ECC error drains within a batch of the answer that said it.
A page is bounded in bytes and series and read (`read_page`) in a worker thread, so no
page, however large, holds the event loop; a page of at most ``INLINE_PAGE_BYTES`` (one
GPU's, as a replica serves its own) is read on the loop, where its parse costs about what
the hop to the thread would and holds the loop for well under a millisecond. Each device's
reading goes to the replica's `AcceleratorTracker`, whose hysteresis says when to drain or
restore. A loop is named
by the page's full URL (scheme, host, port, path prefix and path) within its pool: replicas
behind one ingress, on one host and port, each have their own.

Every loop is guarded: a page refused over a cap, a value no device can report (left out of
the reading: `gateway.policies.accelerator_values`) or an exception while a replica is judged
is counted, logged at most once a minute per source, replica or field, and skipped; the
next sample comes as usual, and the other replicas of the page are judged all the same.

What the tracker's advice asks for (a drain, a restore, a weight) is carried out by
`gateway.accelerator.drains.AcceleratorDrains`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import random
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gateway.accelerator.drains import AcceleratorDrains, Decider, MayEmpty
from gateway.accelerator.tracker import AcceleratorTracker
from gateway.clock import Clock, wait_first
from gateway.config.accelerator import AcceleratorConfig
from gateway.config.endpoint import Endpoint
from gateway.errors import UpstreamError
from gateway.telemetry.throttle import LogThrottle
from gateway.upstream.probes.accelerator_pages import (
    DeviceRead,
    PageCaps,
    over_cap,
    read_page,
    unchanged,
)
from gateway.upstream.probes.accelerator_readings import ReadingParser
from gateway.upstream.probes.prober import Prober
from gateway.upstream.registry import Pool, Registry
from gateway.upstream.replica import Replica
from gateway.upstream.transport.base import Transport
from v2proto.dcgm import BY_NAME, NAMES, Reading

log = logging.getLogger(__name__)
REPLICA_QUERY = "/metrics?" + "&".join(f"name[]={name}" for name in NAMES)
# the loop's name: its pool and its page's full URL, read once a sample
SourceKey = str
# a refused page, a bad value or a caught error: one line a minute per kind
LOG_EVERY_S = 60.0
# A refused page is read again after a pause that doubles up to this: a page over a cap does
# not shrink in a tenth of a second, and each read of one costs up to its cap and a connection.
REFUSED_PAUSE_MAX_S = 30.0
# a page this small is read on the loop: one GPU's DCGM page with its HELP and TYPE lines
INLINE_PAGE_BYTES = 4096
# At the idle rate a loop's next read is put off to the next step of a grid this share of
# ``idle_interval_s`` apart (a tenth: 0.1 s by default), the same grid for every loop, so one
# wake-up of the event loop serves the few reads due in one step instead of one each. The
# wake-ups were about half of an idle sample's cost (docs/hardware.md). A read due
# soon (near a limit, drained, unknown) is never put off.
IDLE_GRID_SHARE = 0.1


class Source:
    """Where one replica's accelerator is read, and the parser that remembers its pages.
    ``key`` names the page: replicas whose GPUs one exporter reports share it."""

    def __init__(self, pool: Pool, replica: Replica, config: AcceleratorConfig) -> None:
        target = config.exporters.get(replica.id)
        if target is not None:
            self.endpoint, self.path = Endpoint.parse(target.url), target.path
            self.parser = ReadingParser(target.uuid)
        else:
            self.endpoint, self.path = replica.endpoint, REPLICA_QUERY
            self.parser = ReadingParser(None)
        self.key: SourceKey = f"accelerator:{pool.name}:{self.endpoint.base_url}{self.path}"
        self.unreadable = (
            "a grpc:// replica's /metrics is not on its gRPC port: name an exporter for it"
            if self.endpoint.is_grpc
            else None
        )


class AcceleratorSampler(Prober):
    def __init__(
        self,
        registry: Registry,
        transport: Transport,
        clock: Clock,
        rng: random.Random,
        shared: Decider,
        may_empty: MayEmpty,
    ) -> None:
        super().__init__(registry, transport, clock, rng)
        self.pools = {n: p for n, p in registry.pools.items() if p.config.accelerator}
        self._limits = {
            n: asyncio.Semaphore(self._config(p).max_concurrent) for n, p in self.pools.items()
        }
        self.states: dict[str, AcceleratorTracker] = {}
        self._sources: dict[str, Source] = {}
        self._drains = AcceleratorDrains(shared, may_empty, clock, self.states)
        # (pool, replica, signal) -> count
        self.drains = self._drains.drains
        # replica id -> why a drain it asked for waits
        self.held_back = self._drains.held_back
        # (pool, ok | error | refused) -> count
        self.samples: dict[tuple[str, str], int] = {}
        # (pool, replica, field) -> count
        self.bad_values: dict[tuple[str, str, str], int] = {}
        # pool -> exceptions caught in its loops and skipped
        self.errors: dict[str, int] = {}
        # the replicas each source reports
        self._members: dict[SourceKey, list[Replica]] = {}
        self._lines = LogThrottle(clock, LOG_EVERY_S)
        # one thread: pages read off the loop
        self._parsing: ThreadPoolExecutor | None = None
        # a resting loop's alarm
        self._wakes: dict[SourceKey, asyncio.Future[None]] = {}
        # replica id -> (when, values) of the answers' readings last taken
        self._inband: dict[str, tuple[float, tuple[tuple[str, float], ...]]] = {}

    @staticmethod
    def _config(pool: Pool) -> AcceleratorConfig:
        config = pool.config.accelerator
        # pools are chosen by having one
        if config is None:
            raise ValueError(f"pool {pool.name} has no accelerator section")
        return config

    def loops(self) -> list[tuple[str, Coroutine[Any, Any, None]]]:
        loops = []
        for pool in self.pools.values():
            members = (*pool.replicas, *pool.draining)
            unknown = set(self._config(pool).exporters) - {r.id for r in members}
            if unknown and pool.config.discovery is None:
                log.warning(
                    "pool %s: accelerator.exporters names no replica of it: %s",
                    pool.name,
                    ", ".join(sorted(unknown)),
                )
            for replica in members:
                key = self._source(pool, replica).key
                readers = self._members.setdefault(key, [])
                if not readers:
                    loops.append((key, self._loop(pool, key)))
                readers.append(replica)
        return loops

    def start(self) -> None:
        super().start()
        self._registry.watch(self)

    async def stop(self) -> None:
        self._registry.unwatch(self)
        await super().stop()
        self._members.clear()
        if self._parsing is not None:
            self._parsing.shutdown(wait=False, cancel_futures=True)
            self._parsing = None
        # the sampler's own (`page_transport`)
        await self._transport.aclose()

    def joined(self, pool: Pool, replica: Replica) -> None:
        if pool.name not in self.pools:
            return
        key = self._source(pool, replica).key
        readers = self._members.setdefault(key, [])
        if not readers:
            self.start_loop(key, self._loop(pool, key))
        if replica not in readers:
            readers.append(replica)

    def left(self, pool: Pool, replica: Replica) -> None:
        source = self._sources.pop(replica.id, None)
        self.states.pop(replica.id, None)
        self._inband.pop(replica.id, None)
        for count in [c for c in self.bad_values if c[1] == replica.id]:
            del self.bad_values[count]
        if source is None:
            return
        readers = self._members.get(source.key, [])
        if replica in readers:
            readers.remove(replica)
        if not readers:
            self._members.pop(source.key, None)
            self.stop_loop(source.key)
            self._transport.forget(source.endpoint)

    async def _loop(self, pool: Pool, key: SourceKey) -> None:
        config = self._config(pool)
        # spread the loops
        await self._clock.sleep(config.interval_s * self._rng.random())
        # in a row: the pause doubles with each
        refusals = 0
        # when the source is read next
        due = -math.inf
        while True:
            readers = list(self._members.get(key) or ())
            if readers:
                try:
                    await self._take_inband(pool, readers)
                    if self._clock.now() >= due:
                        refused = await self._sample_source(pool, readers)
                        refusals = min(refusals + 1, 16) if refused else 0
                # a bug must not end sampling: counted, logged, skipped
                except Exception:
                    self._caught(pool, key)
                now = self._clock.now()
                fast = any(self._urgent(replica, now) for replica in readers)
                if now >= due or (fast and due > now + config.interval_s):
                    jitter = 1.0 + config.jitter * (2 * self._rng.random() - 1)
                    base = config.interval_s if fast else config.idle_interval_s
                    due = now + min(base * 2**refusals, REFUSED_PAUSE_MAX_S) * jitter
                    if not fast and not refusals:
                        # at the idle rate, the loops wake together: see IDLE_GRID_SHARE
                        grid = config.idle_interval_s * IDLE_GRID_SHARE
                        due = math.ceil(due / grid) * grid
            else:
                due = self._clock.now() + config.interval_s
            await self._rest(key, due - self._clock.now())

    def _urgent(self, replica: Replica, now: float) -> bool:
        state = self.states.get(replica.id)
        return state is None or state.urgent(now)

    async def _rest(self, key: SourceKey, pause: float) -> None:
        """Sleeps ``pause``, or less if an answer reports one of the source's replicas."""
        wake = self._wakes[key] = asyncio.get_running_loop().create_future()
        sleeper = asyncio.ensure_future(self._clock.sleep(max(0.0, pause)))
        try:
            await wait_first(self._clock, (sleeper, wake), None)
        finally:
            sleeper.cancel()
            if self._wakes.get(key) is wake:
                del self._wakes[key]

    def wake(self, replica_id: str) -> None:
        """An answer reported ``replica_id``'s accelerator: its loop takes it now."""
        source = self._sources.get(replica_id)
        wake = None if source is None else self._wakes.get(source.key)
        if wake is not None and not wake.done():
            wake.set_result(None)

    async def _take_inband(self, pool: Pool, replicas: list[Replica]) -> None:
        """The readings the replicas' answers reported since they were last taken, judged as
        samples: at most one per ``interval_s``, unless an ECC count moved."""
        interval = self._config(pool).interval_s
        for replica in replicas:
            load = replica.load
            if load is None or not load.accelerator:
                continue
            at = replica.load_at
            last_at, last = self._inband.get(replica.id, (-math.inf, ()))
            if at <= last_at or (at - last_at < interval and _same_ecc(load.accelerator, last)):
                continue
            state = self.states.get(replica.id)
            if state is None:
                state = self.states[replica.id] = AcceleratorTracker(self._config(pool))
            if state.samples and at <= state.samples[-1].at:
                # a read of the page came after it
                continue
            self._inband[replica.id] = (at, load.accelerator)
            advice = state.observe(at, _overlaid(state.reading, load.accelerator))
            count = (pool.name, "answer")
            self.samples[count] = self.samples.get(count, 0) + 1
            await self._drains.act(pool, replica, state, advice)

    def _source(self, pool: Pool, replica: Replica) -> Source:
        source = self._sources.get(replica.id)
        if source is None:
            source = self._sources[replica.id] = Source(pool, replica, self._config(pool))
        return source

    async def sample(self, pool: Pool, replica: Replica) -> None:
        """One sample of ``replica``'s accelerator, judged and acted on."""
        await self._sample_source(pool, [replica])

    async def _sample_source(self, pool: Pool, replicas: list[Replica]) -> bool:
        """One read of the source ``replicas`` share, each of them judged and acted on: one
        replica's trouble (a bad value, an exception) never keeps the others unjudged.
        True: the page was refused for every one of them (over a cap)."""
        config = self._config(pool)
        source = self._source(pool, replicas[0])
        async with self._limits[pool.name]:
            page = await self._fetch(source, config)
        now = self._clock.now()
        # no page: the same for every replica of it
        if isinstance(page, DeviceRead):
            reads = [page] * len(replicas)
        else:
            parsers = [self._source(pool, replica).parser for replica in replicas]
            reads = await self._read(page, parsers, PageCaps.of(config))
        refused = next((read.refused for read in reads if read.refused is not None), None)
        if refused is not None and self._lines.allow(("refused", source.key)) is not None:
            log.warning("%s: page refused: %s", source.key, refused)
        for replica, read in zip(replicas, reads, strict=True):
            try:
                await self._observe(pool, replica, now, read)
            # one replica's trouble is not the page's
            except Exception:
                self._caught(pool, f"{source.key} ({replica.id})")
        return all(read.refused is not None for read in reads)

    async def _read(
        self, page: bytes, parsers: list[ReadingParser], caps: PageCaps
    ) -> list[DeviceRead]:
        """``page`` read for each parser: in the worker thread, unless it is small (one
        GPU's) or every parser read this very page last time (a comparison each), then here."""
        if len(page) <= INLINE_PAGE_BYTES or unchanged(page, parsers):
            return read_page(page, parsers, caps)
        if self._parsing is None:
            self._parsing = ThreadPoolExecutor(1, thread_name_prefix="accelerator-pages")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._parsing, read_page, page, parsers, caps)

    async def _observe(self, pool: Pool, replica: Replica, now: float, read: DeviceRead) -> None:
        state = self.states.get(replica.id)
        if state is None:
            state = self.states[replica.id] = AcceleratorTracker(self._config(pool))
        if read.failed is not None:
            result = "error"
            advice = state.failed(now, read.failed)
        elif read.refused is not None:
            result = "refused"
            advice = state.failed(now, f"page refused: {read.refused}")
        else:
            result = "ok"
            for field in read.bad:
                self._bad(pool, replica, field)
            advice = state.observe(now, read.reading, read.changed)
        count = (pool.name, result)
        self.samples[count] = self.samples.get(count, 0) + 1
        await self._drains.act(pool, replica, state, advice)

    def _bad(self, pool: Pool, replica: Replica, field: str) -> None:
        count = (pool.name, replica.id, field)
        self.bad_values[count] = self.bad_values.get(count, 0) + 1
        held = self._lines.allow(("bad", replica.id, field))
        if held is not None:
            text = "replica %s: %s left out, a value no device reads (NaN, Inf, out of range)%s"
            log.warning(text, replica.id, field, _since(held))

    def _caught(self, pool: Pool, where: str) -> None:
        self.errors[pool.name] = self.errors.get(pool.name, 0) + 1
        held = self._lines.allow(("caught", where))
        if held is not None:
            log.exception("%s: sample failed, skipped%s", where, _since(held))

    async def _fetch(self, source: Source, config: AcceleratorConfig) -> bytes | DeviceRead:
        """The page, or what every replica of it reads without one (failed, or refused)."""
        if source.unreadable is not None:
            return DeviceRead(None, failed=source.unreadable)
        try:
            response = await self._transport.request(
                source.endpoint, "GET", source.path, timeout=config.sample_timeout_s
            )
        except UpstreamError as exc:
            # the read stopped at the transport's cap (the largest pool's)
            if over_cap(exc):
                return DeviceRead(None, refused=f"over max_page_bytes={config.max_page_bytes}")
            return DeviceRead(None, failed=exc.message)
        if response.status != 200:
            return DeviceRead(None, failed=f"metrics answered {response.status}")
        return response.body

    def now(self) -> float:
        return self._clock.now()

    def snapshot(self) -> dict[str, Any]:
        """For ``/admin/state``: every sampled replica's accelerator, by pool."""
        now = self._clock.now()
        doc: dict[str, Any] = {}
        for name, pool in self.pools.items():
            config = self._config(pool)
            replicas = {}
            for replica in (*pool.replicas, *pool.draining):
                state = self.states.get(replica.id)
                if state is not None:
                    held_back = self.held_back.get(replica.id)
                    replicas[replica.id] = {**state.snapshot(now), "held_back": held_back}
            doc[name] = {
                "interval_s": config.interval_s,
                "idle_interval_s": config.idle_interval_s,
                "lead_s": config.lead_s,
                "healthy_for_s": config.healthy_for_s,
                "replicas": replicas,
            }
        return doc


def _same_ecc(now: tuple[tuple[str, float], ...], then: tuple[tuple[str, float], ...]) -> bool:
    """Whether two answers' readings have the same ECC counts (or neither has any)."""
    return {n: v for n, v in now if "ECC" in n} == {n: v for n, v in then if "ECC" in n}


def _overlaid(reading: Reading | None, values: tuple[tuple[str, float], ...]) -> Reading:
    """The device's last reading with an answer's values (DCGM name, value) over it."""
    base = reading if reading is not None else Reading("", "")
    fields: dict[str, Any] = {BY_NAME[name].attr: value for name, value in values}
    return dataclasses.replace(base, **fields)


def _since(held: int) -> str:
    return f" ({held} more since the last line)" if held else ""
