"""The load a replica reports: on every answer in ORCA's text form, and on ``/metrics``.

A gateway that balances by its own outstanding requests cannot see the load other clients
put on a replica, nor a replica whose own queue is deep. So the replica says it: every
answer carries ``endpoint-load-metrics`` in the text form of ORCA (Open Request Cost
Aggregation, the load report Envoy reads from backends and gRPC's xDS balancers weigh by):

    endpoint-load-metrics: TEXT named_metrics.queue=3, named_metrics.inflight=4

``queue`` is the requests waiting for an inference thread, ``inflight`` those received and
not yet answered (the waiting ones included). A replica with an accelerator adds its
temperature and ECC counts under their names on ``/metrics`` (`v2proto.dcgm`), e.g.
``named_metrics.DCGM_FI_DEV_GPU_TEMP=71``. Out of band the same queue is on ``/metrics`` under
Triton's name (`PENDING_METRIC`), so a gateway reads a replica of ours and a Triton server
alike. `text_report` writes the header's value; the gateway reads it (`gateway.policies.
load_report`) and never trusts it beyond bounds.
"""

from __future__ import annotations

from collections.abc import Iterable

HEADER = "endpoint-load-metrics"
TEXT_FORM = "TEXT"  # ORCA's text form; ``BIN`` (a protobuf) and ``JSON`` exist too
NAMED = "named_metrics."  # ORCA's prefix of an application's own metric names
QUEUE = "queue"
INFLIGHT = "inflight"
# Triton's gauge of requests waiting to be executed, per model and version
PENDING_METRIC = "nv_inference_pending_request_count"
INFLIGHT_METRIC = "replica_requests_in_flight"  # ours: received and not yet answered
# The accelerator readings a replica adds to each report (the ones a drain reads soonest)
ACCELERATOR_NAMES: tuple[str, ...] = (
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
)


def number(value: float) -> str:
    """A value as the report writes it: a whole number without a fraction."""
    value = float(value)
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def text_report(named: Iterable[tuple[str, float]]) -> str:
    """The header's value for ``named`` metrics (name, value), in ORCA's text form."""
    return TEXT_FORM + " " + ", ".join(f"{NAMED}{name}={number(v)}" for name, v in named)
