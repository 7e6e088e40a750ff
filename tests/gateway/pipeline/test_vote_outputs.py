"""A vote asks every leg for the outputs it compares, in each pool's names, and a leg that
answers other outputs is a missing answer: never a dissent, a strike or a failure charged."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson

from gateway.config import parse_config
from gateway.upstream.transport.base import Reply
from gateway.v2.codec import decode_outputs
from gateway.v2.request import parse_infer_request
from tests.gateway.fakes import Behaviour
from tests.gateway.pipeline.rig import Rig

MODEL = "digits-vote"
LABEL = 7
SCORES = [0.01] * 10
SCORES[LABEL] = 0.91
# A server's output names -> (datatype, shape of one row, one row's data)
OURS = {"label": ("INT64", [], LABEL), "probabilities": ("FP32", [10], SCORES)}
SKLEARN = {"predict": ("INT64", [1], [LABEL]), "predict_proba": ("FP32", [10], SCORES)}
SKLEARN_NAMES = {"label": {"name": "predict", "shape": [-1]}, "probabilities": "predict_proba"}


def server(
    outputs: dict[str, tuple[str, list[int], Any]],
    default: list[str],
    seen: list[list[str] | None],
    ignores_asked: bool = False,
) -> Behaviour:
    """A V2 server answering the outputs asked (``default`` when none), or 400 for an unknown
    one; ``ignores_asked`` answers ``default`` whatever is asked. ``seen``: what was asked."""

    async def behave(method: str, path: str, payload: bytes) -> Reply:
        request = orjson.loads(payload)
        asked = [o["name"] for o in request["outputs"]] if request.get("outputs") else None
        seen.append(asked)
        names = default if asked is None or ignores_asked else asked
        if any(name not in outputs for name in names):
            return Reply(400, {}, b'{"error": "unknown output"}')
        rows = request["inputs"][0]["shape"][0]
        doc = {
            "model_name": "digits",
            "id": request.get("id"),
            "outputs": [
                {
                    "name": name,
                    "datatype": outputs[name][0],
                    "shape": [rows, *outputs[name][1]],
                    "data": [outputs[name][2]] * rows,
                }
                for name in names
            ],
        }
        return Reply(200, {"content-type": "application/json"}, orjson.dumps(doc))

    return behave


def _rig(behaviours: dict[str, Behaviour], mapped: tuple[str, ...] = ("c",), **vote: Any) -> Rig:
    """A vote over pools a, b (our servers' names) and c (scikit-learn servers' names)."""
    ports = {"a": 9100, "b": 9200, "c": 9300}
    pools = {
        name: {
            "model": "digits",
            "replicas": [{"id": name, "url": f"http://127.0.0.1:{port}"}],
            **({"tensors": {"outputs": SKLEARN_NAMES}} if name in mapped else {}),
        }
        for name, port in ports.items()
    }
    vote = {"pools": list(ports), "quorum": 2, **vote}
    config = parse_config({"pools": pools, "models": {MODEL: {"vote": vote}}})
    return Rig(config, {f"127.0.0.1:{ports[k]}": v for k, v in behaviours.items()})


def _call(rig: Rig, **extra: Any) -> Any:
    """A 4-row request to the vote; ``extra``: its outputs, parameters."""
    request: dict[str, Any] = {
        "id": "req-1",
        "inputs": [{"name": "input", "shape": [4, 64], "datatype": "FP32", "data": [0.0] * 256}],
        **extra,
    }
    body = orjson.dumps(request)
    return rig.call(2.0, model=MODEL, body=body, request=parse_infer_request(body, None))


async def test_no_outputs_named_every_leg_is_asked_the_label_outputs() -> None:
    """curl's default: our servers would answer label and probabilities, a scikit-learn server
    only predict; asked the same (label, as predict to it), the three agree on every row."""
    seen: dict[str, list[list[str] | None]] = {"a": [], "b": [], "c": []}
    rig = _rig(
        {
            "a": server(OURS, ["label", "probabilities"], seen["a"]),
            "b": server(OURS, ["label", "probabilities"], seen["b"]),
            "c": server(SKLEARN, ["predict"], seen["c"]),
        }
    )
    for _ in range(5):
        result = await rig.pipeline.handler(_call(rig))
        assert result.vote == "3/3"
        assert decode_outputs(result.body, result.header_length)["label"].tolist() == [LABEL] * 4
    assert seen == {"a": [["label"]] * 5, "b": [["label"]] * 5, "c": [["predict"]] * 5}
    assert rig.pipeline.suspects.to_json()[MODEL]["c"]["dissents"] == 0


async def test_the_vote_asks_for_its_outputs_or_the_clients_in_each_pools_names() -> None:
    seen: dict[str, list[list[str] | None]] = {"a": [], "b": [], "c": []}
    behaviours = {
        "a": server(OURS, ["label", "probabilities"], seen["a"]),
        "b": server(OURS, ["label", "probabilities"], seen["b"]),
        "c": server(SKLEARN, ["predict"], seen["c"]),
    }
    rig = _rig(behaviours, outputs=["label", "probabilities"])
    alone = await rig.pipeline.handler(_call(rig, outputs=[{"name": "probabilities"}]))
    assert alone.vote == "3/3" and list(decode_outputs(alone.body, None)) == ["probabilities"]
    assert seen["a"] == [["probabilities"]] and seen["c"] == [["predict_proba"]]
    binary = {"binary_data_output": True}  # tritonclient's default: the vote's outputs, binary
    result = await rig.pipeline.handler(_call(rig, parameters=binary))
    assert result.vote == "3/3" and seen["c"][-1] == ["predict", "predict_proba"]
    assert seen["a"][-1] == ["label", "probabilities"]
    decoded = decode_outputs(result.body, result.header_length)
    assert result.header_length is not None and list(decoded) == ["label", "probabilities"]
    np.testing.assert_allclose(decoded["probabilities"][0], SCORES, rtol=1e-6)


async def test_a_leg_answering_other_outputs_is_a_missing_answer_not_a_strike() -> None:
    """A server that answers its own names whatever is asked (c: no mapping for its predict)
    answered another question: the other two decide; it is never a dissenter, never
    quarantined for it, never charged a failure (before: it dissented on every row)."""
    seen: dict[str, list[list[str] | None]] = {"a": [], "b": [], "c": []}
    rig = _rig(
        {
            "a": server(OURS, ["label", "probabilities"], seen["a"]),
            "b": server(OURS, ["label", "probabilities"], seen["b"]),
            "c": server(SKLEARN, ["predict", "predict_proba"], seen["c"], ignores_asked=True),
        },
        mapped=(),
        suspect_min_votes=10,
        suspect_window=20,
        suspect_ratio=0.5,
    )
    for _ in range(30):
        result = await rig.pipeline.handler(_call(rig))
        assert result.status == 200 and result.vote == "2/2" and "c" not in result.served_by
        assert decode_outputs(result.body, result.header_length)["label"].tolist() == [LABEL] * 4
    assert len(seen["c"]) == 30  # asked every time: never quarantined
    assert "c" not in rig.pipeline.suspects.to_json()[MODEL]
    c = next(r for r in rig.registry.replicas() if r.id == "c")
    assert c.failures == 0 and c.quarantined_until == 0.0


def _scores(odd_shift: int) -> Behaviour:
    """A pool's servers answering ``probabilities`` alike on every row, except that the pool's
    first answer has row 0's peak moved by ``odd_shift`` classes."""
    answered: list[int] = []

    async def behave(method: str, path: str, payload: bytes) -> Reply:
        request = orjson.loads(payload)
        rows = [list(SCORES) for _ in range(request["inputs"][0]["shape"][0])]
        if not answered:
            rows[0] = np.roll(SCORES, odd_shift).tolist()
        answered.append(1)
        out = {"name": "probabilities", "datatype": "FP32", "shape": [len(rows), 10], "data": rows}
        doc = {"model_name": "digits", "id": request.get("id"), "outputs": [out]}
        return Reply(200, {"content-type": "application/json"}, orjson.dumps(doc))

    return behave


async def test_a_tiebreak_on_scores_alone_strikes_the_rows_that_differed() -> None:
    """Scores alone (no label compared): three versions split on row 0 of 4, the spares agree;
    each replaced answer is struck for that one row of four (before: 1 of 1, as if it had
    differed everywhere in a one-row batch)."""
    pools = {
        name: {
            "model": "digits",
            "replicas": [
                {"id": f"{name}{i}", "url": f"http://127.0.0.1:{port + i}"} for i in (1, 2)
            ],
        }
        for name, port in (("a", 9100), ("b", 9200), ("c", 9300))
    }
    vote = {"pools": list(pools), "quorum": 2}
    config = parse_config({"pools": pools, "models": {MODEL: {"vote": vote}}})
    behaviours = {}
    for shift, port in ((1, 9100), (2, 9200), (3, 9300)):
        pool = _scores(shift)  # one script for both replicas of the pool
        behaviours.update({f"127.0.0.1:{port + i}": pool for i in (1, 2)})
    rig = Rig(config, behaviours)
    result = await rig.pipeline.handler(_call(rig, outputs=[{"name": "probabilities"}]))
    assert result.vote == "3/3"
    records = rig.pipeline.suspects.to_json()[MODEL].values()
    assert sorted((r["votes"], r["dissents"]) for r in records) == [(4, 0)] * 3 + [(4, 1)] * 3
