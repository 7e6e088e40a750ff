"""Tenants: who calls infer (an API key names the tenant) and how much each may ask for.

As for the control plane (`gateway.config.access`), a key never appears in the config: a
tenant names a file of keys (one a line, several during a rotation) or a variable holding
one, and `gateway.api.tenants` reads them when the gateway starts or reloads, keeping only
their SHA-256 digests. A request with no key is tenant ``anonymous``; ``tenants.anonymous``
may set limits for it, but holds no key. Whether a model accepts anonymous requests is the
model's ``auth.require_key`` (off by default, so a local setup needs no key).
"""

from __future__ import annotations

import math
import re

from pydantic import Field, model_validator

from gateway.frozen import Frozen

# the tenant of a request with no key
from gateway.telemetry.metrics import ANONYMOUS

__all__ = ["ANONYMOUS", "DEFAULT_WEIGHT", "ModelAuthConfig", "TenantConfig", "check_tenants"]
# also a metrics label value
TENANT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
# every tenant's, anonymous included, unless its config says otherwise
DEFAULT_WEIGHT = 1.0


class TenantConfig(Frozen):
    """One tenant: where its keys are, and its limits (none by default).

    ``max_in_flight``: requests of this tenant in the gateway at once; ``rate_per_s`` and
    ``burst``: a token bucket (``burst`` requests at once, refilled at ``rate_per_s``;
    default burst: one second's worth). Over either: 429 with ``Retry-After``, before the
    body is read. ``weight``: its share of every model's ``admission.max_in_flight``,
    relative to the other tenants' (`gateway.admission.fair_share`). ``priority``: below 0
    its requests are sheddable (`gateway.pipeline.saturation`).
    """

    keys_file: str | None = Field(None, min_length=1, description="file of keys, one a line")
    key_env: str | None = Field(None, min_length=1, description="variable holding one key")
    max_in_flight: int | None = Field(
        None, gt=0, description="its requests at once, over every model; past it: 429"
    )
    weight: float = Field(
        DEFAULT_WEIGHT, gt=0, le=1e6, description="its share of each model's admission bound"
    )
    rate_per_s: float | None = Field(None, gt=0, description="requests a second, sustained")
    burst: int | None = Field(None, gt=0, description="requests at once; needs rate_per_s")
    priority: int | None = Field(
        None,
        ge=-1000,
        le=1000,
        description="its requests' priority; below 0: sheddable, shed at once (503) while "
        "the pool is saturated; default: each model's priority",
    )

    @model_validator(mode="after")
    def _burst_needs_rate(self) -> TenantConfig:
        if self.burst is not None and self.rate_per_s is None:
            raise ValueError("burst needs rate_per_s")
        return self

    @property
    def keyed(self) -> bool:
        return self.keys_file is not None or self.key_env is not None

    @property
    def bucket_size(self) -> int:
        """The token bucket's capacity (``burst``, else one second of ``rate_per_s``)."""
        if self.burst is not None:
            return self.burst
        return max(1, math.ceil(self.rate_per_s or 0.0))


class ModelAuthConfig(Frozen):
    """Who may call one model: ``require_key`` refuses anonymous requests (401)."""

    require_key: bool = Field(False, description="anonymous requests get 401")


def check_tenants(tenants: dict[str, TenantConfig]) -> dict[str, TenantConfig]:
    """Validator helper: tenant names are label-safe; ``anonymous`` has no key, others one."""
    for name, tenant in tenants.items():
        if not re.match(TENANT_PATTERN, name):
            raise ValueError(f"tenant name {name!r}: letters, digits, '._-', at most 64")
        if name == ANONYMOUS:
            if tenant.keyed:
                raise ValueError(f"tenants.{ANONYMOUS}: holds no key (it is who presents none)")
        elif not tenant.keyed:
            raise ValueError(f"tenants.{name}: needs keys_file or key_env")
    return tenants
