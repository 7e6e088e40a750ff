"""Differential test of the reply parser against h11, the reference, on generated replies.

Hypothesis builds replies (interim 1xx answers, Content-Length, chunked with extensions and
trailers, close-delimited bodies, bad framing, truncation, bytes after the reply) and splits them
at every byte or at random points. `Connection` and h11 must agree on status, headers and body,
or both refuse; the only differences allowed are the rules the gateway adds on purpose (`_POLICY`).
Bounded and derandomized, so it is deterministic and takes a few seconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import h11
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gateway.upstream.transport.limits import ReplyLimits
from tests.gateway.upstream.wire import Result, exchange

EXAMPLES = 1000
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Rules where the gateway refuses a reply that h11 accepts; each is a misbehaving replica.
_POLICY = {
    "close-delimited 2xx": "a cut-short 2xx would pass for a whole one",
    "repeated Content-Length": "llhttp refuses even equal repeats (RFC 9110 8.6 allows either)",
    "Transfer-Encoding with Content-Length": "a smuggling sign (RFC 9112 6.3): refused",
    "interim that closes": "a 1xx cannot end the exchange; llhttp stops parsing",
    "interim with framing": "RFC 9110 forbids it; llhttp reads a body after a 150 or a 199",
    "framing in trailers": "RFC 9110 6.5.1 forbids it; llhttp refuses it",
}

NAMES = ["Content-Type", "X-Twice", "x-twice", "Server", "Link", "Set-Cookie", "X-A"]
VALUES = [
    "",
    "  ",
    "v",
    "a b",
    " padded ",
    "\tx\t",
    "1, 2",
    'q="x, y"',
    "caf\xe9",
    "</a>; rel=preload",
    "text/plain; charset=utf-8",
    "k=v; Path=/",
    "HTTP/1.1 200 OK",
    "0",
]
VALID = ["length"] * 4 + ["chunked"] * 3 + ["eof"] * 2
BAD = [
    "conflicting length",
    "repeated length",
    "listed length",
    "invalid length",
    "length and chunked",
    "gzip",
    "gzip, chunked",
    "bad chunk size",
    "chunk without CRLF",
]

# Strategies are built once: hypothesis validates each new one, which costs more than drawing.
FIELD = st.tuples(st.sampled_from(NAMES), st.sampled_from(VALUES))
FIELDS, FEW_FIELDS = st.lists(FIELD, max_size=4), st.lists(FIELD, max_size=2)
INTERIM_STATUS = st.sampled_from([100, 100, 102, 103, 103, 150, 199])
INTERIM_FRAMING = st.sampled_from([("Content-Length", "5"), ("Transfer-Encoding", "chunked")])
FINAL_STATUS = st.sampled_from([200, 201, 204, 206, 299, 304, 400, 404, 500, 503, 599])
VERSION = st.sampled_from(["1.1", "1.1", "1.1", "1.0"])
CONNECTION = st.sampled_from([[], [], [("Connection", "close")], [("Connection", "keep-alive")]])
BODY = st.binary(max_size=40) | st.binary(min_size=100, max_size=300)
VALID_FRAMINGS, ALL_FRAMINGS = st.sampled_from(VALID), st.sampled_from(VALID + BAD)
LENGTH_FORMAT = st.sampled_from(["%d", " %d ", "0%d"])
BAD_LENGTH = st.sampled_from(["abc", "-1", "1.5", "+1", "0x10", "1 2", ""])
CHUNKED = st.sampled_from(["chunked", "Chunked"])
SIZE_FORMAT = st.sampled_from(["%x", "%X", "00%x"])
EXTENSION = st.sampled_from(["", "", ";a=b", ';n="v w"', ";x"])
LAST_CHUNK = st.sampled_from([b"0", b"0;end", b"000"])
BAD_SIZE = st.sampled_from(["zz", "-1", "", "1" * 17, "g", "0x1"])
ENDING = st.sampled_from(["whole"] * 4 + ["cut", "after"])
AFTER = st.sampled_from([b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nold", b"junk"])
SPLIT = st.sampled_from(["whole", "every byte", "random", "random"])
ODDS, POSITION = st.integers(0, 39), st.integers(0, 1 << 16)
CHUNK_CUTS, READ_CUTS = st.lists(POSITION, max_size=4), st.lists(POSITION, max_size=12)


@dataclass(frozen=True)
class Case:
    wire: bytes
    head: bool  # the request was HEAD
    policy: str | None  # a `_POLICY` rule that applies, if any
    clean: bool  # a valid reply with nothing after it: keep-alive must match h11's


@dataclass(frozen=True)
class Part:
    """One reply (interim or final) as generated."""

    wire: bytes
    head_size: int
    policy: str | None = None  # the `_POLICY` rule it breaks, if any
    tidy: bool = True  # no bytes after a reply that has no body


def _head(start: str, items: list[tuple[str, str]]) -> bytes:
    lines = [start, *(f"{name}:{value}" for name, value in items)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


@st.composite
def interim(draw: st.DrawFn, valid: bool) -> Part:
    status = draw(INTERIM_STATUS)
    items = draw(FEW_FIELDS)
    policy = None
    odd = 0 if valid else draw(ODDS)
    if odd == 1:
        items.append(("Connection", "close"))
        policy = "interim that closes"
    elif odd == 2:
        items.append(draw(INTERIM_FRAMING))
        policy = "interim with framing"
    wire = _head(f"HTTP/1.1 {status} Interim", items)
    return Part(wire, len(wire), policy)


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    """``data`` cut at the given offsets (taken modulo its length), in order, no empty piece."""
    if not data:
        return []
    points = sorted({c % len(data) for c in cuts} - {0})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


@st.composite
def chunked(draw: st.DrawFn, body: bytes, valid: bool) -> bytes:
    out = []
    for piece in _split(body, draw(CHUNK_CUTS)):
        size = draw(SIZE_FORMAT) % len(piece)
        out.append(f"{size}{draw(EXTENSION)}\r\n".encode() + piece + b"\r\n")
    out.append(draw(LAST_CHUNK) + b"\r\n")
    trailers = draw(FEW_FIELDS)
    if not valid and draw(ODDS) == 0:
        trailers.append(("Content-Length", "5"))  # "framing in trailers"
    out.append(_head("", trailers)[2:])  # the trailer fields, then the empty line
    return b"".join(out)


Fields = list[tuple[str, str]]
Framed = tuple[Fields, bytes, str | None]  # the framing fields, the body as sent, the policy


def _length(draw: st.DrawFn, body: bytes, valid: bool, close_2xx: bool) -> Framed:
    return [("Content-Length", draw(LENGTH_FORMAT) % len(body))], body, None


def _chunked(draw: st.DrawFn, body: bytes, valid: bool, close_2xx: bool) -> Framed:
    return [("Transfer-Encoding", draw(CHUNKED))], draw(chunked(body, valid)), None


def _eof(draw: st.DrawFn, body: bytes, valid: bool, close_2xx: bool) -> Framed:
    return [], body, "close-delimited 2xx" if close_2xx else None


def _conflicting(draw: st.DrawFn, body: bytes, valid: bool, close_2xx: bool) -> Framed:
    return [("Content-Length", str(len(body))), ("Content-Length", str(len(body) + 1))], body, None


def _repeated(draw: st.DrawFn, body: bytes, valid: bool, close_2xx: bool) -> Framed:
    return [("Content-Length", str(len(body)))] * 2, body, "repeated Content-Length"


def _listed(draw: st.DrawFn, body: bytes, valid: bool, close_2xx: bool) -> Framed:
    return [("Content-Length", f"{len(body)}, {len(body)}")], body, "repeated Content-Length"


def _invalid_length(draw: st.DrawFn, body: bytes, valid: bool, close_2xx: bool) -> Framed:
    return [("Content-Length", draw(BAD_LENGTH))], body, None


def _length_and_chunked(draw: st.DrawFn, body: bytes, valid: bool, close_2xx: bool) -> Framed:
    framed = [("Transfer-Encoding", "chunked"), ("Content-Length", str(len(body)))]
    return framed, draw(chunked(body, valid)), "Transfer-Encoding with Content-Length"


def _gzip(draw: st.DrawFn, body: bytes, valid: bool, close_2xx: bool) -> Framed:
    return [("Transfer-Encoding", "gzip")], body, None


def _gzip_chunked(draw: st.DrawFn, body: bytes, valid: bool, close_2xx: bool) -> Framed:
    return [("Transfer-Encoding", "gzip, chunked")], body, None


def _bad_chunk_size(draw: st.DrawFn, body: bytes, valid: bool, close_2xx: bool) -> Framed:
    tail = f"{draw(BAD_SIZE)}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    return [("Transfer-Encoding", "chunked")], tail, None


def _chunk_without_crlf(draw: st.DrawFn, body: bytes, valid: bool, close_2xx: bool) -> Framed:
    tail = b"%x\r\n%sXX0\r\n\r\n" % (len(body) + 1, body + b"!")
    return [("Transfer-Encoding", "chunked")], tail, None


# a framing's name -> how a reply is framed so
FRAMINGS: dict[str, Callable[[st.DrawFn, bytes, bool, bool], Framed]] = {
    "length": _length,
    "chunked": _chunked,
    "eof": _eof,
    "conflicting length": _conflicting,
    "repeated length": _repeated,
    "listed length": _listed,
    "invalid length": _invalid_length,
    "length and chunked": _length_and_chunked,
    "gzip": _gzip,
    "gzip, chunked": _gzip_chunked,
    "bad chunk size": _bad_chunk_size,
    "chunk without CRLF": _chunk_without_crlf,
}


@st.composite
def final(draw: st.DrawFn, head: bool, valid: bool) -> Part:
    status = draw(FINAL_STATUS)
    items = draw(FIELDS) + draw(CONNECTION)
    body = draw(BODY)
    framing = draw(VALID_FRAMINGS if valid else ALL_FRAMINGS)
    bodyless = head or status in (204, 304)
    close_2xx = 200 <= status < 300 and not bodyless
    if valid and framing == "eof" and close_2xx:
        framing = "length"
    event(f"framing: {framing}")
    framed, tail, policy = FRAMINGS[framing](draw, body, valid, close_2xx)
    at = draw(POSITION) % (len(items) + 1)
    head_bytes = _head(f"HTTP/{draw(VERSION)} {status} Final", items[:at] + framed + items[at:])
    if bodyless and draw(st.booleans()):
        # what a well-behaved server sends
        tail = b""
    return Part(head_bytes + tail, len(head_bytes), policy, not (bodyless and tail))


INTERIMS = {valid: st.lists(interim(valid), max_size=2) for valid in (False, True)}
FINALS = {(head, valid): final(head, valid) for head in (False, True) for valid in (False, True)}


@st.composite
def cases(draw: st.DrawFn, valid: bool) -> Case:
    """A reply stream; ``valid``: only replies both parsers accept, nothing cut or after."""
    head = draw(ODDS) < 4  # one in ten
    parts = [*draw(INTERIMS[valid]), draw(FINALS[head, valid])]
    wire = b"".join(part.wire for part in parts)
    policy, policy_end, start = None, 0, 0
    for part in parts:  # a rule applies once the head that breaks it is whole
        if part.policy and policy is None:
            policy, policy_end = part.policy, start + part.head_size
        start += len(part.wire)
    after, cut = b"", None
    ending = "whole" if valid else draw(ENDING)
    if ending == "cut":
        cut = draw(POSITION) % (len(wire) + 1)
    elif ending == "after":  # an unsolicited reply, or junk
        after = draw(AFTER)
    if cut is not None and cut < policy_end:
        policy = None  # the breaking head never arrives whole: h11 decides
    clean = not after and cut is None and parts[-1].tidy
    event(f"interims: {len(parts) - 1}; ending: {ending}; head: {head}")
    return Case(wire[:cut] + after, head, policy, clean)


CASES, VALID_CASES = cases(valid=False), cases(valid=True)


@st.composite
def reads(draw: st.DrawFn, wire: bytes) -> list[bytes]:
    how = draw(SPLIT)
    if how == "every byte" and len(wire) > 400:
        how = "random"
    event(f"split: {how}")
    if how == "whole" or not wire:
        return [wire]
    if how == "every byte":
        return [wire[i : i + 1] for i in range(len(wire))]
    return _split(wire, draw(READ_CUTS))


# --- the reference --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    status: int
    headers: dict[str, str]
    body: bytes
    keep_alive: bool
    fields: int = 0  # header fields seen: interim replies, the final head and its trailers
    framing_trailer: bool = False  # a Content-Length or Transfer-Encoding trailer


def h11_reads(wire: bytes, head: bool) -> Verdict | None:
    """What h11 makes of ``wire`` followed by the server's close; None if it refuses it."""
    conn = h11.Connection(our_role=h11.CLIENT)
    method = b"HEAD" if head else b"POST"
    conn.send(
        h11.Request(method=method, target="/", headers=[("Host", "r"), ("Content-Length", "0")])
    )
    conn.send(h11.EndOfMessage())
    conn.receive_data(wire)
    headers: dict[str, str] = {}
    status, body, fields, closed = 0, bytearray(), 0, False
    try:
        while True:
            ev = conn.next_event()
            if ev is h11.NEED_DATA and not closed:
                conn.receive_data(b"")  # the server's close
                closed = True
                continue
            if isinstance(ev, h11.InformationalResponse | h11.Response | h11.EndOfMessage):
                fields += len(ev.headers)
            if isinstance(ev, h11.Response):
                status = ev.status_code
                for name, value in ev.headers:
                    key, text = name.decode("latin-1"), value.decode("latin-1")
                    headers[key] = f"{headers[key]}, {text}" if key in headers else text
            elif isinstance(ev, h11.Data):
                body += ev.data
            elif isinstance(ev, h11.EndOfMessage):
                keep_alive = conn.their_state is h11.DONE and not closed
                trailers = {name for name, _ in ev.headers}
                framing = bool(trailers & {b"content-length", b"transfer-encoding"})
                return Verdict(status, headers, bytes(body), keep_alive, fields, framing)
            elif not isinstance(ev, h11.InformationalResponse):
                return None  # the close came first
    except h11.RemoteProtocolError:
        return None


def _ours(result: Result) -> Verdict | None:
    if result.reply is None:
        return None
    headers = dict(result.reply.headers)
    if "transfer-encoding" in headers:
        headers["transfer-encoding"] = headers["transfer-encoding"].lower()  # as h11 does
    return Verdict(result.reply.status, headers, result.reply.body, result.reusable)


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    new = asyncio.new_event_loop()
    try:
        yield new
    finally:
        new.close()


@FUZZ
@given(data=st.data())
def test_parser_agrees_with_h11(loop: asyncio.AbstractEventLoop, data: st.DataObject) -> None:
    case = data.draw(CASES)
    result = exchange(loop, data.draw(reads(case.wire)), head=case.head)
    assert result.error is not None or result.reply is not None  # never left hanging at EOF
    ours, theirs = _ours(result), h11_reads(case.wire, case.head)
    if theirs is not None and theirs.framing_trailer:
        case = replace(case, policy="framing in trailers")
    if case.policy is not None:
        assert case.policy in _POLICY
        event(f"policy: {case.policy}")
        assert ours is None, f"accepted despite {case.policy}: {ours}"
        return
    event("agree: both refuse" if theirs is None else "agree: both accept")
    if theirs is None or ours is None:
        assert ours == theirs
        return
    assert (ours.status, ours.headers, ours.body) == (theirs.status, theirs.headers, theirs.body)
    http10_keep_alive = b"HTTP/1.0" in case.wire and b"keep-alive" in case.wire
    if ours.keep_alive and not http10_keep_alive:
        assert theirs.keep_alive, "we would reuse a connection h11 says must close"
    if case.clean and theirs.keep_alive and not case.head:
        assert ours.keep_alive, "we would drop a connection that can be reused"


@FUZZ
@given(data=st.data())
def test_caps_are_exact(loop: asyncio.AbstractEventLoop, data: st.DataObject) -> None:
    """A valid reply passes with caps equal to its size and fails one below, naming the cap."""
    case = data.draw(VALID_CASES)
    theirs = h11_reads(case.wire, case.head)
    assert theirs is not None and case.policy is None
    chunks = data.draw(reads(case.wire))
    size, fields = len(theirs.body), theirs.fields
    if size:
        at = exchange(loop, chunks, head=case.head, limits=ReplyLimits(max_reply_body_bytes=size))
        assert at.reply is not None
        over = ReplyLimits(max_reply_body_bytes=size - 1)
        error = exchange(loop, chunks, head=case.head, limits=over).error
        assert error is not None and "max_reply_body_bytes" in str(error)
    if fields:
        limits = ReplyLimits(max_reply_header_count=fields)
        assert exchange(loop, chunks, head=case.head, limits=limits).reply is not None
        over = ReplyLimits(max_reply_header_count=fields - 1)
        error = exchange(loop, chunks, head=case.head, limits=over).error
        assert error is not None and "max_reply_header_count" in str(error)
