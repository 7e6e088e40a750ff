"""One model's admission bound shared by its tenants: each is sure of its weighted share.

Why: a bound on a model's in-flight requests taken first come lets one tenant's burst hold
every slot, and every other tenant is shed though it sent almost nothing. As Kubernetes' API
Priority and Fairness splits a server's concurrency into nominal shares that others may partly
borrow (``nominalConcurrencyShares``, ``lendablePercent``), the bound is split here by weight:

- the model's tenants: every configured one, and ``anonymous`` unless the model requires a key;
- a tenant's *quota*: its weighted share of the bound, ``bound × weight / Σ weights``, rounded
  down, at least 1;
- while a tenant holds fewer requests than its quota, the others keep room free for it: its
  *claim*, ``ceil(tenant_reserve × share)`` slots (its *reserve*), or what it still lacks of
  its quota if less;
- a claim is kept only in free slots: a tenant that takes a slot kept for it while its claim
  stays (it still lacks a whole reserve) *owes* that slot until one frees, and the freed slot
  pays it back (the leaving tenant's debt first) before anyone may borrow it;
- a request is admitted iff the room left after it covers the free slots kept for the others.

So free room never falls short of what is kept, and a tenant under its quota always finds the
slots kept for it: one that sends one request at a time is never refused, however many others
flood. A tenant below its quota is refused only while some other holds more than its own (it
borrowed) and the free slots are all kept for others; a tenant at its quota borrows whatever
nobody keeps (work-conserving), and as the borrowed requests end, a tenant below its quota gets
the freed room, not the borrower. Refusals: 429 with ``Retry-After`` to a tenant at or over its
quota (its own excess), 503 `Overloaded` to one below it (the model is full). A tenant alone
(no tenants configured) has the whole bound: first come, 503 when full, as before tenants.
Where the bound is smaller than the number of tenants no slot can be kept for each, and the
same first-come rule holds.

The hot path is O(1): the sums of the kept and owed slots are updated as requests enter and
leave (a debt paid back looks for its tenant among the model's few seats).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

from gateway.config.policies import AdmissionConfig
from gateway.config.tenants import ANONYMOUS, DEFAULT_WEIGHT, TenantConfig
from gateway.errors import GatewayError, Overloaded, TooManyRequests

# 3 × (4/3) is 4 to a person: float shares are rounded as one would
_EPSILON = 1e-9


class Seat:
    """One tenant's place in one model's admission: its quota, reserve and counts."""

    __slots__ = ("admitted", "held", "name", "over_share", "owed", "quota", "reserve", "shed")

    def __init__(self, name: str, quota: int, reserve: int) -> None:
        self.name = name
        self.quota = quota
        self.reserve = reserve
        self.held = 0
        # slots of its claim that are not free now: it took them itself
        self.owed = 0
        self.admitted = 0
        # refused with 429
        self.over_share = 0
        # refused with 503
        self.shed = 0

    def claim(self, held: int) -> int:
        """The room the other tenants keep free for this one while it holds ``held``."""
        lacking = self.quota - held
        return self.reserve if lacking >= self.reserve else max(lacking, 0)

    def kept(self) -> int:
        """The free slots kept for it now: its claim less what it owes."""
        return self.claim(self.held) - self.owed

    def to_json(self) -> dict[str, int]:
        return {
            "in_flight": self.held,
            "quota": self.quota,
            "reserve": self.reserve,
            "owed": self.owed,
            "admitted": self.admitted,
            "over_share": self.over_share,
            "shed": self.shed,
        }


class FairShare:
    """The admission decision of one model: `enter` admits or refuses, `leave` frees."""

    __slots__ = ("bound", "held", "kept", "model", "owed", "retry_after_s", "seats")

    def __init__(self, model: str, config: AdmissionConfig, weights: Mapping[str, float]) -> None:
        self.model = model
        self.bound = config.max_in_flight
        self.retry_after_s = config.retry_after_s
        self.seats = {
            name: Seat(name, quota, reserve)
            for name, (quota, reserve) in shares(self.bound, weights, config.tenant_reserve).items()
        }
        # requests in flight, all tenants
        self.held = 0
        # free slots kept, all
        self.kept = sum(seat.kept() for seat in self.seats.values())
        # claims not covered by free room, all tenants
        self.owed = 0

    def enter(self, tenant: str) -> Seat:
        """Admits one request of ``tenant`` (pass its seat to `leave`) or raises its refusal:
        `TooManyRequests` (at or over its quota) or `Overloaded` (below it, the model full)."""
        seat = self.seats.get(tenant)
        if seat is None:
            seat = self._stranger(tenant)
        held = seat.held
        lacking = seat.quota - held
        claim = seat.reserve if lacking >= seat.reserve else (lacking if lacking > 0 else 0)
        owed = seat.owed
        if self.bound - self.held <= self.kept - claim + owed:
            # only others' kept room free
            raise self._refusal(seat)
        seat.held = held + 1
        seat.admitted += 1
        self.held += 1
        if 0 < lacking <= seat.reserve:
            # its claim shrinks by the slot it now holds
            if owed == claim:
                # none of it was free: it took unkept room and owes one less
                seat.owed = owed - 1
                self.owed -= 1
            else:
                self.kept -= 1
        elif self.kept > self.bound - self.held:
            # it took a slot kept for it, claim unchanged
            seat.owed = owed + 1
            self.owed += 1
            self.kept -= 1
        return seat

    def leave(self, seat: Seat) -> None:
        seat.held -= 1
        self.held -= 1
        if 0 < seat.quota - seat.held <= seat.reserve:
            # its claim grows by the freed slot
            self.kept += 1
        elif self.owed:
            # the freed slot pays back what a tenant owes, its own first
            owing = seat if seat.owed else next(s for s in self.seats.values() if s.owed)
            owing.owed -= 1
            self.owed -= 1
            self.kept += 1

    def __iter__(self) -> Iterator[Seat]:
        return iter(self.seats.values())

    def _refusal(self, seat: Seat) -> GatewayError:
        if seat.held >= seat.quota and seat.quota < self.bound:
            seat.over_share += 1
            return TooManyRequests(
                f"tenant {seat.name!r} has {seat.held} requests in flight on model "
                f"{self.model!r}, its share of {self.bound} being {seat.quota}; the rest is kept "
                "for other tenants",
                retry_after_s=self.retry_after_s,
            )
        seat.shed += 1
        kept = " (the free ones are kept for other tenants)" if self.held < self.bound else ""
        return Overloaded(
            f"model {self.model!r} is at its bound of {self.bound} in-flight requests{kept}",
            retry_after_s=self.retry_after_s,
        )

    def _stranger(self, tenant: str) -> Seat:
        """A tenant the model has no share for (anonymous on a model that requires a key, if
        it gets this far): it may only borrow. Seats are few: the edge names only known ones."""
        seat = self.seats[tenant] = Seat(tenant, 0, 0)
        return seat


def model_weights(tenants: Mapping[str, TenantConfig], require_key: bool) -> dict[str, float]:
    """The weights of the tenants that may call a model: every configured one, and anonymous
    (configured or not) unless the model requires a key."""
    weights = {name: t.weight for name, t in tenants.items() if name != ANONYMOUS}
    if not require_key:
        anonymous = tenants.get(ANONYMOUS)
        weights[ANONYMOUS] = anonymous.weight if anonymous is not None else DEFAULT_WEIGHT
    return weights


def shares(bound: int, weights: Mapping[str, float], reserve: float) -> dict[str, tuple[int, int]]:
    """Each tenant's (quota, reserve) of ``bound`` by weight; see the module's docstring.

    Quotas sum to at most the bound (a quota raised to 1 is paid for by the largest ones), so
    a tenant below its quota always finds room unless another borrowed. With more tenants
    than slots, every tenant's quota is the whole bound and nothing is kept (first come).
    """
    if len(weights) > bound or len(weights) <= 1:
        return {name: (bound, 0) for name in weights}
    total = sum(weights.values())
    exact = {name: bound * w / total for name, w in weights.items()}
    quotas = {name: max(1, math.floor(share + _EPSILON)) for name, share in exact.items()}
    while sum(quotas.values()) > bound:
        largest = max(sorted(quotas), key=quotas.__getitem__)
        quotas[largest] -= 1
    return {
        name: (quota, min(quota, math.ceil(reserve * exact[name] - _EPSILON)))
        for name, quota in quotas.items()
    }
