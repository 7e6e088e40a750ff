"""How to ask replicas for outputs the gateway can read: the same request, JSON outputs only.

Vote legs decode the replicas' answers to compare them, and plain JSON outputs are what every
V2 server speaks (the binary extension is optional). The client's own output choices, which
the vote's reply honours, are read by `v2proto.outputs`.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.v2.request import InferRequestInfo, detached, parse_infer_request


def json_outputs_request(info: InferRequestInfo, body: bytes) -> tuple[bytes, str | None]:
    """The same request asking for JSON outputs; returns the body and its header length.

    The client's own body when it asks for nothing else (no re-encoding of a large request).
    """
    length = None if info.binary_length == 0 else str(len(body) - info.binary_length)
    if not needs_json_outputs_rewrite(info.header):
        return body, length
    if detached(info.header):  # parsed in a worker, without its data: parse it whole
        info = parse_infer_request(body, length)
    return rewrite_json_outputs(info, body)


def needs_json_outputs_rewrite(header: dict[str, Any]) -> bool:
    """Whether the request asks for anything but the default (JSON) outputs."""
    parameters = header.get("parameters")
    if isinstance(parameters, dict) and "binary_data_output" in parameters:
        return True
    return any(set(output) != {"name"} for output in header.get("outputs") or ())


def rewrite_json_outputs(info: InferRequestInfo, body: bytes) -> tuple[bytes, str | None]:
    header = dict(info.header)
    parameters = header.get("parameters")
    parameters = dict(parameters) if isinstance(parameters, dict) else {}
    parameters.pop("binary_data_output", None)
    if parameters:
        header["parameters"] = parameters
    else:
        header.pop("parameters", None)
    if header.get("outputs") is not None:
        header["outputs"] = [{"name": o["name"]} for o in header["outputs"]]
    head = orjson.dumps(header)
    if info.binary_length == 0:
        return head, None
    return head + body[len(body) - info.binary_length :], str(len(head))
