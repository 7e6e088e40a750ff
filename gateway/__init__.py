"""Fault-tolerant Open Inference Protocol (KServe V2 REST) gateway."""

import os

__version__ = "0.1.0"

# gRPC's fork handlers off unless the environment says otherwise; grpc reads this when it is
# imported, so it is set here, first. The gateway's children (parse processes, `gateway up`'s
# replicas) exec at once and never use gRPC, and with the handlers on, each fork under a running
# gRPC server writes a non-JSON line to stderr ("skipping fork() handlers").
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
