"""A replica's own error text: escaped where it enters, never shown to clients.

A hostile or broken replica's error body may hold markup, a line break that forges a log line,
a terminal escape or an address. What the gateway keeps of it (`Outcome.detail`, for the logs
and the keyed admin views) is one escaped line; what it tells clients (`Outcome.summary`) is
the replica's id and a fixed phrase for its status or kind.
"""

from __future__ import annotations

import pytest

from gateway.errors import UpstreamConnectError
from gateway.faults.classify import classify_error, classify_status
from gateway.outcome import Outcome, OutcomeKind, status_phrase
from gateway.redact import printable
from gateway.v2.reply import error_text

HOSTILE = (
    "<script>alert(1)</script> bad input\n2026-12-01 00:00:00 ERROR gateway.audit: drain by "
    "admin\r\x1b[31mred\x1b[0m from 10.9.8.7 \u202egnp.exe\u2028next"
)


def test_printable_escapes_controls_and_bidirectional_marks_only() -> None:
    assert printable("plain text: café, 10.0.0.1 <b>") == "plain text: café, 10.0.0.1 <b>"
    escaped = printable(HOSTILE)
    assert "\n" not in escaped and "\r" not in escaped and "\x1b" not in escaped
    assert "\u202e" not in escaped and "\u2028" not in escaped
    assert "bad input\\n2026-12-01" in escaped and "\\x1b[31mred" in escaped
    assert "\\u202egnp.exe\\u2028next" in escaped
    assert printable("tab\there\x00\x85\x9f") == "tab\\there\\x00\\x85\\x9f"


def test_a_replicas_error_text_is_kept_escaped_on_one_line() -> None:
    body = (
        '{"error": "'
        + HOSTILE.replace("\n", "\\n").replace("\r", "\\r").replace("\x1b", "\\u001b")
        + '"}'
    ).encode()
    text = error_text(body)
    assert "\n" not in text and "\x1b" not in text and "10.9.8.7" in text
    assert error_text(b"not json\r\nX-Forged: 1") == "not json\\r\\nX-Forged: 1"


@pytest.mark.parametrize(
    ("status", "summary"),
    [
        (400, "replica r1 answered 400: bad request"),
        (404, "replica r1 answered 404: not found"),
        (418, "replica r1 answered 418: client error"),
        (500, "replica r1 answered 500: internal error"),
        (503, "replica r1 answered 503: unavailable"),
        (599, "replica r1 answered 599: server error"),
    ],
)
def test_a_client_is_told_the_status_in_fixed_words_and_never_the_text(
    status: int, summary: str
) -> None:
    outcome = classify_status("r1", status, 0.01, error_text(HOSTILE.encode()))
    assert outcome.summary() == summary
    assert "10.9.8.7" in outcome.describe()  # the logs and the keyed views keep the detail
    assert "\n" not in outcome.describe()


def test_an_error_without_a_status_is_told_by_its_kind() -> None:
    error = UpstreamConnectError("gRPC UNAVAILABLE: ipv4:127.0.0.1:27399: connection refused\n")
    outcome = classify_error("r1", error, 0.01)
    assert outcome.summary() == "replica r1: could not connect"
    assert outcome.detail.endswith("connection refused\\n")
    assert {Outcome(kind, "r", 0.0).summary() for kind in OutcomeKind} >= {
        "replica r: no reply in time",
        "replica r: invalid reply",
    }
    assert status_phrase(200) == "not an error"
