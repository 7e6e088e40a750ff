"""Each tenant's limits: the in-flight bound (no token spent on it), the rate, the null limit."""

from __future__ import annotations

import pytest

from gateway.admission.tenant_limits import NO_LIMIT, TenantLimiter, TenantLimits
from gateway.config.tenants import TenantConfig
from gateway.errors import TooManyRequests
from tests.support.clock import FakeClock


def test_the_in_flight_bound_refuses_with_retry_after_and_frees_on_leave() -> None:
    limiter = TenantLimiter("acme", TenantConfig(key_env="K", max_in_flight=2), FakeClock())
    limiter.enter()
    limiter.enter()
    with pytest.raises(TooManyRequests) as refused:
        limiter.enter()
    assert refused.value.status == 429
    assert refused.value.headers() == {"retry-after": "1"}
    assert "acme" in refused.value.message and "2 requests in flight" in refused.value.message
    limiter.leave()
    limiter.enter()
    assert limiter.in_flight == 2 and limiter.rejected == 1


def test_the_rate_refuses_with_the_whole_seconds_until_a_token() -> None:
    clock = FakeClock()
    config = TenantConfig(key_env="K", rate_per_s=0.25, burst=2)
    limiter = TenantLimiter("acme", config, clock)
    for _ in range(2):
        limiter.enter()
        limiter.leave()
    with pytest.raises(TooManyRequests) as refused:
        limiter.enter()
    assert refused.value.headers() == {"retry-after": "4"}  # 1 token at 0.25/s
    clock.advance(3.5)
    with pytest.raises(TooManyRequests) as soon:
        limiter.enter()
    assert soon.value.headers() == {"retry-after": "1"}  # 0.5 s: at least 1, never 0
    clock.advance(0.5)
    limiter.enter()


def test_a_request_refused_for_concurrency_spends_no_token() -> None:
    clock = FakeClock()
    config = TenantConfig(key_env="K", max_in_flight=1, rate_per_s=1.0, burst=2)
    limiter = TenantLimiter("acme", config, clock)
    limiter.enter()
    for _ in range(5):
        with pytest.raises(TooManyRequests):
            limiter.enter()
    limiter.leave()
    limiter.enter()  # the second token is still there
    limiter.leave()


def test_default_burst_is_one_second_of_rate() -> None:
    assert TenantConfig(key_env="K", rate_per_s=2.5).bucket_size == 3
    assert TenantConfig(key_env="K", rate_per_s=0.1).bucket_size == 1


def test_tenants_without_limits_get_the_null_limiter() -> None:
    limits = TenantLimits(
        {"free": TenantConfig(key_env="A"), "paid": TenantConfig(key_env="B", max_in_flight=5)},
        FakeClock(),
    )
    assert limits.get("free") is NO_LIMIT and limits.get("anonymous") is NO_LIMIT
    assert isinstance(limits.get("paid"), TenantLimiter)
    NO_LIMIT.enter()
    NO_LIMIT.leave()
