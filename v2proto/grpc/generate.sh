#!/usr/bin/env bash
# Regenerates the protobuf message modules of v2proto/grpc from the vendored .proto files:
# grpc_service_pb2.py and model_config_pb2.py, with typed stubs (.pyi, by mypy-protobuf) for
# `mypy --strict`. The gRPC service glue is hand-written (service.py), not generated.
#
# Run from anywhere with the project's venv (dev extra: grpcio-tools, mypy-protobuf):
#   v2proto/grpc/generate.sh
# The gencode targets the protobuf runtime that grpcio-tools pins: grpcio-tools 1.78 writes
# gencode 6.31.1, which runs on every protobuf runtime from 6.31.1 on (7.x too).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
venv="${VENV:-$root/.venv}"
cd "$root"
"$venv/bin/python" -m grpc_tools.protoc \
  --proto_path=. \
  --python_out=. \
  --plugin=protoc-gen-mypy="$venv/bin/protoc-gen-mypy" \
  --mypy_out=. \
  v2proto/grpc/grpc_service.proto v2proto/grpc/model_config.proto
