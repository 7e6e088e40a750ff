"""The gateway's own replies (votes, fallbacks) choose outputs as a replica does."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import orjson
import pytest

from gateway.errors import BadRequest
from gateway.v2.reply import encode_reply, error_text
from gateway.v2.request import InferRequestInfo, parse_infer_request
from v2proto.codec import InferResponse, decode_infer_response

OUTPUTS = {"label": np.array([3], dtype=np.int64), "probabilities": np.zeros((1, 10), np.float32)}
INPUTS = '"inputs": [{"name": "input", "shape": [1, 1], "datatype": "FP32", "data": [1]}]'


@dataclass
class Model:
    version: str = "7"


@dataclass
class Call:
    request: InferRequestInfo | None
    model_name: str = "digits"
    model: Model = field(default_factory=Model)


def reply(body: str) -> tuple[InferResponse, list[str]]:
    """The decoded reply to ``body`` and the names of the outputs sent as binary."""
    encoded = encode_reply(Call(parse_infer_request(body.encode(), None)), OUTPUTS)
    header = orjson.loads(encoded.body[: encoded.json_length])
    binary = [o["name"] for o in header["outputs"] if "parameters" in o]
    return decode_infer_response(encoded.body, encoded.json_length), binary


@pytest.mark.parametrize(
    ("extra", "names", "binary"),
    [
        ("", ["label", "probabilities"], []),
        (', "outputs": []', ["label", "probabilities"], []),  # empty: all, as replicas read it
        (', "parameters": {"binary_data_output": true}', ["label", "probabilities"],
         ["label", "probabilities"]),
        (', "outputs": [{"name": "probabilities"}]', ["probabilities"], []),
        (', "parameters": {"binary_data_output": true}, "outputs": [{"name": "label"},'
         ' {"name": "probabilities", "parameters": {"binary_data": false}}]',
         ["label", "probabilities"], ["label"]),
    ],
)  # fmt: skip
def test_outputs_as_the_client_asked(extra: str, names: list[str], binary: list[str]) -> None:
    response, sent_binary = reply("{" + INPUTS + extra + "}")
    assert list(response.outputs) == names
    assert sent_binary == binary


def test_the_reply_echoes_the_request_id_and_names_the_clients_model() -> None:
    response, _ = reply('{"id": "abc", ' + INPUTS + "}")
    assert (response.id, response.model_name, response.model_version) == ("abc", "digits", "7")


def test_an_unknown_output_is_a_400() -> None:
    with pytest.raises(BadRequest, match="unknown output 'nope'"):
        reply("{" + INPUTS + ', "outputs": [{"name": "nope"}]}')


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
