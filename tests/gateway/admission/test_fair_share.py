"""A model's admission bound shared by tenants: quotas by weight, reserves, 429 vs 503."""

from __future__ import annotations

import contextlib
import random

import pytest

from gateway.admission.fair_share import FairShare, Seat, model_weights, shares
from gateway.config.policies import AdmissionConfig
from gateway.config.tenants import ANONYMOUS, TenantConfig
from gateway.errors import Overloaded, TooManyRequests

EQUAL = {"acme": 1.0, "globex": 1.0, ANONYMOUS: 1.0}


def fair(bound: int, weights: dict[str, float], reserve: float = 0.25) -> FairShare:
    config = AdmissionConfig(max_in_flight=bound, retry_after_s=2, tenant_reserve=reserve)
    return FairShare("digits", config, weights)


def test_four_anonymous_requests_leave_room_for_two_keyed_tenants() -> None:
    """The issue's case: bound 4, two keyed tenants and anonymous callers of equal weight."""
    share = fair(4, EQUAL)
    share.enter(ANONYMOUS)
    share.enter(ANONYMOUS)  # borrowed: one slot is still kept for each keyed tenant
    with pytest.raises(TooManyRequests) as over:
        share.enter(ANONYMOUS)
    assert over.value.status == 429 and over.value.headers() == {"retry-after": "2"}
    assert "'anonymous' has 2 requests in flight on model 'digits'" in over.value.message
    share.enter("acme")
    share.enter("globex")
    assert share.held == 4
    with pytest.raises(TooManyRequests):  # acme holds its share; the model is full anyway
        share.enter("acme")


def test_one_tenant_has_the_whole_bound_and_is_told_503_when_it_is_full() -> None:
    share = fair(3, {ANONYMOUS: 1.0})
    for _ in range(3):
        share.enter(ANONYMOUS)
    with pytest.raises(Overloaded) as full:
        share.enter(ANONYMOUS)
    assert full.value.status == 503
    assert full.value.message == "model 'digits' is at its bound of 3 in-flight requests"


def test_quotas_and_reserves_follow_the_weights() -> None:
    assert shares(12, {"a": 2, "b": 1, ANONYMOUS: 1}, 0.25) == {
        "a": (6, 2),
        "b": (3, 1),
        ANONYMOUS: (3, 1),
    }
    assert shares(256, EQUAL, 0.25) == {n: (85, 22) for n in EQUAL}
    assert shares(4, EQUAL, 0.0) == {n: (1, 0) for n in EQUAL}
    # a quota raised to one slot is paid for by the largest: the quotas still fit the bound
    assert shares(4, {"big": 3.5, "s1": 0.25, "s2": 0.25}, 1.0) == {
        "big": (2, 2),
        "s1": (1, 1),
        "s2": (1, 1),
    }
    # more tenants than slots: nothing can be kept for each, first come
    assert shares(2, EQUAL, 0.25) == {n: (2, 0) for n in EQUAL}


def test_a_borrower_gives_way_as_its_requests_end() -> None:
    share = fair(12, {"a": 2, "b": 1, ANONYMOUS: 1})  # quotas 6, 3, 3; reserves 2, 1, 1
    held = [share.enter("a") for _ in range(10)]  # 12 less a reserve of 1 for b and anonymous
    with pytest.raises(TooManyRequests):
        share.enter("a")
    b = [share.enter("b")]  # its reserve
    with pytest.raises(Overloaded) as full:  # below its quota, but the last slot is anonymous's
        share.enter("b")
    assert "kept for other tenants" in full.value.message
    while len(b) < 3:  # each slot a's requests free goes to b, not back to a
        share.leave(held.pop())
        with pytest.raises(TooManyRequests):
            share.enter("a")
        b.append(share.enter("b"))
    assert share.enter(ANONYMOUS).held == 1  # its reserve was kept all along
    assert share.seats["b"].held == 3 and share.seats["a"].held == 8


def test_without_a_reserve_the_bound_is_first_come_and_the_excess_told_429() -> None:
    share = fair(4, EQUAL, reserve=0.0)
    for _ in range(4):
        share.enter(ANONYMOUS)
    with pytest.raises(TooManyRequests):
        share.enter(ANONYMOUS)
    with pytest.raises(Overloaded):
        share.enter("acme")


def test_a_tenant_without_a_share_only_borrows() -> None:
    share = fair(4, {"acme": 1.0, "globex": 1.0})  # a model that requires a key
    share.enter(ANONYMOUS)
    share.enter(ANONYMOUS)
    with pytest.raises(TooManyRequests):  # two slots kept, one for each keyed tenant
        share.enter(ANONYMOUS)
    assert share.seats[ANONYMOUS].to_json()["quota"] == 0


def test_the_model_weights_name_who_may_call_it() -> None:
    tenants = {
        "acme": TenantConfig(key_env="A", weight=3),
        ANONYMOUS: TenantConfig(weight=0.5),
    }
    assert model_weights(tenants, require_key=False) == {"acme": 3.0, ANONYMOUS: 0.5}
    assert model_weights(tenants, require_key=True) == {"acme": 3.0}
    assert model_weights({}, require_key=False) == {ANONYMOUS: 1.0}


@pytest.mark.parametrize(
    "bound, weights, reserve",
    [
        (4, EQUAL, 0.25),
        (10, {"a": 5, "b": 1, "c": 1, ANONYMOUS: 0.2}, 0.25),
        (7, {"a": 1, "b": 2}, 1.0),
        (16, {"a": 1, "b": 1, "c": 1, ANONYMOUS: 1}, 0.5),
        (3, EQUAL, 0.25),
    ],
)
def test_below_its_quota_a_tenant_is_refused_only_while_another_borrowed(
    bound: int, weights: dict[str, float], reserve: float
) -> None:
    """Random arrivals and departures: the invariants hold after every step."""
    rng = random.Random(bound)
    share = fair(bound, weights, reserve)
    names = [*weights, "stranger"]
    held: list[Seat] = []
    refused = {429: 0, 503: 0}
    for _ in range(3000):
        if held and rng.random() < 0.4:
            share.leave(held.pop(rng.randrange(len(held))))
        else:
            tenant = rng.choice(names)
            seat = share.seats.get(tenant)
            before = seat.held if seat else 0
            quota = seat.quota if seat else 0
            try:
                held.append(share.enter(tenant))
            except TooManyRequests:
                assert before >= quota  # 429 only for a tenant at or over its quota
                refused[429] += 1
            except Overloaded:
                refused[503] += 1
                assert before < quota  # 503 only for a tenant below it: someone borrowed
                assert any(s.held > s.quota for s in share if s.name != tenant)
        seats = list(share)
        assert share.held == len(held) == sum(s.held for s in seats) <= bound
        assert share.kept == sum(s.kept() for s in seats) <= share.bound - share.held
        assert share.owed == sum(s.owed for s in seats)
        assert all(0 <= s.owed <= min(s.held, s.claim(s.held)) for s in seats)
        if share.owed:  # a debt is paid back before any room is free to borrow
            assert share.kept == share.bound - share.held
    assert refused[429] > 100, refused
    if any(s.reserve < s.quota for s in share):  # else a tenant's whole quota is kept for it
        assert refused[503] > 0, refused


def test_a_tenant_owes_the_kept_slot_it_took_and_the_third_finds_its_own() -> None:
    """Two floods and a third tenant: anonymous borrowed every slot nobody keeps, then acme
    took the slot kept for it while it still lacks a reserve. That slot is acme's debt, not a
    slot still free for acme, so globex's kept slot is free and globex is admitted."""
    share = fair(8, EQUAL)  # quotas 2, reserves 1
    for _ in range(6):
        share.enter(ANONYMOUS)
    with pytest.raises(TooManyRequests):
        share.enter(ANONYMOUS)
    acme = share.enter("acme")
    assert (share.seats["acme"].owed, share.kept, share.owed) == (1, 1, 1)
    with pytest.raises(Overloaded) as kept:  # the free slot is globex's
        share.enter("acme")
    assert "kept for other tenants" in kept.value.message
    globex = share.enter("globex")
    assert share.held == 8
    assert share.seats["globex"].owed == 1  # it too took the slot kept for it
    share.leave(globex)  # its freed slot pays its own debt: kept for it again
    assert (share.seats["globex"].owed, share.kept) == (0, 1)
    assert share.enter("globex").held == 1
    share.leave(acme)  # acme's freed slot pays acme's debt first
    assert (share.seats["acme"].owed, share.seats["globex"].owed, share.owed) == (0, 1, 1)
    with pytest.raises(TooManyRequests):  # the free slot is kept for acme again
        share.enter(ANONYMOUS)
    assert share.enter("acme").held == 1


@pytest.mark.parametrize("bound", [4, 6, 8, 9, 16, 32, 64])
@pytest.mark.parametrize("reserve", [0.1, 0.25, 1.0])
def test_two_floods_never_refuse_a_third_tenant_under_its_share(bound: int, reserve: float) -> None:
    """acme and anonymous send as fast as slots free, globex one request at a time: globex is
    below its quota and is admitted every time, whatever the order of arrivals and ends."""
    rng = random.Random(bound * 7 + int(reserve * 100))
    share = fair(bound, EQUAL, reserve)
    held: list[Seat] = []
    globex: Seat | None = None
    tries = refused = 0
    for _ in range(20_000):
        step = rng.random()
        if held and step < 0.45:
            share.leave(held.pop(rng.randrange(len(held))))
        elif step < 0.9:
            with contextlib.suppress(TooManyRequests, Overloaded):
                held.append(share.enter(rng.choice(["acme", ANONYMOUS])))
        elif globex is not None:
            share.leave(globex)
            globex = None
        else:
            tries += 1
            try:
                globex = share.enter("globex")
            except (TooManyRequests, Overloaded):
                refused += 1
    assert tries > 900 and refused == 0
    assert sum(s.over_share for s in share) > 100  # the floods were refused their excess
