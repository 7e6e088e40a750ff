"""The shipper: a batch every interval, sooner past a size, on virtual time."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.snapshot.messages import Batch, Call, Gauges
from gateway.snapshot.shipper import BatchShipper
from gateway.telemetry.answers import Answer
from tests.support.virtual_time import VirtualClock, VirtualTimeLoop

ANSWER: Answer = ("digits", 200, "r1", None, "anonymous", 0.003, None, 600, 400, 1, 0.0)


class Rig:
    def __init__(self, **options: Any) -> None:
        self.clock = VirtualClock(start=0.0)
        self.sent: list[tuple[float, Batch]] = []
        self.shipper = BatchShipper(
            self.clock, lambda b: self.sent.append((self.clock.now(), b)), worker=3, **options
        )

    def run(self, main: Callable[[], Awaitable[None]]) -> None:
        async def go() -> None:
            self.shipper.start()
            await main()
            await self.shipper.stop()

        with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
            runner.run(go())


def test_a_batch_goes_every_interval_even_with_nothing_in_it() -> None:
    rig = Rig()
    rig.run(lambda: rig.clock.sleep(0.35))
    times = [round(t, 3) for t, _ in rig.sent]
    assert times == [0.1, 0.2, 0.3, 0.35]  # the last one: what stop ships
    assert [b.seq for _, b in rig.sent] == [1, 2, 3, 4]
    assert all(b.worker == 3 and b.answers == [] for _, b in rig.sent)


def test_what_the_request_path_appends_goes_in_order_and_once() -> None:
    rig = Rig()

    async def main() -> None:
        for n in range(25):
            rig.shipper.answers.append((*ANSWER[:-1], float(n)))
            rig.shipper.calls.append(Call("metrics", "attempt", ("digits", n)))
            await rig.clock.sleep(0.013)

    rig.run(main)
    answers = [a for _, b in rig.sent for a in b.answers]
    calls = [c for _, b in rig.sent for c in b.calls]
    assert [a[-1] for a in answers] == [float(n) for n in range(25)]
    assert [c.args[1] for c in calls] == list(range(25))
    assert rig.shipper.answers == [] and rig.shipper.calls == []


def test_past_max_items_a_batch_goes_within_check_s_while_records_come_in() -> None:
    rig = Rig(max_items=100, check_s=0.01)

    async def trickle() -> None:
        while True:
            rig.shipper.answers.append(ANSWER)
            await rig.clock.sleep(0.005)

    async def main() -> None:
        task = asyncio.create_task(trickle())
        await rig.clock.sleep(0.152)
        rig.shipper.answers.extend([ANSWER] * 150)
        burst_at = rig.clock.now()
        await rig.clock.sleep(0.1)
        task.cancel()
        shipped_at = [t for t, b in rig.sent if len(b.answers) >= 100]
        assert shipped_at and burst_at < shipped_at[0] <= burst_at + 0.01 + 1e-9

    rig.run(main)


def test_a_burst_into_an_idle_shipper_waits_at_most_the_interval() -> None:
    rig = Rig()

    async def main() -> None:
        await rig.clock.sleep(0.101)  # the first batch went empty at 0.1
        rig.shipper.answers.extend([ANSWER] * 10_000)
        await rig.clock.sleep(0.1)

    rig.run(main)
    assert [(round(t, 3), len(b.answers)) for t, b in rig.sent[:2]] == [(0.1, 0), (0.2, 10_000)]


def test_gauges_and_staleness_ride_along() -> None:
    gauges = Gauges({"r1": 2}, {"digits": 2}, 9.5, 100, 1.5)
    rig = Rig(gauges=lambda: gauges, stale=lambda: True)
    rig.run(lambda: rig.clock.sleep(0.1))
    assert all(b.gauges == gauges and b.stale for _, b in rig.sent)


def test_a_send_that_fails_does_not_end_the_shipping() -> None:
    clock = VirtualClock(start=0.0)
    seqs: list[int] = []

    def send(batch: Batch) -> None:
        seqs.append(batch.seq)
        if batch.seq == 1:
            raise RuntimeError("a bug")

    shipper = BatchShipper(clock, send, worker=0)

    async def main() -> None:
        shipper.start()
        await clock.sleep(0.25)
        await shipper.stop()

    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        runner.run(main())
    assert seqs == [1, 2, 3]


def test_successes_and_waits_alike_go_as_one_call_each_and_a_settle_keeps_order() -> None:
    rig = Rig()
    shipper = rig.shipper
    shipper.tally_success("digits", "p", "r0", 0.01)
    shipper.tally_success("digits", "p", "r1", 0.02)
    shipper.tally_success("digits", "p", "r0", 0.03)
    shipper.wait("digits", 0.001)
    shipper.wait("digits", 0.002)
    # a record of r0 that is not a success: r0's tallied successes go first, r1's wait
    shipper.settle("r0")
    shipper.calls.append(Call("fleet", "attempt", ("digits", "p", "r0")))
    shipper.tally_success("digits", "p", "r0", 0.04)
    batch = shipper.ship()
    assert [(c.target, c.method, c.args) for c in batch.calls] == [
        ("fleet", "successes", ("digits", "p", "r0", [0.01, 0.03])),
        ("fleet", "attempt", ("digits", "p", "r0")),
        ("fleet", "successes", ("digits", "p", "r1", [0.02])),
        ("fleet", "successes", ("digits", "p", "r0", [0.04])),
        ("metrics", "queued_all", ("digits", [0.001, 0.002])),
    ]
    assert shipper.successes == {} and shipper.waits == {}
    assert shipper.ship().calls == []
