"""A pool's record for the fault judge: its error streak, and when each input was refused."""

from __future__ import annotations

from gateway.faults.record import KEPT_TIMES, FaultRecord
from tests.support.clock import FakeClock


def test_the_streak_counts_error_answers_since_the_last_good_one() -> None:
    record = FaultRecord(FakeClock())
    record.failed()
    record.refused("x", 500)
    assert record.view(1).error_streak == 2 and record.view(1).working
    record.failed()
    record.failed()
    assert not record.view(1).working  # four in a row: broken
    record.answered()
    assert record.view(1).error_streak == 0


def test_refusals_of_an_input_are_seen_within_the_window_only() -> None:
    clock = FakeClock()
    record = FaultRecord(clock)
    record.refused("x", 500)
    clock.advance(599)
    record.refused("x", 500)
    record.refused("x", 400)  # another status: another count
    record.refused("y", 500)
    view = record.view(1, [("x", 500), ("x", 400)])
    assert (view.sightings("x", 500), view.sightings("x", 400), view.sightings("y", 500)) == (
        2,
        1,
        0,  # y was not asked for
    )
    clock.advance(2)  # the first refusal of x is now older than the window
    assert record.view(1, [("x", 500)]).sightings("x", 500) == 1


def test_an_unnamed_input_counts_in_the_streak_only() -> None:
    record = FaultRecord(FakeClock())
    record.refused("", 500)
    record.refused("", 500)
    view = record.view(1, [("", 500)])
    assert view.error_streak == 2 and view.sightings("", 500) == 0


def test_the_record_is_bounded() -> None:
    record = FaultRecord(FakeClock(), max_inputs=2)
    for _ in range(KEPT_TIMES + 5):
        record.refused("a", 500)
    record.refused("b", 500)
    record.refused("a", 500)  # a is now the most recently refused
    record.refused("c", 500)  # b, the least recently refused, is forgotten
    view = record.view(1, [("a", 500), ("b", 500), ("c", 500)])
    assert [view.sightings(i, 500) for i in "abc"] == [KEPT_TIMES, 0, 1]
