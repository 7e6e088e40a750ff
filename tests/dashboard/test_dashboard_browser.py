"""The dashboard in a real headless browser, over real replicas and a real gateway.

Debian's ``chromium`` (``WITH_CHROMIUM=1 bash .ci/system-deps.sh``; `make test` does it) is
driven by playwright's Python package with ``executable_path``, so no browser is downloaded.
The page must load with no console error, draw its charts and replica tiles (with the load
each replica reports), and show a
replica killed with SIGKILL as unhealthy (tile and timeline) within a bounded time. A
screenshot is kept in ``tests/dashboard/artifacts/dashboard.png`` (git-ignored).
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.support.gateway import GatewayProcess, pool_config, start_gateway
from tests.support.processes import ReplicaProcess, start_replica

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install -e '.[dev]')"
)

pytestmark = pytest.mark.integration

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
REQUEST = orjson.dumps(
    {"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32", "data": [0.5] * 64}]}
)
SLOS = [
    {"name": "availability", "kind": "availability", "objective": 0.99},
    {"name": "fast", "kind": "latency", "objective": 0.95, "threshold_ms": 50},
]
SEEN_DOWN_WITHIN_S = 15.0  # probes every 0.2 s, one miss: seen in ~1 s, drawn within 2 s more
CHARTS = (
    "retry-budget",
    "digits-rate",
    "digits-errors",
    "digits-latency",
    "digits-burn",
    "primary-replicas",
)


def wait_for(page: Any, what: str, check: Callable[[], bool], timeout_s: float) -> float:
    """Polls a DOM condition from Python (the page's CSP forbids playwright's eval-based
    ``wait_for_function``); returns the seconds it took, fails after ``timeout_s``."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"the dashboard did not show {what} within {timeout_s} s")
        page.wait_for_timeout(200)
    return time.monotonic() - start


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("no chromium: run `WITH_CHROMIUM=1 bash .ci/system-deps.sh` (root or sudo)")
    return found


@pytest.fixture
def stack(models_dir: Path) -> Iterator[tuple[list[ReplicaProcess], GatewayProcess]]:
    replicas: list[ReplicaProcess] = []
    gateway: GatewayProcess | None = None
    try:
        replicas = [
            start_replica(models_dir / "digits-mlp.onnx", name="digits-mlp") for _ in range(3)
        ]
        health = {"interval_s": 0.2, "unhealthy_threshold": 1}
        config = pool_config(replicas, pool={"health": health}, slos=SLOS)
        gateway = start_gateway(config)
        yield replicas, gateway
    finally:
        if gateway is not None:
            gateway.cleanup()
        for proc in replicas:
            proc.cleanup()


@pytest.fixture
def traffic(stack: tuple[list[ReplicaProcess], GatewayProcess]) -> Iterator[None]:
    """About 30 requests a second through the gateway while the test runs, so charts move."""
    _, gateway = stack
    stop = threading.Event()

    def send() -> None:
        with httpx.Client(base_url=gateway.url, trust_env=False, timeout=5) as http:
            while not stop.wait(0.03):
                with contextlib.suppress(httpx.HTTPError):  # the gateway's to count, not ours
                    http.post("/v2/models/digits/infer", content=REQUEST)

    sender = threading.Thread(target=send, name="dashboard-traffic", daemon=True)
    sender.start()
    yield
    stop.set()
    sender.join(10)


def test_the_dashboard_shows_a_killed_replica(
    stack: tuple[list[ReplicaProcess], GatewayProcess], traffic: None
) -> None:
    executable = chromium()
    replicas, gateway = stack
    problems: list[str] = []
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=executable, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(f"uncaught: {e}"))
            page.on(
                "request",
                lambda r: (
                    None
                    if r.url.startswith(gateway.url) or r.url.startswith("data:")
                    else problems.append(f"foreign request: {r.url}")
                ),
            )
            page.goto(f"{gateway.url}/status")
            healthy = page.locator("[data-replica][data-health='healthy']")
            wait_for(page, "3 healthy replicas", lambda: healthy.count() == 3, 15)
            # a few seconds of samples: the charts have drawn lines
            lines = page.locator("[data-chart='digits-rate'] path")
            wait_for(page, "a request-rate line", lambda: lines.count() > 0, 15)

            def samples() -> int:
                history = httpx.get(f"{gateway.url}/admin/history", trust_env=False).json()
                return len(history["t"])

            wait_for(page, "ten seconds of samples", lambda: samples() >= 10, 30)
            for name in CHARTS:
                assert page.locator(f"[data-chart='{name}'] svg").count() == 1, name
            assert page.locator("#ready").inner_text() == "ready"
            fleet = page.locator("#fleetscope").inner_text()  # no Redis: no fleet to show
            assert fleet == "(this instance only (no shared state configured))", fleet
            assert page.locator("#asof").inner_text().startswith("as of ")
            assert page.locator("[data-slo='digits/fast']").count() == 1
            body = page.locator("body").inner_text()
            assert "True" not in body and "False" not in body
            # the replicas report their load on every answer: each serving tile says it
            reported = page.locator("[data-replica] [data-reported-queue]")
            wait_for(page, "reported queues", lambda: reported.count() == 3, 15)
            assert "reported queue" in reported.first.inner_text()

            victim = replicas[1]
            r1 = page.locator("[data-replica='r1']")
            # a timeline entry of it going down (not one entry only: a probe lost to a starved
            # machine may have flapped it down and up before the kill)
            event = page.locator(".ev.bad[data-kind='health'][data-subject='r1']")
            before = event.count()
            victim.send_signal(signal.SIGKILL)
            seen: list[object] = []

            def shown_down() -> bool:
                down = event.count()
                seen[:] = [r1.get_attribute("data-health"), r1.get_attribute("data-level"), down]
                return seen[:2] == ["unhealthy", "bad"] and down > 0

            try:
                took = wait_for(
                    page, "r1 unhealthy (tile and timeline)", shown_down, SEEN_DOWN_WITHIN_S
                )
            except AssertionError as exc:
                health = httpx.get(f"{gateway.url}/admin/state", trust_env=False).json()["pools"]
                raise AssertionError(
                    f"{exc}: tile and events {seen} (before the kill: {before}); {health}"
                ) from None
            print(f"the dashboard showed the SIGKILL after {took:.1f} s")
            tile = page.locator("[data-replica='r1']").inner_text()
            assert "unhealthy" in tile and "since" in tile
            assert "not serving" in tile  # no stale latency for a dead replica
            assert page.locator("[data-replica='r0']").get_attribute("data-health") == "healthy"
            page.wait_for_timeout(4_000)  # two more polls, so the charts show the drop
            page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)
            state: dict[str, Any] = httpx.get(f"{gateway.url}/admin/state", trust_env=False).json()
            [pool] = state["pools"]
            assert pool["healthy"] == 2
        finally:
            browser.close()
    assert problems == []
