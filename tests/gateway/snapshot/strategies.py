"""Hypothesis strategies for the link's messages (finite floats: a NaN is never equal to itself)."""

from __future__ import annotations

from hypothesis import strategies as st

from gateway.snapshot.messages import (
    PROTOCOL,
    AdjustmentView,
    Batch,
    BreakerSignal,
    Call,
    Drain,
    Gauges,
    Hello,
    ModelView,
    PoolView,
    Reload,
    ReplicaView,
    RolloutView,
    Snapshot,
    Stop,
    Welcome,
)

names = st.text(max_size=12)
floats = st.floats(allow_nan=False)
counts = st.integers(min_value=0, max_value=2**40)

replicas = st.builds(
    ReplicaView,
    id=names,
    url=names,
    zone=st.none() | names,
    standby=st.booleans(),
    healthy=st.none() | st.booleans(),
    ejected_until=floats,
    ejection_reason=st.none() | names,
    quarantined_until=floats,
    quarantine_reason=st.none() | names,
    weight=floats,
)
pools = st.builds(
    PoolView,
    name=names,
    paused=st.none() | names,
    held=st.lists(names, max_size=3).map(tuple),
    binary_tensors=st.none() | st.booleans(),
    members=st.lists(replicas, max_size=4).map(tuple),
)
models = st.builds(
    ModelView,
    adjustment=st.builds(AdjustmentView, floats, st.booleans(), floats, st.none() | names),
    fallback_refusal=st.none() | names,
    metadata=st.none() | st.binary(max_size=40),
    rollout=st.none() | st.builds(RolloutView, names, counts, floats),
)
breakers = st.builds(
    BreakerSignal,
    replica=names,
    state=st.sampled_from(["closed", "open", "half-open"]),
    seq=counts,
    origin_worker=counts,
)
snapshots = st.builds(
    Snapshot,
    version=counts,
    sent_at=floats,
    draining=st.booleans(),
    pools=st.lists(pools, max_size=3).map(tuple),
    models=st.dictionaries(names, models, max_size=3),
    breakers=st.lists(breakers, max_size=3).map(tuple),
)
answers = st.tuples(
    names,
    st.integers(100, 599),
    names,
    st.none() | names,
    names,
    floats,
    st.none() | floats,
    counts,
    counts,
    counts,
    floats,
)
args = st.lists(st.none() | st.booleans() | counts | floats | names, max_size=4).map(tuple)
batches = st.builds(
    Batch,
    worker=counts,
    seq=counts,
    answers=st.lists(answers, max_size=5),
    calls=st.lists(st.builds(Call, names, names, args), max_size=5),
    gauges=st.none()
    | st.builds(
        Gauges,
        st.dictionaries(names, counts, max_size=3),
        st.dictionaries(names, counts, max_size=3),
        floats,
        counts,
        floats,
    ),
    stale=st.booleans(),
)
hellos = st.builds(Hello, st.just(PROTOCOL), counts, counts, counts)
control_messages = st.one_of(
    snapshots,
    st.builds(Welcome, st.just(PROTOCOL), counts, st.text(), counts, names),
    st.builds(Reload, st.text(), counts),
    st.builds(Drain, names),
    st.builds(Stop, floats),
)
worker_messages = st.one_of(hellos, batches)
