"""Promotion's config: the promoted models served by their candidate pools, rollouts done.

The gateway swaps it in as a reload does (a new gateway, the outgoing one's state carried over,
in-flight requests finished by the outgoing one). The file on disk is not written: a reload of an
unedited file declares the rollout again, finds it promoted in the stored progress, and promotes
again; editing the file to name the candidate as the pool ends the rollout.
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.config.models import GatewayConfig


def promoted_config(config: GatewayConfig, models: Iterable[str]) -> GatewayConfig:
    changed = dict(config.models)
    for name in models:
        model = changed[name]
        if model.rollout is not None:
            changed[name] = model.model_copy(update={"pool": model.rollout.candidate,
                                                     "rollout": None})  # fmt: skip
    return config.model_copy(update={"models": changed})
