"""Deadline layer: nothing below it runs past the request's deadline.

It turns "the deadline passed" into one precise 504, and an upstream failure that escaped every
inner layer into a 503 that says how the last attempt failed. The deadline's timer is the
injected clock's. An attempt that timed out with less than a usable try's time left (`MIN_TRY_S`)
was stopped by the deadline: a transport's timer may fire a hair before the clock says the
deadline passed (uvloop's timers have millisecond resolution), and that is still a 504.
"""

from __future__ import annotations

from gateway.call import Handler, InferAnswer, InferCall
from gateway.clock import Clock
from gateway.errors import DeadlineExceeded, UpstreamError, UpstreamFailed, UpstreamTimeout
from gateway.retry.policy import MIN_TRY_S


class DeadlineLayer:
    def __init__(self, clock: Clock, inner: Handler) -> None:
        self._clock = clock
        self._inner = inner

    async def __call__(self, call: InferCall) -> InferAnswer:
        remaining = call.deadline.remaining()
        if remaining <= 0:
            raise DeadlineExceeded(self._expired_message(call))
        try:
            async with self._clock.timeout_at(call.deadline.expires_at):
                return await self._inner(call)
        except TimeoutError as exc:
            raise DeadlineExceeded(self._expired_message(call)) from exc
        except UpstreamError as exc:
            if call.deadline.expired() or _cut_by_deadline(call, exc):
                raise DeadlineExceeded(self._expired_message(call)) from exc
            raise UpstreamFailed(
                f"model {call.model_name!r}: no replica answered after {call.attempts} "
                f"attempt(s); last: {_summary(exc)}"
            ) from exc

    @staticmethod
    def _expired_message(call: InferCall) -> str:
        ms = round(call.deadline.timeout_s * 1000)
        return f"deadline of {ms} ms exceeded after {call.attempts} attempt(s)"


def _cut_by_deadline(call: InferCall, error: UpstreamError) -> bool:
    return isinstance(error, UpstreamTimeout) and call.deadline.remaining() < MIN_TRY_S


def _summary(error: UpstreamError) -> str:
    """The last attempt as a client is told of it (`Outcome.summary`: no replica's text)."""
    return error.outcome.summary() if error.outcome else "no attempt answered"
