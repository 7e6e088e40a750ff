"""Which tenant a request is: its API key's SHA-256 digest, looked up in a dict.

Keys come from ``tenants.NAME.keys_file`` / ``key_env`` (`gateway.api.auth.read_keys`: the
same rules as the control plane's) and only their digests are kept. A request presents its
key as ``Authorization: Bearer <key>`` or ``x-api-key: <key>``; none is tenant ``anonymous``;
a key no tenant holds is 401 wherever it is sent (a wrong key is a mistake worth telling).

Why a dict lookup and not `hmac.compare_digest` over every digest (as `KeyRing.admits`): the
presented key is hashed first, and the lookup's timing depends only on that digest (its hash
bucket, then an equality test against a stored digest sharing it). An attacker cannot steer a
digest towards a stored one without a SHA-256 preimage, so the timing tells nothing about any
key, and the cost stays O(1) however many keys tenants hold (loadtests/bench_admission.py).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping

from gateway.api.auth import bearer_token, read_keys
from gateway.config import ConfigError
from gateway.config.tenants import ANONYMOUS, TenantConfig
from gateway.errors import Unauthorized

AUTHORIZATION = "authorization"
API_KEY = "x-api-key"
# what the edge must decode for `TenantKeys.tenant`
HEADERS = (AUTHORIZATION, API_KEY)


class TenantKeys:
    """Key digests to tenant names, read once (at start and at each reload)."""

    __slots__ = ("_names",)

    def __init__(self, names: Mapping[bytes, str]) -> None:
        self._names = dict(names)

    @classmethod
    def load(
        cls, tenants: Mapping[str, TenantConfig], environ: Mapping[str, str] | None = None
    ) -> TenantKeys:
        """Reads every tenant's keys; `ConfigError` if one is missing or two tenants share one."""
        env = os.environ if environ is None else environ
        names: dict[bytes, str] = {}
        for name, tenant in tenants.items():
            if not tenant.keyed:
                continue
            ring = read_keys(f"tenant {name} key", tenant.keys_file, tenant.key_env, env)
            for digest in ring.digests:
                holder = names.setdefault(digest, name)
                if holder != name:
                    raise ConfigError(f"tenants {holder} and {name} hold the same key")
        return cls(names)

    def __len__(self) -> int:
        return len(self._names)

    def tenant(self, headers: Mapping[str, str]) -> str:
        """The tenant of a request's decoded headers; `Unauthorized` for a key nobody holds."""
        authorization = headers.get(AUTHORIZATION)
        if authorization is not None:
            # latin-1 gives back the header's own bytes (the edge decoded them with it)
            token = bearer_token(authorization.encode("latin-1"))
            if token is None:
                raise Unauthorized("Authorization must be 'Bearer <API key>'")
        else:
            key = headers.get(API_KEY)
            if key is None:
                return ANONYMOUS
            token = key.strip().encode("latin-1")
        name = self._names.get(hashlib.sha256(token).digest())
        if name is None:
            raise Unauthorized("unknown API key")
        return name
