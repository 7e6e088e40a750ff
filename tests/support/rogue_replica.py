"""A misbehaving V2 "replica" for integration tests: a raw TCP server speaking just enough HTTP.

It answers readiness and metadata like a healthy server, so the gateway's health probes keep it
in the pool, and answers infer requests in one of several wrong ways (``--mode``):

- ``refuse``: 400 ``{"error": ...}`` to every infer (a rollout with a changed signature that
  still reports ready: the black hole that P2C loves because it is fast);
- ``hostile`` / ``hostile-500``: 400 / 500 whose error text (`HOSTILE_ERROR`) holds markup, a
  line that forges a log line, a terminal escape and an address, none of which a client may see;
- ``stale``: a well-formed 200 carrying another request's ``id`` (a desynchronised stream);
- ``truncated``: a 200 without Content-Length, cut short by closing the connection;
- ``empty``: a 200 with an empty body;
- ``redirect``: a 302 with no body;
- ``huge``: a well-formed 200 of about 2 MB (over a gateway's reply cap);
- ``large``: the right answer, carrying besides an output of about 14 MiB of JSON numbers
  written as Python's ``json`` writes them (a space after each separator: no compact prefix);
- ``late-idless``: the right answer at once, then a copy of it *without* its ``id`` 300 ms
  later on the same keep-alive connection (an out-of-step stream); a request that arrives on
  that connection meanwhile is answered only after the copy, so the copy is what the
  connection's next request reads first; from then on the stream is one behind: each answer
  goes out when the next request arrives on the connection, ahead of that one's;
- ``late-stale``: the same, the late copy keeping the first request's ``id``;
- ``idless``: a server that never echoes ids, with the late copies of ``late-idless``;
- ``forged-load``: a right answer carrying a forged load report (``endpoint-load-metrics``),
  each answer the next of `FORGED_LOAD`: a negative queue, NaN, 1e308, thousands of names,
  another form;
- ``headers``: a right answer, and a line ``headers {...}`` printed for each infer request with
  the trace-context headers it came with, byte for byte (as Latin-1 text), so a test sees
  what the gateway forwards.

Every 200 to an infer names the request it answers in ``parameters.answer_for`` (the request's
``id``, as the gateway sent it) and, in the late modes, ``parameters.answer_tag`` (the request's
own ``parameters.tag``, which a client sets and the gateway passes on), so a test can see an
answer reach the wrong client even when it carries no id, or the same id as another's. In the
late modes it prints ``wrong reply`` each time a late copy goes out ahead of a request's answer
(what that request reads first), so a test can count the wrong replies it sent, and
``closed out of step`` when the client closes a connection on which it holds an answer.

Run as ``python -m tests.support.rogue_replica --port P --mode M``; it prints ``listening``
once bound, and is stopped by PID like every process a test starts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import itertools

import orjson

READY = b'{"ready": true}'
LATE_S = 0.3
LATE_MODES = ("late-idless", "late-stale", "idless")
HOSTILE_ERROR = (
    "<script>alert('owned')</script> input rejected\n2026-12-01 00:00:00,000 ERROR "
    "gateway.audit: FORGED drain by admin \x1b[2K from 10.9.8.7"
)
_stale_ids = itertools.count()
FORGED_LOAD = (
    "TEXT named_metrics.queue=-1",
    "TEXT named_metrics.queue=nan",
    "TEXT named_metrics.queue=1e308",
    "TEXT " + ", ".join(f"named_metrics.m{i}=1" for i in range(2000)),  # ~34 KB: in the cap
    'JSON {"named_metrics": {"queue": 0}}',
)
_forged = itertools.cycle(FORGED_LOAD)
_TRACE_HEADERS = ("traceparent", "tracestate")


def _metadata(path: str) -> bytes:
    name = path.split("/")[3] if path.count("/") >= 3 else "model"
    return orjson.dumps(
        {
            "name": name,
            "versions": ["1"],
            "platform": "rogue",
            "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 64]}],
            "outputs": [{"name": "label", "datatype": "INT64", "shape": [-1]}],
        }
    )


def _response(status: int, reason: str, body: bytes, *, framed: bool = True) -> bytes:
    head = f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
    if framed:
        head += f"content-length: {len(body)}\r\n"
    else:
        head += "connection: close\r\n"
    return head.encode() + b"\r\n" + body


def _infer_reply(mode: str, body: bytes) -> tuple[bytes, bool]:
    """(bytes to send, close the connection after)."""
    rows, request = 1, None
    try:
        request = orjson.loads(body)
        rows = int(request["inputs"][0]["shape"][0])
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, ValueError):
        pass
    if mode == "refuse":
        return _response(400, "Bad Request", b'{"error": "unknown input \'input\'"}'), False
    if mode in ("hostile", "hostile-500"):
        status, reason = (400, "Bad Request") if mode == "hostile" else (500, "Server Error")
        return _response(status, reason, orjson.dumps({"error": HOSTILE_ERROR})), False
    if mode == "empty":
        return _response(200, "OK", b""), False
    if mode == "redirect":
        return b"HTTP/1.1 302 Found\r\nlocation: /elsewhere\r\ncontent-length: 0\r\n\r\n", False
    answer = orjson.dumps(
        {
            "model_name": "rogue",
            "id": f"stale-{next(_stale_ids)}",
            "outputs": [
                {"name": "label", "datatype": "INT64", "shape": [rows], "data": [0] * rows}
            ],
        }
    )
    if mode == "stale":
        return _response(200, "OK", answer), False
    if mode == "huge":
        filler = {"name": "filler", "datatype": "FP32", "shape": [500_000], "data": [0.5] * 500_000}
        request_id = request.get("id") if isinstance(request, dict) else None
        return _response(
            200,
            "OK",
            orjson.dumps(
                {
                    "model_name": "rogue",
                    "id": request_id,
                    "outputs": [
                        {"name": "label", "datatype": "INT64", "shape": [rows], "data": [0] * rows},
                        filler,
                    ],
                }
            ),
        ), False
    if mode == "large":
        request_id = request.get("id") if isinstance(request, dict) else None
        head = b'{"model_name": "rogue", "id": ' + orjson.dumps(request_id)
        return _response(200, "OK", head + _large_tail(rows)), False
    if mode == "truncated":
        return _response(200, "OK", answer[: len(answer) // 2], framed=False), True
    raise ValueError(f"unknown mode {mode!r}")


LARGE_NUMBERS = 1_500_000  # about 14 MiB of them as ``large`` writes them: under a reply cap


@functools.cache
def _large_tail(rows: int) -> bytes:
    """``large``'s answer after its id: the label, and the filler of numbers."""
    numbers = ", ".join(f"{i % 997 / 997:.6f}" for i in range(LARGE_NUMBERS))
    return (
        f', "outputs": [{{"name": "label", "datatype": "INT64", "shape": [{rows}], '
        f'"data": [{", ".join(["0"] * rows)}]}}, {{"name": "filler", "datatype": "FP32", '
        f'"shape": [{LARGE_NUMBERS}], "data": [{numbers}]}}]}}'
    ).encode()


def _late_answers(mode: str, body: bytes) -> tuple[bytes, bytes]:
    """(the answer now, the copy sent ``LATE_S`` later) for a ``LATE_MODES`` infer request."""
    request = orjson.loads(body)
    rows = int(request["inputs"][0]["shape"][0])
    answer = {
        "model_name": "rogue",
        "id": request.get("id"),
        "parameters": {
            "answer_for": request.get("id"),
            "answer_tag": (request.get("parameters") or {}).get("tag"),
        },
        "outputs": [{"name": "label", "datatype": "INT64", "shape": [rows], "data": [0] * rows}],
    }
    idless = {k: v for k, v in answer.items() if k != "id"}
    now = idless if mode == "idless" else answer
    late = answer if mode == "late-stale" else idless
    return _response(200, "OK", orjson.dumps(now)), _response(200, "OK", orjson.dumps(late))


async def _send_later(writer: asyncio.StreamWriter, data: bytes) -> bool:
    """Sends ``data`` after ``LATE_S``; whether it went out."""
    await asyncio.sleep(LATE_S)
    if writer.is_closing():
        return False  # the client closed the connection: the copy has nowhere to go
    writer.write(data)
    with contextlib.suppress(ConnectionError):
        await writer.drain()
    return True


def _framing_and_trace(lines: list[str]) -> tuple[int, dict[str, str]]:
    """A request's Content-Length (0 if none) and its trace-context headers."""
    length = 0
    trace: dict[str, str] = {}
    for line in lines:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name == "content-length":
            length = int(value.strip())
        elif name in _TRACE_HEADERS:
            trace[name] = value.strip(" \t")
    return length, trace


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, mode: str) -> None:
    late: asyncio.Task[bool] | None = None  # this connection's late copy
    behind: bytes | None = None  # the answer held for the next request (one behind)
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            length, trace = _framing_and_trace(lines[1:])
            body = await reader.readexactly(length) if length else b""
            close = False
            if method == "GET" and path.endswith("/ready"):
                reply = _response(200, "OK", READY)
            elif method == "GET":
                reply = _response(200, "OK", _metadata(path))
            elif mode == "headers":
                print("headers", orjson.dumps(trace).decode(), flush=True)
                reply, _ = _late_answers(mode, body)
            elif mode == "forged-load":
                reply, _ = _late_answers(mode, body)
                forged = f"endpoint-load-metrics: {next(_forged)}\r\n".encode()
                reply = reply.replace(b"\r\n", b"\r\n" + forged, 1)
            elif mode in LATE_MODES:
                reply, copy = _late_answers(mode, body)
                if behind is not None:  # the previous request's answer, this one's held
                    reply, behind = behind, reply
                elif late is not None and await late:
                    # The copy went out before this request's answer, and after the client
                    # took the connection again (it closes one that got bytes while idle): it
                    # is what this request reads as its reply. Its answer waits.
                    print("wrong reply", flush=True)
                    reply, behind = b"", reply
                else:
                    late = asyncio.create_task(_send_later(writer, copy))
            else:
                reply, close = _infer_reply(mode, body)
            writer.write(reply)
            await writer.drain()
            if close:
                break
    except (asyncio.IncompleteReadError, ConnectionError, ValueError):
        pass
    finally:
        if behind is not None:
            print("closed out of step", flush=True)
        writer.close()


async def main(port: int, mode: str) -> None:
    server = await asyncio.start_server(
        lambda r, w: _serve(r, w, mode), "127.0.0.1", port, reuse_address=True
    )
    print("listening", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", required=True)
    args = parser.parse_args()
    asyncio.run(main(args.port, args.mode))
