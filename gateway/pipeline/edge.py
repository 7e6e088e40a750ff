"""The edge: what every infer request goes through before the pipeline, whatever the transport.

    arrive ── tenant ── model ── tenant limits ── body ── timeout ── parse ── schema ── call ──►
        pipeline (admission ...) ──► answer in the client's names ──► done

A front door (REST's `gateway.api.infer`; a gRPC door the same way) only does I/O: it decodes
the headers the edge reads (`HEADERS`, plus the tenant keys'), gives the edge a `BodyReader`,
and writes what the edge returns or the `GatewayError` it raises, then calls `Edge.done`. The
steps (`gateway.pipeline.edge_steps`) are composed in `gateway.pipeline.build.build_edge`; most
are plain calls, since the small request's CPU is what the gateway is measured by.

`Arrival` is the request's record at the edge, filled as the steps learn things (tenant, model,
bytes received, rows, the call), so that `done` can report a refused request as precisely as an
answered one.

A client that leaves before its answer: its door cancels the task running `infer` (everything
the request started stops, `gateway.cancel`), then calls `done` with `CLIENT_CLOSED`
(499) and writes nothing; `done` records it as any answer, plus a log line (`LeftLines`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from contextvars import Token
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.admission.tenant_limits import TenantLimits
from gateway.call import Handler, InferAnswer, InferCall
from gateway.cancel import LeftLines
from gateway.clock import Clock
from gateway.config.models import ModelConfig
from gateway.config.tenants import ANONYMOUS
from gateway.deadline import TIMEOUT_HEADER
from gateway.errors import CLIENT_CLOSED, GatewayError
from gateway.memory.inflight_bytes import InflightBytes
from gateway.memory.peer_share import PeerAccount
from gateway.pipeline.edge_steps import (
    BodyReader,
    BoundedBody,
    CallBuilder,
    Caller,
    Parse,
    SchemaCheck,
    rows,
)
from gateway.telemetry.logging import bind_request, unbind_request
from gateway.telemetry.spans import RequestSpan
from gateway.telemetry.tracing import Tracer
from gateway.v2.identity import request_id_of, with_client_id
from gateway.v2.reply import rename_reply
from gateway.v2.request import HEADER_LENGTH

# The request headers the edge reads (the tenant's key headers come with the tenant lookup).
HEADERS = (
    HEADER_LENGTH,
    TIMEOUT_HEADER,
    "content-length",
    "x-request-id",
    "traceparent",
    "tracestate",
)
# header value, model -> seconds (400)
Timeout = Callable[[str | None, ModelConfig], float]


class Observer(Protocol):
    """Records one answer as the client saw it (`gateway.control.runtime.Gateway.observe`); ``at``:
    when (`Clock.now`)."""

    def __call__(
        self,
        model: str,
        status: int,
        served_by: str,
        latency_s: float,
        degraded: str | None,
        deadline_s: float | None,
        tenant: str,
        request_bytes: int,
        response_bytes: int,
        rows: int,
        at: float,
        /,
    ) -> None: ...


@dataclass(slots=True, eq=False)
class Arrival:
    """One request at the edge: what its door gave, then what the steps learned."""

    model_name: str
    version: str | None
    # decoded, lower-case names
    headers: Mapping[str, str]
    arrived: float
    request_id: str
    span: RequestSpan
    log_token: Token[Any]
    tenant: str = ANONYMOUS
    model: ModelConfig | None = None
    # for the SLOs: only a deadline the client chose
    client_timeout_s: float | None = None
    # the body's bytes, once read
    received: int = -1
    # the request's rows, once parsed
    rows: int = -1
    call: InferCall | None = None
    # the client's address, as its door knows it
    peer: str = ""
    # The in-flight bytes (`gateway.memory.inflight_bytes.Holder`): the bytes it holds, given
    # back at `Edge.done` (its answer's at `Edge.written` where the door writes it later), and
    # its address's account while it holds as a large request. A door that read the body under
    # the budget itself (gRPC's) hands them over before `Edge.infer`, and sets ``counted``.
    held: int = 0
    account: PeerAccount | None = None
    counted: bool = False
    # of ``held``, its answer's bytes
    answer_held: int = 0
    # its answer's audit, started once it is answered
    audit: Callable[[], None] | None = None
    # It is its call's `AnswerRoom` (`gateway.upstream.transport.base`): a reply body over
    # ``answer_free`` bytes is held in ``memory`` before it is read, as a large request's (no
    # budget: never asked).
    memory: InflightBytes | None = None
    answer_free: int = sys.maxsize

    @property
    def attempts(self) -> int:
        """Attempts sent to replicas for this request so far."""
        return self.call.attempts if self.call is not None else 0

    def hold_answer(self, size: int) -> bool:
        """Room for a reply body of ``size`` bytes now (`InflightBytes.hold_answer`); once
        the request is done (a try that outlived it), none is held: nothing would give it
        back."""
        memory = self.memory
        return memory is None or memory.hold_answer(self, size)

    async def wait_answer(self, size: int) -> None:
        """Room for a reply body of ``size`` bytes, waited for (`InflightBytes.wait_answer`)."""
        memory = self.memory
        if memory is not None:
            await memory.wait_answer(self, size)


class Edge:
    def __init__(
        self,
        clock: Clock,
        tracer: Tracer,
        caller: Caller,
        limits: TenantLimits,
        body: BoundedBody,
        timeout: Timeout,
        parse: Parse,
        schema: SchemaCheck,
        build_call: CallBuilder,
        pipeline: Handler,
        observe: Observer,
        memory: InflightBytes | None = None,
    ) -> None:
        # the gateway-wide bound on bytes in flight (None: unbounded)
        self._memory = memory
        # a reply body within this is read without asking for room (`Arrival.answer_free`)
        self._answer_free = sys.maxsize if memory is None else memory.small_bytes
        # requests arrived and not yet done (a replaced edge retires at 0)
        self.open = 0
        self._clock = clock
        self._tracer = tracer
        self._caller = caller
        self._limits = limits
        self._body = body
        self._timeout = timeout
        self._parse = parse
        self._schema = schema
        self._build_call = build_call
        self._pipeline = pipeline
        self._observe = observe
        self._left_lines = LeftLines(clock)

    def arrive(
        self, model_name: str, version: str | None, headers: Mapping[str, str], peer: str = ""
    ) -> Arrival:
        """The request arrived: its clock starts, it gets its id and span, its log lines their
        tags. ``peer``: the client's address (REST: ASGI's client host; gRPC: ``context.peer()``,
        either form), to which its bytes in flight count. Every `arrive` is followed by one
        `done`."""
        arrived = self._clock.now()
        request_id = request_id_of(headers.get("x-request-id"))
        span = self._tracer.start_request(headers, model_name, request_id)
        log_token = bind_request(request_id, span)
        self.open += 1
        return Arrival(
            model_name,
            version,
            headers,
            arrived,
            request_id,
            span,
            log_token,
            peer=peer,
            memory=self._memory,
            answer_free=self._answer_free,
        )

    async def infer(self, arrival: Arrival, read: BodyReader) -> InferAnswer:
        """The steps in order, then the pipeline; raises the `GatewayError` of the first refusal."""
        headers = arrival.headers
        tenant = arrival.tenant = self._caller.tenant(headers)
        model = arrival.model = self._caller.model(arrival.model_name, arrival.version, tenant)
        # a gateway whose tenants set no limits (or has none) has no limits step
        limiter = self._limits.get(tenant) if self._limits.limiters else None
        if limiter is not None:
            # before the body is read: a refusal costs ≈ nothing
            limiter.enter()
        try:
            memory = self._memory
            holder = None
            if memory is not None and not arrival.counted:
                # gRPC's door counted its message
                size = self._body.first_hold(headers.get("content-length"))
                if memory.fits(size):
                    # a small body (the usual case): no await
                    memory.add(size)
                    arrival.held = size
                elif not memory.hold(arrival, size):
                    await memory.wait(arrival, size)
                # the body step grows its hold as the body arrives
                holder = arrival
            body = await self._body(headers.get("content-length"), read, holder)
            arrival.received = body.size
            timeout_s = self._timeout(headers.get(TIMEOUT_HEADER), model)
            # for the SLOs, only a deadline the client chose
            arrival.client_timeout_s = timeout_s if TIMEOUT_HEADER in headers else None
            header_length = headers.get(HEADER_LENGTH)
            request = self._parse.inline(body, header_length, model.max_rows)
            if request is None:
                # a large body: the fast path, or parsed off the loop
                request = await self._parse(body, header_length, model.max_rows)
            self._schema(arrival.model_name, request)
            arrival.rows = rows(request)
            call = arrival.call = self._build_call(
                arrival.model_name,
                model,
                body,
                header_length,
                request,
                arrival.request_id,
                arrival.arrived,
                timeout_s,
                arrival.span,
                tenant,
            )
            # its replies' bodies are held before they are read (without a budget: never)
            call.room = arrival
            result = await self._pipeline(call)
        except GatewayError:
            # the door answers it, then calls `done`
            raise
        except BaseException:
            # no `done` follows a crash or a cancellation
            self._release(arrival)
            raise
        finally:
            if limiter is not None:
                limiter.leave()
        if result.status == 200 and result.vote is None and result.degraded is None:
            # the replica's answer in the client's names (a vote's and a fallback's already are)
            result.body, result.header_length = rename_reply(
                result.body, result.header_length, arrival.model_name, model.version
            )
        if result.status == 200 and call.request is not None and call.client_id is not None:
            # the client's own id back in place of the unique one its replicas saw
            result.body, result.header_length = with_client_id(
                result.body, result.header_length, call.request.id or "", call.client_id
            )
        if self._memory is not None:
            # The answer is in memory until the door has written it: held in place of the
            # room its reply's body was given (the room is the request's: a retry's or a
            # hedge's reply read and dropped held it too), or counted now where none was.
            answer = len(result.body)
            self._memory.settle(arrival, arrival.held - arrival.answer_held + answer)
            arrival.answer_held = answer
        arrival.audit = result.audit
        return result

    def done(
        self,
        arrival: Arrival,
        status: int,
        served_by: str = "",
        degraded: str | None = None,
        sent: int = -1,
        written: bool = True,
    ) -> None:
        """The door has sent the answer (``sent``: its body's bytes; -1 for an error's):
        metrics, SLOs and history record it, its audit starts if it was sampled for one, the
        span ends, the log tags go. ``written``: the answer has left the door (its bytes are
        given back now); False: its transport still holds them, and the door calls `written`
        once it has flushed them."""
        now = self._clock.now()
        self.open -= 1
        # its tries still running hold no room from now on
        arrival.memory = None
        self._observe(
            arrival.model_name,
            status,
            served_by,
            now - arrival.arrived,
            degraded,
            arrival.client_timeout_s,
            arrival.tenant,
            arrival.received,
            sent,
            arrival.rows,
            now,
        )
        if status == CLIENT_CLOSED:
            # its client left: no answer (tagged: still bound)
            self._left_lines(arrival.model_name, arrival.attempts, now - arrival.arrived)
        elif arrival.audit is not None and status == 200:
            # sampled: after the client's answer
            arrival.audit()
        arrival.span.end(status, served_by or None, degraded)
        unbind_request(arrival.log_token)
        # The call holds the arrival as its room: without this the pair (and all they hold)
        # is a cycle the collector frees, about twenty objects a request.
        arrival.call = None
        if written:
            self._release(arrival)
        elif self._memory is not None:
            # the request's bytes go; its answer's stay held
            self._memory.release(arrival, arrival.answer_held)

    def written(self, arrival: Arrival) -> None:
        """The door's transport has flushed the answer of a request `done` with ``written``
        False: its bytes are given back (once; a second call does nothing)."""
        self._release(arrival)

    def _release(self, arrival: Arrival) -> None:
        arrival.memory = None
        if self._memory is not None and (arrival.held or arrival.account is not None):
            self._memory.release(arrival)
