"""One input, named: a digest of what the model is given, for the fault judge's record.

Two requests carry "the same input" when their ``inputs`` (each tensor's name, datatype,
shape, parameters and data, in the JSON header or as binary bytes after it) are the same;
the request's ``id``, the outputs it asks for and its other parameters do not count, since
every request has its own id and a vote leg asks for other outputs. A body that is not a V2
request is named by all its bytes. Computed only for error answers, never on the way of a
good one.
"""

from __future__ import annotations

import hashlib

import orjson

DIGEST_BYTES = 16


def input_digest(body: bytes, header_length: str | None) -> str:
    """A short hex digest of the request's inputs (see the module's docstring)."""
    split = _header_length(header_length, len(body))
    view = memoryview(body)
    digest = hashlib.blake2b(digest_size=DIGEST_BYTES)
    try:
        inputs = orjson.loads(view[:split])["inputs"]
        digest.update(orjson.dumps(inputs, option=orjson.OPT_SORT_KEYS))
    except (orjson.JSONDecodeError, TypeError, KeyError):
        digest.update(view[:split])
    digest.update(view[split:])
    return digest.hexdigest()


def _header_length(header_length: str | None, size: int) -> int:
    """Where the JSON header ends (the whole body without the binary extension)."""
    try:
        length = int(header_length) if header_length is not None else size
    except ValueError:
        return size
    return length if 0 < length <= size else size
