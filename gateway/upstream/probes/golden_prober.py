"""Correctness probes: golden inputs sent to every replica, answers judged against the set.

Health probes prove a replica is alive, not that it is right: a replica with corrupted weights
answers fast and wrong. At a low rate, each pool with a golden set sends a few known rows to
each replica; a replica whose misses are implausible for a healthy model (see
`check_golden_answer`), or that refuses a golden input (any non-200: a known-good request),
``failures_to_quarantine`` times in a row is quarantined with the reason, like a failing one,
and released when its quarantine ends. A probe's answer is checked as a client's is
(`check_reply`: well-formed, its own id echoed): each probe has an id of its own, so another
request's late answer arriving on the probe's connection is the replica's failure, never
judged as the probe's labels. Each verdict is also told to ``verdicts`` (the correctness SLOs
of the models the pool serves, `gateway.control.audit_verdicts.AuditVerdicts.golden`).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from gateway.clock import Clock
from gateway.config.policies import GoldenProbeConfig
from gateway.errors import BadRequest, UpstreamError
from gateway.faults.judge import Fault, Refusal, Stage, judge
from gateway.upstream.probes.golden import (
    GoldenSet,
    check_golden_answer,
    golden_request,
    sample_rows,
)
from gateway.upstream.probes.prober import Prober
from gateway.upstream.registry import Pool, Registry
from gateway.upstream.replica import Replica
from gateway.upstream.transport.base import Transport
from gateway.v2.codec import decode_outputs
from gateway.v2.reply import check_reply, error_text
from gateway.v2.request import HEADER_LENGTH

log = logging.getLogger(__name__)
PROBE_TIMEOUT_S = 2.0
_probe_ids = itertools.count(1)


class GoldenProber(Prober):
    def __init__(
        self,
        registry: Registry,
        transport: Transport,
        clock: Clock,
        rng: random.Random,
        verdicts: Callable[[str, bool], None] | None = None,
    ) -> None:
        """``verdicts``: told each verdict ``(pool, passed)``, for the correctness SLOs."""
        super().__init__(registry, transport, clock, rng)
        self._verdicts = verdicts

    def loops(self) -> list[tuple[str, Coroutine[Any, Any, None]]]:
        return [
            (f"golden:{pool.name}", self._loop(pool, config, GoldenSet.read(Path(config.file))))
            for pool in self._registry.pools.values()
            if (config := pool.config.golden) is not None
        ]

    async def _loop(self, pool: Pool, config: GoldenProbeConfig, golden: GoldenSet) -> None:
        while True:
            await self._clock.sleep(config.interval_s * (0.8 + 0.4 * self._rng.random()))
            await asyncio.gather(*(self.probe(pool, r, config, golden) for r in pool.replicas))

    async def probe(
        self, pool: Pool, replica: Replica, config: GoldenProbeConfig, golden: GoldenSet
    ) -> bool | None:
        """One probe; True/False is the verdict, None when the replica did not answer."""
        if replica.healthy is False:
            # the health prober speaks for a replica that is down
            return None
        rows = sample_rows(golden, config.rows, self._rng)
        probe_id = f"golden-probe-{next(_probe_ids)}"
        request = golden_request(
            golden,
            rows,
            input_name=pool.dialect.mapping.pool_input(config.input),
            request_id=probe_id,
        )
        try:
            response = await self._transport.request(
                replica.endpoint,
                "POST",
                pool.model_path("/infer"),
                body=request.body,
                headers={"content-type": "application/json"},
                timeout=PROBE_TIMEOUT_S,
            )
        except UpstreamError:
            # unreachable or hung: the health prober and live traffic judge that
            return None
        if response.status != 200:
            # a known-good input refused: the judge blames the replica
            refusal = Refusal(replica.id, pool.name, response.status)
            passed = judge(Stage.GOLDEN, [refusal]).fault is not Fault.REPLICAS
            reason = f"golden probe answered {response.status}: {error_text(response.body)}"
            return self._judged(pool, replica, config, passed, reason)
        length = response.headers.get(HEADER_LENGTH)
        problem = check_reply(response.body, length, probe_id, echoes_id=pool.config.echoes_id)
        if problem is not None:
            # out of step: what follows on the connection is no one's
            response.discard()
            return self._judged(pool, replica, config, False, f"golden probe: {problem}")
        try:
            raw = decode_outputs(response.body, length)
            # judged in the client's names
            outputs = pool.dialect.client_outputs(raw)
        except BadRequest as exc:
            reason = f"golden probe: the answer is not a V2 reply: {exc.message}"
            return self._judged(pool, replica, config, False, reason)
        minimum = config.min_accuracy if config.min_accuracy is not None else golden.min_accuracy
        verdict = check_golden_answer(
            golden.labels,
            outputs,
            rows,
            min_accuracy=minimum,
            label_output=config.label_output,
            scores_output=config.scores_output,
        )
        return self._judged(pool, replica, config, verdict.passed, verdict.reason)

    def _judged(
        self, pool: Pool, replica: Replica, config: GoldenProbeConfig, passed: bool, reason: str
    ) -> bool:
        if self._verdicts is not None:
            self._verdicts(pool.name, passed)
        if passed:
            replica.golden_passed(reason)
            return True
        if replica.golden_failed(reason) >= config.failures_to_quarantine:
            self._registry.quarantine(replica, config.quarantine_s, reason, "golden_probe")
        return False
