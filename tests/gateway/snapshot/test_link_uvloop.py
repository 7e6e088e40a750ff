"""The workers run on uvloop: the link's real-socket scenarios again, on its loop (its
transports' flow control and write buffers are its own, not asyncio's)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
import uvloop

from tests.gateway.snapshot import test_backpressure, test_link

SCENARIOS = [
    test_link.test_a_worker_is_welcomed_gets_snapshots_and_ships_batches,
    test_link.test_a_worker_reconnects_after_control_restarts_and_keeps_what_it_could,
    test_link.test_garbage_closes_only_its_own_connection_and_is_counted,
    test_backpressure.test_a_control_that_stops_reading_never_holds_up_the_request_path,
    test_backpressure.test_a_worker_that_stops_reading_gets_the_newest_snapshot_only,
    test_backpressure.test_a_worker_that_stops_reading_is_cut_off_past_the_hard_bound,
]


# A scenario that fails leaves transports open; uvloop's close then warns, and with warnings
# as errors its close never returns. Leaks are caught by the same scenarios on asyncio's loop.
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__.removeprefix("test_"))
def test_on_uvloop(scenario: Callable[[], Awaitable[None]]) -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(scenario())  # type: ignore[arg-type]
