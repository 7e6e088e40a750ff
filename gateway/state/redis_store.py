"""The Redis `StateStore`: several gateway instances share state through Redis.

The Redis is one server, a Redis Cluster or a primary found through Sentinel
(`redis_url` reads which from the URL; the sentinels' own password, if they have one, comes
as a `SentinelAuth`); the keys of one namespace share one hash tag, so the scripts work on all
three alike. No secret is kept for display: the URL is masked, the sentinels' password scrubbed.

Only `StateSync`'s background task calls it, never a request. Every call is one round trip (an
atomic Lua script from `redis_scripts`) on `redis.asyncio`, bounded by ``op_timeout_s``
(``bulk_timeout_s`` for large pushes and full pulls), with one immediate retry on a fresh
connection (a pooled one may be dead after a Redis restart; both scripts are safe to repeat,
since a store applies a batch at most once). Redis's exceptions become `StoreUnavailable` here,
where they enter, and mark the store unhealthy until a call succeeds again.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from gateway.redact import mask_url, scrub, url_secrets
from gateway.state import lease, redis_scripts, redis_target, redis_url
from gateway.state.base import (
    SIGNAL_TTL_S,
    START,
    Cursor,
    Pulled,
    PushBatch,
    PushResult,
    ReplicaSignal,
    StoreUnavailable,
)
from gateway.state.decisions import Decision
from gateway.state.fleet import Heartbeat
from gateway.state.limits import MAX_INT64
from gateway.state.rejects import Rejects
from gateway.state.sentinel_auth import SentinelAuth

log = logging.getLogger(__name__)
T = TypeVar("T")

OP_TIMEOUT_S = 0.2
BULK_TIMEOUT_S = 2.0
# a push with more counters than this gets the bulk timeout
BULK_COUNTERS = 2_000
# how long a store remembers an origin's last batch number
BATCH_MARK_TTL_S = 7 * 86_400
# for signals the previous scripts stored without one
_SIGNAL_TTL_MS = int(SIGNAL_TTL_S * 1000)


class RedisStore:
    name = "redis"

    def __init__(
        self,
        url: str,
        *,
        namespace: str = "gw",
        sentinel_auth: SentinelAuth | None = None,
        op_timeout_s: float = OP_TIMEOUT_S,
        bulk_timeout_s: float = BULK_TIMEOUT_S,
        rejects: Rejects | None = None,
    ) -> None:
        # values read back that failed their bounds
        self.rejects = rejects or Rejects()
        # the only form kept for display; the client holds the secret
        self.url = mask_url(url)
        extra = (sentinel_auth.password,) if sentinel_auth is not None else ()
        self._secrets = tuple(sorted({*url_secrets(url), *extra}, key=len, reverse=True))
        self.target = redis_url.parse(url)
        self._sentinel_auth = sentinel_auth
        self.namespace = namespace
        # one hash tag: every key in one cluster slot
        self._tag = "{" + namespace + "}:"
        self._op_timeout = op_timeout_s
        self._bulk_timeout = bulk_timeout_s
        self._redis = redis_target.connect(
            self.target,
            sentinel_auth,
            decode_responses=True,
            socket_timeout=bulk_timeout_s,
            socket_connect_timeout=op_timeout_s,
            # once, on a fresh connection: a pooled one may be dead
            retry=Retry(NoBackoff(), 1),
            health_check_interval=0,
        )
        self._push = self._redis.register_script(redis_scripts.PUSH)
        self._pull = self._redis.register_script(redis_scripts.PULL)
        self._lease = self._redis.register_script(lease.LEASE)
        self._healthy = True
        self.last_error: str | None = None

    @property
    def healthy(self) -> bool:
        return self._healthy

    async def push(self, batch: PushBatch) -> PushResult:
        mark = f"{self._tag}b:{batch.origin}"
        keys = [*self._keys("gen", "seq", "chg", "exp", "sig", "cnt", "sexp"), mark]
        keys += self._keys("dec", "hb", "hbexp", "lease")
        args: list[str | int] = [
            _new_generation(),
            batch.number,
            BATCH_MARK_TTL_S,
            len(batch.counters),
            len(batch.signals),
            _SIGNAL_TTL_MS,
            len(batch.decisions),
            int(batch.heartbeat is not None),
        ]
        for key, delta in batch.counters.items():
            args += (key, delta.amount, int(delta.expire_at * 1000))
        for s in batch.signals:
            expire_ms = int(s.expires_at() * 1000)
            args += (s.replica_id, s.epoch, repr(s.stamp), s.origin, s.encode(), expire_ms)
        for d in batch.decisions:
            args += (d.key, d.version, repr(d.at), d.origin, d.encode())
        if (beat := batch.heartbeat) is not None:
            args += (beat.instance, repr(beat.seen), int(beat.expires_at() * 1000), beat.encode())
        bulk = len(batch.counters) > BULK_COUNTERS
        reply = await self._call(self._push(keys, args), bulk)
        generation, applied, stale, dropped = reply
        self._dropped(dropped)
        return PushResult(str(generation), bool(applied), tuple(str(s) for s in stale))

    async def lease(
        self, name: str, holder: str, ttl_s: float, release: bool = False
    ) -> lease.Lease:
        """Takes or renews the lease on ``name`` for ``holder`` (`gateway.state.lease`)."""
        args: list[str | int] = [name, holder, int(ttl_s * 1000), int(release)]
        held, token, who = await self._call(self._lease(self._keys("lease"), args), False)
        return lease.Lease(bool(held), int(token), str(who))

    async def pull(self, since: Cursor = START) -> Pulled:
        keys = self._keys("gen", "seq", "chg", "exp", "sig", "cnt", "sexp", "dec", "hb", "hbexp")
        args: list[str | int] = [_new_generation(), since.generation, since.seq, _SIGNAL_TTL_MS]
        reply = await self._call(self._pull(keys, args), bulk=since.seq == 0)
        generation, seq, full, names, values, flat_signals, flat_decisions, flat_beats, dropped = (
            reply
        )
        self._dropped(dropped)
        signals = {
            s.replica_id: s for s in self._decoded("signal", ReplicaSignal.decode, flat_signals)
        }
        counters = {}
        for name, value in zip(names, values, strict=True):
            total = _counter(value)
            if total is None:
                self.rejects.drop("redis", "counter", str(name), f"not an int64: {value[:40]!r}")
            else:
                counters[str(name)] = total
        decisions = {d.key: d for d in self._decoded("decision", Decision.decode, flat_decisions)}
        cursor = Cursor(str(generation), int(seq))
        beats = {}
        for field, beat in self._named("heartbeat", Heartbeat.decode, flat_beats):
            if beat.instance == field:
                beats[field] = beat
            else:
                # written beside the scripts: a heartbeat comes from the instance it names
                self.rejects.drop("redis", "heartbeat", field, "names another instance")
        return Pulled(cursor, bool(full), signals, counters, decisions, beats)

    def _decoded(self, kind: str, decode: Callable[[str], T], flat: list[str]) -> Iterator[T]:
        """Each value of a flat field/value list that decodes within its bounds; the others
        are dropped (counted, logged once per field)."""
        for _, value in self._named(kind, decode, flat):
            yield value

    def _named(
        self, kind: str, decode: Callable[[str], T], flat: list[str]
    ) -> Iterator[tuple[str, T]]:
        """`_decoded`'s values with the field each was stored under."""
        for i in range(0, len(flat), 2):
            try:
                yield str(flat[i]), decode(flat[i + 1])
            except (ValueError, TypeError) as exc:
                self.rejects.drop("redis", kind, flat[i], str(exc))

    def _dropped(self, dropped: list[str]) -> None:
        """What a script's guards dropped (`redis_guards`): ``kind:name`` each."""
        for entry in dropped:
            kind, _, name = str(entry).partition(":")
            self.rejects.drop("redis", kind, name, _GUARDED.get(kind, "dropped by the script"))

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.name,
            "url": self.url,
            "mode": self.target.mode,
            "namespace": self.namespace,
            "sentinel_auth": self._sentinel_auth.describe() if self._sentinel_auth else None,
            "healthy": self._healthy,
            "last_error": self.last_error,
        }

    async def close(self) -> None:
        await redis_target.close(self._redis)

    def _keys(self, *names: str) -> list[str]:
        return [self._tag + name for name in names]

    async def _call(self, call: Any, bulk: bool = False) -> Any:
        timeout = self._bulk_timeout if bulk else self._op_timeout
        try:
            async with asyncio.timeout(timeout):
                reply = await call
        except (RedisError, OSError, TimeoutError) as exc:
            self._healthy = False
            error = redis_target.redis_error_text(exc)
            # a client's message may quote it
            self.last_error = scrub(error, self._secrets)
            raise StoreUnavailable(f"redis {self.url}: {self.last_error}") from exc
        self._healthy = True
        return reply


_GUARDED = {
    "key": "a key of the wrong type, deleted",
    "seq": "not a change sequence; set back to the change log's",
    "oversized": "over its size; not read",
    "counter": "not an integer counter; replaced by the delta",
}
_INT64 = re.compile(r"-?[0-9]{1,19}")


def _counter(value: str) -> int | None:
    """A counter total read back, or None when it is not an integer within int64."""
    if not isinstance(value, str) or _INT64.fullmatch(value) is None:
        return None
    total = int(value)
    return total if -(2**63) <= total <= MAX_INT64 else None


def _new_generation() -> str:
    """A fresh token for each call: whichever call finds Redis empty makes it the generation."""
    return secrets.token_hex(8)
