"""What a vote leg is asked: exactly the outputs the vote compares, in JSON, with the client's
body kept byte for byte where it names no outputs (a large body is not parsed again)."""

from __future__ import annotations

import numpy as np
import orjson

from gateway.api.parse_process import parse_detached
from gateway.v2.body import Body
from gateway.v2.outputs import asking_for
from gateway.v2.request import InferRequestInfo, parse_infer_request


def ask(
    info: InferRequestInfo, body: bytes, names: list[str] | None
) -> tuple[InferRequestInfo, bytes, str | None]:
    """`asking_for` on ``body`` received in one buffer, its new body joined."""
    asked, new, length = asking_for(info, Body.of(body), names)
    return asked, new.joined(), length


DATA = b"[" + b",".join([b"0.50"] * 64) + b"]"  # as a client wrote it: orjson would write 0.5
BODY = b' {"id":"r-1","inputs":[{"name":"input","shape":[1,64],"datatype":"FP32","data":' + (
    DATA + b"}]}"
)


def test_a_body_naming_no_outputs_gets_them_spliced_in_not_re_encoded() -> None:
    for info in (parse_infer_request(BODY, None), parse_detached(BODY, None, None)):
        asked, body, length = ask(info, BODY, ["label", "probabilities"])
        assert length is None and DATA in body  # its data untouched
        wanted = [{"name": "label"}, {"name": "probabilities"}]
        assert orjson.loads(body) == {**orjson.loads(BODY), "outputs": wanted}
        assert asked.header["outputs"] == wanted and asked.id == "r-1"
        assert asked.header["inputs"] == info.header["inputs"]  # detached stays detached


def test_a_binary_body_keeps_its_data_and_its_header_length_grows() -> None:
    raw = np.arange(64, dtype=np.float32).tobytes()
    tensor = {
        "name": "input",
        "shape": [1, 64],
        "datatype": "FP32",
        "parameters": {"binary_data_size": len(raw)},
    }
    head = orjson.dumps({"inputs": [tensor]})
    info = parse_infer_request(head + raw, str(len(head)))
    asked, body, length = ask(info, head + raw, ["label"])
    assert length is not None and body.endswith(raw) and len(body) == int(length) + len(raw)
    assert orjson.loads(body[: int(length)])["outputs"] == [{"name": "label"}]
    assert asked.binary_length == len(raw)


def test_outputs_the_client_named_are_replaced_by_those_compared() -> None:
    doc = orjson.loads(BODY)
    body = orjson.dumps({**doc, "outputs": [{"name": "probabilities"}]})
    asked, new_body, _ = ask(parse_infer_request(body, None), body, ["label"])
    assert orjson.loads(new_body)["outputs"] == [{"name": "label"}]
    assert asked.header["outputs"] == [{"name": "label"}]
    same = orjson.dumps({**doc, "outputs": [{"name": "label"}]})
    assert ask(parse_infer_request(same, None), same, ["label"])[1] is same
