"""How a pool finds its replicas in DNS instead of a static list (`pools.X.discovery`).

A Kubernetes headless Service answers A/AAAA records (one per ready pod; the port comes from
here) or SRV records (target and port per pod). The gateway re-resolves every ``interval_s``
and adds or drains replicas as the answer changes (`gateway.upstream.discovery.watch`), at most
``max_members`` of them: one answer of thousands of records must not make thousands of
replicas (probes, breakers, metric series each).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from gateway.frozen import Frozen

DNS_PORT = 53
# a 512-byte UDP answer holds about 30 A records: a pool past that is unusual
MAX_MEMBERS = 32


class DiscoveryConfig(Frozen):
    dns: str = Field(min_length=1, description="the name to resolve, e.g. digits.ns.svc")
    record: Literal["A", "AAAA", "SRV"] = Field(
        "A", description="A/AAAA: one replica per address, on port; SRV: target and port per record"
    )
    port: int | None = Field(
        None, ge=1, le=65535, description="the replicas' port (A/AAAA only; SRV records carry it)"
    )
    interval_s: float = Field(5.0, gt=0, description="how often the name is resolved again")
    timeout_s: float = Field(2.0, gt=0, description="one DNS query's limit")
    nameserver: str | None = Field(
        None,
        description="host[:port] queried over UDP; default: the system resolver for A/AAAA, "
        "the first nameserver of /etc/resolv.conf for SRV",
    )
    zone: str | None = Field(None, description="failure domain of every discovered replica")
    allow_empty: bool = Field(
        False, description="an empty answer drains every replica; false: the last set is kept"
    )
    drain_timeout_s: float = Field(
        30.0, gt=0, description="a removed replica's in-flight requests get this long to finish"
    )
    max_members: int = Field(
        MAX_MEMBERS,
        ge=1,
        le=1024,
        description="the most replicas the answer may make; the rest are ignored (logged)",
    )

    @field_validator("nameserver")
    @classmethod
    def _nameserver(cls, value: str | None) -> str | None:
        if value is not None:
            split_nameserver(value)
        return value

    @model_validator(mode="after")
    def _port(self) -> DiscoveryConfig:
        if self.record == "SRV" and self.port is not None:
            raise ValueError("port: SRV records carry each replica's port; leave port unset")
        if self.record != "SRV" and self.port is None:
            raise ValueError(f"port: {self.record} records carry no port; set the replicas' port")
        return self

    def nameserver_address(self) -> tuple[str, int] | None:
        """``(host, port)`` of the configured nameserver; None: the system's."""
        return None if self.nameserver is None else split_nameserver(self.nameserver)


def split_nameserver(value: str) -> tuple[str, int]:
    """``"10.0.0.10"``, ``"127.0.0.1:5353"``, ``"[::1]:53"`` or ``"::1"`` → (host, port)."""
    host, port = value, DNS_PORT
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        if rest:
            port = _port(rest.removeprefix(":"), value)
    elif value.count(":") == 1:
        host, raw = value.split(":")
        port = _port(raw, value)
    if not host:
        raise ValueError(f"nameserver must be host[:port], got {value!r}")
    return host, port


def _port(raw: str, value: str) -> int:
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise ValueError(f"nameserver must be host[:port], got {value!r}")
    return int(raw)
