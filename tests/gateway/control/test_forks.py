"""`ForkedChild`: a child process watched through its pidfd, reaped with its exit status,
signalled through the pidfd (the fork server's workers are such children: `test_workers`
covers the whole path on a real gateway)."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from gateway.control.forks import ForkedChild

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs Linux pidfds")


def fork(then_exit: int | None) -> int:
    """A child that exits with ``then_exit`` at once, or waits for a signal (None)."""
    pid = os.fork()
    if pid == 0:
        if then_exit is None:
            signal.pause()
        os._exit(then_exit or 0)
    return pid


def our_zombie(pid: int) -> bool:
    """Whether ``pid`` is a child of this process that exited and was not reaped."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return False
    return fields[0] == "Z" and int(fields[1]) == os.getpid()


async def test_an_exited_child_is_reaped_with_its_code() -> None:
    child = ForkedChild(fork(7))
    assert await asyncio.wait_for(child.wait(), 10) == 7
    assert child.returncode == 7
    # reaped: no zombie left
    assert not our_zombie(child.pid)


async def test_a_signal_reaches_the_child_and_none_after_it_was_reaped() -> None:
    child = ForkedChild(fork(None))
    assert child.returncode is None
    child.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(child.wait(), 10) == -signal.SIGTERM
    with pytest.raises(ProcessLookupError):
        # its PID may be another process's by now
        child.send_signal(signal.SIGKILL)


async def test_two_waiters_both_get_the_code() -> None:
    child = ForkedChild(fork(3))
    codes = await asyncio.wait_for(asyncio.gather(child.wait(), child.wait()), 10)
    assert list(codes) == [3, 3]
