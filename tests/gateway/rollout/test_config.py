"""A rollout's declaration is checked at load: a voted model, an unknown or the model's own
pool as the candidate are refused with the key named."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from gateway.config.models import GatewayConfig


def config(**model: Any) -> dict[str, Any]:
    replica = {"url": "http://127.0.0.1:1"}
    pools = {
        name: {"model": "m", "replicas": [{"id": name, **replica}]}
        for name in ("now", "next", "other")
    }
    return {"pools": pools, "models": {"digits": model}}


def test_a_pool_models_rollout_loads() -> None:
    loaded = GatewayConfig.model_validate(config(pool="now", rollout={"candidate": "next"}))
    rollout = loaded.models["digits"].rollout
    assert rollout is not None and (rollout.mode, rollout.steps[-1]) == ("shadow", 100)


@pytest.mark.parametrize(
    ("model", "error"),
    [
        (
            {"vote": {"pools": ["now", "other"]}, "rollout": {"candidate": "next"}},
            "a voted model cannot be rolled out",
        ),
        (
            {"pool": "now", "rollout": {"candidate": "nope"}},
            "models.digits.rollout.candidate: unknown pool 'nope'",
        ),
        ({"pool": "now", "rollout": {"candidate": "now"}}, "the candidate is the model's own"),
        ({"pool": "now", "rollout": {"candidate": "next", "mode": "blue-green"}}, "mode"),
    ],
)
def test_a_bad_rollout_is_refused_at_load(model: dict[str, Any], error: str) -> None:
    with pytest.raises(ValidationError, match=error):
        GatewayConfig.model_validate(config(**model))
