"""The fallback layer: the primary path gets the deadline minus the reserve (on the clock);
when it cannot answer, the verified in-process model does, degraded."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from gateway.errors import DeadlineExceeded, NoQuorum, UpstreamFailed
from gateway.fallback.model import FallbackModel
from gateway.v2.codec import decode_outputs
from tests.gateway.fakes import hang, reply
from tests.gateway.pipeline.rig import Rig
from tests.gateway.pipeline.votes import (
    MANIFEST,
    MODEL,
    answer,
    by_pool,
    verified_fallback,
    vote_call,
    vote_config,
)
from tests.gateway.telemetry.test_metrics import scrape, value
from tests.support.virtual_time import VirtualClock

FALLBACK = "digits-logreg"


async def test_no_quorum_falls_back_degraded() -> None:
    clock = VirtualClock()
    rig = Rig(
        vote_config(fallback={"model": FALLBACK}),
        by_pool({"a": reply(200, answer(1)), "b": reply(500), "c": reply(500)}),
        fallbacks={FALLBACK: await verified_fallback(clock)},
        clock=clock,
    )
    result = await rig.pipeline.handler(vote_call(rig))
    assert result.served_by == f"fallback/{FALLBACK}" and result.degraded == "no_quorum"
    assert decode_outputs(result.body, result.header_length)["label"].shape == (1,)
    head = result.body[: int(result.header_length)] if result.header_length else result.body
    assert orjson.loads(head)["parameters"] == {
        "degraded": "no_quorum",
        "served_by": f"fallback/{FALLBACK}",
    }
    samples = scrape(rig.metrics)
    assert value(samples, "gateway_fallbacks_total", model=MODEL, reason="no_quorum") == 1


async def test_the_primary_path_gets_the_deadline_minus_the_reserve() -> None:
    clock = VirtualClock()
    rig = Rig(
        vote_config(fallback={"model": FALLBACK, "reserve_ms": 300}),
        by_pool({k: hang() for k in "abc"}),
        fallbacks={FALLBACK: await verified_fallback(clock)},
        clock=clock,
    )
    started = clock.now()
    result = await rig.pipeline.handler(vote_call(rig, timeout_s=2.0))
    assert result.degraded == "deadline" and clock.now() - started == pytest.approx(1.7)


async def test_without_a_fallback_for_the_reason_the_primary_time_out_is_a_504() -> None:
    clock = VirtualClock()
    rig = Rig(
        vote_config(fallback={"model": FALLBACK, "reserve_ms": 300, "on": ["no_quorum"]}),
        by_pool({k: hang() for k in "abc"}),
        fallbacks={FALLBACK: await verified_fallback(clock)},
        clock=clock,
    )
    started = clock.now()
    with pytest.raises(DeadlineExceeded, match="did not answer in time"):
        await rig.pipeline.handler(vote_call(rig, timeout_s=2.0))
    assert clock.now() - started == pytest.approx(1.7)


async def test_fallback_is_refused_when_tampered(tmp_path: Path) -> None:
    for name in ("MANIFEST.json", f"{FALLBACK}.onnx", "digits-golden.json"):
        (tmp_path / name).write_bytes((MANIFEST.parent / name).read_bytes())
    model_file = tmp_path / f"{FALLBACK}.onnx"
    data = bytearray(model_file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    model_file.write_bytes(bytes(data))
    clock = VirtualClock()
    model = FallbackModel(tmp_path / "MANIFEST.json", FALLBACK, clock)
    status = await model.verify()
    assert not status.ok and "sha256 mismatch" in status.reason
    rig = Rig(
        vote_config(fallback={"model": FALLBACK}),
        by_pool({k: reply(500) for k in "abc"}),
        fallbacks={FALLBACK: model},
        clock=clock,
    )
    with pytest.raises((NoQuorum, UpstreamFailed)):
        await rig.pipeline.handler(vote_call(rig))


async def test_the_fallback_decodes_the_request_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import threading

    from gateway.pipeline import fallback as layer
    from gateway.v2.codec import decode_inputs as real

    threads: list[int] = []

    def watched(body: bytes, header_length: str | None) -> dict[str, object]:
        threads.append(threading.get_ident())
        return real(body, header_length)

    monkeypatch.setattr(layer, "decode_inputs", watched)
    clock = VirtualClock()
    rig = Rig(
        vote_config(fallback={"model": FALLBACK}),
        by_pool({"a": reply(500), "b": reply(500), "c": reply(500)}),
        fallbacks={FALLBACK: await verified_fallback(clock)},
        clock=clock,
    )
    result = await rig.pipeline.handler(vote_call(rig))
    assert result.served_by == f"fallback/{FALLBACK}"
    assert threads and threads[0] != threading.get_ident()
