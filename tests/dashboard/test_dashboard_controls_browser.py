"""The dashboard's operator buttons in headless Debian chromium, over real replicas and gateway.

The page holds a named operator's key (``#key=``); a click on a tile's "drain" asks first
(the test accepts the dialog, and checks that a dismissed one does nothing), the tile then
says it is drained by that operator, the timeline shows the audited action, and "restore"
brings it back.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.dashboard.test_dashboard_browser import ARTIFACTS, chromium, wait_for
from tests.support.gateway import GatewayProcess, pool_config, start_gateway
from tests.support.processes import ReplicaProcess, start_replica

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install -e '.[dev]')"
)

pytestmark = pytest.mark.integration
ALICE = "alice-key-0123456789abcdef"


@pytest.fixture
def stack(models_dir: Path) -> Iterator[GatewayProcess]:
    replicas: list[ReplicaProcess] = []
    gateway: GatewayProcess | None = None
    try:
        replicas = [
            start_replica(models_dir / "digits-mlp.onnx", name="digits-mlp") for _ in range(2)
        ]
        config = pool_config(replicas, pool={"health": {"interval_s": 0.2}})
        config["server"] = {"admin": {"operators": {"alice": {"key_env": "ALICE_KEY"}}}}
        gateway = start_gateway(config, env={"ALICE_KEY": ALICE})
        yield gateway
    finally:
        if gateway is not None:
            gateway.cleanup()
        for proc in replicas:
            proc.cleanup()


def draining(gateway: GatewayProcess) -> list[str]:
    headers = {"authorization": f"Bearer {ALICE}"}
    state = httpx.get(f"{gateway.url}/admin/state", headers=headers, trust_env=False).json()
    return [r["id"] for r in state["pools"][0]["draining"]]


def test_the_drain_button_asks_then_drains_and_the_tile_shows_it(stack: GatewayProcess) -> None:
    gateway = stack
    problems: list[str] = []
    dialogs: list[str] = []
    answer = {"accept": False}

    def on_dialog(dialog: Any) -> None:
        dialogs.append(dialog.message)
        if answer["accept"]:
            dialog.accept()
        else:
            dialog.dismiss()

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=chromium(), headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(f"uncaught: {e}"))
            page.on("dialog", on_dialog)
            page.goto(f"{gateway.url}/dashboard#key={ALICE}")
            r1 = page.locator("[data-replica='r1']")
            drain = r1.locator("button[data-action='drain']")
            wait_for(page, "r1's drain button", lambda: drain.count() == 1, 15)
            assert page.locator("[data-pool='primary'] button[data-action='pause']").count() == 1
            drain.click()  # dismissed: nothing happens
            page.wait_for_timeout(500)
            assert dialogs and "Drain replica r1?" in dialogs[0]
            assert draining(gateway) == []
            page.fill("#reason", "browser test")
            answer["accept"] = True
            r1.locator("button[data-action='drain']").click()
            event = page.locator(".ev[data-kind='manual'][data-subject='replica:r1']")
            took = wait_for(
                page,
                "r1 drained (tile and timeline)",
                lambda: r1.get_attribute("data-held") == "drain" and event.count() == 1,
                10,
            )
            print(f"the tile showed the drain {took:.1f} s after the click")
            assert "drained by alice: browser test" in r1.inner_text()
            assert "drain by alice: browser test (applied)" in event.inner_text()
            assert draining(gateway) == ["r1"]
            page.screenshot(path=str(ARTIFACTS / "dashboard-drained.png"), full_page=True)
            r1.locator("button[data-action='restore']").click()
            wait_for(page, "r1 restored", lambda: r1.get_attribute("data-held") == "no", 10)
            assert draining(gateway) == []
        finally:
            browser.close()
    assert problems == []
