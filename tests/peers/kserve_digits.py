"""A KServe model server for the digits estimator: ``python kserve_digits.py --http_port N``.

Runs in the KServe venv (`.ci/peers.sh`), not the project's, as a custom ``kserve.Model`` the
way KServe's own examples serve a scikit-learn model over V2, so the peer tests meet KServe's
real V2 REST front end. Like MLServer's sklearn runtime it answers ``predict`` (INT64 labels,
shape [n]) unless the request names outputs, and also ``predict_proba`` (FP32, [n, 10]).
"""

# mypy: allow-subclassing-any

from __future__ import annotations

import argparse
import os
from typing import Any

import joblib  # type: ignore[import-untyped]
import numpy as np
from kserve import (  # type: ignore[import-not-found]  # the KServe venv's
    InferOutput,
    InferRequest,
    InferResponse,
    Model,
    ModelServer,
)
from kserve import model_server as kserve_model_server
from kserve.errors import InvalidInput  # type: ignore[import-not-found]
from kserve.utils.utils import generate_uuid  # type: ignore[import-not-found]

MODEL_NAME = "digits"
N_FEATURES = 64
N_CLASSES = 10
OUTPUTS = ("predict", "predict_proba")


class DigitsModel(Model):
    """The joblib-dumped scikit-learn pipeline behind KServe's V2 endpoints."""

    def __init__(self, name: str, model_path: str) -> None:
        super().__init__(name)
        self.model_path = model_path
        self.estimator: Any = None
        self.load()

    def load(self) -> bool:
        self.estimator = joblib.load(self.model_path)
        self.ready = True
        return True

    def predict(
        self,
        payload: InferRequest,
        headers: dict[str, str] | None = None,
        response_headers: dict[str, str] | None = None,
    ) -> InferResponse:
        if len(payload.inputs) != 1:
            raise InvalidInput(f"expected one input tensor, got {len(payload.inputs)}")
        features = payload.inputs[0].as_numpy().astype(np.float32).reshape(-1, N_FEATURES)
        wanted = [out.name for out in payload.request_outputs or []] or ["predict"]
        unknown = sorted(set(wanted) - set(OUTPUTS))
        if unknown:
            raise InvalidInput(f"unknown outputs {unknown}; this model answers {list(OUTPUTS)}")
        outputs = [self._output(name, features) for name in wanted]
        return InferResponse(
            response_id=payload.id or generate_uuid(),
            model_name=self.name,
            infer_outputs=outputs,
            use_binary_outputs=payload.use_binary_outputs,
            requested_outputs=payload.request_outputs,  # KServe encodes each as asked
        )

    def _output(self, name: str, features: np.ndarray[Any, Any]) -> InferOutput:
        if name == "predict":
            result = np.asarray(self.estimator.predict(features), dtype=np.int64)
            datatype = "INT64"
        else:
            result = np.asarray(self.estimator.predict_proba(features), dtype=np.float32)
            datatype = "FP32"
        return InferOutput(name=name, shape=list(result.shape), datatype=datatype, data=result)

    def get_input_types(self) -> list[dict[str, Any]]:
        return [{"name": "input-0", "datatype": "FP32", "shape": [-1, N_FEATURES]}]

    def get_output_types(self) -> list[dict[str, Any]]:
        return [
            {"name": "predict", "datatype": "INT64", "shape": [-1]},
            {"name": "predict_proba", "datatype": "FP32", "shape": [-1, N_CLASSES]},
        ]


def main() -> None:
    # KServe parses its own flags (--http_port, --enable_grpc, ...) at import time.
    parser = argparse.ArgumentParser(parents=[kserve_model_server.parser], add_help=False)
    parser.add_argument(
        "--model_path",
        default=os.path.join(os.path.dirname(__file__), "model.joblib"),
        help="the joblib-dumped scikit-learn estimator",
    )
    args, _ = parser.parse_known_args()
    model = DigitsModel(MODEL_NAME, args.model_path)
    ModelServer().start([model])


if __name__ == "__main__":
    main()
