"""The sentinels' own credentials, read from an environment variable or a file, never the URL.

Why: a production Sentinel has ``requirepass`` (and perhaps an ACL user) in sentinel.conf, and
that password is not the data nodes' one that ``redis_url`` carries. It is named in the config
by where it lives (``state.sentinel_password_env`` or ``state.sentinel_password_file``, as the
admin keys are), so the config file never holds it, and read when the gateway starts or
reloads. The errors name the variable or the file, never the value; `SentinelAuth`'s repr and
`describe` show the password as the mask, and `RedisStore` scrubs it from every error it keeps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gateway.redact import MASK


@dataclass(frozen=True, slots=True)
class SentinelAuth:
    """What redis-py sends the sentinels (``Sentinel(sentinel_kwargs=...)``): AUTH [user] pw."""

    password: str = field(repr=False)
    username: str | None = None

    def kwargs(self) -> dict[str, str]:
        auth = {"password": self.password}
        if self.username is not None:
            auth["username"] = self.username
        return auth

    def describe(self) -> dict[str, str | None]:
        """For ``/admin/state``: the user, and that there is a password (masked)."""
        return {"username": self.username, "password": MASK}


def read_password(env: str | None, file: str | None, environ: Mapping[str, str]) -> str:
    """The password from variable ``env`` or from ``file`` (one line; a final newline is not
    part of it); `ValueError` naming the config key and the source, never the value."""
    if env is not None:
        value = environ.get(env)
        if value is None:
            raise ValueError(f"sentinel_password_env: environment variable {env} is not set")
        if not value:
            raise ValueError(f"sentinel_password_env: environment variable {env} is empty")
        return value
    if file is None:
        raise ValueError("sentinel_password_env or sentinel_password_file names the password")
    try:
        text = Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        # not chained: a decoding error quotes a byte of the file, that is, of the password
        raise ValueError(f"sentinel_password_file: cannot read {file}: {reason}") from None
    value = text.removesuffix("\n").removesuffix("\r")
    if not value:
        raise ValueError(f"sentinel_password_file: {file} is empty")
    if "\n" in value or "\r" in value:
        raise ValueError(f"sentinel_password_file: {file} holds more than one line")
    return value
