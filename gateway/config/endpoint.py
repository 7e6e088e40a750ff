"""Where a replica listens, parsed once from its configured URL.

It sits in the config package because the config validates replica URLs with it; the transports
below read it. Nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from gateway.redact import mask_url


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a replica listens: plain HTTP host and port, plus an optional path prefix."""

    host: str
    port: int
    prefix: str = ""

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            shown = mask_url(url)
            raise ValueError(f"replica url must be http://host:port[/prefix], got {shown!r}")
        if "@" in parts.netloc:  # silently dropping them (as before) sent requests unauthenticated
            raise ValueError(
                f"replica url must not carry credentials (user:password@), got {mask_url(url)!r}: "
                "the gateway does not send them; put the replica behind a network boundary instead"
            )
        return cls(parts.hostname, parts.port or 80, parts.path.rstrip("/"))

    @property
    def authority(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"http://{self.authority}{self.prefix}"
