"""The bounds of every value the shared state writes and reads back, as typed annotations.

The structs that travel through a store or the decisions file (`ReplicaSignal`, `Decision`,
`Heartbeat`) are msgspec structs whose fields carry these bounds, so the one model that writes
a value also checks it when it is read back: an integer outside int64, a float that is not a
wall time, an over-long string, an unknown word or an oversized list fails the decode, and the
reader drops that one value (`gateway.state.rejects`) instead of failing a whole sync.

Why bounds at all: whoever can write to the store (a leaked password, a shared Redis, a backup
restored from elsewhere) is otherwise trusted with every gateway's memory and arithmetic.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

MAX_INT64 = 2**63 - 1
# 2100-01-01 UTC: no wall time the gateway writes is later
MAX_WALL_S = 4_102_444_800.0
# replica ids, instance ids, origins, operators' names
MAX_NAME_CHARS = 256
# a decision's target: ``replica:`` and an id
MAX_KEY_CHARS = 300
# what an operator may give as the reason of an action
OPERATOR_REASON_CHARS = 500
# a rollout's progress (its trail) held in a decision's reason
PROGRESS_CHARS = 262_144
# the longest eject an operator may ask for
MAX_EJECT_S = 7 * 86_400.0
# replicas one heartbeat describes
MAX_VERDICTS = 2_048
# a stamp this far past the reader's clock is a forgery, not skew
FUTURE_SKEW_S = 300.0

# what a store script refuses to hand back at all (bytes of one stored value, before decoding)
SIGNAL_BYTES = 2_048
DECISION_BYTES = 4 * PROGRESS_CHARS + 4_096
HEARTBEAT_BYTES = 1_048_576

# versions, epochs
Version = Annotated[int, Meta(ge=0, le=MAX_INT64)]
# Unix seconds
Wall = Annotated[float, Meta(ge=0.0, le=MAX_WALL_S)]
Name = Annotated[str, Meta(max_length=MAX_NAME_CHARS)]
Key = Annotated[str, Meta(min_length=3, max_length=MAX_KEY_CHARS)]
Reason = Annotated[str, Meta(max_length=PROGRESS_CHARS)]
Rate = Annotated[float, Meta(ge=0.0, le=1e12)]
Share = Annotated[float, Meta(ge=0.0, le=1.0)]
Word = Annotated[str, Meta(max_length=64)]
