"""The dashboard's rollout panel in headless chromium: a canary of a clean candidate under
traffic is drawn with its phase, share, steps and trail, and its agreement chart moves; the
panel follows the rollout to its promotion. Screenshot: ``artifacts/rollouts.png``."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.dashboard.test_dashboard_browser import ARTIFACTS, REQUEST, chromium, wait_for
from tests.support.gateway import GatewayProcess, start_gateway
from tests.support.processes import ReplicaProcess, start_replica

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install -e '.[dev]')"
)
pytestmark = pytest.mark.integration


@pytest.fixture
def canary(models_dir: Path) -> Iterator[GatewayProcess]:
    replicas: list[ReplicaProcess] = []
    gateway: GatewayProcess | None = None
    try:
        replicas = [
            start_replica(models_dir / "digits-mlp.onnx", name="digits-mlp") for _ in range(2)
        ]
        pools = {
            name: {"model": "digits-mlp", "replicas": [{"id": name, "url": r.url}]}
            for name, r in zip(("now", "next"), replicas, strict=True)
        }
        rollout = {
            "candidate": "next",
            "mode": "canary",
            "steps": [20, 100],
            "hold_s": 4,
            "hold_requests": 100000,
            "min_comparisons": 10,
        }
        gateway = start_gateway(
            {"pools": pools, "models": {"digits": {"pool": "now", "rollout": rollout}}}
        )
        yield gateway
    finally:
        if gateway is not None:
            gateway.cleanup()
        for proc in replicas:
            proc.cleanup()


@contextlib.contextmanager
def traffic(url: str) -> Iterator[None]:
    stop = threading.Event()

    def send() -> None:
        with httpx.Client(base_url=url, trust_env=False, timeout=5) as http:
            while not stop.wait(0.01):
                with contextlib.suppress(httpx.HTTPError):
                    http.post("/v2/models/digits/infer", content=REQUEST)

    sender = threading.Thread(target=send, name="rollout-traffic", daemon=True)
    sender.start()
    try:
        yield
    finally:
        stop.set()
        sender.join(10)


def test_the_rollout_panel_follows_a_canary_to_its_promotion(canary: GatewayProcess) -> None:
    executable = chromium()
    problems: list[str] = []
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as p, traffic(canary.url):
        browser = p.chromium.launch(
            executable_path=executable, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1800})
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(f"uncaught: {e}"))
            page.goto(f"{canary.url}/status")
            card = page.locator("[data-rollout='digits']")
            wait_for(page, "the canary's card", lambda: card.count() == 1, 15)
            assert card.get_attribute("data-phase") == "canary"
            text = card.inner_text()
            assert "now → next" in text and "20%" in text and "start" in text, text
            line = page.locator("[data-chart='rollout-digits'] path")
            wait_for(page, "an agreement line", lambda: line.count() > 0, 20)
            promoted = page.locator("[data-rollout='digits'][data-phase='promoted']")
            wait_for(page, "the promotion", lambda: promoted.count() == 1, 60)
            trail = page.locator("[data-rollout='digits'] .trail").inner_text()
            assert "promote" in trail and "rule:evidence" in trail, trail
            page.screenshot(path=str(ARTIFACTS / "rollouts.png"), full_page=True)
        finally:
            browser.close()
    assert problems == []
