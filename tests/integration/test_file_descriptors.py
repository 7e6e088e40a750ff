"""File descriptors on a real gateway started with a low limit (set in its own process: a test
cannot lower its own safely).

- At start the soft limit is raised to the hard one.
- At a soft limit a service often gets (here soft = hard, so nothing can be raised), silent
  connections to the gRPC door past its cap (``server.max_connections``, derived from the limit)
  are closed at once, and those it holds are closed after ``server.header_timeout_s``: the REST
  door and the gateway's own connections to its replica keep their descriptors, infer answers,
  and a gRPC client gets in again.
- When the gateway does run out (a cap set above what the limit allows), the replica it could
  not reach is charged nothing: no failure, no breaker strike, no ejection, still healthy; the
  shortage is counted in ``gateway_local_resource_errors_total`` and the client gets a 503.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from gateway.config.connections import CONTROL_CONNECTIONS, FIXED_RESERVE
from tests.support.gateway import pool_config, start_gateway
from tests.support.processes import ReplicaProcess, start_replica, wait_until
from tests.support.traffic import request_bodies

pytestmark = pytest.mark.integration

LIMIT = 400  # the gateway's soft and hard limit on descriptors
SILENT = 600  # more connections than it may open at all
JSON = {"content-type": "application/json"}
INFER = "/v2/models/digits/infer"


def _soft_limit(pid: int) -> int:
    limits = Path(f"/proc/{pid}/limits").read_text()
    match = re.search(r"^Max open files\s+(\d+)\s+(\d+)", limits, re.MULTILINE)
    assert match is not None, limits
    return int(match[1])


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.fixture(scope="module")
def replica(models_dir: Path) -> Iterator[ReplicaProcess]:
    proc = start_replica(models_dir / "digits-mlp.onnx", name="digits-mlp")
    yield proc
    proc.cleanup()


@contextlib.contextmanager
def silent_connections(port: int, count: int) -> Iterator[list[socket.socket]]:
    """``count`` connections to ``port`` that send nothing, closed on the way out."""
    held: list[socket.socket] = []
    try:
        for _ in range(count):
            conn = socket.socket()
            conn.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                conn.connect(("127.0.0.1", port))
            held.append(conn)
        yield held
    finally:
        for conn in held:
            conn.close()


def _refused(held: list[socket.socket]) -> int:
    """How many of ``held`` the gateway has closed."""
    return sum(map(_closed_by_peer, held))


def _closed_by_peer(conn: socket.socket) -> bool:
    try:
        return conn.recv(65_536, socket.MSG_PEEK) == b"" or _drained_to_eof(conn)
    except BlockingIOError:
        return False
    except OSError:
        return True  # reset, or never connected: refused either way


def _drained_to_eof(conn: socket.socket) -> bool:
    """Reads what the server sent (its HTTP/2 settings) and says whether the close followed."""
    try:
        while conn.recv(65_536):
            pass
    except BlockingIOError:
        return False
    return True


def _replica_state(client: httpx.Client) -> dict[str, Any]:
    """The one replica in ``/admin/state``, asked on ``client``'s connection (a new one may
    not be accepted while the gateway has no descriptor left)."""
    state = client.get("/admin/state").json()
    (replica,) = [r for pool in state["pools"] for r in pool["replicas"]]
    return dict(replica)


def _uncharged(replica: dict[str, Any]) -> None:
    assert replica["failures"] == 0 and replica["consecutive_failures"] == 0, replica
    assert replica["last_error"] is None and replica["healthy"] is True, replica
    assert not replica["ejected"] and replica["breaker"]["state"] == "closed", replica


def test_the_soft_limit_is_raised_to_the_hard_limit_at_start(replica: ReplicaProcess) -> None:
    gateway = start_gateway(pool_config([replica]), nofile=(256, 4096))
    try:
        assert _soft_limit(gateway.pid) == 4096
        assert "file descriptors: soft limit 4096 (raised from 256" in gateway.log_text()
    finally:
        gateway.cleanup()


def test_silent_connections_past_the_grpc_doors_cap_are_refused_and_nobody_starves(
    replica: ReplicaProcess,
) -> None:
    config = pool_config([replica])
    config["server"] = {"header_timeout_s": 3.0}
    gateway = start_gateway(config, grpc=True, nofile=(LIMIT, LIMIT))
    assert gateway.grpc_port is not None
    spare = LIMIT - FIXED_RESERVE
    cap = (spare - min(256 + CONTROL_CONNECTIONS, spare // 2)) // 2  # the derived default
    try:
        assert f"each door holds up to {cap} connections" in gateway.log_text()
        with (
            silent_connections(gateway.grpc_port, SILENT) as held,
            httpx.Client(base_url=gateway.url, trust_env=False, timeout=10) as client,
        ):
            wait_until(lambda: _refused(held) >= SILENT - cap, 15, message="the ones past the cap")
            assert _open_fds(gateway.data_pid) < LIMIT - 64  # room left for everything else
            for body in request_bodies(8):
                answer = client.post(INFER, content=body, headers=JSON)
                assert answer.status_code == 200, answer.text[:300]
            _uncharged(_replica_state(client))
            # the ones it held send nothing: closed after header_timeout_s, the door opens
            wait_until(lambda: _refused(held) == SILENT, 15, message="the held ones closed")
            with grpc.insecure_channel(f"127.0.0.1:{gateway.grpc_port}") as channel:
                stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
                assert stub.ServerLive(service_pb2.ServerLiveRequest(), timeout=10).live
    finally:
        gateway.cleanup()


def test_a_replica_is_not_charged_for_the_gateways_own_lack_of_descriptors(
    replica: ReplicaProcess,
) -> None:
    config = pool_config([replica])
    config["server"] = {"max_connections": 10 * LIMIT}  # set above what the limit allows
    gateway = start_gateway(config, grpc=True, nofile=(LIMIT, LIMIT))
    assert gateway.grpc_port is not None
    try:
        with httpx.Client(base_url=gateway.url, trust_env=False, timeout=10) as client:
            client.get("/v2/health/ready").raise_for_status()  # its connection, opened now
            worker = gateway.data_pid  # whose descriptors the connections take
            with silent_connections(gateway.grpc_port, SILENT):
                wait_until(lambda: _open_fds(worker) >= LIMIT - 2, 15, message="all fds taken")
                time.sleep(1.0)  # the health probes go on meanwhile
                body = request_bodies(1)[0]
                answers = [client.post(INFER, content=body, headers=JSON) for _ in range(12)]
                assert {a.status_code for a in answers} <= {200, 503}
                assert any(a.status_code == 503 for a in answers), answers[0].text[:300]
                refused = next(a for a in answers if a.status_code == 503)
                assert "short of file descriptors or memory" in refused.json()["error"]
                _uncharged(_replica_state(client))
            wait_until(lambda: _open_fds(worker) < LIMIT // 2, 15, message="fds released")
            metrics = client.get("/metrics").text
            counted = r'gateway_local_resource_errors_total\{errno="EMFILE"\} [1-9]'
            assert re.search(counted, metrics), metrics[:500]
            answer = client.post(INFER, content=body, headers=JSON)
            assert answer.status_code == 200, answer.text[:300]
            _uncharged(_replica_state(client))
    finally:
        gateway.cleanup()
