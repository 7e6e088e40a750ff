"""The worker process that parses large infer requests, so the event loop never does.

Run as ``python -m gateway.api.parse_worker``: it imports only the V2 parsing code (not the whole
gateway: its memory is on docs/measured.md), reads one request at a time from stdin and answers on
stdout, each message a length-prefixed pickle (the body follows its metadata as raw bytes). What it
sends back is *detached*: the header without the inputs' data, so unpickling it costs the event
loop microseconds, not the parse it was spared.
"""

from __future__ import annotations

import pickle
import signal
import struct
import sys
from typing import Any, BinaryIO

from gateway.errors import GatewayError
from gateway.v2.request import InferRequestInfo, check_infer_request

FRAME = struct.Struct("<Q")


def parse_detached(
    body: bytes, header_length: str | None, max_rows: int | None
) -> InferRequestInfo:
    """Parses and checks ``body`` like `parse_infer_request`, then drops the inputs' data."""
    info = check_infer_request(body, header_length, max_rows)
    header = dict(info.header)
    header["inputs"] = [{k: v for k, v in t.items() if k != "data"} for t in header["inputs"]]
    return InferRequestInfo(info.id, header, info.binary_length)


def answer(message: bytes, body: bytes) -> bytes:
    """The pickled answer to one request: ``("ok", info)`` or ``("error", GatewayError)``."""
    header_length, max_rows = pickle.loads(message)
    result: tuple[str, Any]
    try:
        result = ("ok", parse_detached(body, header_length, max_rows))
    except GatewayError as error:
        result = ("error", error)
    except Exception as exc:  # a bug here must not kill the worker: the gateway logs it
        result = ("bug", f"{type(exc).__name__}: {exc}")
    return pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)


def _read(stream: BinaryIO, size: int) -> bytes | None:
    data = stream.read(size)
    return data if len(data) == size else None


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the gateway's to handle
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    while True:
        prefix = _read(source, FRAME.size * 2)
        if prefix is None:
            return  # the gateway closed the pipe (or died): exit
        meta_size, body_size = struct.unpack("<QQ", prefix)
        message, body = _read(source, meta_size), _read(source, body_size)
        if message is None or body is None:
            return
        out = answer(message, body)
        sink.write(FRAME.pack(len(out)) + out)
        sink.flush()


if __name__ == "__main__":
    main()
