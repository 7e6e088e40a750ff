"""Triton's model configuration, derived from V2 model metadata when no replica serves one.

Triton clients call ``get_model_config`` (``GET /v2/models/NAME/config``) before inferring.
Where a replica is a Triton server its own configuration is passed through (renamed); for
other V2 servers the gateway answers the part it knows from the model's metadata: tensors
with Triton's ``TYPE_*`` data types, and, since every model here takes a batch as its first
dimension, ``max_batch_size`` (the model's row limit) with ``dims`` after the batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PLATFORM = "v2-gateway"


def triton_config(metadata: Mapping[str, Any], max_rows: int) -> dict[str, Any]:
    return {
        "name": metadata.get("name"),
        "platform": PLATFORM,
        "max_batch_size": max_rows,
        "input": [_tensor(t) for t in _specs(metadata.get("inputs"))],
        "output": [_tensor(t) for t in _specs(metadata.get("outputs"))],
    }


def _specs(raw: Any) -> list[Mapping[str, Any]]:
    if not isinstance(raw, list):
        return []
    return [t for t in raw if isinstance(t, Mapping) and isinstance(t.get("name"), str)]


def _tensor(spec: Mapping[str, Any]) -> dict[str, Any]:
    shape = spec.get("shape")
    dims = [int(d) for d in shape[1:]] if isinstance(shape, list) and shape else []
    datatype = spec.get("datatype")
    data_type = "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"
    return {"name": spec["name"], "data_type": data_type, "dims": dims}
