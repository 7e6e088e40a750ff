"""A client that leaves cancels its request: what the request started stops, nothing new starts.

Under overload clients time out and go; a gateway that kept their tries running would serve
nobody with them and multiply the load by the retries it sends for clients already gone. So a
door cancels the request's task when its client goes away: REST when the connection is lost
while the edge has the request (the lean server cancels the handler: `gateway.worker.http`),
gRPC when the client cancels the call or its connection drops (grpc.aio cancels the call's
task). The cancellation runs down the pipeline as asyncio's does, and each layer that
started tasks for the request cancels them and waits until they have ended (`cancel_all`):
the hedge layer its two copies, the vote its legs, the retry layer's race its try, the attempt
layer its exchange. The slow tries the retry layer left running (`PendingAnswers`: exchanges
the attempt layer handed to the background) outlive the layers that started them, so the
admission layer stops those (`AttemptLayer.stop`), before it gives the request's seat back.
When the request's task ends, then:

- every exchange is over: its HTTP/1.1 connection aborted, never pooled (a reply half-read
  could be read as the next request's); its gRPC call cancelled in gRPC's core, so the replica
  sees the cancellation at once;
- each try ended as ``CANCELLED``: no verdict on its replica (no breaker, outlier or suspect
  strike, nor a success that would clear a failure streak); a half-open permit is handed back;
- the admission seat, the tenant's limit and the bytes in flight are given back as the layers
  unwind; the retry budget holds nothing for a request (a retry is paid right before its send),
  so a request cancelled spends no more of it;
- the door records it once (`gateway.pipeline.edge.Edge.done`) as `CLIENT_CLOSED` (499, nginx's
  "client closed request"): in the request metrics and Triton's statistics as a failure the
  client caused, in its trace span and in one rate-limited log line (`LeftLines`), outside the
  SLOs: neither a good nor a bad event, since nobody was there to see the answer.

What is not the client's goes on: a rollout's shadow copy (sent after the client's answer, on a
ledger of its own, evidence for the rollout), probes, and a fallback model's inference already
in its worker thread (in-process; its result is dropped).

A cancellation inside the pipeline that is not the client's leaving (the deadline's scope, the
fallback's reserve, a vote's stragglers past the quorum, a hedge's losing copy) stops what that
layer started but leaves the slow tries running to their end, as before: a late answer still
teaches the pool's latency, and a hung replica still times out and is ejected.

The module sits beside `gateway.call`, below every package that holds a layer (the pipeline,
`gateway.voting`, `gateway.retry`), since each of them cancels what it started.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from gateway.clock import Clock
from gateway.errors import CLIENT_CLOSED
from gateway.telemetry.throttle import LogThrottle

log = logging.getLogger(__name__)


async def cancel_all(tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Cancels those of ``tasks`` still running and returns once every one has ended (their
    errors are theirs: recorded where they ended, not raised here)."""
    running = [task for task in tasks if not task.done()]
    for task in running:
        task.cancel()
    if running:
        await asyncio.wait(running)


class LeftLines:
    """The log line of a request whose client left: at most one per model per `LogThrottle`
    interval, saying how many more left meanwhile (clients leaving in a crowd write no flood).
    Written while the request's log tags are bound, so it carries its request and trace ids."""

    def __init__(self, clock: Clock) -> None:
        self._throttle = LogThrottle(clock)

    def __call__(self, model: str, attempts: int, latency_s: float) -> None:
        held = self._throttle.allow(model)
        if held is None:
            return
        more = f" ({held} more since the last line)" if held else ""
        fields = {
            "status": CLIENT_CLOSED,
            "model": model,
            "attempts": attempts,
            "latency_ms": round(latency_s * 1000, 1),
        }
        log.info(
            "client left before its answer after %.0f ms: cancelled, recorded as %d%s",
            latency_s * 1000,
            CLIENT_CLOSED,
            more,
            extra=fields,
        )
