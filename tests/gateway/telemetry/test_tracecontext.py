from __future__ import annotations

import pytest

from gateway.telemetry.tracecontext import (
    RootSampler,
    TraceParent,
    clean_traceparent,
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


def test_a_future_versions_extra_fields_must_be_printable() -> None:
    assert parse_traceparent(f"01-{TRACE}-{SPAN}-01-a b~") == TraceParent(TRACE, SPAN, True)
    for bad in ("\x00", "\x7f", "\x0b", "\r\nx-evil: 1", "é"):
        assert parse_traceparent(f"01-{TRACE}-{SPAN}-01-{bad}") is None, repr(bad)


def test_a_valid_traceparent_is_forwarded_as_it_came_and_an_invalid_one_not_at_all() -> None:
    header = f"00-{TRACE}-{SPAN}-01"
    assert clean_traceparent(header) == header
    assert clean_traceparent(f" {header}\t") == header
    assert clean_traceparent(f"{header}\r\nx-evil: 1") is None
    assert clean_traceparent(f"{header}\x00") is None
    assert clean_traceparent(None) is None


@pytest.mark.parametrize(
    ("value", "forwarded"),
    [
        ("congo=t61rcWkgMzE", "congo=t61rcWkgMzE"),
        ("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"),
        ("rojo=1 ,\t congo=2", "rojo=1,congo=2"),  # whitespace around members is not kept
        ("rojo=1,,  ,congo=2,", "rojo=1,congo=2"),  # nor empty members
        ("tenant@vendor=1,a_b-c*d/e=2,0k=3", "tenant@vendor=1,a_b-c*d/e=2,0k=3"),
        ("k= leading spaces stay", "k= leading spaces stay"),
        ("k=!~\"#$%&'()*+-./:;<>?@[]^_`{|}", "k=!~\"#$%&'()*+-./:;<>?@[]^_`{|}"),
        ("k=" + "v" * 256, "k=" + "v" * 256),
        (",".join(f"k{i}=v" for i in range(32)), ",".join(f"k{i}=v" for i in range(32))),
    ],
)
def test_a_valid_tracestate_is_forwarded(value: str, forwarded: str) -> None:
    assert clean_tracestate(value) == forwarded


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        " , ,",
        "a=b\r\nx-evil: 1",  # CR/LF: header injection (and an HTTP/1.1 client's refusal)
        "a=b\nc",
        "a=b\x00c",  # NUL, VT, DEL, other controls
        "a=b\x0bc",
        "a=b\x7fc",
        "a=b\tc",  # a tab is whitespace between members only
        "a=\xe9",  # not ASCII
        "a=é",
        "x" * 600,  # over 512 characters
        "k=" + "v" * 257,  # a value over 256 characters
        "k" * 257 + "=v",  # a key over 256
        ",".join(f"k{i}=v" for i in range(33)),  # 33 members
        "a=1,a=2",  # a key twice
        "novalue",
        "k=",
        "k=   ",  # a value ends in a non-space
        "k=a=b",
        "K=v",  # keys are lower-case
        "_k=v",
        "-k=v",
        "k v=1",
        "a=1,bad",  # one bad member drops the whole header
    ],
)
def test_a_tracestate_that_is_not_w3c_is_dropped_whole(value: str | None) -> None:
    assert clean_tracestate(value) is None


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
