"""Builds the gateway's own V2 reply (for votes and fallbacks) the way the client asked.

Outputs the client named, in the form it named (binary or JSON), or all of them in its
default form; the client's model name, version and request id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from gateway.errors import BadRequest
from gateway.pipeline.call import InferCall
from gateway.v2.codec import EncodedBody, encode_outputs
from gateway.v2.outputs import binary_by_default, requested_outputs


def encode_reply(call: InferCall, outputs: Mapping[str, Any]) -> EncodedBody:
    header = call.request.header if call.request is not None else {}
    chosen = requested_outputs(header)
    if chosen is None:
        default = binary_by_default(header)
        chosen = [(name, default) for name in outputs]
    missing = [name for name, _ in chosen if name not in outputs]
    if missing:
        raise BadRequest(
            f"unknown output {missing[0]!r}; the model's outputs: {', '.join(outputs)}"
        )
    return encode_outputs(
        call.model_name,
        call.model.version,
        [(name, outputs[name], binary) for name, binary in chosen],
        call.request.id if call.request is not None else None,
    )


def error_text(body: bytes, limit: int = 200) -> str:
    """A replica's error message from its ``{"error": ...}`` body, or the body's start."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), str):
        return str(parsed["error"])[:limit]
    return body[:limit].decode("utf-8", "replace").strip()
