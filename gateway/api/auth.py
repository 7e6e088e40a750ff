"""Keys of the control plane: read once, kept as SHA-256 digests, compared in constant time.

A `KeyRing` is the one primitive: the digests of the keys that may pass one gate. The control
plane has two gates (admin, and read-only ``/metrics``), described by `ControlAccess`, and its
admin keys are named (``server.admin.operators``; the single ``key_file``/``key_env`` act as
``admin``), so a manual action is logged with who took it, never with the key; a
tenant's key for infer is meant to be one more `KeyRing` beside them. Anonymous admin is
allowed only while the gateway listens on loopback with no admin key configured, and
`refuse_unprotected` stops a gateway that would listen elsewhere without one (as Redis's
protected mode does).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from gateway.config import ConfigError
from gateway.config.access import LEGACY_OPERATOR, AdminAccessConfig

MIN_KEY_CHARS = 16
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
BEARER = b"bearer "


class Gate(Enum):
    """Which credential a path needs."""

    # the data plane: V2 health, metadata, infer
    OPEN = "open"
    # the dashboard's page: no data in it (it fetches with a key); Host checked
    PAGE = "page"
    # an admin key or a metrics key
    METRICS = "metrics"
    # an admin key
    ADMIN = "admin"


def digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def digest_bytes(key: bytes) -> bytes:
    return hashlib.sha256(key).digest()


class KeyRing:
    """The digests of the keys that open one gate; the keys themselves are not kept."""

    __slots__ = ("_digests",)

    def __init__(self, digests: Iterable[bytes] = ()) -> None:
        self._digests = tuple(digests)

    @classmethod
    def of(cls, *keys: str) -> KeyRing:
        return cls(digest(k) for k in keys)

    def __bool__(self) -> bool:
        return bool(self._digests)

    def __len__(self) -> int:
        return len(self._digests)

    @property
    def digests(self) -> tuple[bytes, ...]:
        """The SHA-256 digests (a tenant's keys index a dict by them: `gateway.api.tenants`)."""
        return self._digests

    def __add__(self, other: KeyRing) -> KeyRing:
        return KeyRing(self._digests + other._digests)

    def admits(self, key: str | bytes | None) -> bool:
        """Whether ``key`` is one of the ring's; every digest is compared (no early exit)."""
        if not key:
            return False
        presented = hashlib.sha256(key if isinstance(key, bytes) else key.encode()).digest()
        found = False
        for known in self._digests:
            found |= hmac.compare_digest(known, presented)
        return found


def bearer_token(authorization: bytes | None) -> bytes | None:
    """The token of an ``Authorization: Bearer <token>`` header value, else None."""
    if authorization is None or authorization[:7].lower() != BEARER:
        return None
    return authorization[7:].strip() or None


@dataclass(frozen=True, slots=True)
class ControlAccess:
    """Who may pass each gate of the control plane."""

    admin: KeyRing
    metrics: KeyRing
    # no admin key and a loopback bind: everyone local is admin
    anonymous: bool
    # the operator of each of ``admin``'s digests, in order
    names: tuple[str, ...] = ()

    @classmethod
    def load(
        cls, config: AdminAccessConfig, bind_host: str, environ: Mapping[str, str] | None = None
    ) -> ControlAccess:
        """Reads the configured keys (a missing file or variable is a `ConfigError`)."""
        env = os.environ if environ is None else environ
        admin = read_keys("admin key", config.key_file, config.key_env, env)
        names = [LEGACY_OPERATOR] * len(admin)
        for name, keys in config.operators.items():
            ring = read_keys(f"operator {name}'s key", keys.key_file, keys.key_env, env)
            admin += ring
            names += [name] * len(ring)
        owners: dict[bytes, str] = {}
        for known, name in zip(admin.digests, names, strict=True):
            if owners.setdefault(known, name) != name:
                raise ConfigError(f"operators {owners[known]} and {name} share a key")
        metrics = read_keys("metrics key", config.metrics_key_file, config.metrics_key_env, env)
        anonymous = not admin and is_loopback(bind_host)
        return cls(admin, metrics, anonymous, tuple(names))

    def operator(self, authorization: bytes | None) -> str | None:
        """Who holds the admin key presented: its operator's name, ``anonymous`` on an open
        loopback control plane, None for no admin key. Every digest is compared."""
        if self.anonymous:
            return "anonymous"
        token = bearer_token(authorization)
        if not token:
            return None
        presented = digest_bytes(token)
        found: str | None = None
        for index, known in enumerate(self.admin.digests):
            if hmac.compare_digest(known, presented) and found is None:
                found = self.names[index] if index < len(self.names) else LEGACY_OPERATOR
        return found

    def allows(self, gate: Gate, authorization: bytes | None) -> bool:
        if gate is Gate.OPEN or gate is Gate.PAGE or self.anonymous:
            return True
        token = bearer_token(authorization)
        if self.admin.admits(token):
            return True
        return gate is Gate.METRICS and self.metrics.admits(token)


def read_keys(what: str, file: str | None, env: str | None, environ: Mapping[str, str]) -> KeyRing:
    """The keys from ``file`` (one a line) and variable ``env``; errors never quote a key."""
    keys: list[str] = []
    if file is not None:
        try:
            text = Path(file).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{what} file {file}: cannot read: {exc.strerror or exc}") from exc
        lines = (line.strip() for line in text.splitlines())
        keys += _checked(f"{what} file {file}", [k for k in lines if k and k[0] != "#"])
    if env is not None:
        keys += _checked(f"{what} variable {env}", [environ.get(env, "").strip()])
    return KeyRing.of(*keys)


def _checked(where: str, keys: list[str]) -> list[str]:
    if not keys or not all(keys):
        raise ConfigError(f"{where}: holds no key (unset or empty)")
    for key in keys:
        if len(key) < MIN_KEY_CHARS:
            raise ConfigError(f"{where}: a key is shorter than {MIN_KEY_CHARS} characters")
        if any(c.isspace() for c in key):
            raise ConfigError(f"{where}: a key contains white space")
    return keys


def is_loopback(host: str) -> bool:
    """Whether a bind address reaches only this machine (``0.0.0.0`` and ``::`` do not)."""
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        # a name: it may resolve anywhere
        return False


def refuse_unprotected(config: AdminAccessConfig, bind_host: str) -> None:
    """Protected mode: no listening beyond loopback while the control plane has no key."""
    if config.keyed or is_loopback(bind_host):
        return
    raise ConfigError(
        f"refusing to listen on {bind_host} with no admin key (protected mode): anyone who "
        "can reach the port could reload the config and read the topology. Set "
        "server.admin.key_env (an environment variable holding a key of 16+ characters, "
        "e.g. GATEWAY_ADMIN_KEY) or server.admin.key_file, or listen on 127.0.0.1"
    )
