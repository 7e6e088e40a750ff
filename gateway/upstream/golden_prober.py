"""Correctness probes: golden inputs sent to every replica, answers judged against the set.

Health probes prove a replica is alive, not that it is right: a replica with corrupted weights
answers fast and wrong. At a low rate, each pool with a golden set sends a few known rows to
each replica; a replica whose misses are implausible for a healthy model (see
`check_golden_answer`) ``failures_to_quarantine`` times in a row is quarantined with the
reason, like a failing one, and released when its quarantine ends.
"""

from __future__ import annotations

import asyncio
import logging
import random
from pathlib import Path

from gateway.clock import Clock
from gateway.config.policies import GoldenProbeConfig
from gateway.errors import BadRequest, UpstreamError
from gateway.upstream.golden import GoldenSet, check_golden_answer, golden_request, sample_rows
from gateway.upstream.registry import Pool, Registry
from gateway.upstream.replica import Replica
from gateway.upstream.transport import Transport
from gateway.v2.codec import decode_outputs

log = logging.getLogger(__name__)
PROBE_TIMEOUT_S = 2.0


class GoldenProber:
    def __init__(
        self, registry: Registry, transport: Transport, clock: Clock, rng: random.Random
    ) -> None:
        self._registry = registry
        self._transport = transport
        self._clock = clock
        self._rng = rng
        self._tasks: list[asyncio.Task[None]] = []
        self.probes = 0

    def start(self) -> None:
        for pool in self._registry.pools.values():
            if pool.config.golden is not None:
                golden = GoldenSet.read(Path(pool.config.golden.file))
                task = asyncio.create_task(self._loop(pool, pool.config.golden, golden))
                self._tasks.append(task)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    async def _loop(self, pool: Pool, config: GoldenProbeConfig, golden: GoldenSet) -> None:
        while True:
            await self._clock.sleep(config.interval_s * (0.8 + 0.4 * self._rng.random()))
            await asyncio.gather(*(self.probe(pool, r, config, golden) for r in pool.replicas))

    async def probe(
        self, pool: Pool, replica: Replica, config: GoldenProbeConfig, golden: GoldenSet
    ) -> bool | None:
        """One probe; True/False is the verdict, None when the replica did not answer."""
        if replica.healthy is False:
            return None  # the health prober speaks for a replica that is down
        rows = sample_rows(golden, config.rows, self._rng)
        request = golden_request(golden, rows)
        self.probes += 1
        try:
            response = await self._transport.request(
                replica.endpoint,
                "POST",
                pool.model_path("/infer"),
                body=request.body,
                headers={"content-type": "application/json"},
                timeout=PROBE_TIMEOUT_S,
            )
            if response.status != 200:
                return None
            outputs = decode_outputs(response.body, response.headers.get(HEADER))
        except (UpstreamError, BadRequest):
            return None
        minimum = config.min_accuracy if config.min_accuracy is not None else golden.min_accuracy
        verdict = check_golden_answer(golden.labels, outputs, rows, min_accuracy=minimum)
        replica.golden_last = verdict.reason
        if verdict.passed:
            replica.golden_failures = 0
            return True
        replica.golden_failures += 1
        if replica.golden_failures >= config.failures_to_quarantine:
            self._registry.quarantine(replica, config.quarantine_s, verdict.reason, "golden_probe")
        return False


HEADER = "inference-header-content-length"
