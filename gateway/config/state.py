"""Where the shared state lives (``state:``): the backend, its URL, and the sentinels' password.

``redis_url`` may name environment variables as ``${NAME}`` (as a pool header's value does), so
the data nodes' password stays out of the config file: ``redis://:${REDIS_PASSWORD}@redis:6379/0``.

Why a module of its own: the sentinels' credentials are read from outside the config file (a
variable or a file, as the admin keys are), and checking that they are there belongs with the
keys that name them. A variable that is not set fails validation (so ``check-config``, ``serve``
and a reload all refuse the config, naming the key); a file is read by `gateway.control.preflight`,
which checks the config against the disk. No message quotes a password.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Literal

from pydantic import Field, field_validator, model_validator

from gateway.frozen import Frozen
from gateway.state import redis_url
from gateway.state.sentinel_auth import SentinelAuth, read_password

# as in gateway.config.headers
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand(template: str, environ: Mapping[str, str]) -> str:
    """``template`` with each ``${NAME}`` replaced by ``environ[NAME]``, as it is (percent-encode
    a password with URL-reserved characters); `ValueError` names an unset one, never a value."""

    def lookup(match: re.Match[str]) -> str:
        if match.group(1) not in environ:
            raise ValueError(f"environment variable {match.group(1)} is not set")
        return environ[match.group(1)]

    return _REFERENCE.sub(lookup, template)


class StateConfig(Frozen):
    """Where breaker states, ejections and SLO counters are shared between gateway instances.

    ``redis_url`` carries the data nodes' credentials (masked wherever it is shown), itself or
    as ``${VAR}`` references to environment variables (read at load and on reload). A Sentinel
    whose sentinel.conf sets ``requirepass`` (or an ACL user) needs its own password:
    ``sentinel_password_env`` names the environment variable that holds it, or
    ``sentinel_password_file`` a file (its one line); ``sentinel_username`` is the ACL user,
    if not ``default``. All three apply only to a ``redis+sentinel://`` URL.
    """

    backend: Literal["memory", "redis"] = Field(
        "memory",
        description="memory: this instance only; redis: shared by every gateway of the namespace",
    )
    redis_url: str = Field(
        "redis://127.0.0.1:6379/0",
        description="redis:// (one server), redis+cluster://h:p,h:p (a Redis Cluster) or "
        "redis+sentinel://h:p,h:p/<master name> (the primary Sentinel names); rediss for TLS; "
        "${VAR} is read from the environment (e.g. redis://:${REDIS_PASSWORD}@h:6379/0)",
    )
    namespace: str = Field(
        "gw", pattern=r"^[A-Za-z0-9._:-]+$", description="key tag: gateways of one fleet share it"
    )
    sync_interval_s: float = Field(
        0.5,
        gt=0,
        description="how often local changes are pushed and others' pulled (off the request path)",
    )
    instance: str | None = Field(None, description="this instance's name; default host:pid")
    sentinel_password_env: str | None = Field(
        None, min_length=1, description="variable holding the sentinels' requirepass"
    )
    sentinel_password_file: str | None = Field(
        None, min_length=1, description="file holding the sentinels' requirepass (one line)"
    )
    sentinel_username: str | None = Field(
        None, min_length=1, description="the sentinels' ACL user (default: none, 'default')"
    )
    decisions_file: str | None = Field(
        None,
        min_length=1,
        description="a file keeping operators' drains, ejects and pauses across restarts "
        "(for a gateway without Redis, which keeps them itself)",
    )

    @field_validator("redis_url")
    @classmethod
    def _redis_url_parses(cls, value: str) -> str:
        # messages never quote the URL
        redis_url.parse(expand(value, os.environ))
        return value

    def url(self, environ: Mapping[str, str]) -> str:
        """``redis_url`` with its ``${VAR}`` references read from ``environ``."""
        return expand(self.redis_url, environ)

    @model_validator(mode="after")
    def _sentinel_credentials(self) -> StateConfig:
        env, file = self.sentinel_password_env, self.sentinel_password_file
        if env is None and file is None:
            if self.sentinel_username is not None:
                raise ValueError(
                    "sentinel_username needs sentinel_password_env or sentinel_password_file"
                )
            return self
        if env is not None and file is not None:
            raise ValueError("give one of sentinel_password_env and sentinel_password_file")
        if redis_url.parse(self.url(os.environ)).mode != "sentinel":
            raise ValueError("a sentinel password needs a redis+sentinel:// redis_url")
        if env is not None:
            # unset or empty: refused now, not at connect
            read_password(env, None, os.environ)
        return self

    def sentinel_auth(self, environ: Mapping[str, str]) -> SentinelAuth | None:
        """The sentinels' credentials, read now; None if they ask for none. `ValueError`
        (naming the key and the variable or file, never the value) if they cannot be read."""
        env, file = self.sentinel_password_env, self.sentinel_password_file
        if env is None and file is None:
            return None
        return SentinelAuth(read_password(env, file, environ), self.sentinel_username)
