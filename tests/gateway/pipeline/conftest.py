"""The pipeline's tests run on virtual time: a `VirtualTimeLoop`, on which idle time is skipped.

Every wait in the pipeline (backoff, per-try timeout, hedge delay, deadline, fallback reserve,
straggler grace) is a timer of the rig's `VirtualClock`, so a test never sleeps for real and
its course depends on the order of timers only, not on this machine's speed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest

from tests.support.virtual_time import VirtualTimeLoop


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], VirtualTimeLoop]]:
    return {"virtual_time": VirtualTimeLoop}
