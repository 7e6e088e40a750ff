"""Each tenant's own limits: requests in flight at once and a token bucket, checked at the edge.

A tenant over its share gets 429 with ``Retry-After`` before its body is read, so a noisy
tenant costs the gateway almost nothing and cannot take the model's admission bound (503,
`gateway.admission.layer`) from the others. A tenant with no limits gets `NO_LIMIT`, a
null object, so the edge never branches on whether limits are configured.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Protocol

from gateway.admission.token_bucket import TokenBucket
from gateway.clock import Clock
from gateway.config.tenants import TenantConfig
from gateway.errors import TooManyRequests

# a request of the tenant's is in flight: it may end any moment
BUSY_RETRY_AFTER_S = 1.0


class Limiter(Protocol):
    def enter(self) -> None:
        """Admits one request or raises `TooManyRequests`; each admitted one must `leave`."""
        ...

    def leave(self) -> None: ...


class NoLimit:
    """The limiter of a tenant with no limits."""

    __slots__ = ()

    def enter(self) -> None:
        pass

    def leave(self) -> None:
        pass


NO_LIMIT = NoLimit()


class TenantLimiter:
    """One tenant's concurrency bound (checked first: a refusal spends no token) and bucket."""

    __slots__ = ("_bucket", "_max", "in_flight", "name", "rejected")

    def __init__(self, name: str, config: TenantConfig, clock: Clock) -> None:
        self.name = name
        self._max = config.max_in_flight
        self._bucket = (
            TokenBucket(config.rate_per_s, config.bucket_size, clock)
            if config.rate_per_s is not None
            else None
        )
        self.in_flight = 0
        self.rejected = 0

    def enter(self) -> None:
        if self._max is not None and self.in_flight >= self._max:
            self.rejected += 1
            raise TooManyRequests(
                f"tenant {self.name!r} is at its bound of {self._max} requests in flight",
                retry_after_s=BUSY_RETRY_AFTER_S,
            )
        if self._bucket is not None:
            wait_s = self._bucket.take()
            if wait_s:
                self.rejected += 1
                retry_after = max(1, math.ceil(wait_s))
                raise TooManyRequests(
                    f"tenant {self.name!r} is over its rate of {self._bucket.rate_per_s:g} "
                    f"requests/s; retry in {retry_after} s",
                    retry_after_s=retry_after,
                )
        self.in_flight += 1

    def leave(self) -> None:
        self.in_flight -= 1


class TenantLimits:
    """Every configured tenant's limiter, by name; others get `NO_LIMIT`."""

    def __init__(self, tenants: Mapping[str, TenantConfig], clock: Clock) -> None:
        self.limiters: dict[str, TenantLimiter] = {
            name: TenantLimiter(name, config, clock)
            for name, config in tenants.items()
            if config.max_in_flight is not None or config.rate_per_s is not None
        }

    def get(self, tenant: str) -> Limiter:
        return self.limiters.get(tenant, NO_LIMIT)

    def carry_from(
        self, old: TenantLimits, before: Mapping[str, TenantConfig], now: Mapping[str, TenantConfig]
    ) -> list[str]:
        """A reload: a tenant whose limits stay keeps its very limiter, so requests still in
        flight on the outgoing gateway count against its bound and its bucket is not refilled (a
        fresh one would grant each reload a second burst). Returns the tenants kept."""
        kept = []
        for name, limiter in old.limiters.items():
            if name in self.limiters and _limits(now.get(name)) == _limits(before.get(name)):
                self.limiters[name] = limiter
                kept.append(name)
        return kept


def _limits(config: TenantConfig | None) -> tuple[object, ...] | None:
    return None if config is None else (config.max_in_flight, config.rate_per_s, config.bucket_size)
