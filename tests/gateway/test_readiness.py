"""Readiness: a model is ready when it can answer well now; the gateway while its required
models are, saying why what is not ready is not."""

from __future__ import annotations

from gateway.config.loader import parse_config
from gateway.readiness import gateway_readiness, model_readiness
from gateway.upstream.registry import Registry
from tests.gateway.conftest import make_config
from tests.gateway.pipeline.votes import MODEL, vote_config
from tests.support.clock import FakeClock


def _no_fallback(name: str) -> str | None:
    return "not loaded"


def _fallback_ok(name: str) -> str | None:
    return None


def test_a_quarantined_replica_does_not_make_its_model_ready() -> None:
    clock = FakeClock()
    config = make_config(replicas=1)
    registry = Registry(config, clock)
    [replica] = registry.pools["p"].replicas
    model = config.models["digits"]
    assert not model_readiness(model, registry.pools, _no_fallback, clock.now()).ready  # unprobed
    replica.mark_health(True)
    assert model_readiness(model, registry.pools, _no_fallback, clock.now()).ready
    replica.quarantine(clock.now(), 30.0, "wrong answers")
    state = model_readiness(model, registry.pools, _no_fallback, clock.now())
    assert not state.ready and "not quarantined" in (state.reason or "")
    clock.advance(30.0)
    assert model_readiness(model, registry.pools, _no_fallback, clock.now()).ready


def test_a_verified_fallback_keeps_the_model_ready_and_says_so() -> None:
    clock = FakeClock()
    config = make_config(replicas=1, fallback={"model": "digits-logreg"})
    registry = Registry(config, clock)
    model = config.models["digits"]
    state = model_readiness(model, registry.pools, _fallback_ok, clock.now())
    assert state.ready and "the fallback 'digits-logreg' answers" in (state.reason or "")
    refused = model_readiness(model, registry.pools, lambda n: "digest mismatch", clock.now())
    assert not refused.ready and "digest mismatch" in (refused.reason or "")


def test_a_vote_is_ready_with_a_quorum_of_pools() -> None:
    clock = FakeClock()
    config = vote_config()  # three pools of one replica, quorum 2
    registry = Registry(config, clock)
    model = config.models[MODEL]
    pools = registry.pools
    pools["a"].replicas[0].mark_health(True)
    state = model_readiness(model, pools, _no_fallback, clock.now())
    assert not state.ready and state.reason == "1 of 3 pools can answer, 2 needed"
    pools["b"].replicas[0].mark_health(True)
    assert model_readiness(model, pools, _no_fallback, clock.now()).ready


def test_only_required_models_block_the_gateways_readiness() -> None:
    clock = FakeClock()
    replicas = [{"id": "r0", "url": "http://127.0.0.1:9000"}]
    config = parse_config(
        {
            "pools": {
                "up": {"model": "m", "replicas": replicas},
                "down": {"model": "m", "replicas": [{"id": "r1", "url": "http://127.0.0.1:9001"}]},
            },
            "models": {
                "served": {"pool": "up"},
                "optional": {"pool": "down", "required": False},
            },
        }
    )
    registry = Registry(config, clock)
    registry.pools["up"].replicas[0].mark_health(True)
    registry.pools["down"].replicas[0].mark_health(False)
    states = {
        name: model_readiness(model, registry.pools, _no_fallback, clock.now())
        for name, model in config.models.items()
    }
    doc = gateway_readiness(config.models, states)
    assert doc["ready"] is True
    assert doc["models"] == {"served": True, "optional": False}
    assert "no healthy replica" in doc["reasons"]["optional"]  # type: ignore[index]
    strict = config.models["optional"].model_copy(update={"required": True})
    doc = gateway_readiness({**config.models, "optional": strict}, states)
    assert doc["ready"] is False and doc["blocking"] == ["optional"]
