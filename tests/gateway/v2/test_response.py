from __future__ import annotations

import orjson

from gateway.v2.response import rename_reply


def test_json_reply_is_renamed() -> None:
    body = orjson.dumps({"model_name": "digits-mlp", "model_version": "7", "outputs": []})
    new, length = rename_reply(body, None, "digits", "1")
    assert length is None
    assert orjson.loads(new) == {"model_name": "digits", "model_version": "1", "outputs": []}


def test_binary_reply_keeps_its_tensor_bytes() -> None:
    header = orjson.dumps({"model_name": "digits-mlp", "outputs": []})
    tensor = bytes(range(16))
    new, length = rename_reply(header + tensor, str(len(header)), "digits", "1")
    assert length is not None
    assert new[int(length) :] == tensor
    assert orjson.loads(new[: int(length)])["model_name"] == "digits"


def test_non_json_passes_through() -> None:
    assert rename_reply(b"not json", None, "d", "1") == (b"not json", None)
