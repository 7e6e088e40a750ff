"""Vote route: k legs on distinct pools (diverse versions), compared once a quorum agrees.

Each leg is a full single route (retry, hedge, balance, attempt) on its own pool, asking for
the outputs the vote compares, in JSON: those the client names, else the vote's ``outputs``
(its label outputs by default), so that every leg is asked the same question whatever a server
returns by default; a leg that answers other outputs is a missing answer. Answers are compared
as they arrive; once a quorum agrees, stragglers get a short grace and are then cancelled (all
legs are, and waited for, when the request itself is cancelled: `gateway.cancel`).
Legs that answered against the quorum count against the replica that served them; a replica
whose dissent share crosses the suspect threshold is quarantined. A leg that fails (an error,
a refusal) is a missing answer: the rest decide, and a refusal the quorum refutes is charged
to its replica. No quorum raises `NoQuorum`, which the fallback layer may turn into a degraded
answer, unless legs refused the request alike (its fault: a 4xx).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from gateway.call import Attempts, InferAnswer, InferCall, Leg, LegHandler, speak
from gateway.cancel import cancel_all
from gateway.clock import Clock, wait_first
from gateway.config.policies import VoteConfig
from gateway.errors import BadRequest, GatewayError, NoQuorum
from gateway.telemetry.metrics import RequestMetrics
from gateway.telemetry.throttle import LogThrottle
from gateway.upstream import fault_actions
from gateway.upstream.registry import Registry
from gateway.v2.answer import encode_answer
from gateway.v2.codec import decode_outputs
from gateway.v2.outputs import asking_for
from gateway.v2.request import HEADER_LENGTH, InferRequestInfo
from gateway.voting.quarantine import DissentSink
from gateway.voting.rule import VoteResult, VoteRule, other_outputs, vote
from v2proto.outputs import requested_outputs

log = logging.getLogger(__name__)
Outputs = dict[str, Any]


class VoteRoute:
    def __init__(
        self,
        registry: Registry,
        leg: LegHandler,
        clock: Clock,
        metrics: RequestMetrics,
        pay: Callable[[Leg], bool],
        suspects: DissentSink,
    ) -> None:
        """``pay``: spends one retry from the budget for a send beyond a leg's first
        (`RetryPolicy.pay`); False when the budget (or the pool) refuses it. ``suspects``:
        where each replica's dissent goes (`gateway.voting.quarantine`)."""
        self._pay = pay
        self._metrics = metrics
        self._registry = registry
        self._leg = leg
        self._clock = clock
        self._suspects = suspects
        self._dissent_lines = LogThrottle(clock)

    async def __call__(self, call: InferCall) -> InferAnswer:
        config = call.model.vote
        assert config is not None and call.request is not None, "router and edge set these"
        compared = _compared(call.request, config)
        asked, body, header_length = asking_for(call.request, call.body, compared)
        headers = dict(call.upstream_headers)
        headers.pop(HEADER_LENGTH, None)
        if header_length is not None:
            headers[HEADER_LENGTH] = header_length
        asking = dataclasses.replace(call, body=body, upstream_headers=headers, request=asked)
        zones: set[str] = set()
        pools = {name: self._registry.pools[name] for name in config.pools}
        legs = {
            name: Leg(speak(asking, pool), Attempts(call.ledger, pool, zones))
            for name, pool in pools.items()
        }
        rule = VoteRule(
            config.quorum, config.label_outputs, config.numeric_atol, config.numeric_rtol
        )
        answers, served = await self._collect(legs, config, compared)
        answers = conform(answers)
        result = vote(answers, rule) if answers else None
        replaced: list[tuple[str, Outputs]] = []
        if result is not None and not result.agreed:
            result = await self._tiebreak(legs, config, rule, answers, served, replaced, compared)
        refusals = [d for leg in legs.values() for d in leg.attempts.settle()]
        if result is None or not result.agreed:
            self._metrics.vote(call.model_name, "no_quorum")
            rejected = fault_actions.no_quorum(refusals, call.model_name)
            if rejected is not None:
                # legs of two versions refused it alike: the request's fault
                raise rejected
            raise NoQuorum(_no_quorum_message(call.model_name, config, answers, result))
        fault_actions.answered(refusals, "the vote's quorum")
        self._count_dissents(call.model_name, config, result, served, replaced)
        dissenters = [served[leg] for leg, rows in result.dissenters.items() if rows]
        self._metrics.vote(call.model_name, result.tally, dissenters)
        reply = encode_answer(call, result.outputs, {"vote": result.tally})
        return InferAnswer(
            status=200,
            body=reply.body,
            content_type=reply.content_type,
            header_length=None if reply.json_length is None else str(reply.json_length),
            served_by=",".join(served[name] for name in answers),
            attempts=call.attempts,
            vote=result.tally,
        )

    async def _collect(
        self, legs: dict[str, Leg], config: VoteConfig, compared: tuple[str, ...] | None
    ) -> tuple[dict[str, Outputs], dict[str, str]]:
        tasks = {asyncio.ensure_future(self._leg(leg)): name for name, leg in legs.items()}
        answers: dict[str, Outputs] = {}
        served: dict[str, str] = {}
        # in the legs' order, so that answers are taken in that order
        pending = list(tasks)
        grace_until: float | None = None
        grace = config.straggler_grace_ms / 1000
        rule = VoteRule(config.quorum, config.label_outputs)
        try:
            while pending:
                await wait_first(self._clock, pending, grace_until)
                done = [task for task in pending if task.done()]
                if not done:
                    # the stragglers' grace is over
                    break
                pending = [task for task in pending if not task.done()]
                for task in done:
                    name = tasks[task]
                    outputs = self._as_asked(_decoded(task, compared), compared, task)
                    if outputs is not None:
                        answers[name] = outputs
                        served[name] = task.result().served_by
                if (
                    grace_until is None
                    and len(answers) >= config.quorum
                    and vote(answers, rule).agreed
                ):
                    grace_until = self._clock.now() + grace
        except asyncio.CancelledError:
            await cancel_all(pending)
            raise
        finally:
            for task in pending:
                task.cancel()
        return answers, served

    async def _tiebreak(
        self,
        legs: dict[str, Leg],
        config: VoteConfig,
        rule: VoteRule,
        answers: dict[str, Outputs],
        served: dict[str, str],
        replaced: list[tuple[str, Outputs]],
        compared: tuple[str, ...] | None,
    ) -> VoteResult:
        """No quorum: ask another replica of each answered pool that has one, then vote again.

        A replica that answers wrongly among honest spares (a bad GPU, a corrupted copy) then
        cannot break a vote where the diverse versions legitimately split. Each of these sends
        is paid from the retry budget like a retry; a pool whose send the budget refuses is not
        asked again.
        """
        again = {
            name: Leg(leg.call, leg.attempts.again())
            for name, leg in legs.items()
            if name in answers
            and len(leg.attempts.tried) < len(leg.pool.replicas)
            # paid like a retry, or not sent
            and self._pay(leg)
        }
        if again:
            fresh, fresh_served = await self._collect(again, config, compared)
            for name, outputs in conform({**answers, **fresh}).items():
                if name not in fresh:
                    continue
                replaced.append((served[name], answers[name]))
                answers[name], served[name] = outputs, fresh_served[name]
        return vote(answers, rule)

    def _as_asked(
        self,
        outputs: Outputs | None,
        compared: tuple[str, ...] | None,
        task: asyncio.Future[InferAnswer],
    ) -> Outputs | None:
        """The outputs the leg was asked for, or None (a missing answer, `other_outputs`)
        when it answered others; outputs beyond them are not compared."""
        if outputs is None or compared is None:
            return outputs
        if other_outputs(outputs, compared):
            replica_id = task.result().served_by
            held = self._dissent_lines.allow(("other_outputs", replica_id))
            if held is not None:
                log.warning(
                    "vote leg %s answered outputs %s, not the compared %s: a missing answer%s",
                    replica_id,
                    sorted(outputs),
                    list(compared),
                    f" ({held} more since its last line)" if held else "",
                )
            return None
        return {name: outputs[name] for name in compared}

    def _count_dissents(
        self,
        model: str,
        config: VoteConfig,
        result: VoteResult,
        served: dict[str, str],
        replaced: list[tuple[str, Outputs]],
    ) -> None:
        rows = _rows(result, config)
        judged = [(rid, result.dissenters.get(leg, 0)) for leg, rid in served.items()]
        judged += [
            (rid, _differing_rows(outputs, result, config, rows)) for rid, outputs in replaced
        ]
        for replica_id, dissented in judged:
            held = self._dissent_lines.allow((model, replica_id)) if dissented else None
            if held is not None:
                # at most one line per replica and model per interval
                log.info(
                    "vote on %s: %s dissented on %d of %d rows%s",
                    model,
                    replica_id,
                    dissented,
                    rows,
                    f" ({held} more dissents since its last line)" if held else "",
                )
            self._suspects.observe(model, config, replica_id, rows, dissented)


def _compared(info: InferRequestInfo, config: VoteConfig) -> tuple[str, ...] | None:
    """The outputs every leg is asked for: the client's, else the vote's (client names)."""
    named = requested_outputs(info.header)
    if named is not None:
        return tuple(dict.fromkeys(output.name for output in named))
    return config.compared_outputs


def _decoded(task: asyncio.Future[InferAnswer], compared: tuple[str, ...] | None) -> Outputs | None:
    """The leg's answer as arrays: only the compared outputs (the others are never converted)."""
    if task.cancelled() or task.exception() is not None:
        error = None if task.cancelled() else task.exception()
        if error is not None and not isinstance(error, GatewayError):
            raise error
        return None
    result = task.result()
    if result.status != 200:
        return None
    try:
        return decode_outputs(result.body, result.header_length, compared)
    except BadRequest:
        # a malformed answer is a missing answer, not a crash
        log.warning("vote leg %s sent an undecodable answer", result.served_by)
        return None


def _rows(result: VoteResult, config: VoteConfig) -> int:
    """Rows in the voted answer (the batch size), from its first label output, else from any
    output it compared (a client may ask for scores alone)."""
    names = [n for n in config.label_outputs if n in result.outputs] or list(result.outputs)
    for name in names:
        agreed = result.outputs[name]
        if agreed.ndim:
            return int(agreed.shape[0])
    return 1


def _differing_rows(outputs: Outputs, result: VoteResult, config: VoteConfig, rows: int) -> int:
    """On how many rows a replaced answer differs from the quorum's: by its labels, or, where
    the vote compared none (scores alone), by its values beyond the vote's tolerance."""
    labels = [n for n in config.label_outputs if n in result.outputs]
    differing = np.zeros(rows, dtype=bool)
    for name in labels or list(result.outputs):
        mine, agreed = outputs.get(name), result.outputs[name]
        if mine is None or mine.shape != agreed.shape:
            return rows
        same = (
            mine == agreed
            if labels
            else np.isclose(mine, agreed, atol=config.numeric_atol, rtol=config.numeric_rtol)
        )
        differing |= ~np.asarray(same).reshape(rows, -1).all(axis=1)
    return int(differing.sum())


def _no_quorum_message(
    model: str, config: VoteConfig, answers: dict[str, Outputs], result: VoteResult | None
) -> str:
    if len(answers) < config.quorum:
        return (
            f"model {model!r}: no quorum: {len(answers)} of {len(config.pools)} legs answered, "
            f"{config.quorum} needed"
        )
    rows = result.rows_without_quorum if result else []
    return f"model {model!r}: no quorum: the {len(answers)} legs disagree on rows {rows[:10]}"


def conform(answers: dict[str, Outputs]) -> dict[str, Outputs]:
    """Legs' outputs in one shape where they differ only by dimensions of size 1.

    Versions served by different V2 servers shape the same labels differently (one answers
    [4, 1] where another answers [4]); those are the same labels and must not dissent. An
    output takes the shape most legs give it (the first leg's on a tie); arrays of another
    size or batch stay as they are, and the vote judges them.
    """
    names = {name for outputs in answers.values() for name in outputs}
    conformed = {leg: dict(outputs) for leg, outputs in answers.items()}
    for name in names:
        shapes = [o[name].shape for o in answers.values() if name in o]
        common = max(shapes, key=shapes.count)
        for outputs in conformed.values():
            array = outputs.get(name)
            if array is None or array.shape == common:
                continue
            if _squeezed(array.shape) == _squeezed(common) and array.size == np.prod(common):
                outputs[name] = np.reshape(array, common)
    return conformed


def _squeezed(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(d for d in shape if d != 1)
