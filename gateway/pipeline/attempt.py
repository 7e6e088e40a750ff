"""Attempt layer: one upstream exchange with the `Attempt`'s replica, classified exactly once.

It owns the per-try timeout. The exchange (`_exchange`) sends, classifies the reply once
(`_classify_reply`), translates a pool's dialect, and hands every `Outcome` to the reactions
(`gateway.pipeline.reactions`: ledger, replica counts, breaker, outlier detector, latency
window, metrics) however it ended. Failures leave as an `UpstreamError` carrying their
`Outcome` for the layers above (`_refused`). A 200 counts only if it is a V2 reply to this very
request (`check_reply`: well-formed, the attempt's ``id`` echoed); an error answer the fault
judge disputes (`gateway.faults.judge.disputed`: 4xx, 500, 501) is a `Dispute` whose verdict
waits for evidence (`gateway.upstream.fault_actions`), recorded with the digest of its input
(in a pool of one) in the pool's `FaultRecord`; every other failure counts at once. A reply
refused as a protocol error is discarded (`Reply.discard`): its connection closes,
so the refused request's real answer, sent late, is never read as another request's.

Speculative tries: while a retry is still possible (`RetryPolicy.possible`, the rules the retry
layer applies), the layer waits only the learned per-try timeout (`try_timeout`, on the injected
clock), then hands the request to the retry layer as SLOW, but does *not* cancel the exchange:
it finishes in the background within the request's deadline and is classified by how it really
ended. A late answer makes the replica slow (its EWMA and outstanding count steer traffic away)
but not failed; a replica that never answers times out at the deadline and is ejected. So a
hang costs each client one short try, and a slow but healthy replica is kept, which a fixed
proxy read timeout cannot do both of. Those background exchanges are the request's all the same:
when its client leaves, the admission layer stops them (`stop`; `gateway.cancel`).

In a ``load_aware`` pool, an answer's load report (``endpoint-load-metrics``: one header
look-up, read only when present, `gateway.policies.load_report`) becomes the replica's
reading as the answer arrives, for the balancer's next pick.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Awaitable, Coroutine
from typing import Any

from gateway.call import Attempt, InferAnswer, InferCall, Ledger, Leg
from gateway.cancel import cancel_all
from gateway.clock import Clock, wait_first
from gateway.errors import (
    BadRequest,
    Overloaded,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamStatusError,
    UpstreamTimeout,
)
from gateway.faults.classify import classify_error, classify_status
from gateway.faults.judge import NONFINITE_STATUS, disputed, input_is_evidence
from gateway.outcome import Outcome, OutcomeKind
from gateway.pipeline.reactions import Reactions
from gateway.policies.load_report import LoadReports
from gateway.redact import printable
from gateway.retry.policy import RetryPolicy
from gateway.retry.try_timeout import try_timeout
from gateway.telemetry.metrics import RequestMetrics
from gateway.upstream.fault_actions import Dispute
from gateway.upstream.registry import Pool
from gateway.upstream.replica import Replica
from gateway.upstream.transport.base import Reply, Transport
from gateway.v2.answer import encode_answer
from gateway.v2.codec import EncodedBody, decode_outputs
from gateway.v2.dialect import Dialect
from gateway.v2.input_digest import OFF_LOOP_BYTES, input_digest
from gateway.v2.reply import check_reply, error_text, overflowed_output, with_reply_id
from gateway.v2.request import HEADER_LENGTH
from v2proto.load import HEADER as LOAD_HEADER
from v2proto.tensors import nonfinite_message

MIN_TRY_TIMEOUT_S = 0.001
# What a client is told of a reply not finite for its input (the output's name is the
# replica's to write: it stays in the detail)
NONFINITE_NOTE = "an output is not finite for this input: inputs this large overflow the model"
_SUCCESS = OutcomeKind.SUCCESS


class AttemptLayer:
    def __init__(
        self,
        transport: Transport,
        retry: RetryPolicy,
        clock: Clock,
        metrics: RequestMetrics,
        reactions: Reactions,
    ) -> None:
        """``reactions``: what every attempt's outcome feeds (`gateway.pipeline.reactions`)."""
        self._transport = transport
        self._retry = retry
        self._clock = clock
        self._metrics = metrics
        self._reactions = reactions
        # exchanges handed to the background (slow tries), each with its request's ledger
        self.background: dict[asyncio.Future[InferAnswer], Ledger] = {}
        # the answers' load reports, read and counted
        self.load_reports = LoadReports()

    def __call__(self, attempt: Attempt) -> Awaitable[InferAnswer]:
        """The exchange itself where it may take all the time left (no coroutine around it),
        else the exchange raced against the per-try timeout (`_raced`)."""
        leg, replica, breaker_state = attempt.leg, attempt.replica, attempt.breaker_state
        remaining = leg.call.deadline.remaining()
        if remaining < MIN_TRY_TIMEOUT_S:
            if replica.breaker is not None:
                # hand back a half-open permit
                cancelled = Outcome(OutcomeKind.CANCELLED, replica.id, 0.0)
                replica.breaker.record(cancelled, breaker_state)
            raise UpstreamTimeout("no time left for another attempt")
        if leg.call.ledger.attempts == 1:
            # the request's first send (taken just now, no await)
            self._metrics.queued(leg.call.model_name, leg.call.deadline.timeout_s - remaining)
        # the model's per-try timeout is read only where a retry could follow (no config read,
        # a pydantic model's ``__getattr__`` hook, where none can)
        patience = remaining
        if self._retry.possible(leg):
            patience = try_timeout(
                leg.call.model.retry.try_timeout, leg.attempts.pool.latency, remaining, True
            )
        exchange = self._exchange(attempt, remaining)
        if patience >= remaining:
            return exchange
        return self._raced(attempt, exchange, patience)

    async def _raced(
        self, attempt: Attempt, exchange: Coroutine[Any, Any, InferAnswer], patience: float
    ) -> InferAnswer:
        leg, replica = attempt.leg, attempt.replica
        # not ensure_future's checks
        task = asyncio.get_running_loop().create_task(exchange)
        try:
            await wait_first(self._clock, (task,), self._clock.now() + patience)
        except asyncio.CancelledError:
            await cancel_all((task,))
            raise
        if task.done():
            return task.result()
        self.background[task] = leg.call.ledger
        task.add_done_callback(self._finished_in_background)
        slow = Outcome(OutcomeKind.SLOW, replica.id, patience, detail="answer still pending")
        leg.call.ledger.record(slow)
        self._metrics.per_try_timeout(leg.call.model_name, leg.pool.name, replica.id)
        message = f"{replica.id}: no answer within {patience * 1000:.0f} ms"
        raise UpstreamTimeout(message, outcome=slow, pending=task)

    def _finished_in_background(self, task: asyncio.Future[InferAnswer]) -> None:
        self.background.pop(task, None)
        if not task.cancelled():
            # retrieved: its outcome was recorded by _exchange
            task.exception()

    async def stop(self, call: InferCall) -> None:
        """The client of ``call`` left: its exchanges still running in the background are
        cancelled, and this returns once they have ended."""
        if self.background:
            ledger = call.ledger
            await cancel_all([task for task, of in self.background.items() if of is ledger])

    async def aclose(self) -> None:
        for task in list(self.background):
            task.cancel()
        await asyncio.gather(*self.background, return_exceptions=True)

    async def _exchange(self, attempt: Attempt, timeout: float) -> InferAnswer:
        """Sends the call to the try's replica and classifies what came back, once; the
        outcome goes to the reactions however the exchange ends."""
        leg, replica = attempt.leg, attempt.replica
        call, pool = leg.call, leg.attempts.pool
        started = self._clock.now()
        replica.started()
        # None at the end: cancelled (or crashed) before a verdict
        outcome: Outcome | None = None
        span = None
        if call.span:
            span = call.span.attempt(replica.id, call.ledger.attempts, attempt.breaker_state)
        headers = span.inject(dict(call.upstream_headers)) if span else call.upstream_headers
        try:
            try:
                response = await self._transport.request(
                    replica.endpoint,
                    "POST",
                    pool.infer_path,
                    body=call.body,
                    headers=headers,
                    timeout=timeout,
                    room=call.room,
                )
            except UpstreamError as exc:
                outcome = classify_error(replica.id, exc, self._clock.now() - started)
                raise exc.classified(outcome) from exc
            except Overloaded:
                # no room in the in-flight bytes for its answer: the gateway's own shortage,
                # the answer dropped unread; up to the client as it is (503, Retry-After), as
                # another replica's answer would not fit either
                latency_s = self._clock.now() - started
                kind = OutcomeKind.LOCAL_RESOURCE
                outcome = Outcome(kind, replica.id, latency_s, None, "no room for its answer")
                raise
            ended = self._clock.now()
            outcome = _classify_reply(call, replica.id, response, ended - started, pool.echoes_id)
            if pool.load_aware:
                text = response.headers.get(LOAD_HEADER)
                if text is not None:
                    report = self.load_reports.read(text)
                    if report is not None:
                        replica.report_load(report, ended)
            translated: EncodedBody | None = None
            dialect = pool.dialect
            if (
                outcome.kind is _SUCCESS
                and not dialect.native
                and not dialect.speaks_as_is(call.request)
            ):
                translated, outcome = _in_client_dialect(call, dialect, response, outcome)
            if outcome.kind is not _SUCCESS:
                await _refused(leg, replica, response, outcome, self._reactions)
            return _answer(call, pool, replica.id, response, translated)
        except asyncio.CancelledError:
            outcome = Outcome(OutcomeKind.CANCELLED, replica.id, self._clock.now() - started)
            raise
        finally:
            if outcome is None:
                outcome = Outcome(OutcomeKind.CANCELLED, replica.id, 0.0)
            self._reactions.ended(call, pool, replica, attempt.breaker_state, outcome)
            if span is not None:
                span.end(outcome)


async def _refused(
    leg: Leg, replica: Replica, response: Reply, outcome: Outcome, reactions: Reactions
) -> None:
    """Raises the error of a reply that is not an answer: a protocol error's connection is
    dropped (its real answer may follow on it); a disputed refusal is recorded, with its
    input's digest where that is evidence, for the fault judge to decide later."""
    pool = leg.attempts.pool
    if outcome.kind is OutcomeKind.PROTOCOL_ERROR:
        # out of step: its real answer may follow on the connection
        response.discard()
        raise UpstreamProtocolError(outcome.describe(), outcome=outcome)
    error = UpstreamStatusError(outcome.describe(), response.status, response.body, outcome=outcome)
    if not disputed(outcome):
        pool.record.failed()
        raise error
    # its verdict waits for evidence
    charged = functools.partial(reactions.charged, pool, replica)
    dispute = Dispute(replica, pool, outcome, outcome.detail, charged)
    if input_is_evidence(len(pool.replicas), dispute.status):
        dispute = dataclasses.replace(dispute, input=await _input_of(leg.call))
    pool.record.refused(dispute.input, dispute.status)
    leg.attempts.dispute(dispute)
    raise error


def _answer(
    call: InferCall,
    pool: Pool,
    replica_id: str,
    response: Reply,
    translated: EncodedBody | None,
) -> InferAnswer:
    """The replica's answer as the pipeline hands it up: re-encoded in the client's dialect
    where it was translated, else as it came (with the request's id where the pool's server
    does not echo ids)."""
    if translated is not None:
        length = translated.json_length
        return InferAnswer(
            status=200,
            body=translated.body,
            content_type=translated.content_type,
            header_length=None if length is None else str(length),
            served_by=replica_id,
            attempts=call.ledger.attempts,
        )
    body, header_length = response.body, response.headers.get(HEADER_LENGTH)
    request_id = call.request.id if call.request is not None else None
    if not pool.echoes_id and request_id is not None:
        body, header_length = with_reply_id(body, header_length, request_id)
    return InferAnswer(
        status=response.status,
        body=body,
        content_type=response.headers.get("content-type"),
        header_length=header_length,
        served_by=replica_id,
        attempts=call.ledger.attempts,
    )


def _classify_reply(
    call: InferCall,
    replica_id: str,
    response: Reply,
    latency_s: float,
    echoes_id: bool,
) -> Outcome:
    """Classifies a reply: a 200 counts only if it is a V2 reply to this very request (its id
    echoed, unless the pool's server does not echo ids)."""
    status = response.status
    if status >= 400:
        return classify_status(replica_id, status, latency_s, error_text(response.body))
    problem: str | None = f"answered {status}, which is not a V2 infer reply"
    if status == 200:
        expected = call.request.id if call.request is not None else None
        length = response.headers.get(HEADER_LENGTH)
        problem = check_reply(response.body, length, expected, echoes_id=echoes_id)
        # NaN out of a finite input: a refusal, judged by evidence
        overflowed = None
        # JSON that parsed has no NaN
        if problem is not None or response.body.find(b"null") >= 0:
            overflowed = overflowed_output(response.body, length, expected, echoes_id=echoes_id)
        if overflowed is not None:
            message = printable(nonfinite_message(overflowed))
            outcome = classify_status(replica_id, NONFINITE_STATUS, latency_s, message)
            return dataclasses.replace(outcome, note=NONFINITE_NOTE)
    if problem is None:
        return classify_status(replica_id, status, latency_s)
    return Outcome(OutcomeKind.PROTOCOL_ERROR, replica_id, latency_s, None, printable(problem))


async def _input_of(call: InferCall) -> str:
    """The digest naming the call's input (`input_digest`); a large body is hashed off the
    event loop."""
    request_id = call.request.id if call.request is not None else None
    header_length = call.upstream_headers.get(HEADER_LENGTH)
    # hashed in its pieces, not joined
    body = call.body
    if len(body) <= OFF_LOOP_BYTES:
        return input_digest(body, header_length, request_id)
    return await asyncio.to_thread(input_digest, body, header_length, request_id)


def _in_client_dialect(
    call: InferCall, dialect: Dialect, response: Reply, outcome: Outcome
) -> tuple[EncodedBody | None, Outcome]:
    """A pool's reply in the client's names, shapes and form; one that does not map to the
    model's outputs is the replica's protocol error."""
    try:
        outputs = decode_outputs(response.body, response.headers.get(HEADER_LENGTH))
        return encode_answer(call, dialect.client_outputs(outputs)), outcome
    except BadRequest as exc:
        problem = printable(f"its reply does not map to the model's outputs: {exc.message}")
        kind = OutcomeKind.PROTOCOL_ERROR
        return None, Outcome(kind, outcome.replica, outcome.latency_s, None, problem)
