"""The dashboard of one of two gateways sharing a real redis-server, in headless chromium at
1400×1800: the fleet section lists both gateways with their verdicts, the replica tiles are in
view without scrolling (idle models are one line each, below them), the hedging label says
what is configured, a pool's chart ends on the count its tiles show, the axes span the chosen
window, and a dead replica's last error says when. Screenshot: ``artifacts/fleet.png``."""

from __future__ import annotations

import contextlib
import re
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.dashboard.test_dashboard_browser import ARTIFACTS, REQUEST, chromium, wait_for
from tests.support.gateway import GatewayProcess, pool_config, start_gateway
from tests.support.processes import ReplicaProcess, start_replica
from tests.support.redis_server import RedisServer

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install -e '.[dev]')"
)

pytestmark = pytest.mark.integration
VIEWPORT = {"width": 1400, "height": 1800}
IDLE_MODELS = ("digits-v1", "digits-v2", "digits-v3")  # no traffic: one line each


@pytest.fixture
def fleet(models_dir: Path) -> Iterator[tuple[list[ReplicaProcess], list[GatewayProcess]]]:
    redis = RedisServer()
    replicas: list[ReplicaProcess] = []
    gateways: list[GatewayProcess] = []
    try:
        redis.start()
        replicas = [
            start_replica(models_dir / "digits-mlp.onnx", name="digits-mlp") for _ in range(3)
        ]
        for name in ("gw-a", "gw-b"):
            config = pool_config(
                replicas, pool={"health": {"interval_s": 0.2, "unhealthy_threshold": 1}}
            )
            models = config["models"]
            models["digits-hedged"] = {"pool": "primary", "hedge": {"enabled": True}}
            models.update({m: {"pool": "primary"} for m in IDLE_MODELS})
            config["state"] = {
                "backend": "redis",
                "redis_url": redis.url,
                "instance": name,
                "namespace": "fleet",
                "sync_interval_s": 0.2,
            }
            gateways.append(start_gateway(config))
        yield replicas, gateways
    finally:
        for gateway in gateways:
            gateway.cleanup()
        for proc in replicas:
            proc.cleanup()
        redis.stop()


@contextlib.contextmanager
def traffic(url: str) -> Iterator[None]:
    """About 30 requests a second to ``digits`` while the block runs, so charts move."""
    stop = threading.Event()

    def send() -> None:
        with httpx.Client(base_url=url, trust_env=False, timeout=5) as http:
            while not stop.wait(0.03):
                with contextlib.suppress(httpx.HTTPError):  # the gateway's to count, not ours
                    http.post("/v2/models/digits/infer", content=REQUEST)

    sender = threading.Thread(target=send, name="fleet-traffic", daemon=True)
    sender.start()
    try:
        yield
    finally:
        stop.set()
        sender.join(10)


def in_view(page: Any, selector: str) -> bool:
    """Every element matching ``selector`` lies inside the first screen (no scrolling)."""
    boxes = [
        page.locator(selector).nth(i).bounding_box() for i in range(page.locator(selector).count())
    ]
    return bool(boxes) and all(b and b["y"] + b["height"] <= VIEWPORT["height"] for b in boxes)


def pool_counts(page: Any) -> tuple[int, str | None]:
    """(healthy tiles, the pool chart's latest healthy count), from one read of the DOM."""
    html = page.locator("[data-pool='primary']").inner_html()
    tiles = len(re.findall(r'data-health="healthy"', html))
    legend = re.search(r'data-series="healthy" data-latest="([^"]*)"', html)
    return tiles, legend.group(1) if legend else None


def verdict(page: Any, instance: str, replica: str) -> str:
    cell = page.locator(f"[data-instance='{instance}'] [data-fleet-replica='{replica}']")
    return str(cell.inner_text()) if cell.count() == 1 else ""


def test_one_view_of_the_fleet_at_1400_by_1800(
    fleet: tuple[list[ReplicaProcess], list[GatewayProcess]],
) -> None:
    executable = chromium()
    replicas, (a, _) = fleet
    problems: list[str] = []
    ARTIFACTS.mkdir(exist_ok=True)
    with traffic(a.url), sync_api.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=executable, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_page(viewport=VIEWPORT)
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(f"uncaught: {e}"))
            page.goto(f"{a.url}/status")
            both = page.locator("#fleet [data-instance][data-alive='yes']")
            wait_for(page, "both gateways alive in the fleet", lambda: both.count() == 2, 15)
            assert "2/2 alive" in page.locator("#fleetscope").inner_text()
            assert page.locator("[data-instance='gw-a']").inner_text().count("(this one)") == 1
            healthy = page.locator("[data-replica][data-health='healthy']")
            wait_for(page, "3 healthy tiles", lambda: healthy.count() == 3, 15)
            wait_for(page, "gw-b's verdicts", lambda: "serving" in verdict(page, "gw-b", "r2"), 15)
            assert in_view(page, "[data-replica]"), "replica tiles below the fold"
            assert in_view(page, "#fleet [data-instance]")
            for model in IDLE_MODELS:  # idle models: a line each, no empty charts
                card = page.locator(f"[data-model='{model}']")
                assert card.get_attribute("data-idle") == "yes"
                assert card.locator("[data-chart]").count() == 0
            rate = page.locator("[data-chart='digits-rate']")
            wait_for(page, "digits' request-rate chart", lambda: rate.count() == 1, 15)
            assert "-5 min" in rate.inner_text()  # the window the selector says
            hedging = "[data-model='{}'] [data-hedging]"
            assert page.locator(hedging.format("digits")).get_attribute("data-hedging") == "off"
            assert page.locator(hedging.format("digits")).inner_text() == "off"
            on = page.locator(hedging.format("digits-hedged"))
            assert on.get_attribute("data-hedging") == "on" and on.inner_text() == "on"

            replicas[1].send_signal(signal.SIGKILL)
            r1 = page.locator("[data-replica='r1']")
            wait_for(
                page, "r1 unhealthy", lambda: r1.get_attribute("data-health") == "unhealthy", 15
            )
            for _ in range(3):  # three polls: the chart always ends on the tiles' count
                tiles, chart = pool_counts(page)
                assert chart == str(tiles) == "2", (tiles, chart)
                page.wait_for_timeout(2_000)
            last_error = r1.locator("[data-last-error]").inner_text()
            assert re.search(r"last error \d\d:\d\d:\d\d \(\d+ s ago\): ", last_error), last_error
            wait_for(
                page,
                "both gateways' verdict on r1: unhealthy",
                lambda: (
                    "unhealthy" in verdict(page, "gw-a", "r1")
                    and "unhealthy" in verdict(page, "gw-b", "r1")
                ),
                15,
            )
            page.screenshot(path=str(ARTIFACTS / "fleet.png"))
        finally:
            browser.close()
    assert problems == []
