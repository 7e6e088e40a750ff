"""Retry layer: one loop of tries on untried replicas, as `RetryPolicy` allows; slow tries race.

The first try is a plain call: most requests never retry, so the first-try-success path costs
one ``await``, and nothing is built for retries until a try has failed. (The request counts
towards the budget's allowance once, at its route, however many legs it has.)
After a failure the loop asks the policy for the next try (it waits out the backoff and pays
for the retry), and
- a slow try keeps running (`PendingAnswers`): whichever exchange answers well first wins;
- error answers are disputes the fault judge settles (`gateway.faults.judge`, carried out by
  `gateway.upstream.fault_actions`): after each refused retry, when the tries end, and when another
  replica answers; a verdict that blames the request ends the tries, charging no one;
- no replica left to try (`NoReplicaAvailable`) ends the tries with how the last try failed.
"""

from __future__ import annotations

from gateway.call import InferAnswer, Leg, LegHandler
from gateway.errors import NoReplicaAvailable, UpstreamError
from gateway.retry.pending import PendingAnswers
from gateway.retry.policy import RetryPolicy
from gateway.upstream import fault_actions


class RetryLayer:
    def __init__(self, policy: RetryPolicy, inner: LegHandler) -> None:
        self._policy = policy
        self._inner = inner

    async def __call__(self, leg: Leg) -> InferAnswer:
        try:
            result = await self._inner(leg)
        except UpstreamError as first:
            result = await self._retry(leg, first)
        if leg.attempts.disputes:
            fault_actions.answered(leg.attempts.settle(), result.served_by)
        return result

    async def _retry(self, leg: Leg, error: UpstreamError) -> InferAnswer:
        pending = PendingAnswers()
        pending.keep(error)
        while await self._policy.next_try(leg, error):
            try:
                return await pending.race(self._inner(leg))
            except UpstreamError as exc:
                pending.keep(exc)
                rejected = fault_actions.refused(
                    leg.attempts.disputes, leg.call.model_name, leg.call.model.retry.max_attempts
                )
                if rejected is not None:
                    # the request's fault: nobody is charged
                    leg.attempts.settle()
                    raise rejected from exc
                error = exc
            except NoReplicaAvailable:
                # every admissible replica tried: the last try's story
                break
        return await self._settle(leg, pending, error)

    async def _settle(self, leg: Leg, pending: PendingAnswers, error: UpstreamError) -> InferAnswer:
        """No more tries: a slow exchange that still answers well wins, else the error stands
        or the judge's verdict on the disputes (refusals it leaves open stay on the leg's
        tries, for a vote to refute with the other legs' answers)."""
        result = await pending.first_good()
        if result is not None:
            return result
        rejected, refusals = fault_actions.attempts_ended(
            leg.attempts.settle(), leg.call.model_name
        )
        for refusal in refusals:
            leg.attempts.dispute(refusal)
        if rejected is not None:
            raise rejected from error
        raise error
