"""Who may call the control plane, and under which Host names: where its keys come from.

A key never appears in a config file (which is copied, diffed and shown in reviews): the
config names a file or an environment variable that holds it, and `gateway.api.auth` reads it
when the gateway starts (or reloads) and keeps only its SHA-256 digest.
"""

from __future__ import annotations

import re

from pydantic import Field, model_validator

from gateway.frozen import Frozen

# A name, an IPv4 address, an IPv6 address (bracketed or not), or "*" (any Host).
HOST_PATTERN = r"^(\*|\[[0-9a-f:.]+\]|[0-9a-f:.]*:[0-9a-f:.]*|[a-z0-9._-]+)$"
OPERATOR_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$"
# the name ``key_file``/``key_env`` act under in the audit trail
LEGACY_OPERATOR = "admin"


class OperatorKey(Frozen):
    """One operator's admin keys: a file (one key a line) and/or a variable, as for the
    single admin key. The operator's name (its key in ``operators``) is what the audit trail
    logs; the key never is."""

    key_file: str | None = Field(None, min_length=1, description="file of this operator's keys")
    key_env: str | None = Field(None, min_length=1, description="variable with its key")

    @model_validator(mode="after")
    def _some_key(self) -> OperatorKey:
        if self.key_file is None and self.key_env is None:
            raise ValueError("an operator needs key_file or key_env")
        return self


class AdminAccessConfig(Frozen):
    """Keys of the control plane (`/admin/*`, `/status`, `/slo`, `/metrics`, `/docs`).

    ``key_file``: one key a line (several during a rotation; ``#`` comments and blank lines
    ignored); ``key_env``: a variable holding one key. Either or both; they act as the operator
    named ``admin``. ``operators``: named admin keys, one entry per person or tool, so that
    the audit trail of manual actions says who acted. ``metrics_key_*``: keys
    that may read ``/metrics`` and nothing else (a Prometheus scrape). With no admin key the
    control plane is anonymous, which the gateway allows only while it listens on loopback.
    """

    key_file: str | None = Field(None, min_length=1, description="file of admin keys")
    key_env: str | None = Field(None, min_length=1, description="variable with an admin key")
    metrics_key_file: str | None = Field(None, min_length=1, description="file of /metrics keys")
    metrics_key_env: str | None = Field(None, min_length=1, description="variable: /metrics key")
    operators: dict[str, OperatorKey] = Field(
        default_factory=dict, description="named admin keys: NAME -> {key_file, key_env}"
    )

    @model_validator(mode="after")
    def _operator_names(self) -> AdminAccessConfig:
        for name in self.operators:
            if not re.match(OPERATOR_PATTERN, name):
                raise ValueError(
                    f"operator name {name!r}: letters, digits and . _ @ - only (64 at most)"
                )
        if LEGACY_OPERATOR in self.operators and (self.key_file or self.key_env):
            raise ValueError(
                f"operators.{LEGACY_OPERATOR}: the name of key_file/key_env's keys already; "
                "move those keys under it or pick another name"
            )
        return self

    @property
    def keyed(self) -> bool:
        """Whether an admin key is configured (the protected-mode check reads this)."""
        return self.key_file is not None or self.key_env is not None or bool(self.operators)


def normalise_hosts(hosts: tuple[str, ...]) -> tuple[str, ...]:
    """``server.allowed_hosts`` as compared: lower case, no trailing dot, IPv6 in brackets."""
    out = []
    for host in hosts:
        host = host.strip().lower().rstrip(".")
        if not re.match(HOST_PATTERN, host):
            raise ValueError(f"{host!r} is not a host name, an IP address or '*' (no port)")
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        out.append(host)
    return tuple(out)
