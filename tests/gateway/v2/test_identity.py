"""Ids upstream and back: each request leaves with an id no other request has (the client's,
made unique), spliced into its JSON header as its own buffer, and the client gets its own
id back in the answer."""

from __future__ import annotations

import orjson

from gateway.v2.body import Body
from gateway.v2.identity import request_id_of, upstream_id, with_client_id, with_request_id
from gateway.v2.request import parse_infer_request

JSON = b'{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1.0]}]}'
TENSOR = b"\x00\x00\x80?"
BINARY = (
    b'{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","parameters":{"binary_data_size":4}}]}'
)


def splice(body: bytes, length: str | None, sent: str) -> tuple[Body, str | None]:
    new, new_length, info = with_request_id(
        Body.of(body), length, parse_infer_request(body, length), sent
    )
    assert info.id == sent and info.header["id"] == sent
    return new, new_length


def test_two_clients_with_the_same_id_send_different_ids_upstream() -> None:
    first, second = upstream_id("1"), upstream_id("1")
    assert first != second and first.startswith("1~") and second.startswith("1~")


def test_an_id_the_gateway_made_is_unique_already_and_cannot_be_forged() -> None:
    made = request_id_of(None)
    assert upstream_id(made) is made  # no suffix, and nothing to put back in the answer
    assert upstream_id(str(made)).startswith(f"{made}~")  # the same text from a client


def test_a_request_without_an_id_gets_one_as_a_buffer_of_its_own() -> None:
    new, length = splice(JSON, None, 'gw-1"')
    assert length is None and orjson.loads(new.joined())["id"] == 'gw-1"'
    assert new.joined().startswith(b'{"id":"gw-1\\"",')  # small: one new buffer
    new, length = splice(BINARY + TENSOR, str(len(BINARY)), "gw-2")
    joined = new.joined()
    assert length is not None and joined[int(length) :] == TENSOR
    assert orjson.loads(joined[: int(length)])["id"] == "gw-2"


def test_the_clients_id_is_replaced_first_last_or_amid_the_header() -> None:
    doc = orjson.loads(JSON)
    for body in (
        orjson.dumps({"id": "mine", **doc}),
        orjson.dumps({**doc, "id": "mine"}),
        b' { "id" : "mine" ,' + JSON[1:],
        orjson.dumps({"inputs": doc["inputs"], "id": "mine", "outputs": [{"name": "y"}]}),
    ):
        new, _ = splice(body, None, "mine~7")
        assert orjson.loads(new.joined()) == {**orjson.loads(body), "id": "mine~7"}
    tensor = TENSOR * 8192  # a large body: spliced as views of what arrived
    spec = {
        "name": "x",
        "shape": [8192],
        "datatype": "FP32",
        "parameters": {"binary_data_size": len(tensor)},
    }
    head = orjson.dumps({"id": "mine", "inputs": [spec]})
    info = parse_infer_request(head + tensor, str(len(head)))
    new, length, _ = with_request_id(Body([head, tensor]), str(len(head)), info, "mine~8")
    last = new.pieces[-1]  # the tensor bytes: the chunk they arrived in, not a copy
    assert isinstance(last, memoryview) and last.obj is tensor
    assert length == str(len(head) + 2) and new.joined().endswith(tensor)


def test_the_client_gets_its_own_id_back() -> None:
    reply = b'{"model_name":"m","id":"1~ab-3","outputs":[]}'
    assert with_client_id(reply, None, "1~ab-3", "1") == (
        b'{"model_name":"m","id":"1","outputs":[]}',
        None,
    )
    spaced = b'{"model_name": "m", "id": "1~ab-3", "outputs": []}' + TENSOR
    new, length = with_client_id(spaced, str(len(spaced) - 4), "1~ab-3", "1")
    assert length == str(len(spaced) - 4 - 5) and new.endswith(TENSOR)
    assert orjson.loads(new[: int(length)])["id"] == "1"
    odd = b'{"outputs":[],"id" :"1~ab-3"}'  # not as encoders write it: re-encoded
    assert orjson.loads(with_client_id(odd, None, "1~ab-3", "1")[0])["id"] == "1"
    other = b'{"id":"2~ab-4","outputs":[]}'  # not this request's: left as it is
    assert with_client_id(other, None, "1~ab-3", "1") == (other, None)
