"""Fallback layer: a verified small model answers, degraded, when the primary path cannot.

The primary path (single or vote) runs with the deadline minus the fallback's reserve; if it
has no admissible replica, exhausts its attempts, finds no quorum, or runs out of that time,
and the model's policy names that reason, the in-process fallback answers with
``x-degraded: <reason>`` and ``x-served-by: fallback/<model>``. A fallback that failed its
verification (checksum, golden set) never answers: the primary's error stands, as it does when
the fallback's signature refuses the request's tensors (`gateway.v2.fit`): the client's request
fits the model, so a 400 from a stand-in that speaks other names would blame the client.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any, Protocol

from gateway.call import Adjuster, Handler, InferAnswer, InferCall
from gateway.clock import Clock
from gateway.errors import (
    DeadlineExceeded,
    GatewayError,
    NoQuorum,
    NoReplicaAvailable,
    UpstreamError,
)
from gateway.telemetry.metrics import RequestMetrics
from gateway.v2.answer import encode_answer
from gateway.v2.codec import decode_inputs
from gateway.v2.dialect import Dialect
from gateway.v2.fit import FallbackMisfit
from gateway.v2.request import HEADER_LENGTH

log = logging.getLogger(__name__)


class FallbackRunner(Protocol):
    """What the layer needs of a fallback model (see `gateway.fallback`)."""

    @property
    def ok(self) -> bool: ...

    async def infer(self, inputs: Mapping[str, Any]) -> Mapping[str, Any]: ...


def fallback_reason(error: BaseException) -> str | None:
    """Why the primary path could not answer, in the policy's words (None: not ours to save)."""
    if isinstance(error, TimeoutError | DeadlineExceeded):
        return "deadline"
    if isinstance(error, NoQuorum):
        return "no_quorum"
    if isinstance(error, NoReplicaAvailable):
        return "no_replica"
    if isinstance(error, UpstreamError):
        return "exhausted"
    return None


class FallbackLayer:
    def __init__(
        self,
        fallbacks: Mapping[str, FallbackRunner],
        clock: Clock,
        metrics: RequestMetrics,
        adjust: Adjuster,
        inner: Handler,
    ) -> None:
        self._metrics = metrics
        self._adjust = adjust
        self._clock = clock
        self._fallbacks = fallbacks
        self._inner = inner

    def over(self, inner: Handler) -> FallbackLayer:
        """This layer above ``inner`` instead (a model's own path, assembled at load)."""
        return FallbackLayer(self._fallbacks, self._clock, self._metrics, self._adjust, inner)

    async def __call__(self, call: InferCall) -> InferAnswer:
        policy = call.model.fallback
        if policy is None:
            return await self._inner(call)
        margin = self._adjust(call.model_name).fallback_margin_factor
        primary_until = call.deadline.expires_at - margin * policy.reserve_ms / 1000
        try:
            if primary_until <= self._clock.now():
                raise DeadlineExceeded("no time left for the primary path")
            async with self._clock.timeout_at(primary_until):
                return await self._inner(call)
        except (TimeoutError, GatewayError) as error:
            reason = fallback_reason(error)
            runner = self._fallbacks.get(policy.model)
            if reason is None or reason not in policy.on or runner is None or not runner.ok:
                if isinstance(error, TimeoutError):
                    raise DeadlineExceeded("the primary path did not answer in time") from error
                raise
            try:
                return await self._answer(call, policy.model, runner, reason)
            except FallbackMisfit as misfit:
                # not the model's tensors: readiness says so
                if isinstance(error, TimeoutError):
                    raise DeadlineExceeded("the primary path did not answer in time") from misfit
                raise error from misfit

    async def _answer(
        self, call: InferCall, name: str, runner: FallbackRunner, reason: str
    ) -> InferAnswer:
        outputs = await fallback_outputs(call, runner)
        served = {"degraded": reason, "served_by": f"fallback/{name}"}
        reply = encode_answer(call, outputs, served)
        self._metrics.fallback(call.model_name, reason)
        return InferAnswer(
            status=200,
            body=reply.body,
            content_type=reply.content_type,
            header_length=None if reply.json_length is None else str(reply.json_length),
            served_by=f"fallback/{name}",
            attempts=call.attempts,
            degraded=reason,
        )


async def fallback_outputs(call: InferCall, runner: FallbackRunner) -> Mapping[str, Any]:
    """The fallback model's outputs for ``call``'s inputs, in the client's names (an answer
    of its own, or an audit's third opinion)."""
    assert call.model.fallback is not None, "only a model with a fallback gets here"
    # the fallback model's tensor names
    speaks = Dialect(call.model.fallback.tensors)
    body, header_length = call.body, call.upstream_headers.get(HEADER_LENGTH)
    # off the event loop: binary tensors become numpy views of the received buffers
    # (frombuffer, no copy), but a large JSON body's numbers take milliseconds to decode
    inputs = await asyncio.get_running_loop().run_in_executor(
        None, lambda: decode_inputs(body.joined(), header_length)
    )
    outputs = await runner.infer(speaks.pool_inputs(inputs))
    return speaks.client_outputs(outputs)
