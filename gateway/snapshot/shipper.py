"""A worker's outcomes on their way to control: collected by the request path, shipped in batches.

The request path pays one list append per record, nothing more: ``shipper.answers.append``
(the answer tape's tuples) and ``shipper.calls.append`` (what control-owned objects would have
been told). The two records every plain request makes are tallied instead, with those alike:
a judged successful attempt by model, pool and replica (`tally_success`), a request's wait
before its first send by model (`wait`); each group ships as one call of their values in
order, so the control carries out one record for many. A replica's other records (a failure,
a charge) ship its tallied successes first (`settle`): the control sees its attempts in the
order they ended.

A batch goes every ``interval_s``, whether anything was recorded or not (its gauges and
staleness are news too, and control sees a worker alive), and sooner once ``max_items`` were
recorded: while records come in (since the last batch, or in it), the lists' lengths are
looked at every ``check_s``, so a burst waits at most that long and a batch stays near
``max_items``; an idle worker only wakes to ship. Shipping swaps the lists out (the request
path appends to fresh ones) and hands the batch to ``send``
(`LinkClient.send_batch`, which holds batches while control is away, bounded).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

from gateway.clock import Clock
from gateway.periodic import BackgroundTask
from gateway.snapshot.messages import Batch, Call, Gauges
from gateway.telemetry.answers import Answer

log = logging.getLogger(__name__)

INTERVAL_S: Final = 0.1
CHECK_S: Final = 0.02
# a batch of about half a megabyte of answers
MAX_ITEMS: Final = 4096


def no_gauges() -> Gauges | None:
    return None


class BatchShipper(BackgroundTask):
    """``start()`` ships from then on; ``await stop()`` ships what is left, once more."""

    def __init__(
        self,
        clock: Clock,
        send: Callable[[Batch], None],
        *,
        worker: int,
        gauges: Callable[[], Gauges | None] = no_gauges,
        stale: Callable[[], bool] = lambda: False,
        interval_s: float = INTERVAL_S,
        check_s: float = CHECK_S,
        max_items: int = MAX_ITEMS,
    ) -> None:
        super().__init__("batch-shipper")
        self._clock = clock
        self._send = send
        self._gauges = gauges
        self._stale = stale
        self.worker = worker
        self.interval_s = interval_s
        self.check_s = check_s
        self.max_items = max_items
        # appended to by the request path
        self.answers: list[Answer] = []
        # appended to by the request path
        self.calls: list[Call] = []
        # judged successful attempts alike, (model, pool, replica) -> their latencies in order:
        # one ``fleet.successes`` call each (`tally_success`)
        self.successes: dict[tuple[str, str, str], list[float]] = {}
        # each model's waits from arrival to the first send: one ``metrics.queued_all`` call
        self.waits: dict[str, list[float]] = {}
        # of the last batch shipped
        self.seq = 0
        # the last `Flush` token answered
        self.flushed = 0

    def tally_success(self, model: str, pool: str, replica: str, latency_s: float) -> None:
        """A judged successful attempt, tallied with those alike (the request path's one
        lookup and append); `settle` keeps it in order with the replica's other records."""
        key = (model, pool, replica)
        group = self.successes.get(key)
        if group is None:
            self.successes[key] = [latency_s]
        else:
            group.append(latency_s)

    def settle(self, replica: str) -> None:
        """The successes tallied for ``replica`` become calls now, before a record of it that
        is not one (a failure, a charge): control sees its attempts in the order they ended,
        as a failure streak needs."""
        successes = self.successes
        for key in [key for key in successes if key[2] == replica]:
            self.calls.append(Call("fleet", "successes", (*key, successes.pop(key))))

    def wait(self, model: str, seconds: float) -> None:
        """A request's wait from arrival to its first send, tallied with its model's."""
        waits = self.waits.get(model)
        if waits is None:
            self.waits[model] = [seconds]
        else:
            waits.append(seconds)

    def ship(self, flushed: int = 0) -> Batch:
        """Ships everything recorded so far, now (``flushed``: the `Flush` token answered)."""
        answers, calls = self.answers, self.calls
        if self.successes:
            calls.extend(
                Call("fleet", "successes", (*key, group)) for key, group in self.successes.items()
            )
            self.successes = {}
        if self.waits:
            calls.extend(Call("metrics", "queued_all", item) for item in self.waits.items())
            self.waits = {}
        self.answers, self.calls = [], []
        self.seq += 1
        self.flushed = max(self.flushed, flushed)
        gauges, stale = self._gauges(), self._stale()
        batch = Batch(self.worker, self.seq, answers, calls, gauges, stale, self.flushed)
        self._send(batch)
        return batch

    async def stop(self) -> None:
        await super().stop()
        self.ship()

    async def _run(self) -> None:
        clock = self._clock
        due = clock.now() + self.interval_s
        # records came in since the last batch, or the last batch had some
        busy = False
        while True:
            left = due - clock.now()
            busy = busy or bool(self.answers or self.calls)
            await clock.sleep(max(0.0, min(left, self.check_s) if busy else left))
            if clock.now() < due and len(self.answers) + len(self.calls) < self.max_items:
                continue
            due = clock.now() + self.interval_s
            busy = bool(self.answers or self.calls)
            try:
                self.ship()
            except Exception:
                # a bug in one batch must not end the shipping
                log.exception("shipping batch %d failed", self.seq)
