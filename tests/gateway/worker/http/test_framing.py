"""Differential test of the lean server's request framing against h11, the reference parser.

Each case is fed whole and one byte at a time (`wire.serve_bytes`); the server and h11 must
agree on the verdict (served, or refused) and on what each request was (method, target,
headers, body). Where they differ on purpose the case names its rule in `_POLICY`: each is a
refusal stricter than h11's (RFC 9112 lets a server refuse all of them), or a rule of RFC
9112 that h11 does not follow.
"""

from __future__ import annotations

import re

import h11
import pytest

from tests.gateway.worker.http.wire import Outcome, serve_bytes

Request = tuple[str, bytes, tuple[tuple[bytes, bytes], ...], bytes]

_POLICY = {
    "length with chunked": "a smuggling sign (RFC 9112 6.3 lets a server refuse it): 400",
    "repeated length": "llhttp refuses equal repeats too (RFC 9110 8.6 allows either): 400",
    "length list": "llhttp refuses a list, even of equal values: 400",
    "obs-fold": "RFC 9112 5.2 lets a server refuse a folded line: 400",
    "bare LF": "RFC 9112 2.2 lets a server refuse a lone LF as a line end: 400",
    "unknown method": "llhttp knows the registered methods, upper-case only: 400",
    "control byte in a value": "RFC 9110 5.5 forbids it; h11 lets it through: 400",
    "huge chunk size": "llhttp stops at a size that overflows 64 bits; h11 waits for it: 400",
    "chunk size padding": "RFC 9112 7.1 has no space after the size; h11 allows one: 400",
    "HTTP/2.0 line": "only HTTP/1.1 and 1.0 are served: 505",
    "HTTP/0.9 line": "only HTTP/1.1 and 1.0 are served: 505",
    "empty line first": "RFC 9112 2.2: a server SHOULD ignore a CRLF before the request line; "
    "h11 refuses it",
    "HTTP/1.0 keep-alive": "HTTP/1.0 keep-alive (RFC 9112 C.2.2) is served; h11 closes after one",
}

HEAD = b"POST / HTTP/1.1\r\nHost: a\r\n"
CHUNKED = HEAD + b"Transfer-Encoding: chunked\r\n\r\n"
CASES: dict[str, tuple[bytes, str | None]] = {
    "get": (b"GET /a?b=1 HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n\r\n", None),
    "post": (HEAD + b"Content-Length: 3\r\n\r\nabc", None),
    "length with spaces": (HEAD + b"Content-Length:  3  \r\n\r\nabc", None),
    "chunked": (CHUNKED + b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n", None),
    "chunked upper-case": (HEAD + b"Transfer-Encoding: Chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n", None),
    "chunk extensions": (CHUNKED + b'3;a=b;c="d e"\r\nabc\r\n1;x\r\nf\r\n0;y=z\r\n\r\n', None),
    "trailers": (CHUNKED + b"3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n", None),
    "get with a chunked body": (
        b"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        None,
    ),
    "absolute target": (b"GET http://a/b?c HTTP/1.1\r\nHost: a\r\n\r\n", None),
    "asterisk target": (b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", None),
    "HTTP/1.0 without Host": (b"POST / HTTP/1.0\r\nContent-Length: 1\r\n\r\na", None),
    "value with trailing space": (b"GET / HTTP/1.1\r\nHost: a\r\nX:  v \t\r\n\r\n", None),
    "pipelined": (
        b"".join(
            [
                b"GET /1 HTTP/1.1\r\nHost: a\r\n\r\n",
                HEAD + b"Content-Length: 2\r\n\r\nok",
                CHUNKED + b"1\r\nz\r\n0\r\n\r\n",
                b"GET /4 HTTP/1.1\r\nHost: a\r\n\r\n",
            ]
        ),
        None,
    ),
    "HTTP/1.0 closes after one": (b"GET / HTTP/1.0\r\n\r\nGET /2 HTTP/1.0\r\n\r\n", None),
    "incomplete head": (b"GET / HTTP/1.1\r\nHost: a\r\n", None),
    "incomplete body": (HEAD + b"Content-Length: 9\r\n\r\nabc", None),
    "incomplete chunked": (CHUNKED + b"3\r\nabc\r\n0\r\n", None),
    # refused by both
    "conflicting lengths": (HEAD + b"Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", None),
    "invalid length": (HEAD + b"Content-Length: abc\r\n\r\n", None),
    "negative length": (HEAD + b"Content-Length: -1\r\n\r\n", None),
    "fractional length": (HEAD + b"Content-Length: 1.5\r\n\r\n", None),
    "signed length": (HEAD + b"Content-Length: +1\r\n\r\na", None),
    "bad chunk size": (CHUNKED + b"zz\r\nabc\r\n0\r\n\r\n", None),
    "chunk without its CRLF": (CHUNKED + b"3\r\nabcX\r\n0\r\n\r\n", None),
    "space in chunk extension": (CHUNKED + b"3 ;x\r\nabc\r\n0\r\n\r\n", None),
    "space before colon": (b"GET / HTTP/1.1\r\nHost : a\r\n\r\n", None),
    "empty header name": (b"GET / HTTP/1.1\r\nHost: a\r\n: v\r\n\r\n", None),
    "two Host headers": (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", None),
    "no Host": (b"GET / HTTP/1.1\r\n\r\n", None),
    "gzip then chunked": (HEAD + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", None),
    "identity with a length": (
        HEAD + b"Transfer-Encoding: identity\r\nContent-Length: 1\r\n\r\na",
        None,
    ),
    "two Transfer-Encodings": (
        HEAD + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        None,
    ),
    "space in the target": (b"GET /a b HTTP/1.1\r\nHost: a\r\n\r\n", None),
    "a valid request, then garbage": (b"GET / HTTP/1.1\r\nHost: a\r\n\r\nNOT HTTP\r\n\r\n", None),
    # refused by the server only (or served where h11 refuses): `_POLICY`
    "length with chunked": (
        HEAD + b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "length with chunked",
    ),
    "repeated length": (
        HEAD + b"Content-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
        "repeated length",
    ),
    "length list": (HEAD + b"Content-Length: 3, 3\r\n\r\nabc", "length list"),
    "obs-fold": (b"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n", "obs-fold"),
    "bare LF": (b"GET / HTTP/1.1\nHost: a\n\n", "bare LF"),
    "bare LF in a chunk": (CHUNKED + b"3\nabc\n0\n\n", "bare LF"),
    "lower-case method": (b"get / HTTP/1.1\r\nHost: a\r\n\r\n", "unknown method"),
    "unknown method": (b"FOO / HTTP/1.1\r\nHost: a\r\n\r\n", "unknown method"),
    "control byte in a value": (
        b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x01b\r\n\r\n",
        "control byte in a value",
    ),
    "huge chunk size": (CHUNKED + b"1" * 17 + b"\r\n", "huge chunk size"),
    "chunk size padding": (CHUNKED + b"3 \r\nabc\r\n0\r\n\r\n", "chunk size padding"),
    "HTTP/2.0 line": (b"GET / HTTP/2.0\r\nHost: a\r\n\r\n", "HTTP/2.0 line"),
    "HTTP/0.9 line": (b"GET / HTTP/0.9\r\n\r\n", "HTTP/0.9 line"),
    "empty line first": (b"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", "empty line first"),
    "HTTP/1.0 keep-alive": (
        b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /2 HTTP/1.0\r\n\r\n",
        "HTTP/1.0 keep-alive",
    ),
}


def h11_requests(wire: bytes) -> tuple[list[Request], bool]:
    """What h11 parses from ``wire`` as a server that answers each request, and whether it
    found the bytes invalid."""
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(wire)
    requests: list[Request] = []
    head: h11.Request | None = None
    body = b""
    try:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return requests, False
            if isinstance(event, h11.Request):
                head, body = event, b""
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert head is not None
                headers = tuple(_field(bytes(n), bytes(v)) for n, v in head.headers)
                requests.append((head.method.decode(), bytes(head.target), headers, body))
                conn.send(h11.Response(status_code=200, headers=[("content-length", "2")]))
                conn.send(h11.Data(data=b"ok"))
                conn.send(h11.EndOfMessage())
                if conn.our_state is h11.MUST_CLOSE:
                    return requests, False
                conn.start_next_cycle()
    except h11.RemoteProtocolError:
        return requests, True


def _field(name: bytes, value: bytes) -> tuple[bytes, bytes]:
    """A header as both are compared: h11 strips a value's spaces and lower-cases codings."""
    value = value.strip(b" \t")
    return name, value.lower() if name == b"transfer-encoding" else value


def ours(outcome: Outcome) -> tuple[list[Request], bool]:
    requests = [
        (seen.method, seen.target, tuple(_field(n, v) for n, v in seen.headers), seen.body)
        for seen in outcome.requests
    ]
    return requests, outcome.refusal is not None


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("split", ["whole", "every byte"])
async def test_the_server_frames_requests_as_h11_does_but_where_a_rule_says(
    name: str, split: str
) -> None:
    wire, policy = CASES[name]
    pieces = [wire] if split == "whole" else [wire[i : i + 1] for i in range(len(wire))]
    outcome = await serve_bytes(pieces)
    got, expected = ours(outcome), h11_requests(wire)
    if policy is None:
        assert got == expected
    else:
        assert policy in _POLICY
        assert got != expected, f"{name}: h11 agrees now, drop the rule"
    if outcome.refusal is not None:  # a JSON error, and the connection ends after it
        *_, last = re.finditer(rb"HTTP/1\.1 \d{3} [A-Z]", outcome.written)
        refusal = outcome.written[last.start() :]
        assert b"connection: close\r\n" in refusal and b'\r\n\r\n{"error":' in refusal


def test_every_rule_is_used() -> None:
    assert {policy for _, policy in CASES.values() if policy} == set(_POLICY)
