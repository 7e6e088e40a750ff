"""Wrong keys at the control plane: each address held back more with each one, its answers
queued, 429 past the queue, counted by door, logged now and then; other clients go on.

20,000 wrong admin keys once took 2.1 s from one client: no delay, nothing logged, nothing
counted. On a fake clock here: the delays are the clock's, nobody sleeps.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

import httpx
import pytest

from gateway.api.app import GatewayApp
from gateway.api.auth import ControlAccess, KeyRing
from gateway.api.auth_failures import (
    FORGET_AFTER_S,
    LOG_EVERY_S,
    MAX_DELAY_S,
    MAX_QUEUE_S,
    STEP_S,
    AuthFailures,
)
from gateway.api.guard import (
    HOLD_HEADER,
    ControlPlaneGuard,
    allowed_hosts,
    client_address,
    mark_forwarded,
)
from gateway.api.responses import Receive, Scope, Send, send_json
from gateway.config.access import AdminAccessConfig
from gateway.control.runtime import Gateway
from tests.gateway.conftest import make_config
from tests.support.clock import FakeClock
from tests.support.virtual_time import VirtualClock, VirtualTimeLoop

ADMIN = "admin-key-0123456789abcdef"
WRONG = {"authorization": "Bearer not-the-key-0123456789"}
RIGHT = {"authorization": f"Bearer {ADMIN}"}


async def stub(scope: Scope, receive: Receive, send: Send) -> None:
    await send_json(send, 200, {"path": scope["path"]})


def test_each_failure_in_a_row_waits_twice_as_long_up_to_a_cap() -> None:
    clock = FakeClock()
    failures = AuthFailures(clock)
    waits = []
    for _ in range(8):
        waits.append(failures.failed("10.0.0.1"))
        clock.advance(10.0)  # each answered before the next: no queue
    assert waits[:3] == pytest.approx([STEP_S, 2 * STEP_S, 4 * STEP_S])
    assert max(waits) == pytest.approx(MAX_DELAY_S)
    clock.advance(FORGET_AFTER_S + 1)  # quiet long enough: starts afresh
    assert failures.failed("10.0.0.1") == pytest.approx(STEP_S)


def test_an_address_sending_at_once_is_queued_then_held_back() -> None:
    clock = FakeClock()
    failures = AuthFailures(clock)
    waits = []
    while failures.held_back("10.0.0.1") is None:
        waits.append(failures.failed("10.0.0.1"))
    assert waits == sorted(waits) and waits[-1] > MAX_QUEUE_S  # one answer after the other
    held = failures.held_back("10.0.0.1")
    assert held is not None and 0 < held <= MAX_DELAY_S
    assert failures.held_back("10.0.0.2") is None  # another address is not
    clock.advance(held + 0.001)
    assert failures.held_back("10.0.0.1") is None  # its queue is short enough again


def test_a_right_key_forgets_the_addresss_failures() -> None:
    failures = AuthFailures(FakeClock())
    failures.failed("10.0.0.1")
    failures.failed("10.0.0.1")
    failures.succeeded("10.0.0.1")
    assert failures.failed("10.0.0.1") == pytest.approx(STEP_S)


def test_the_table_of_addresses_is_bounded() -> None:
    failures = AuthFailures(FakeClock(), max_addresses=100)
    for i in range(10_000):
        failures.failed(f"10.{i // 65536}.{i // 256 % 256}.{i % 256}")
    assert len(failures) == 100


def test_failures_are_logged_now_and_then_with_how_many(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    failures = AuthFailures(clock)
    with caplog.at_level(logging.WARNING, "gateway.api.auth_failures"):
        for i in range(20_000):
            failures.failed(f"10.0.{i % 7}.1")
            clock.advance(0.0001)  # 2 s for all of them
        clock.advance(LOG_EVERY_S)
        failures.failed("10.0.0.1")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("control plane: 1 request(s) with a wrong key")
    assert "20000 request(s) with a wrong key" in lines[1] and "from 7 address(es)" in lines[1]


def test_an_ipv6_client_is_known_by_its_64() -> None:
    scope = {"client": ("2001:db8:1:2:aaaa::1", 5000)}
    assert client_address(scope) == "2001:db8:1:2::/64"
    assert client_address({"client": ("192.0.2.7", 1)}) == "192.0.2.7"
    assert client_address({}) == "unknown"


class _Rig:
    def __init__(self, clock: FakeClock | None = None) -> None:
        self.clock = clock or FakeClock()
        self.refused: Counter[tuple[str, int]] = Counter()
        access = ControlAccess(KeyRing.of(ADMIN), KeyRing(), anonymous=False)
        self.guard = ControlPlaneGuard(
            stub,
            access,
            allowed_hosts(None, "127.0.0.1"),
            AuthFailures(self.clock),
            lambda door, status: self.refused.update([(door, status)]),
        )

    def client(self, address: str) -> httpx.AsyncClient:
        transport = httpx.ASGITransport(app=self.guard, client=(address, 40_000))
        return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000")


async def test_a_wrong_key_is_answered_after_its_delay_and_counted() -> None:
    rig = _Rig()
    async with rig.client("10.0.0.1") as http:
        started = rig.clock.now()
        answer = await http.get("/admin/state", headers=WRONG)
        assert answer.status_code == 401
        assert rig.clock.now() - started == pytest.approx(STEP_S)
        missing = await http.get("/metrics")  # no key at all: no guess, no delay
        assert missing.status_code == 401
        assert rig.clock.now() - started == pytest.approx(STEP_S)
    assert rig.refused == {("admin", 401): 1, ("metrics", 401): 1}


async def test_a_forwarded_wrong_key_is_answered_at_once_with_the_delay_for_its_worker() -> None:
    """A worker holds the answer itself (`gateway.worker.http.proxy`): the control plane keeps
    the one table of failures and says how long; its own connection is free at once."""
    rig = _Rig()

    async def forwarded(scope: Scope, receive: Receive, send: Send) -> None:
        mark_forwarded(scope, "10.0.0.7")
        await rig.guard(scope, receive, send)

    transport = httpx.ASGITransport(app=forwarded)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as http:
        started = rig.clock.now()
        first = await http.get("/admin/state", headers=WRONG)
        second = await http.get("/admin/state", headers=WRONG)
        missing = await http.get("/admin/state")
        right = await http.get("/admin/state", headers=RIGHT)
    assert rig.clock.now() == started  # nothing waited here
    assert first.status_code == second.status_code == missing.status_code == 401
    hold = HOLD_HEADER.decode()
    assert float(first.headers[hold]) == pytest.approx(STEP_S)
    # queued behind the first, then its own doubled delay
    assert float(second.headers[hold]) == pytest.approx(STEP_S + 2 * STEP_S)
    assert hold not in missing.headers and hold not in right.headers
    assert right.status_code == 200
    assert rig.refused == {("admin", 401): 3}


def test_a_flood_of_wrong_keys_is_held_back_without_holding_anyone_else() -> None:
    """400 wrong keys at once from one address: one answer per delay, then 429s at once; a
    right key from another address meanwhile is answered at once. On virtual time (a
    `VirtualTimeLoop` jumps to the next timer when every task waits)."""
    rig = _Rig(VirtualClock())

    async def flood() -> tuple[Counter[int], float, float, list[httpx.Response]]:
        async with rig.client("10.0.0.9") as attacker, rig.client("10.0.0.1") as operator:
            wrong = [attacker.get("/admin/state", headers=WRONG) for _ in range(400)]
            sent = [asyncio.ensure_future(request) for request in wrong]
            for _ in range(100):  # every one of them reaches the guard
                await asyncio.sleep(0)
            started = rig.clock.now()
            answer = await operator.get("/admin/state", headers=RIGHT)
            assert answer.status_code == 200
            answered = rig.clock.now()
            replies = await asyncio.gather(*sent)
        return Counter(r.status_code for r in replies), started, answered, replies

    loop = VirtualTimeLoop()
    try:
        statuses, started, answered, replies = loop.run_until_complete(flood())
    finally:
        loop.close()
    assert answered == started  # the operator waited for nobody
    assert set(statuses) == {401, 429} and statuses[429] > statuses[401]
    assert statuses[401] <= MAX_QUEUE_S / STEP_S  # keys compared: bounded by the queue
    throttled = next(r for r in replies if r.status_code == 429)
    assert int(throttled.headers["retry-after"]) >= 1
    assert rig.refused[("admin", 429)] == statuses[429]
    assert rig.refused[("admin", 401)] == statuses[401]


async def test_the_gateways_control_plane_counts_wrong_keys_in_its_metrics(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ADMIN_KEY", ADMIN)
    admin = AdminAccessConfig(key_env="ADMIN_KEY")
    config = make_config()
    config = config.model_copy(update={"server": config.server.model_copy(update={"admin": admin})})
    app = GatewayApp(Gateway(config))
    transport = httpx.ASGITransport(app=app, client=("10.0.0.3", 40_000))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as http:
        for _ in range(3):
            assert (await http.get("/admin/state", headers=WRONG)).status_code == 401
        metrics = (await http.get("/metrics", headers=RIGHT)).text
    assert 'gateway_admin_auth_failures_total{code="401",door="admin"} 3.0' in metrics
