from __future__ import annotations

from gateway.slo.window import COARSE_S, FINE_S, Counts, SloWindow
from tests.support.clock import FakeClock

DAY = 86_400.0


def test_counts_good_total_degraded_in_a_window() -> None:
    clock = FakeClock()
    window = SloWindow(clock, 30 * DAY)
    window.add(good=True)
    window.add(good=False)
    window.add(good=True, degraded=True)
    assert window.counts(300) == Counts(good=2, total=3, degraded=1)
    assert window.counts(30 * DAY) == Counts(good=2, total=3, degraded=1)


def test_events_leave_a_window_once_their_bucket_starts_before_it() -> None:
    clock = FakeClock()  # wall time starts on a bucket boundary
    window = SloWindow(clock, 30 * DAY)
    window.add(good=False)
    clock.advance(300 - FINE_S)
    assert window.counts(300).total == 1
    clock.advance(FINE_S)
    assert window.counts(300).total == 0  # the bucket now starts exactly 5 min ago
    assert window.counts(3600).total == 1
    clock.advance(6 * 3600)
    assert window.counts(6 * 3600).total == 0
    assert window.counts(7 * 3600).total == 1  # coarse buckets beyond an hour


def test_memory_stays_bounded_over_a_long_run() -> None:
    clock = FakeClock()
    window = SloWindow(clock, 30 * DAY)
    for _ in range(40 * 24 * 12):  # 40 days, one event every 5 min
        window.add(good=True)
        clock.advance(COARSE_S)
    fine_max = 3600 // FINE_S + 2
    coarse_max = 30 * DAY // COARSE_S + 2
    assert window.bucket_count() <= fine_max + coarse_max
    # the window holds the buckets that start inside it: the oldest event has just left
    assert window.counts(30 * DAY).total == 30 * 24 * 12 - 1


def test_deltas_are_exported_once_and_keep_the_current_bucket_open() -> None:
    clock = FakeClock()
    window = SloWindow(clock, 30 * DAY)
    window.add(good=True)
    window.add(good=False, degraded=True)
    first = {(d.tag, d.start): d.counts for d in window.take_deltas()}
    start = int(clock.wall())
    assert first == {("f", start): Counts(1, 2, 1), ("c", start): Counts(1, 2, 1)}
    assert window.take_deltas() == []
    window.add(good=True)
    again = {(d.tag, d.start): d.counts for d in window.take_deltas()}
    assert again == {("f", start): Counts(1, 1, 0), ("c", start): Counts(1, 1, 0)}
    deltas = {d.tag: d for d in window.take_deltas()}
    assert deltas == {}


def test_delta_expiry_outlives_the_longest_window_reading_it() -> None:
    clock = FakeClock()
    window = SloWindow(clock, 30 * DAY)
    window.add(good=True)
    by_tag = {d.tag: d for d in window.take_deltas()}
    assert by_tag["f"].expire_at > clock.wall() + 3600
    assert by_tag["c"].expire_at > clock.wall() + 30 * DAY


def test_remote_counts_add_to_local_and_replace_each_other() -> None:
    clock = FakeClock()
    window = SloWindow(clock, 30 * DAY)
    window.add(good=True)
    start = int(clock.wall())
    window.set_remote("f", start, "t", 10)
    window.set_remote("f", start, "g", 7)
    assert window.counts(300) == Counts(good=8, total=11)
    window.set_remote("f", start, "t", 12)  # a newer total replaces the old one
    assert window.counts(300) == Counts(good=8, total=13)
    window.set_remote("f", start + 3, "t", 99)  # not a bucket start: ignored
    window.set_remote("x", start, "t", 99)  # unknown resolution: ignored
    assert window.counts(300).total == 13
    window.clear_remote()
    assert window.counts(300) == Counts(good=1, total=1)


def test_cached_sums_see_late_changes_to_closed_buckets() -> None:
    clock = FakeClock()
    window = SloWindow(clock, 30 * DAY)
    window.add(good=True)
    old_start = int(clock.wall())
    clock.advance(4 * 3600)
    window.add(good=False)
    assert window.counts(300) == Counts(0, 1, 0)
    assert window.counts(6 * 3600) == Counts(1, 2, 0)  # now cached until the bucket changes
    window.set_remote("c", old_start, "t", 5)  # another instance's late push
    window.set_remote("c", old_start, "g", 5)
    assert window.counts(6 * 3600) == Counts(6, 7, 0)
    window.clear_remote()
    assert window.counts(6 * 3600) == Counts(1, 2, 0)
    window.add(good=True)  # the current bucket is never cached
    assert window.counts(6 * 3600) == Counts(2, 3, 0)
