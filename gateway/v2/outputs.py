"""What a V2 request asks back, and how to ask replicas for outputs the gateway can read.

A vote or a fallback builds its own reply, so it needs the client's output choices (names,
binary or JSON); and vote legs ask replicas for plain JSON outputs, which every V2 server
speaks (the binary extension is optional).
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.v2.request import InferRequestInfo


def requested_outputs(header: dict[str, Any]) -> list[tuple[str, bool]] | None:
    """``[(name, binary)]`` the client asked for, or None for "all, in the default form"."""
    outputs = header.get("outputs")
    if outputs is None:
        return None
    default = bool(_binary(header.get("parameters"), "binary_data_output"))
    chosen = []
    for output in outputs:
        flag = _binary(output.get("parameters"), "binary_data")
        chosen.append((str(output["name"]), default if flag is None else flag))
    return chosen


def binary_by_default(header: dict[str, Any]) -> bool:
    return bool(_binary(header.get("parameters"), "binary_data_output"))


def _binary(parameters: Any, key: str) -> bool | None:
    if not isinstance(parameters, dict) or key not in parameters:
        return None
    return bool(parameters[key])


def json_outputs_request(info: InferRequestInfo, body: bytes) -> tuple[bytes, str | None]:
    """The same request asking for JSON outputs; returns the body and its header length."""
    header = dict(info.header)
    parameters = dict(header.get("parameters") or {})
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
