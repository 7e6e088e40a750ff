from __future__ import annotations

import orjson
import pytest

from gateway.v2.reply import (
    check_reply,
    error_text,
    overflowed_output,
    rename_reply,
    why_not_reply,
    with_reply_id,
)


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


_BINARY_4 = b'{"id":"a","outputs":[{"name":"y","parameters":{"binary_data_size":4}}]}'
_BINARY_8 = b'{"id":"a","outputs":[{"name":"y","parameters":{"binary_data_size":8}}]}'
_BAD_SIZE = b'{"id":"a","outputs":[{"name":"y","parameters":{"binary_data_size":-1}}]}'


@pytest.mark.parametrize(
    ("body", "header_length", "problem"),
    [
        (b'{"id":"a","outputs":[{"name":"y","data":[1]}]}', None, None),
        (b'{"outputs":[{"name":"y","data":[1]}]}', None, "the reply has no id"),  # any one's
        (b'{"id":null,"outputs":[{"name":"y","data":[1]}]}', None, "the reply has no id"),
        (b'{"id":"b","outputs":[]}', None, "not the request's 'a'"),
        (b'{"id":1,"outputs":[]}', None, "not the request's 'a'"),
        (b'{"id":"a","outputs":[{"name":"y","da', None, "not JSON"),  # truncated
        (b"", None, "not JSON"),
        (b"[]", None, "not a JSON object"),
        (b'{"id":"a"}', None, "no 'outputs'"),
        (b'{"id":"a","outputs":[{"data":[1]}]}', None, "no name"),
        (b'{"id":"a","outputs":[{"name":"y"}]}', None, "neither data nor a binary size"),
        (_BINARY_4 + b"1234", str(len(_BINARY_4)), None),
        (_BINARY_8 + b"1234", str(len(_BINARY_8)), "8 bytes"),
        (b'{"id":"a","outputs":[]}', "99", "does not fit"),
        (b'{"id":"a","outputs":[]}', "x", "does not fit"),
        (_BAD_SIZE, None, "bad binary"),
    ],
)
def test_check_reply(body: bytes, header_length: str | None, problem: str | None) -> None:
    found = check_reply(body, header_length, "a")
    assert (found is None) if problem is None else (found is not None and problem in found)


_SHAPES = [
    b'{"id":"a","outputs":[{"name":"y","data":[1],"parameters":{"binary_data_size":null}}]}',
    b'{"id":"a","outputs":[{"name":"y","data":null}]}',
    b'{"id":"a","outputs":[{"name":"y","data":{"x":1}}]}',
    b'{"id":"a","outputs":[{"name":"y","parameters":[]}]}',
    b'{"id":"a","outputs":[{"name":"y","parameters":{"binary_data_size":true}}]}',
    b'{"id":"a","outputs":[{"name":"y","parameters":{"binary_data_size":1.5}}]}',
    b'{"id":"a","outputs":[{"name":7,"data":[1]}]}',
    b'{"id":"a","outputs":[[]]}',
    b'{"id":"a","outputs":{}}',
    b'  {"id" : "a", "outputs" : [ {"name":"y", "data" : [[1, 2], [3, 4]]} ] }  ',
    b'{"id":"a","outputs":[{"name":"y","data":[1]}],"id":"b"}',
    b'{"id":"a","outputs":[{"name":"y","data":[NaN]}]}',
    _BINARY_4 + b"12345",
]


@pytest.mark.parametrize("body", _SHAPES)
@pytest.mark.parametrize("echoes_id", [True, False])
def test_the_typed_decode_judges_as_the_field_by_field_check(body: bytes, echoes_id: bool) -> None:
    """`check_reply`'s one typed decode accepts exactly what `why_not_reply` accepts, and
    what it refuses is explained in `why_not_reply`'s words."""
    length = str(len(_BINARY_4)) if body.startswith(_BINARY_4) else None
    for expected in ("a", "b", None):
        fast = check_reply(body, length, expected, echoes_id=echoes_id)
        assert fast == why_not_reply(body, length, expected, echoes_id=echoes_id)


def test_only_a_pool_that_does_not_echo_ids_may_answer_without_one() -> None:
    idless = b'{"outputs":[{"name":"y","data":[1]}]}'
    assert check_reply(idless, None, "a", echoes_id=False) is None
    # a wrong id is wrong whatever the pool says
    problem = check_reply(b'{"id":"b","outputs":[]}', None, "a", echoes_id=False)
    assert problem is not None and "not the request's 'a'" in problem


def test_a_reply_from_a_server_that_does_not_echo_ids_gets_the_requests() -> None:
    body, length = with_reply_id(b'{"model_name":"m","outputs":[]}', None, "a")
    assert length is None and orjson.loads(body) == {"id": "a", "model_name": "m", "outputs": []}
    header = b'{"id":null,"outputs":[{"name":"y","parameters":{"binary_data_size":4}}]}'
    body, length = with_reply_id(header + b"1234", str(len(header)), "a")
    assert length is not None and body[int(length) :] == b"1234"
    assert orjson.loads(body[: int(length)])["id"] == "a"
    assert check_reply(body, length, "a") is None
    echoed = b'{"id":"a","outputs":[]}'
    assert with_reply_id(echoed, None, "a") == (echoed, None)


def test_an_idless_overflow_is_not_this_requests_unless_the_pool_does_not_echo() -> None:
    idless = b'{"outputs":[{"name":"y","data":[null]}]}'
    assert overflowed_output(idless, None, "a") is None  # a protocol error, not a refusal
    assert overflowed_output(idless, None, "a", echoes_id=False) == "y"
    assert overflowed_output(b'{"id":"a","outputs":[{"name":"y","data":[null]}]}', None, "a")


def test_a_reply_written_with_spaces_is_renamed_without_decoding_its_numbers() -> None:
    """No compact prefix to splice: the members are read raw and only the names change, so
    each number of the outputs reaches the client as the replica wrote it (decoding a large
    answer into an object per number kept the allocator's arenas after it was written)."""
    data = b"[0.100000, 1e-05, 2.50, -0.0]"
    body = b'{"id": "7", "model_name": "digits-mlp", "outputs": [{"name": "y", "data": ' + data
    body += b"}]}"
    new, length = rename_reply(body, None, "digits", "1")
    assert length is None and data in new
    reply = orjson.loads(new)
    assert (reply["model_name"], reply["model_version"], reply["id"]) == ("digits", "1", "7")
    tensor = bytes(range(8))
    header = b'{"outputs": [{"name": "y", "parameters": {"binary_data_size": 8}}]}'
    new, length = rename_reply(header + tensor, str(len(header)), "digits", "1")
    assert length is not None and new[int(length) :] == tensor
    assert orjson.loads(new[: int(length)])["model_name"] == "digits"
    nested = b'{"outputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    assert rename_reply(nested, None, "digits", "1") == (nested, None)  # left as it is


@pytest.mark.parametrize(
    ("body", "text"),
    [
        (b'{"error": "bad shape"}', "bad shape"),  # V2
        (
            b'{"detail": "Model versioning not supported yet."}',
            "Model versioning not supported yet.",
        ),
        (
            b'{"detail": [{"loc": ["body", "inputs", 0, "data"], "msg": "field required"}]}',
            "body.inputs.0.data: field required",
        ),  # FastAPI's validation error, as MLServer answers it
        (b"<html>502 Bad Gateway</html>", "<html>502 Bad Gateway</html>"),
    ],
)
def test_error_text_reads_v2_and_fastapi_errors(body: bytes, text: str) -> None:
    assert error_text(body) == text
