"""The benchmark's transport registry: names and limits (the transports' contract tests are in
``tests/gateway/upstream/test_transports.py``)."""

from __future__ import annotations

import pytest

from loadtests.transports import TransportLimits, make_transport


def test_make_transport_names_the_valid_choices() -> None:
    with pytest.raises(ValueError, match="'fast', 'aiohttp', 'httpx'"):
        make_transport("curl")


def test_limits_are_validated() -> None:
    with pytest.raises(ValueError, match="max_connections_per_endpoint"):
        TransportLimits(max_connections_per_endpoint=0)
    with pytest.raises(ValueError, match="max_reply_body_bytes"):
        TransportLimits(max_reply_body_bytes=0)
