"""Rewrites a replica's infer reply so the client sees its own model name and version.

Replicas may call the model something else (``digits-mlp`` version 3 behind the client's
``digits`` version 1); only the JSON header part is touched, binary tensor bytes pass through.
"""

from __future__ import annotations

import re

import orjson

# Compact replies (orjson, our replicas) start like this; the hot path splices the prefix
# instead of decoding and re-encoding the whole JSON header.
_PREFIX = re.compile(rb'^\{"model_name":"[^"\\]*"(,"model_version":"[^"\\]*")?')


def rename_reply(
    body: bytes, header_length: str | None, model_name: str, version: str
) -> tuple[bytes, str | None]:
    """Returns the new body and the new Inference-Header-Content-Length (or None)."""
    match = _PREFIX.match(body)
    if match is not None and (match[1] is not None or b'"model_version"' not in body):
        prefix = orjson.dumps({"model_name": model_name, "model_version": version})[:-1]
        new = prefix + body[match.end() :]
        if header_length is None:
            return new, None
        if header_length.isdigit():
            return new, str(int(header_length) + len(new) - len(body))
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
