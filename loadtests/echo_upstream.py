"""An upstream that costs almost nothing: a bare uvloop + httptools V2 server with a fixed answer.

What the scaling benchmark (``loadtests/bench_scaling.py``) puts behind the gateway, nginx and
the minimal proxy, so that their own cost per request is what the load generator sees, not a
model's. It answers ``POST /v2/models/{m}[/versions/{v}]/infer`` for its one model with a fixed
V2 reply that carries the request's ``id`` (the gateway refuses an answer that does not echo
the id it sent: `gateway.v2.reply.check_reply`), and the reads a gateway makes of a replica
(``GET /v2``, ``/v2/health/live``, ``/v2/health/ready``, the model's metadata and ``/ready``).
Each request is answered inside the parser's callback: no task, no ASGI, no framework.

The metadata declares what the fixed answer is: one FP32 input ``[1, 64]`` (one digits row) and
one INT64 output ``label`` ``[1]``. Its server metadata lists no extensions, so a gateway sends
it JSON. Run: ``.venv/bin/python loadtests/echo_upstream.py --port 9200 [--model digits-mlp]``.
"""

from __future__ import annotations

import argparse
import asyncio
import re

import httptools
import orjson
import uvloop

MAX_REQUEST_BYTES = 1 << 20  # head and body of one request; past it: 413 and the connection closes
HEADER_LENGTH = b"inference-header-content-length"

# The request's top-level "id" when it opens the JSON object, as the gateway writes it
# (`gateway.v2.identity.with_request_id`); any other place is found by decoding the header.
_FIRST_ID = re.compile(rb'\s*\{\s*"id"\s*:\s*("(?:[^"\\]|\\.)*")')
_REASONS = {
    200: b"OK",
    400: b"Bad Request",
    404: b"Not Found",
    405: b"Method Not Allowed",
    413: b"Content Too Large",
}


def _head(status: int, length: int) -> bytes:
    return b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % (
        status,
        _REASONS[status],
        length,
    )


def _error(status: int, message: str) -> tuple[int, bytes]:
    return status, orjson.dumps({"error": message})


def request_id(header: bytes) -> bytes | None:
    """The top-level ``id`` of a V2 request's JSON header as JSON text (what the reply echoes),
    None when it has none. The header is decoded only where an ``id`` key may be other than
    first (ValueError then when it is not a JSON object): nothing else of it is checked."""
    first = _FIRST_ID.match(header)
    if first is not None:
        return first[1]
    if b'"id"' not in header and b"\\" not in header:
        return None  # no key can be "id" (an escaped one would need a backslash)
    doc = orjson.loads(header)
    if not isinstance(doc, dict):
        raise ValueError("the request is not a JSON object")
    value = doc.get("id")
    return None if value is None else orjson.dumps(value)


class Answers:
    """The fixed answers of one model, built once: what each path gets."""

    def __init__(self, model: str, version: str) -> None:
        self.model, self.version = model, version
        name = orjson.dumps(model)[:-1]
        self.prefix = b'{"model_name":' + name + b'","model_version":"' + version.encode() + b'",'
        self.outputs = b'"outputs":[{"name":"label","datatype":"INT64","shape":[1],"data":[0]}]}'
        metadata = {
            "name": model,
            "versions": [version],
            "platform": "echo",
            "inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64]}],
            "outputs": [{"name": "label", "datatype": "INT64", "shape": [1]}],
        }
        base = f"/v2/models/{model}"
        reads = {
            "/v2": {"name": "echo-upstream", "version": "1", "extensions": []},
            "/v2/health/live": {"live": True},
            "/v2/health/ready": {"ready": True},
            base: metadata,
            f"{base}/ready": {"name": model, "ready": True},
            f"{base}/versions/{version}": metadata,
            f"{base}/versions/{version}/ready": {"name": model, "ready": True},
        }
        self.reads = {path.encode(): orjson.dumps(doc) for path, doc in reads.items()}
        self.infer = {f"{base}/infer".encode(), f"{base}/versions/{version}/infer".encode()}

    def answer(
        self, method: bytes, path: bytes, body: bytes, split: int | None
    ) -> tuple[int, bytes]:
        """The status and body for one request (``split``: its header length, if it gave one)."""
        if path in self.infer:
            if method != b"POST":
                return _error(405, "infer takes POST")
            return self.infer_reply(body, split)
        read = self.reads.get(path)
        if read is None:
            return _error(404, f"no route for {path[:200].decode('latin-1')}")
        if method != b"GET":
            return _error(405, "GET only")
        return 200, read

    def infer_reply(self, body: bytes, split: int | None) -> tuple[int, bytes]:
        if split is not None and not 0 < split <= len(body):
            return _error(400, "Inference-Header-Content-Length does not fit the body")
        try:
            echoed = request_id(body if split is None else body[:split])
        except ValueError:
            return _error(400, "the request is not a JSON object")
        if echoed is None:
            return 200, self.prefix + self.outputs
        return 200, b"".join((self.prefix, b'"id":', echoed, b",", self.outputs))


class EchoProtocol(asyncio.Protocol):
    """One client connection; requests answered in order, each as its last byte arrives."""

    def __init__(self, answers: Answers) -> None:
        self.answers = answers
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.split: int | None = None
        self.chunks: list[bytes] = []
        self.received = 0  # bytes of the request in progress

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.received += len(data)
        if self.received > MAX_REQUEST_BYTES:
            self._close_with(413, f"a request is at most {MAX_REQUEST_BYTES} bytes")
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._close_with(400, "no upgrades")
        except httptools.HttpParserError:
            self._close_with(400, "malformed HTTP/1.1")

    def on_message_begin(self) -> None:
        self.url, self.split, self.chunks = b"", None, []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == HEADER_LENGTH:
            self.split = int(value) if value.isdigit() else -1

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        body = self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)
        self.received = 0
        path = self.url.partition(b"?")[0]
        status, reply = self.answers.answer(self.parser.get_method(), path, body, self.split)
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        transport.writelines((_head(status, len(reply)), reply))
        if not self.parser.should_keep_alive():
            transport.close()

    def _close_with(self, status: int, message: str) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            _, reply = _error(status, message)
            transport.writelines((_head(status, len(reply)), reply))
            transport.close()


async def serve(host: str, port: int, answers: Answers) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: EchoProtocol(answers), host, port, backlog=1024)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", default="digits-mlp", help="the one model it serves")
    parser.add_argument("--version", default="1", help="the model's one version")
    args = parser.parse_args(argv)
    uvloop.run(serve(args.host, args.port, Answers(args.model, args.version)))


if __name__ == "__main__":
    main()
