"""Rewrites a replica's infer reply so the client sees its own model name and version.

Replicas may call the model something else (``digits-mlp`` version 3 behind the client's
``digits`` version 1); only the JSON header part is touched, binary tensor bytes pass through.
"""

from __future__ import annotations

import orjson


def rename_reply(
    body: bytes, header_length: str | None, model_name: str, version: str
) -> tuple[bytes, str | None]:
    """Returns the new body and the new Inference-Header-Content-Length (or None)."""
    split = len(body)
    if header_length is not None:
        try:
            split = int(header_length)
        except ValueError:
            return body, header_length
    try:
        header = orjson.loads(body[:split])
    except orjson.JSONDecodeError:
        return body, header_length
    if not isinstance(header, dict):
        return body, header_length
    header["model_name"] = model_name
    header["model_version"] = version
    new_header = orjson.dumps(header)
    if header_length is None:
        return new_header, None
    return new_header + body[split:], str(len(new_header))
