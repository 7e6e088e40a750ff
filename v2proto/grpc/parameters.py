"""V2 ``parameters`` between REST (JSON values) and gRPC (``InferParameter``: a oneof of bool,
int64, uint64, double, string). The REST-only form flags (`FORM_FLAGS`) never go to gRPC."""

from __future__ import annotations

import math
from collections.abc import Mapping, MutableMapping
from typing import Any

from v2proto.errors import ProtocolError
from v2proto.grpc import grpc_service_pb2 as pb

FORM_FLAGS = frozenset({"binary_data_output", "binary_data", "binary_data_size"})
_INT64 = (-(2**63), 2**63 - 1)
_UINT64_MAX = 2**64 - 1


def put_parameters(
    into: MutableMapping[str, pb.InferParameter], params: Mapping[str, Any], where: str
) -> None:
    for key, value in params.items():
        if key in FORM_FLAGS:
            continue
        into[key].CopyFrom(_parameter(value, f"{where}.{key}".lstrip(".")))


def _parameter(value: object, where: str) -> pb.InferParameter:
    if isinstance(value, bool):
        return pb.InferParameter(bool_param=value)
    if isinstance(value, int):
        if _INT64[0] <= value <= _INT64[1]:
            return pb.InferParameter(int64_param=value)
        if 0 <= value <= _UINT64_MAX:
            return pb.InferParameter(uint64_param=value)
        raise ProtocolError(f"parameter {where}: {value} does not fit a 64-bit integer")
    if isinstance(value, float):
        return pb.InferParameter(double_param=value)
    if isinstance(value, str):
        return pb.InferParameter(string_param=value)
    raise ProtocolError(
        f"parameter {where}: gRPC parameters are booleans, integers, numbers or strings, "
        f"got {type(value).__name__}"
    )


def rest_parameters(params: Mapping[str, pb.InferParameter]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in params.items():
        choice = value.WhichOneof("parameter_choice")
        if choice == "double_param" and not math.isfinite(value.double_param):
            raise ProtocolError(f"parameter {key}: {value.double_param} is not JSON (not finite)")
        if choice is not None:
            out[key] = getattr(value, choice)
    return out
