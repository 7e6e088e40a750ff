"""The outbox: writes while the peer reads, holds within bounds while it does not."""

from __future__ import annotations

from typing import Any

from gateway.snapshot.outbox import WRITE_HIGH_WATER, Outbox


class FakeTransport:
    """Records writes; pauses its outbox past ``high`` bytes, as asyncio's transports do."""

    def __init__(self, outbox: Outbox, high: int = 10) -> None:
        self.outbox = outbox
        self.high = high
        self.written: list[bytes] = []
        self.limits: dict[str, Any] = {}

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.limits = {"high": high, "low": low}

    def write(self, data: bytes | bytearray) -> None:
        self.written.append(bytes(data))
        if sum(map(len, self.written)) > self.high:
            self.outbox.pause()


def attached(outbox: Outbox, high: int = 10) -> FakeTransport:
    transport = FakeTransport(outbox, high)
    outbox.attach(transport)  # type: ignore[arg-type]
    return transport


def test_frames_go_out_at_once_while_the_peer_reads() -> None:
    outbox = Outbox(4, 100, drop_oldest=True)
    transport = attached(outbox, high=100)
    assert transport.limits["high"] == WRITE_HIGH_WATER
    assert outbox.put(b"a") and outbox.put(b"b", "snapshot")
    assert transport.written == [b"a", b"b"]
    assert outbox.held == 0


def test_frames_are_held_while_detached_and_flushed_in_order_on_attach() -> None:
    outbox = Outbox(4, 100, drop_oldest=True)
    for frame in (b"1", b"2", b"3"):
        outbox.put(frame)
    assert (outbox.held, outbox.held_bytes) == (3, 3)
    transport = attached(outbox, high=100)
    assert transport.written == [b"1", b"2", b"3"]
    assert outbox.held == 0


def test_the_oldest_are_dropped_past_the_bounds_when_allowed() -> None:
    outbox = Outbox(3, 100, drop_oldest=True)
    for frame in (b"1", b"2", b"3", b"4", b"5"):
        assert outbox.put(frame)
    assert outbox.dropped == 2
    transport = attached(outbox, high=100)
    assert transport.written == [b"3", b"4", b"5"]
    outbox.detach()
    assert outbox.put(b"x" * 150)  # alone over the byte bound: dropped too
    assert (outbox.held, outbox.dropped) == (0, 3)


def test_past_the_bound_without_dropping_the_put_says_so() -> None:
    outbox = Outbox(2, 100, drop_oldest=False)
    assert outbox.put(b"1") and outbox.put(b"2")
    assert not outbox.put(b"3")
    assert outbox.dropped == 0


def test_a_frame_of_a_kind_replaces_the_held_one_of_that_kind() -> None:
    outbox = Outbox(2, 100, drop_oldest=False)
    outbox.put(b"s1", "snapshot")
    outbox.put(b"drain")
    for n in range(2, 50):
        assert outbox.put(f"s{n}".encode(), "snapshot")
    assert (outbox.held, outbox.replaced) == (2, 48)
    transport = attached(outbox, high=100)
    assert transport.written == [b"drain", b"s49"]


def test_a_pause_holds_and_a_resume_flushes_until_paused_again() -> None:
    outbox = Outbox(10, 100, drop_oldest=True)
    transport = attached(outbox, high=3)
    outbox.put(b"1234")  # past the transport's high water: paused
    outbox.put(b"a")
    outbox.put(b"b")
    assert transport.written == [b"1234"] and outbox.held == 2
    transport.written.clear()
    outbox.resume()
    assert transport.written == [b"a", b"b"]
