from __future__ import annotations

import pytest

from gateway.telemetry.tracecontext import (
    RootSampler,
    TraceParent,
    clean_tracestate,
    format_traceparent,
    new_span_id,
    new_trace_id,
    parse_traceparent,
)

TRACE = "0af7651916cd43dd8448eb211c80319c"
SPAN = "b7ad6b7169203331"


def test_a_valid_traceparent_is_parsed() -> None:
    assert parse_traceparent(f"00-{TRACE}-{SPAN}-01") == TraceParent(TRACE, SPAN, True)
    assert parse_traceparent(f"00-{TRACE}-{SPAN}-00") == TraceParent(TRACE, SPAN, False)
    assert parse_traceparent(f"00-{TRACE}-{SPAN}-03") == TraceParent(TRACE, SPAN, True)
    assert parse_traceparent(f" 00-{TRACE}-{SPAN}-01\t") == TraceParent(TRACE, SPAN, True)


def test_a_future_version_may_carry_more_fields() -> None:
    assert parse_traceparent(f"01-{TRACE}-{SPAN}-01-extra") == TraceParent(TRACE, SPAN, True)


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "garbage",
        f"00-{TRACE}-{SPAN}-01-extra",  # version 00 has exactly four fields
        f"ff-{TRACE}-{SPAN}-01",  # forbidden version
        f"00-{'0' * 32}-{SPAN}-01",  # all-zero trace id
        f"00-{TRACE}-{'0' * 16}-01",  # all-zero span id
        f"00-{TRACE.upper()}-{SPAN}-01",  # upper-case hex
        f"00-{TRACE[:-1]}-{SPAN}-01",
        f"00_{TRACE}_{SPAN}_01",
        f"01-{TRACE}-{SPAN}-01x",
    ],
)
def test_an_invalid_traceparent_is_ignored(value: str | None) -> None:
    assert parse_traceparent(value) is None


def test_ids_are_lowercase_hex_of_the_right_length_and_written_back_as_w3c() -> None:
    trace_id, span_id = new_trace_id(), new_span_id()
    assert len(trace_id) == 32 and len(span_id) == 16
    assert trace_id != "0" * 32 and span_id != "0" * 16
    assert int(trace_id, 16) >= 0 and trace_id == trace_id.lower()
    header = format_traceparent(trace_id, span_id, True)
    assert parse_traceparent(header) == TraceParent(trace_id, span_id, True)
    assert format_traceparent(trace_id, span_id, False).endswith("-00")
    assert len({new_span_id() for _ in range(1000)}) == 1000


def test_tracestate_is_forwarded_unless_over_the_limit() -> None:
    assert clean_tracestate("congo=t61rcWkgMzE") == "congo=t61rcWkgMzE"
    assert clean_tracestate("x" * 600) is None
    assert clean_tracestate(None) is None


def test_the_sampler_follows_the_parent_else_keeps_a_ratio_of_traces() -> None:
    parent_off = TraceParent(TRACE, SPAN, False)
    assert RootSampler(1.0).sampled(TRACE, None)
    assert not RootSampler(1.0).sampled(TRACE, parent_off)
    assert not RootSampler(0.0).sampled(TRACE, None)
    assert RootSampler(0.0).sampled(TRACE, TraceParent(TRACE, SPAN, True))
    half = RootSampler(0.5)
    kept = sum(half.sampled(new_trace_id(), None) for _ in range(4000))
    assert 1700 < kept < 2300
    assert half.sampled("f" * 16 + "0" * 16, None)  # decided by the low 64 bits, as the SDK
    assert not half.sampled("0" * 16 + "f" * 16, None)
    with pytest.raises(ValueError):
        RootSampler(1.5)
