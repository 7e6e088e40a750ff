"""What any client can put in trace context, request ids and a body's nesting, through one real
gateway's two doors (issue 37, findings 8 and 10).

- ``tracestate`` reaches the replica only when it has the W3C syntax (and then as its members
  joined by commas); CR/LF, NUL, VT, DEL, a tab in a value, bytes outside ASCII, too long, too
  many members or a key twice: dropped. On the gRPC door a CR/LF one was answered INTERNAL
  with a logged traceback and counted as a 5xx against the model; NUL/VT/DEL and non-ASCII went
  to the replica raw, on both doors.
- ``traceparent`` and ``x-request-id`` as hostile: the call is answered, a new trace and the
  gateway's own id take their place.
- A body nested 20 k to 6 M deep (40 KB to 12 MB: the inline fast path, and the worker
  process) is a 400 saying it nests too deep, where it was a 500 and a traceback; the gRPC
  door's messages nest only as protobuf does, and a deep one is INVALID_ARGUMENT.

Every case is answered (200 / OK, or 400 / INVALID_ARGUMENT), the gateway logs nothing at
ERROR, and ``/metrics`` counts no 5xx. The replica is `tests.support.rogue_replica` in its
``headers`` mode: it answers every infer and prints the trace-context headers it came with.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import orjson
import pytest

from gateway.telemetry.tracecontext import parse_traceparent
from tests.support.gateway import GatewayProcess, start_gateway
from tests.support.h2_grpc import INFER, Ended, H2Client, frame
from tests.support.processes import ReplicaProcess, free_port, wait_until
from v2proto.grpc import grpc_service_pb2 as pb

pytestmark = pytest.mark.integration
TRACE = "0af7651916cd43dd8448eb211c80319c"
TRACEPARENT = f"00-{TRACE}-b7ad6b7169203331-01".encode()
ROW = b"[" + b",".join([b"0.5"] * 64) + b"]"
BODY = b'{"inputs":[{"name":"input","shape":[1,64],"datatype":"FP32","data":' + ROW + b"}]}"
OK, INVALID_ARGUMENT = 0, 3
TOO_DEEP = "nests deeper than 64 levels"
COUNTED_5XX = 'gateway_requests_total{code="5'
# Not W3C: each is dropped whole, on both doors.
BAD_TRACESTATES = {
    "CR/LF": b"a=b\r\nx-evil: 1",
    "NUL": b"a=b\x00c",
    "VT": b"a=b\x0bc",
    "DEL": b"a=b\x7fc",
    "a tab in a value": b"a=b\tc",
    "Latin-1": b"a=\xe9",
    "UTF-8": "a=é".encode(),
    "over 512": b",".join(b"%c=" % k + b"v" * 200 for k in b"abc"),
    "33 members": b",".join(b"k%d=v" % i for i in range(33)),
    "a key twice": b"a=1,a=2",
}
# Over HTTP/1.1 a CR/LF ends the header line: what follows is a header of its own.
REST_TRACESTATES = {k: v for k, v in BAD_TRACESTATES.items() if k != "CR/LF"}
BAD_TRACEPARENTS = {
    "CR/LF": TRACEPARENT + b"\r\nx-evil: 1",
    "NUL": TRACEPARENT[:-1] + b"\x00",
    "Latin-1": b"\xe9" * 55,
}
BAD_REQUEST_IDS = {
    "CR/LF": b"abc\r\nx-evil: 1",
    "NUL": b"abc\x00",
    "Latin-1": b"\xe9",
    "5000 long": b"a" * 5000,
}


@dataclass
class Setup:
    gateway: GatewayProcess
    replica: ReplicaProcess


@pytest.fixture(scope="module")
def setup() -> Iterator[Setup]:
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "tests.support.rogue_replica",
        "--port",
        str(port),
        "--mode",
        "headers",
    ]
    replica = ReplicaProcess(argv, host="127.0.0.1", port=port, name="digits-mlp", version="1")
    try:
        wait_until(lambda: replica.ready() or not replica.alive(), 20, message=replica.log_text)
        assert replica.alive(), replica.log_text()
        pool = {
            "model": "digits-mlp",
            "version": "1",
            "replicas": [{"id": "r0", "url": replica.url}],
        }
        gateway = start_gateway(
            {"pools": {"p": pool}, "models": {"digits": {"pool": "p"}}}, grpc=True
        )
        try:
            yield Setup(gateway, replica)
        finally:
            gateway.cleanup()
    finally:
        replica.cleanup()


@pytest.fixture
def quiet(setup: Setup) -> Iterator[None]:
    """After the test: nothing logged at ERROR and no 5xx counted, for any of its calls."""
    logged = len(setup.gateway.log_text())
    counted = five_hundreds(setup.gateway)
    yield
    lines = setup.gateway.log_text()[logged:].splitlines()
    errors = [line for line in lines if '"level":"ERROR"' in line or "Traceback" in line]
    assert errors == [], errors[:3]
    assert five_hundreds(setup.gateway) == counted


def five_hundreds(gateway: GatewayProcess) -> float:
    """The answers ``/metrics`` counts as 5xx, all models together."""
    metrics = httpx.get(f"{gateway.url}/metrics", trust_env=False, timeout=5).text
    lines = metrics.splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(COUNTED_5XX))


def seen(replica: ReplicaProcess) -> list[dict[str, str]]:
    """The trace-context headers of each infer the replica answered, in order."""
    lines = replica.log_text().splitlines()
    return [orjson.loads(line[len("headers ") :]) for line in lines if line.startswith("headers ")]


def forwarded_by(replica: ReplicaProcess, before: int) -> dict[str, str]:
    """The headers of the one infer the replica answered after ``before`` had been."""
    wait_until(lambda: len(seen(replica)) > before, 10, message="the replica's headers line")
    [headers] = seen(replica)[before:]
    return headers


async def grpc_call(gateway: GatewayProcess, metadata: list[tuple[bytes, bytes]]) -> Ended:
    request = pb.ModelInferRequest(model_name="digits")
    tensor = request.inputs.add(name="input", datatype="FP32", shape=[1, 64])
    tensor.contents.fp32_contents.extend([0.5] * 64)
    return await grpc_send(gateway, request.SerializeToString(), metadata)


async def grpc_send(
    gateway: GatewayProcess, message: bytes, metadata: list[tuple[bytes, bytes]]
) -> Ended:
    """One ModelInfer call, its metadata sent byte for byte (no gRPC library sends CR/LF)."""
    assert gateway.grpc_port is not None
    async with H2Client("127.0.0.1", gateway.grpc_port) as client:
        sid = client.call(INFER, frame(message), metadata=metadata)
        ended = await client.wait(sid, 20)
    assert ended is not None and not ended.reset, ended
    return ended


def rest_call(gateway: GatewayProcess, headers: list[tuple[bytes, bytes]]) -> tuple[int, bytes]:
    """One infer over a raw connection, its headers sent byte for byte: (status, body)."""
    head = b"POST /v2/models/digits/infer HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json"
    head += b"\r\ncontent-length: %d\r\n" % len(BODY)
    head += b"".join(name + b": " + value + b"\r\n" for name, value in headers)
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
        sock.sendall(head + b"connection: close\r\n\r\n" + BODY)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    status = int(answer.split(b" ", 2)[1])
    return status, answer.partition(b"\r\n\r\n")[2]


@pytest.mark.usefixtures("quiet")
@pytest.mark.parametrize("value", BAD_TRACESTATES.values(), ids=BAD_TRACESTATES.keys())
async def test_grpc_a_tracestate_that_is_not_w3c_is_dropped_and_the_call_answered(
    setup: Setup, value: bytes
) -> None:
    before = len(seen(setup.replica))
    metadata = [(b"traceparent", TRACEPARENT), (b"tracestate", value)]
    ended = await grpc_call(setup.gateway, metadata)
    assert ended.code == OK, ended
    headers = forwarded_by(setup.replica, before)
    assert "tracestate" not in headers, headers
    parent = parse_traceparent(headers["traceparent"])
    assert parent is not None and parent.trace_id == TRACE  # the caller's trace goes on


@pytest.mark.usefixtures("quiet")
@pytest.mark.parametrize("value", REST_TRACESTATES.values(), ids=REST_TRACESTATES.keys())
def test_rest_a_tracestate_that_is_not_w3c_never_reaches_the_replica(
    setup: Setup, value: bytes
) -> None:
    before = len(seen(setup.replica))
    status, body = rest_call(setup.gateway, [(b"traceparent", TRACEPARENT), (b"tracestate", value)])
    if status == 400:  # the HTTP server's own refusal of a control byte: no replica saw it
        assert b"refused by" not in body and len(seen(setup.replica)) == before, body
        return
    assert status == 200, body
    headers = forwarded_by(setup.replica, before)
    assert "tracestate" not in headers and headers["traceparent"][3:35] == TRACE, headers


@pytest.mark.usefixtures("quiet")
async def test_a_w3c_tracestate_goes_on_through_both_doors(setup: Setup) -> None:
    given = [(b"traceparent", TRACEPARENT), (b"tracestate", b" rojo=1 ,\tcongo=t61rcWkgMzE,")]
    before = len(seen(setup.replica))
    assert (await grpc_call(setup.gateway, given)).code == OK
    assert forwarded_by(setup.replica, before)["tracestate"] == "rojo=1,congo=t61rcWkgMzE"
    before = len(seen(setup.replica))
    assert rest_call(setup.gateway, given)[0] == 200
    assert forwarded_by(setup.replica, before)["tracestate"] == "rojo=1,congo=t61rcWkgMzE"


@pytest.mark.usefixtures("quiet")
@pytest.mark.parametrize("value", BAD_TRACEPARENTS.values(), ids=BAD_TRACEPARENTS.keys())
async def test_grpc_a_hostile_traceparent_starts_a_new_trace(setup: Setup, value: bytes) -> None:
    before = len(seen(setup.replica))
    metadata = [(b"traceparent", value), (b"tracestate", b"rojo=1")]
    ended = await grpc_call(setup.gateway, metadata)
    assert ended.code == OK, ended
    headers = forwarded_by(setup.replica, before)
    parent = parse_traceparent(headers["traceparent"])
    assert parent is not None and parent.trace_id != TRACE, headers
    assert "tracestate" not in headers  # none without the caller's valid traceparent
    echoed = parse_traceparent(ended.metadata["traceparent"])
    assert echoed is not None and echoed.trace_id == parent.trace_id


@pytest.mark.usefixtures("quiet")
@pytest.mark.parametrize("value", BAD_REQUEST_IDS.values(), ids=BAD_REQUEST_IDS.keys())
async def test_grpc_a_hostile_request_id_is_replaced_by_the_gateways_own(
    setup: Setup, value: bytes
) -> None:
    ended = await grpc_call(setup.gateway, [(b"x-request-id", value)])
    assert ended.code == OK, ended
    answered = ended.metadata["x-request-id"]
    assert answered.isascii() and answered.isprintable() and 0 < len(answered) <= 128
    assert answered.encode() != value


def nested(levels: int) -> bytes:
    return b"[" * levels + b"1" + b"]" * levels


# The inline fast path (from 32 KB), on the loop up to 2 MB, and the worker process beyond.
DEEP_BODIES = {
    "40 KB, 20k deep": 20_000,
    "400 KB, 200k deep": 200_000,
    "4 MB, 2M deep": 2_000_000,
    "12 MB, 6M deep": 6_000_000,
}


@pytest.mark.usefixtures("quiet")
@pytest.mark.parametrize("levels", DEEP_BODIES.values(), ids=DEEP_BODIES.keys())
def test_rest_a_deeply_nested_body_is_a_400_saying_so(setup: Setup, levels: int) -> None:
    body = BODY.replace(ROW, nested(levels))
    with httpx.Client(base_url=setup.gateway.url, trust_env=False, timeout=30) as client:
        answer = client.post("/v2/models/digits/infer", content=body)
        assert answer.status_code == 400, answer.text
        assert TOO_DEEP in answer.json()["error"]
        parameters = body.replace(b'"data":', b'"parameters":{"p":' + nested(100) + b'},"data":')
        answer = client.post("/v2/models/digits/infer", content=parameters)
        assert answer.status_code == 400 and TOO_DEEP in answer.json()["error"], answer.text


def groups(levels: int) -> bytes:
    """``levels`` protobuf groups of an unknown field (99) nested in one another."""
    return b"\x9b\x06" * levels + b"\x9c\x06" * levels


@pytest.mark.usefixtures("quiet")
@pytest.mark.parametrize("levels", [150, 400_000], ids=["600 B", "1.6 MB"])
async def test_grpc_a_deeply_nested_message_is_invalid_argument(setup: Setup, levels: int) -> None:
    request = pb.ModelInferRequest(model_name="digits").SerializeToString()
    ended = await grpc_send(setup.gateway, request + groups(levels), [])
    assert ended.code == INVALID_ARGUMENT, ended
