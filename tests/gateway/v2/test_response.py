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


def test_compact_prefix_is_spliced_with_or_without_a_version() -> None:
    for original in (
        b'{"model_name":"digits-mlp","model_version":"7","outputs":[]}',
        b'{"model_name":"digits-mlp","outputs":[]}',
    ):
        new, length = rename_reply(original, None, "digits", "1")
        assert length is None
        assert orjson.loads(new) == {"model_name": "digits", "model_version": "1", "outputs": []}


def test_spliced_binary_reply_gets_the_new_header_length() -> None:
    header = b'{"model_name":"digits-mlp","model_version":"1","outputs":[]}'
    new, length = rename_reply(header + b"\x00\x01", str(len(header)), "d", "1")
    assert length is not None and new[int(length) :] == b"\x00\x01"
    assert orjson.loads(new[: int(length)])["model_name"] == "d"


def test_a_version_further_on_is_not_duplicated() -> None:
    body = b'{"model_name":"m","id":"5","model_version":"9","outputs":[]}'
    new, _ = rename_reply(body, None, "digits", "1")
    assert new.count(b"model_version") == 1 and orjson.loads(new)["model_version"] == "1"
