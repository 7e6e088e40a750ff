"""Tenant config: keys only by reference, limits checked, SLO tenants that exist."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import ConfigError, GatewayConfig, parse_config


def load(tenants: dict[str, Any], **model: Any) -> GatewayConfig:
    return parse_config(
        {
            "pools": {"p": {"model": "m", "replicas": [{"id": "r0", "url": "http://h:1"}]}},
            "models": {"digits": {"pool": "p", **model}},
            "tenants": tenants,
        }
    )


def test_defaults_need_no_key() -> None:
    config = load({})
    assert config.tenants == {}
    assert config.models["digits"].auth.require_key is False


def test_a_full_tenant() -> None:
    config = load(
        {"acme": {"keys_file": "/etc/gw/acme.keys", "max_in_flight": 8, "rate_per_s": 50}},
        auth={"require_key": True},
    )
    acme = config.tenants["acme"]
    assert (acme.max_in_flight, acme.rate_per_s, acme.bucket_size) == (8, 50.0, 50)
    assert config.models["digits"].auth.require_key


def test_weights_default_to_one_and_the_reserve_to_a_quarter() -> None:
    config = load(
        {
            "acme": {"key_env": "K", "weight": 3},
            "anonymous": {"weight": 0.5},
            "globex": {"key_env": "G"},
        },
        admission={"max_in_flight": 8, "tenant_reserve": 0.5},
    )
    assert [t.weight for t in config.tenants.values()] == [3.0, 0.5, 1.0]
    assert config.models["digits"].admission.tenant_reserve == 0.5
    assert load({}).models["digits"].admission.tenant_reserve == 0.25
    with pytest.raises(ConfigError, match="tenant_reserve"):
        load({}, admission={"tenant_reserve": 1.5})


@pytest.mark.parametrize(
    ("tenants", "message"),
    [
        ({"acme": {"max_in_flight": 1}}, "tenants.acme: needs keys_file or key_env"),
        ({"acme": {"key": "sk-0123456789abcdef"}}, "key"),  # never a key in the config
        ({"anonymous": {"key_env": "K"}}, "holds no key"),
        ({"acme": {"key_env": "K", "burst": 5}}, "burst needs rate_per_s"),
        ({"acme": {"key_env": "K", "rate_per_s": 0}}, "greater than 0"),
        ({"bad name!": {"key_env": "K"}}, "tenant name"),
        ({"acme": {"key_env": "K", "weight": 0}}, "weight"),
    ],
)
def test_bad_tenants_are_named(tenants: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(tenants)


def test_a_tenant_slo_names_a_configured_tenant_or_anonymous() -> None:
    slo = {"name": "s", "kind": "availability", "objective": 0.99}
    load({"acme": {"key_env": "K"}}, slos=[{**slo, "tenant": "acme"}])
    load({}, slos=[{**slo, "tenant": "anonymous"}])
    with pytest.raises(ConfigError, match="unknown tenant 'acme'"):
        load({}, slos=[{**slo, "tenant": "acme"}])
