"""The gateway's own answers (votes, fallbacks) choose outputs as a replica does."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import orjson
import pytest

from gateway.errors import BadRequest
from gateway.v2.answer import encode_answer
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


def answer(body: str) -> tuple[InferResponse, list[str]]:
    """The decoded answer to ``body`` and the names of the outputs sent as binary."""
    encoded = encode_answer(Call(parse_infer_request(body.encode(), None)), OUTPUTS)
    header = orjson.loads(encoded.body[: encoded.json_length])
    binary = [o["name"] for o in header["outputs"] if "parameters" in o]
    return decode_infer_response(encoded.body, encoded.json_length), binary


@pytest.mark.parametrize(
    ("extra", "names", "binary"),
    [
        ("", ["label", "probabilities"], []),
        (', "outputs": []', ["label", "probabilities"], []),  # empty: all, as replicas read it
        (
            ', "parameters": {"binary_data_output": true}',
            ["label", "probabilities"],
            ["label", "probabilities"],
        ),
        (', "outputs": [{"name": "probabilities"}]', ["probabilities"], []),
        (
            ', "parameters": {"binary_data_output": true}, "outputs": [{"name": "label"},'
            ' {"name": "probabilities", "parameters": {"binary_data": false}}]',
            ["label", "probabilities"],
            ["label"],
        ),
    ],
)
def test_outputs_as_the_client_asked(extra: str, names: list[str], binary: list[str]) -> None:
    response, sent_binary = answer("{" + INPUTS + extra + "}")
    assert list(response.outputs) == names
    assert sent_binary == binary


def test_the_answer_echoes_the_request_id_and_names_the_clients_model() -> None:
    response, _ = answer('{"id": "abc", ' + INPUTS + "}")
    assert (response.id, response.model_name, response.model_version) == ("abc", "digits", "7")


def test_an_unknown_output_is_a_400() -> None:
    with pytest.raises(BadRequest, match="unknown output 'nope'"):
        answer("{" + INPUTS + ', "outputs": [{"name": "nope"}]}')
