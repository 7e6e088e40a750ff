"""Whether each pool's servers take binary tensors, learned from their server metadata.

The binary tensor data extension is Triton's, not core V2: a server that takes it lists
``binary_tensor_data`` in ``GET /v2``'s ``extensions``, and one that does not may answer a
binary body with a 422 or a 500 (MLServer does), which would charge a healthy replica for the
gateway's choice of encoding. So a pool whose config leaves ``binary_tensors`` unset is sent
JSON (every V2 server takes it) until its replicas have said, and binary only when every
replica that answered lists the extension (one that answers without server metadata lists
nothing). A replica that cannot be asked yet (no connection, a 5xx) is asked again
(``retry_s``), and members that join later (DNS discovery) are asked when they appear; a
reload builds a new gateway, which learns afresh. The config's ``true``/``false`` overrides it
(a server that takes binary without listing it: KServe 0.21).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson

from gateway.clock import Clock
from gateway.errors import UpstreamError
from gateway.periodic import BackgroundTask
from gateway.upstream.registry import Pool, Registry
from gateway.upstream.replica import Replica
from gateway.upstream.transport.base import Transport

log = logging.getLogger(__name__)

BINARY_EXTENSION = "binary_tensor_data"
ASK_TIMEOUT_S = 2.0
# while a replica has not answered
RETRY_S = 2.0
# for members that join later
WATCH_S = 30.0


def lists_binary(body: bytes) -> bool | None:
    """Whether a ``GET /v2`` body lists the binary extension; None: not server metadata."""
    try:
        doc: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    extensions = doc.get("extensions") if isinstance(doc, dict) else None
    if not isinstance(extensions, list):
        return None
    return BINARY_EXTENSION in extensions


class BinaryLearner(BackgroundTask):
    """Asks every replica of every pool that learns its encoding for its server metadata."""

    def __init__(
        self,
        registry: Registry,
        transport: Transport,
        clock: Clock,
        retry_s: float = RETRY_S,
        watch_s: float = WATCH_S,
    ) -> None:
        super().__init__("binary-learner")
        self._registry, self._transport, self._clock = registry, transport, clock
        self._retry_s, self._watch_s = retry_s, watch_s
        # (replica id, URL) -> lists it
        self.heard: dict[tuple[str, str], bool] = {}

    async def _run(self) -> None:
        while True:
            waiting = await self.learn()
            await self._clock.sleep(self._retry_s if waiting else self._watch_s)

    async def learn(self) -> bool:
        """One round over the pools; True while some replica has not answered."""
        pools = [p for p in self._registry.pools.values() if p.dialect.configured is None]
        members = {_key(r) for p in pools for r in p.replicas}
        # departed: forgotten
        self.heard = {k: v for k, v in self.heard.items() if k in members}
        asked = [r for p in pools for r in p.replicas if _key(r) not in self.heard]
        answers = await asyncio.gather(*(self._ask(r) for r in asked))
        for replica, answer in zip(asked, answers, strict=True):
            if answer is not None:
                self.heard[_key(replica)] = answer
        waiting = False
        for pool in pools:
            said = [self.heard[_key(r)] for r in pool.replicas if _key(r) in self.heard]
            waiting = waiting or len(said) < len(pool.replicas)
            if said:
                self._decide(pool, all(said))
        return waiting

    def _decide(self, pool: Pool, binary: bool) -> None:
        if pool.dialect.learn_binary(binary):
            how = "binary tensors" if binary else "JSON (a server lacks the binary extension)"
            log.info("pool %s is sent %s, as its servers' metadata says", pool.name, how)

    async def _ask(self, replica: Replica) -> bool | None:
        try:
            response = await self._transport.request(
                replica.endpoint, "GET", "/v2", timeout=ASK_TIMEOUT_S
            )
        except UpstreamError:
            return None
        if response.status >= 500:
            # not now: ask again
            return None
        listed = lists_binary(response.body) if response.status == 200 else None
        # no server metadata: nothing is listed
        return bool(listed)


def _key(replica: Replica) -> tuple[str, str]:
    return replica.id, replica.url
