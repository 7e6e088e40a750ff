"""How to ask replicas for outputs the gateway can read: the same request, JSON outputs only.

Vote legs decode the replicas' answers to compare them, and plain JSON outputs are what every
V2 server speaks (the binary extension is optional). The client's own output choices, which
the vote's reply honours, are read by `v2proto.outputs`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import orjson

from gateway.v2.body import Body
from gateway.v2.request import InferRequestInfo, detached, parse_infer_request

# a JSON object's opening brace
_OPENING = re.compile(rb"\s*\{")
# bytes read for it (a validated request has only whitespace before)
_OPENING_SCAN = 4096


def asking_for(
    info: InferRequestInfo, body: Body, names: Sequence[str] | None
) -> tuple[InferRequestInfo, Body, str | None]:
    """The same request asking for exactly the outputs ``names``, in JSON (None: the ones the
    client named, if any); returns its parsed header, its body and its header length.

    A vote compares what every leg was asked for, so it asks each leg for the same outputs
    (a pool's dialect then renames them). The client's own body when it already asks for that;
    else its JSON header changed and its tensor bytes shared, not copied (`Body`).
    """
    length = None if info.binary_length == 0 else str(len(body) - info.binary_length)
    wanted = None if names is None else [{"name": name} for name in names]
    if not needs_json_outputs_rewrite(info.header):
        if wanted is None or info.header.get("outputs") == wanted:
            return info, body, length
        if "outputs" not in info.header:
            # curl's default: neither parsed nor re-encoded
            spliced = _spliced(info, body, length, wanted)
            if spliced is not None:
                return spliced
    if detached(info.header):
        # parsed in a worker, without its data: parse it whole
        info = parse_infer_request(body, length)
    header = _json_header(info.header)
    if wanted is not None:
        header["outputs"] = wanted
    asked = InferRequestInfo(info.id, header, info.binary_length)
    return (asked, *_encoded(asked, body))


def _spliced(
    info: InferRequestInfo, body: Body, length: str | None, wanted: list[dict[str, str]]
) -> tuple[InferRequestInfo, Body, str | None] | None:
    """The body with ``"outputs": wanted`` put in front of its other keys, its bytes otherwise
    as they came (a large request is neither parsed again nor re-encoded)."""
    opening = _OPENING.match(body.head(min(len(body), _OPENING_SCAN)))
    if opening is None:
        return None
    key = b'"outputs":' + orjson.dumps(wanted) + b","
    spliced = body.spliced(opening.end(), key)
    length = None if length is None else str(int(length) + len(key))
    return (
        InferRequestInfo(info.id, {**info.header, "outputs": wanted}, info.binary_length),
        spliced,
        length,
    )


def needs_json_outputs_rewrite(header: dict[str, Any]) -> bool:
    """Whether the request asks for anything but the default (JSON) outputs."""
    parameters = header.get("parameters")
    if isinstance(parameters, dict) and "binary_data_output" in parameters:
        return True
    return any(set(output) != {"name"} for output in header.get("outputs") or ())


def _json_header(header: dict[str, Any]) -> dict[str, Any]:
    """``header`` asking for its outputs (or all, if it names none) in JSON."""
    header = dict(header)
    parameters = header.get("parameters")
    parameters = dict(parameters) if isinstance(parameters, dict) else {}
    parameters.pop("binary_data_output", None)
    if parameters:
        header["parameters"] = parameters
    else:
        header.pop("parameters", None)
    if header.get("outputs") is not None:
        header["outputs"] = [{"name": o["name"]} for o in header["outputs"]]
    return header


def _encoded(asked: InferRequestInfo, body: Body) -> tuple[Body, str | None]:
    """``asked``'s header, then the binary tensor data of the original ``body`` (if any)."""
    head = orjson.dumps(asked.header)
    if asked.binary_length == 0:
        return Body.of(head), None
    tail = body.views(len(body) - asked.binary_length)
    return Body([head, *tail]), str(len(head))
