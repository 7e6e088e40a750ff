"""Who may call the control plane, and under which Host names: where its keys come from.

A key never appears in a config file (which is copied, diffed and shown in reviews): the
config names a file or an environment variable that holds it, and `gateway.api.auth` reads it
when the gateway starts (or reloads) and keeps only its SHA-256 digest.
"""

from __future__ import annotations

import re

from pydantic import Field

from gateway.config.frozen import Frozen

# A name, an IPv4 address, an IPv6 address (bracketed or not), or "*" (any Host).
HOST_PATTERN = r"^(\*|\[[0-9a-f:.]+\]|[0-9a-f:.]*:[0-9a-f:.]*|[a-z0-9._-]+)$"


class AdminAccessConfig(Frozen):
    """Keys of the control plane (`/admin/*`, `/status`, `/slo`, `/metrics`, `/docs`).

    ``key_file``: one key a line (several during a rotation; ``#`` comments and blank lines
    ignored); ``key_env``: a variable holding one key. Either or both. ``metrics_key_*``: keys
    that may read ``/metrics`` and nothing else (a Prometheus scrape). With no admin key the
    control plane is anonymous, which the gateway allows only while it listens on loopback.
    """

    key_file: str | None = Field(None, min_length=1, description="file of admin keys")
    key_env: str | None = Field(None, min_length=1, description="variable with an admin key")
    metrics_key_file: str | None = Field(None, min_length=1, description="file of /metrics keys")
    metrics_key_env: str | None = Field(None, min_length=1, description="variable: /metrics key")

    @property
    def keyed(self) -> bool:
        """Whether an admin key is configured (the protected-mode check reads this)."""
        return self.key_file is not None or self.key_env is not None


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
