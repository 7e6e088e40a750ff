from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.fallback.model import FallbackModel
from gateway.fallback.watcher import FallbackWatcher
from tests.gateway.fallback.support import NAME, tamper
from tests.support.clock import FakeClock


async def test_first_check_verifies_then_only_when_due(
    model: FallbackModel, clock: FakeClock
) -> None:
    watcher = FallbackWatcher(model, clock, interval_s=60, poll_s=1)
    assert await watcher.check() and model.ok
    clock.advance(30)
    assert not await watcher.check()
    clock.advance(30)
    assert await watcher.check()
    assert model.verifications == 2


async def test_a_file_change_is_picked_up_at_the_next_poll(
    model: FallbackModel, clock: FakeClock, fallback_dir: Path
) -> None:
    watcher = FallbackWatcher(model, clock, interval_s=3600, poll_s=1)
    await watcher.check()
    assert model.ok
    tamper(fallback_dir / f"{NAME}.onnx")
    clock.advance(1)
    assert await watcher.check()
    assert not model.ok and model.status.reason.startswith("sha256 mismatch")
    assert model.status.checked_at == clock.wall()


async def test_a_manifest_change_is_picked_up(
    model: FallbackModel, clock: FakeClock, fallback_dir: Path
) -> None:
    watcher = FallbackWatcher(model, clock, interval_s=3600)
    await watcher.check()
    manifest = fallback_dir / "MANIFEST.json"
    manifest.write_text(manifest.read_text().replace('"sha256": "7c', '"sha256": "00'))
    assert await watcher.check()
    assert not model.ok and "sha256 mismatch: manifest 00" in model.status.reason


async def test_the_loop_polls_on_the_injected_clock(
    model: FallbackModel, clock: FakeClock, fallback_dir: Path
) -> None:
    watcher = FallbackWatcher(model, clock, interval_s=10, poll_s=2)
    watcher.start()
    try:
        assert await spin_until(lambda: model.verifications == 2)
        assert model.ok and watcher.checks == 6  # polls at 0, 2, ... 10 s; verified at 0 and 10
        assert set(clock.slept) == {2}
        tamper(fallback_dir / f"{NAME}.onnx")
        assert await spin_until(lambda: not model.ok)
        assert model.status.reason.startswith("sha256 mismatch")
    finally:
        await watcher.stop()
    checks = watcher.checks
    await asyncio.sleep(0)
    assert watcher.checks == checks


async def test_periodic_checks_log_only_changes(
    model: FallbackModel, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.fallback")
    watcher = FallbackWatcher(model, clock, interval_s=5, poll_s=5)
    for _ in range(4):
        assert await watcher.check()
        clock.advance(5)
    assert model.verifications == 4
    assert [r.getMessage() for r in caplog.records] == [
        f"fallback {NAME} is available: {model.status.reason}"
    ]


async def spin_until(condition: Callable[[], bool], turns: int = 1000) -> bool:
    """Lets other tasks run (no real time passes) until ``condition`` holds."""
    for _ in range(turns):
        if condition():
            return True
        await asyncio.sleep(0)
    return condition()


def test_intervals_must_be_positive(model: FallbackModel, clock: FakeClock) -> None:
    with pytest.raises(ValueError):
        FallbackWatcher(model, clock, interval_s=0)
