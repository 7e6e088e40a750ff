"""The chaos runner's rollout scenario: its config is a rollout the gateway accepts, and the
report says what the rollout did."""

from __future__ import annotations

from gateway.config.models import GatewayConfig
from loadtests.chaos.cluster import Cluster
from loadtests.chaos.scenarios import BY_NAME


def test_the_canary_scenario_declares_a_rollout_the_gateway_accepts() -> None:
    scenario = BY_NAME["canary-corrupt"]
    cluster = Cluster(scenario.topology, scenario.models)
    config = GatewayConfig.model_validate(cluster.config())
    rollout = config.models["digits"].rollout
    assert rollout is not None and rollout.mode == "canary"
    assert rollout.candidate in config.pools and rollout.candidate != config.models["digits"].pool
