"""The key that guards ``/admin/faults``: where it comes from and how a request proves it.

A replica started with ``--enable-faults`` can be hung, crashed or made to lie, so the fault
endpoints take ``Authorization: Bearer <key>``. Only the key's SHA-256 digest is kept, and a
presented key is compared by digest in constant time (`hmac.compare_digest`), so neither the
key nor how much of it matched leaks through memory dumps, logs or timing. A key has at least
`MIN_KEY_CHARS` characters, as the gateway's keys do: a short one is guessed by trying.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import MutableMapping
from pathlib import Path

from replicas.asgi import Scope, header
from replicas.errors import Unauthorized

FAULT_KEY_ENV = "REPLICA_FAULT_KEY"
MIN_KEY_CHARS = 16  # the gateway's minimum for its own keys (`openssl rand -hex 16` gives 32)
_AUTHORIZATION = b"authorization"


class FaultKeyError(Exception):
    """No usable fault key: the message says where one was looked for."""


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


class FaultKey:
    """The SHA-256 digest of the fault key; checks a request's ``Authorization`` header."""

    __slots__ = ("_digest",)

    def __init__(self, secret: str) -> None:
        if not secret:
            raise FaultKeyError("the fault key is empty")
        if len(secret) < MIN_KEY_CHARS:
            raise FaultKeyError(
                f"the fault key has {len(secret)} characters; it needs at least {MIN_KEY_CHARS} "
                "(e.g. openssl rand -hex 16)"
            )
        self._digest = _digest(secret)

    def __repr__(self) -> str:
        return "FaultKey(<sha256>)"

    def matches(self, presented: str) -> bool:
        return hmac.compare_digest(_digest(presented), self._digest)

    def authorize(self, scope: Scope) -> None:
        """Returns if the request carries the key; `Unauthorized` (never echoing it) if not."""
        value = header(scope, _AUTHORIZATION)
        if value is None:
            raise Unauthorized("the fault endpoints need 'Authorization: Bearer <fault key>'")
        scheme, _, presented = value.strip().partition(" ")
        if scheme.lower() != "bearer" or not presented.strip():
            raise Unauthorized("the fault endpoints need 'Authorization: Bearer <fault key>'")
        if not self.matches(presented.strip()):
            raise Unauthorized("wrong fault key")


def bearer(secret: str) -> dict[str, str]:
    """The request header that carries ``secret`` (for clients: tests, load tests)."""
    return {"Authorization": f"Bearer {secret}"}


def load_fault_key(key_file: Path | None, environ: MutableMapping[str, str]) -> FaultKey:
    """The key from ``key_file`` if given (it wins), else from ``$REPLICA_FAULT_KEY``.

    The variable is removed from ``environ`` once read, so the plain key does not stay in this
    process's environment. Surrounding whitespace (a file's trailing newline) is not part of it.
    """
    from_env = environ.pop(FAULT_KEY_ENV, None)
    if key_file is not None:
        try:
            secret = key_file.read_text().strip()
        except OSError as exc:
            raise FaultKeyError(
                f"cannot read --fault-key-file {key_file}: {exc.strerror}"
            ) from None
        if not secret:
            raise FaultKeyError(f"--fault-key-file {key_file} is empty")
        return FaultKey(secret)
    if from_env is None or not from_env.strip():
        raise FaultKeyError(
            f"--enable-faults needs a key: set {FAULT_KEY_ENV} or pass --fault-key-file PATH "
            "(the fault endpoints then take 'Authorization: Bearer <key>')"
        )
    return FaultKey(from_env.strip())
