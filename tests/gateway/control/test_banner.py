"""`gateway up`'s banner: the URLs a newcomer needs, printed once the server listens."""

from __future__ import annotations

import io
from pathlib import Path

from gateway.config import load_config
from gateway.control.banner import announce_when_listening, banner

LOCAL = Path(__file__).resolve().parents[3] / "config" / "local.yaml"


def test_the_banner_names_the_v2_endpoints_the_dashboard_and_the_metrics() -> None:
    config = load_config(LOCAL)
    text = banner(config, "127.0.0.1", 8000, 5, 8001)
    lines = text.splitlines()
    assert lines[0] == "gateway up: 5 local replica(s) ready, serving http://127.0.0.1:8000"
    assert "  dashboard  http://127.0.0.1:8000/dashboard" in lines
    assert "  V2 gRPC    127.0.0.1:8001" in lines
    assert any("/v2/models/<model>/infer" in line and "digits-vote" in line for line in lines)
    assert any("http://127.0.0.1:8000/metrics" in line for line in lines)


def test_a_gateway_on_every_address_is_shown_on_loopback() -> None:
    config = load_config(LOCAL)
    text = banner(config, "0.0.0.0", 9000, 0)
    assert "serving http://127.0.0.1:9000" in text and "gRPC" not in text


async def test_it_is_printed_once_the_server_listens() -> None:
    out = io.StringIO()
    assert await announce_when_listening(lambda: True, "the banner", out)
    assert out.getvalue() == "the banner\n"
