"""DNS discovery on a real gateway: a pool's replicas come from a real DNS server on loopback
(dnslib, SRV records) whose answer changes under steady load from {A} to {A, B} to {B}.

No request may fail; B starts serving once probed; A stops getting new requests when it leaves
the answer, and the attempts it had in flight then finish on it (both replicas answer 100 ms
late, so A always has some in flight when it is drained). Once A has left, `/metrics` names it
no more.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from typing import Any

import httpx
import pytest
from dnslib import RR

from gateway.upstream.discovery.dns import Target
from gateway.upstream.discovery.watch import replica_id
from tests.integration.conftest import StartGateway, StartReplicas
from tests.support.dns_server import ChangingResolver, dns_server
from tests.support.faults import inject_faults
from tests.support.processes import ReplicaProcess, wait_until_async
from tests.support.traffic import drive, request_bodies

pytestmark = pytest.mark.integration

NAME = "_v2._tcp.digits.test"
CLIENTS = 6


def answer(records: ChangingResolver, replicas: dict[str, ReplicaProcess]) -> None:
    """SRV records for ``replicas`` (label -> process); each target's A record beside it."""
    srv = []
    for label, proc in replicas.items():
        host, port = proc.url.removeprefix("http://").split(":")
        srv.append(f"{NAME}. 1 IN SRV 0 0 {port} {label}.digits.test.")
        records.set(f"{label}.digits.test", "A", [f"{label}.digits.test. 1 IN A {host}"])
    records.set(NAME, "SRV", srv)


def discovered_config(replica: ReplicaProcess, dns_port: int) -> dict[str, Any]:
    """One pool of ``replica``'s model whose members come from ``NAME``'s SRV records."""
    discovery = {
        "dns": NAME,
        "record": "SRV",
        "nameserver": f"127.0.0.1:{dns_port}",
        "interval_s": 0.5,
        "timeout_s": 1.0,
    }
    pool = {"model": replica.model_name, "version": replica.model_version, "discovery": discovery}
    return {"pools": {"primary": pool}, "models": {"digits": {"pool": "primary"}}}


class Load:
    """``CLIENTS`` clients sending infer calls until stopped; each answer with when it was sent."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.done: list[tuple[float, int, str | None]] = []  # (sent at, status, served by)
        self.errors: list[str] = []
        self._stop = asyncio.Event()

    def served_by(self, since: float = 0.0) -> Counter[str | None]:
        """Who answered the requests sent at or after ``since``."""
        return Counter(by for at, _, by in self.done if at >= since)

    async def run(self) -> None:
        bodies = request_bodies()
        headers = {"x-request-timeout-ms": "5000"}
        async with httpx.AsyncClient(base_url=self.url, trust_env=False, timeout=10) as client:

            async def worker(offset: int) -> None:
                sent = offset
                while not self._stop.is_set():
                    sent += 1
                    body = bodies[sent % len(bodies)]
                    started = time.monotonic()
                    try:
                        response = await client.post(
                            "/v2/models/digits/infer", content=body, headers=headers
                        )
                    except httpx.HTTPError as exc:
                        self.errors.append(repr(exc))
                        continue
                    by = response.headers.get("x-served-by")
                    self.done.append((started, response.status_code, by))

            await asyncio.gather(*(worker(i) for i in range(CLIENTS)))

    def stop(self) -> None:
        self._stop.set()


def discovered_id(replica: ReplicaProcess) -> str:
    """The id discovery gives ``replica`` in pool ``primary`` (no address in it)."""
    host, port = replica.url.removeprefix("http://").split(":")
    return replica_id("primary", Target(host, int(port)))


async def test_replicas_follow_dns_under_load_without_a_failed_request(
    start_replicas: StartReplicas, start_gw: StartGateway
) -> None:
    a, b = start_replicas(2)
    for proc in (a, b):
        inject_faults(proc.url, latency_ms=100)
    id_a, id_b = discovered_id(a), discovered_id(b)
    with dns_server() as (records, dns_port):
        answer(records, {"a": a})
        config = discovered_config(a, dns_port)
        gateway = start_gw(config)  # ready: A was resolved and probed healthy
        load = Load(gateway.url)
        running = asyncio.create_task(load.run())
        async with httpx.AsyncClient(base_url=gateway.url, trust_env=False, timeout=10) as http:

            async def pool() -> dict[str, Any]:
                doc: dict[str, Any] = (await http.get("/admin/state")).json()["pools"][0]
                return doc

            try:
                await wait_until_async(lambda: len(load.done) >= 20, 30, message="load on A")
                assert set(load.served_by()) == {id_a}

                answer(records, {"a": a, "b": b})
                await wait_until_async(
                    lambda: load.served_by()[id_b] >= 20, 30, message="B to serve"
                )

                deadline = time.monotonic() + 30
                while True:  # A is dropped while it holds attempts (its answers take 100 ms)
                    state = await pool()
                    held = {r["id"]: r["outstanding"] for r in state["replicas"]}
                    if held.get(id_a, 0) > 0:
                        break
                    assert time.monotonic() < deadline, f"A never held an attempt: {state}"
                    await asyncio.sleep(0.01)
                answer(records, {"b": b})
                in_flight_on_a = 0
                deadline = time.monotonic() + 30
                while True:  # until A has left: its drain seen, with what it had in flight
                    state = await pool()
                    members = [r["id"] for r in state["replicas"]]
                    draining = {r["id"]: r["outstanding"] for r in state["draining"]}
                    in_flight_on_a = max(in_flight_on_a, draining.get(id_a, 0))
                    if id_a not in members and id_a not in draining:
                        break
                    assert time.monotonic() < deadline, f"A never left: {state}"
                    await asyncio.sleep(0.01)
                left_at = time.monotonic()
                await wait_until_async(lambda: len(load.served_by(left_at)) > 0 and
                                       load.served_by(left_at)[id_b] >= 30, 30,
                                       message="B alone to serve")  # fmt: skip
                scraped = (await http.get("/metrics")).text
                assert f'replica="{id_b}"' in scraped
                assert f'replica="{id_a}"' not in scraped  # its series left with it
            finally:
                load.stop()
                await asyncio.wait_for(running, 30)
        logged = re.search(
            rf"replica {re.escape(id_a)} draining \((\d+) in flight\)", gateway.log_text()
        )
        in_flight_on_a = max(in_flight_on_a, int(logged.group(1)) if logged else 0)
    failed = [d for d in load.done if d[1] != 200]
    total = len(load.done) + len(load.errors)
    print(
        f"discovery under load: {total} requests, {len(failed) + len(load.errors)} failed, "
        f"served by {dict(load.served_by())}, A had up to {in_flight_on_a} in flight "
        f"when drained"
    )
    assert not failed and not load.errors, (failed[:5], load.errors[:5])
    assert load.served_by(left_at)[id_a] == 0  # nothing sent after A had left reached it
    assert in_flight_on_a >= 1  # A was drained with attempts in flight, and they all succeeded


async def test_a_reload_keeps_the_discovered_replicas_serving(
    start_replicas: StartReplicas, start_gw: StartGateway
) -> None:
    """A reload (a tenant key rotated, a model added) must not start the discovered pools
    empty: the new gateway takes the old one's members with their health, and DNS refreshes
    them from there."""
    (a,) = start_replicas(1)
    with dns_server() as (records, dns_port):
        answer(records, {"a": a})
        config = discovered_config(a, dns_port)
        gateway = start_gw(config)
        statuses: list[int] = []

        async def reload() -> None:
            async with httpx.AsyncClient(trust_env=False, timeout=30) as client:
                reply = await client.post(f"{gateway.url}/admin/reload", json={})
                statuses.append(reply.status_code)

        traffic = await drive(
            gateway.url, requests=300, concurrency=8, events={50: reload, 100: reload}
        )
    print(
        f"reload with discovered replicas: {len(traffic.answers)} answers, {traffic.failed} failed"
    )
    assert statuses == [200, 200]
    assert traffic.failed == 0 and len(traffic.answers) == 300


async def test_a_hostile_answer_makes_only_usable_members_up_to_the_cap(
    start_replicas: StartReplicas, start_gw: StartGateway
) -> None:
    """One SRV answer naming the real replica, 40 more targets, and addresses no replica can
    have (port 0, 0.0.0.0, multicast, broadcast, an unrelated name's record): the pool holds
    at most ``max_members``, requests are served, /admin/state says what was left out and why,
    the log says it once, and /metrics names no replica beyond the cap."""
    (a,) = start_replicas(1)
    host, port = a.url.removeprefix("http://").split(":")
    id_a = discovered_id(a)
    with dns_server() as (records, dns_port):
        srv = [f"{NAME}. 1 IN SRV 0 0 {port} a.digits.test."]
        records.set("a.digits.test", "A", [f"a.digits.test. 1 IN A {host}"])
        for label, address, target_port in (
            ("zero", host, 0),
            ("any", "0.0.0.0", 9000),
            ("multi", "239.1.2.3", 9000),
            ("bcast", "255.255.255.255", 9000),
        ):
            srv.append(f"{NAME}. 1 IN SRV 0 0 {target_port} {label}.digits.test.")
            records.set(f"{label}.digits.test", "A", [f"{label}.digits.test. 1 IN A {address}"])
        for i in range(40):  # a lower priority: never preferred to the real replica
            srv.append(f"{NAME}. 1 IN SRV 5 0 {20000 + i} flood{i}.digits.test.")
            records.set(f"flood{i}.digits.test", "A", [f"flood{i}.digits.test. 1 IN A 127.0.0.2"])
        records.set(NAME, "SRV", srv)
        records.additional = RR.fromZone("elsewhere.test. 1 IN A 10.6.6.6")
        config = discovered_config(a, dns_port)
        config["pools"]["primary"]["discovery"]["max_members"] = 3
        gateway = start_gw(config)
        async with httpx.AsyncClient(base_url=gateway.url, trust_env=False, timeout=10) as http:
            answered = records.queries
            await wait_until_async(
                lambda: records.queries >= answered + 6, 30, message="three more refreshes"
            )
            traffic = await drive(gateway.url, requests=50, concurrency=4)
            pool = (await http.get("/admin/state")).json()["pools"][0]
            scraped = (await http.get("/metrics")).text
            live = await http.get("/v2/health/live")
    assert traffic.failed == 0 and set(traffic.served_by()) == {id_a}, traffic.answers[:3]
    assert live.status_code == 200
    members = [r["id"] for r in pool["replicas"]]
    assert len(members) == 3 and id_a in members, members
    status = pool["discovery"]
    assert (status["max_members"], status["over_cap"], status["dropped_count"]) == (3, 38, 5)
    reasons = {d["address"]: d["reason"] for d in status["dropped"]}
    assert reasons == {
        "10.6.6.6": f"a record of elsewhere.test, not of {NAME}",
        f"{host}:0": "port 0 (in SRV: no such service here)",
        "0.0.0.0:9000": "the unspecified address",
        "239.1.2.3:9000": "a multicast address",
        "255.255.255.255:9000": "the broadcast address",
    }
    named = set(re.findall(r'replica="([^"]+)"', scraped))
    assert named <= set(members), named - set(members)
    log = gateway.log_text()
    assert log.count("than discovery.max_members (3)") == 1, log[-2000:]
    assert log.count("address(es) dropped") == 1
