"""The messages between the control process and a worker, as msgspec Structs sent as msgpack.

Control → worker: `Welcome` (once, answering `Hello`), `Snapshot` (the whole view of the fleet
a worker routes by, sent on change and at least once a second), `Reload`, `Drain`, `Stop`, and
`Refused` (the link is refused: another protocol version). Worker → control: `Hello` (first on
every connection), then a `Batch` at its shipper's pace.

Each message is tagged with its class name (``"type"``), so one typed decoder per direction
reads a union and refuses what is not of that direction. Unknown fields are ignored, so a peer
a version newer may add fields at the end of a struct; what changes meaning bumps `PROTOCOL`,
which both ends check in `Hello` and `Welcome`. A snapshot is immutable (tuples); a batch hands
over the lists its shipper just swapped out, without copying them.

Times called ``*_until`` and ``sent_at`` are ``CLOCK_MONOTONIC`` seconds: one clock for every
process on the host.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from gateway.telemetry.answers import Answer

# bumped when a message changes meaning; both ends refuse another
PROTOCOL = 2


class Hello(msgspec.Struct, frozen=True, tag=True):
    """A worker's first message on every connection."""

    protocol: int
    # its index among the control's workers
    worker: int
    pid: int
    # of the config it runs (0: none yet)
    config_version: int


class Welcome(msgspec.Struct, frozen=True, tag=True):
    """Control's answer to `Hello`: the config to run, exactly as control validated it."""

    protocol: int
    worker: int
    config_text: str
    config_version: int
    # the control's private run directory (its admin socket is there)
    run_dir: str
    # where the config file is: its relative paths are beside it
    config_dir: str = ""
    # how many workers share the gateway's limits
    workers: int = 1
    # models handed to their rollout's candidate since
    promoted: tuple[str, ...] = ()


class Refused(msgspec.Struct, frozen=True, tag=True):
    """The link is refused (for now only another protocol version); says why."""

    reason: str


class LoadView(msgspec.Struct, frozen=True, array_like=True):
    """A replica's load reading (`gateway.policies.load_report.LoadReport`) and when it was
    taken (``at``, monotonic): up from a worker that read it off an answer, down to every
    worker from the control's freshest. ``accelerator``: (DCGM name, value) pairs an answer
    carried, for the control's accelerator rules (never sent down)."""

    queue: float
    inflight: float | None
    at: float
    source: str
    accelerator: tuple[tuple[str, float], ...] = ()


class ReplicaView(msgspec.Struct, frozen=True):
    id: str
    url: str
    zone: str | None
    standby: bool
    # None until the first probe verdict
    healthy: bool | None
    ejected_until: float
    ejection_reason: str | None
    quarantined_until: float
    quarantine_reason: str | None
    weight: float
    # its freshest load reading, from any worker or a scrape
    load: LoadView | None = None


class PoolView(msgspec.Struct, frozen=True):
    name: str
    # an operator's pause: why no replica of it is eligible
    paused: str | None
    # replica ids an operator drained or ejected
    held: tuple[str, ...]
    # as sent now: learned or configured
    binary_tensors: bool | None
    members: tuple[ReplicaView, ...]


class AdjustmentView(msgspec.Struct, frozen=True):
    """A model's burn-policy adjustment (`gateway.slo.policy.PolicyAdjustment`)."""

    retry_budget_factor: float = 1.0
    hedging_enabled: bool = True
    fallback_margin_factor: float = 1.0
    reason: str | None = None


class RolloutView(msgspec.Struct, frozen=True):
    phase: str
    step: int
    # of the model's requests the candidate serves
    share: float


class ModelView(msgspec.Struct, frozen=True):
    adjustment: AdjustmentView
    # None: its fallback can answer
    fallback_refusal: str | None
    # the model's V2 metadata document (JSON), once fetched
    metadata: bytes | None
    rollout: RolloutView | None
    # why the burn policy serves this single-route model by a vote now (None: it does not)
    escalation: str | None = None


class BreakerSignal(msgspec.Struct, frozen=True):
    """A worker's breaker transition, re-broadcast so every worker's breaker follows it."""

    replica: str
    state: Literal["closed", "open", "half-open"]
    seq: int
    origin_worker: int


class Snapshot(msgspec.Struct, frozen=True, tag=True):
    """Everything a worker routes by, whole: a newer one replaces the older entirely."""

    # bumped by control on every change
    version: int
    sent_at: float
    draining: bool
    pools: tuple[PoolView, ...]
    models: dict[str, ModelView]
    breakers: tuple[BreakerSignal, ...]


class Loads(msgspec.Struct, frozen=True, tag=True):
    """The replicas' load readings (by replica id) alone, sent in place of a `Snapshot` when
    nothing else changed since the last one: a worker takes each reading fresher than its
    own. ``version`` is the snapshot's this one would have been."""

    version: int
    sent_at: float
    loads: dict[str, LoadView]


class Reload(msgspec.Struct, frozen=True, tag=True):
    config_text: str
    config_version: int
    config_dir: str = ""
    # models handed to their rollout's candidate
    promoted: tuple[str, ...] = ()


class Drain(msgspec.Struct, frozen=True, tag=True):
    reason: str


class Stop(msgspec.Struct, frozen=True, tag=True):
    """Stop accepting, finish what is in flight within ``grace_s``, exit."""

    grace_s: float


class Call(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """What a control-owned object would have been told in-process: ``target.method(*args)``.

    Control applies it through its own whitelist of targets and methods; ``args`` are msgpack
    values (strings, numbers, booleans, None, lists of them). A batch holds thousands, so they
    are not tracked by the garbage collector (msgspec's ``gc=False``; values like these never
    make a reference cycle): decoding a batch then sets off no collections."""

    target: str
    method: str
    args: tuple[Any, ...]


class Gauges(msgspec.Struct, frozen=True):
    """A worker's levels as of its batch."""

    # per replica
    outstanding: dict[str, int]
    # per model
    in_flight: dict[str, int]
    # the retry budget's tokens
    budget_balance: float
    rss_bytes: int
    # process CPU time so far
    cpu_s: float
    # its own resource errors so far, by errno name
    local_errors: dict[str, int] = {}
    # requests it shed so far, by model
    shed: dict[str, int] = {}
    # hedges it sent and won so far
    hedges: tuple[int, int] = (0, 0)
    # its admission's seats per model and tenant (`FairShare`'s counts)
    tenants: dict[str, dict[str, dict[str, int]]] = {}
    # its retry budget since it started: requests counted, retries spent, retries refused
    budget: tuple[int, int, int] = (0, 0, 0)
    # its breakers' half-open permits per replica: granted so far, most at once
    permits: dict[str, tuple[int, int]] = {}
    # load readings its answers carried since its previous batch, by replica
    loads: dict[str, LoadView] = {}
    # reports it took ("taken") and refused (by why) so far
    load_reports: dict[str, int] = {}
    # its in-flight bytes: held, requests waiting for room, refused and reclaimed so far, its
    # limit (`gateway.memory.inflight_bytes.BudgetLevels`)
    inflight_bytes: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0)


class Batch(msgspec.Struct, frozen=True, tag=True):
    """A worker's outcomes since its previous batch.

    ``seq`` counts a worker's batches from 1 without a gap: a gap seen by control is batches
    dropped while it did not read. ``stale``: the worker's snapshot was stale when it shipped.
    """

    worker: int
    seq: int
    answers: list[Answer]
    calls: list[Call]
    gauges: Gauges | None
    stale: bool = False
    # the last `Flush` token the worker had received when it shipped
    flushed: int = 0


class Flush(msgspec.Struct, frozen=True, tag=True):
    """Ship what you have now, answering with ``token`` in the batch's ``flushed``: a
    barrier, so that the control reads every request answered before it (and knows every
    snapshot it sent before has been applied: the link keeps the order)."""

    token: int


ControlMessage = Welcome | Snapshot | Loads | Reload | Drain | Stop | Refused | Flush
WorkerMessage = Hello | Batch
