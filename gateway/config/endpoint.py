"""Where a replica listens, parsed once from its configured URL.

It sits in the config package because the config validates replica URLs with it; the transports
below read it. Nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit


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
            raise ValueError(f"replica url must be http://host:port[/prefix], got {url!r}")
        return cls(parts.hostname, parts.port or 80, parts.path.rstrip("/"))

    @property
    def authority(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"http://{self.authority}{self.prefix}"
